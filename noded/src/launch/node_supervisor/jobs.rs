//! The supervisor's jobs, from a launch recorded to an end told: starting each once its
//! launch is synced, reaping, waiting for a job's last process, recording and telling ends,
//! and the jobs a dead predecessor left.

use super::child::StartError;
use super::fence::Fence;
use super::first_process::{self, end_early, Early, Forked};
use super::job::Job;
use super::{log, sys, Supervisor, GROUP_POLL};
use crate::launch::cgroup::JobCgroup;
use crate::launch::job_task::{checkpoint_to_check, finished_record, saved_since, LOST};
use crate::launch::journal::{Entry, Receipt};
use crate::launch::node_protocol::Reply;
use crate::launch::process::newest_mtime_ms;
use crate::launch::spool::{ExitRecord, FinishedRecord, JobDir, JobRecord};
use crate::launch::tracking::JobProcesses;
use crate::launch::ExecPlan;
use std::fs::File;
use std::io::Write;
use ysched_common::time::now_ms;

/// A launch whose record is not synced yet: started once it is.
pub(super) struct Launching {
    pub(super) record: JobRecord,
    pub(super) receipt: Receipt,
    /// The job's first process, forked as soon as the launch was appended, so that its setup
    /// overlaps the journal's sync; `None` where it could not be (started once recorded, as
    /// before, which ends the job with the reason).
    pub(super) early: Option<Early>,
}

/// An end whose record is not synced yet: told once it is.
pub(super) struct Ending {
    pub(super) finished: FinishedRecord,
    /// The job's record, listed as running until its end is synced and told.
    pub(super) record: JobRecord,
    pub(super) receipt: Receipt,
}

/// An end waiting for a look at the job's checkpoint directory.
pub(super) struct Checking {
    pub(super) record: JobRecord,
    pub(super) exit: ExitRecord,
    pub(super) saved: std::sync::mpsc::Receiver<bool>,
}

impl Supervisor {
    /// A new job: its launch is recorded (synced) first, and it starts once that is done
    /// (see [`Supervisor::start_committed_launches`]); its first process is forked meanwhile
    /// and waits before its exec (see [`Launching::early`]).
    pub(super) fn launch(&mut self, id: u64, record: JobRecord) {
        let job_id = record.job.job_id;
        self.follow(id, job_id);
        if self.jobs.contains_key(&job_id)
            || self.launching.iter().any(|l| l.record.job.job_id == job_id)
        {
            // A repeated launch (noded refuses another run of a running job itself).
            return;
        }
        let receipt = self
            .journal
            .append(Entry::Launched(Box::new(record.clone())));
        let early = self.fork_early(&record);
        self.launching.push(Launching {
            record,
            receipt,
            early,
        });
    }

    /// Starts the jobs whose launch is synced now; answers `refused` for those whose launch
    /// could not be recorded.
    pub(super) fn start_committed_launches(&mut self) {
        let mut index = 0;
        while index < self.launching.len() {
            let Some(result) = self.launching[index].receipt.try_take() else {
                index += 1;
                continue;
            };
            let launching = self.launching.remove(index);
            let job_id = launching.record.job.job_id;
            match result {
                Ok(()) => {
                    ysched_common::stamp::stamp("s.launch_synced", job_id);
                    self.start(launching.record, launching.early)
                }
                Err(e) => {
                    if let Some(early) = launching.early {
                        end_early(&launching.record, early);
                    }
                    log(&format!(
                        "job {job_id}: launch not recorded, not started: {e}"
                    ));
                    for id in self.followers(job_id) {
                        self.reply(id, &Reply::Refused(e.to_string()));
                        self.connections.remove(&id);
                    }
                }
            }
        }
    }

    /// Starts a job whose launch is recorded: lets its first process, forked `early`, exec
    /// (or forks it now) and watches it. A job that cannot start ends at once.
    pub(super) fn start(&mut self, record: JobRecord, early: Option<Early>) {
        let dir = self.job_dir(record.job.job_id);
        let Some(plan) = record.plan.clone() else {
            let exit = failed("the job has no execution plan", false);
            return self.finish(record, exit);
        };
        match early {
            Some(early) => {
                // One byte into an empty pipe: never blocks. A child already gone (a failed
                // setup step) is told nothing; its step pipe or status says why.
                let _ = File::from(early.go).write(&[1]);
                self.watch(record, dir, plan, early.forked, early.status);
            }
            None => match first_process::create(&dir, &plan, None) {
                Ok(forked) => self.watch(record, dir, plan, forked, None),
                Err(error) => self.not_started(record, &plan, error),
            },
        }
    }

