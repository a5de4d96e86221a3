//! Agent events: a registration (with reconciliation of what the agent runs against what
//! schedd believes), a job's start, a part's end, a node's word on its health, and nodes
//! silent past their timeout. (Heartbeats change memory only: `heartbeat`.)

use super::commands::AgentCommand;
use super::gpu_health::{self, GpuReport};
use super::history::JobEventKind;
use super::lifecycle::{self, PartEnd, SilentOutcome};
use super::{Effects, Records};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Gpu, Job, JobId, JobState, Node};

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

/// What ends the drain reason of a drain a node set itself (see [`Records::node_health`]).
pub const NODE_DRAIN_MARK: &str = " (noded)";

/// How a node's own word on whether it can take jobs (`unhealthy`: why not) changes its
/// drain (`drain_reason`, `drained_by_node`): the new pair and the audit action, or `None`
/// when nothing changes. A node drains itself when it is not drained, changes the reason of
/// its own drain, and resumes only from its own drain: an administrator's drain (or
/// schedd's) stays as it is.
pub fn health_drain(
    drain_reason: Option<&str>,
    drained_by_node: bool,
    unhealthy: Option<&str>,
) -> Option<(Option<String>, bool, &'static str)> {
    match (unhealthy, drain_reason) {
        (Some(why), None) => Some((Some(format!("{why}{NODE_DRAIN_MARK}")), true, "drain")),
        (Some(why), Some(current)) if drained_by_node => {
            let reason = format!("{why}{NODE_DRAIN_MARK}");
            (reason != current).then_some((Some(reason), true, "drain"))
        }
        (None, Some(_)) if drained_by_node => Some((None, false, "resume")),
        _ => None,
    }
}

/// Limits the lifecycle decisions need.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_requeues: u32,
    pub max_launch_attempts: u32,
}

/// Jobs an event changes, copied from the records on first touch and written once at the
/// end, in id order.
pub(super) struct Working<'a> {
    records: &'a Records,
    jobs: BTreeMap<JobId, Job>,
}

impl<'a> Working<'a> {
    pub(super) fn new(records: &'a Records) -> Self {
        Working {
            records,
            jobs: BTreeMap::new(),
        }
    }

    /// The records as they were before this event.
    pub(super) fn records(&self) -> &'a Records {
        self.records
    }

    /// The job as this event has left it so far; `None` if it is not active (or has ended
    /// in this event).
    pub(super) fn job(&mut self, id: JobId) -> Option<&mut Job> {
        if !self.jobs.contains_key(&id) {
            let job = Job::clone(self.records.jobs.get(&id)?);
            self.jobs.insert(id, job);
        }
        self.jobs.get_mut(&id).filter(|j| !j.state.is_terminal())
    }

    /// Drops the working copy of a job this event left as it was, so its record is not
    /// rewritten.
    pub(super) fn forget_if_unchanged(&mut self, id: JobId) {
        if self.records.jobs.get(&id).map(|j| &**j) == self.jobs.get(&id) {
            self.jobs.remove(&id);
        }
    }

    pub(super) fn finish(self, fx: &mut Effects) {
        for job in self.jobs.into_values() {
            fx.put_job(job);
        }
    }
}

/// The nodes of an allocation that pass `keep`, in allocation (rank) order.
fn nodes_where(job: &Job, keep: impl Fn(&str) -> bool) -> Vec<String> {
    job.alloc
        .iter()
        .filter(|a| keep(&a.node))
        .map(|a| a.node.clone())
        .collect()
}

/// Applies one part's end to the working copy of its job.
fn apply_part_end(
    work: &mut Working<'_>,
    fx: &mut Effects,
    node: &str,
    end: &PartEnd,
    limits: Limits,
    now: Millis,
) {
    let id = JobId(end.job_id);
    let Some(job) = work.job(id) else {
        return;
    };
    let out = if end.node_fault && !end.error.is_empty() {
        let (requeues, attempts) = (limits.max_requeues, limits.max_launch_attempts);
        lifecycle::launch_fault(job, node, end, requeues, attempts, now)
    } else {
        lifecycle::part_ended(job, node, end, limits.max_requeues, now)
    };
    if out.ignored {
        work.forget_if_unchanged(id);
        return;
    }
    if let Some(at) = out.run_ended_at {
        fx.run_ends.push(super::usage::RunEnd {
            job: id,
            at,
            checkpoint_saved: end.checkpoint_saved,
        });
    }
    for (at, kind, detail) in out.events {
        fx.event(id, at, kind, detail);
    }
    fx.stop_parts(id, &out.stop_parts, out.stop_grace, "part failed");
    fx.wake = true;
}

