//! What the job's first process runs, from its creation to its exec: its setup, the wait for
//! the word that its launch is recorded, and the exec.
//!
//! Only system calls, through [`super::spawn`]'s `raw`, and no `unsafe` here: while the child
//! shares the supervisor's memory it may call no libc function, allocate nothing and take no
//! lock (see `spawn`'s docs). On failure the child reports which step failed on its step pipe
//! (see [`Step`] and [`STEP_REPORT_LEN`](super::child::STEP_REPORT_LEN)).

use super::child::{ChildSetup, ExecArgs, Refused, Step};
use super::spawn::raw;
use std::ffi::CString;
use std::os::fd::RawFd;

/// How often, and how far apart, an exec that failed with ETXTBSY is tried again (1 s).
const EXEC_BUSY_TRIES: u32 = 50;

const EXEC_BUSY_PAUSE_NS: i64 = 20_000_000;

/// The child: its setup, then the job's exec.
pub(super) fn run(exec: &ExecArgs, setup: &ChildSetup) -> ! {
    if setup_child(setup).is_ok() && wait_for_go(setup.go) {
        let mut busy_tries = 0;
        let errno = loop {
            let errno = raw::execve(exec);
            // ETXTBSY: the script is still open for writing somewhere. noded closed it
            // before the launch, but a process forked meanwhile by noded (or by whatever
            // wrote it) holds a copy of that descriptor until its own exec, for
            // microseconds to milliseconds. Waiting a little is all it takes (as Go's
            // os/exec learned); a script really held open for writing still fails, after
            // a second.
            if errno != libc::ETXTBSY || busy_tries == EXEC_BUSY_TRIES {
                break errno;
            }
            busy_tries += 1;
            raw::sleep_ns(EXEC_BUSY_PAUSE_NS);
        };
        report_step(setup.step_report, 0, 0, errno);
    }
    raw::exit(127)
}

/// In the child: waits for the byte that says its launch is recorded (see
/// [`ChildSetup::go`]); `false` on end of file or an error.
fn wait_for_go(go: Option<RawFd>) -> bool {
    let Some(go) = go else {
        return true;
    };
    let mut byte = [0u8; 1];
    loop {
        match raw::read(go, &mut byte) {
            Ok(1) => return true,
            Err(libc::EINTR) => continue,
            _ => return false,
        }
    }
}

/// Runs in the child, before exec: new session, user switch, directories, output. Makes no
/// libc call (see the module's docs). Returns the errno of the step that failed, reported.
fn setup_child(s: &ChildSetup) -> Result<(), i32> {
    let fail = |step: Step, errno: i32| -> i32 {
        report_step(s.step_report, step as u8, 0, errno);
        errno
    };
    let check =
        |step: Step, result: Result<usize, i32>| result.map(|_| ()).map_err(|e| fail(step, e));

    // The supervisor ignores these; ignored dispositions survive exec, the job needs defaults.
    // Reset before the child joins the job's cgroup: a stop that reaches it there before its
    // exec ends it (its SIGTERM is not lost on an ignored disposition).
    for sig in TERMINATION_SIGNALS {
        raw::default_disposition(sig);
    }
    // Blocked by the parent around the clone (see `BlockedTermination`): a stop sent
    // meanwhile ends the child here.
    raw::unblock(termination_mask());
    // Before anything that can block, while still root: from here on every process the job
    // starts is in its cgroups, and cannot leave them, and noded can stop it.
    for &procs in &s.join_cgroups {
        match raw::write(procs, b"0") {
            Ok(1) => {}
            Ok(_) => return Err(fail(Step::Cgroup, libc::EIO)),
            Err(e) => return Err(fail(Step::Cgroup, e)),
        }
    }
    // Own session and process group: killpg(job pid) reaches the whole job, not the
    // supervisor.
    check(Step::Session, raw::plain(libc::SYS_setsid, [0; 3]))?;
    if let Some(group) = s.group_file {
        // Without cgroups, the process group is what noded stops: recorded before anything
        // that can block. Best effort: if it cannot be written, stops wait for the exec.
        let pid = raw::plain(libc::SYS_getpid, [0; 3]).unwrap_or(0);
        let mut digits = [0u8; 20];
        let _ = raw::write(group, decimal(pid as u32, &mut digits));
    }
    if s.switch_user {
        // Groups first: after setuid the process may no longer change them. The system
        // calls themselves, never libc's wrappers: in a process with other threads those
        // make every thread change too, and the child is no thread libc knows of. Each call
        // changes this process's (only) thread, which is what the child needs.
        check(Step::Groups, raw::setgroups(&s.groups))?;
        let gid = s.gid as usize;
        check(Step::Gid, raw::plain(libc::SYS_setresgid, [gid, gid, gid]))?;
        let uid = s.uid as usize;
        check(Step::Uid, raw::plain(libc::SYS_setresuid, [uid, uid, uid]))?;
    }
    // From here on, the kernel checks every path as the job user.
    check(Step::Workdir, raw::chdir(&s.workdir))?;
    if let Some(interpreter) = &s.interpreter {
        check(
            Step::Interpreter,
            raw::at_path(libc::SYS_faccessat, interpreter, libc::X_OK as usize, 0),
        )?;
    }
    // The directory itself first: where its parents exist (every job of a user after the
    // first), one mkdir; `mkdir -p` of every ancestor only when one is missing.
    let mkdir = |dir: &CString| match raw::at_path(libc::SYS_mkdirat, dir, 0o755, 0) {
        Ok(_) | Err(libc::EEXIST) => Ok(()),
        Err(e) => Err(e),
    };
    if let Some(dir) = s.checkpoint_dirs.last() {
        if mkdir(dir).is_err() {
            for dir in &s.checkpoint_dirs {
                mkdir(dir).map_err(|e| fail(Step::CheckpointDir, e))?;
            }
        }
    }
    let out = open_output(&s.stdout, s.output_flags)
        .map_err(|(refused, e)| fail_output(s, Step::Stdout, refused, e))?;
    check(Step::Stdout, move_fd(out, 1))?;
    match &s.stderr {
        Some(path) => {
            let err = open_output(path, s.output_flags)
                .map_err(|(refused, e)| fail_output(s, Step::Stderr, refused, e))?;
            check(Step::Stderr, move_fd(err, 2))?;
        }
        None => check(Step::Stderr, raw::plain(libc::SYS_dup3, [1, 2, 0]))?,
    }
    Ok(())
}

