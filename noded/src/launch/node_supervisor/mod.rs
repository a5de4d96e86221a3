//! The node's supervisor: ONE long-lived process per node that starts and watches every job,
//! run as `noded __supervisor <spool>`, replacing a shepherd process per job.
//!
//! Why: a shepherd was the 11.6 MB noded binary re-executed per job (loader, glibc's CPU
//! probing that traps to the hypervisor, page faults, teardown: about 5 ms of CPU per job).
//! The supervisor is started once, and each job costs it a `fork` of a small process, the
//! job's setup and exec, and a few descriptors in one poll loop.
//!
//! It keeps every rule the shepherd kept (see [`super::shepherd`]'s docs):
//! - It runs in its own session (it calls `setsid` itself, so noded spawns it without a
//!   fork of its own many-threaded process), outliving noded restarts (systemd
//!   `KillMode=process`), and is the child subreaper of the jobs.
//! - It forks each job from itself, a single-threaded process; the child makes only
//!   async-signal-safe calls (`sys::setup_child`, then `execve`), and the supervisor never
//!   waits for it: the child's setup may block (a hung network filesystem), the exec's end is
//!   learnt from the step pipe's end of file, a failed step from its report.
//! - A job is over when its last process is gone: the main process's pidfd, then
//!   `cgroup.events` (`populated 0`) or, without cgroups, its process group looked at every
//!   20 ms. When the main process ended by itself the rest is killed; during a stop (the
//!   `stopping` notice) the others keep their grace.
//! - The fence: it reads the node's lease (see [`super::lease`]) every second, for all jobs
//!   at once, and when it has run out stops every job itself (the `stopping` notice, SIGTERM,
//!   the grace, SIGKILL), needing no noded; their exit records say `fenced`.
//! - It writes each job's `pid` and `exit.json` in the job's spool directory as the shepherd
//!   did, so noded reads a job's end the same way.
//!
//! noded talks to it over a Unix socket, `<spool>/supervisor.sock` (mode 0600; a peer other
//! than root or the supervisor's own user, as `SO_PEERCRED` names it, is refused). A socket
//! rather than inherited pipes: a restarted noded finds it by its path, with no state handed
//! over. One connection per job, one line each way:
//! - `start <job dir>`: start the job planned in `<job dir>/state.json`. The supervisor
//!   answers `started <pid> <time_ms>` once it has exec'd, and closes the connection once the
//!   job is over and `exit.json` written (a start that failed: closed without `started`).
//! - `attach <job dir>`: a restarted noded following a job: `attached` (then as above), or
//!   `unknown` (the supervisor has no such job: it ended, or was never started).
//!
//! A second supervisor for the same spool exits at once (an `flock` on `supervisor.lock`).
//! With no job and no connection for [`IDLE_EXIT`] it exits; noded starts it again for the
//! next job.

#![deny(unsafe_code)]

use super::cgroup::read_populated;
use super::lease::{boottime_ms, Lease, LEASE_FILE};
use super::shepherd::child::{self, StartError};
use super::shepherd::sys;
use super::spool::{ExitRecord, JobDir, JobRecord, FILE_MODE};
use super::tracking::JobProcesses;
use super::ExecPlan;
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ysched_common::time::{now_ms, rfc3339};

/// The hidden subcommand that turns the noded binary into the node's supervisor.
pub const SUPERVISOR_SUBCOMMAND: &str = "__supervisor";
/// The supervisor's socket, in the spool's root.
pub const SOCKET_FILE: &str = "supervisor.sock";
/// Held (`flock`) by the running supervisor, in the spool's root.
const LOCK_FILE: &str = "supervisor.lock";
/// The supervisor's own diagnostics, in the spool's root.
pub const LOG_FILE: &str = "supervisor.log";
/// With no job and no connection this long, the supervisor exits.
pub const IDLE_EXIT: Duration = Duration::from_secs(5);
/// How often the lease is read.
const LEASE_CHECK: Duration = Duration::from_secs(1);
/// A lease read as run out is read again this much later before the fence acts: the agent
/// rewrites it in place, and a read overlapping a rewrite may see part of each deadline.
const LEASE_RECHECK: Duration = Duration::from_millis(50);
/// How often a job without cgroups is looked at once its main process ended: a process
/// group's end is no event.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// After this long waiting for a job's last processes, the supervisor says so in its log.
const SLOW_END: Duration = Duration::from_secs(60);
/// The longest request line.
const MAX_LINE: usize = 8192;

