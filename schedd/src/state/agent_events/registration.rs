//! An agent's registration: its node's record made anew from its inventory and its word on
//! its health, the ends it reports applied, and what it runs reconciled against what schedd
//! believes.

use super::{apply_part_end, health_drain, node_audit, nodes_where, Limits, Working};
use crate::state::commands::AgentCommand;
use crate::state::gpu_health::{self, GpuReport};
use crate::state::history::JobEventKind;
use crate::state::lifecycle::{self, PartEnd};
use crate::state::{Effects, Records};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Gpu, JobId, JobState, Node};

/// An agent's registration, as the state machine sees it.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    pub name: String,
    pub address: String,
    pub cpus: u32,
    pub mem_mib: u64,
    pub gpus: Vec<Gpu>,
    pub features: Vec<String>,
    /// Jobs the agent still supervises.
    pub running_jobs: Vec<u64>,
    /// Ends it has not had acknowledged.
    pub finished: Vec<PartEnd>,
    /// A login agent: it relays its host's clients and runs nothing (not a node).
    pub login: bool,
    /// Its `node.fence_after_secs`; 0: it never fences.
    pub fence_after_secs: u32,
    /// Why it cannot take jobs now (see [`Records::node_health`]); `None`: it can.
    pub unhealthy_reason: Option<String>,
    /// The GPUs its health monitor finds failing now (see [`GpuReport`]; a registration
    /// confirms no forget).
    pub gpu_faults: Vec<(u32, String)>,
}

impl Records {
    /// An agent (re)registered: its inventory replaces the node's (the drain reason stays),
    /// the ends it reports are applied, and the jobs schedd believes run there but the agent
    /// does not know are decided (see [`lifecycle::part_lost`]). Returns the effects and the
    /// running jobs the agent must kill at once: schedd no longer counts them as running, and
    /// the node takes no new job until they are reported gone.
    pub fn register(&self, reg: &Registration, limits: Limits, now: Millis) -> (Effects, Vec<u64>) {
        let name = reg.name.as_str();
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        let kill_jobs: Vec<u64> = reg
            .running_jobs
            .iter()
            .copied()
            .filter(|id| !self.jobs.get(&JobId(*id)).is_some_and(|j| j.runs_on(name)))
            .collect();
        let prev = self.nodes.get(name);
        // GPUs that changed under running jobs (one fell off the bus, a different card came
        // up after a reset): their allocations may name GPUs that are gone or not the ones
        // they ran on. Take the new inventory, but drain the node until someone has looked.
        let mut drain_reason = prev.and_then(|p| p.drain_reason.clone());
        let mut drained_by_node = prev.is_some_and(|p| p.drained_by_node);
        if let Some(p) = prev.filter(|p| *p.gpus != reg.gpus) {
            if self.jobs.values().any(|j| j.runs_on(name)) {
                let change = format!(
                    "GPU inventory changed while jobs ran: {}; check the node, then yctl resume",
                    describe_gpu_change(&p.gpus, &reg.gpus)
                );
                fx.audit(AuditRecord {
                    time: now,
                    user: "schedd".into(),
                    uid: 0,
                    action: "drain".into(),
                    job_id: None,
                    detail: format!("node {name}: {change}"),
                    host: None,
                });
                // An administrator's reason stays, with the change after it.
                drain_reason = Some(match drain_reason {
                    Some(old) if old.contains(&change) => old,
                    Some(old) => format!("{old}; {change}"),
                    None => change,
                });
                // schedd's drain: the node's resume must not end it.
                drained_by_node = false;
            }
        }
        if let Some((reason, by_node, action)) = health_drain(
            drain_reason.as_deref(),
            drained_by_node,
            reg.unhealthy_reason.as_deref(),
        ) {
            let detail = match &reason {
                Some(r) => format!("node {name}: {r}"),
                None => format!("node {name}"),
            };
            fx.audit(node_audit(name, action, detail, now));
            drain_reason = reason;
            drained_by_node = by_node;
        }
        let mut node = Node {
            name: name.to_string(),
            address: reg.address.clone(),
            cpus: reg.cpus,
            mem_mib: reg.mem_mib,
            // The same inventory keeps the same list, and the scheduler its cached topology.
            gpus: match prev {
                Some(p) if *p.gpus == reg.gpus => Arc::clone(&p.gpus),
                _ => Arc::new(reg.gpus.clone()),
            },
            features: reg.features.clone(),
            drain_reason,
            drained_by_node,
            connected: true,
            last_seen: now,
            // The first registration's time; an older store's 0 (not known) stays 0.
            registered_at: prev.map_or(now, |p| p.registered_at),
            killing: kill_jobs.iter().copied().collect(),
            fence_after_secs: reg.fence_after_secs,
            // Only an administrator returns a GPU, whatever the node says now.
            gpus_out_of_service: prev
                .map_or_else(Default::default, |p| p.gpus_out_of_service.clone()),
            gpus_forgetting: prev.map_or_else(Default::default, |p| p.gpus_forgetting.clone()),
        };
        let report = GpuReport {
            faults: reg.gpu_faults.clone(),
            forgotten: Vec::new(),
        };
        let newly_failed = gpu_health::apply_report(&mut node, &report, now, &mut fx);
        // Resumes it may not have heard of (it was away, or lost the message): asked again,
        // after the Registered answer.
        for index in &node.gpus_forgetting {
            fx.command(name, AgentCommand::ResumeGpu { index: *index });
        }
        let mut work = Working::new(self);
        // Reports of jobs that ended while we were apart.
        for end in &reg.finished {
            apply_part_end(&mut work, &mut fx, name, end, limits, now);
            fx.command(name, AgentCommand::Ack { job_id: end.job_id });
        }
        // Our jobs on this node that the agent no longer knows.
        let reported: BTreeSet<u64> = reg
            .running_jobs
            .iter()
            .chain(reg.finished.iter().map(|f| &f.job_id))
            .copied()
            .collect();
        let here: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.runs_on(name))
            .map(|j| j.id)
            .collect();
        for id in here {
            let Some(job) = work.job(id) else {
                continue;
            };
            if !job.runs_on(name) {
                continue;
            }
            if reported.contains(&id.0) {
                // Re-send a stop that may have been lost while the agent was away (stops are
                // idempotent on the agent).
                if let Some(stop) = &job.stop {
                    let grace = stop.grace_secs;
                    fx.command(name, AgentCommand::stop(id.0, grace, "resent"));
                }
                if lifecycle::fence_wait_nodes(job).contains(&name) {
                    // It waited for this node's fence, and the node is back before it: the
                    // job runs on (another node still silent is decided again at the next
                    // tick).
                    job.reason = lifecycle::reason_while_running(job);
                    let detail = format!("node {name} is back and still runs the job");
                    fx.event(id, now, JobEventKind::NodeBack, detail);
                }
                work.forget_if_unchanged(id);
                continue;
            }
            // The job's other parts (of a multi-node run) cannot go on without this one.
            let others = nodes_where(job, |n| n != name);
            let (_, (at, kind, detail)) =
                lifecycle::part_lost(job, name, limits.max_launch_attempts, now);
            let why = match job.state {
                JobState::Cancelled => "cancel",
                JobState::Failed => "launch failed",
                _ => "part lost",
            };
            fx.event(id, at, kind, detail);
            fx.stop_parts(id, &others, 0, why);
        }
        // Jobs it still runs on GPUs that failed (while schedd was away, or reported now).
        gpu_health::stop_jobs_on_failed_gpus(&mut work, &mut fx, &node, &newly_failed, limits, now);
        work.finish(&mut fx);
        fx.put_node(node);
        (fx, kill_jobs)
    }
}

