//! noded's task per job, which starts or adopts it, stops it when due, and reports its end.
//!
//! The task creates the job's cgroups and hands the job to the node's supervisor (or
//! re-attaches to it after a restart, or to an older noded's per-job process), sends the warning
//! signal, SIGTERM and SIGKILL to every process of the job when asked or when the time limit
//! and grace run out (its stop progress told to the supervisor before each signal), and
//! reports the job's end. All of it reacts to events (the supervisor's lines, control
//! messages, timers); nothing polls.
//!
//! Its parts: [`start`] (the job's script, cgroups and hand-over), [`signals`] (reaching
//! every process of the job) and [`finish`] (the job's end, recorded and reported).

mod finish;
mod signals;
mod start;

pub(in crate::launch) use finish::{checkpoint_to_check, finished_record, saved_since, LOST};

use super::node_protocol::{self, BadLine, Reply, Request};
use super::process::{Announcement, JobOwner, SupervisorWriter};
use super::spool::{ExitRecord, FinishedRecord, JobDir, JobRecord, StopState};
use super::{Control, JobEvent, JobParams, JobStarted, Shared};
use nix::sys::signal::Signal;
use start::LaunchFailure;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use ysched_common::time::now_ms;

pub(super) struct JobTask {
    shared: Arc<Shared>,
    dir: JobDir,
    record: JobRecord,
    controls: mpsc::UnboundedReceiver<Control>,
    /// The stop's SIGTERM reached a process of the job (maybe before its exec, which it then
    /// ended): it is not sent again when the job's start is announced.
    term_delivered: bool,
    /// The write half of the job's connection to the node's supervisor, which its stop
    /// progress goes to; `None` for an older noded's per-job process (then `state.json` and
    /// `stopping` in the job's directory) or before the job is handed over.
    link: Option<SupervisorWriter>,
    /// A job of an older noded's per-job process: its state, stop notice and end in its directory's
    /// files.
    old_layout: bool,
    /// The node's supervisor said every process of the job is gone (`gone`, process-group
    /// containment only), its end not told yet: the group's number may be a new group's
    /// from then on, so nothing is signalled by it.
    processes_gone: bool,
}

