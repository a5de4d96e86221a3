//! Running jobs: real processes, real signals, surviving noded restarts.
//!
//! Every job is handed to the node's *supervisor* (one long-lived process per node, the noded
//! binary run as `noded __supervisor <spool>` in its own session, see [`node_supervisor`]),
//! which records its launch in the node's journal (see [`journal`]), starts it as the
//! submitting user, and records its end there. noded speaks to it in the node protocol (see
//! [`node_protocol`], and [`supervisor_client`] for noded's side). Where the host allows,
//! each job runs in its own cgroup, created by noded before the job is handed over, which
//! holds every process the job starts and carries its limits (see [`containment`]);
//! otherwise in its own process group. The supervisor closes the job's connection when the
//! last of those processes has ended, so noded, which follows each job in one task (see
//! [`job_task`]), learns of the job's end as an event. That task also runs the warning,
//! time-limit and grace timers and reports [`JobEvent`]s on a channel.
//!
//! After a restart, [`Launcher::recover`] asks the supervisor for its jobs and the ends schedd
//! has not acknowledged (or reads its journal, when it does not answer), re-attaches to them
//! and resumes their timers from their journaled stop progress (see [`recovery`]). A
//! supervisor that starts after another died reports the jobs the journal says were running
//! as lost. An older noded ran one process per job instead: those still running are adopted
//! from their files in the [`spool`].
//!
//! The supervisor also stops the jobs on its own when the node's fence lease runs out (see
//! [`lease`]): the agent renews it while schedd answers.
//!
//! The launcher also knows whether this node can take jobs ([`Launcher::unhealthy_reason`]):
//! not while its spool cannot be written (a launch's write failed, or the probe at each
//! heartbeat, [`Launcher::check_health`], fails or finds less than `node.spool_reserve_mib`
//! free), nor for a while after a launch failed for a reason of the node's (its cgroups,
//! forking). The agent tells schedd, which drains the node meanwhile. A full spool never
//! ends a running job: the lease is rewritten in place, the journal keeps room allocated for
//! the end of every running job, and an end that cannot be recorded is kept in memory until
//! schedd acknowledges it.

pub mod cgroup;
mod checkpoint;
pub mod checkpoint_scan;
pub mod containment;
mod environment;
mod health;
mod job;
mod job_task;
pub mod journal;
pub mod lease;
mod node_protocol;
pub mod node_supervisor;
mod process;
mod recovery;
pub mod spool;
mod supervisor_client;
mod tracking;

pub use cgroup::JobCgroup;
pub use checkpoint::FALLBACK_CHECKPOINT_ROOT;
pub use containment::{CgroupRoot, Containment, JobLimits, LimitSource};
pub use environment::job_environment;
pub use job::{expand_pattern, plan_job, ArrayTaskParams, ExecPlan, JobParams, PatternVars};
pub use process::{newest_mtime_ms, signal_group};
pub use recovery::Recovery;
pub use spool::{ExitRecord, FinishedRecord, JobDir, JobRecord, Spool, StopState};

use health::Health;
use job_task::JobTask;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What noded tells schedd about its jobs (put on the wire by the agent, see
/// [`crate::convert`]).
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    Started(JobStarted),
    /// The job's end, as kept in the spool until schedd acknowledges it.
    Finished(FinishedRecord),
    /// Whether this node can take jobs changed: why not, or `None` when it can again (see
    /// [`Launcher::unhealthy_reason`]). Sent before the end of a launch that failed for it.
    Health(Option<String>),
}

/// A job's main process was started (its exec done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStarted {
    pub job_id: u64,
    /// The job's pid, which is also its process group id.
    pub pid: u32,
    /// When it started, ms since the epoch.
    pub time_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The same run (job id and restart count) is already supervised here: a repeated
    /// `LaunchJob`, not a new one. It changes nothing, and no end is reported for it.
    #[error("job {job_id} (run {restart_count}) is already running here")]
    AlreadyRunning { job_id: u64, restart_count: u32 },
}

