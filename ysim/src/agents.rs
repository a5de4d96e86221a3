//! Simulated agents, modelled on the load-test fleet (`tests/src/fleet.rs`): no process, only
//! timers. A part starts when its `Launch` arrives (the agent reports `JobStarted` at once) and
//! ends when the job's work is done. A `Stop` is SIGTERM: a job whose checkpoint-write time
//! fits in the grace writes its checkpoint and exits then (`checkpoint_saved`), any other is
//! SIGKILLed at the end of the grace (no checkpoint). A run that reaches its time limit gets
//! SIGTERM and the same grace, and ends TIMEOUT.
//!
//! **Progress.** A job needs `duration` of running to complete. A run starts from the
//! progress saved by the run before it: all of it when that run saved a checkpoint on SIGTERM
//! (or completed), otherwise only up to its last periodic checkpoint (every
//! `checkpoint_interval` of running; none: from the start). The work between that checkpoint
//! and the SIGTERM is lost: it is done again. Periodic checkpoints take no time and are
//! reported to schedd as a heartbeat would (the job's newest checkpoint time, which the
//! victim cost reads), at the instant they are written.
//!
//! A job spanning nodes has one part per node; they start, stop and end together.

use crate::engine::part_end;
use crate::workload::SimJob;
use std::collections::BTreeMap;
use ysched_common::time::Millis;
use ysched_schedd::state::lifecycle::PartEnd;
use ysched_schedd::state::AgentCommand;

/// An agent's timer or report, at a virtual time.
#[derive(Debug, Clone)]
pub(crate) enum AgentEvent {
    /// The agent reports that the part started.
    Started { node: String, job: u64 },
    /// The job wrote a periodic checkpoint.
    Checkpoint { node: String, job: u64, token: u64 },
    /// The run reached its time limit.
    TimeLimit { node: String, job: u64, token: u64 },
    /// The part's last process is gone.
    Exit { node: String, job: u64, token: u64 },
}

/// What an agent tells schedd.
pub(crate) enum Delivery {
    Nothing,
    Started {
        node: String,
        job: u64,
    },
    /// A heartbeat carrying the job's newest checkpoint time (now).
    Checkpoint {
        node: String,
        job: u64,
    },
    /// A part ended. `lost`: when the run was stopped and this was its last part, the run's
    /// restart count and the GPU-milliseconds of work it threw away.
    Finished {
        node: String,
        end: PartEnd,
        lost: Option<(u32, i64)>,
    },
}

/// One part of a run on one node.
struct Part {
    restart: u32,
    /// Timers carry the token they were set with; a stop sets a new one, so the timers of
    /// the undisturbed run (its end, its next checkpoint, its time limit) no longer fire.
    token: u64,
    grace_secs: u32,
    stopping: bool,
    /// The report it will send when it exits.
    end: PartEnd,
}

/// A job's current run.
struct Run {
    restart: u32,
    start: Millis,
    /// Progress (ms of work) it started from.
    base: Millis,
    parts_left: u32,
    stop: Option<Stopped>,
}

/// How a stopped run ends.
#[derive(Clone, Copy)]
struct Stopped {
    term: Millis,
    exit_at: Millis,
    /// It wrote its checkpoint within the grace.
    saved: bool,
    /// Its work was done before it had to go (it exited by itself, completed).
    completed: bool,
    killed: bool,
    timed_out: bool,
}

#[derive(Default)]
pub(crate) struct Agents {
    parts: BTreeMap<(String, u64), Part>,
    runs: BTreeMap<u64, Run>,
    /// Progress each job can resume from.
    saved: BTreeMap<u64, Millis>,
    token: u64,
    scheduled: Vec<(Millis, AgentEvent)>,
}

impl Agents {
    /// Timers and reports set since the last call, to be queued.
    pub(crate) fn take_scheduled(&mut self) -> Vec<(Millis, AgentEvent)> {
        std::mem::take(&mut self.scheduled)
    }

