//! One job as the supervisor watches it: its first process's exec, its main process's end,
//! then the rest of its processes, and the exit that makes its end.

use super::child::{self, StartError};
use super::fence::Fence;
use super::log;
use super::spawn::ChildInUse;
use crate::launch::cgroup::read_populated;
use crate::launch::spool::{ExitRecord, JobDir, JobRecord};
use crate::launch::tracking::JobProcesses;
use crate::launch::ExecPlan;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};
use ysched_common::time::now_ms;

/// After this long waiting for a job's last processes, the supervisor says so in its log.
const SLOW_END: Duration = Duration::from_secs(60);

/// A job the supervisor runs, from its first process's creation to its last process's end.
pub(super) struct Job {
    pub(super) dir: JobDir,
    /// As launched, with noded's stop progress (`stop` lines) folded in.
    pub(super) record: JobRecord,
    pub(super) plan: ExecPlan,
    pub(super) grace_secs: u32,
    /// A stop began (noded's, or the fence's): when its SIGTERM was sent, 0 for a kill at
    /// once. The main process's end then leaves the others their grace.
    pub(super) stop_notice: Option<i64>,
    pub(super) pid: u32,
    /// Readable once the main process has ended; dropped once it is reaped.
    pub(super) pidfd: Option<OwnedFd>,
    /// Open until the child has exec'd (or failed).
    pub(super) step_pipe: Option<OwnedFd>,
    /// What the child reads until its exec (see
    /// [`Forked::child`](super::first_process::Forked::child)).
    pub(super) child: Option<ChildInUse>,
    /// Its setup or exec failed.
    pub(super) failure: Option<StartError>,
    /// The main process's wait status, once reaped.
    pub(super) status: Option<libc::c_int>,
    /// `cgroup.events`, with cgroups.
    pub(super) events: Option<File>,
    /// Its start was recorded (`pid`) and told.
    pub(super) announced: bool,
    /// Since the main process ended: waiting for the job's other processes.
    pub(super) draining: Option<Instant>,
    pub(super) said_slow: bool,
    pub(super) fence: Fence,
}

impl Job {
    /// Reads the step pipe: end of file means the exec is done (or the child died before);
    /// a report, that a step or the exec failed.
    pub(super) fn read_step_pipe(&mut self) {
        let Some(pipe) = self.step_pipe.take() else {
            return;
        };
        let mut report = [0u8; child::STEP_REPORT_LEN];
        let mut file = File::from(pipe);
        let read = file.read(&mut report);
        if matches!(read, Ok(0)) {
            // End of file: the child has exec'd or ended, and reads its memory no more (a
            // report is written before the child's end: its memory waits for the reaping).
            if let Some(child) = self.child.take() {
                child.release();
            }
        }
        let read = read.unwrap_or(0);
        if read > 0 {
            let error = child::reported_error(&report[..read]);
            self.failure = Some(child::failure(&self.plan, &report[..read], error));
        } else {
            ysched_common::stamp::stamp("s.exec_done", self.record.job.job_id);
            log(&format!("job started as pid {}", self.pid));
        }
    }

    /// The main process ended (reaped): the rest is killed unless a stop is under way; then
    /// the job waits for its other processes.
    pub(super) fn main_ended(&mut self) {
        if self.step_pipe.is_some() {
            self.read_step_pipe();
        }
        let stopping = self.stop_notice.is_some();
        // The usual end: the cgroup is empty already, and nothing can enter it any more (only
        // its own processes could fork into it), so there is nothing to kill.
        let left_nothing = self
            .events
            .as_ref()
            .is_some_and(|events| matches!(read_populated(events), Ok(false)));
        if self.failure.is_none() && !left_nothing {
            if stopping {
                log("main process ended during a stop; waiting for the job's other processes");
            } else if let Some(processes) = self.processes() {
                // Processes the job left behind die with it, as under slurmstepd.
                if let Err(e) = processes.kill() {
                    log(&format!("cannot kill what is left of the job: {e}"));
                }
            }
        }
        self.draining = Some(Instant::now());
    }

    /// The job's processes: its cgroup, else its process group (its pid once it has exec'd,
    /// or before, the group its first process recorded).
    pub(super) fn processes(&self) -> Option<JobProcesses<'_>> {
        let group = if self.step_pipe.is_none() {
            Some(self.pid)
        } else {
            self.dir.read_job_group()
        };
        JobProcesses::of(self.plan.cgroup.as_ref(), group)
    }

    pub(super) fn all_gone(&mut self) -> bool {
        let gone = match (&self.events, self.processes()) {
            (Some(events), _) => !read_populated(events).unwrap_or(false),
            (None, Some(processes)) => !processes.any_alive().unwrap_or(false),
            (None, None) => true,
        };
        if !gone && !self.said_slow && self.draining.is_some_and(|t| t.elapsed() > SLOW_END) {
            self.said_slow = true;
            log(
                "the job's processes are still alive a minute after its main process ended \
                 (unkillable, e.g. in uninterruptible I/O?)",
            );
        }
        gone
    }

    pub(super) fn exit_record(&self) -> ExitRecord {
        let fenced = ExitRecord {
            fenced: self.fence.fenced,
            term_time_ms: self.fence.term_time_ms,
            killed: self.fence.killed,
            ..Default::default()
        };
        let end_time_ms = now_ms();
        if let Some(failure) = &self.failure {
            return ExitRecord {
                error: Some(failure.error.clone()),
                node_fault: failure.node_fault,
                end_time_ms,
                ..fenced
            };
        }
        let out_of_memory = self.plan.cgroup.as_ref().is_some_and(|c| c.out_of_memory());
        if out_of_memory {
            log("the job went over its memory limit: the kernel killed at least one of its processes");
        }
        let status = self.status.unwrap_or(0);
        let (exit_code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else if libc::WIFSIGNALED(status) {
            (None, Some(libc::WTERMSIG(status)))
        } else {
            (None, None)
        };
        log(&format!("job ended: exit {exit_code:?}, signal {signal:?}"));
        ExitRecord {
            exit_code,
            signal,
            end_time_ms,
            error: None,
            out_of_memory,
            ..fenced
        }
    }
}
