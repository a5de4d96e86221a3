//! The fence: the node's lease, read every second for all jobs at once, and every job stopped
//! once it has run out (the `stopping` notice, SIGTERM, the grace, SIGKILL), needing no noded.

use super::job::Job;
use super::{log, Supervisor};
use crate::launch::lease::{boottime_ms, Lease, LEASE_FILE};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use ysched_common::time::{now_ms, rfc3339};

/// How often the lease is read.
pub(super) const LEASE_CHECK: Duration = Duration::from_secs(1);

/// A lease read as run out is read again this much later before the fence acts: the agent
/// rewrites it in place, and a read overlapping a rewrite may see part of each deadline.
pub(super) const LEASE_RECHECK: Duration = Duration::from_millis(50);

/// The lease as last read, for every job at once.
#[derive(Default)]
pub(super) struct LeaseWatch {
    pub(super) next_read: Option<Instant>,
    /// Read as run out at this instant; acted on after a second read.
    pub(super) out_since: Option<Instant>,
    /// Run out (read twice): jobs are fenced.
    pub(super) out: bool,
    pub(super) said_unreadable: bool,
}

/// A job's fence: whether it stopped the job, when its SIGTERM went, when its SIGKILL is due,
/// and whether that found processes left.
#[derive(Default)]
pub(super) struct Fence {
    pub(super) fenced: bool,
    pub(super) term_time_ms: i64,
    pub(super) kill_at: Option<Instant>,
    pub(super) killed: bool,
}

impl Supervisor {
    pub(super) fn check_lease(&mut self) {
        let now = Instant::now();
        if let Some(since) = self.lease.out_since {
            if now >= since + LEASE_RECHECK {
                self.lease.out_since = None;
                if self.lease_run_out().is_some() {
                    self.lease.out = true;
                }
            }
        } else if self.lease.next_read.is_none_or(|at| now >= at) {
            self.lease.next_read = Some(now + LEASE_CHECK);
            match self.lease_run_out() {
                Some(true) => self.lease.out_since = Some(now),
                Some(false) => self.lease.out = false,
                None => {}
            }
        }
        if self.lease.out {
            self.fence_jobs();
        }
    }

    /// Whether the lease has run out: `None` when it cannot be read (nothing is fenced).
    pub(super) fn lease_run_out(&mut self) -> Option<bool> {
        match Lease::read(&self.spool.join(LEASE_FILE)) {
            Ok(lease) => {
                self.lease.said_unreadable = false;
                Some(matches!(lease, Some(Lease::Until(deadline)) if boottime_ms() > deadline))
            }
            Err(e) => {
                if !self.lease.said_unreadable {
                    self.lease.said_unreadable = true;
                    log(&format!("cannot read the fence lease, not fencing: {e}"));
                }
                None
            }
        }
    }

    /// The lease ran out: stops every job not fenced yet, as noded would.
    pub(super) fn fence_jobs(&mut self) {
        for job in self.jobs.values_mut() {
            if !job.fence.fenced {
                job.fence_now();
            }
        }
    }

    /// SIGKILL to what is left of fenced jobs whose grace is over.
    pub(super) fn fence_deadlines(&mut self) {
        let now = Instant::now();
        for job in self.jobs.values_mut() {
            if job.fence.kill_at.is_some_and(|at| now >= at) {
                job.fence.kill_at = None;
                let killed = job.processes().is_some_and(|processes| {
                    let alive = processes.any_alive().unwrap_or(true);
                    if alive {
                        log("fence: grace over, killing what is left of the job");
                        if let Err(e) = processes.kill() {
                            log(&format!("fence: cannot kill {processes}: {e}"));
                        }
                    }
                    alive
                });
                job.fence.killed |= killed;
            }
        }
    }
}

impl Job {
    /// The lease ran out: the `stopping` notice (so the main process's end does not cut the
    /// others' grace), SIGTERM to every process, SIGKILL at the end of the grace. A stop
    /// noded had begun keeps its SIGTERM time. Without cgroups, a job whose process group is
    /// not known yet is fenced at the next look.
    pub(super) fn fence_now(&mut self) {
        let Some(processes) = self.processes() else {
            return;
        };
        if !processes.any_alive().unwrap_or(true) {
            return;
        }
        let now = now_ms();
        let grace_ms = i64::from(self.grace_secs) * 1000;
        let mut began_stop = false;
        let term_time_ms = match self.stop_notice {
            Some(term) if term > 0 => {
                log(&format!(
                    "fence: the node's lease ran out during a stop begun at {}: killing what \
                     is left at the end of its grace",
                    rfc3339(term)
                ));
                term
            }
            Some(_) => {
                log("fence: the node's lease ran out while noded was killing the job");
                now - grace_ms
            }
            None => {
                log(&format!(
                    "fence: the node's lease ran out (no word from schedd): stopping job {}, \
                     SIGTERM now, SIGKILL after {}s",
                    self.record.job.job_id, self.grace_secs
                ));
                // Noted before the first signal (below, once `processes` is let go): the
                // main process's end then leaves the others their grace.
                began_stop = true;
                if let Err(e) = processes.signal(Signal::SIGTERM) {
                    log(&format!("fence: cannot send SIGTERM to {processes}: {e}"));
                }
                now
            }
        };
        if began_stop {
            self.stop_notice = Some(now);
        }
        let wait_ms = u64::try_from(term_time_ms + grace_ms - now_ms()).unwrap_or(0);
        self.fence = Fence {
            fenced: true,
            term_time_ms,
            kill_at: Some(Instant::now() + Duration::from_millis(wait_ms)),
            killed: false,
        };
    }
}
