//! Running jobs: real processes, real signals, surviving noded restarts.
//!
//! Every job is handed to the node's *supervisor* (one long-lived process per node, the noded
//! binary run as `noded __supervisor <spool>` in its own session, see [`node_supervisor`]),
//! which records its launch in the node's journal (see [`journal`]), starts it as the
//! submitting user, and records its end there. It replaced a shepherd process per job (a
//! restarted noded still adopts an older noded's live shepherds, from their files in the
//! [`spool`]). Where the
//! host allows, each job runs in its own cgroup, created by noded before the job is handed
//! over, which holds every process the job starts and carries its limits (see
//! [`containment`]); otherwise in its own process group. The supervisor closes the job's
//! connection when the last of those processes has ended, so noded, which follows each job
//! in one task, learns of the job's end as an event. That task also runs the warning, time-limit and grace
//! timers and reports [`JobEvent`]s on a channel.
//!
//! After a restart, [`Launcher::recover`] asks the supervisor for its jobs and the ends schedd
//! has not acknowledged (or reads its journal, when it does not answer), re-attaches to them
//! and resumes their timers from their journaled stop progress; an older noded's live
//! shepherds are adopted from their spool files. A supervisor that starts after another died
//! reports the jobs the journal says were running as lost.
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
pub mod journal;
pub mod lease;
mod node_protocol;
pub mod node_supervisor;
mod process;
pub mod spool;
mod supervisor;
mod tracking;

pub use cgroup::JobCgroup;
pub use checkpoint::FALLBACK_CHECKPOINT_ROOT;
pub use containment::{CgroupRoot, Containment, JobLimits, LimitSource};
pub use environment::job_environment;
pub use job::{expand_pattern, plan_job, ArrayTaskParams, ExecPlan, JobParams, PatternVars};
pub use process::{newest_mtime_ms, signal_group, SHEPHERD_SUBCOMMAND};
pub use spool::{ExitRecord, FinishedRecord, JobDir, JobRecord, Spool, StopState};

use health::Health;
use node_protocol::{BadLine, Reply, Request};
use process::{is_shepherd_of, Shepherd};
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use supervisor::Supervisor;
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
    /// The binary run as `<program> __shepherd <job dir>`: noded itself by default.
    pub shepherd_program: PathBuf,
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
            shepherd_program: PathBuf::from("/proc/self/exe"),
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

/// What [`Launcher::recover`] found in the spool.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Jobs whose shepherd is alive, now supervised again.
    pub reattached: Vec<u64>,
    /// Jobs that ended while noded was away (their end is now in the spool).
    pub ended: Vec<u64>,
}

/// Starts, stops and supervises the jobs of this node. Dropping it stops supervising (the
/// jobs and their shepherds keep running; a new `Launcher` can [`recover`](Self::recover)).
pub struct Launcher {
    shared: Arc<Shared>,
    /// Cancelled when the launcher is dropped: every per-job task stops at once (see
    /// [`until_cancelled`]), leaving its job and shepherd running.
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
    shepherd_program: PathBuf,
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
    /// with a job of theirs running here (see [`Launcher::job_of_user`]).
    uid: u32,
    controls: mpsc::UnboundedSender<Control>,
    /// The job's checkpoint directory on this host, once its plan is made.
    checkpoint_dir: Option<checkpoint_scan::CheckpointDir>,
}

impl JobHandle {
    /// The handle of a job found at start, from its record, and the receiving end of its
    /// controls (for its supervisor).
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

/// Requests to a job's supervisor task.
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

