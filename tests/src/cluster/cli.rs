//! Running the CLIs against the test cluster: as any uid, on any socket, with a deadline.

use super::TestCluster;
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

impl TestCluster {
    /// A command running `program` as the CLIs run (the cluster's config, its test tag, in
    /// the work dir), for programs outside the build (a link to a tool, a test driver).
    pub fn program(&self, program: &std::path::Path) -> std::process::Command {
        self.command_at(program)
    }

    /// Runs `command` to its end, trying again while its program is busy: a fork by another
    /// test thread can briefly hold a fresh copy (`bin_copy`) open for writing (ETXTBSY).
    pub fn output_when_free(command: &mut std::process::Command) -> std::io::Result<Output> {
        Self::when_free(|| command.output())
    }

    /// Starts `command`, trying again while its program is busy (see [`Self::output_when_free`]).
    pub fn spawn_when_free(command: &mut std::process::Command) -> std::io::Result<Child> {
        Self::when_free(|| command.spawn())
    }

    fn when_free<T>(mut run: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
        for _ in 0..100 {
            match run() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                res => return res,
            }
        }
        run()
    }

    /// Runs a CLI tool (as the test's user).
    pub fn run(&self, bin: &str, args: &[&str]) -> Output {
        self.command(bin)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run cli")
    }

    /// Runs a CLI tool as another uid/gid.
    pub fn run_as(&self, uid: u32, gid: u32, bin: &str, args: &[&str]) -> Output {
        self.run_on(None, uid, gid, bin, args)
    }

    /// A copy of the tool `bin` in the cluster's world-readable temp dir: the build tree may
    /// sit below a directory only its owner can enter (a clone in a `mktemp -d` dir is 0700).
    pub fn bin_copy(&self, bin: &str) -> PathBuf {
        let copy = self.dir.path().join("bin").join(bin);
        if !copy.exists() {
            std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
            let tmp = copy.with_extension(format!("tmp{}", std::process::id()));
            std::fs::copy(self.bin_dir.join(bin), &tmp).unwrap();
            std::fs::rename(&tmp, &copy).unwrap();
        }
        copy
    }

    /// Runs a CLI tool as uid/gid "on host `agent`": through that agent's client socket
    /// (`YSCHED_SOCKET`), as on a login or compute node; `None`: on schedd's own socket.
    pub fn run_on(
        &self,
        agent: Option<&str>,
        uid: u32,
        gid: u32,
        bin: &str,
        args: &[&str],
    ) -> Output {
        use std::os::unix::process::CommandExt;
        let copy = self.bin_copy(bin);
        // A fork by another test thread can briefly hold the fresh copy open for writing
        // (ETXTBSY on exec): try again.
        for _ in 0..100 {
            let mut cmd = self.command_at(&copy);
            if let Some(agent) = agent {
                cmd.env("YSCHED_SOCKET", self.agent_socket(agent));
            }
            match cmd
                .args(args)
                .uid(uid)
                .gid(gid)
                .stdin(Stdio::null())
                .output()
            {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                res => return res.expect("run cli"),
            }
        }
        panic!("{} stayed busy", copy.display());
    }

    /// Runs a CLI tool as uid/gid (0: the test's user), and fails the test if it has not
    /// answered within `timeout` (it is killed then): for requests that a wedged daemon
    /// would leave waiting forever.
    pub fn run_within(&self, timeout: Duration, uid: u32, bin: &str, args: &[&str]) -> Output {
        use std::os::unix::process::CommandExt;
        let mut cmd = if uid == 0 {
            self.command(bin)
        } else {
            let mut cmd = self.command_at(&self.bin_copy(bin));
            cmd.uid(uid).gid(uid);
            cmd
        };
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cli");
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(timeout) {
            Ok(out) => out.expect("run cli"),
            Err(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                panic!(
                    "{bin} {:?} did not answer within {timeout:?}\n{}",
                    &args[..args.len().min(3)],
                    self.logs()
                )
            }
        }
    }

    /// Starts a CLI or test binary (`bin`, from the build directory) as uid/gid without
    /// waiting for it; its stdout is piped.
    pub fn spawn_as(&self, uid: u32, gid: u32, bin: &str, args: &[&str]) -> Child {
        use std::os::unix::process::CommandExt;
        let copy = self.bin_copy(bin);
        for _ in 0..100 {
            match self
                .command_at(&copy)
                .args(args)
                .uid(uid)
                .gid(gid)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
            {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                res => return res.expect("spawn"),
            }
        }
        panic!("{} stayed busy", copy.display());
    }
}
