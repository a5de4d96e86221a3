//! Jobs on nodes gone silent, and parts their node's fence stopped: requeue or NODE_FAIL.
//!
//! How long schedd waits for a silent node's fence (and the reason that says so), what the
//! fence's end does to a run (requeued, or NODE_FAIL), and the reason of a job whose silent
//! node came back.

use super::{end, requeue, HistoryEvent, PartEnd};
use crate::state::history::JobEventKind;
use ysched_common::time::{rfc3339, Millis};
use ysched_common::{Job, JobState, PartFailure, StopReason, StopRequest};

/// How long schedd waits, past the latest moment a silent node's fence can fire plus the
/// job's grace, before it counts the job's processes there as gone and runs the job again:
/// the node supervisor looks at its lease once a second (so the fence may fire up to a second late),
/// and after SIGKILL the processes take a moment to die and the cgroup to empty (longer on a
/// loaded node, or with a process stuck in the kernel for a moment). Five seconds cover that
/// with room; erring long only delays the requeue, erring short could run a job twice.
pub const FENCE_SLACK_MS: Millis = 5_000;

/// Why the job may not be requeued after its node's fence stopped it (see
/// [`may_requeue`](super::may_requeue)); `None`: it may. A requeue asked for (`yctl requeue`)
/// is not bounded by `max_requeues`, as when it ends normally.
fn fence_requeue_refusal(job: &Job, max_requeues: u32) -> Option<String> {
    if job.spec.no_requeue {
        return Some("the job was submitted with --no-requeue".into());
    }
    if let Some(f) = &job.parts.first_failure {
        return Some(format!("its run had failed already ({})", f.description));
    }
    let asked = matches!(
        job.stop.as_deref(),
        Some(StopRequest {
            reason: StopReason::Requeue { .. },
            ..
        })
    );
    if !asked && job.restart_count >= max_requeues {
        return Some(format!(
            "it was requeued {} times already (scheduler.max_requeues = {max_requeues})",
            job.restart_count
        ));
    }
    None
}

/// The `by` of the requeue a node's fence causes for the rest of a multi-node run.
pub(super) fn fence_requeue_by(nodes: &str) -> String {
    format!("schedd (node {nodes} fenced)")
}

/// How a job ends when `node`'s fence stopped it and it may not be requeued (NODE_FAIL).
pub(super) fn fence_node_fail_reason(node: &str) -> String {
    format!("node {node} lost contact with schedd and its fence stopped the job")
}

/// A part failure recorded for a multi-node run's part that its node's fence stopped when the
/// job may not be requeued: the run then ends NODE_FAIL once its other parts are gone.
pub(super) fn fence_failure(node: &str, end: &PartEnd) -> PartFailure {
    PartFailure {
        node: node.to_string(),
        exit_code: end.exit_code,
        signal: end.signal,
        timed_out: false,
        error: String::new(),
        description: fence_node_fail_reason(node),
        out_of_memory: false,
        fenced: true,
    }
}

/// A node of a job gone silent (not heard from for `scheduler.node_timeout_secs`), as the
/// fence decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SilentNode {
    pub name: String,
    /// Its `node.fence_after_secs`, as it registered; 0: it never fences.
    pub fence_after_secs: u32,
    /// When schedd last heard from it: its `last_seen`, but not before schedd started (what
    /// schedd received before it went down may be unknown to it).
    pub contact: Millis,
}

/// What [`nodes_silent`] did to a job holding resources on silent nodes.
#[derive(Debug, PartialEq, Eq)]
pub enum SilentOutcome {
    /// Nothing changed: it still waits for the fence, and its reason says so already.
    Unchanged,
    /// It waits for its silent nodes' fence to stop it (its reason says until when); it keeps
    /// their resources meanwhile.
    Waiting,
    /// The fence has stopped it: back in the queue.
    Requeued,
    /// The fence has stopped its parts on the silent nodes, which count as ended; its parts
    /// on `stop` (live nodes) are stopped with `grace`, and it is requeued once they end (or
    /// ends as the stop already under way says, when `stop` is empty).
    PartsFenced { stop: Vec<String>, grace: u32 },
    /// Final (CANCELLED or NODE_FAIL): its parts on the live nodes `live` are stopped at once.
    Ended { live: Vec<String> },
}