    /// Where the supervisor keeps job `job_id`'s files.
    pub(super) fn job_dir(&self, job_id: u64) -> JobDir {
        JobDir::new(self.spool.join("jobs").join(job_id.to_string()))
    }

    /// Forks a job's first process before its launch is recorded (see [`Launching::early`]):
    /// it sets up and waits for [`Supervisor::start`]. `None` where it cannot be: no plan, no
    /// pipe, or the fork failed (then forked again once recorded, which fails the same way and
    /// ends the job with the reason, its cgroup removed then).
    pub(super) fn fork_early(&self, record: &JobRecord) -> Option<Early> {
        let plan = record.plan.as_ref()?;
        let (go_read, go) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        let forked =
            first_process::create(&self.job_dir(record.job.job_id), plan, Some(go_read)).ok()?;
        Some(Early {
            forked,
            go,
            status: None,
        })
    }

    /// Watches a job's first process, forked (and, with `status`, already reaped).
    pub(super) fn watch(
        &mut self,
        record: JobRecord,
        dir: JobDir,
        plan: ExecPlan,
        forked: Forked,
        status: Option<libc::c_int>,
    ) {
        let job_id = record.job.job_id;
        let Forked {
            pid,
            pidfd,
            step_pipe,
            events,
            child,
        } = forked;
        ysched_common::stamp::stamp("s.forked", job_id);
        log(&format!("job {job_id}: forked as pid {pid}"));
        let stop_notice = (record.stop.term_time_ms > 0 || record.stop.kill_sent)
            .then_some(record.stop.term_time_ms);
        let mut job = Job {
            dir,
            grace_secs: record.job.grace_secs,
            record,
            plan,
            stop_notice,
            pid,
            pidfd: Some(pidfd),
            step_pipe: Some(step_pipe),
            child,
            failure: None,
            status: None,
            events,
            announced: false,
            draining: None,
            said_slow: false,
            fence: Fence::default(),
        };
        if let Some(status) = status {
            // Reaped while it waited for its launch to be recorded (see `reap`).
            job.status = Some(status);
            job.pidfd = None;
            job.main_ended();
        }
        self.jobs.insert(job_id, job);
        // The lease may have run out already: fenced from its first moment.
        if self.lease.out {
            self.fence_jobs();
        }
    }

    /// A job whose first process could not be forked ends at once, with the reason.
    pub(super) fn not_started(&mut self, record: JobRecord, plan: &ExecPlan, error: StartError) {
        let job_id = record.job.job_id;
        log(&format!("job {job_id}: did not start: {}", error.error));
        if let Some(cgroup) = &plan.cgroup {
            if let Err(e) = cgroup.remove() {
                log(&format!("cannot remove the job's cgroups: {e}"));
            }
        }
        let exit = ExitRecord {
            error: Some(error.error),
            node_fault: error.node_fault,
            end_time_ms: now_ms(),
            ..Default::default()
        };
        self.finish(record, exit);
    }

    /// A job is over: its end is recorded (after a look at its checkpoint directory where
    /// it matters), then told.
    pub(super) fn finish(&mut self, record: JobRecord, exit: ExitRecord) {
        match checkpoint_to_check(&record, &exit) {
            Some((dir, term_time_ms)) => {
                let (tell, saved) = std::sync::mpsc::channel();
                let wake = self.checkpoint_wake.try_clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("checkpoint".into())
                        .spawn(move || {
                            let _ = tell.send(saved_since(newest_mtime_ms(&dir), term_time_ms));
                            if let Ok(wake) = wake {
                                let _ = (&wake).write(&[1]);
                            }
                        });
                match spawned {
                    Ok(_) => self.checking.push(Checking {
                        record,
                        exit,
                        saved,
                    }),
                    Err(e) => {
                        log(&format!("cannot look at the checkpoint directory: {e}"));
                        self.record_end(finished_record(&record, exit, false), record);
                    }
                }
            }
            None => {
                let finished = finished_record(&record, exit, false);
                self.record_end(finished, record)
            }
        }
    }