/// What changed between two GPU inventories of a node: `8 x A100 -> 7 x A100 (GPU 7 gone)`,
/// `8 x A100 -> 8 x A100 (GPU 3 changed)`.
fn describe_gpu_change(old: &[Gpu], new: &[Gpu]) -> String {
    fn summary(gpus: &[Gpu]) -> String {
        if gpus.is_empty() {
            return "no GPUs".into();
        }
        let mut models: BTreeMap<&str, usize> = BTreeMap::new();
        for g in gpus {
            *models.entry(g.model.as_str()).or_default() += 1;
        }
        let counts: Vec<String> = models.iter().map(|(m, n)| format!("{n} x {m}")).collect();
        counts.join(", ")
    }
    fn listed(what: &str, indices: &[u32]) -> Option<String> {
        let list: Vec<String> = indices.iter().map(u32::to_string).collect();
        match list.len() {
            0 => None,
            1 => Some(format!("GPU {} {what}", list[0])),
            _ => Some(format!("GPUs {} {what}", list.join(","))),
        }
    }
    fn by_index(gpus: &[Gpu]) -> BTreeMap<u32, Vec<&Gpu>> {
        let mut map: BTreeMap<u32, Vec<&Gpu>> = BTreeMap::new();
        for g in gpus {
            map.entry(g.index).or_default().push(g);
        }
        map
    }
    let (before, after) = (by_index(old), by_index(new));
    let gone: Vec<u32> = before
        .keys()
        .filter(|i| !after.contains_key(i))
        .copied()
        .collect();
    let added: Vec<u32> = after
        .keys()
        .filter(|i| !before.contains_key(i))
        .copied()
        .collect();
    let changed: Vec<u32> = before
        .iter()
        .filter(|(i, g)| after.get(i).is_some_and(|h| h != *g))
        .map(|(i, _)| *i)
        .collect();
    let details: Vec<String> = [
        listed("gone", &gone),
        listed("new", &added),
        listed("changed", &changed),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut s = format!("{} -> {}", summary(old), summary(new));
    if details.is_empty() {
        s.push_str(" (listed differently)");
    } else {
        s.push_str(&format!(" ({})", details.join("; ")));
    }
    s
}
