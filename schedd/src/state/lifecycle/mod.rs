//! How a job's run ends, as pure decisions on domain records.
//!
//! An agent's report of a part's end (complete, failed, out of memory, timed out,
//! cancelled, preempted and requeued or not, requeued on request, a multi-node part failing,
//! a part its node's fence stopped), a part the agent no longer knows when it registers
//! (cancelled, failed launch, NODE_FAIL, or back to the queue), a job on nodes gone silent
//! (waiting for their fence, requeued once it has surely stopped the job, or NODE_FAIL), and
//! a failed GPU under a running job. No clock, no store, no wire types: the caller writes the
//! returned events and the changed record, and sends the stops.
//!
//! - here: a part's end as bookkeeping (the part leaves the allocation, the other parts of a
//!   broken multi-node run are stopped, the run's allocation is kept on record) and a launch
//!   that failed for a fault of the node's;
//! - `decide`: the final-state decision table, from how the run ended to the job's fate;
//! - `fence`: nodes gone silent and parts their node's fence stopped;
//! - `lost`: a part its agent no longer knows when it registers;
//! - `gpu`: a failed GPU under a running job.

use super::history::JobEventKind;
use ysched_common::time::{rfc3339, Millis};
use ysched_common::{Job, JobState, PartFailure, StopReason, StopRequest};

mod decide;
mod fence;
mod gpu;
mod lost;

#[cfg(test)]
mod decide_tests;

use decide::{decide, DecisiveEnd, Fate, RunEnd};
pub use fence::{
    fence_done, fence_wait_nodes, nodes_silent, reason_while_running, SilentNode, SilentOutcome,
    FENCE_SLACK_MS,
};
use fence::{fence_failure, fence_requeue_by};
pub use gpu::gpu_failed;
pub use lost::{part_lost, LostOutcome};

/// The scheduler may run the job again after its run was cut short by something other than
/// the job itself (a preemption, a node's fence): not submitted with `--no-requeue`, and
/// requeued fewer than `max_requeues` times.
pub fn may_requeue(job: &Job, max_requeues: u32) -> bool {
    !job.spec.no_requeue && job.restart_count < max_requeues
}

/// Why the scheduler may not run the job again after a run cut short by something other than
/// the job itself (see [`may_requeue`]); `None`: it may.
fn requeue_refusal(job: &Job, max_requeues: u32) -> Option<String> {
    if job.spec.no_requeue {
        return Some("the job was submitted with --no-requeue".into());
    }
    if job.restart_count >= max_requeues {
        return Some(format!(
            "it was requeued {} times already (scheduler.max_requeues = {max_requeues})",
            job.restart_count
        ));
    }
    None
}

/// An agent's report that one part of a job's run ended (the domain form of
/// `JobFinished`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartEnd {
    pub job_id: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// When it ended; 0: unknown (the caller's `now` is used).
    pub end_time_ms: Millis,
    pub timed_out: bool,
    /// When SIGTERM was sent; 0: never.
    pub term_time_ms: Millis,
    /// SIGKILL after the grace ran out.
    pub killed: bool,
    /// The launch failed (no such user, bad working directory, ...).
    pub error: String,
    pub checkpoint_saved: bool,
    /// Of the run that ended.
    pub restart_count: u32,
    /// The kernel killed a process of the part for going over its memory limit.
    pub out_of_memory: bool,
    /// Its node's fence stopped it: the node had been out of contact with schedd for its
    /// `fence_after_secs`.
    pub fenced: bool,
    /// With `error`: the launch failed for a reason of the node's (its spool, cgroups,
    /// forking), not the job's, so another node may run it (see [`launch_fault`]).
    pub node_fault: bool,
}

impl PartEnd {
    fn failed(&self) -> bool {
        !self.error.is_empty() || self.timed_out || self.out_of_memory || self.exit_code != Some(0)
    }

    /// `exit code 3, time limit`, `killed by signal 9, SIGKILL after grace`,
    /// `launch failed: ...`.
    pub fn describe(&self) -> String {
        if !self.error.is_empty() {
            return format!("launch failed: {}", self.error);
        }
        let mut s = match (self.exit_code, self.signal) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "ended".to_string(),
        };
        if self.out_of_memory {
            s.push_str(", out of memory");
        }
        if self.timed_out {
            s.push_str(", time limit");
        }
        if self.killed {
            s.push_str(", SIGKILL after grace");
        }
        if self.fenced {
            s.push_str(", stopped by the node's fence");
        }
        s
    }
}

