//! The node's supervisor: ONE long-lived process per node that starts and watches every job,
//! run as `noded __supervisor <spool>`.
//!
//! Why one: an older noded ran a process per job, the 11.6 MB noded binary re-executed
//! (loader, glibc's CPU probing that traps to the hypervisor, page faults, teardown: about
//! 5 ms of CPU per job). The supervisor is started once, and each job costs it a `clone3` that
//! shares its memory until the job's exec (see [`spawn`]: no page-table copy, no
//! copy-on-write faults), the job's setup and exec, and a few descriptors in one poll loop.
//!
//! Its rules:
//! - It runs in its own session (it calls `setsid` itself, so noded spawns it without a
//!   fork of its own many-threaded process), outliving noded restarts (systemd
//!   `KillMode=process`), and is the child subreaper of the jobs.
//! - It creates each job's first process itself; the child makes only system calls, no libc
//!   call (`spawn::setup_child`, then `execve`), and the supervisor never waits for it: the
//!   child's setup may block (a hung network filesystem), the exec's end is learnt from the
//!   step pipe's end of file, a failed step from its report.
//! - A job is over when its last process is gone: the main process's pidfd, then
//!   `cgroup.events` (`populated 0`) or, without cgroups, its process group looked at every
//!   20 ms. When the main process ended by itself the rest is killed; during a stop (the
//!   `stopping` notice) the others keep their grace.
//! - The fence: it reads the node's lease (see [`super::lease`]) every second, for all jobs
//!   at once, and when it has run out stops every job itself (the `stopping` notice, SIGTERM,
//!   the grace, SIGKILL), needing no noded; their exit records say `fenced`.
//! - It is the writer of the node's journal (see [`super::journal`]): each job's launch, start,
//!   stop progress and end, and schedd's acknowledgements, group-committed. A launch's
//!   first process is forked as soon as its record is appended, and sets up (cgroups,
//!   session, user, directories, output) while the record is synced, but waits on a pipe
//!   before its exec until the supervisor says the record is synced: nothing of the job runs
//!   before that (a launch that cannot be recorded has its waiting child killed, and is
//!   refused). An end is told to noded only once synced:
//!   so the end of a job is recorded even while noded is gone, and survives a power loss.
//!   A supervisor that starts finds in the journal the jobs a dead predecessor ran (it died,
//!   or the host restarted): their processes are not its children, and they are recorded as
//!   lost (what is left in their cgroup killed).
//!
//! noded talks to it over a Unix socket, `<spool>/supervisor.sock` (mode 0600; a peer other
//! than root or the supervisor's own user, as `SO_PEERCRED` names it, is refused). A socket
//! rather than inherited pipes: a restarted noded finds it by its path, with no state handed
//! over. One connection per job, and one per request otherwise (acknowledgements aside, see
//! `ack`), one line each way:
//! - `launch <JobRecord json>`: record the launch (synced) and start the job. The supervisor
//!   answers `started <pid> <time_ms>` once it has exec'd, and `ended <FinishedRecord json>`
//!   once it is over and its end synced, then closes; `refused <why>` when the launch cannot
//!   be recorded (a full spool: nothing was started).
//!   Without a cgroup, `gone` comes as soon as the job's process group is seen empty, before
//!   its end is recorded: noded signals that group's number no more (it may be reused).
//! - `attach <job id>`: a restarted noded following a job: `attached` (then as above),
//!   `ended <json>` (it ended meanwhile), or `unknown`.
//! - `stop <StopState json>`, on a job's connection: noded's stop progress, before its first
//!   signal (the others then keep their grace when the main process ends). Journaled, not
//!   synced.
//! - `record <FinishedRecord json>`: an end noded made (a launch that failed before it was
//!   handed over): `recorded` once synced, or `failed <why>`.
//! - `list`: `job <JobRecord json>` per job it runs, `ended <json>` per end schedd has not
//!   acknowledged, then `done`.
//! - `ack <job id>`: schedd recorded the job's end: journaled, not synced. noded sends these
//!   on the connection it holds open (below), several in one write when they came together.
//!
//! A second supervisor for the same spool exits at once (an `flock` on `supervisor.lock`).
//! With no job and no connection for [`IDLE_EXIT`] it exits. noded holds a connection open
//! while it runs (saying nothing on it but acknowledgements), so that a job submitted to an
//! idle node does not wait for a supervisor to be started: it exits only once noded is gone
//! for that long, and noded starts it again when it comes back.

