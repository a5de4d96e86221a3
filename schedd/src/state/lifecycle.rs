//! How a job's run ends, as pure decisions on domain records: an agent's report of a part's
//! end (complete, failed, out of memory, timed out, cancelled, preempted and requeued or not,
//! requeued on request, a multi-node part failing), and a part the agent no longer knows when
//! it registers (cancelled, failed launch, NODE_FAIL, or back to the queue). No clock, no
//! store, no wire types: the caller writes the returned events and the changed record, and
//! sends the stops.

use ysched_common::time::{rfc3339, Millis};
use ysched_common::{Job, JobState, PartFailure, StopReason, StopRequest};

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
        s
    }
}

/// An entry for the job's history: (time, kind, detail).
pub type HistoryEvent = (Millis, &'static str, String);

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
}

/// Applies the report that the part of `job` on `node` ended. `max_requeues` bounds requeues
/// after preemption; `now` stands in for an unknown end time.
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
    out.events.push((at, "exited", format!("on {node}: {how}")));
    if job.alloc.len() > 1 {
        // One part of a multi-node run ended: its GPUs are free now, the others still run.
        let Some(pos) = job.alloc.iter().position(|a| a.node == node) else {
            out.ignored = true;
            return out;
        };
        let part = job.alloc.remove(pos);
        job.parts.ended.push(part);
        if end.failed() && job.parts.first_failure.is_none() {
            job.parts.first_failure = Some(PartFailure {
                node: node.to_string(),
                exit_code: end.exit_code,
                signal: end.signal,
                timed_out: end.timed_out,
                error: end.error.clone(),
                description: format!("part on {node}: {how}"),
                out_of_memory: end.out_of_memory,
            });
            if job.stop.is_none() {
                // A gang is useless once a part is gone: stop the rest.
                out.stop_parts = job.alloc.iter().map(|a| a.node.clone()).collect();
                out.stop_grace = job.grace_secs;
                job.reason = format!("part on {node} failed; stopping the others");
                out.events
                    .push((at, "stopping", format!("other parts, after {node} failed")));
            }
        }
        return out;
    }
    // The last (or only) part ended: the run is over. Keep the whole allocation on record.
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
        requeue(job);
        job.restart_count += 1;
        out.events.push((
            at,
            "requeued",
            format!(
                "restart {} as requested by {by} (checkpoint_saved={})",
                job.restart_count, end.checkpoint_saved
            ),
        ));
        return out;
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
            "preemption",
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
        if !job.spec.no_requeue && job.restart_count < max_requeues {
            requeue(job);
            job.restart_count += 1;
            out.events.push((
                at,
                "requeued",
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

/// A memory size as `--mem` takes it: `100M`, `4G`, `1T`.
fn mem_flag(mib: u64) -> String {
    match mib {
        m if m >= 1 << 20 && m % (1 << 20) == 0 => format!("{}T", m >> 20),
        m if m >= 1 << 10 && m % (1 << 10) == 0 => format!("{}G", m >> 10),
        m => format!("{m}M"),
    }
}

/// Back to the queue for a new run: no allocation, no start, no stop request.
fn requeue(job: &mut Job) {
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
        return (LostOutcome::Ended, (now, "cancelled", detail));
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
        return (LostOutcome::Ended, (now, "launch_failed", detail));
    }
    if job.launched {
        end(
            job,
            JobState::NodeFail,
            format!("node {node} lost the job"),
            now,
        );
        let detail = format!("agent on {node} no longer runs it");
        return (LostOutcome::Ended, (now, "node_fail", detail));
    }
    // The launch never reached the agent: the job never ran here; queue it again.
    job.launch_attempts += 1;
    requeue(job);
    let detail = format!(
        "launch on {node} was not confirmed (attempt {} of {max_launch_attempts})",
        job.launch_attempts
    );
    (LostOutcome::Requeued, (now, "requeued", detail))
}

fn end(job: &mut Job, state: JobState, reason: String, now: Millis) {
    job.state = state;
    job.reason = reason;
    job.end_time = Some(now);
}