/// An entry for the job's history: (time, kind, detail).
pub type HistoryEvent = (Millis, JobEventKind, String);

/// What a part's end did to its job.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EndOutcome {
    /// The report is about another run or another node: nothing changed.
    pub ignored: bool,
    /// History entries to append, in order.
    pub events: Vec<HistoryEvent>,
    /// The job's other parts to stop (a multi-node part failed), with this grace.
    pub stop_parts: Vec<String>,
    pub stop_grace: u32,
    /// The job reached a final state: it leaves the active set.
    pub finished: bool,
    /// The run is over (its last part ended: the job is final or back in the queue): when.
    pub run_ended_at: Option<Millis>,
}

/// Applies the report that the part of `job` on `node` ended. `max_requeues` bounds requeues
/// after a preemption or a node's fence; `now` stands in for an unknown end time.
///
/// A part its node's fence stopped (`end.fenced`: the node lost schedd for its
/// `fence_after_secs`), while nothing else was stopping the job and no part had failed,
/// requeues the job if it may be (see [`may_requeue`]), else ends it NODE_FAIL; the other
/// parts of a multi-node run are stopped first, with the job's grace.
///
/// This is the bookkeeping (the part leaves the allocation; a broken multi-node run has its
/// other parts stopped; when the last part ends, the run's whole allocation is kept on record
/// and the history told); what becomes of the job once its run is over is the decision table
/// of `decide::decide`.
pub fn part_ended(
    job: &mut Job,
    node: &str,
    end: &PartEnd,
    max_requeues: u32,
    now: Millis,
) -> EndOutcome {
    let mut out = EndOutcome::default();
    // A report about an earlier run (resent after a reconnect) must not end a later run that
    // was placed on the same node.
    if !job.runs_on(node) || end.restart_count != job.restart_count {
        out.ignored = true;
        return out;
    }
    let at = if end.end_time_ms > 0 {
        end.end_time_ms
    } else {
        now
    };
    let how = end.describe();
    out.events
        .push((at, JobEventKind::Exited, format!("on {node}: {how}")));
    // The node's fence stopped the part (the node had lost schedd) and nothing else was
    // stopping the run, nor had a part failed: the fence decides. A cancel stays a cancel, a
    // preemption a preemption, a requeue a requeue, and a failure decides as before.
    let fence_decides = end.fenced && job.stop.is_none() && job.parts.first_failure.is_none();
    if job.alloc.len() > 1 {
        // One part of a multi-node run ended: its GPUs are free now, the others still run.
        let Some(pos) = job.alloc.iter().position(|a| a.node == node) else {
            out.ignored = true;
            return out;
        };
        let part = job.alloc.remove(pos);
        job.parts.ended.push(part);
        if fence_decides {
            // The run is broken: stop the rest, then requeue it (or end it NODE_FAIL).
            out.stop_parts = job.alloc.iter().map(|a| a.node.clone()).collect();
            out.stop_grace = job.grace_secs;
            if may_requeue(job, max_requeues) {
                job.stop = Some(Box::new(StopRequest {
                    reason: StopReason::Requeue {
                        by: fence_requeue_by(node),
                    },
                    at: now,
                    grace_secs: job.grace_secs,
                }));
                job.reason = format!(
                    "requeueing: node {node} lost contact with schedd and its fence stopped \
                     the job there; stopping the other parts"
                );
                out.events.push((
                    at,
                    JobEventKind::Stopping,
                    format!(
                        "other parts, after node {node} lost contact with schedd and its fence \
                         stopped its part; requeued once they end"
                    ),
                ));
            } else {
                job.parts.first_failure = Some(fence_failure(node, end));
                job.reason =
                    format!("part on {node} stopped by its node's fence; stopping the others");
                out.events.push((
                    at,
                    JobEventKind::Stopping,
                    format!(
                        "other parts, after node {node} lost contact with schedd and its fence \
                         stopped its part"
                    ),
                ));
            }
            return out;
        }
        if end.failed() && job.parts.first_failure.is_none() {
            job.parts.first_failure = Some(PartFailure {
                node: node.to_string(),
                exit_code: end.exit_code,
                signal: end.signal,
                timed_out: end.timed_out,
                error: end.error.clone(),
                description: format!("part on {node}: {how}"),
                out_of_memory: end.out_of_memory,
                fenced: false,
            });
            if job.stop.is_none() {
                // A gang is useless once a part is gone: stop the rest.
                out.stop_parts = job.alloc.iter().map(|a| a.node.clone()).collect();
                out.stop_grace = job.grace_secs;
                job.reason = format!("part on {node} failed; stopping the others");
                out.events.push((
                    at,
                    JobEventKind::Stopping,
                    format!("other parts, after {node} failed"),
                ));
            }
        }
        return out;
    }
    // The last (or only) part ended: the run is over. Keep the whole allocation on record.
    out.run_ended_at = Some(at);
    if !job.parts.ended.is_empty() {
        let mut all = std::mem::take(&mut job.parts.ended);
        all.append(&mut job.alloc);
        let order = &job.parts.nodelist;
        all.sort_by_key(|a| {
            order
                .iter()
                .position(|n| *n == a.node)
                .unwrap_or(usize::MAX)
        });
        job.alloc = all;
    }
    // The first failing part decides how a multi-node run ends.
    let decisive = match job.parts.first_failure.take() {
        Some(f) => DecisiveEnd {
            exit_code: f.exit_code,
            signal: f.signal,
            timed_out: f.timed_out,
            error: f.error,
            how: f.description,
            oom_on: f.out_of_memory.then_some(f.node),
            fenced: f.fenced,
        },
        None => DecisiveEnd {
            exit_code: end.exit_code,
            signal: end.signal,
            timed_out: end.timed_out,
            error: end.error.clone(),
            how,
            oom_on: end.out_of_memory.then(|| node.to_string()),
            fenced: false,
        },
    };
    job.exit_code = decisive.exit_code;
    job.signal = decisive.signal;
    // A preempted run's end, for the record, whatever becomes of the job.
    if let Some(StopRequest {
        reason: StopReason::Preempt { by },
        at: asked,
        ..
    }) = job.stop.as_deref()
    {
        let term = if end.term_time_ms > 0 {
            end.term_time_ms
        } else {
            *asked
        };
        out.events.push((
            at,
            JobEventKind::Preemption,
            format!(
                "preemptor={by} victim={} sigterm={} exit={} ended={} checkpoint_saved={}",
                job.id,
                rfc3339(term),
                rfc3339(at),
                if end.killed {
                    "killed after grace"
                } else {
                    "exited within grace"
                },
                end.checkpoint_saved
            ),
        ));
    }
    let decision = decide(&RunEnd {
        node,
        fence_decides,
        stop: job.stop.as_ref().map(|s| &s.reason),
        decisive,
        checkpoint_saved: end.checkpoint_saved,
        requeue_refusal: requeue_refusal(job, max_requeues),
        mem_mib: job.spec.mem_mib,
    });
    if decision.keeps_checkpoint && end.checkpoint_saved {
        job.last_checkpoint = Some(at);
    }
    match decision.fate {
        Fate::Requeue { why } => {
            requeue(job, at);
            job.restart_count += 1;
            out.events.push((
                at,
                JobEventKind::Requeued,
                format!("restart {}{why}", job.restart_count),
            ));
        }
        Fate::Final { state, reason } => {
            job.state = state;
            job.reason = reason;
            job.end_time = Some(at);
            out.finished = true;
        }
    }
    out
}

