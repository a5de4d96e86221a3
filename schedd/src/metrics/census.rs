//! The census a scrape sets the gauges from: job counts, GPUs per node, agent sessions.
//!
//! The job counts are those kept event by event ([`ActiveJobs`]); the GPUs of every node
//! (total, held, draining, out of service) and the agents' sessions are counted in one pass
//! under the lock.

use super::active::{ActiveJobs, ACTIVE};
use std::collections::BTreeMap;
use ysched_common::{JobState, Node};

/// GPUs of one model on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuCount {
    pub node: String,
    pub model: String,
    pub total: u32,
    pub allocated: u32,
    pub draining: u32,
    pub out_of_service: u32,
}

/// What the gauges show, counted under the lock and set at scrape without it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Active jobs by tier and state.
    pub jobs: BTreeMap<(String, JobState), u64>,
    pub gpus: Vec<GpuCount>,
    /// Each node and whether its agent has a live session.
    pub nodes_up: Vec<(String, bool)>,
    pub compute_sessions: u64,
    pub login_sessions: u64,
}

impl Census {
    /// The job counts of `active`, and one pass over the nodes (with the GPUs `active` says
    /// are held). `sessions`: whether each live agent session is a login agent's.
    pub fn count(
        active: &ActiveJobs,
        nodes: &BTreeMap<String, Node>,
        sessions: impl IntoIterator<Item = bool>,
    ) -> Census {
        let mut census = Census::default();
        for (tier, counts) in &active.jobs {
            for (state, n) in ACTIVE.into_iter().zip(counts) {
                if *n > 0 {
                    census.jobs.insert((tier.clone(), state), *n);
                }
            }
        }
        for node in nodes.values() {
            let held = active.held.get(node.name.as_str());
            let draining = node.drain_reason.is_some();
            let mut models: Vec<GpuCount> = Vec::new();
            for gpu in node.gpus.iter() {
                let i = match models.iter().position(|m| m.model == gpu.model) {
                    Some(i) => i,
                    None => {
                        models.push(GpuCount {
                            node: node.name.clone(),
                            model: gpu.model.clone(),
                            total: 0,
                            allocated: 0,
                            draining: 0,
                            out_of_service: 0,
                        });
                        models.len() - 1
                    }
                };
                let m = &mut models[i];
                m.total += 1;
                m.allocated += u32::from(held.is_some_and(|h| h.contains_key(&gpu.index)));
                m.draining += u32::from(draining);
                m.out_of_service += u32::from(node.gpu_out_of_service(gpu.index));
            }
            census.gpus.extend(models);
            census.nodes_up.push((node.name.clone(), node.connected));
        }
        for login in sessions {
            if login {
                census.login_sessions += 1;
            } else {
                census.compute_sessions += 1;
            }
        }
        census
    }
}
