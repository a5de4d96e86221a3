//! Every `unsafe` of the shepherd: its raw system calls and its child's pre-exec code.
//!
//! Each `unsafe` says why it is sound. The shepherd's own process: closing inherited
//! descriptors, ignoring termination signals, becoming the subreaper, reaping, the start
//! announcement. Its forked child: [`setup_child`], which runs between fork and exec in a
//! process that has another thread (the fence's watcher), so it may only make
//! async-signal-safe system calls, on data prepared before the fork ([`ChildSetup`]): no
//! allocation, no lock, no name-service lookup. On failure it reports which step failed on
//! a pipe (see [`Step`]).

use super::child::{Refused, Step};
use super::log;
use nix::sys::signal::{signal, SigHandler, Signal};
use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Descriptors noded did not mean to pass on (a library's without close-on-exec) would
/// otherwise reach the job. Keeps stdin, stdout (the pipe to noded) and stderr (the log).
pub(in crate::launch) fn close_inherited_fds() {
    // SAFETY: close_range only closes descriptors; none above 2 is in use yet.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if closed < 0 {
        log(&format!("close_range: {}", io::Error::last_os_error()));
    }
}

/// noded's stop requests go to the job's processes, not here; a stray SIGTERM or SIGHUP (the
/// session of a terminal, a broad `kill`) must not orphan the job.
pub(in crate::launch) fn ignore_termination_signals() {
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        // SAFETY: installing SIG_IGN involves no handler code.
        if let Err(e) = unsafe { signal(sig, SigHandler::SigIgn) } {
            log(&format!("cannot ignore {sig}: {e}"));
        }
    }
}

/// Orphans of the job (a daemon's parent exiting, a double fork) become this process's
/// children instead of init's, so their zombies are reaped even where init does not.
pub(in crate::launch) fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        log(&format!(
            "cannot become the job's subreaper: {}",
            io::Error::last_os_error()
        ));
    }
}

/// Everything the child needs, prepared before the fork so the child only makes syscalls.
pub(in crate::launch) struct ChildSetup {
    /// `cgroup.procs` of each of the job's cgroups, written "0" (this process) first thing.
    pub(super) join_cgroups: Vec<OwnedFd>,
    pub(super) switch_user: bool,
    pub(super) uid: Uid,
    pub(super) gid: Gid,
    pub(super) groups: Vec<libc::gid_t>,
    pub(super) workdir: CString,
    /// The script's `#!` program, checked for execute permission as the job user.
    pub(super) interpreter: Option<CString>,
    /// The checkpoint directory and its ancestors, outermost first (`mkdir -p`).
    pub(super) checkpoint_dirs: Vec<CString>,
    pub(super) stdout: CString,
    pub(super) stderr: Option<CString>,
    pub(super) output_flags: libc::c_int,
    pub(super) step_report: OwnedFd,
    /// The job directory's `group` file, where the child writes its pid (its process group)
    /// first thing; `None` with cgroups, which hold the job from its first instruction.
    pub(super) group_file: Option<OwnedFd>,
    /// A pipe's read end the child waits on, after its setup and before its exec, for the
    /// supervisor's word that the job's launch is recorded (one byte): the setup overlaps
    /// the journal's sync, and nothing of the job runs before it. End of file (the
    /// supervisor gone) ends the child.
    pub(super) go: Option<OwnedFd>,
}

