//! Signals to a job: the warning before its time limit, SIGTERM and SIGKILL to every process.
//!
//! A job's processes are its cgroup or its process group ([`JobProcesses`]), known from the
//! first moment of its launch where the host allows; until then a signal waits for the
//! job's start.

use super::JobTask;
use crate::launch::tracking::JobProcesses;
use nix::sys::signal::Signal;

impl JobTask {
    /// The job's `warn_signal`, to the batch shell only or to every process of the job.
    pub(super) fn warn(&mut self) {
        self.record.stop.warn_sent = true;
        self.persist();
        let job_id = self.job_id();
        let Ok(signal) = Signal::try_from(self.record.job.warn_signal) else {
            // Refused when the job was planned; a state file edited since is not obeyed.
            tracing::warn!(
                "job {job_id}: warn_signal {} is no signal",
                self.record.job.warn_signal
            );
            return;
        };
        tracing::info!(
            "job {job_id}: {signal} {}s before the time limit",
            self.record.job.warn_secs
        );
        if !self.record.job.warn_batch_only {
            match self.processes() {
                Some(processes) => {
                    if let Err(e) = processes.signal(signal) {
                        tracing::warn!("job {job_id}: cannot send {signal} to {processes}: {e}");
                    }
                }
                None => tracing::debug!("job {job_id}: no process to warn"),
            }
            return;
        }
        let main_pid = self.record.job_pid.filter(|_| !self.processes_gone);
        match main_pid.and_then(|pid| i32::try_from(pid).ok()) {
            Some(pid) if pid > 1 => {
                if let Err(e) = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal) {
                    tracing::debug!("job {job_id}: cannot send {signal} to pid {pid}: {e}");
                }
            }
            _ => tracing::debug!("job {job_id}: no main process to warn"),
        }
    }

    /// The job's processes at any moment of its launch: its cgroup, which its first process
    /// joins before anything that can block (a hung filesystem, an automount), so a stop
    /// reaches a job that has not exec'd yet; without cgroups its process group, once known
    /// (its pid, or before its exec the group its first process recorded). `None` before
    /// that: signals then wait for `on_started`.
    /// Once the node's supervisor has said they are all gone, a process group is not
    /// signalled any more (its number may be another group's by then).
    pub(super) fn processes(&mut self) -> Option<JobProcesses<'_>> {
        if self.record.job_pid.is_none() {
            self.record.job_pid = self.dir.read_job_pid();
        }
        let plan = self.record.plan.as_ref()?;
        if self.processes_gone && plan.cgroup.is_none() {
            return None;
        }
        let group = self.record.job_pid.or_else(|| self.dir.read_job_group());
        JobProcesses::of(plan.cgroup.as_ref(), group)
    }

    /// Sends `signal` to every process of the job; whether it reached any.
    pub(super) fn signal_job(&mut self, signal: Signal) -> bool {
        let job_id = self.job_id();
        match self.processes() {
            Some(processes) => match processes.signal(signal) {
                Ok(true) => {
                    tracing::debug!("job {job_id}: sent {signal} to {processes}");
                    true
                }
                Ok(false) => {
                    tracing::debug!("job {job_id}: {processes} empty");
                    false
                }
                Err(e) => {
                    tracing::warn!("job {job_id}: cannot send {signal} to {processes}: {e}");
                    false
                }
            },
            // Delivered by on_started once the job's pid is known.
            None => {
                tracing::debug!("job {job_id}: no process (yet, or any more), {signal} deferred");
                false
            }
        }
    }

    /// SIGKILL to every process of the job, noting whether any was still alive (the grace
    /// covers them all, so the job counts as killed even when its main process had ended).
    /// The stop progress is saved before the signal: the node's supervisor records the end
    /// the signal brings with what it was last told.
    pub(super) fn kill_job(&mut self) {
        let job_id = self.job_id();
        let Some(alive) = self
            .processes()
            .map(|processes| processes.any_alive().unwrap_or(true))
        else {
            return tracing::debug!(
                "job {job_id}: no process (yet, or any more), SIGKILL deferred"
            );
        };
        if alive {
            self.record.stop.kill_found_processes = true;
        }
        self.persist();
        if let Some(processes) = self.processes() {
            if let Err(e) = processes.kill() {
                tracing::warn!("job {job_id}: cannot kill {processes}: {e}");
            }
        }
    }
}
