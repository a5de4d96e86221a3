//! How a job's run ends, as pure decisions on domain records: an agent's report of a part's
//! end (complete, failed, out of memory, timed out, cancelled, preempted and requeued or not,
//! requeued on request, a multi-node part failing, a part its node's fence stopped), a part
//! the agent no longer knows when it registers (cancelled, failed launch, NODE_FAIL, or back
//! to the queue), and a job on nodes gone silent (waiting for their fence, requeued once it
//! has surely stopped the job, or NODE_FAIL). No clock, no store, no wire types: the caller
//! writes the returned events and the changed record, and sends the stops.

use super::history::JobEventKind;
use ysched_common::time::{rfc3339, Millis};
use ysched_common::{Job, JobState, PartFailure, StopReason, StopRequest};

/// How long schedd waits, past the latest moment a silent node's fence can fire plus the
/// job's grace, before it counts the job's processes there as gone and runs the job again:
/// the shepherd looks at its lease once a second (so the fence may fire up to a second late),
/// and after SIGKILL the processes take a moment to die and the cgroup to empty (longer on a
/// loaded node, or with a process stuck in the kernel for a moment). Five seconds cover that
/// with room; erring long only delays the requeue, erring short could run a job twice.
pub const FENCE_SLACK_MS: Millis = 5_000;

/// The scheduler may run the job again after its run was cut short by something other than
/// the job itself (a preemption, a node's fence): not submitted with `--no-requeue`, and
/// requeued fewer than `max_requeues` times.
pub fn may_requeue(job: &Job, max_requeues: u32) -> bool {
    !job.spec.no_requeue && job.restart_count < max_requeues
}