pub struct LauncherOptions {
    pub spool_dir: PathBuf,
    /// This node's name, for `YS_NODE` and `%N`.
    pub node_name: String,
    /// The binary run as the node's supervisor, `<program> __supervisor <spool>`: noded
    /// itself by default.
    pub supervisor_program: PathBuf,
    /// `node.allow_root_jobs`: when false, every launch as uid 0 is refused (reported as the
    /// job's end with an error).
    pub allow_root_jobs: bool,
    /// `node.cgroup_root`: where jobs' cgroups go, or whether there are any.
    pub cgroup_root: CgroupRoot,
    /// `node.job_pids_max`; 0: no limit.
    pub job_pids_max: u64,
    /// The client socket this node's agent serves (absolute), given to jobs as
    /// `YSCHED_SOCKET`; `None`: it serves none.
    pub client_socket: Option<PathBuf>,
    /// `false` on a login node: every launch is refused (reported as the job's end with an
    /// error), and the host's cgroups are not looked at.
    pub runs_jobs: bool,
    /// `node.spool_reserve_mib`: with less free on the spool's file system, the node takes
    /// no job (see [`Launcher::check_health`]); 0: only a write is tried.
    pub spool_reserve_mib: u64,
    /// `node.slurm_env`: every job gets Slurm's `SLURM_*` variables, asked for or not.
    pub slurm_env: bool,
}

impl LauncherOptions {
    pub fn new(spool_dir: impl Into<PathBuf>, node_name: impl Into<String>) -> Self {
        LauncherOptions {
            spool_dir: spool_dir.into(),
            node_name: node_name.into(),
            // The running binary, even if it was replaced on disk by an upgrade since.
            supervisor_program: PathBuf::from("/proc/self/exe"),
            allow_root_jobs: true,
            cgroup_root: CgroupRoot::Detect,
            job_pids_max: 0,
            client_socket: None,
            runs_jobs: true,
            spool_reserve_mib: 0,
            slurm_env: false,
        }
    }
}

/// Starts, stops and supervises the jobs of this node. Dropping it stops supervising (the
/// jobs and the node's supervisor keep running; a new `Launcher` can
/// [`recover`](Self::recover)).
pub struct Launcher {
    shared: Arc<Shared>,
    /// Cancelled when the launcher is dropped: every per-job task stops at once (see
    /// [`until_cancelled`]), leaving its job running.
    supervision: CancellationToken,
}

/// The jobs being supervised here, by user (see [`Launcher::jobs_of_users`]).
#[derive(Clone)]
pub struct UserJobs(Arc<Shared>);

impl std::fmt::Debug for UserJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UserJobs(..)")
    }
}

impl UserJobs {
    /// A job of user `uid` being supervised here (the lowest id), if any: what lets this
    /// compute node relay that user's requests to schedd.
    pub fn job_of(&self, uid: u32) -> Option<u64> {
        self.0
            .jobs()
            .iter()
            .find(|(_, handle)| handle.uid == uid)
            .map(|(&id, _)| id)
    }
}

/// What the per-job tasks share with the launcher.
struct Shared {
    /// Part of every job cgroup's name (see [`containment::instance_tag`]).
    cgroup_instance: String,
    spool: Spool,
    /// Where the node's supervisor is reached (see [`node_supervisor::SocketAddress`]).
    socket: node_supervisor::SocketAddress,
    node_name: String,
    supervisor_program: PathBuf,
    allow_root_jobs: bool,
    /// `node.slurm_env` (see [`LauncherOptions::slurm_env`]).
    slurm_env: bool,
    containment: Containment,
    client_socket: Option<PathBuf>,
    runs_jobs: bool,
    jobs: Mutex<BTreeMap<u64, JobHandle>>,
    events: mpsc::UnboundedSender<JobEvent>,
    /// Whether this node can take jobs (see [`Launcher::unhealthy_reason`]).
    health: Mutex<Health>,
    /// In bytes (see [`LauncherOptions::spool_reserve_mib`]).
    spool_reserve_bytes: u64,
    /// Ends that could not be written to the spool, kept until schedd acknowledges them.
    unwritten_ends: Mutex<BTreeMap<u64, FinishedRecord>>,
    /// Ends recorded in the node's journal, as reported, until schedd acknowledges them
    /// (the journal is the supervisor's: noded keeps what it was told).
    recorded_ends: Mutex<BTreeMap<u64, FinishedRecord>>,
    /// Held while the node's supervisor is being started, so that concurrent launches start
    /// one.
    starting_supervisor: tokio::sync::Mutex<()>,
    /// Set once the task holding the supervisor's keep-alive connection is started (see
    /// [`Launcher::keep_supervisor`]).
    keeping_supervisor: std::sync::atomic::AtomicBool,
    /// While that connection is open: where acknowledgements go, to be written on it (see
    /// [`Launcher::ack`]).
    ack_link: Mutex<Option<mpsc::UnboundedSender<u64>>>,
}