/// Runs in the forked child, before exec: new session, user switch, directories, output.
fn setup_child(s: &ChildSetup) -> io::Result<()> {
    let report = |step: Step, refused: Option<Refused>, error: &io::Error| {
        report_step(
            &s.step_report,
            step as u8,
            refused.map_or(0, |r| r as u8),
            error,
        );
    };
    let fail = |step: Step, error: io::Error| -> io::Error {
        report(step, None, &error);
        error
    };
    let check = |step: Step, ret: libc::c_int| -> io::Result<()> {
        if ret < 0 {
            Err(fail(step, io::Error::last_os_error()))
        } else {
            Ok(())
        }
    };

    // The shepherd ignores these; ignored dispositions survive exec, the job needs defaults.
    // Reset before the child joins the job's cgroup: a stop that reaches it there before its
    // exec ends it (its SIGTERM is not lost on an ignored disposition).
    for sig in TERMINATION_SIGNALS {
        // SAFETY: resetting a disposition to SIG_DFL is async-signal-safe.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // Blocked by the parent around the fork or clone (see `BlockedTermination`): a stop
    // sent meanwhile ends the child here.
    unblock_termination_signals();
    // Before anything that can block, while still root: from here on every process the job
    // starts is in its cgroups, and cannot leave them, and noded can stop it.
    for procs in &s.join_cgroups {
        // SAFETY: write(2) of one byte from a static to a descriptor opened before the fork.
        let written = unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        check(Step::Cgroup, if written == 1 { 0 } else { -1 })?;
    }
    // Own session and process group: killpg(job pid) reaches the whole job, not the shepherd.
    nix::unistd::setsid().map_err(|e| fail(Step::Session, e.into()))?;
    if let Some(group) = &s.group_file {
        // Without cgroups, the process group is what noded stops: recorded before anything
        // that can block. Best effort: if it cannot be written, stops wait for the exec.
        let mut digits = [0u8; 20];
        let text = decimal(std::process::id(), &mut digits);
        // SAFETY: write(2) from a live local to a descriptor opened before the fork.
        unsafe { libc::write(group.as_raw_fd(), text.as_ptr().cast(), text.len()) };
    }
    if s.switch_user {
        // Groups first: after setuid the process may no longer change them. The system
        // calls themselves, not libc's wrappers: in a process with other threads (the
        // journal's committer, a checkpoint look) those make every thread change too, and
        // after a clone3 libc does not know it happened, so in the child the wrapper would
        // signal threads that are not there and wait on locks they held at the clone (one
        // exiting at that instant holds one for good). Each call changes this process's
        // (only) thread, which is what the child needs, as glibc's posix_spawn does.
        // SAFETY: raw system calls with integer arguments and a pointer to a live slice of
        // gid_t prepared before the fork.
        unsafe {
            let groups: &[libc::gid_t] = &s.groups;
            check(
                Step::Groups,
                libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) as libc::c_int,
            )?;
            let gid = s.gid.as_raw();
            check(
                Step::Gid,
                libc::syscall(libc::SYS_setresgid, gid, gid, gid) as libc::c_int,
            )?;
            let uid = s.uid.as_raw();
            check(
                Step::Uid,
                libc::syscall(libc::SYS_setresuid, uid, uid, uid) as libc::c_int,
            )?;
        }
    }
    // From here on, the kernel checks every path as the job user.
    // SAFETY: chdir/mkdir/open/dup2/close on NUL-terminated strings prepared before fork.
    unsafe {
        check(Step::Workdir, libc::chdir(s.workdir.as_ptr()))?;
        if let Some(interpreter) = &s.interpreter {
            check(
                Step::Interpreter,
                libc::access(interpreter.as_ptr(), libc::X_OK),
            )?;
        }
        // The directory itself first: where its parents exist (every job of a user after
        // the first), one mkdir; `mkdir -p` of every ancestor only when one is missing.
        let made = match s.checkpoint_dirs.last() {
            Some(dir) => libc::mkdir(dir.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST,
            None => true,
        };
        if !made {
            for dir in &s.checkpoint_dirs {
                if libc::mkdir(dir.as_ptr(), 0o755) < 0 {
                    let error = io::Error::last_os_error();
                    if error.raw_os_error() != Some(libc::EEXIST) {
                        return Err(fail(Step::CheckpointDir, error));
                    }
                }
            }
        }
        let out = open_output(&s.stdout, s.output_flags)
            .map_err(|(refused, e)| fail_output(Step::Stdout, refused, e, &report))?;
        check(Step::Stdout, libc::dup2(out, 1))?;
        libc::close(out);
        match &s.stderr {
            Some(path) => {
                let err = open_output(path, s.output_flags)
                    .map_err(|(refused, e)| fail_output(Step::Stderr, refused, e, &report))?;
                check(Step::Stderr, libc::dup2(err, 2))?;
                libc::close(err);
            }
            None => check(Step::Stderr, libc::dup2(1, 2))?,
        }
    }
    Ok(())
}

fn fail_output(
    step: Step,
    refused: Option<Refused>,
    error: io::Error,
    report: &impl Fn(Step, Option<Refused>, &io::Error),
) -> io::Error {
    report(step, refused, &error);
    error
}

/// The length of a failure report on the step pipe: the step (0: the exec itself), what was
/// refused (0: nothing), and the errno, little-endian.
pub(in crate::launch) const STEP_REPORT_LEN: usize = 6;

/// Writes a failure report (see [`STEP_REPORT_LEN`]) on the step pipe. Async-signal-safe.
fn report_step(pipe: &OwnedFd, step: u8, refused: u8, error: &io::Error) {
    let errno = error.raw_os_error().unwrap_or(libc::EIO).to_le_bytes();
    let bytes = [step, refused, errno[0], errno[1], errno[2], errno[3]];
    // SAFETY: write(2) of a live local to a pipe fd we own; one write of less than
    // PIPE_BUF bytes arrives whole.
    unsafe { libc::write(pipe.as_raw_fd(), bytes.as_ptr().cast(), STEP_REPORT_LEN) };
}

/// The job's program, arguments and environment as `execve` takes them, made before the fork
/// (the child may not allocate).
pub(in crate::launch) struct ExecArgs {
    program: CString,
    /// Owns what `argv` and `envp` point into.
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl ExecArgs {
    pub(in crate::launch) fn new(
        program: CString,
        args: Vec<CString>,
        env: Vec<CString>,
    ) -> ExecArgs {
        let argc = args.len();
        let mut strings = Vec::with_capacity(1 + argc + env.len());
        strings.push(program.clone());
        strings.extend(args);
        strings.extend(env);
        let pointers = |range: &[CString]| -> Vec<*const libc::c_char> {
            range
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        // The CStrings' heap buffers do not move when the Vec holding them does.
        let argv = pointers(&strings[..1 + argc]);
        let envp = pointers(&strings[1 + argc..]);
        ExecArgs {
            program,
            _strings: strings,
            argv,
            envp,
        }
    }
}

/// Forks the job's first process, which runs [`setup_child`] and then execs the job; returns
/// its pid at once. The parent never waits for the child's setup, which may block (a hung
/// network filesystem): the step pipe's end of file says the exec is done, a report on it
/// (see [`STEP_REPORT_LEN`]) that a step, or the exec itself, failed.
///
/// Only for a single-threaded process, or one whose other threads hold no lock the child
/// needs: the child makes only async-signal-safe calls on data prepared before the fork.
pub(in crate::launch) fn fork_job(exec: &ExecArgs, setup: &ChildSetup) -> io::Result<u32> {
    let blocked = BlockedTermination::begin();
    // SAFETY: the child runs only async-signal-safe code on memory prepared before the fork
    // (setup_child, execve, write, _exit) and never returns into the parent's code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        run_child(exec, setup);
    }
    drop(blocked);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as u32)
}

/// `clone3`'s `CLONE_INTO_CGROUP` (Linux 5.7): the child is born in the cgroup given.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args`, as far as its `cgroup` field (88 bytes, "version 2").
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// As [`fork_job`], with `clone3` into the job's cgroup v2 (`cgroup_dir`, its directory
/// open): the child is born there, so it writes no `cgroup.procs` of the v2 hierarchy (the
/// first such write per job cost 13-16 ms on an idle machine), and the pidfd comes with it
/// (`CLONE_PIDFD`). An error with `ENOSYS`, `EINVAL` or `E2BIG` means the kernel has no
/// such `clone3` (older than 5.7, or a seccomp filter that refuses it): fork instead.
pub(in crate::launch) fn clone_job_into_cgroup(
    exec: &ExecArgs,
    setup: &ChildSetup,
    cgroup_dir: &OwnedFd,
) -> io::Result<(u32, OwnedFd)> {
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP | libc::CLONE_PIDFD as u64,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup_dir.as_raw_fd() as u64,
        ..Default::default()
    };
    let blocked = BlockedTermination::begin();
    // SAFETY: clone3 without CLONE_VM or a stack is a fork: the child gets a copy of this
    // process's memory and runs only async-signal-safe code on memory prepared before it
    // (see fork_job); `args` and `pidfd` are live locals of the right layout and size.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        run_child(exec, setup);
    }
    let error = io::Error::last_os_error();
    drop(blocked);
    if pid < 0 {
        return Err(error);
    }
    // SAFETY: the kernel just returned this descriptor for the child, and nothing else owns
    // it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((pid as u32, pidfd))
}