/// Runs the supervisor of the spool at `spool`; the process's whole life.
pub fn run(spool: &Path) -> ExitCode {
    sys::close_inherited_fds();
    sys::ignore_termination_signals();
    // Its own session, out of noded's process group and terminal (it is no group leader:
    // noded spawned it into its own group).
    if let Err(e) = nix::unistd::setsid() {
        log(&format!("setsid: {e}"));
    }
    let lock = match take_lock(spool) {
        Ok(Some(lock)) => lock,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            log(&format!(
                "cannot lock {}: {e}",
                spool.join(LOCK_FILE).display()
            ));
            return ExitCode::FAILURE;
        }
    };
    sys::become_subreaper();
    let listener = match listen(spool) {
        Ok(listener) => listener,
        Err(e) => {
            log(&format!(
                "cannot listen on {}: {e}",
                spool.join(SOCKET_FILE).display()
            ));
            return ExitCode::FAILURE;
        }
    };
    log("started");
    let mut supervisor = Supervisor {
        spool: spool.to_path_buf(),
        listener,
        connections: BTreeMap::new(),
        next_connection: 0,
        jobs: BTreeMap::new(),
        lease: LeaseWatch::default(),
        idle_since: Instant::now(),
    };
    let code = supervisor.run();
    drop(lock);
    code
}