struct JobHandle {
    /// Which run of the job this is (`LaunchJob.restart_count`).
    restart_count: u32,
    /// The uid the job runs as: the client socket relays a user of a compute node only
    /// with a job of theirs running here (see [`UserJobs::job_of`]).
    uid: u32,
    controls: mpsc::UnboundedSender<Control>,
    /// The job's checkpoint directory on this host, once its plan is made.
    checkpoint_dir: Option<checkpoint_scan::CheckpointDir>,
}

/// Requests to a job's task (see [`job_task`]).
#[derive(Debug, Clone, Copy)]
enum Control {
    /// SIGTERM to every process of the job now (unless sent already), SIGKILL to those left
    /// after the grace.
    Stop { grace_secs: u32 },
    /// SIGKILL to every process of the job now.
    Kill,
}

impl Shared {
    fn jobs(&self) -> MutexGuard<'_, BTreeMap<u64, JobHandle>> {
        // A panic elsewhere while holding the lock leaves the map itself consistent.
        self.jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn emit(&self, event: JobEvent) {
        // Nobody listening (shutting down) is not an error: the spool keeps the record.
        let _ = self.events.send(event);
    }

    fn ack_link(&self) -> MutexGuard<'_, Option<mpsc::UnboundedSender<u64>>> {
        self.ack_link.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unwritten_ends(&self) -> MutexGuard<'_, BTreeMap<u64, FinishedRecord>> {
        self.unwritten_ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn recorded_ends(&self) -> MutexGuard<'_, BTreeMap<u64, FinishedRecord>> {
        self.recorded_ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Launcher {
    /// What this agent's job cgroups are named after (`job_<id>.<this>`).
    pub fn cgroup_instance(&self) -> &str {
        &self.shared.cgroup_instance
    }

    /// A launcher over `spool_dir` (created if needed), and the channel of its job events.
    pub fn new(
        spool_dir: impl Into<PathBuf>,
        node_name: impl Into<String>,
    ) -> io::Result<(Launcher, mpsc::UnboundedReceiver<JobEvent>)> {
        Self::with_options(LauncherOptions::new(spool_dir, node_name))
    }

    /// A launcher as configured. It looks at the host's cgroups once, here, and logs what it
    /// will contain jobs with.
    pub fn with_options(
        options: LauncherOptions,
    ) -> io::Result<(Launcher, mpsc::UnboundedReceiver<JobEvent>)> {
        let spool = Spool::open(&options.spool_dir)?;
        let containment = if options.runs_jobs {
            let containment = Containment::set_up(&options.cgroup_root, options.job_pids_max);
            match &containment {
                Containment::Cgroups(_) => tracing::info!("job containment: {containment}"),
                Containment::ProcessGroups { .. } => {
                    tracing::warn!("job containment: {containment}")
                }
            }
            containment
        } else {
            Containment::ProcessGroups {
                reason: "a login node runs no job".into(),
            }
        };
        let (events, receiver) = mpsc::unbounded_channel();
        let cgroup_instance = containment::instance_tag(&options.node_name, &options.spool_dir);
        let socket = node_supervisor::SocketAddress::of_spool(spool.root())?;
        let shared = Arc::new(Shared {
            cgroup_instance,
            socket,
            spool,
            node_name: options.node_name,
            supervisor_program: options.supervisor_program,
            allow_root_jobs: options.allow_root_jobs,
            slurm_env: options.slurm_env,
            containment,
            client_socket: options.client_socket,
            runs_jobs: options.runs_jobs,
            jobs: Mutex::new(BTreeMap::new()),
            events,
            health: Mutex::default(),
            spool_reserve_bytes: options.spool_reserve_mib.saturating_mul(1024 * 1024),
            unwritten_ends: Mutex::default(),
            recorded_ends: Mutex::default(),
            starting_supervisor: tokio::sync::Mutex::new(()),
            keeping_supervisor: std::sync::atomic::AtomicBool::new(false),
            ack_link: Mutex::new(None),
        });
        let launcher = Launcher {
            shared,
            supervision: CancellationToken::new(),
        };
        Ok((launcher, receiver))
    }

    /// Starts a job. Failures to start it (no such user, bad working directory, a root job
    /// on a node that refuses them, ...) are not errors here: they are reported as a
    /// [`JobEvent::Finished`] with `error` set, kept in the spool until acknowledged like any
    /// other end. Must be called within a tokio runtime.
    ///
    /// The one error is a repeated launch of the run that is already supervised here: it is
    /// ignored (that run reports its own start and end). A launch of another run of a job
    /// whose earlier run is still here is refused with a [`JobEvent::Finished`] for the new run
    /// (sent, but not kept in the spool: the job's spool directory belongs to the run
    /// still going).
    pub fn launch(&self, params: JobParams) -> Result<(), LaunchError> {
        let job_id = params.job_id;
        let mut jobs = self.shared.jobs();
        if let Some(running) = jobs.get(&job_id) {
            if running.restart_count == params.restart_count {
                return Err(LaunchError::AlreadyRunning {
                    job_id,
                    restart_count: params.restart_count,
                });
            }
            let error = format!(
                "node {} still runs run {} of job {job_id}; run {} not started",
                self.shared.node_name, running.restart_count, params.restart_count
            );
            tracing::warn!("job {job_id}: launch refused: {error}");
            drop(jobs);
            self.shared.emit(JobEvent::Finished(FinishedRecord {
                job_id,
                restart_count: params.restart_count,
                end_time_ms: ysched_common::time::now_ms(),
                error,
                ..Default::default()
            }));
            return Ok(());
        }
        self.keep_supervisor();
        let (controls, receiver) = mpsc::unbounded_channel();
        let (restart_count, uid) = (params.restart_count, params.uid);
        let supervisor = JobTask::for_new_job(self.shared.clone(), params, receiver);
        let handle = JobHandle {
            restart_count,
            uid,
            controls,
            checkpoint_dir: None,
        };
        self.supervise(&mut jobs, job_id, handle, supervisor.launch());
        Ok(())
    }

    /// Starts a job's task and keeps its handle among the node's jobs (`jobs`,
    /// locked across both: the task never looks for a handle that is not there yet).
    fn supervise(
        &self,
        jobs: &mut BTreeMap<u64, JobHandle>,
        job_id: u64,
        handle: JobHandle,
        supervision: impl Future<Output = ()> + Send + 'static,
    ) {
        tokio::spawn(until_cancelled(self.supervision.clone(), supervision));
        jobs.insert(job_id, handle);
    }

    /// The node's fence lease file in the spool (see [`lease`]).
    pub fn lease_path(&self) -> PathBuf {
        self.shared.spool.lease_path()
    }

    /// What this launcher contains jobs with (cgroups, or process groups and why).
    pub fn containment(&self) -> &Containment {
        &self.shared.containment
    }

    /// Asks a job to stop: SIGTERM to every process of the job now, SIGKILL to whatever is
    /// left after `grace_secs`. The main process ending early does not cut the others' grace;
    /// the job's end is reported when its last process is gone. Repeating it is harmless (a
    /// shorter grace wins). `false` when the job is not running here.
    pub fn stop(&self, job_id: u64, grace_secs: u32) -> bool {
        self.control(job_id, Control::Stop { grace_secs })
    }

    /// Kills every process of a job at once. `false` when the job is not running here.
    pub fn kill(&self, job_id: u64) -> bool {
        self.control(job_id, Control::Kill)
    }

    fn control(&self, job_id: u64, control: Control) -> bool {
        match self.shared.jobs().get(&job_id) {
            Some(handle) => handle.controls.send(control).is_ok(),
            None => false,
        }
    }

    /// Jobs being supervised (starting, running or stopping), ascending.
    pub fn running_jobs(&self) -> Vec<u64> {
        self.shared.jobs().keys().copied().collect()
    }

    /// Finds the jobs of a user here, for the client socket's relay (which outlives no
    /// launcher: it is made from this one).
    pub fn jobs_of_users(&self) -> UserJobs {
        UserJobs(Arc::clone(&self.shared))
    }

    /// The checkpoint directories of the jobs being supervised, where known (see
    /// [`checkpoint_scan`]).
    pub fn checkpoint_dirs(&self) -> Vec<(u64, checkpoint_scan::CheckpointDir)> {
        self.shared
            .jobs()
            .iter()
            .filter_map(|(&id, handle)| Some((id, handle.checkpoint_dir.clone()?)))
            .collect()
    }

    /// Every job's end that schedd has not acknowledged yet: those recorded in the node's
    /// journal (as the supervisor reported them, or as it listed them at
    /// [`recover`](Self::recover)), those of an older noded's per-job processes in the spool, and
    /// those that could not be written anywhere (kept in memory).
    pub fn unacked_finished(&self) -> Vec<FinishedRecord> {
        let spool = &self.shared.spool;
        let mut ends: BTreeMap<u64, FinishedRecord> = self.shared.unwritten_ends().clone();
        for (id, finished) in self.shared.recorded_ends().iter() {
            ends.entry(*id).or_insert_with(|| finished.clone());
        }
        let ids = match spool.job_ids() {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!("cannot list the spool: {e}");
                Vec::new()
            }
        };
        for id in ids {
            match spool.job_dir(id).read_finished() {
                Ok(Some(finished)) => {
                    ends.entry(id).or_insert(finished);
                }
                Ok(None) => {}
                Err(e) => tracing::error!("job {id}: {e}"),
            }
        }
        ends.into_values().collect()
    }