/// Whether a `clone3` error says the kernel cannot do it (so a fork is tried instead).
pub(in crate::launch) fn clone3_unsupported(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG)
    )
}

/// How often, and how far apart, an exec that failed with ETXTBSY is tried again (1 s).
const EXEC_BUSY_TRIES: u32 = 50;
const EXEC_BUSY_PAUSE_NS: libc::c_long = 20_000_000;

/// The child of [`fork_job`] or [`clone_job_into_cgroup`]: its setup, then the job's exec.
fn run_child(exec: &ExecArgs, setup: &ChildSetup) -> ! {
    if setup_child(setup).is_ok() && wait_for_go(setup.go.as_ref()) {
        let mut busy_tries = 0;
        let error = loop {
            // SAFETY: NUL-terminated arrays of pointers into CStrings `exec` owns.
            unsafe {
                libc::execve(
                    exec.program.as_ptr(),
                    exec.argv.as_ptr(),
                    exec.envp.as_ptr(),
                )
            };
            let error = io::Error::last_os_error();
            // ETXTBSY: the script is still open for writing somewhere. noded closed it
            // before the launch, but a process forked meanwhile by noded (or by whatever
            // wrote it) holds a copy of that descriptor until its own exec, for
            // microseconds to milliseconds. Waiting a little is all it takes (as Go's
            // os/exec learned); a script really held open for writing still fails, after
            // a second.
            if error.raw_os_error() != Some(libc::ETXTBSY) || busy_tries == EXEC_BUSY_TRIES {
                break error;
            }
            busy_tries += 1;
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: EXEC_BUSY_PAUSE_NS,
            };
            // SAFETY: nanosleep (async-signal-safe) of a live local.
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        };
        report_step(&setup.step_report, 0, 0, &error);
    }
    // SAFETY: _exit ends the child without running the parent's atexit handlers or
    // destructors.
    unsafe { libc::_exit(127) }
}