// Everywhere but `sys`, `unsafe` is refused.
#![deny(unsafe_code)]

mod child;
#[allow(unsafe_code)]
mod spawn;
#[allow(unsafe_code)]
mod sys;

use child::StartError;
use spawn::{ChildInUse, ChildMemory};

use super::cgroup::{read_populated, JobCgroup};
use super::job_task::{checkpoint_to_check, finished_record, saved_since, LOST};
use super::journal::{Entry, Journal, JournalOptions, Receipt};
use super::lease::{boottime_ms, Lease, LEASE_FILE};
use super::node_protocol::{self, BadLine, Reply, Request};
use super::process::newest_mtime_ms;
use super::spool::{ExitRecord, FinishedRecord, JobDir, JobRecord, StopState, FILE_MODE};
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

/// The longest path a Unix socket's address holds (`sun_path`, with its NUL).
const SUN_PATH_MAX: usize = 108;

/// Where the supervisor's socket is reached: its path, or where that is too long for a
/// socket's address (108 bytes), the same through `/proc/self/fd/<spool dir>`, valid while
/// this holds the spool directory open.
pub struct SocketAddress {
    path: PathBuf,
    _dir: Option<File>,
}

impl SocketAddress {
    pub fn of_spool(spool: &Path) -> io::Result<SocketAddress> {
        let path = spool.join(SOCKET_FILE);
        if path.as_os_str().len() < SUN_PATH_MAX {
            return Ok(SocketAddress { path, _dir: None });
        }
        let dir = File::open(spool)?;
        let path = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_FILE}", dir.as_raw_fd()));
        Ok(SocketAddress {
            path,
            _dir: Some(dir),
        })
    }

    /// The path to bind or connect to (short enough).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The hidden subcommand that turns the noded binary into the node's supervisor.
pub const SUPERVISOR_SUBCOMMAND: &str = "__supervisor";
/// The supervisor's socket, in the spool's root.
pub const SOCKET_FILE: &str = "supervisor.sock";
/// Held (`flock`) by the running supervisor, in the spool's root.
const LOCK_FILE: &str = "supervisor.lock";
/// The supervisor's own diagnostics, in the spool's root.
pub const LOG_FILE: &str = "supervisor.log";
/// With no job and no connection this long (noded gone: it holds one while it runs), the
/// supervisor exits.
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
/// The longest request line: a launch carries the job's script, environment and arguments
/// (schedd bounds them at 2 × `scheduler.max_script_mib` + 2 MiB), as JSON.
const MAX_LINE: usize = super::journal::MAX_RECORD_BYTES;

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
    let (journal, replay) = match Journal::open(spool, JournalOptions::default()) {
        Ok(opened) => opened,
        Err(e) => {
            log(&format!("cannot open the node's journal: {e}"));
            return ExitCode::FAILURE;
        }
    };
    if replay.torn_tail {
        log("the journal ended in a torn record (a crash or power loss mid-write): dropped");
    }
    let (wake_read, wake_write) =
        match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK) {
            Ok(pipe) => pipe,
            Err(e) => {
                log(&format!("cannot create a pipe: {e}"));
                return ExitCode::FAILURE;
            }
        };
    let wake_write = File::from(wake_write);
    let checkpoint_wake = match wake_write.try_clone() {
        Ok(clone) => clone,
        Err(e) => {
            log(&format!("cannot duplicate a pipe: {e}"));
            return ExitCode::FAILURE;
        }
    };
    journal.set_wake(wake_write);
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
    ysched_common::stamp::stamp("s.up", 0);
    let mut supervisor = Supervisor {
        spool: spool.to_path_buf(),
        listener,
        connections: BTreeMap::new(),
        next_connection: 0,
        read_buf: vec![0u8; 64 * 1024],
        jobs: BTreeMap::new(),
        lease: LeaseWatch::default(),
        idle_since: Instant::now(),
        journal,
        wake: File::from(wake_read),
        checkpoint_wake,
        launching: Vec::new(),
        ending: Vec::new(),
        checking: Vec::new(),
        recording: Vec::new(),
        late_joins: None,
    };
    supervisor.record_lost(replay.live.unended().cloned().collect());
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
                let connected = SocketAddress::of_spool(spool)
                    .and_then(|address| UnixStream::connect(address.path()));
                if connected.is_ok() || since.elapsed() > Duration::from_secs(5) {
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
    let address = SocketAddress::of_spool(spool)?;
    let listener = UnixListener::bind(address.path())?;
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
    /// What a connection's read goes into first (kept: not allocated and zeroed per read).
    read_buf: Vec<u8>,
    /// By job id.
    jobs: BTreeMap<u64, Job>,
    lease: LeaseWatch,
    idle_since: Instant,
    journal: Journal,
    /// Readable once the journal committed a batch, or a checkpoint look is done.
    wake: File,
    /// Given to the threads that look at checkpoint directories.
    checkpoint_wake: File,
    /// Launches whose record is not synced yet: started once it is.
    launching: Vec<Launching>,
    /// Ends whose record is not synced yet: told once it is.
    ending: Vec<Ending>,
    /// Ends waiting for a look at the job's checkpoint directory (see
    /// [`checkpoint_to_check`]): on a thread, as a hung file system must not stop the loop.
    checking: Vec<Checking>,
    /// `record` requests whose end is not synced yet: answered once it is.
    recording: Vec<(u64, Receipt)>,
    /// To the thread that moves jobs into the cgroups they join after their exec (see
    /// [`JobCgroup::join_after_exec`]), started at the first: a `cgroup.procs` write of a
    /// v1 hierarchy can take milliseconds (an RCU grace period), which this loop must not
    /// wait for.
    late_joins: Option<std::sync::mpsc::Sender<(u64, JobCgroup)>>,
}