/// Why the job may not be requeued after its node's fence stopped it (see [`may_requeue`]);
/// `None`: it may. A requeue asked for (`yctl requeue`) is not bounded by `max_requeues`, as
/// when it ends normally.
fn fence_requeue_refusal(job: &Job, max_requeues: u32) -> Option<String> {
    if job.spec.no_requeue {
        return Some("the job was submitted with --no-requeue".into());
    }
    if let Some(f) = &job.parts.first_failure {
        return Some(format!("its run had failed already ({})", f.description));
    }
    let asked = matches!(
        &job.stop,
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
fn fence_requeue_by(nodes: &str) -> String {
    format!("schedd (node {nodes} fenced)")
}

/// How a job ends when `node`'s fence stopped it and it may not be requeued (NODE_FAIL).
fn fence_node_fail_reason(node: &str) -> String {
    format!("node {node} lost contact with schedd and its fence stopped the job")
}

/// A part failure recorded for a multi-node run's part that its node's fence stopped when the
/// job may not be requeued: the run then ends NODE_FAIL once its other parts are gone.
fn fence_failure(node: &str, end: &PartEnd) -> PartFailure {
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

fn is_fence_failure(f: &PartFailure) -> bool {
    f.fenced
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
                job.stop = Some(StopRequest {
                    reason: StopReason::Requeue {
                        by: fence_requeue_by(node),
                    },
                    at: now,
                    grace_secs: job.grace_secs,
                });
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
    let fence_failed = job
        .parts
        .first_failure
        .as_ref()
        .is_some_and(is_fence_failure);
    let (exit_code, signal, timed_out, error, how, oom_on) = match job.parts.first_failure.take() {
        Some(f) => (
            f.exit_code,
            f.signal,
            f.timed_out,
            f.error,
            f.description,
            f.out_of_memory.then_some(f.node),
        ),
        None => (
            end.exit_code,
            end.signal,
            end.timed_out,
            end.error.clone(),
            how,
            end.out_of_memory.then(|| node.to_string()),
        ),
    };
    job.exit_code = exit_code;
    job.signal = signal;
    if fence_decides {
        if end.checkpoint_saved {
            job.last_checkpoint = Some(at);
        }
        if may_requeue(job, max_requeues) {
            requeue(job, at);
            job.restart_count += 1;
            out.events.push((
                at,
                JobEventKind::Requeued,
                format!(
                    "restart {}: node {node} lost contact with schedd and its fence stopped \
                     the job",
                    job.restart_count
                ),
            ));
            return out;
        }
        job.state = JobState::NodeFail;
        job.reason = fence_node_fail_reason(node);
        job.end_time = Some(at);
        out.finished = true;
        return out;
    }
    let preempted_by = match &job.stop {
        Some(StopRequest {
            reason: StopReason::Preempt { by },
            ..
        }) => Some(*by),
        _ => None,
    };
    if let Some(StopRequest {
        reason: StopReason::Requeue { by },
        ..
    }) = &job.stop
    {
        // Asked for (`yctl requeue`): back to the queue whatever the run's end, like a
        // preempted job but not bounded by `max_requeues` (the owner asked, not the scheduler).
        let by = by.clone();
        if end.checkpoint_saved {
            job.last_checkpoint = Some(at);
        }
        requeue(job, at);
        job.restart_count += 1;
        out.events.push((
            at,
            JobEventKind::Requeued,
            format!(
                "restart {} as requested by {by} (checkpoint_saved={})",
                job.restart_count, end.checkpoint_saved
            ),
        ));
        return out;
    }
    if let Some(failure) = job.stop.as_ref().and_then(|s| s.reason.gpu_failure()) {
        // Stopped because a GPU of its run failed: the failure decides, whatever the run's
        // end (a job that exits in its grace has most likely saved its work).
        if end.checkpoint_saved {
            job.last_checkpoint = Some(at);
        }
        match gpu_requeue_refusal(job, max_requeues) {
            None => {
                requeue(job, at);
                job.restart_count += 1;
                out.events.push((
                    at,
                    JobEventKind::Requeued,
                    format!("restart {}: {failure}", job.restart_count),
                ));
                return out;
            }
            Some(why) => {
                job.state = JobState::NodeFail;
                job.reason = format!("{failure} (not requeued: {why})");
                job.end_time = Some(at);
                out.finished = true;
                return out;
            }
        }
    }
    let cancelled_by = match &job.stop {
        Some(StopRequest {
            reason: StopReason::Cancel { by },
            ..
        }) => Some(by.clone()),
        _ => None,
    };
    if let Some(by) = preempted_by {
        let term = if end.term_time_ms > 0 {
            end.term_time_ms
        } else {
            job.stop.as_ref().map(|s| s.at).unwrap_or(at)
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
        if end.checkpoint_saved {
            job.last_checkpoint = Some(at);
        }
        if may_requeue(job, max_requeues) {
            requeue(job, at);
            job.restart_count += 1;
            out.events.push((
                at,
                JobEventKind::Requeued,
                format!("restart {} after preemption by {by}", job.restart_count),
            ));
            return out;
        }
        job.state = JobState::Preempted;
        job.reason = format!("preempted by {by}");
    } else if !error.is_empty() {
        job.state = JobState::Failed;
        job.reason = format!("launch failed: {error}");
    } else if let (Some(oom_node), None) = (&oom_on, &cancelled_by) {
        // The kernel's OOM killer, in the job's own cgroup: say so, not a bare exit status.
        job.state = JobState::OutOfMemory;
        job.reason = match job.spec.mem_mib {
            0 => format!("out of memory: the job ran out of memory on {oom_node}"),
            mib => format!(
                "out of memory: the job exceeded its memory limit (--mem {}) on {oom_node}",
                mem_flag(mib)
            ),
        };
    } else if timed_out {
        job.state = JobState::Timeout;
        job.reason = "time limit reached".into();
    } else if let Some(by) = cancelled_by {
        job.state = JobState::Cancelled;
        job.reason = format!("cancelled by {by}");
    } else if fence_failed {
        // A part's node fenced it and the job may not be requeued (see above).
        job.state = JobState::NodeFail;
        job.reason = how;
    } else if exit_code == Some(0) {
        job.state = JobState::Completed;
        job.reason = String::new();
    } else {
        job.state = JobState::Failed;
        job.reason = how;
    }
    job.end_time = Some(at);
    out.finished = true;
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
            &job.stop,
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
            job.stop = Some(StopRequest {
                reason: StopReason::Requeue {
                    by: format!("schedd (launch on {node} failed for a fault of the node's)"),
                },
                at: now,
                grace_secs: job.grace_secs,
            });
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

/// A memory size as `--mem` takes it: `100M`, `4G`, `1T`.
fn mem_flag(mib: u64) -> String {
    match mib {
        m if m >= 1 << 20 && m % (1 << 20) == 0 => format!("{}T", m >> 20),
        m if m >= 1 << 10 && m % (1 << 10) == 0 => format!("{}G", m >> 10),
        m => format!("{m}M"),
    }
}

/// Back to the queue for a new run, from `at`: no allocation, no start, no stop request; its
/// wait begins again (`queued_at`).
fn requeue(job: &mut Job, at: Millis) {
    job.queued_at = Some(at);
    job.state = JobState::Pending;
    job.alloc.clear();
    job.parts = Default::default();
    job.start_time = None;
    job.launched = false;
    job.stop = None;
    job.reason = String::new();
}

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
    }) = &job.stop
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

fn end(job: &mut Job, state: JobState, reason: String, now: Millis) {
    job.state = state;
    job.reason = reason;
    job.end_time = Some(now);
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

/// Why a job whose run a GPU failure stops may not be requeued (see [`may_requeue`]);
/// `None`: it may.
fn gpu_requeue_refusal(job: &Job, max_requeues: u32) -> Option<String> {
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

/// GPU `gpu` of `node`, which `job` holds, failed (`fault`, as the node's health monitor said):
/// the run cannot go on, so every part of it is stopped (SIGTERM, SIGKILL after the job's
/// grace), and once the last part has ended the job is requeued, as after a preemption or a
/// node's fence, when it may be ([`may_requeue`]: not `--no-requeue`, fewer than
/// `max_requeues` requeues), else it ends NODE_FAIL (see [`part_ended`]).
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
    job.stop = Some(StopRequest {
        reason,
        at: now,
        grace_secs: grace,
    });
    job.reason = format!("stopping: {failure}");
    let then = match gpu_requeue_refusal(job, max_requeues) {
        None => "requeued once it has stopped".to_string(),
        Some(why) => format!("it ends NODE_FAIL once stopped (not requeued: {why})"),
    };
    let detail = format!("{failure}; SIGTERM, SIGKILL after {grace}s; {then}");
    let nodes = job.alloc.iter().map(|a| a.node.clone()).collect();
    Some(((now, JobEventKind::GpuFailed, detail), nodes, grace))
}

/// Decides the fate of `job`, which holds resources on the `silent` nodes (its nodes not
/// heard from for the node timeout), at `now`:
///
/// - being cancelled: CANCELLED, whatever became of the nodes;
/// - every silent node fences and the job may be requeued (see [`may_requeue`]; a requeue
///   asked for is not bounded by `max_requeues`): it keeps its resources until
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
    }) = &job.stop
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
        job.stop = Some(StopRequest {
            reason: StopReason::Requeue {
                by: fence_requeue_by(&list),
            },
            at: now,
            grace_secs: grace,
        });
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