/// In the child: waits for the byte that says its launch is recorded (see
/// [`ChildSetup::go`]); `false` on end of file or an error. Async-signal-safe.
fn wait_for_go(go: Option<&OwnedFd>) -> bool {
    let Some(go) = go else {
        return true;
    };
    let mut byte = 0u8;
    loop {
        // SAFETY: read(2) of one byte into a live local.
        let n = unsafe { libc::read(go.as_raw_fd(), std::ptr::addr_of_mut!(byte).cast(), 1) };
        if n == 1 {
            return true;
        }
        if n == 0 || errno() != libc::EINTR {
            return false;
        }
    }
}

/// The signals the supervisor ignores and a job must get with their default action.
const TERMINATION_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGPIPE,
];

/// The termination signals blocked in the supervisor while a job's child is created: a
/// child born in the job's cgroup (`clone3`) can be sent a stop's SIGTERM before it has
/// reset the dispositions it inherited (ignored): blocked, the signal is kept pending rather
/// than discarded, and ends the child once it unblocks them with their defaults (see
/// [`setup_child`]).
struct BlockedTermination {
    old: libc::sigset_t,
}

impl BlockedTermination {
    fn begin() -> BlockedTermination {
        // SAFETY: sigset operations on live locals; sigprocmask on this (single) thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in TERMINATION_SIGNALS {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            BlockedTermination { old }
        }
    }
}