struct Connection {
    stream: UnixStream,
    input: Vec<u8>,
    /// How much of `input` holds no end of line.
    scanned: usize,
    /// The job this connection follows, once it asked.
    job: Option<u64>,
}

struct Launching {
    record: JobRecord,
    receipt: Receipt,
    /// The job's first process, forked as soon as the launch was appended, so that its setup
    /// overlaps the journal's sync; `None` where it could not be (started once recorded, as
    /// before, which ends the job with the reason).
    early: Option<Early>,
}

struct Ending {
    finished: FinishedRecord,
    /// The job's record, listed as running until its end is synced and told.
    record: JobRecord,
    receipt: Receipt,
}

struct Checking {
    record: JobRecord,
    exit: ExitRecord,
    saved: std::sync::mpsc::Receiver<bool>,
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
    /// As launched, with noded's stop progress (`stop` lines) folded in.
    record: JobRecord,
    plan: ExecPlan,
    grace_secs: u32,
    /// A stop began (noded's, or the fence's): when its SIGTERM was sent, 0 for a kill at
    /// once. The main process's end then leaves the others their grace.
    stop_notice: Option<i64>,
    pid: u32,
    /// Readable once the main process has ended; dropped once it is reaped.
    pidfd: Option<OwnedFd>,
    /// Open until the child has exec'd (or failed).
    step_pipe: Option<OwnedFd>,
    /// What the child reads until its exec (see [`Forked::child`]).
    child: Option<ChildInUse>,
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
    Wake,
    /// Wake-ups only: every job is looked at after each poll.
    Pidfd,
    Events,
}