/// Applies the report that the launch of `job`'s part on `node` failed for a reason of the
/// node's (`end.node_fault`, with `end.error`): the job never ran there, and another node may
/// run it, so it is not the job's failure. It goes back to the queue as a new run (its
/// restart count one higher, so that a late copy of this report can never end the next
/// run); the node, which drains itself meanwhile, is not chosen again. Such failures count towards
/// `scheduler.max_launch_attempts`, as launches never confirmed do, and a confirmed start
/// resets the count: a job whose launch fails that many times in a row, on as many nodes,
/// ends FAILED, so that a job that breaks every node it is sent to (a script too large for
/// any spool) does not drain the whole cluster. A multi-node run has its other parts
/// stopped first (with the job's grace), and is requeued (or fails) once they have ended.
///
/// A stop under way (a cancel, a preemption, a requeue) or a part that failed first decide
/// as [`part_ended`] does, except that a cancelled job ends CANCELLED, not FAILED.
pub fn launch_fault(
    job: &mut Job,
    node: &str,
    end: &PartEnd,
    max_requeues: u32,
    max_launch_attempts: u32,
    now: Millis,
) -> EndOutcome {
    let ours = job.runs_on(node) && end.restart_count == job.restart_count;
    if !ours || job.stop.is_some() || job.parts.first_failure.is_some() {
        let mut decided = end.clone();
        if matches!(
            job.stop.as_deref(),
            Some(StopRequest {
                reason: StopReason::Cancel { .. },
                ..
            })
        ) {
            decided.error.clear();
        }
        return part_ended(job, node, &decided, max_requeues, now);
    }
    let mut out = EndOutcome::default();
    let at = if end.end_time_ms > 0 {
        end.end_time_ms
    } else {
        now
    };
    job.launch_attempts += 1;
    let attempts = job.launch_attempts;
    let exhausted = attempts >= max_launch_attempts;
    let why = format!(
        "launch on {node} failed for a fault of the node's: {}",
        end.error
    );
    out.events.push((
        at,
        JobEventKind::Exited,
        format!(
            "on {node}: launch failed (a fault of the node's): {}",
            end.error
        ),
    ));
    let failed_reason = || {
        format!(
            "{why} ({attempts} of {max_launch_attempts} launch attempts in a row, \
             scheduler.max_launch_attempts)"
        )
    };
    if job.alloc.len() > 1 {
        let Some(pos) = job.alloc.iter().position(|a| a.node == node) else {
            out.ignored = true;
            return out;
        };
        let part = job.alloc.remove(pos);
        job.parts.ended.push(part);
        out.stop_parts = job.alloc.iter().map(|a| a.node.clone()).collect();
        out.stop_grace = job.grace_secs;
        if exhausted {
            job.parts.first_failure = Some(PartFailure {
                node: node.to_string(),
                exit_code: None,
                signal: None,
                timed_out: false,
                error: end.error.clone(),
                description: failed_reason(),
                out_of_memory: false,
                fenced: false,
            });
            job.reason = format!("part on {node} could not start; stopping the others");
        } else {
            job.stop = Some(Box::new(StopRequest {
                reason: StopReason::Requeue {
                    by: format!("schedd (launch on {node} failed for a fault of the node's)"),
                },
                at: now,
                grace_secs: job.grace_secs,
            }));
            job.reason = format!("requeueing: {why}; stopping the other parts");
        }
        out.events.push((
            at,
            JobEventKind::Stopping,
            format!("other parts, after the launch on {node} failed for a fault of the node's"),
        ));
        return out;
    }
    out.run_ended_at = Some(at);
    if exhausted {
        // `parts.ended` goes back into the allocation on record, as for any end.
        let mut all = std::mem::take(&mut job.parts.ended);
        all.append(&mut job.alloc);
        job.alloc = all;
        job.state = JobState::Failed;
        job.reason = failed_reason();
        job.end_time = Some(at);
        out.finished = true;
        return out;
    }
    requeue(job, at);
    job.restart_count += 1;
    out.events.push((
        at,
        JobEventKind::Requeued,
        format!(
            "restart {}: {why} (attempt {attempts} of {max_launch_attempts}); placed again \
             elsewhere",
            job.restart_count
        ),
    ));
    out
}

/// Back to the queue for a new run, from `at`: no allocation, no start, no stop request; its
/// wait begins again (`queued_at`).
fn requeue(job: &mut Job, at: Millis) {
    if let Some(start) = job.start_time {
        job.run_ms_before = job
            .run_ms_before
            .saturating_add(at.saturating_sub(start).max(0));
    }
    job.queued_at = Some(at);
    job.state = JobState::Pending;
    job.alloc.clear();
    job.parts = Default::default();
    job.start_time = None;
    job.launched = false;
    job.stop = None;
    job.reason = String::new();
}

fn end(job: &mut Job, state: JobState, reason: String, now: Millis) {
    job.state = state;
    job.reason = reason;
    job.end_time = Some(now);
}
