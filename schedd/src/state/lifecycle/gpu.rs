//! A failed GPU under a running job: its run is stopped, then requeued or ended NODE_FAIL.

use super::{requeue_refusal, HistoryEvent};
use crate::state::history::JobEventKind;
use ysched_common::time::Millis;
use ysched_common::{Job, StopReason, StopRequest};

/// GPU `gpu` of `node`, which `job` holds, failed (`fault`, as the node's health monitor said):
/// the run cannot go on, so every part of it is stopped (SIGTERM, SIGKILL after the job's
/// grace), and once the last part has ended the job is requeued, as after a preemption or a
/// node's fence, when it may be ([`may_requeue`](super::may_requeue): not `--no-requeue`,
/// fewer than `max_requeues` requeues), else it ends NODE_FAIL (see
/// [`part_ended`](super::part_ended)).
///
/// A job already being stopped (a cancel, a preemption, a requeue, a failed part) stops as
/// it was going to: the outcome is `None` and the job is unchanged. Otherwise returns the
/// history entry and the nodes to stop, with the grace.
pub fn gpu_failed(
    job: &mut Job,
    node: &str,
    gpu: u32,
    fault: &str,
    max_requeues: u32,
    now: Millis,
) -> Option<(HistoryEvent, Vec<String>, u32)> {
    if job.stop.is_some() || job.parts.first_failure.is_some() {
        return None;
    }
    let reason = StopReason::GpuFailed {
        node: node.to_string(),
        gpu,
        fault: fault.to_string(),
    };
    let failure = reason.gpu_failure().unwrap_or_default();
    let grace = job.grace_secs;
    job.stop = Some(Box::new(StopRequest {
        reason,
        at: now,
        grace_secs: grace,
    }));
    job.reason = format!("stopping: {failure}");
    let then = match requeue_refusal(job, max_requeues) {
        None => "requeued once it has stopped".to_string(),
        Some(why) => format!("it ends NODE_FAIL once stopped (not requeued: {why})"),
    };
    let detail = format!("{failure}; SIGTERM, SIGKILL after {grace}s; {then}");
    let nodes = job.alloc.iter().map(|a| a.node.clone()).collect();
    Some(((now, JobEventKind::GpuFailed, detail), nodes, grace))
}
