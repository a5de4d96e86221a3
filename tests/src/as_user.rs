//! Acting as another uid from the root test process, on one thread whose credentials change.

use std::path::Path;

/// Opens `n` connections to the Unix socket `path` as uid/gid (as far as the kernel's peer
/// credentials tell: `SO_PEERCRED` reports the effective ids of the connecting thread), and
/// returns them, held open. The ids are changed on one short-lived thread only (the raw
/// system calls, not libc's, which would change every thread of the process), so the test
/// process stays root. A connection the server refuses is returned too, and reads as closed.
pub fn connect_as(
    path: &Path,
    uid: u32,
    gid: u32,
    n: usize,
) -> Vec<std::os::unix::net::UnixStream> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        // SAFETY: setresgid/setresuid on this thread only; -1 leaves the real and saved ids.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setresgid, -1, gid, -1),
                0,
                "setresgid"
            );
            assert_eq!(
                libc::syscall(libc::SYS_setresuid, -1, uid, -1),
                0,
                "setresuid"
            );
        }
        let streams = (0..n)
            .map(|_| std::os::unix::net::UnixStream::connect(&path).expect("connect"))
            .collect();
        // Back to root before the thread ends (its ids die with it anyway).
        // SAFETY: as above; the saved uid is still 0.
        unsafe {
            libc::syscall(libc::SYS_setresuid, -1, 0, -1);
            libc::syscall(libc::SYS_setresgid, -1, 0, -1);
        }
        streams
    })
    .join()
    .expect("connecting thread")
}

/// Runs `f` on a thread of its own whose credentials are `uid`/`gid` (and no supplementary
/// group but `gid`), as an unprivileged user's process would be: connections it opens carry
/// those peer credentials. Only that thread changes (raw syscalls, not glibc's process-wide
/// `setuid`), so the test process stays root.
pub fn on_thread_as<T: Send + 'static>(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        let groups = [gid];
        // SAFETY: plain syscalls on this thread's own credentials, with a valid array.
        let switched = unsafe {
            libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) == 0
                && libc::syscall(libc::SYS_setresgid, gid, gid, gid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
        };
        assert!(
            switched,
            "cannot switch a thread to uid {uid}: {}",
            std::io::Error::last_os_error()
        );
        f()
    })
    .join()
    .expect("thread")
}

/// Runs `call` with a gRPC client of the Unix socket `socket` connected as `uid`/`gid` (on a
/// thread of its own, see [`on_thread_as`], with a runtime of its own): a client that skips
/// the CLI's checks, as an unprivileged user could write one.
pub fn call_as<T, Fut>(
    socket: &Path,
    uid: u32,
    gid: u32,
    call: impl FnOnce(ysub::client::Client) -> Fut + Send + 'static,
) -> T
where
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let socket = socket.to_path_buf();
    on_thread_as(uid, gid, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = ysub::client::connect(&socket).await.unwrap();
            call(client).await
        })
    })
}