/// Takes the supervisor's lock; `None` when another supervisor holds it (and serves the
/// socket): this one is not needed. A supervisor that is exiting holds it a moment longer
/// than its socket, so a contested lock is tried for a while.
fn take_lock(spool: &Path) -> io::Result<Option<File>> {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(spool.join(LOCK_FILE))?;
    lock.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    let since = Instant::now();
    loop {
        match sys::try_lock(&lock) {
            Ok(true) => return Ok(Some(lock)),
            Ok(false) => {
                if UnixStream::connect(spool.join(SOCKET_FILE)).is_ok()
                    || since.elapsed() > Duration::from_secs(5)
                {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

fn listen(spool: &Path) -> io::Result<UnixListener> {
    let path = spool.join(SOCKET_FILE);
    // Left by a supervisor that died: the lock says none runs now.
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(FILE_MODE))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// One line on the supervisor's stderr (its `supervisor.log`). A line that cannot be
/// written (a full spool) is dropped: the supervisor must not die of it.
fn log(message: &str) {
    let line = format!(
        "{} supervisor[{}]: {message}\n",
        rfc3339(now_ms()),
        std::process::id()
    );
    let _ = io::stderr().lock().write_all(line.as_bytes());
}

struct Supervisor {
    spool: PathBuf,
    listener: UnixListener,
    connections: BTreeMap<u64, Connection>,
    next_connection: u64,
    /// By job directory.
    jobs: BTreeMap<PathBuf, Job>,
    lease: LeaseWatch,
    idle_since: Instant,
}

struct Connection {
    stream: UnixStream,
    input: Vec<u8>,
    /// The job this connection follows, once it asked.
    job: Option<PathBuf>,
}

/// The lease as last read, for every job at once.
#[derive(Default)]
struct LeaseWatch {
    next_read: Option<Instant>,
    /// Read as run out at this instant; acted on after a second read.
    out_since: Option<Instant>,
    /// Run out (read twice): jobs are fenced.
    out: bool,
    said_unreadable: bool,
}

struct Job {
    dir: JobDir,
    plan: ExecPlan,
    grace_secs: u32,
    pid: u32,
    /// Readable once the main process has ended; dropped once it is reaped.
    pidfd: Option<OwnedFd>,
    /// Open until the child has exec'd (or failed).
    step_pipe: Option<OwnedFd>,
    /// Its setup or exec failed.
    failure: Option<StartError>,
    /// The main process's wait status, once reaped.
    status: Option<libc::c_int>,
    /// `cgroup.events`, with cgroups.
    events: Option<File>,
    /// Its start was recorded (`pid`) and told.
    announced: bool,
    /// Since the main process ended: waiting for the job's other processes.
    draining: Option<Instant>,
    said_slow: bool,
    fence: Fence,
}

#[derive(Default)]
struct Fence {
    fenced: bool,
    term_time_ms: i64,
    kill_at: Option<Instant>,
    killed: bool,
}

#[derive(Clone, Copy)]
enum Token {
    Listener,
    Connection(u64),
    StepPipe(usize),
    /// Wake-ups only: every job is looked at after each poll.
    Pidfd,
    Events,
}

impl Supervisor {
    fn run(&mut self) -> ExitCode {
        loop {
            let keys: Vec<PathBuf> = self.jobs.keys().cloned().collect();
            let mut fds = Vec::new();
            let mut tokens = Vec::new();
            let mut watch = |fd: i32, events: i16, token: Token| {
                fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
                tokens.push(token);
            };
            watch(self.listener.as_raw_fd(), libc::POLLIN, Token::Listener);
            for (&id, connection) in &self.connections {
                watch(
                    connection.stream.as_raw_fd(),
                    libc::POLLIN,
                    Token::Connection(id),
                );
            }
            let mut group_draining = false;
            for (index, key) in keys.iter().enumerate() {
                let job = &self.jobs[key];
                if let Some(pipe) = &job.step_pipe {
                    watch(pipe.as_raw_fd(), libc::POLLIN, Token::StepPipe(index));
                }
                if let Some(pidfd) = &job.pidfd {
                    watch(pidfd.as_raw_fd(), libc::POLLIN, Token::Pidfd);
                }
                match (&job.events, job.draining) {
                    (Some(events), Some(_)) => {
                        watch(events.as_raw_fd(), libc::POLLPRI, Token::Events)
                    }
                    (None, Some(_)) => group_draining = true,
                    _ => {}
                }
            }
            let timeout = self.timeout(group_draining);
            if let Err(e) = sys::poll(&mut fds, timeout.as_millis().min(60_000) as i32) {
                log(&format!("poll: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
            for (pollfd, token) in fds.iter().zip(tokens) {
                if pollfd.revents == 0 {
                    continue;
                }
                match token {
                    Token::Listener => self.accept(),
                    Token::Connection(id) => self.read_connection(id),
                    Token::StepPipe(index) => {
                        if let Some(job) = self.jobs.get_mut(&keys[index]) {
                            job.read_step_pipe();
                        }
                    }
                    // Handled below, for every job: the reaping and the emptiness checks.
                    Token::Pidfd | Token::Events => {}
                }
            }
            self.reap();
            self.announce_starts();
            self.drain_and_finish();
            self.check_lease();
            self.fence_deadlines();
            if self.jobs.is_empty() && self.connections.is_empty() {
                if self.idle_since.elapsed() >= IDLE_EXIT && self.exit_if_still_idle() {
                    log("idle: exiting");
                    return ExitCode::SUCCESS;
                }
            } else {
                self.idle_since = Instant::now();
            }
        }
    }

    /// How long poll may sleep: until the next lease read, a fence's SIGKILL, a process
    /// group's next look, or the idle exit.
    fn timeout(&self, group_draining: bool) -> Duration {
        let now = Instant::now();
        let mut until = now + LEASE_CHECK;
        if let Some(at) = self.lease.next_read {
            until = until.min(at);
        }
        if let Some(since) = self.lease.out_since {
            until = until.min(since + LEASE_RECHECK);
        }
        for job in self.jobs.values() {
            if let Some(at) = job.fence.kill_at {
                until = until.min(at);
            }
        }
        if group_draining {
            until = until.min(now + GROUP_POLL);
        }
        if self.jobs.is_empty() && self.connections.is_empty() {
            until = until.min(self.idle_since + IDLE_EXIT);
        }
        until.saturating_duration_since(now)
    }

    /// Idle: removes the socket so that no new connection can come, then serves any that
    /// came meanwhile (and binds the socket again) rather than exit under them.
    fn exit_if_still_idle(&mut self) -> bool {
        let _ = std::fs::remove_file(self.spool.join(SOCKET_FILE));
        self.accept();
        if self.connections.is_empty() {
            return true;
        }
        match listen(&self.spool) {
            Ok(listener) => self.listener = listener,
            Err(e) => log(&format!("cannot listen again: {e}")),
        }
        false
    }

    fn accept(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => return log(&format!("accept: {e}")),
            };
            // Only root and the supervisor's own user (noded's) may start jobs.
            let me = nix::unistd::Uid::effective().as_raw();
            match sys::peer_uid(&stream) {
                Ok(uid) if uid == 0 || uid == me => {}
                Ok(uid) => {
                    log(&format!("refused a connection of uid {uid}"));
                    continue;
                }
                Err(e) => {
                    log(&format!("SO_PEERCRED: {e}"));
                    continue;
                }
            }
            if let Err(e) = stream.set_nonblocking(true) {
                log(&format!("cannot make a connection non-blocking: {e}"));
                continue;
            }
            self.connections.insert(
                self.next_connection,
                Connection {
                    stream,
                    input: Vec::new(),
                    job: None,
                },
            );
            self.next_connection += 1;
        }
    }

    fn read_connection(&mut self, id: u64) {
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        let mut buf = [0u8; 4096];
        let closed = loop {
            match connection.stream.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => connection.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        let mut lines = Vec::new();
        while let Some(end) = connection.input.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = connection.input.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        if closed || connection.input.len() > MAX_LINE {
            // noded went away (or sent garbage): the job goes on without it.
            self.connections.remove(&id);
            return;
        }
        for line in lines {
            self.request(id, &line);
        }
    }

    fn request(&mut self, id: u64, line: &str) {
        let (verb, dir) = line.split_once(' ').unwrap_or((line, ""));
        let dir = PathBuf::from(dir);
        match verb {
            "start" if self.jobs.contains_key(&dir) => self.follow(id, dir),
            "start" => {
                self.start(&dir);
                if self.jobs.contains_key(&dir) {
                    self.follow(id, dir);
                } else {
                    // Over before it began: its exit record is written.
                    self.connections.remove(&id);
                }
            }
            "attach" if self.jobs.contains_key(&dir) => {
                self.send(id, "attached\n");
                self.follow(id, dir.clone());
                // Started before this noded came: it reads the pid from the job's `pid`.
            }
            "attach" => {
                self.send(id, "unknown\n");
                self.connections.remove(&id);
            }
            _ => {
                log(&format!("unknown request {line:?}"));
                self.connections.remove(&id);
            }
        }
    }

    fn follow(&mut self, id: u64, dir: PathBuf) {
        if let Some(connection) = self.connections.get_mut(&id) {
            connection.job = Some(dir);
        }
    }

    fn send(&mut self, id: u64, line: &str) {
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        // A few bytes into an empty socket buffer: a short write means noded is gone.
        if connection.stream.write_all(line.as_bytes()).is_err() {
            self.connections.remove(&id);
        }
    }

    /// Starts the job planned in `dir`: forks its first process and watches it. A job that
    /// cannot start is recorded at once (its `exit.json`) and not kept.
    fn start(&mut self, dir: &Path) {
        let job_dir = JobDir::new(dir);
        let (plan, grace_secs) = match job_dir.read_record() {
            Ok(JobRecord {
                plan: Some(plan),
                job,
                ..
            }) => (plan, job.grace_secs),
            Ok(_) => {
                return record_exit(
                    &job_dir,
                    None,
                    failed("the job has no execution plan", false),
                )
            }
            Err(e) => {
                return record_exit(
                    &job_dir,
                    None,
                    failed(&format!("cannot read the job's state: {e}"), true),
                )
            }
        };
        match fork(&job_dir, &plan) {
            Ok((pid, pidfd, step_pipe, events)) => {
                log(&format!("job {}: forked as pid {pid}", dir.display()));
                let job = Job {
                    dir: job_dir,
                    plan,
                    grace_secs,
                    pid,
                    pidfd: Some(pidfd),
                    step_pipe: Some(step_pipe),
                    failure: None,
                    status: None,
                    events,
                    announced: false,
                    draining: None,
                    said_slow: false,
                    fence: Fence::default(),
                };
                self.jobs.insert(dir.to_path_buf(), job);
                // The lease may have run out already: fenced from its first moment.
                if self.lease.out {
                    self.fence_jobs();
                }
            }
            Err(error) => {
                let exit = ExitRecord {
                    error: Some(error.error),
                    node_fault: error.node_fault,
                    end_time_ms: now_ms(),
                    ..Default::default()
                };
                record_exit(&job_dir, plan.cgroup.as_ref(), exit);
            }
        }
    }

    /// Records the pid of every job that has exec'd since the last look, and tells the
    /// connections following it (`started <pid> <time_ms>`), once.
    fn announce_starts(&mut self) {
        let mut lines = Vec::new();
        for (dir, job) in &mut self.jobs {
            if job.announced || job.step_pipe.is_some() || job.failure.is_some() {
                continue;
            }
            job.announced = true;
            if let Err(e) = job.dir.write_job_pid(job.pid) {
                log(&format!("cannot record the job pid: {e}"));
            }
            lines.push((dir.clone(), format!("started {} {}\n", job.pid, now_ms())));
        }
        for (dir, line) in lines {
            let followers: Vec<u64> = self
                .connections
                .iter()
                .filter(|(_, c)| c.job.as_deref() == Some(dir.as_path()))
                .map(|(&id, _)| id)
                .collect();
            for id in followers {
                self.send(id, &line);
            }
        }
    }

    /// Collects every ended child: a job's main process (its status kept), or an orphan of a
    /// job (this process is their subreaper).
    fn reap(&mut self) {
        while let Some((pid, status)) = sys::reap_one() {
            if let Some(job) = self
                .jobs
                .values_mut()
                .find(|j| j.pid == pid && j.status.is_none())
            {
                job.status = Some(status);
                job.pidfd = None;
                job.main_ended();
            }
        }
    }

    /// Finishes the jobs whose every process is gone.
    fn drain_and_finish(&mut self) {
        let over: Vec<PathBuf> = self
            .jobs
            .iter_mut()
            .filter_map(|(dir, job)| (job.draining.is_some() && job.all_gone()).then_some(dir))
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
            .collect();
        for dir in over {
            let Some(job) = self.jobs.remove(&dir) else {
                continue;
            };
            let exit = job.exit_record();
            record_exit(&job.dir, job.plan.cgroup.as_ref(), exit);
            // Closing tells noded the job is over: it reads `exit.json`.
            self.connections
                .retain(|_, c| c.job.as_deref() != Some(dir.as_path()));
        }
    }

    fn check_lease(&mut self) {
        let now = Instant::now();
        if let Some(since) = self.lease.out_since {
            if now >= since + LEASE_RECHECK {
                self.lease.out_since = None;
                if self.lease_run_out().is_some() {
                    self.lease.out = true;
                }
            }
        } else if self.lease.next_read.is_none_or(|at| now >= at) {
            self.lease.next_read = Some(now + LEASE_CHECK);
            match self.lease_run_out() {
                Some(true) => self.lease.out_since = Some(now),
                Some(false) => self.lease.out = false,
                None => {}
            }
        }
        if self.lease.out {
            self.fence_jobs();
        }
    }

    /// Whether the lease has run out: `None` when it cannot be read (nothing is fenced).
    fn lease_run_out(&mut self) -> Option<bool> {
        match Lease::read(&self.spool.join(LEASE_FILE)) {
            Ok(lease) => {
                self.lease.said_unreadable = false;
                Some(matches!(lease, Some(Lease::Until(deadline)) if boottime_ms() > deadline))
            }
            Err(e) => {
                if !self.lease.said_unreadable {
                    self.lease.said_unreadable = true;
                    log(&format!("cannot read the fence lease, not fencing: {e}"));
                }
                None
            }
        }
    }

    /// The lease ran out: stops every job not fenced yet, as noded would (see the shepherd's
    /// fence, whose rules these are).
    fn fence_jobs(&mut self) {
        for job in self.jobs.values_mut() {
            if !job.fence.fenced {
                job.fence_now();
            }
        }
    }

    /// SIGKILL to what is left of fenced jobs whose grace is over.
    fn fence_deadlines(&mut self) {
        let now = Instant::now();
        for job in self.jobs.values_mut() {
            if job.fence.kill_at.is_some_and(|at| now >= at) {
                job.fence.kill_at = None;
                let killed = job.processes().is_some_and(|processes| {
                    let alive = processes.any_alive().unwrap_or(true);
                    if alive {
                        log("fence: grace over, killing what is left of the job");
                        if let Err(e) = processes.kill() {
                            log(&format!("fence: cannot kill {processes}: {e}"));
                        }
                    }
                    alive
                });
                job.fence.killed |= killed;
            }
        }
    }
}

/// Forks the job planned as `plan`: its pid, pidfd, step pipe and `cgroup.events`.
fn fork(
    dir: &JobDir,
    plan: &ExecPlan,
) -> Result<(u32, OwnedFd, OwnedFd, Option<File>), StartError> {
    let cgroup_fault = |e: io::Error| StartError {
        error: format!("cannot use the job's cgroup: {e}"),
        node_fault: true,
    };
    let (join, events) = match &plan.cgroup {
        Some(cgroup) => (
            cgroup.open_procs_files().map_err(cgroup_fault)?,
            Some(cgroup.open_events().map_err(cgroup_fault)?),
        ),
        None => (Vec::new(), None),
    };
    let exec = child::exec_args(plan)?;
    let prepared = child::prepare(dir, plan, join)?;
    let pid = sys::fork_job(&exec, &prepared.setup).map_err(|e| child::failure(plan, &[], e))?;
    // Dropping the setup closes the parent's copy of the pipe's write end and of the cgroup
    // files: the pipe reads end of file once the child has exec'd or died.
    drop(prepared.setup);
    let pidfd = sys::pidfd_open(pid).map_err(|e| StartError {
        error: format!("pidfd_open: {e}"),
        node_fault: true,
    })?;
    Ok((pid, pidfd, prepared.step_read, events))
}

fn failed(error: &str, node_fault: bool) -> ExitRecord {
    ExitRecord {
        end_time_ms: now_ms(),
        error: Some(error.to_string()),
        node_fault,
        ..Default::default()
    }
}

/// Removes the job's cgroups (empty now) and records how it ended in `exit.json`.
fn record_exit(dir: &JobDir, cgroup: Option<&super::JobCgroup>, exit: ExitRecord) {
    if let Some(error) = &exit.error {
        log(&format!(
            "job {}: did not start: {error}",
            dir.path().display()
        ));
    }
    if let Some(cgroup) = cgroup {
        if let Err(e) = cgroup.remove() {
            log(&format!("cannot remove the job's cgroups: {e}"));
        }
    }
    if let Err(e) = dir.write_exit(&exit) {
        log(&format!("cannot write {}: {e}", dir.exit().display()));
    }
}

impl Job {
    /// Reads the step pipe: end of file means the exec is done (or the child died before);
    /// a report, that a step or the exec failed.
    fn read_step_pipe(&mut self) {
        let Some(pipe) = self.step_pipe.take() else {
            return;
        };
        let mut report = [0u8; sys::STEP_REPORT_LEN];
        let mut file = File::from(pipe);
        let read = file.read(&mut report).unwrap_or(0);
        if read > 0 {
            let error = child::reported_error(&report[..read]);
            self.failure = Some(child::failure(&self.plan, &report[..read], error));
        } else {
            log(&format!("job started as pid {}", self.pid));
        }
    }

    /// The main process ended (reaped): the rest is killed unless a stop is under way; then
    /// the job waits for its other processes.
    fn main_ended(&mut self) {
        if self.step_pipe.is_some() {
            self.read_step_pipe();
        }
        let stopping = self.dir.has_stop_notice();
        if self.failure.is_none() {
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
    fn processes(&self) -> Option<JobProcesses<'_>> {
        let group = if self.step_pipe.is_none() {
            Some(self.pid)
        } else {
            self.dir.read_job_group()
        };
        JobProcesses::of(self.plan.cgroup.as_ref(), group)
    }

    fn all_gone(&mut self) -> bool {
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

    fn exit_record(&self) -> ExitRecord {
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

    /// The lease ran out: the `stopping` notice (so the main process's end does not cut the
    /// others' grace), SIGTERM to every process, SIGKILL at the end of the grace. A stop
    /// noded had begun keeps its SIGTERM time. Without cgroups, a job whose process group is
    /// not known yet is fenced at the next look.
    fn fence_now(&mut self) {
        let Some(processes) = self.processes() else {
            return;
        };
        if !processes.any_alive().unwrap_or(true) {
            return;
        }
        let now = now_ms();
        let grace_ms = i64::from(self.grace_secs) * 1000;
        let term_time_ms = match self.dir.read_stop_notice() {
            Some(term) if term > 0 => {
                log(&format!(
                    "fence: the node's lease ran out during a stop begun at {}: killing what \
                     is left at the end of its grace",
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
                    "fence: the node's lease ran out (no word from schedd): stopping job {}, \
                     SIGTERM now, SIGKILL after {}s",
                    self.dir.path().display(),
                    self.grace_secs
                ));
                if let Err(e) = self.dir.write_stop_notice(now) {
                    log(&format!(
                        "cannot write the stop notice, so the main process's end will end the \
                         others' grace: {e}"
                    ));
                }
                if let Err(e) = processes.signal(Signal::SIGTERM) {
                    log(&format!("fence: cannot send SIGTERM to {processes}: {e}"));
                }
                now
            }
        };
        let wait_ms = u64::try_from(term_time_ms + grace_ms - now_ms()).unwrap_or(0);
        self.fence = Fence {
            fenced: true,
            term_time_ms,
            kill_at: Some(Instant::now() + Duration::from_millis(wait_ms)),
            killed: false,
        };
    }
}
