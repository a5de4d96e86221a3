//! Every `unsafe` of the supervisor's own process but the creation of jobs (see
//! [`super::spawn`]): closing inherited descriptors, ignoring termination signals, becoming
//! the subreaper, reaping, polling, peer credentials, the lock. Each says why it is sound.

use super::log;
use nix::sys::signal::{signal, SigHandler, Signal};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

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