    /// schedd has recorded the job's end: forget it (its spool directory, and in the node's
    /// journal an acknowledgement, unsynced: one lost means the end is reported again,
    /// which schedd takes as the same end).
    pub fn ack(&self, job_id: u64) -> io::Result<()> {
        if self.shared.jobs().contains_key(&job_id) {
            tracing::warn!(
                "job {job_id}: acknowledgement for a job that is still running, ignored"
            );
            return Ok(());
        }
        self.shared.unwritten_ends().remove(&job_id);
        let journaled = self.shared.recorded_ends().remove(&job_id).is_some();
        if journaled {
            self.shared.tell_acked(job_id);
        }
        self.shared.spool.remove_job(job_id)
    }

    /// Why this node cannot take jobs now, if it cannot: its spool cannot be written (or has
    /// less than `node.spool_reserve_mib` free), or a launch failed for a reason of the
    /// node's less than `health::LAUNCH_FAULT_HOLD` ago. The agent tells schedd in every
    /// heartbeat.
    pub fn unhealthy_reason(&self) -> Option<String> {
        self.shared.unhealthy_reason()
    }

    /// Probes the spool (blocking: call it off the async threads): its free space against
    /// `node.spool_reserve_mib` (once short, it must be a quarter over the reserve, and at
    /// least a MiB, to count as enough again) and a small write, synced and removed. The
    /// node's problem is set or cleared accordingly (a launch fault only once
    /// `health::LAUNCH_FAULT_HOLD` has passed), and ends that could not be written to the spool
    /// are written now if they can be. Returns the problem, as
    /// [`Launcher::unhealthy_reason`].
    pub fn check_health(&self) -> Option<String> {
        self.shared.check_health()
    }