/// The latest time the fences of `silent` can have stopped `job`: each node fences no later
/// than `fence_after_secs` after its contact, then the job has its grace (or that of a stop
/// under way, if longer: the processes are gone by the later of both), plus
/// [`FENCE_SLACK_MS`].
pub fn fence_done(job: &Job, silent: &[SilentNode]) -> Millis {
    let fired = silent
        .iter()
        .map(|n| {
            n.contact
                .saturating_add(Millis::from(n.fence_after_secs).saturating_mul(1000))
        })
        .max()
        .unwrap_or(Millis::MIN);
    let grace = job
        .grace_secs
        .max(job.stop.as_ref().map_or(0, |s| s.grace_secs));
    fired
        .saturating_add(Millis::from(grace) * 1000)
        .saturating_add(FENCE_SLACK_MS)
}

/// The marker of [`fence_wait_reason`]: `node X not responding; requeued once ...`.
const FENCE_WAIT_MARK: &str = " not responding; requeued once ";

/// The reason of a job waiting for the fence of `nodes` to stop it, until `done`.
fn fence_wait_reason(nodes: &[&str], done: Millis) -> String {
    let whose = if nodes.len() == 1 {
        "its fence has"
    } else {
        "their fences have"
    };
    format!(
        "node {}{FENCE_WAIT_MARK}{whose} stopped the job (at {})",
        nodes.join(","),
        rfc3339(done)
    )
}

/// The nodes whose fence the job waits for, as its reason says (see [`nodes_silent`]); empty
/// when it waits for none.
pub fn fence_wait_nodes(job: &Job) -> Vec<&str> {
    job.reason
        .strip_prefix("node ")
        .and_then(|r| r.split_once(FENCE_WAIT_MARK))
        .map_or_else(Vec::new, |(nodes, _)| nodes.split(',').collect())
}

/// The reason of a job holding resources as its stop request says (the same texts as the
/// requests that set them): for a job that waited for a fence and whose node came back.
pub fn reason_while_running(job: &Job) -> String {
    match job.stop.as_ref().map(|s| &s.reason) {
        None | Some(StopReason::NodeDrain) => String::new(),
        Some(StopReason::Cancel { by }) => format!("cancelling (by {by})"),
        Some(StopReason::Preempt { by }) => format!("preempted by {by}"),
        Some(StopReason::Requeue { by }) => format!("requeueing (by {by})"),
        Some(gpu @ StopReason::GpuFailed { .. }) => {
            format!("stopping: {}", gpu.gpu_failure().unwrap_or_default())
        }
    }
}

