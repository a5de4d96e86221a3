//! A part its agent no longer knows when it registers: cancelled, failed, lost or requeued.

use super::{end, requeue, HistoryEvent};
use crate::state::history::JobEventKind;
use ysched_common::time::Millis;
use ysched_common::{Job, JobState, StopReason, StopRequest};

/// What became of a part the agent on `node` no longer knows when it registers.
#[derive(Debug, PartialEq, Eq)]
pub enum LostOutcome {
    /// Final (CANCELLED, FAILED or NODE_FAIL): leaves the active set; the job's other parts
    /// are stopped at once.
    Ended,
    /// Back in the queue for another try (its launch never reached the agent); the other
    /// parts are stopped at once.
    Requeued,
}

/// Decides the fate of `job`, which holds resources on `node`, when `node`'s agent registers
/// without it. Returns the outcome and one history entry.
pub fn part_lost(
    job: &mut Job,
    node: &str,
    max_launch_attempts: u32,
    now: Millis,
) -> (LostOutcome, HistoryEvent) {
    if let Some(StopRequest {
        reason: StopReason::Cancel { by },
        ..
    }) = job.stop.as_deref()
    {
        // A cancel is final whatever became of the launch: never requeue it.
        let detail = format!("by {by}; the agent on {node} no longer runs it");
        let reason = format!("cancelled by {by}");
        end(job, JobState::Cancelled, reason, now);
        return (LostOutcome::Ended, (now, JobEventKind::Cancelled, detail));
    }
    if !job.launched && job.launch_attempts + 1 >= max_launch_attempts {
        // A launch that never takes (the agent keeps dropping it) must not cycle from node to
        // node forever.
        job.launch_attempts += 1;
        let reason = format!(
            "launch on {node} was not confirmed by its agent ({} of {max_launch_attempts} \
             attempts, scheduler.max_launch_attempts)",
            job.launch_attempts
        );
        let detail = reason.clone();
        end(job, JobState::Failed, reason, now);
        return (
            LostOutcome::Ended,
            (now, JobEventKind::LaunchFailed, detail),
        );
    }
    if job.launched {
        end(
            job,
            JobState::NodeFail,
            format!("node {node} lost the job"),
            now,
        );
        let detail = format!("agent on {node} no longer runs it");
        return (LostOutcome::Ended, (now, JobEventKind::NodeFail, detail));
    }
    // The launch never reached the agent: the job never ran here; queue it again.
    job.launch_attempts += 1;
    requeue(job, now);
    let detail = format!(
        "launch on {node} was not confirmed (attempt {} of {max_launch_attempts})",
        job.launch_attempts
    );
    (LostOutcome::Requeued, (now, JobEventKind::Requeued, detail))
}