    fn next_token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }

    /// A command from schedd arrives at `node`.
    pub(crate) fn command<'a>(
        &mut self,
        node: &str,
        command: AgentCommand,
        now: Millis,
        spec_of: &dyn Fn(u64) -> &'a SimJob,
    ) {
        match command {
            AgentCommand::Launch(order) => {
                let id = order.job.id.0;
                let restart = order.job.restart_count;
                let job = spec_of(id);
                let saved = self.saved.get(&id).copied().unwrap_or(0);
                let run = self.runs.entry(id).or_insert(Run {
                    restart,
                    start: now,
                    base: saved,
                    parts_left: 0,
                    stop: None,
                });
                if run.restart != restart {
                    *run = Run {
                        restart,
                        start: now,
                        base: saved,
                        parts_left: 0,
                        stop: None,
                    };
                }
                run.parts_left += 1;
                let (start, base) = (run.start, run.base);
                let token = self.next_token();
                let node = node.to_string();
                self.scheduled.push((
                    now,
                    AgentEvent::Started {
                        node: node.clone(),
                        job: id,
                    },
                ));
                let remaining = (job.duration_ms - base).max(0);
                let limit = job.time_limit_secs.map(|s| s as i64 * 1000);
                let ends = match limit {
                    Some(l) if remaining > l => {
                        self.scheduled.push((
                            start + l,
                            AgentEvent::TimeLimit {
                                node: node.clone(),
                                job: id,
                                token,
                            },
                        ));
                        start + l
                    }
                    _ => {
                        self.scheduled.push((
                            start + remaining,
                            AgentEvent::Exit {
                                node: node.clone(),
                                job: id,
                                token,
                            },
                        ));
                        start + remaining
                    }
                };
                let interval = job.checkpoint_interval_ms;
                if order.rank == 0 && interval > 0 && start + interval < ends {
                    self.scheduled.push((
                        start + interval,
                        AgentEvent::Checkpoint {
                            node: node.clone(),
                            job: id,
                            token,
                        },
                    ));
                }
                self.parts.insert(
                    (node, id),
                    Part {
                        restart,
                        token,
                        grace_secs: order.job.grace_secs,
                        stopping: false,
                        end: part_end(id, restart, 0),
                    },
                );
            }
            AgentCommand::Stop {
                job_id, grace_secs, ..
            } => {
                let job = spec_of(job_id);
                self.stop(node, job_id, grace_secs, false, now, job);
            }
            // Registrations, acknowledgements and heartbeat answers change nothing here.
            _ => {}
        }
    }

    /// SIGTERM to the job's part on `node` (a stop, or its time limit): it exits once its
    /// checkpoint is written if that fits in the grace, else it is killed at the end of it.
    fn stop(
        &mut self,
        node: &str,
        id: u64,
        grace_secs: u32,
        timed_out: bool,
        now: Millis,
        job: &SimJob,
    ) {
        let token = self.next_token();
        let Some(part) = self.parts.get_mut(&(node.to_string(), id)) else {
            return; // already gone: stops are idempotent
        };
        if part.stopping {
            return;
        }
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        let stopped = *run.stop.get_or_insert_with(|| {
            let natural_end = run.start + (job.duration_ms - run.base).max(0);
            let grace = i64::from(grace_secs) * 1000;
            let write = job.checkpoint_write_ms;
            let (mut exit_at, mut saved, mut killed) = if write <= grace {
                (now + write, true, false)
            } else {
                (now + grace, false, true)
            };
            let completed = natural_end <= exit_at;
            if completed {
                (exit_at, saved, killed) = (natural_end.max(now), true, false);
            }
            Stopped {
                term: now,
                exit_at,
                saved,
                completed,
                killed,
                timed_out,
            }
        });
        part.stopping = true;
        part.token = token;
        part.end = PartEnd {
            exit_code: (!stopped.killed).then_some(0),
            signal: stopped.killed.then_some(9),
            end_time_ms: stopped.exit_at,
            timed_out: stopped.timed_out,
            term_time_ms: stopped.term,
            killed: stopped.killed,
            // noded says so only for a stop schedd asked for, not for a time limit.
            checkpoint_saved: stopped.saved && !stopped.timed_out,
            ..part_end(id, part.restart, stopped.exit_at)
        };
        self.scheduled.push((
            stopped.exit_at.max(now),
            AgentEvent::Exit {
                node: node.to_string(),
                job: id,
                token,
            },
        ));
    }

    /// A timer fires or a report leaves the agent.
    pub(crate) fn handle<'a>(
        &mut self,
        event: AgentEvent,
        now: Millis,
        spec_of: &dyn Fn(u64) -> &'a SimJob,
    ) -> Delivery {
        match event {
            AgentEvent::Started { node, job } => Delivery::Started { node, job },
            AgentEvent::Checkpoint { node, job, token } => {
                let Some(part) = self.parts.get(&(node.clone(), job)) else {
                    return Delivery::Nothing;
                };
                if part.token != token || part.stopping {
                    return Delivery::Nothing;
                }
                let spec = spec_of(job);
                let interval = spec.checkpoint_interval_ms;
                if let Some(run) = self.runs.get(&job) {
                    let natural_end = run.start + (spec.duration_ms - run.base).max(0);
                    let limit_end = spec
                        .time_limit_secs
                        .map_or(Millis::MAX, |s| run.start + s as i64 * 1000);
                    if now + interval < natural_end.min(limit_end) {
                        self.scheduled.push((
                            now + interval,
                            AgentEvent::Checkpoint {
                                node: node.clone(),
                                job,
                                token,
                            },
                        ));
                    }
                }
                Delivery::Checkpoint { node, job }
            }
            AgentEvent::TimeLimit { node, job, token } => {
                let Some(part) = self.parts.get(&(node.clone(), job)) else {
                    return Delivery::Nothing;
                };
                if part.token != token || part.stopping {
                    return Delivery::Nothing;
                }
                let grace = part.grace_secs;
                self.stop(&node, job, grace, true, now, spec_of(job));
                Delivery::Nothing
            }
            AgentEvent::Exit { node, job, token } => {
                let key = (node.clone(), job);
                if self.parts.get(&key).is_none_or(|p| p.token != token) {
                    return Delivery::Nothing;
                }
                let part = self.parts.remove(&key).expect("the part");
                let mut end = part.end;
                end.end_time_ms = now;
                let lost = self.part_gone(job, spec_of(job));
                Delivery::Finished { node, end, lost }
            }
        }
    }

    /// A part of `id`'s run is gone; when it was the last, what the run leaves for the next:
    /// returns the run's restart count and the GPU-milliseconds of work lost, if stopped.
    fn part_gone(&mut self, id: u64, job: &SimJob) -> Option<(u32, i64)> {
        let run = self.runs.get_mut(&id)?;
        run.parts_left = run.parts_left.saturating_sub(1);
        if run.parts_left > 0 {
            return None;
        }
        let run = self.runs.remove(&id)?;
        let Some(stop) = run.stop else {
            self.saved.insert(id, job.duration_ms);
            return None;
        };
        let ran = (stop.term - run.start).max(0);
        let reached = (run.base + ran).min(job.duration_ms);
        let saved = if stop.completed {
            job.duration_ms
        } else if stop.saved {
            reached
        } else if job.checkpoint_interval_ms > 0 {
            let interval = job.checkpoint_interval_ms;
            (run.base + ran / interval * interval).min(reached)
        } else {
            run.base
        };
        self.saved.insert(id, saved);
        let lost = (reached - saved).max(0) * i64::from(job.gpus);
        Some((run.restart, lost))
    }
}
