//! Per-node reasons a pending job does not run, for `yctl show job`.

use std::collections::BTreeSet;

use ysched_common::time::Millis;
use ysched_common::{Job, JobId};

use super::fit::{fit_on_node, Claim, NodeDemand};
use super::order::{pending_in_order, queue_key};
use super::pass::Pass;
use super::{Policy, Snapshot, Topologies};

/// For every known node, in name order: why `job` does not fit there right now, or "fits".
///
/// "Right now" means as the scheduler sees it when the job's turn comes: the pass is replayed
/// for every pending job ahead of it in the queue, so room taken or reserved by those shows up
/// here too. For a gang, each line speaks of the job's per-node share.
pub fn explain(
    job: &Job,
    snap: &Snapshot<'_>,
    policy: &Policy<'_>,
    now: Millis,
) -> Vec<(String, String)> {
    let mut pass = Pass::new(snap, policy, now, &mut Topologies::default());
    let key = queue_key(job, policy.fair_share);
    for ahead in pending_in_order(snap.jobs, policy.fair_share)
        .into_iter()
        .take_while(|j| queue_key(j, policy.fair_share) < key)
    {
        pass.step(ahead);
    }
    let demand = NodeDemand::of(&job.spec);
    snap.nodes
        .values()
        .map(|node| {
            let why = if !node.connected {
                "agent not connected".to_string()
            } else if let Some(drain_reason) = &node.drain_reason {
                format!("drained: {drain_reason}")
            } else if !node.killing.is_empty() {
                let ids: Vec<String> = node.killing.iter().map(|id| id.to_string()).collect();
                format!("killing leftover processes of ended jobs {}", ids.join(","))
            } else if let Some(view) = pass.views().get(node.name.as_str()) {
                match fit_on_node(view, &demand) {
                    Ok(_) => "fits".to_string(),
                    Err(misfit) => {
                        // Name the jobs ahead in the queue that took room in this pass: the
                        // node can look free in `yq` yet be promised to them.
                        let ahead: BTreeSet<JobId> = view
                            .holds()
                            .iter()
                            .filter(|h| h.claim != Claim::Running && h.job != job.id)
                            .map(|h| h.job)
                            .collect();
                        if misfit.is_transient() && !ahead.is_empty() {
                            let ids: Vec<String> = ahead.iter().map(JobId::to_string).collect();
                            format!("{misfit} (taken by jobs ahead: {})", ids.join(","))
                        } else {
                            misfit.to_string()
                        }
                    }
                }
            } else {
                // Unreachable: the pass has a view of every schedulable node.
                "not schedulable".to_string()
            };
            (node.name.clone(), why)
        })
        .collect()
}
