//! The final-state decision table: how a run's end decides what becomes of its job.
//!
//! From how the run's last part ended (the first failing part's end, what was stopping the
//! run, whether the scheduler may run it again) to the job's fate: back to the queue, or
//! COMPLETED, FAILED, OUT_OF_MEMORY, TIMEOUT, CANCELLED, PREEMPTED or NODE_FAIL, with its
//! reason. A pure function of those facts.

use super::fence::fence_node_fail_reason;
use ysched_common::{JobState, StopReason};

/// The end that decides how a run ends: its first failing part's, else its last part's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct DecisiveEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Why the launch failed; empty: it did not.
    pub error: String,
    /// How the part ended, as the history says it (`exit code 3, time limit`, or the first
    /// failure's `part on n1: ...`).
    pub how: String,
    /// The node where the kernel killed a process of the part for its memory.
    pub oom_on: Option<String>,
    /// A part of a multi-node run that its node's fence stopped when the job could not be
    /// requeued.
    pub fenced: bool,
}

/// The facts of a run's end that decide its job's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RunEnd<'a> {
    /// The node of the run's last part to end.
    pub node: &'a str,
    /// That part's node's fence stopped it while nothing else was stopping the run and no part
    /// had failed: the fence decides.
    pub fence_decides: bool,
    /// What was stopping the run (the job's stop request), if anything.
    pub stop: Option<&'a StopReason>,
    pub decisive: DecisiveEnd,
    /// The last part's report said a checkpoint was saved.
    pub checkpoint_saved: bool,
    /// Why the scheduler may not run the job again after a run cut short by something other
    /// than the job itself (see `may_requeue`); `None`: it may.
    pub requeue_refusal: Option<String>,
    /// The job's `--mem` (MiB); 0: none asked for.
    pub mem_mib: u64,
}

/// What becomes of a job whose run is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate {
    /// Back to the queue for another run; its `Requeued` history entry reads `restart N`
    /// followed by `why`.
    Requeue { why: String },
    /// A final state, with the job's reason.
    Final { state: JobState, reason: String },
}

/// A run's end decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decision {
    pub fate: Fate,
    /// A checkpoint the last part saved counts as the job's latest: the run was stopped by
    /// something other than the job and its owner's cancel (a fence, a requeue, a failed GPU,
    /// a preemption), so it was given its grace to save one.
    pub keeps_checkpoint: bool,
}

/// The job's fate at the end of its run. The first row that applies decides:
///
/// | what ended the run                 | may be requeued           | may not             |
/// |------------------------------------|---------------------------|---------------------|
/// | its node's fence (nothing else)    | requeue                   | NODE_FAIL           |
/// | a requeue asked for                | requeue (not bounded)     | requeue             |
/// | a failed GPU                       | requeue                   | NODE_FAIL           |
/// | a preemption                       | requeue                   | PREEMPTED           |
///
/// Otherwise the job's own end decides ([`own_end`]).
pub(super) fn decide(end: &RunEnd<'_>) -> Decision {
    let stopped = |fate| Decision {
        fate,
        keeps_checkpoint: true,
    };
    let requeue = |why: String| Fate::Requeue { why };
    let node = end.node;
    if end.fence_decides {
        return stopped(match &end.requeue_refusal {
            None => requeue(format!(
                ": node {node} lost contact with schedd and its fence stopped the job"
            )),
            Some(_) => Fate::Final {
                state: JobState::NodeFail,
                reason: fence_node_fail_reason(node),
            },
        });
    }
    match end.stop {
        Some(StopReason::Requeue { by }) => {
            // Asked for (`yctl requeue`): back to the queue whatever the run's end, like a
            // preempted job but not bounded by `max_requeues` (the owner asked, not the
            // scheduler).
            stopped(requeue(format!(
                " as requested by {by} (checkpoint_saved={})",
                end.checkpoint_saved
            )))
        }
        Some(gpu @ StopReason::GpuFailed { .. }) => {
            // Stopped because a GPU of its run failed: the failure decides, whatever the
            // run's end (a job that exits in its grace has most likely saved its work).
            let failure = gpu.gpu_failure().unwrap_or_default();
            stopped(match &end.requeue_refusal {
                None => requeue(format!(": {failure}")),
                Some(why) => Fate::Final {
                    state: JobState::NodeFail,
                    reason: format!("{failure} (not requeued: {why})"),
                },
            })
        }
        Some(StopReason::Preempt { by }) => stopped(match &end.requeue_refusal {
            None => requeue(format!(" after preemption by {by}")),
            Some(_) => Fate::Final {
                state: JobState::Preempted,
                reason: format!("preempted by {by}"),
            },
        }),
        Some(StopReason::Cancel { by }) => Decision {
            fate: own_end(&end.decisive, Some(by), end.mem_mib),
            keeps_checkpoint: false,
        },
        None | Some(StopReason::NodeDrain) => Decision {
            fate: own_end(&end.decisive, None, end.mem_mib),
            keeps_checkpoint: false,
        },
    }
}

/// The final state of a run that nothing but (maybe) a cancel stopped, from its decisive end.
/// The first row that applies decides: a failed launch of a cancelled job (CANCELLED: a
/// cancel is final, whatever became of the launch), a failed launch (FAILED), the kernel's
/// OOM killer unless cancelled (OUT_OF_MEMORY), the time limit (TIMEOUT), a cancel
/// (CANCELLED), a part its node's fence stopped (NODE_FAIL), exit code 0 (COMPLETED),
/// anything else (FAILED).
fn own_end(end: &DecisiveEnd, cancelled_by: Option<&str>, mem_mib: u64) -> Fate {
    let (state, reason) = if let (false, Some(by)) = (end.error.is_empty(), cancelled_by) {
        (
            JobState::Cancelled,
            format!("cancelled by {by} (its launch failed: {})", end.error),
        )
    } else if !end.error.is_empty() {
        (JobState::Failed, format!("launch failed: {}", end.error))
    } else if let (Some(oom_node), None) = (&end.oom_on, cancelled_by) {
        // The kernel's OOM killer, in the job's own cgroup: say so, not a bare exit status.
        let reason = match mem_mib {
            0 => format!("out of memory: the job ran out of memory on {oom_node}"),
            mib => format!(
                "out of memory: the job exceeded its memory limit (--mem {}) on {oom_node}",
                mem_flag(mib)
            ),
        };
        (JobState::OutOfMemory, reason)
    } else if end.timed_out {
        (JobState::Timeout, "time limit reached".into())
    } else if let Some(by) = cancelled_by {
        (JobState::Cancelled, format!("cancelled by {by}"))
    } else if end.fenced {
        // A part's node fenced it and the job may not be requeued (see `part_ended`).
        (JobState::NodeFail, end.how.clone())
    } else if end.exit_code == Some(0) {
        (JobState::Completed, String::new())
    } else {
        (JobState::Failed, end.how.clone())
    };
    Fate::Final { state, reason }
}

/// A memory size as `--mem` takes it: `100M`, `4G`, `1T`.
fn mem_flag(mib: u64) -> String {
    match mib {
        m if m >= 1 << 20 && m % (1 << 20) == 0 => format!("{}T", m >> 20),
        m if m >= 1 << 10 && m % (1 << 10) == 0 => format!("{}G", m >> 10),
        m => format!("{m}M"),
    }
}