    /// Records a job's end that its supervisor did not see (its launch failed before it was
    /// handed over, or the supervisor went away) in the node's journal, through the
    /// supervisor (started if none runs): `record <json>`, answered `recorded` once synced.
    async fn record_end(&self, finished: &FinishedRecord) -> io::Result<()> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let stream = self.connect_supervisor(true).await?;
        let (read, mut write) = stream.into_split();
        let request = Request::Record(finished.clone()).to_line();
        write
            .write_all(request.map_err(io::Error::other)?.as_bytes())
            .await?;
        let answer = tokio::io::BufReader::new(read).lines().next_line().await?;
        match answer.as_deref().map(Reply::parse) {
            Some(Ok(Reply::Recorded)) => Ok(()),
            Some(Ok(Reply::Failed(why))) => Err(io::Error::other(why)),
            Some(_) => Err(io::Error::other(answer.unwrap_or_default())),
            None => Err(io::Error::other("the supervisor closed the connection")),
        }
    }

    /// The same, blocking (off the async threads), to a supervisor that runs already.
    fn record_end_blocking(&self, finished: &FinishedRecord) -> io::Result<()> {
        use std::io::{BufRead, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(self.socket.path())?;
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
        let request = Request::Record(finished.clone()).to_line();
        stream.write_all(request.map_err(io::Error::other)?.as_bytes())?;
        let mut answer = String::new();
        std::io::BufReader::new(stream).read_line(&mut answer)?;
        let answer = answer.trim_end();
        match Reply::parse(answer) {
            Ok(Reply::Recorded) => Ok(()),
            Ok(Reply::Failed(why)) => Err(io::Error::other(why)),
            _ => Err(io::Error::other(answer.to_string())),
        }
    }

    /// A connection to the node's supervisor; with `start`, the supervisor is started first
    /// when none answers (it exits when idle, see [`node_supervisor::IDLE_EXIT`]).
    async fn connect_supervisor(&self, start: bool) -> io::Result<tokio::net::UnixStream> {
        let path = self.socket.path();
        match tokio::net::UnixStream::connect(path).await {
            Ok(stream) => return Ok(stream),
            Err(e) if !start => return Err(e),
            Err(_) => {}
        }
        let _starting = self.starting_supervisor.lock().await;
        if let Ok(stream) = tokio::net::UnixStream::connect(path).await {
            return Ok(stream);
        }
        self.start_supervisor()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => return Ok(stream),
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "the supervisor did not come up on {}: {e}",
                            self.spool
                                .root()
                                .join(node_supervisor::SOCKET_FILE)
                                .display()
                        ),
                    ))
                }
                Err(_) => {}
            }
        }
    }

    /// Starts `noded __supervisor <spool>`: spawned without a fork of this many-threaded
    /// process (no `pre_exec`: the supervisor makes its own session), its stderr its log.
    /// It inherits noded's environment (an `LD_PRELOAD` a test gave noded included); jobs
    /// never do, their environment is their plan's.
    fn start_supervisor(&self) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(spool::FILE_MODE)
            .open(self.spool.root().join(node_supervisor::LOG_FILE))?;
        // One an older noded left 0644 too: it quotes jobs' launches.
        log.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(
            spool::FILE_MODE,
        ))?;
        let mut child = tokio::process::Command::new(&self.shepherd_program)
            .arg0("noded")
            .arg(node_supervisor::SUPERVISOR_SUBCOMMAND)
            .arg(self.spool.root())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(false)
            .spawn()?;
        tracing::info!("started the node's supervisor, pid {:?}", child.id());
        ysched_common::stamp::stamp("n.spawned_supervisor", 0);
        // Reaped when it exits (idle), so that it leaves no zombie.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(())
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
            shepherd_program: options.shepherd_program,
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
        let supervisor = Supervisor::for_new_job(self.shared.clone(), params, receiver);
        let handle = JobHandle {
            restart_count,
            uid,
            controls,
            checkpoint_dir: None,
        };
        self.supervise(&mut jobs, job_id, handle, supervisor.launch());
        Ok(())
    }

    /// Starts a job's supervision task and keeps its handle among the node's jobs (`jobs`,
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
    /// [`recover`](Self::recover)), those of an older noded's shepherds in the spool, and
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
        // On the keep-alive connection while it is open (no connection per job), else on a
        // connection of its own.
        let linked = journaled
            && self
                .shared
                .ack_link()
                .as_ref()
                .is_some_and(|link| link.send(job_id).is_ok());
        if journaled && !linked {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let shared = self.shared.clone();
                runtime.spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    // No supervisor running: it replays the end at its next start, and a
                    // restarted noded reports it again.
                    if let Ok(mut stream) = shared.connect_supervisor(false).await {
                        let ack = Request::Ack { job_id }.to_line().unwrap_or_default();
                        let _ = stream.write_all(ack.as_bytes()).await;
                    }
                });
            }
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

    /// Picks up the jobs of an earlier noded: asks the node's supervisor (started when the
    /// node has a journal and none runs, which then records the jobs its dead predecessor
    /// ran as lost) for the jobs it runs, re-attaches to them (resuming their timers), and
    /// reports the ends schedd has not acknowledged; then re-attaches to an older noded's
    /// live shepherds (`jobs/<id>/state.json`) and finishes those whose shepherd is gone.
    /// Call once, at start, before launching anything.
    pub async fn recover(&self) -> io::Result<Recovery> {
        let mut recovery = Recovery::default();
        if self.recover_journal(&mut recovery).await? {
            self.keep_supervisor();
        }
        self.recover_old_layout(&mut recovery).await?;
        Ok(recovery)
    }

    /// Keeps the node's supervisor running while this launcher lives (not on a login node):
    /// a task holds a connection to it, on which nothing is said, so that it never sits
    /// idle and exits (see [`node_supervisor::IDLE_EXIT`]). Else a job submitted to an idle
    /// node would wait for a supervisor to be started, every time. When the supervisor goes
    /// (killed, or its host's power), the task starts it again a moment later. Started once,
    /// by the first call: the first launch, or a recovery that found a supervisor or a
    /// journal (a node that never ran a job starts none); stopped when the launcher is
    /// dropped.
    fn keep_supervisor(&self) {
        use std::sync::atomic::Ordering;
        if !self.shared.runs_jobs || self.shared.keeping_supervisor.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.shared
                .keeping_supervisor
                .store(false, Ordering::SeqCst);
            return;
        };
        let shared = self.shared.clone();
        runtime.spawn(until_cancelled(self.supervision.clone(), async move {
            let mut retry = SUPERVISOR_RESTART;
            loop {
                match shared.connect_supervisor(true).await {
                    Ok(stream) => {
                        retry = SUPERVISOR_RESTART;
                        hold_supervisor(&shared, stream).await;
                        tracing::debug!("the node's supervisor went away");
                    }
                    Err(e) => {
                        tracing::warn!("cannot keep the node's supervisor running: {e}");
                        retry = (retry * 2).min(SUPERVISOR_RESTART * 30);
                    }
                }
                tokio::time::sleep(retry).await;
            }
        }));
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
            let supervisor = Supervisor::for_recovered_job(self.shared.clone(), record, receiver);
            tracing::info!("job {job_id}: re-attached to its supervisor");
            // With no connection (the supervisor went away meanwhile), the job's task finds
            // it lost at once.
            self.supervise(
                &mut self.shared.jobs(),
                job_id,
                handle,
                supervisor.resume(Shepherd::Supervised, connection),
            );
            recovery.reattached.push(job_id);
        }
        Ok(true)
    }

    /// The jobs of an older noded, one process (a shepherd) per job and a directory of
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
            let shepherd = job.shepherd_pid.and_then(|pid| {
                let shepherd = Shepherd::adopt(pid).ok()?;
                // Checked again now that the pidfd pins the process: the pid may have been
                // reused between the scan and the pidfd.
                let dir = self.shared.spool.job_dir(job_id);
                is_shepherd_of(pid, dir.path()).then_some(shepherd)
            });
            let (handle, receiver) = JobHandle::recovered(&record);
            if shepherd.is_some() {
                thaw_recovered(&record);
            }
            // An older noded's job: its stop progress and end go to its own files.
            let supervisor = Supervisor::for_recovered_job(self.shared.clone(), record, receiver)
                .of_old_layout();
            match shepherd {
                Some(shepherd) => {
                    tracing::info!("job {job_id}: re-attached to its shepherd");
                    self.supervise(
                        &mut self.shared.jobs(),
                        job_id,
                        handle,
                        supervisor.resume(shepherd, None),
                    );
                    recovery.reattached.push(job_id);
                }
                None => {
                    tracing::info!("job {job_id}: ended while noded was away");
                    supervisor.finish_after_shepherd(false).await;
                    recovery.ended.push(job_id);
                }
            }
        }
        Ok(())
    }
}