    /// The probe of [`Launcher::check_health`], to run on a blocking thread.
    pub fn health_probe(&self) -> impl FnOnce() -> Option<String> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        move || shared.check_health()
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        self.supervision.cancel();
    }
}

/// Runs a job's supervision until it is over or `cancelled` (the launcher was dropped),
/// whichever comes first. Cancellation wins: once cancelled, the supervision is not polled
/// again, wherever it was (as if its task had been aborted); the job keeps running, for a
/// new launcher to [`recover`](Launcher::recover).
async fn until_cancelled(cancelled: CancellationToken, supervision: impl Future<Output = ()>) {
    tokio::select! {
        biased;
        () = cancelled.cancelled() => {}
        () = supervision => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn a_cancelled_supervision_does_no_more() {
        let cancelled = CancellationToken::new();
        let (wake, woken) = tokio::sync::oneshot::channel::<()>();
        let went_on = Arc::new(AtomicBool::new(false));
        let flag = went_on.clone();
        let task = tokio::spawn(until_cancelled(cancelled.clone(), async move {
            let _ = woken.await;
            flag.store(true, Ordering::SeqCst);
        }));
        tokio::task::yield_now().await;
        // Both ready at the next poll: the cancellation wins, as an abort would.
        cancelled.cancel();
        let _ = wake.send(());
        task.await.unwrap();
        assert!(!went_on.load(Ordering::SeqCst));

        // Not cancelled, it runs to its end.
        let done = until_cancelled(CancellationToken::new(), async {});
        tokio::time::timeout(std::time::Duration::from_secs(5), done)
            .await
            .unwrap();
    }
}
