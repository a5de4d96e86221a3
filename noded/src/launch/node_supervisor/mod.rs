//! The node's supervisor: ONE long-lived process per node that starts and watches every job,
//! run as `noded __supervisor <spool>`.
//!
//! Why one: an older noded ran a process per job, the 11.6 MB noded binary re-executed
//! (loader, glibc's CPU probing that traps to the hypervisor, page faults, teardown: about
//! 5 ms of CPU per job). The supervisor is started once, and each job costs it a `clone3` that
//! shares its memory until the job's exec (see [`spawn`]: no page-table copy, no
//! copy-on-write faults), the job's setup and exec, and a few descriptors in one poll loop.
//!
//! Its rules (the socket noded speaks to it on, and the requests it answers, are in
//! [`socket`]):
//! - It runs in its own session (it calls `setsid` itself, so noded spawns it without a
//!   fork of its own many-threaded process), outliving noded restarts (systemd
//!   `KillMode=process`), and is the child subreaper of the jobs.
//! - It creates each job's first process itself; the child makes only system calls, no libc
//!   call (`in_child::run`: its setup, then `execve`), and the supervisor never waits for it: the
//!   child's setup may block (a hung network filesystem), the exec's end is learnt from the
//!   step pipe's end of file, a failed step from its report.
//! - A job is over when its last process is gone: the main process's pidfd, then
//!   `cgroup.events` (`populated 0`) or, without cgroups, its process group looked at every
//!   20 ms. When the main process ended by itself the rest is killed; during a stop (the
//!   `stopping` notice) the others keep their grace.
//! - The fence (see [`fence`]): it reads the node's lease (see [`super::lease`]) every
//!   second, for all jobs at once, and when it has run out stops every job itself (the
//!   `stopping` notice, SIGTERM, the grace, SIGKILL), needing no noded; their exit records
//!   say `fenced`.
//! - It is the writer of the node's journal (see [`super::journal`], and [`jobs`]): each
//!   job's launch, start, stop progress and end, and schedd's acknowledgements,
//!   group-committed. A launch's
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
//! A second supervisor for the same spool exits at once (an `flock` on `supervisor.lock`).
//! With no job and no connection for [`IDLE_EXIT`] it exits. noded holds a connection open
//! while it runs (saying nothing on it but acknowledgements), so that a job submitted to an
//! idle node does not wait for a supervisor to be started: it exits only once noded is gone
//! for that long, and noded starts it again when it comes back.

// Everywhere but `spawn` and `sys`, `unsafe` is refused.
#![deny(unsafe_code)]

mod child;
mod fence;
mod first_process;
mod in_child;
mod job;
mod jobs;
mod socket;
#[allow(unsafe_code)]
mod spawn;
#[allow(unsafe_code)]
mod sys;

pub use socket::{SocketAddress, SOCKET_FILE};

use super::cgroup::JobCgroup;
use super::journal::{Journal, JournalOptions, Receipt};
use super::spool::FILE_MODE;
use fence::{LeaseWatch, LEASE_CHECK, LEASE_RECHECK};
use job::Job;
use jobs::{Checking, Ending, Launching};
use socket::{listen, Connection};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ysched_common::time::{now_ms, rfc3339};

/// The hidden subcommand that turns the noded binary into the node's supervisor.
pub const SUPERVISOR_SUBCOMMAND: &str = "__supervisor";

/// Held (`flock`) by the running supervisor, in the spool's root.
const LOCK_FILE: &str = "supervisor.lock";

/// The supervisor's own diagnostics, in the spool's root.
pub const LOG_FILE: &str = "supervisor.log";

/// With no job and no connection this long (noded gone: it holds one while it runs), the
/// supervisor exits.
pub const IDLE_EXIT: Duration = Duration::from_secs(5);

/// How often a job without cgroups is looked at once its main process ended: a process
/// group's end is no event.
pub(super) const GROUP_POLL: Duration = Duration::from_millis(20);

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

/// One line on the supervisor's stderr (its `supervisor.log`). A line that cannot be
/// written (a full spool) is dropped: the supervisor must not die of it.
pub(super) fn log(message: &str) {
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
    /// [`checkpoint_to_check`](super::job_task::checkpoint_to_check)): on a thread, as a hung
    /// file system must not stop the loop.
    checking: Vec<Checking>,
    /// `record` requests whose end is not synced yet: answered once it is.
    recording: Vec<(u64, Receipt)>,
    /// To the thread that moves jobs into the cgroups they join after their exec (see
    /// [`JobCgroup::join_after_exec`]), started at the first: a `cgroup.procs` write of a
    /// v1 hierarchy can take milliseconds (an RCU grace period), which this loop must not
    /// wait for.
    late_joins: Option<std::sync::mpsc::Sender<(u64, JobCgroup)>>,
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
}