    /// Ends whose checkpoint look is done.
    pub(super) fn end_checked(&mut self) {
        let mut index = 0;
        while index < self.checking.len() {
            let saved = match self.checking[index].saved.try_recv() {
                Ok(saved) => saved,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    index += 1;
                    continue;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => false,
            };
            let Checking { record, exit, .. } = self.checking.remove(index);
            let finished = finished_record(&record, exit, saved);
            self.record_end(finished, record);
        }
    }

    pub(super) fn record_end(&mut self, finished: FinishedRecord, record: JobRecord) {
        ysched_common::stamp::stamp("s.end_appended", finished.job_id);
        let receipt = self.journal.append(Entry::Ended(finished.clone()));
        self.ending.push(Ending {
            finished,
            record,
            receipt,
        });
    }

    /// Tells noded the ends now synced (`ended <json>`), and closes their connections.
    pub(super) fn tell_committed_ends(&mut self) {
        let mut index = 0;
        while index < self.ending.len() {
            let Some(result) = self.ending[index].receipt.try_take() else {
                index += 1;
                continue;
            };
            let Ending { finished, .. } = self.ending.remove(index);
            let job_id = finished.job_id;
            ysched_common::stamp::stamp("s.end_synced", job_id);
            if let Err(e) = result {
                // The room reserved for it makes this a failing disk: noded keeps it in
                // memory until schedd has it.
                log(&format!(
                    "job {job_id}: cannot record its end in the journal: {e}"
                ));
            }
            let line = match Reply::Ended(finished).to_line() {
                Ok(line) => line,
                Err(e) => {
                    log(&format!("job {job_id}: {e}"));
                    continue;
                }
            };
            for id in self.followers(job_id) {
                self.send(id, &line);
                self.connections.remove(&id);
            }
            ysched_common::stamp::stamp("s.end_told", job_id);
        }
    }

    /// Answers the `record` requests now synced.
    pub(super) fn answer_committed_records(&mut self) {
        let mut index = 0;
        while index < self.recording.len() {
            let Some(result) = self.recording[index].1.try_take() else {
                index += 1;
                continue;
            };
            let (id, _) = self.recording.remove(index);
            match result {
                Ok(()) => self.reply(id, &Reply::Recorded),
                Err(e) => self.reply(id, &Reply::Failed(e.to_string())),
            }
            self.connections.remove(&id);
        }
    }

    /// The jobs a dead predecessor ran (the journal's launches without an end): lost, as
    /// their processes are nobody's children now. What is left in their cgroups is killed
    /// (a process group id may be someone else's by now: left alone).
    pub(super) fn record_lost(&mut self, unended: Vec<JobRecord>) {
        for record in unended {
            let job_id = record.job.job_id;
            log(&format!(
                "job {job_id}: launched by an earlier supervisor that is gone: lost"
            ));
            if let Some(cgroup) = record.plan.as_ref().and_then(|p| p.cgroup.as_ref()) {
                if let Some(processes) = JobProcesses::of(Some(cgroup), None) {
                    let _ = processes.kill();
                    // A moment for them to go, so that the cgroup can be removed; an
                    // unkillable one (uninterruptible I/O) leaves it behind, said below.
                    for _ in 0..100 {
                        if !processes.any_alive().unwrap_or(false) {
                            break;
                        }
                        std::thread::sleep(GROUP_POLL);
                    }
                }
                if let Err(e) = cgroup.remove() {
                    log(&format!("job {job_id}: cannot remove its cgroups: {e}"));
                }
            }
            let exit = ExitRecord {
                end_time_ms: now_ms(),
                error: Some(LOST.into()),
                ..Default::default()
            };
            let finished = finished_record(&record, exit, false);
            self.record_end(finished, record);
        }
    }

