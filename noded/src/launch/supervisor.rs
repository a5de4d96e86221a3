//! One task per job: starts its shepherd (or adopts it after a restart), sends SIGTERM and
//! SIGKILL when asked or when the time limit and grace run out, and reports the job's end.
//! All of it reacts to events (shepherd exit, control messages, timers); nothing polls.

use super::checkpoint;
use super::job::{plan_job, write_script, JobParams};
use super::process::{find_shepherd, is_shepherd_of, newest_mtime_ms, signal_group, Shepherd};
use super::spool::{ExitRecord, FinishedRecord, JobDir, JobRecord, Spool, StopState, FILE_MODE};
use super::{Control, JobEvent, Shared, SHEPHERD_SUBCOMMAND};
use nix::sys::signal::Signal;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use tokio::sync::mpsc;
use ysched_common::time::now_ms;
use ysched_proto as pb;

/// File timestamps come from the kernel's coarse clock, which lags the precise clock noded
/// reads by up to a tick: a checkpoint written right after SIGTERM can look a few ms older.
const MTIME_GRANULARITY_MS: i64 = 10;

/// The shepherd's start announcement: `started <pid> <time_ms>`.
type Announcement = Lines<BufReader<ChildStdout>>;

pub(super) struct Supervisor {
    shared: Arc<Shared>,
    dir: JobDir,
    record: JobRecord,
    controls: mpsc::UnboundedReceiver<Control>,
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
            Err(error) => {
                tracing::warn!("job {}: cannot start: {error}", self.job_id());
                let exit = ExitRecord {
                    end_time_ms: now_ms(),
                    error: Some(error),
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

    /// Prepares the spool directory and starts the shepherd. The error is the message for
    /// `JobFinished.error`.
    async fn start(&mut self) -> Result<(Shepherd, Announcement), String> {
        let shared = self.shared.clone();
        let job = self.record.job.clone();
        let plan = tokio::task::spawn_blocking(move || {
            let dir = shared
                .spool
                .create_job_dir(job.job_id)
                .map_err(|e| format!("cannot create the job's spool directory: {e}"))?;
            // Before anything else is looked at: no message from schedd starts a root process
            // on a node that refuses them.
            if job.uid == 0 && !shared.allow_root_jobs {
                // Logged (as "job N: cannot start: ...") and reported by `launch`.
                return Err(format!(
                    "node {} refuses to run jobs as root (node.allow_root_jobs = false)",
                    shared.node_name
                ));
            }
            let plan = plan_job(&job, &shared.node_name, &dir.script())?;
            if let Some(checkpoint_dir) = &plan.checkpoint_dir {
                checkpoint::prepare(checkpoint_dir, job.job_id, plan.uid, plan.gid)?;
            }
            write_script(&dir.script(), &job, &plan)
                .map_err(|e| format!("cannot write the job script: {e}"))?;
            Ok::<_, String>(plan)
        })
        .await
        .map_err(|e| format!("internal error preparing the job: {e}"))??;
        self.record.plan = Some(plan);
        // The shepherd reads its plan from here, so this write must succeed.
        self.dir
            .write_record(&self.record)
            .map_err(|e| format!("cannot write the job state: {e}"))?;

        let mut child = self
            .spawn_shepherd()
            .map_err(|e| format!("cannot start the job's shepherd: {e}"))?;
        self.record.shepherd_pid = child.id();
        self.persist();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| "the shepherd has no stdout pipe".to_string())?;
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
        self.shared.emit(JobEvent::Started(pb::JobStarted {
            job_id: self.job_id(),
            pid,
            time_ms,
        }));
        // A stop that arrived while the job was starting could not be delivered yet.
        if self.record.stop.kill_sent {
            self.signal_job(Signal::SIGKILL);
        } else if self.record.stop.term_time_ms > 0 {
            self.signal_job(Signal::SIGTERM);
        }
    }

    fn on_control(&mut self, control: Control) {
        let now = now_ms();
        let stop = &mut self.record.stop;
        stop.stop_requested = true;
        match control {
            Control::Stop { grace_secs } => {
                let kill_at = now + i64::from(grace_secs) * 1000;
                if stop.kill_sent {
                    return self.persist();
                }
                if stop.term_time_ms == 0 {
                    tracing::info!("job {}: stop requested, grace {grace_secs}s", self.job_id());
                    self.terminate(now, grace_secs);
                } else {
                    // Already terminating: a shorter grace wins, a longer one changes nothing.
                    stop.kill_at_ms = Some(stop.kill_at_ms.map_or(kill_at, |at| at.min(kill_at)));
                }
            }
            Control::Kill => {
                if !stop.kill_sent {
                    stop.kill_sent = true;
                    tracing::info!("job {}: killing", self.job_id());
                    self.signal_job(Signal::SIGKILL);
                }
            }
        }
        self.persist();
    }

    /// SIGTERM now, SIGKILL due after `grace_secs`.
    fn terminate(&mut self, now: i64, grace_secs: u32) {
        self.record.stop.term_time_ms = now;
        self.record.stop.kill_at_ms = Some(now + i64::from(grace_secs) * 1000);
        self.signal_job(Signal::SIGTERM);
    }

    /// When the next timer fires: the time limit until SIGTERM, then the end of the grace.
    fn next_deadline_ms(&self) -> Option<i64> {
        let stop = &self.record.stop;
        let limit_secs = i64::try_from(self.record.job.time_limit_secs).unwrap_or(i64::MAX);
        if stop.kill_sent {
            None
        } else if stop.term_time_ms > 0 {
            stop.kill_at_ms
        } else if limit_secs > 0 && self.record.start_time_ms > 0 {
            Some(
                self.record
                    .start_time_ms
                    .saturating_add(limit_secs.saturating_mul(1000)),
            )
        } else {
            None
        }
    }

    fn on_deadline(&mut self) {
        let now = now_ms();
        if self.record.stop.term_time_ms == 0 {
            tracing::info!("job {}: time limit reached", self.job_id());
            self.record.stop.timed_out = true;
            self.terminate(now, self.record.job.grace_secs);
        } else if !self.record.stop.kill_sent {
            tracing::info!("job {}: grace over, killing", self.job_id());
            self.record.stop.kill_sent = true;
            self.signal_job(Signal::SIGKILL);
        }
        self.persist();
    }

    fn signal_job(&mut self, signal: Signal) {
        if self.record.job_pid.is_none() {
            self.record.job_pid = self.dir.read_job_pid();
        }
        let job_id = self.job_id();
        match self.record.job_pid {
            Some(pgid) => match signal_group(pgid, signal) {
                Ok(true) => tracing::debug!("job {job_id}: sent {signal} to group {pgid}"),
                Ok(false) => tracing::debug!("job {job_id}: group {pgid} already gone"),
                Err(e) => tracing::warn!("job {job_id}: cannot send {signal} to group {pgid}: {e}"),
            },
            // Delivered by on_started once the job's pid is known.
            None => tracing::debug!("job {job_id}: not started yet, {signal} deferred"),
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
                if watched_exit {
                    // Nobody supervises the job anymore: don't leave it running unseen.
                    if let Some(pgid) = self.record.job_pid {
                        let _ = signal_group(pgid, Signal::SIGKILL);
                    }
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

    /// Records the job's `JobFinished` in the spool (kept until acknowledged), stops
    /// tracking the job, and reports it.
    async fn finish(self, exit: ExitRecord) {
        let stop = &self.record.stop;
        let killed = stop.kill_sent && exit.signal == Some(libc::SIGKILL);
        let checkpoint_dir = self
            .record
            .plan
            .as_ref()
            .and_then(|p| p.checkpoint_dir.clone());
        let saved_after_term = match checkpoint_dir {
            Some(dir) if stop.stop_requested && stop.term_time_ms > 0 && !killed => {
                let term_time_ms = stop.term_time_ms;
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
            term_time_ms: stop.term_time_ms,
            killed,
            checkpoint_saved: saved_after_term && exit.error.is_none(),
            error: exit.error.unwrap_or_default(),
        };
        tracing::info!(
            "job {} finished: exit {:?}, signal {:?}{}",
            finished.job_id,
            finished.exit_code,
            finished.signal,
            if finished.error.is_empty() {
                String::new()
            } else {
                format!(", error: {}", finished.error)
            }
        );
        if let Err(e) = self.dir.write_finished(&finished) {
            tracing::error!(
                "job {}: cannot record its end in the spool: {e}",
                finished.job_id
            );
        }
        self.shared.jobs().remove(&finished.job_id);
        self.shared
            .emit(JobEvent::Finished(pb::JobFinished::from(&finished)));
    }
}

/// A job found in the spool at start: its record and its shepherd, if one still runs.
pub(super) struct FoundJob {
    pub job_id: u64,
    pub record: Result<JobRecord, String>,
    pub shepherd_pid: Option<u32>,
}

/// The spool's jobs that are not finished yet (no `finished.json`), each with its live
/// shepherd's pid when there is one.
pub(super) fn scan_spool(spool: &Spool) -> std::io::Result<Vec<FoundJob>> {
    let mut found = Vec::new();
    for job_id in spool.job_ids()? {
        let dir = spool.job_dir(job_id);
        match dir.read_finished() {
            Ok(Some(_)) => continue, // ended earlier, waiting for schedd's acknowledgement
            Ok(None) => {}
            Err(e) => {
                tracing::error!("job {job_id}: unreadable end record, skipped: {e}");
                continue;
            }
        }
        let record = dir.read_record().map_err(|e| e.to_string());
        let shepherd_pid = match &record {
            Ok(JobRecord {
                shepherd_pid: Some(pid),
                ..
            }) => Some(*pid).filter(|&pid| is_shepherd_of(pid, dir.path())),
            // noded stopped before recording the pid (or the state): look for it.
            _ => find_shepherd(dir.path()),
        };
        found.push(FoundJob {
            job_id,
            record,
            shepherd_pid,
        });
    }
    Ok(found)
}

async fn next_line(lines: &mut Option<Announcement>) -> Option<String> {
    match lines {
        Some(lines) => lines.next_line().await.ok().flatten(),
        None => std::future::pending().await,
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