/// Makes `fd` (opened close-on-exec) descriptor `target` of the job, kept across the exec.
fn move_fd(fd: RawFd, target: RawFd) -> Result<usize, i32> {
    if fd == target {
        // The descriptor was free (closed in the supervisor): already in place.
        return raw::plain(libc::SYS_fcntl, [fd as usize, libc::F_SETFD as usize, 0]);
    }
    let moved = raw::plain(libc::SYS_dup3, [fd as usize, target as usize, 0]);
    raw::close(fd);
    moved
}

fn fail_output(s: &ChildSetup, step: Step, refused: Option<Refused>, errno: i32) -> i32 {
    report_step(
        s.step_report,
        step as u8,
        refused.map_or(0, |r| r as u8),
        errno,
    );
    errno
}

/// Writes a failure report (see [`STEP_REPORT_LEN`](super::child::STEP_REPORT_LEN)) on the
/// step pipe.
fn report_step(pipe: RawFd, step: u8, refused: u8, errno: i32) {
    let errno = errno.to_le_bytes();
    let bytes = [step, refused, errno[0], errno[1], errno[2], errno[3]];
    // One write of less than PIPE_BUF bytes arrives whole.
    let _ = raw::write(pipe, &bytes);
}

/// The signals the supervisor ignores and a job must get with their default action.
pub(super) const TERMINATION_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGPIPE,
];

/// [`TERMINATION_SIGNALS`] as the kernel's signal set.
pub(super) fn termination_mask() -> u64 {
    TERMINATION_SIGNALS
        .iter()
        .fold(0, |mask, &sig| mask | 1 << (sig - 1))
}

/// Opens an output file of the job (in the child, as the job user) so that it cannot block:
/// non-blocking (a FIFO without a reader fails at once), then checked to be a regular file or
/// `/dev/null`, then made blocking again. Symlinks are followed: they are the user's own, and
/// the path is opened with the user's rights. The error says what was refused, if anything.
fn open_output(path: &CString, flags: libc::c_int) -> Result<RawFd, (Option<Refused>, i32)> {
    let fd = match raw::at_path(libc::SYS_openat, path, flags as usize, 0o644) {
        Ok(fd) => fd as RawFd,
        Err(errno) => {
            // ENXIO: a FIFO nobody has open for reading, or a socket; say which.
            let refused = (errno == libc::ENXIO)
                .then(|| raw::stat(-1, path).ok())
                .flatten()
                .map(|st| Refused::of_mode(st.st_mode, st.st_rdev).unwrap_or(Refused::Other));
            return Err((refused, errno));
        }
    };
    let fail = |refused: Option<Refused>, errno: i32| {
        raw::close(fd);
        Err((refused, errno))
    };
    let st = match raw::stat(fd, path) {
        Ok(st) => st,
        Err(errno) => return fail(None, errno),
    };
    if let Some(refused) = Refused::of_mode(st.st_mode, st.st_rdev) {
        return fail(Some(refused), libc::EINVAL);
    }
    let blocking =
        raw::plain(libc::SYS_fcntl, [fd as usize, libc::F_GETFL as usize, 0]).and_then(|status| {
            raw::plain(
                libc::SYS_fcntl,
                [
                    fd as usize,
                    libc::F_SETFL as usize,
                    status & !(libc::O_NONBLOCK as usize),
                ],
            )
        });
    match blocking {
        Ok(_) => Ok(fd),
        Err(errno) => fail(None, errno),
    }
}

/// `n` in decimal, in `buf` (no allocation).
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