/// Decides the fate of `job`, which holds resources on the `silent` nodes (its nodes not
/// heard from for the node timeout), at `now`:
///
/// - being cancelled: CANCELLED, whatever became of the nodes;
/// - every silent node fences and the job may be requeued (see
///   [`may_requeue`](super::may_requeue); a requeue asked for is not bounded by
///   `max_requeues`): it keeps its resources until
///   [`fence_done`], its reason saying so (written once: `Unchanged` afterwards); then the
///   run is over on the silent nodes: back in the queue (restart + 1) when it ran only there,
///   or its parts on live nodes are stopped with its grace and it is requeued when they end;
/// - otherwise NODE_FAIL: the job may still run on a node that does not fence, and running
///   it again elsewhere could run it twice.
///
/// A pure function of the job, the silent nodes, `max_requeues` and `now`.
pub fn nodes_silent(
    job: &mut Job,
    silent: &[SilentNode],
    max_requeues: u32,
    now: Millis,
) -> (SilentOutcome, Vec<HistoryEvent>) {
    let names: Vec<&str> = silent.iter().map(|n| n.name.as_str()).collect();
    let list = names.join(",");
    let live_nodes = |job: &Job| -> Vec<String> {
        job.alloc
            .iter()
            .filter(|a| !names.contains(&a.node.as_str()))
            .map(|a| a.node.clone())
            .collect()
    };
    if let Some(StopRequest {
        reason: StopReason::Cancel { by },
        ..
    }) = job.stop.as_deref()
    {
        // It was being cancelled: that is how it ends, whatever became of the node.
        let reason = format!("cancelled by {by} (node {list} not responding)");
        end(job, JobState::Cancelled, reason.clone(), now);
        let live = live_nodes(job);
        return (
            SilentOutcome::Ended { live },
            vec![(now, JobEventKind::NodeFail, reason)],
        );
    }
    let refusal = match silent.iter().find(|n| n.fence_after_secs == 0) {
        Some(n) => Some(format!(
            "node {} does not fence (node.fence_after_secs = 0), so the job may still run \
             there",
            n.name
        )),
        None => fence_requeue_refusal(job, max_requeues),
    };
    if let Some(why) = refusal {
        let reason = format!("node {list} not responding");
        let detail = format!("{reason}; not requeued: {why}");
        end(job, JobState::NodeFail, reason, now);
        let live = live_nodes(job);
        return (
            SilentOutcome::Ended { live },
            vec![(now, JobEventKind::NodeFail, detail)],
        );
    }
    let done = fence_done(job, silent);
    if now < done {
        let reason = fence_wait_reason(&names, done);
        if job.reason == reason {
            return (SilentOutcome::Unchanged, Vec::new());
        }
        job.reason = reason;
        let fences: Vec<String> = silent
            .iter()
            .map(|n| {
                format!(
                    "{} last heard from at {}, fences after {}s",
                    n.name,
                    rfc3339(n.contact),
                    n.fence_after_secs
                )
            })
            .collect();
        let detail = format!(
            "node {list} not responding ({}); the job is requeued at {}, once the fence and \
             its grace are over",
            fences.join("; "),
            rfc3339(done)
        );
        return (
            SilentOutcome::Waiting,
            vec![(now, JobEventKind::NodeSilent, detail)],
        );
    }
    // The fence has stopped the job on the silent nodes.
    let live = live_nodes(job);
    if live.is_empty() {
        requeue(job, now);
        job.restart_count += 1;
        let detail = format!(
            "restart {}: node {list} stopped responding and its fence stopped the job (by {})",
            job.restart_count,
            rfc3339(done)
        );
        return (
            SilentOutcome::Requeued,
            vec![(now, JobEventKind::Requeued, detail)],
        );
    }
    // A multi-node run with parts on live nodes: the silent ones count as ended.
    let (fenced, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut job.alloc)
        .into_iter()
        .partition(|a| names.contains(&a.node.as_str()));
    job.alloc = kept;
    job.parts.ended.extend(fenced);
    if job.stop.is_none() {
        let grace = job.grace_secs;
        job.stop = Some(Box::new(StopRequest {
            reason: StopReason::Requeue {
                by: fence_requeue_by(&list),
            },
            at: now,
            grace_secs: grace,
        }));
        job.reason = format!(
            "requeueing: node {list} stopped responding and its fence stopped the job there; \
             stopping the other parts"
        );
        let detail = format!(
            "parts on {}: node {list} stopped responding and its fence stopped the job there \
             (by {}); requeued once they end",
            live.join(","),
            rfc3339(done)
        );
        let outcome = SilentOutcome::PartsFenced { stop: live, grace };
        return (outcome, vec![(now, JobEventKind::Stopping, detail)]);
    }
    // Already being stopped (preempted, requeued): its other parts' ends decide, as before.
    job.reason = reason_while_running(job);
    let detail = format!(
        "part on {list}: the node stopped responding and its fence stopped the job there (by {})",
        rfc3339(done)
    );
    let outcome = SilentOutcome::PartsFenced {
        stop: Vec::new(),
        grace: 0,
    };
    (outcome, vec![(now, JobEventKind::Fenced, detail)])
}
