//! The test cluster's schedd: started, limited, signalled, waited for and moved onto a tmpfs.

use super::TestCluster;
use crate::{mount_tmpfs, Mounted};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

impl TestCluster {
    pub fn schedd_pid(&self) -> Option<u32> {
        self.schedd.as_ref().map(|c| c.id())
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("schedd.sock")
    }

    pub fn start_schedd(&mut self) {
        use std::os::unix::process::CommandExt;
        assert!(self.schedd.is_none(), "schedd already running");
        let mut cmd = self.daemon_command("schedd", "schedd");
        cmd.arg("-v")
            .stdout(Stdio::null())
            .stderr(self.log_file("schedd"));
        if let Some(bytes) = self.schedd_address_space {
            // Few malloc arenas: each reserves 64 MiB of address space, which RLIMIT_AS counts.
            cmd.env("MALLOC_ARENA_MAX", "2");
            // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: bytes,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("start schedd");
        self.schedd = Some(child);
        let sock = self.dir.path().join("schedd.sock");
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            let exited = self
                .schedd
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || start.elapsed() > Duration::from_secs(20) {
                panic!("schedd did not start ({exited:?})\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for schedd to exit by itself; its exit status, if it did (it is
    /// then no longer the harness's: `start_schedd` starts a new one).
    pub fn wait_schedd_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            let status = self.schedd.as_mut()?.try_wait().ok().flatten();
            if status.is_some() {
                self.schedd = None;
                return status;
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Moves schedd's state onto a tmpfs of `size` (e.g. `"64m"`) of its own, restarting
    /// schedd on it; unmounted when the returned guard is dropped.
    pub fn move_state_to_tmpfs(&mut self, size: &str) -> Mounted {
        self.stop_schedd(nix::sys::signal::Signal::SIGTERM);
        let state_dir = self.dir.path().join("state");
        let saved = self.dir.path().join("state.saved");
        std::fs::rename(&state_dir, &saved).unwrap();
        let mounted = mount_tmpfs(&state_dir, size);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", saved.display()))
            .arg(&state_dir)
            .status()
            .unwrap();
        assert!(ok.success());
        self.start_schedd();
        self.wait_nodes_up(self.node_count());
        mounted
    }

    /// Restarts schedd (SIGTERM) with its address space limited to `bytes` (`RLIMIT_AS`): an
    /// allocation beyond it fails, and Rust aborts on a failed allocation, so a request that
    /// makes schedd allocate too much kills it. The agents stay connected.
    pub fn restart_schedd_with_memory_limit(&mut self, bytes: u64) {
        self.schedd_address_space = Some(bytes);
        self.stop_schedd(nix::sys::signal::Signal::SIGTERM);
        self.start_schedd();
        self.wait_nodes_up(self.node_count());
    }

    /// Whether schedd is still running (it has not exited, e.g. aborted).
    pub fn schedd_alive(&mut self) -> bool {
        self.schedd
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Sends `signal` to schedd and reaps it; fails if it has not exited within 10 s (a
    /// SIGTERM must stop it promptly even with agents connected).
    pub fn stop_schedd(&mut self, signal: nix::sys::signal::Signal) {
        if let Some(mut c) = self.schedd.take() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal);
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = c.kill();
                    let _ = c.wait();
                    panic!("schedd did not exit within 10 s of {signal}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