    /// Journals the pid of every job that has exec'd since the last look (unsynced: a pid
    /// means nothing after a power loss), and tells the connections following it
    /// (`started <pid> <time_ms>`), once.
    pub(super) fn announce_starts(&mut self) {
        let mut starts = Vec::new();
        let mut late_joins = Vec::new();
        for (&job_id, job) in &mut self.jobs {
            if job.announced || job.step_pipe.is_some() || job.failure.is_some() {
                continue;
            }
            job.announced = true;
            let start_time_ms = now_ms();
            job.record.job_pid = Some(job.pid);
            job.record.start_time_ms = start_time_ms;
            if let Some(cgroup) = job
                .plan
                .cgroup
                .as_ref()
                .filter(|c| !c.v1_joined_after_exec.is_empty())
            {
                late_joins.push((job_id, cgroup.clone()));
            }
            let _ = self.journal.append(Entry::Started {
                job_id,
                job_pid: job.pid,
                start_time_ms,
            });
            ysched_common::stamp::stamp("s.started_told", job_id);
            let started = Reply::Started {
                pid: job.pid,
                time_ms: Some(start_time_ms),
            };
            starts.push((job_id, started));
        }
        for (job_id, started) in starts {
            for id in self.followers(job_id) {
                self.reply(id, &started);
            }
        }
        for (job_id, cgroup) in late_joins {
            self.join_after_exec(job_id, cgroup);
        }
    }

    /// Hands a job that has exec'd to the thread that moves it into the cgroups it joins
    /// after its exec (started at the first); done here, blocking, when no thread can be
    /// started.
    pub(super) fn join_after_exec(&mut self, job_id: u64, cgroup: JobCgroup) {
        let join = |job_id: u64, cgroup: &JobCgroup| {
            if let Err(e) = cgroup.join_after_exec() {
                log(&format!("job {job_id}: cannot apply its CPU limit: {e}"));
            }
            ysched_common::stamp::stamp("s.late_joined", job_id);
        };
        if self.late_joins.is_none() {
            let (send, receive) = std::sync::mpsc::channel::<(u64, JobCgroup)>();
            let spawned = std::thread::Builder::new()
                .name("cgroup-join".into())
                .spawn(move || {
                    for (job_id, cgroup) in receive {
                        join(job_id, &cgroup);
                    }
                });
            match spawned {
                Ok(_) => self.late_joins = Some(send),
                Err(e) => log(&format!("cannot start a thread: {e}")),
            }
        }
        let unsent = match &self.late_joins {
            Some(late_joins) => late_joins.send((job_id, cgroup)).err().map(|e| e.0 .1),
            None => Some(cgroup),
        };
        if let Some(cgroup) = unsent {
            join(job_id, &cgroup);
        }
    }

    /// Collects every ended child: a job's main process (its status kept), or an orphan of a
    /// job (this process is their subreaper).
    pub(super) fn reap(&mut self) {
        while let Some((pid, status)) = sys::reap_one() {
            if let Some(job) = self
                .jobs
                .values_mut()
                .find(|j| j.pid == pid && j.status.is_none())
            {
                ysched_common::stamp::stamp("s.reaped", job.record.job.job_id);
                job.status = Some(status);
                job.pidfd = None;
                if let Some(child) = job.child.take() {
                    child.release();
                }
                job.main_ended();
            } else if let Some(early) = self
                .launching
                .iter_mut()
                .filter_map(|l| l.early.as_mut())
                .find(|e| e.forked.pid == pid && e.status.is_none())
            {
                early.status = Some(status);
                if let Some(child) = early.forked.child.take() {
                    child.release();
                }
            }
        }
    }

    /// Finishes the jobs whose every process is gone.
    pub(super) fn drain_and_finish(&mut self) {
        let over: Vec<u64> = self
            .jobs
            .iter_mut()
            .filter_map(|(&job_id, job)| {
                (job.draining.is_some() && job.all_gone()).then_some(job_id)
            })
            .collect();
        for job_id in over {
            let Some(job) = self.jobs.remove(&job_id) else {
                continue;
            };
            ysched_common::stamp::stamp("s.all_gone", job_id);
            if job.plan.cgroup.is_none() {
                self.say_group_gone(job_id);
            }
            let exit = job.exit_record();
            if let Some(cgroup) = &job.plan.cgroup {
                if let Err(e) = cgroup.remove() {
                    log(&format!("job {job_id}: cannot remove its cgroups: {e}"));
                }
            }
            ysched_common::stamp::stamp("s.cgroup_removed", job_id);
            self.finish(job.record, exit);
        }
    }
}

fn failed(error: &str, node_fault: bool) -> ExitRecord {
    ExitRecord {
        end_time_ms: now_ms(),
        error: Some(error.to_string()),
        node_fault,
        ..Default::default()
    }
}
