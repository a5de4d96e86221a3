//! One task per job: creates its cgroups and starts its shepherd (or adopts it after a
//! restart), sends the warning signal, SIGTERM and SIGKILL to every process of the job when
//! asked or when the time limit and grace run out, and reports the job's end. All of it
//! reacts to events (shepherd exit, control messages, timers); nothing polls.

use super::checkpoint;
use super::containment::JobLimits;
use super::job::{plan_job, write_script, JobParams};
use super::process::{newest_mtime_ms, Shepherd};
use super::spool::{ExitRecord, FinishedRecord, JobDir, JobRecord, StopState, FILE_MODE};
use super::tracking::JobProcesses;
use super::{Control, JobEvent, JobStarted, Shared, SHEPHERD_SUBCOMMAND};
use nix::sys::signal::Signal;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use tokio::sync::mpsc;
use ysched_common::time::now_ms;

/// File timestamps come from the kernel's coarse clock, which lags the precise clock noded
/// reads by up to a tick: a checkpoint written right after SIGTERM can look a few ms older.
const MTIME_GRANULARITY_MS: i64 = 10;

/// The shepherd's start announcement: `started <pid> <time_ms>`.
type Announcement = Lines<BufReader<ChildStdout>>;

/// Why a job could not be started: the message for `FinishedRecord::error`, and whether the
/// reason is the node's (its spool, cgroups, processes), so that another node may run it,
/// rather than the job's (its user, paths, program).
struct LaunchFailure {
    error: String,
    node_fault: bool,
}

impl LaunchFailure {
    fn job(error: String) -> LaunchFailure {
        LaunchFailure {
            error,
            node_fault: false,
        }
    }

    fn node(error: String) -> LaunchFailure {
        LaunchFailure {
            error,
            node_fault: true,
        }
    }
}

impl From<String> for LaunchFailure {
    /// A failure of the job's own (see [`LaunchFailure::job`]).
    fn from(error: String) -> Self {
        LaunchFailure::job(error)
    }
}

pub(super) struct Supervisor {
    shared: Arc<Shared>,
    dir: JobDir,
    record: JobRecord,
    controls: mpsc::UnboundedReceiver<Control>,
    /// The stop's SIGTERM reached a process of the job (maybe before its exec, which it then
    /// ended): it is not sent again when the job's start is announced.
    term_delivered: bool,
}

impl Supervisor {
    pub fn for_new_job(
        shared: Arc<Shared>,
        job: JobParams,
        controls: mpsc::UnboundedReceiver<Control>,
    ) -> Self {
        let record = JobRecord {
            job,
            plan: None,
            shepherd_pid: None,
            job_pid: None,
            start_time_ms: 0,
            launch_time_ms: now_ms(),
            stop: StopState::default(),
        };
        Self::for_recovered_job(shared, record, controls)
    }

    pub fn for_recovered_job(
        shared: Arc<Shared>,
        record: JobRecord,
        controls: mpsc::UnboundedReceiver<Control>,
    ) -> Self {
        let dir = shared.spool.job_dir(record.job.job_id);
        let mut supervisor = Supervisor {
            shared,
            dir,
            record,
            controls,
            term_delivered: false,
        };
        // noded may have stopped between the shepherd writing `pid` and noded recording it.
        if supervisor.record.plan.is_some() && supervisor.record.job_pid.is_none() {
            if let Some(pid) = supervisor.dir.read_job_pid() {
                supervisor.record.job_pid = Some(pid);
                if supervisor.record.start_time_ms == 0 {
                    supervisor.record.start_time_ms = now_ms();
                }
            }
        }
        supervisor
    }

    fn job_id(&self) -> u64 {
        self.record.job.job_id
    }

    /// A new job's whole life: plan it, start its shepherd, supervise it, report its end.
    pub async fn launch(mut self) {
        match self.start().await {
            Ok((shepherd, announcement)) => self.supervise(shepherd, Some(announcement)).await,
            Err(LaunchFailure { error, node_fault }) => {
                tracing::warn!(
                    "job {}: cannot start: {error}{}",
                    self.job_id(),
                    if node_fault {
                        " (a fault of this node's: schedd places the job elsewhere)"
                    } else {
                        ""
                    }
                );
                let exit = ExitRecord {
                    end_time_ms: now_ms(),
                    error: Some(error),
                    node_fault,
                    ..Default::default()
                };
                self.finish(exit).await
            }
        }
    }