/// What an agent reports about a job while its session runs.
#[derive(Debug, Clone)]
pub enum AgentReport {
    /// The job's part on this node started (its shepherd's pid, the start time).
    Started { job_id: u64, pid: u32, time: Millis },
    /// The job's part on this node ended.
    Finished(PartEnd),
}

/// Limits no start report needs.
const NO_LIMITS: Limits = Limits {
    max_requeues: 0,
    max_launch_attempts: 0,
};

/// Its agent confirmed that the job's part on `node` started.
fn apply_start(
    work: &mut Working<'_>,
    fx: &mut Effects,
    node: &str,
    job_id: u64,
    pid: u32,
    time: Millis,
) {
    let id = JobId(job_id);
    let Some(job) = work.job(id) else {
        return;
    };
    if job.launched || !job.alloc.iter().any(|a| a.node == node) {
        work.forget_if_unchanged(id);
        return;
    }
    job.launched = true;
    job.launch_attempts = 0;
    fx.event(
        id,
        time,
        JobEventKind::Started,
        format!("on {node}, pid {pid}"),
    );
}

impl Records {
    /// A node's agent says whether it can take jobs (`unhealthy`: why not; in every
    /// heartbeat and at registration): a node that cannot (its spool cannot be written, a
    /// launch failed for a reason of its own) is drained with that reason, marked as its own
    /// (`spool full: No space left on device (noded)`), and resumed once it can again; see
    /// [`health_drain`]. Each change is audited (user `noded`, the node as its host); a
    /// resume wakes the scheduler.
    pub fn node_health(&self, name: &str, unhealthy: Option<&str>, now: Millis) -> Effects {
        let mut fx = Effects::default();
        let Some(node) = self.nodes.get(name) else {
            return fx;
        };
        let Some((reason, by_node, action)) = health_drain(
            node.drain_reason.as_deref(),
            node.drained_by_node,
            unhealthy,
        ) else {
            return fx;
        };
        let detail = match (&reason, &node.drain_reason) {
            (Some(r), _) => format!("node {name}: {r}"),
            (None, Some(old)) => format!("node {name} (was: {old})"),
            (None, None) => format!("node {name}"),
        };
        fx.audit(node_audit(name, action, detail, now));
        let mut node = node.clone();
        node.drain_reason = reason;
        node.drained_by_node = by_node;
        fx.wake = action == "resume";
        fx.put_node(node);
        fx
    }

    /// Its agent confirmed that the job's part on `node` started.
    pub fn job_started(&self, node: &str, job_id: u64, pid: u32, time: Millis) -> Effects {
        let report = AgentReport::Started { job_id, pid, time };
        self.agent_reports(&[(node.to_string(), report)], NO_LIMITS, time)
    }

    /// An agent reports that a part ended (see [`lifecycle::part_ended`]); the report is
    /// acknowledged once durable. A leftover process being killed (see `Node::killing`) that
    /// is now gone frees its node.
    pub fn job_finished(&self, node: &str, end: &PartEnd, limits: Limits, now: Millis) -> Effects {
        let report = AgentReport::Finished(end.clone());
        self.agent_reports(&[(node.to_string(), report)], limits, now)
    }

