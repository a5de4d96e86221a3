//! Picking up the jobs of an earlier noded at start: those of the node's supervisor (and the
//! ends schedd has not acknowledged), then those of an older noded's per-job processes.

use super::job_task::JobTask;
use super::process::{is_old_job_process, JobOwner};
use super::spool::{self, FinishedRecord, JobRecord};
use super::supervisor_client::list_jobs;
use super::{journal, Control, ExecPlan, JobEvent, JobHandle, Launcher};
use std::io;
use tokio::sync::mpsc;

/// How long a restarted noded waits for the supervisor's list of jobs before it reads the
/// journal itself (a stopped supervisor must not hang noded's start).
const LIST_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// What [`Launcher::recover`] found in the spool.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Jobs still running, followed again.
    pub reattached: Vec<u64>,
    /// Jobs that ended while noded was away (their end is now in the spool).
    pub ended: Vec<u64>,
}

impl JobHandle {
    /// The handle of a job found at start, from its record, and the receiving end of its
    /// controls (for its task).
    fn recovered(record: &JobRecord) -> (JobHandle, mpsc::UnboundedReceiver<Control>) {
        let (controls, receiver) = mpsc::unbounded_channel();
        let handle = JobHandle {
            restart_count: record.job.restart_count,
            uid: record.job.uid,
            controls,
            checkpoint_dir: record.plan.as_ref().and_then(ExecPlan::checkpoint),
        };
        (handle, receiver)
    }
}

/// Thaws the cgroup of a job found at start: noded may have stopped while it had the job
/// frozen to signal it.
fn thaw_recovered(record: &JobRecord) {
    if let Some(cgroup) = record.plan.as_ref().and_then(|p| p.cgroup.as_ref()) {
        if let Err(e) = cgroup.thaw() {
            tracing::warn!("job {}: cannot thaw its cgroup: {e}", record.job.job_id);
        }
    }
}

impl Launcher {
    /// Picks up the jobs of an earlier noded: asks the node's supervisor (started when the
    /// node has a journal and none runs, which then records the jobs its dead predecessor
    /// ran as lost) for the jobs it runs, re-attaches to them (resuming their timers), and
    /// reports the ends schedd has not acknowledged; then re-attaches to an older noded's
    /// live per-job processes (`jobs/<id>/state.json`) and finishes those whose process is
    /// gone.
    /// Call once, at start, before launching anything.
    pub async fn recover(&self) -> io::Result<Recovery> {
        let mut recovery = Recovery::default();
        if self.recover_journal(&mut recovery).await? {
            self.keep_supervisor();
        }
        self.recover_old_layout(&mut recovery).await?;
        Ok(recovery)
    }

    /// Whether a supervisor runs now (one ran, or the node has a journal).
    async fn recover_journal(&self, recovery: &mut Recovery) -> io::Result<bool> {
        let has_journal = self
            .shared
            .spool
            .root()
            .join(journal::JOURNAL_FILE)
            .exists();
        let stream = match self.shared.connect_supervisor(has_journal).await {
            Ok(stream) => stream,
            Err(_) if !has_journal => return Ok(false),
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot reach the node's supervisor: {e}"),
                ))
            }
        };
        let listed = tokio::time::timeout(LIST_ANSWER, list_jobs(stream)).await;
        let (running, ended) = match listed {
            Ok(listed) => listed?,
            Err(_) => {
                // Alive (it took the connection) but not answering: stopped, or busy. Its
                // journal says the same, as of its last write.
                tracing::warn!(
                    "the node's supervisor did not list its jobs within {LIST_ANSWER:?}: \
                     reading its journal"
                );
                let root = self.shared.spool.root().to_path_buf();
                let live = tokio::task::spawn_blocking(move || journal::read_live(&root))
                    .await
                    .map_err(io::Error::other)??;
                let running: Vec<JobRecord> = live.unended().cloned().collect();
                let ended: Vec<FinishedRecord> = live.unacked_ends().cloned().collect();
                (running, ended)
            }
        };
        for finished in ended {
            let job_id = finished.job_id;
            tracing::info!("job {job_id}: ended while noded was away");
            self.shared.recorded_ends().insert(job_id, finished.clone());
            self.shared.emit(JobEvent::Finished(finished));
            recovery.ended.push(job_id);
        }
        for record in running {
            let job_id = record.job.job_id;
            if self.shared.jobs().contains_key(&job_id) {
                continue;
            }
            let connection = self.attach(job_id).await;
            let (handle, receiver) = JobHandle::recovered(&record);
            thaw_recovered(&record);
            let task = JobTask::for_recovered_job(self.shared.clone(), record, receiver);
            tracing::info!("job {job_id}: re-attached to its supervisor");
            // With no connection (the supervisor went away meanwhile), the job's task finds
            // it lost at once.
            self.supervise(
                &mut self.shared.jobs(),
                job_id,
                handle,
                task.resume(JobOwner::NodeSupervisor, connection),
            );
            recovery.reattached.push(job_id);
        }
        Ok(true)
    }

    /// The jobs of an older noded, one process per job and a directory of
    /// files per job (see [`spool`]).
    async fn recover_old_layout(&self, recovery: &mut Recovery) -> io::Result<()> {
        let spool = self.shared.spool.clone();
        let found = tokio::task::spawn_blocking(move || spool::scan_spool(&spool))
            .await
            .map_err(io::Error::other)??;
        for job in found {
            let job_id = job.job_id;
            if self.shared.jobs().contains_key(&job_id) {
                continue;
            }
            let record = job.record.unwrap_or_else(|e| {
                tracing::error!("job {job_id}: {e}");
                JobRecord::unreadable(job_id)
            });
            let old_process = job.old_process_pid.and_then(|pid| {
                let owner = JobOwner::adopt(pid).ok()?;
                // Checked again now that the pidfd pins the process: the pid may have been
                // reused between the scan and the pidfd.
                let dir = self.shared.spool.job_dir(job_id);
                is_old_job_process(pid, dir.path()).then_some(owner)
            });
            let (handle, receiver) = JobHandle::recovered(&record);
            if old_process.is_some() {
                thaw_recovered(&record);
            }
            // An older noded's job: its stop progress and end go to its own files.
            let task =
                JobTask::for_recovered_job(self.shared.clone(), record, receiver).of_old_layout();
            match old_process {
                Some(owner) => {
                    tracing::info!("job {job_id}: re-attached to its process");
                    self.supervise(
                        &mut self.shared.jobs(),
                        job_id,
                        handle,
                        task.resume(owner, None),
                    );
                    recovery.reattached.push(job_id);
                }
                None => {
                    tracing::info!("job {job_id}: ended while noded was away");
                    task.finish_after_owner_gone(false).await;
                    recovery.ended.push(job_id);
                }
            }
        }
        Ok(())
    }
}