    /// A job whose shepherd survived a noded restart: supervise it from where it was.
    pub async fn resume(self, shepherd: Shepherd) {
        self.supervise(shepherd, None).await
    }

    /// Prepares the spool directory and starts the shepherd. A failure to write the spool
    /// also marks the node unhealthy (see [`super::Health`]).
    async fn start(&mut self) -> Result<(Shepherd, Announcement), LaunchFailure> {
        let shared = self.shared.clone();
        let job = self.record.job.clone();
        let plan = tokio::task::spawn_blocking(move || -> Result<_, LaunchFailure> {
            let spool_failure = |what: &str, e: std::io::Error| {
                shared.spool_write_failed(&e);
                LaunchFailure::node(format!("cannot write {what}: {e}"))
            };
            let dir = shared
                .spool
                .create_job_dir(job.job_id)
                .map_err(|e| spool_failure("the job's spool directory", e))?;
            // A login node runs nothing, whatever schedd sends.
            if !shared.runs_jobs {
                return Err(LaunchFailure::job(format!(
                    "node {} is a login node: it runs no job",
                    shared.node_name
                )));
            }
            // Before anything else is looked at: no message from schedd starts a root process
            // on a node that refuses them.
            if job.uid == 0 && !shared.allow_root_jobs {
                // Logged (as "job N: cannot start: ...") and reported by `launch`.
                return Err(LaunchFailure::job(format!(
                    "node {} refuses to run jobs as root (node.allow_root_jobs = false)",
                    shared.node_name
                )));
            }
            let plan = plan_job(
                &job,
                &shared.node_name,
                &dir.script(),
                shared.client_socket.as_deref(),
            )?;
            if let Some(checkpoint_dir) = &plan.checkpoint_dir {
                checkpoint::prepare(checkpoint_dir, job.job_id, plan.uid, plan.gid)?;
            }
            write_script(&dir.script(), &job, &plan)
                .map_err(|e| spool_failure("the job script", e))?;
            // Where the shepherd records the job's end, made now so that it needs no space
            // then.
            dir.prepare_exit()
                .map_err(|e| spool_failure("the job's exit record", e))?;
            // Last: nothing after it can fail and leave the cgroup behind unrecorded.
            let mut plan = plan;
            plan.cgroup = shared
                .containment
                .layout()
                .map(|layout| {
                    let limits = JobLimits {
                        mem_bytes: job.mem_bytes,
                        cpus: job.cpus,
                    };
                    layout.create_job_cgroup(job.job_id, &shared.cgroup_instance, limits)
                })
                .transpose()
                .map_err(|e| {
                    shared.launch_fault(&e);
                    LaunchFailure::node(e)
                })?;
            Ok(plan)
        })
        .await
        .map_err(|e| LaunchFailure::node(format!("internal error preparing the job: {e}")))??;
        // From now on the heartbeat's scan watches it.
        if let Some(handle) = self.shared.jobs().get_mut(&self.job_id()) {
            if handle.restart_count == self.record.job.restart_count {
                handle.checkpoint_dir = plan.checkpoint();
            }
        }
        self.record.plan = Some(plan);
        // The shepherd reads its plan from here, so this write must succeed.
        if let Err(e) = self.dir.write_record(&self.record) {
            self.shared.spool_write_failed(&e);
            return Err(LaunchFailure::node(format!(
                "cannot write the job state: {e}"
            )));
        }

        let mut child = self.spawn_shepherd().map_err(|e| {
            let error = format!("cannot start the job's shepherd: {e}");
            self.shared.launch_fault(&error);
            LaunchFailure::node(error)
        })?;
        self.record.shepherd_pid = child.id();
        self.persist();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| LaunchFailure::node("the shepherd has no stdout pipe".into()))?;
        Ok((Shepherd::Child(child), BufReader::new(stdout).lines()))
    }

    fn spawn_shepherd(&self) -> std::io::Result<tokio::process::Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(FILE_MODE)
            .open(self.dir.shepherd_log())?;
        let mut command = tokio::process::Command::new(&self.shared.shepherd_program);
        command
            .arg0("noded")
            .arg(SHEPHERD_SUBCOMMAND)
            .arg(self.dir.path())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(false);
        // SAFETY: setsid is async-signal-safe. Its own session keeps the shepherd out of
        // noded's process group, so it outlives noded.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        command.spawn()
    }

    async fn supervise(mut self, mut shepherd: Shepherd, mut announcement: Option<Announcement>) {
        loop {
            let deadline = self.next_deadline_ms();
            tokio::select! {
                // Biased: a start announcement is handled before the exit that may follow it.
                biased;
                line = next_line(&mut announcement), if announcement.is_some() => {
                    announcement = None;
                    match line {
                        Some(line) => self.on_started(&line),
                        None => tracing::debug!("job {}: shepherd announced no start", self.job_id()),
                    }
                }
                Some(control) = self.controls.recv() => self.on_control(control),
                () = sleep_until_ms(deadline) => self.on_deadline(),
                () = shepherd.exited() => break,
            }
        }
        self.finish_after_shepherd(true).await
    }

    fn on_started(&mut self, line: &str) {
        let mut words = line.split_whitespace();
        let (Some("started"), Some(pid), time) = (words.next(), words.next(), words.next()) else {
            tracing::warn!(
                "job {}: unexpected shepherd message {line:?}",
                self.job_id()
            );
            return;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            tracing::warn!(
                "job {}: bad pid in shepherd message {line:?}",
                self.job_id()
            );
            return;
        };
        let time_ms = time.and_then(|t| t.parse().ok()).unwrap_or_else(now_ms);
        self.record.job_pid = Some(pid);
        self.record.start_time_ms = time_ms;
        self.persist();
        tracing::info!("job {} started, pid {pid}", self.job_id());
        self.shared.emit(JobEvent::Started(JobStarted {
            job_id: self.job_id(),
            pid,
            time_ms,
        }));
        // A stop that arrived while the job was starting may have found none of its
        // processes yet (its SIGKILL is sent again: it is harmless; its SIGTERM only if it
        // reached nobody, since a signal reaches a job once).
        if self.record.stop.kill_sent {
            self.kill_job();
            self.persist();
        } else if self.record.stop.term_time_ms > 0 && !self.term_delivered {
            self.term_delivered = self.signal_job(Signal::SIGTERM);
        }
    }

    fn on_control(&mut self, control: Control) {
        let now = now_ms();
        let stop = &mut self.record.stop;
        stop.stop_requested = true;
        match control {
            Control::Stop { grace_secs } => {
                let kill_at = now + i64::from(grace_secs) * 1000;
                if stop.term_time_ms == 0 && !stop.kill_sent {
                    tracing::info!("job {}: stop requested, grace {grace_secs}s", self.job_id());
                    return self.terminate(now, grace_secs);
                }
                if !stop.kill_sent {
                    // Already terminating: a shorter grace wins, a longer one changes nothing.
                    stop.kill_at_ms = Some(stop.kill_at_ms.map_or(kill_at, |at| at.min(kill_at)));
                }
            }
            Control::Kill => {
                if !stop.kill_sent {
                    stop.kill_sent = true;
                    tracing::info!("job {}: killing", self.job_id());
                    self.announce_stop();
                    self.kill_job();
                }
            }
        }
        self.persist();
    }

    /// SIGTERM to every process now, SIGKILL due after `grace_secs`. The shepherd is told
    /// first, so that the main process dying of the SIGTERM does not end the others' grace.
    fn terminate(&mut self, now: i64, grace_secs: u32) {
        self.record.stop.term_time_ms = now;
        self.record.stop.kill_at_ms = Some(now + i64::from(grace_secs) * 1000);
        self.announce_stop();
        self.persist();
        self.term_delivered = self.signal_job(Signal::SIGTERM);
    }

    fn announce_stop(&self) {
        if let Err(e) = self.dir.write_stop_notice(self.record.stop.term_time_ms) {
            tracing::warn!(
                "job {}: cannot tell its shepherd about the stop, so the job's main process \
                 ending will end the others' grace: {e}",
                self.job_id()
            );
        }
    }

    /// When the time limit runs out, if the job has one: counted from its start, or, until
    /// it has started, from its launch (a launch stuck before its exec, on a hung filesystem,
    /// times out like a job).
    fn limit_at_ms(&self) -> Option<i64> {
        let limit_secs = i64::try_from(self.record.job.time_limit_secs).unwrap_or(i64::MAX);
        let since = match self.record.start_time_ms {
            0 => self.record.launch_time_ms,
            start => start,
        };
        (limit_secs > 0 && since > 0).then(|| since.saturating_add(limit_secs.saturating_mul(1000)))
    }

    /// When the warning signal is due, if the job asked for one, has started (a signal to a
    /// launch not yet exec'd would end it with the signal's default action) and was not sent
    /// it yet.
    fn warn_at_ms(&self, limit_at: i64) -> Option<i64> {
        let job = &self.record.job;
        (job.warn_signal != 0 && !self.record.stop.warn_sent && self.record.start_time_ms > 0)
            .then(|| limit_at - i64::from(job.warn_secs) * 1000)
    }

    /// When the next timer fires: the warning and the time limit until SIGTERM, then the end
    /// of the grace.
    fn next_deadline_ms(&self) -> Option<i64> {
        let stop = &self.record.stop;
        if stop.kill_sent {
            None
        } else if stop.term_time_ms > 0 {
            stop.kill_at_ms
        } else {
            let limit_at = self.limit_at_ms()?;
            Some(
                self.warn_at_ms(limit_at)
                    .map_or(limit_at, |w| w.min(limit_at)),
            )
        }
    }

    fn on_deadline(&mut self) {
        let now = now_ms();
        if self.record.stop.term_time_ms == 0 {
            let Some(limit_at) = self.limit_at_ms() else {
                return;
            };
            if now < limit_at {
                if self
                    .warn_at_ms(limit_at)
                    .is_some_and(|warn_at| now >= warn_at)
                {
                    self.warn();
                }
                return;
            }
            tracing::info!("job {}: time limit reached", self.job_id());
            self.record.stop.timed_out = true;
            return self.terminate(now, self.record.job.grace_secs);
        } else if !self.record.stop.kill_sent {
            tracing::info!("job {}: grace over, killing what is left", self.job_id());
            self.record.stop.kill_sent = true;
            self.kill_job();
        }
        self.persist();
    }

    /// The job's `warn_signal`, to the batch shell only or to every process of the job.
    fn warn(&mut self) {
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
        match self.record.job_pid.and_then(|pid| i32::try_from(pid).ok()) {
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
    fn processes(&mut self) -> Option<JobProcesses<'_>> {
        if self.record.job_pid.is_none() {
            self.record.job_pid = self.dir.read_job_pid();
        }
        let plan = self.record.plan.as_ref()?;
        let group = self.record.job_pid.or_else(|| self.dir.read_job_group());
        JobProcesses::of(plan.cgroup.as_ref(), group)
    }

    /// Sends `signal` to every process of the job; whether it reached any.
    fn signal_job(&mut self, signal: Signal) -> bool {
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
                tracing::debug!("job {job_id}: no process yet, {signal} deferred");
                false
            }
        }
    }

    /// SIGKILL to every process of the job, noting whether any was still alive (the grace
    /// covers them all, so the job counts as killed even when its main process had ended).
    fn kill_job(&mut self) {
        let job_id = self.job_id();
        let Some(processes) = self.processes() else {
            return tracing::debug!("job {job_id}: no process yet, SIGKILL deferred");
        };
        let alive = processes.any_alive().unwrap_or(true);
        let result = processes.kill();
        if let Err(e) = result {
            tracing::warn!("job {job_id}: cannot kill {processes}: {e}");
        }
        if alive {
            self.record.stop.kill_found_processes = true;
        }
    }

    fn persist(&self) {
        if let Err(e) = self.dir.write_record(&self.record) {
            tracing::error!(
                "job {}: cannot save its state (a noded restart would lose track): {e}",
                self.job_id()
            );
        }
    }

    /// Reports the job's end from what its shepherd recorded. `watched_exit`: noded saw the
    /// shepherd die just now, so the job's group id is still meaningful; after a restart
    /// (maybe a reboot) it may belong to someone else by now.
    pub async fn finish_after_shepherd(self, watched_exit: bool) {
        let exit = match self.dir.read_exit() {
            Ok(Some(exit)) => exit,
            Ok(None) => {
                tracing::warn!("job {}: its shepherd is gone without a word", self.job_id());
                // Nobody supervises the job anymore: don't leave it running unseen. A cgroup
                // is the job's for sure; a process group id only while noded watched the
                // shepherd (after a restart, maybe a reboot, it may be someone else's).
                let cgroup = self.record.plan.as_ref().and_then(|p| p.cgroup.as_ref());
                let job_pid = self.record.job_pid.filter(|_| watched_exit);
                if let Some(processes) = JobProcesses::of(cgroup, job_pid) {
                    let _ = processes.kill();
                    wait_briefly_until_gone(&processes).await;
                }
                ExitRecord {
                    end_time_ms: now_ms(),
                    error: Some("lost: shepherd gone".into()),
                    ..Default::default()
                }
            }
            Err(e) => ExitRecord {
                end_time_ms: now_ms(),
                error: Some(format!("lost: {e}")),
                ..Default::default()
            },
        };
        self.finish(exit).await
    }

    /// Records the job's end ([`FinishedRecord`]) in the spool (kept until acknowledged), stops
    /// tracking the job, and reports it.
    async fn finish(self, exit: ExitRecord) {
        let stop = &self.record.stop;
        // A job whose shepherd fenced it (the node's lease ran out, see `lease`) was stopped
        // as if asked to: its SIGTERM time, and a SIGKILL at the end of its grace.
        let fenced = exit.fenced;
        let term_time_ms = if stop.term_time_ms > 0 {
            stop.term_time_ms
        } else if fenced {
            exit.term_time_ms
        } else {
            0
        };
        let killed = (stop.kill_sent
            && (stop.kill_found_processes || exit.signal == Some(libc::SIGKILL)))
            || (fenced && exit.killed);
        // The shepherd removes them; not when it could not run, or died.
        if let Some(cgroup) = self.record.plan.as_ref().and_then(|p| p.cgroup.as_ref()) {
            if let Err(e) = cgroup.remove() {
                tracing::warn!("job {}: {e}", self.job_id());
            }
        }
        let checkpoint_dir = self.record.plan.as_ref().and_then(|p| p.checkpoint());
        let saved_after_term = match checkpoint_dir {
            Some(dir) if (stop.stop_requested || fenced) && term_time_ms > 0 && !killed => {
                tokio::task::spawn_blocking(move || newest_mtime_ms(&dir))
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|newest| newest + MTIME_GRANULARITY_MS > term_time_ms)
            }
            _ => false,
        };
        let finished = FinishedRecord {
            job_id: self.job_id(),
            restart_count: self.record.job.restart_count,
            exit_code: exit.exit_code,
            signal: exit.signal,
            end_time_ms: if exit.end_time_ms > 0 {
                exit.end_time_ms
            } else {
                now_ms()
            },
            timed_out: stop.timed_out,
            stop_requested: stop.stop_requested,
            term_time_ms,
            killed,
            checkpoint_saved: saved_after_term && exit.error.is_none(),
            error: exit.error.unwrap_or_default(),
            out_of_memory: exit.out_of_memory,
            fenced,
            node_fault: exit.node_fault,
        };
        tracing::info!(
            "job {} finished: exit {:?}, signal {:?}{}{}{}",
            finished.job_id,
            finished.exit_code,
            finished.signal,
            if finished.fenced {
                ", fenced (no word from schedd)"
            } else {
                ""
            },
            if finished.out_of_memory {
                ", out of memory"
            } else {
                ""
            },
            if finished.error.is_empty() {
                String::new()
            } else {
                format!(", error: {}", finished.error)
            }
        );
        if finished.node_fault {
            // Its node cannot run it: said (and the node drained) before its end is reported,
            // so that schedd does not place it here again.
            self.shared.launch_fault(&finished.error);
        }
        if let Err(e) = self.dir.write_finished(&finished) {
            // Kept in memory until schedd acknowledges it; a noded restarted before that
            // rebuilds it from `exit.json` (see the spool's docs).
            tracing::error!(
                "job {}: cannot record its end in the spool ({e}): kept in memory until \
                 schedd acknowledges it",
                finished.job_id
            );
            self.shared.spool_write_failed(&e);
            if self.record.shepherd_pid.is_none() {
                // It never started, and its directory holds nothing a restarted noded could
                // use: gone, so that it finds no job there to report as lost.
                let _ = self.shared.spool.remove_job(finished.job_id);
            }
            self.shared
                .unwritten_ends()
                .insert(finished.job_id, finished.clone());
        }
        self.shared.jobs().remove(&finished.job_id);
        self.shared.emit(JobEvent::Finished(finished));
    }
}

async fn next_line(lines: &mut Option<Announcement>) -> Option<String> {
    match lines {
        Some(lines) => lines.next_line().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// Gives processes just SIGKILLed a moment to go, so that their cgroup can be removed.
async fn wait_briefly_until_gone(processes: &JobProcesses<'_>) {
    for _ in 0..100 {
        if !processes.any_alive().unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn sleep_until_ms(deadline_ms: Option<i64>) {
    match deadline_ms {
        Some(deadline) => {
            let wait = u64::try_from(deadline - now_ms()).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await
        }
        None => std::future::pending().await,
    }
}
