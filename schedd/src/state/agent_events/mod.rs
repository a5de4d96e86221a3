//! Agent events: a registration (`registration`: with reconciliation of what the agent runs
//! against what schedd believes), a job's start, a part's end, a node's word on its health,
//! and nodes silent past their timeout. (Heartbeats change memory only: `heartbeat`.)

use super::commands::AgentCommand;
use super::history::JobEventKind;
use super::lifecycle::{self, PartEnd, SilentOutcome};
use super::{Effects, Records};
use std::collections::{BTreeMap, BTreeSet};
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Job, JobId, Node};

mod registration;

pub use registration::Registration;

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
    /// The job's part on this node started (the pid of its first process, the start time).
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