impl Launcher {
    /// Asks the node's supervisor to follow job `job_id` again: its connection, or `None`
    /// when no supervisor runs or it does not know the job. An end the supervisor recorded
    /// meanwhile comes as the connection's first line (`ended <json>`).
    async fn attach(
        &self,
        job_id: u64,
    ) -> Option<(process::Announcement, process::SupervisorWriter)> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let stream = self.shared.connect_supervisor(false).await.ok()?;
        let (read, mut write) = stream.into_split();
        let attach = Request::Attach { job_id }.to_line().ok()?;
        write.write_all(attach.as_bytes()).await.ok()?;
        let lines = tokio::io::BufReader::new(read).lines();
        // The answer (`attached`, `ended`, `unknown`) is read by the job's task: a
        // supervisor that does not answer at once (stopped, busy) hangs no recovery.
        Some((lines, write))
    }
}

/// How long after the node's supervisor went away it is started again (see
/// [`Launcher::keep_supervisor`]); doubled after each failure to start it.
const SUPERVISOR_RESTART: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a restarted noded waits for the supervisor's list of jobs before it reads the
/// journal itself (a stopped supervisor must not hang noded's start).
const LIST_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// Asks the node's supervisor for the jobs it runs and the ends schedd has not acknowledged
/// (`list`, see [`node_supervisor`]).
async fn list_jobs(
    stream: tokio::net::UnixStream,
) -> io::Result<(Vec<JobRecord>, Vec<FinishedRecord>)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (read, mut write) = stream.into_split();
    let list = Request::List.to_line().map_err(io::Error::other)?;
    write.write_all(list.as_bytes()).await?;
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut running = Vec::new();
    let mut ended = Vec::new();
    loop {
        let line = lines
            .next_line()
            .await?
            .ok_or_else(|| io::Error::other("the node's supervisor closed its list"))?;
        match Reply::parse(&line) {
            Ok(Reply::Job(record)) => running.push(*record),
            Ok(Reply::Ended(finished)) => ended.push(finished),
            Ok(Reply::Done) => return Ok((running, ended)),
            Err(BadLine::Unreadable { why, .. }) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{line:?}: {why}"),
                ))
            }
            _ => tracing::warn!("unexpected line from the node's supervisor: {line:?}"),
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        self.supervision.cancel();
    }
}