    /// Agents' reports, in the order they arrived, as one event: one store batch for them
    /// all. Each sees what the ones before it did (a start and an end of the same job may
    /// come together). Every end is acknowledged, after the flush that covers it.
    pub fn agent_reports(
        &self,
        reports: &[(String, AgentReport)],
        limits: Limits,
        now: Millis,
    ) -> Effects {
        let mut fx = Effects::default();
        let mut work = Working::new(self);
        let mut nodes: BTreeMap<&str, Node> = BTreeMap::new();
        for (node, report) in reports {
            match report {
                AgentReport::Started { job_id, pid, time } => {
                    apply_start(&mut work, &mut fx, node, *job_id, *pid, *time)
                }
                AgentReport::Finished(end) => {
                    if let Some(n) = self.leftover_gone(&mut nodes, node, end) {
                        let at = if end.end_time_ms > 0 {
                            end.end_time_ms
                        } else {
                            now
                        };
                        let detail = format!("processes left on {n} are gone: {}", end.describe());
                        fx.event(JobId(end.job_id), at, JobEventKind::LeftoverGone, detail);
                    }
                    apply_part_end(&mut work, &mut fx, node, end, limits, now);
                    fx.command(node, AgentCommand::Ack { job_id: end.job_id });
                    fx.wake = true;
                }
            }
        }
        work.finish(&mut fx);
        for node in nodes.into_values() {
            fx.put_node(node);
        }
        fx
    }

    /// Takes the ended job off the node's leftovers being killed, in the event's working
    /// copy of the node; returns the node's name when it was one.
    fn leftover_gone<'r>(
        &self,
        nodes: &mut BTreeMap<&'r str, Node>,
        node: &'r str,
        end: &PartEnd,
    ) -> Option<&'r str> {
        if !nodes.contains_key(node) {
            let n = self.nodes.get(node)?;
            if !n.killing.contains(&end.job_id) {
                return None;
            }
            nodes.insert(node, n.clone());
        }
        let n = nodes.get_mut(node)?;
        n.killing.remove(&end.job_id).then_some(node)
    }

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

    /// Jobs holding resources on `silent` nodes (agents not heard from for the node timeout),
    /// decided by [`lifecycle::nodes_silent`]: CANCELLED if they were being cancelled;
    /// requeued once the nodes' fences have surely stopped them (waiting meanwhile, which is
    /// written once, not at every tick), when every silent node of the job fences and the job
    /// may be requeued; NODE_FAIL otherwise. Parts on live nodes are stopped: at once for a
    /// job that ended, with the job's grace for one requeued once they end. A node's contact
    /// is its `last_seen`, but not before `since` (when schedd started). (If an agent comes
    /// back still running a job that ended, registration has it killed.)
    pub fn fail_silent(
        &self,
        silent: &BTreeSet<String>,
        since: Millis,
        limits: Limits,
        now: Millis,
    ) -> Effects {
        let mut fx = Effects::default();
        // Asked before every pass, under the lock: no silent node, no walk over every job.
        if silent.is_empty() {
            return fx;
        }
        for job in self.jobs.values().filter(|j| j.state.holds_resources()) {
            let nodes: Vec<lifecycle::SilentNode> = nodes_where(job, |n| silent.contains(n))
                .into_iter()
                .map(|name| {
                    let node = self.nodes.get(&name);
                    lifecycle::SilentNode {
                        fence_after_secs: node.map_or(0, |n| n.fence_after_secs),
                        contact: node.map_or(since, |n| n.last_seen.max(since)),
                        name,
                    }
                })
                .collect();
            if nodes.is_empty() {
                continue;
            }
            let mut job = Job::clone(job);
            let (outcome, events) =
                lifecycle::nodes_silent(&mut job, &nodes, limits.max_requeues, now);
            for (at, kind, detail) in events {
                fx.event(job.id, at, kind, detail);
            }
            match outcome {
                SilentOutcome::Unchanged => continue,
                // It keeps its resources: nothing for the scheduler.
                SilentOutcome::Waiting => {}
                SilentOutcome::Requeued => fx.wake = true,
                SilentOutcome::PartsFenced { stop, grace } => {
                    fx.stop_parts(job.id, &stop, grace, "node fenced");
                    fx.wake = true;
                }
                SilentOutcome::Ended { live } => {
                    fx.stop_parts(job.id, &live, 0, "node failed");
                    fx.wake = true;
                }
            }
            fx.put_job(job);
        }
        fx
    }
}

/// An audit entry of a node's own doing (its drain or resume, a GPU it found failing).
pub(super) fn node_audit(name: &str, action: &str, detail: String, now: Millis) -> AuditRecord {
    AuditRecord {
        time: now,
        user: "noded".into(),
        uid: 0,
        action: action.into(),
        job_id: None,
        detail,
        host: Some(name.to_string()),
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
