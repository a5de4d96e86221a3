//! [`Replicas`]: schedd replicas under Raft (`scheduler.replicas`) on loopback, each with
//! its own config, state directory, client socket and log, sharing the cluster key and CA
//! (which sit beside the key); started, killed and restarted one by one.

use crate::{bin_dir, kill_tagged, stderr, stdout};
use nix::sys::signal::Signal;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Replicas {
    pub dir: tempfile::TempDir,
    tag: String,
    bin_dir: PathBuf,
    count: u64,
    running: BTreeMap<u64, Child>,
    agents: Vec<Child>,
    restarts: u32,
}

impl Replicas {
    /// Writes the configs of `count` replicas and starts them all: the first alone until it
    /// made the cluster key and CA the others share.
    pub fn start(count: u64) -> Replicas {
        let dir = tempfile::Builder::new().prefix("ysr").tempdir().unwrap();
        let ports: Vec<u16> = (0..count)
            .map(|_| {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port()
            })
            .collect();
        let list = ports
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let d = dir.path().display();
        for n in 1..=count {
            let port = ports[n as usize - 1];
            std::fs::write(
                dir.path().join(format!("replica-{n}.toml")),
                format!(
                    "[scheduler]\nreplicas = [{list}]\nreplica = {n}\nlisten = \"127.0.0.1:{port}\"\n\
                     socket = \"{d}/r{n}.sock\"\nstate_dir = \"{d}/state-{n}\"\n\
                     cluster_key_file = \"{d}/cluster.key\"\ncheckpoint_root = \"{d}/ckpt\"\n\
                     heartbeat_secs = 2\n[node]\nspool_dir = \"{d}/spool\"\n"
                ),
            )
            .unwrap();
        }
        let mut r = Replicas {
            tag: crate::process::unique_tag("ysrep"),
            dir,
            bin_dir: bin_dir(),
            count,
            running: BTreeMap::new(),
            agents: Vec::new(),
            restarts: 0,
        };
        for n in 1..=count {
            r.start_replica(n);
        }
        r
    }

    fn command(&self, n: u64, bin: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(bin));
        cmd.env(
            "YSCHED_CONF",
            self.dir.path().join(format!("replica-{n}.toml")),
        )
        .env("YSCHED_TEST_TAG", &self.tag)
        .env_remove("RUST_LOG")
        .current_dir(self.dir.path());
        cmd
    }

    /// Starts replica `n` (again, after [`Replicas::kill`]: from its state directory) and
    /// waits for its client socket.
    pub fn start_replica(&mut self, n: u64) {
        assert!(!self.running.contains_key(&n), "replica {n} runs already");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("replica-{n}.log")))
            .unwrap();
        let child = self
            .command(n, "schedd")
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start schedd");
        self.running.insert(n, child);
        let sock = self.socket(n);
        let key = self.dir.path().join("cluster.key");
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&sock).is_err() || !key.exists() {
            let exited = self
                .running
                .get_mut(&n)
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || start.elapsed() > Duration::from_secs(20) {
                panic!("replica {n} did not start ({exited:?})\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts an agent for `node` (fake GPUs), given every replica's address (it finds the
    /// leader by itself).
    pub fn start_agent(&mut self, node: &crate::FakeNode) {
        let d = self.dir.path();
        let gpus = d.join(format!("{}-gpus.toml", node.name));
        std::fs::write(&gpus, node.inventory_toml()).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join(format!("noded-{}.log", node.name)))
            .unwrap();
        let child = self
            .command(1, "noded")
            .args(["-v", "--name", &node.name, "--cpus", "64", "--mem", "512G"])
            .arg("--fake-gpus")
            .arg(&gpus)
            .arg("--spool-dir")
            .arg(d.join("spool").join(&node.name))
            .arg("--client-socket")
            .arg(d.join(format!("{}.sock", node.name)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start noded");
        self.agents.push(child);
    }

    pub fn socket(&self, n: u64) -> PathBuf {
        self.dir.path().join(format!("r{n}.sock"))
    }

    /// Sends `signal` to replica `n`; for SIGKILL, also waits for it to be gone.
    pub fn kill(&mut self, n: u64, signal: Signal) {
        let Some(child) = self.running.get_mut(&n) else {
            return;
        };
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal);
        if signal == Signal::SIGKILL {
            let _ = child.wait();
            self.running.remove(&n);
        }
    }

    /// Whether replica `n` runs. One that exited with status 75 (a leader that lost the
    /// lead does) is started again, as its systemd unit would (`Restart=on-failure`).
    pub fn runs(&mut self, n: u64) -> bool {
        let Some(child) = self.running.get_mut(&n) else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.running.remove(&n);
                if status.code() == Some(75) {
                    self.restarts += 1;
                    self.start_replica(n);
                    return true;
                }
                false
            }
            Err(_) => false,
        }
    }

    /// How many times a replica was started again after exiting 75.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Runs a CLI against replica `n`'s client socket; one that has not answered within
    /// 20 s (a stopped replica never answers) is killed.
    pub fn run(&self, n: u64, bin: &str, args: &[&str]) -> Output {
        self.run_within(n, Duration::from_secs(20), bin, args)
    }

    fn run_within(&self, n: u64, timeout: Duration, bin: &str, args: &[&str]) -> Output {
        let mut child = self
            .command(n, bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run CLI");
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() && start.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        child.wait_with_output().expect("CLI output")
    }

    /// The replica that serves clients (leads), once one does, and how long that took.
    pub fn leader(&mut self, timeout: Duration) -> (u64, Duration) {
        let start = Instant::now();
        loop {
            for n in 1..=self.count {
                if self.runs(n)
                    && self
                        .run_within(n, Duration::from_secs(2), "yq", &["--json"])
                        .status
                        .success()
                {
                    return (n, start.elapsed());
                }
            }
            assert!(
                start.elapsed() < timeout,
                "no replica leads after {timeout:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Submits with `ysub --parsable` through the leader (replica `n`, or whichever leads
    /// after it if the lead moves before the submit is acknowledged); the id.
    pub fn submit(&mut self, n: u64, args: &[&str]) -> u64 {
        let mut n = n;
        let mut out = self.run(n, "ysub", &[&["--parsable"], args].concat());
        for _ in 0..5 {
            if out.status.success() || !stderr(&out).contains("leader") {
                break;
            }
            n = self.leader(Duration::from_secs(30)).0;
            out = self.run(n, "ysub", &[&["--parsable"], args].concat());
        }
        assert!(
            out.status.success(),
            "ysub {args:?} on replica {n} failed: {}\n{}",
            stderr(&out),
            self.logs()
        );
        stdout(&out).trim().parse().expect("job id")
    }

    /// Every job replica `n` lists (`yq --all --json`).
    pub fn jobs(&self, n: u64) -> Vec<Value> {
        let out = self.run(n, "yq", &["--all", "--json"]);
        assert!(out.status.success(), "yq on replica {n}: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("yq json")
    }

    /// The replicas' logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            s.push_str(&format!("--- {} (last lines) ---\n", log.display()));
            for line in tail.into_iter().rev() {
                s.push_str(line);
                s.push('\n');
            }
        }
        s
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for mut child in std::mem::take(&mut self.agents) {
            let _ = child.kill();
            let _ = child.wait();
        }
        for (_, mut child) in std::mem::take(&mut self.running) {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_tagged(&self.tag);
    }
}
