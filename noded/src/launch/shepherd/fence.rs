//! The shepherd's fence: it stops the job itself once the node's lease has run out.
//!
//! A watcher thread reads the node's lease and, once it has run out, stops the job as noded
//! would (the `stopping` notice, SIGTERM, the job's grace, SIGKILL), with no noded needed.

use super::log;
use crate::launch::cgroup::JobCgroup;
use crate::launch::lease::{boottime_ms, Lease};
use crate::launch::spool::{ExitRecord, JobDir};
use crate::launch::tracking::JobProcesses;
use nix::sys::signal::Signal;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use ysched_common::time::{now_ms, rfc3339};

/// How often the fence's watcher reads the lease.
const LEASE_CHECK: Duration = Duration::from_secs(1);
/// After reading a deadline that has passed, the watcher reads the lease again this much
/// later before it fences: the agent rewrites the file in place, and a read overlapping a
/// rewrite may see part of each deadline.
const LEASE_RECHECK: Duration = Duration::from_millis(50);

/// The fence's watcher thread and what it did, shared with the main thread.
pub(super) struct Fence {
    state: Arc<Mutex<FenceState>>,
}

#[derive(Debug, Default)]
struct FenceState {
    /// The job is over: the watcher does nothing more.
    over: bool,
    /// The job's pid, once its exec is done (before, its cgroup or the process group its
    /// first process recorded in `group` stand for it).
    job_pid: Option<u32>,
    fenced: bool,
    /// When the fence's stop began, ms since the epoch.
    term_time_ms: i64,
    /// The fence's SIGKILL found processes alive.
    killed: bool,
}

impl Fence {
    /// Starts the watcher of the lease of the job in `dir` (in `cgroup` if it has one), just
    /// before the job is forked.
    pub(super) fn watch(dir: &JobDir, cgroup: Option<JobCgroup>, grace_secs: u32) -> Fence {
        let state = Arc::new(Mutex::new(FenceState::default()));
        let Some(lease) = dir.lease() else {
            log("no lease file beside the job directory: this job is never fenced");
            return Fence { state };
        };
        let watcher = FenceWatcher {
            dir: dir.clone(),
            lease,
            cgroup,
            grace_secs,
            state: state.clone(),
        };
        if let Err(e) = std::thread::Builder::new()
            .name("fence".into())
            .spawn(move || watcher.run())
        {
            log(&format!(
                "cannot start the fence's watcher, this job is never fenced: {e}"
            ));
        }
        Fence { state }
    }

    /// The job's exec is done: it is `pid`, and its process group.
    pub(super) fn job_started(&self, pid: u32) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .job_pid = Some(pid);
    }

    /// The job is over (every process gone): stops the watcher acting, and returns what the
    /// fence did, as the fields of the exit record it owns.
    pub(super) fn end(&self) -> ExitRecord {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.over = true;
        ExitRecord {
            fenced: state.fenced,
            term_time_ms: state.term_time_ms,
            killed: state.killed,
            ..Default::default()
        }
    }
}

struct FenceWatcher {
    dir: JobDir,
    lease: std::path::PathBuf,
    cgroup: Option<JobCgroup>,
    grace_secs: u32,
    state: Arc<Mutex<FenceState>>,
}

impl FenceWatcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the lease every second until it runs out (then fences, once) or the job is
    /// over.
    fn run(self) {
        let mut said_unreadable = false;
        loop {
            std::thread::sleep(LEASE_CHECK);
            if self.lock().over {
                return;
            }
            match Lease::read(&self.lease) {
                Ok(Some(Lease::Until(deadline))) => {
                    said_unreadable = false;
                    let now = boottime_ms();
                    // Without cgroups, a job not yet in its own process group cannot be
                    // fenced yet: looked at again a second later.
                    if now > deadline && self.processes().is_some() && self.still_out() {
                        return self.fence(now - deadline);
                    }
                }
                Ok(Some(Lease::Off) | None) => said_unreadable = false,
                Err(e) => {
                    if !said_unreadable {
                        said_unreadable = true;
                        log(&format!("cannot read the fence lease, not fencing: {e}"));
                    }
                }
            }
        }
    }

    /// The lease read a moment ago had run out: whether it still has on a second read (see
    /// [`LEASE_RECHECK`]).
    fn still_out(&self) -> bool {
        std::thread::sleep(LEASE_RECHECK);
        matches!(
            Lease::read(&self.lease),
            Ok(Some(Lease::Until(deadline))) if boottime_ms() > deadline
        )
    }

    /// The lease ran out `late_ms` ago: the node has lost schedd, which may run the job
    /// elsewhere now. Stops the job as noded would: the `stopping` notice (so the main
    /// process's end does not cut the others' grace), SIGTERM to every process, the grace,
    /// then SIGKILL to whatever is left.
    /// The job's processes: its cgroup, else its process group (its pid, or before its exec
    /// the group its first process recorded); `None` before that process has.
    fn processes(&self) -> Option<JobProcesses<'_>> {
        let pid = self.lock().job_pid.or_else(|| self.dir.read_job_group());
        JobProcesses::of(self.cgroup.as_ref(), pid)
    }

    fn fence(self, late_ms: u64) {
        let Some(processes) = self.processes() else {
            return;
        };
        let begun = self.dir.read_stop_notice();
        let now = now_ms();
        {
            let mut state = self.lock();
            if state.over || !processes.any_alive().unwrap_or(true) {
                return;
            }
            state.fenced = true;
            state.term_time_ms = match begun {
                Some(term) if term > 0 => term,
                _ => now,
            };
        }
        let grace_ms = i64::from(self.grace_secs) * 1000;
        let term_time_ms = match begun {
            // noded had begun stopping the job (and may be stopped itself since): that stop's
            // SIGTERM went out already; the fence makes sure its SIGKILL does too.
            Some(term) if term > 0 => {
                log(&format!(
                    "fence: the node's lease ran out {late_ms} ms ago, during a stop begun                      at {}: killing what is left at the end of its grace",
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
                    "fence: the node's lease ran out {late_ms} ms ago (no word from schedd):                      stopping the job, SIGTERM now, SIGKILL after {}s",
                    self.grace_secs
                ));
                if let Err(e) = self.dir.write_stop_notice(now) {
                    log(&format!(
                        "cannot write the stop notice, so the main process's end will end                          the others' grace: {e}"
                    ));
                }
                if let Err(e) = processes.signal(Signal::SIGTERM) {
                    log(&format!("fence: cannot send SIGTERM to {processes}: {e}"));
                }
                now
            }
        };
        let wait_ms = u64::try_from(term_time_ms + grace_ms - now_ms()).unwrap_or(0);
        let until = Instant::now() + Duration::from_millis(wait_ms);
        while Instant::now() < until {
            if self.lock().over {
                return;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        {
            let mut state = self.lock();
            if state.over {
                return;
            }
            if processes.any_alive().unwrap_or(true) {
                state.killed = true;
            } else {
                return;
            }
        }
        log("fence: grace over, killing what is left of the job");
        if let Err(e) = processes.kill() {
            log(&format!("fence: cannot kill {processes}: {e}"));
        }
    }
}