impl JobTask {
    pub fn for_new_job(
        shared: Arc<Shared>,
        job: JobParams,
        controls: mpsc::UnboundedReceiver<Control>,
    ) -> Self {
        let record = JobRecord {
            job,
            plan: None,
            old_process_pid: None,
            supervised: false,
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
        let mut task = JobTask {
            shared,
            dir,
            record,
            controls,
            term_delivered: false,
            processes_gone: false,
            link: None,
            old_layout: false,
        };
        // An older noded's per-job process may have written `pid` after its noded last saved the
        // record.
        if task.record.plan.is_some() && task.record.job_pid.is_none() {
            if let Some(pid) = task.dir.read_job_pid() {
                task.record.job_pid = Some(pid);
                if task.record.start_time_ms == 0 {
                    task.record.start_time_ms = now_ms();
                }
            }
        }
        task
    }

    /// Marks a job of an older noded's per-job process (see [`JobTask::old_layout`]).
    pub fn of_old_layout(mut self) -> Self {
        self.old_layout = true;
        self
    }

    fn job_id(&self) -> u64 {
        self.record.job.job_id
    }

    /// A new job's whole life: plan it, hand it to the node's supervisor, supervise it, report
    /// its end.
    pub async fn launch(mut self) {
        match self.start().await {
            Ok((owner, announcement)) => self.supervise(owner, Some(announcement)).await,
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

    /// A job whose supervisor (or older noded's per-job process) survived a noded restart:
    /// supervise it from where it was. `connection`: the supervisor's, with its write half.
    pub async fn resume(
        mut self,
        owner: JobOwner,
        connection: Option<(Announcement, SupervisorWriter)>,
    ) {
        let announcement = connection.map(|(lines, writer)| {
            self.link = Some(writer);
            lines
        });
        self.supervise(owner, announcement).await
    }

    async fn supervise(mut self, mut owner: JobOwner, mut announcement: Option<Announcement>) {
        // How the supervisor's connection ended: the job's recorded end, or why it failed.
        let mut ended: Option<FinishedRecord> = None;
        let mut refused: Option<String> = None;
        loop {
            let deadline = self.next_deadline_ms();
            tokio::select! {
                // Biased: a start announcement is handled before the exit that may follow it.
                biased;
                // The supervisor's connection: its lines, then its end when the job is over.
                line = next_line(&mut announcement), if announcement.is_some() => {
                    let Some(line) = line else {
                        break;
                    };
                    match Reply::parse(&line) {
                        Ok(Reply::Started { pid, time_ms }) => {
                            ysched_common::stamp::stamp("n.started_line", self.job_id());
                            self.on_started(pid, time_ms.unwrap_or_else(now_ms))
                        }
                        Ok(Reply::Ended(finished)) => {
                            ysched_common::stamp::stamp("n.ended_line", self.job_id());
                            ended = Some(finished);
                            break;
                        }
                        Err(BadLine::Unreadable { verb: node_protocol::ENDED, why }) => {
                            tracing::error!(
                                "job {}: unreadable end from the supervisor: {why}",
                                self.job_id()
                            );
                            break;
                        }
                        Ok(Reply::Refused(why)) => {
                            refused = Some(why);
                            break;
                        }
                        // A late answer to a restarted noded's attach: the job is not there.
                        Ok(Reply::Unknown) => break,
                        Ok(Reply::Attached) => {}
                        Ok(Reply::Gone) => self.processes_gone = true,
                        Ok(_) | Err(_) => tracing::warn!(
                            "job {}: unexpected word from the supervisor {line:?}",
                            self.job_id()
                        ),
                    }
                }
                Some(control) = self.controls.recv() => self.on_control(control),
                () = sleep_until_ms(deadline) => self.on_deadline(),
                () = owner.exited() => break,
            }
        }
        if let Some(finished) = ended {
            // Recorded in the journal by the supervisor already.
            return self.report_end(finished);
        }
        if let Some(error) = refused {
            // Its launch could not be recorded (a full spool): it never started.
            let error = format!("cannot record the launch in the node's journal: {error}");
            self.shared.launch_fault(&error);
            self.shared
                .spool_write_failed(&std::io::Error::other(error.clone()));
            let exit = ExitRecord {
                end_time_ms: now_ms(),
                error: Some(error),
                node_fault: true,
                ..Default::default()
            };
            return self.finish(exit).await;
        }
        self.finish_after_owner_gone(true).await
    }

    fn on_started(&mut self, pid: u32, time_ms: i64) {
        self.record.job_pid = Some(pid);
        self.record.start_time_ms = time_ms;
        // An older noded's per-job process keeps the pid in the job's record file. The node's
        // supervisor told us both itself, and its journal has them: nothing to send.
        if self.link.is_none() {
            self.persist();
        }
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

    /// SIGTERM to every process now, SIGKILL due after `grace_secs`. The supervisor is told
    /// first, so that the main process dying of the SIGTERM does not end the others' grace.
    fn terminate(&mut self, now: i64, grace_secs: u32) {
        self.record.stop.term_time_ms = now;
        self.record.stop.kill_at_ms = Some(now + i64::from(grace_secs) * 1000);
        self.announce_stop();
        self.persist();
        self.term_delivered = self.signal_job(Signal::SIGTERM);
    }

    /// Tells the job's supervisor that the job is being stopped, before the first signal (its
    /// stop progress, or for an older noded's per-job process the `stopping` notice).
    fn announce_stop(&self) {
        if self.link.is_some() {
            return self.persist();
        }
        if let Err(e) = self.dir.write_stop_notice(self.record.stop.term_time_ms) {
            tracing::warn!(
                "job {}: cannot tell its process about the stop, so the job's main process \
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

    /// Saves the job's stop progress: sent to the node's supervisor (which journals it and
    /// keeps the others' grace when the main process ends), or for an older noded's
    /// per-job process written to `state.json`.
    fn persist(&self) {
        if let Some(link) = &self.link {
            let line = match Request::Stop(self.record.stop.clone()).to_line() {
                Ok(line) => line,
                Err(e) => return tracing::error!("job {}: {e}", self.job_id()),
            };
            // A line into a socket the supervisor keeps reading: written whole at once, or
            // the supervisor is gone (its connection's end says so).
            match link.try_write(line.as_bytes()) {
                Ok(n) if n == line.len() => {}
                Ok(_) => tracing::error!(
                    "job {}: its stop progress was cut short on the way to the supervisor",
                    self.job_id()
                ),
                Err(e) => tracing::warn!(
                    "job {}: cannot tell the supervisor about its stop: {e}",
                    self.job_id()
                ),
            }
            return;
        }
        if !self.old_layout {
            // Not handed over yet: the launch carries it.
            return;
        }
        if let Err(e) = self.dir.write_record(&self.record) {
            tracing::error!(
                "job {}: cannot save its state (a noded restart would lose track): {e}",
                self.job_id()
            );
        }
    }
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