impl Drop for BlockedTermination {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `begin` on the same thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// In the child: the termination signals unblocked (after their dispositions were reset),
/// so that a stop kept pending ends it now. Async-signal-safe.
fn unblock_termination_signals() {
    // SAFETY: sigset operations on a live local; sigprocmask is async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in TERMINATION_SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Opens an output file of the job (in the child, as the job user) so that it cannot block:
/// non-blocking (a FIFO without a reader fails at once), then checked to be a regular file or
/// `/dev/null`, then made blocking again. Symlinks are followed: they are the user's own, and
/// the path is opened with the user's rights. The error says what was refused, if anything.
///
/// # Safety
/// Async-signal-safe: open, fstat, stat, fcntl and close only.
unsafe fn open_output(
    path: &CString,
    flags: libc::c_int,
) -> Result<libc::c_int, (Option<Refused>, io::Error)> {
    let fd = libc::open(path.as_ptr(), flags, 0o644);
    if fd < 0 {
        let error = io::Error::last_os_error();
        // ENXIO: a FIFO nobody has open for reading, or a socket; say which.
        let mut st: libc::stat = std::mem::zeroed();
        let refused = (error.raw_os_error() == Some(libc::ENXIO)
            && libc::stat(path.as_ptr(), &mut st) == 0)
            .then(|| Refused::of_mode(st.st_mode, st.st_rdev).unwrap_or(Refused::Other));
        return Err((refused, error));
    }
    let mut st: libc::stat = std::mem::zeroed();
    if libc::fstat(fd, &mut st) < 0 {
        let error = io::Error::last_os_error();
        libc::close(fd);
        return Err((None, error));
    }
    if let Some(refused) = Refused::of_mode(st.st_mode, st.st_rdev) {
        libc::close(fd);
        return Err((Some(refused), io::Error::from_raw_os_error(libc::EINVAL)));
    }
    let status = libc::fcntl(fd, libc::F_GETFL);
    if status < 0 || libc::fcntl(fd, libc::F_SETFL, status & !libc::O_NONBLOCK) < 0 {
        let error = io::Error::last_os_error();
        libc::close(fd);
        return Err((None, error));
    }
    Ok(fd)
}

/// The calling thread's errno (async-signal-safe).
fn errno() -> libc::c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Collects one ended child without waiting: its pid and wait status; `None` when no child
/// has ended (or there is none).
pub(in crate::launch) fn reap_one() -> Option<(u32, libc::c_int)> {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on any child, into a live local.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid as u32, status))
}

/// Kills child `pid`, not reaped yet (so the pid is still its), and collects it, waiting:
/// for a child that dies at once (one waiting on a pipe before its exec).
pub(in crate::launch) fn kill_and_collect(pid: u32) {
    // SAFETY: kill(2) and waitpid(2) of our own child, into a live local.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid as libc::pid_t, &mut status, 0);
    }
}

/// A pidfd of `pid` (a child not reaped yet, so the pid cannot have been reused): readable
/// once it has ended.
pub(in crate::launch) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd (close-on-exec) or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// poll(2) over `fds` for up to `timeout_ms`; an interrupted poll counts as a timeout.
pub(in crate::launch) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<()> {
    // SAFETY: `fds` is a live slice of pollfd, its length given.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if ready < 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Ok(())
}

/// The uid of the process at the other end of a Unix socket (`SO_PEERCRED`).
pub(in crate::launch) fn peer_uid(socket: &impl AsRawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a live ucred whose size is given.
    let ret = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Takes an exclusive `flock` on `file` without waiting: `Ok(false)` when another holds it.
pub(in crate::launch) fn try_lock(file: &impl AsRawFd) -> io::Result<bool> {
    // SAFETY: flock on a descriptor the caller keeps open.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        e => Err(e),
    }
}

/// `n` in decimal, in `buf` (async-signal-safe: no allocation).
fn decimal(mut n: u32, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}