impl Supervisor {
    fn run(&mut self) -> ExitCode {
        loop {
            let keys: Vec<u64> = self.jobs.keys().copied().collect();
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
            watch(self.wake.as_raw_fd(), libc::POLLIN, Token::Wake);
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
                    Token::Wake => {
                        let mut drain = [0u8; 256];
                        while matches!((&self.wake).read(&mut drain), Ok(n) if n > 0) {}
                    }
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
            self.start_committed_launches();
            self.reap();
            self.announce_starts();
            self.drain_and_finish();
            self.end_checked();
            self.tell_committed_ends();
            self.answer_committed_records();
            self.check_lease();
            self.fence_deadlines();
            if self.is_idle() {
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
        if self.is_idle() {
            until = until.min(self.idle_since + IDLE_EXIT);
        }
        until.saturating_duration_since(now)
    }

    /// No job, no connection, nothing waiting for the journal.
    fn is_idle(&self) -> bool {
        self.jobs.is_empty()
            && self.connections.is_empty()
            && self.launching.is_empty()
            && self.ending.is_empty()
            && self.checking.is_empty()
            && self.recording.is_empty()
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
                    scanned: 0,
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
        let buf = &mut self.read_buf;
        let closed = loop {
            match connection.stream.read(buf) {
                Ok(0) => break true,
                Ok(n) => connection.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        let mut lines = Vec::new();
        // Only what came since the last look is searched: a launch's line can be megabytes.
        while let Some(end) = connection.input[connection.scanned..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|at| connection.scanned + at)
        {
            let line: Vec<u8> = connection.input.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
            connection.scanned = 0;
        }
        connection.scanned = connection.input.len();
        let garbage = connection.input.len() > MAX_LINE;
        // What came before the end of the connection is served (an `ack`, then closed).
        for line in lines {
            self.request(id, &line);
        }
        if closed || garbage {
            // noded went away (or sent garbage): the job goes on without it.
            self.connections.remove(&id);
        }
    }

    fn request(&mut self, id: u64, line: &str) {
        let request = match Request::parse(line) {
            Ok(request) => request,
            Err(bad) => return self.bad_request(id, line, bad),
        };
        match request {
            Request::Launch(record) => {
                ysched_common::stamp::stamp("s.launch_req", record.job.job_id);
                self.launch(id, *record)
            }
            Request::Attach { job_id } => self.attach(id, job_id),
            Request::Stop(stop) => self.stop(id, stop),
            Request::Record(finished) => {
                let receipt = self.journal.append(Entry::Ended(finished));
                self.recording.push((id, receipt));
            }
            Request::List => self.list(id),
            Request::Ack { job_id } => {
                let _ = self.journal.append(Entry::Acked { job_id });
            }
        }
    }

    /// A request that does not read: refused where noded waits for an answer, else said in
    /// the log (an acknowledgement that does not read is dropped: the end is reported again).
    fn bad_request(&mut self, id: u64, line: &str, bad: BadLine) {
        match bad {
            BadLine::Unknown => {
                log(&format!("unknown request {line:?}"));
                self.connections.remove(&id);
            }
            BadLine::Unreadable { verb, why } => match verb {
                node_protocol::LAUNCH => self.refuse(id, &format!("unreadable launch: {why}")),
                node_protocol::ATTACH => self.refuse(id, &why),
                node_protocol::STOP => log(&format!("unreadable stop progress: {why}")),
                node_protocol::RECORD => {
                    self.reply(id, &Reply::Failed(format!("unreadable end: {why}")));
                    self.connections.remove(&id);
                }
                _ => {}
            },
        }
    }

    fn refuse(&mut self, id: u64, why: &str) {
        log(&format!("refused: {why}"));
        self.reply(id, &Reply::Refused(why.to_string()));
        self.connections.remove(&id);
    }

    /// A new job: its launch is recorded (synced) first, and it starts once that is done
    /// (see [`Supervisor::start_committed_launches`]); its first process is forked meanwhile
    /// and waits before its exec (see [`Launching::early`]).
    fn launch(&mut self, id: u64, record: JobRecord) {
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

    /// A restarted noded follows a job: `attached`, `ended` if it ended meanwhile, or
    /// `unknown`.
    fn attach(&mut self, id: u64, job_id: u64) {
        let following = self.jobs.contains_key(&job_id)
            || self.launching.iter().any(|l| l.record.job.job_id == job_id)
            || self.checking.iter().any(|c| c.record.job.job_id == job_id)
            || self.ending.iter().any(|e| e.finished.job_id == job_id);
        if following {
            self.reply(id, &Reply::Attached);
            self.follow(id, job_id);
            let over = self
                .checking
                .iter()
                .map(|c| &c.record)
                .chain(self.ending.iter().map(|e| &e.record))
                .find(|record| record.job.job_id == job_id);
            if over.is_some_and(|record| record.plan.as_ref().is_none_or(|p| p.cgroup.is_none())) {
                self.say_group_gone(job_id);
            }
            return;
        }
        let ended = self
            .journal
            .with_live(|live| live.jobs.get(&job_id).and_then(|j| j.ended.clone()));
        match ended {
            Some(finished) => self.reply(id, &Reply::Ended(finished)),
            None => self.reply(id, &Reply::Unknown),
        }
        self.connections.remove(&id);
    }

    /// Tells the connections following a job without a cgroup that its process group is
    /// empty (`gone`), as soon as it is seen so: its end may take a while to be recorded (a
    /// checkpoint directory to look at, the journal's sync), and from now on the group's
    /// number may be taken by a new group, which noded must not signal.
    fn say_group_gone(&mut self, job_id: u64) {
        for id in self.followers(job_id) {
            self.reply(id, &Reply::Gone);
        }
    }

    /// noded's stop progress for the job its connection follows.
    fn stop(&mut self, id: u64, stop: StopState) {
        let Some(job_id) = self.connections.get(&id).and_then(|c| c.job) else {
            return;
        };
        if let Some(job) = self.jobs.get_mut(&job_id) {
            if stop.term_time_ms > 0 || stop.kill_sent {
                job.stop_notice = Some(stop.term_time_ms);
            }
            job.record.stop = stop.clone();
        } else if let Some(launching) = self
            .launching
            .iter_mut()
            .find(|l| l.record.job.job_id == job_id)
        {
            launching.record.stop = stop.clone();
        }
        let _ = self.journal.append(Entry::Stop { job_id, stop });
    }

    /// The jobs it runs and the ends schedd has not acknowledged, for a restarted noded.
    fn list(&mut self, id: u64) {
        let mut lines = String::new();
        let running = self
            .jobs
            .values()
            .map(|job| {
                let mut record = job.record.clone();
                if job.announced {
                    record.job_pid = Some(job.pid);
                }
                record
            })
            .chain(self.launching.iter().map(|l| l.record.clone()))
            // Ended, but not yet told: a restarted noded attaches and is told then.
            .chain(self.checking.iter().map(|c| c.record.clone()))
            .chain(self.ending.iter().map(|e| e.record.clone()));
        for record in running {
            if let Ok(line) = Reply::Job(Box::new(record)).to_line() {
                lines.push_str(&line);
            }
        }
        let ended: Vec<FinishedRecord> = self
            .journal
            .with_live(|live| live.unacked_ends().cloned().collect());
        let pending = self
            .ending
            .iter()
            .map(|e| e.finished.job_id)
            .chain(self.checking.iter().map(|c| c.record.job.job_id));
        let pending: Vec<u64> = pending.collect();
        for finished in ended {
            if pending.contains(&finished.job_id) || self.jobs.contains_key(&finished.job_id) {
                continue;
            }
            if let Ok(line) = Reply::Ended(finished).to_line() {
                lines.push_str(&line);
            }
        }
        lines.push_str(&Reply::Done.to_line().unwrap_or_default());
        self.send_all(id, lines.as_bytes());
        self.connections.remove(&id);
    }

    fn follow(&mut self, id: u64, job_id: u64) {
        if let Some(connection) = self.connections.get_mut(&id) {
            connection.job = Some(job_id);
        }
    }

    /// A longer answer (a list): written blocking, with a bound, as noded reads it at once.
    fn send_all(&mut self, id: u64, bytes: &[u8]) {
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        let stream = &connection.stream;
        let sent = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(5))))
            .and_then(|()| (&connection.stream).write_all(bytes));
        if let Err(e) = sent {
            log(&format!("cannot answer noded: {e}"));
        }
    }

    /// The connections following job `job_id`.
    fn followers(&self, job_id: u64) -> Vec<u64> {
        self.connections
            .iter()
            .filter(|(_, c)| c.job == Some(job_id))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Sends `reply` on connection `id`.
    fn reply(&mut self, id: u64, reply: &Reply) {
        match reply.to_line() {
            Ok(line) => self.send(id, &line),
            Err(e) => log(&format!("cannot encode {reply:?}: {e}")),
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

    /// Starts the jobs whose launch is synced now; answers `refused` for those whose launch
    /// could not be recorded.
    fn start_committed_launches(&mut self) {
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
    fn start(&mut self, record: JobRecord, early: Option<Early>) {
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
            None => match fork(&dir, &plan, None) {
                Ok(forked) => self.watch(record, dir, plan, forked, None),
                Err(error) => self.not_started(record, &plan, error),
            },
        }
    }

    /// Where the supervisor keeps job `job_id`'s files.
    fn job_dir(&self, job_id: u64) -> JobDir {
        JobDir::new(self.spool.join("jobs").join(job_id.to_string()))
    }

    /// Forks a job's first process before its launch is recorded (see [`Launching::early`]):
    /// it sets up and waits for [`Supervisor::start`]. `None` where it cannot be: no plan, no
    /// pipe, or the fork failed (then forked again once recorded, which fails the same way and
    /// ends the job with the reason, its cgroup removed then).
    fn fork_early(&self, record: &JobRecord) -> Option<Early> {
        let plan = record.plan.as_ref()?;
        let (go_read, go) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        let forked = fork(&self.job_dir(record.job.job_id), plan, Some(go_read)).ok()?;
        Some(Early {
            forked,
            go,
            status: None,
        })
    }

    /// Watches a job's first process, forked (and, with `status`, already reaped).
    fn watch(
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
    fn not_started(&mut self, record: JobRecord, plan: &ExecPlan, error: StartError) {
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
    fn finish(&mut self, record: JobRecord, exit: ExitRecord) {
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
    fn end_checked(&mut self) {
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

    fn record_end(&mut self, finished: FinishedRecord, record: JobRecord) {
        ysched_common::stamp::stamp("s.end_appended", finished.job_id);
        let receipt = self.journal.append(Entry::Ended(finished.clone()));
        self.ending.push(Ending {
            finished,
            record,
            receipt,
        });
    }

    /// Tells noded the ends now synced (`ended <json>`), and closes their connections.
    fn tell_committed_ends(&mut self) {
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
    fn answer_committed_records(&mut self) {
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
    fn record_lost(&mut self, unended: Vec<JobRecord>) {
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
    fn announce_starts(&mut self) {
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
    fn join_after_exec(&mut self, job_id: u64, cgroup: JobCgroup) {
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
    fn reap(&mut self) {
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
    fn drain_and_finish(&mut self) {
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

    /// The lease ran out: stops every job not fenced yet, as noded would.
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

/// How jobs are created: `clone3` (into their cgroup, with one) until the kernel refuses it
/// once (then fork and `cgroup.procs` writes, for the rest of this supervisor's life).
/// Said once in the log, either way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CloneMode {
    Untried,
    Clone3,
    Fork,
}

static CLONE_MODE: std::sync::Mutex<CloneMode> = std::sync::Mutex::new(CloneMode::Untried);

fn clone_mode() -> CloneMode {
    *CLONE_MODE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn set_clone_mode(mode: CloneMode, why: &str) {
    let mut current = CLONE_MODE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *current != mode {
        *current = mode;
        log(why);
    }
}

/// Creates the job planned as `plan`: its pid, pidfd, step pipe and `cgroup.events`. The
/// child is created with `clone3` (see [`spawn::clone_job`]): with a cgroup, born in its v2
/// cgroup, joining only its v1 ones (limits, on hybrid hosts). Where the kernel has no such
/// `clone3`, it is forked and joins them all.
fn fork(dir: &JobDir, plan: &ExecPlan, go: Option<OwnedFd>) -> Result<Forked, StartError> {
    let cgroup_fault = |e: io::Error| StartError {
        error: format!("cannot use the job's cgroup: {e}"),
        node_fault: true,
    };
    let go_raw = go.as_ref().map(AsRawFd::as_raw_fd);
    if clone_mode() != CloneMode::Fork {
        let (join, events, cgroup_dir) = match &plan.cgroup {
            Some(cgroup) => (
                // The v2 cgroup's `cgroup.procs` is the first; the child is born there.
                cgroup
                    .open_procs_files()
                    .map_err(cgroup_fault)?
                    .into_iter()
                    .skip(1)
                    .collect(),
                Some(cgroup.open_events().map_err(cgroup_fault)?),
                Some(cgroup.open_dir().map_err(cgroup_fault)?),
            ),
            None => (Vec::new(), None, None),
        };
        let mut prepared = child::prepare(dir, plan, join)?;
        prepared.setup.go = go_raw;
        let memory = ChildMemory::new(child::exec_args(plan)?, prepared.setup);
        match spawn::clone_job(memory, cgroup_dir.as_ref()) {
            Ok((pid, pidfd, in_use)) => {
                set_clone_mode(
                    CloneMode::Clone3,
                    "jobs are created with clone3 (born in their cgroup where they have one), \
                     in the supervisor's memory until their exec (CLONE_VM, x86-64)",
                );
                // The parent's copies of the child's descriptors (its step pipe's write end
                // among them, so that the pipe reads end of file once the child has exec'd).
                drop(prepared.parent_copies);
                drop(go);
                return Ok(Forked {
                    pid,
                    pidfd,
                    step_pipe: prepared.step_read,
                    events,
                    child: Some(in_use),
                });
            }
            Err(e) if spawn::clone3_unsupported(&e) => set_clone_mode(
                CloneMode::Fork,
                &format!("clone3 refused ({e}): jobs are forked and join their cgroups themselves"),
            ),
            Err(e) => return Err(child::failure(plan, &[], e)),
        }
    }
    let (join, events) = match &plan.cgroup {
        Some(cgroup) => (
            cgroup.open_procs_files().map_err(cgroup_fault)?,
            Some(cgroup.open_events().map_err(cgroup_fault)?),
        ),
        None => (Vec::new(), None),
    };
    let mut prepared = child::prepare(dir, plan, join)?;
    prepared.setup.go = go_raw;
    let memory = ChildMemory::new(child::exec_args(plan)?, prepared.setup);
    let pid = spawn::fork_job(&memory).map_err(|e| child::failure(plan, &[], e))?;
    // The child has its own copy of the memory and descriptors: the parent's are let go.
    drop((memory, prepared.parent_copies, go));
    let pidfd = sys::pidfd_open(pid).map_err(|e| StartError {
        error: format!("pidfd_open: {e}"),
        node_fault: true,
    })?;
    Ok(Forked {
        pid,
        pidfd,
        step_pipe: prepared.step_read,
        events,
        child: None,
    })
}

/// A job forked early whose launch could not be recorded: its child, still waiting for
/// the word (or already ended), is killed and collected, and its cgroups removed. Nothing
/// of the job ran.
fn end_early(record: &JobRecord, early: Early) {
    if early.status.is_none() {
        sys::kill_and_collect(early.forked.pid);
    }
    if let Some(child) = early.forked.child {
        child.release();
    }
    if let Some(cgroup) = record.plan.as_ref().and_then(|plan| plan.cgroup.as_ref()) {
        if let Err(e) = cgroup.remove() {
            log(&format!("cannot remove the job's cgroups: {e}"));
        }
    }
}

/// A job's first process, created: its pid, pidfd, step pipe and `cgroup.events`.
struct Forked {
    pid: u32,
    pidfd: OwnedFd,
    step_pipe: OwnedFd,
    events: Option<File>,
    /// What the child reads until its exec, when it shares this process's memory: released
    /// once it has exec'd or ended.
    child: Option<ChildInUse>,
}

/// A job forked before its launch was recorded, waiting (before its exec) for the word.
struct Early {
    forked: Forked,
    /// The write end of the child's `go` pipe (see `sys::ChildSetup::go`).
    go: OwnedFd,
    /// Its wait status, if the child ended (reaped) before the launch was recorded: it
    /// failed a setup step, or was killed.
    status: Option<libc::c_int>,
}

fn failed(error: &str, node_fault: bool) -> ExitRecord {
    ExitRecord {
        end_time_ms: now_ms(),
        error: Some(error.to_string()),
        node_fault,
        ..Default::default()
    }
}

impl Job {
    /// Reads the step pipe: end of file means the exec is done (or the child died before);
    /// a report, that a step or the exec failed.
    fn read_step_pipe(&mut self) {
        let Some(pipe) = self.step_pipe.take() else {
            return;
        };
        let mut report = [0u8; spawn::STEP_REPORT_LEN];
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
    fn main_ended(&mut self) {
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
        let mut began_stop = false;
        let term_time_ms = match self.stop_notice {
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
                    self.record.job.job_id, self.grace_secs
                ));
                // Noted before the first signal (below, once `processes` is let go): the
                // main process's end then leaves the others their grace.
                began_stop = true;
                if let Err(e) = processes.signal(Signal::SIGTERM) {
                    log(&format!("fence: cannot send SIGTERM to {processes}: {e}"));
                }
                now
            }
        };
        if began_stop {
            self.stop_notice = Some(now);
        }
        let wait_ms = u64::try_from(term_time_ms + grace_ms - now_ms()).unwrap_or(0);
        self.fence = Fence {
            fenced: true,
            term_time_ms,
            kill_at: Some(Instant::now() + Duration::from_millis(wait_ms)),
            killed: false,
        };
    }
}