/// Holds the keep-alive connection to the node's supervisor until the supervisor goes
/// (nothing comes on it: its read ends then), and writes on it the acknowledgements
/// [`Launcher::ack`] passes, those that came meanwhile in one write.
async fn hold_supervisor(shared: &Shared, stream: tokio::net::UnixStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut read, mut write) = stream.into_split();
    let (link, mut acks) = mpsc::unbounded_channel();
    *shared.ack_link() = Some(link);
    let mut buf = [0u8; 64];
    loop {
        tokio::select! {
            read = read.read(&mut buf) => if !matches!(read, Ok(n) if n > 0) {
                break;
            },
            Some(job_id) = acks.recv() => {
                let mut lines = String::new();
                for job_id in std::iter::once(job_id).chain(std::iter::from_fn(|| acks.try_recv().ok())) {
                    lines.push_str(&Request::Ack { job_id }.to_line().unwrap_or_default());
                }
                if write.write_all(lines.as_bytes()).await.is_err() {
                    break;
                }
            }
        }
    }
    *shared.ack_link() = None;
}

/// Runs a job's supervision until it is over or `cancelled` (the launcher was dropped),
/// whichever comes first. Cancellation wins: once cancelled, the supervision is not polled
/// again, wherever it was (as if its task had been aborted); the job and its shepherd keep
/// running, for a new launcher to [`recover`](Launcher::recover).
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
