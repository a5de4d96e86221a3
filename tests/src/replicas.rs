//! [`Replicas`]: schedd replicas under Raft (`scheduler.replicas`) on loopback, each with
//! its own config, state directory, client socket and log, sharing the cluster CA (certificate
//! and key, which the first makes); started, killed, stopped and restarted one by one, and
//! asked who leads (`yctl cluster`). Agents enrol through whichever replica answers.

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
    /// Every replica of the config has been seen voting (the first replica forms the
    /// cluster alone and brings the others in as they catch up).
    formed: bool,
}

impl Replicas {
    /// Writes the configs of `count` replicas and starts them all: the first alone until it
    /// made the cluster CA the others share.
    pub fn start(count: u64) -> Replicas {
        let mut r = Self::configure(count);
        for n in 1..=count {
            r.start_replica(n);
        }
        r
    }

    /// Writes the configs of `count` replicas and starts none (see [`Replicas::start_replica`]).
    pub fn configure(count: u64) -> Replicas {
        let dir = tempfile::Builder::new().prefix("ysr").tempdir().unwrap();
        // Other users' CLIs (`run_as`) read the configs and reach the sockets inside.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        // All held open until every port is picked: a listener dropped at once lets the
        // next bind get the same port (two replicas named the same address, refused).
        let listeners: Vec<std::net::TcpListener> = (0..count)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let list = ports
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let d = dir.path().display();
        // Every user's jobs make their checkpoint directories in it, as in /tmp.
        let ckpt = dir.path().join("ckpt");
        std::fs::create_dir(&ckpt).unwrap();
        std::fs::set_permissions(&ckpt, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .unwrap();
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
        Replicas {
            tag: crate::process::unique_tag("ysrep"),
            dir,
            bin_dir: bin_dir(),
            count,
            running: BTreeMap::new(),
            agents: Vec::new(),
            restarts: 0,
            formed: false,
        }
    }

    /// Configures a new host to replace replica `n`'s (dead, with its disk): another address,
    /// an empty state directory, and a config that lists it in `n`'s place, as an
    /// administrator writes it (the others' configs keep the old address). Its agent
    /// address; start it with [`Replicas::start_replica`] once added (`yctl cluster add`).
    pub fn configure_replacement(&mut self, n: u64) -> String {
        let path = self.dir.path().join(format!("replica-{n}.toml"));
        let old = std::fs::read_to_string(&path).unwrap();
        let old_addr = old
            .lines()
            .find_map(|l| l.strip_prefix("listen = "))
            .unwrap()
            .trim_matches('"')
            .to_string();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let d = self.dir.path().display();
        let config = old
            .replace(&old_addr, &addr)
            .replace(&format!("{d}/state-{n}\""), &format!("{d}/state-{n}-new\""));
        std::fs::write(&path, config).unwrap();
        addr
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
        let ca_key = self.dir.path().join("cluster-ca.key");
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&sock).is_err() || !ca_key.exists() {
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

    /// A token enrolling host `name`, from `yctl node enrol` on whichever replica answers
    /// (followers forward it to the leader), within 30 s.
    pub fn enrol_token(&self, name: &str) -> String {
        let start = Instant::now();
        loop {
            for n in 1..=self.count {
                let out =
                    self.run_within(n, Duration::from_secs(5), "yctl", &["node", "enrol", name]);
                if out.status.success() {
                    return stdout(&out).trim().to_string();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no replica made an enrolment token for {name}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts replica `n` expecting it to refuse to run: waits (20 s at most) for it to exit,
    /// and returns its exit status and its standard error.
    pub fn start_replica_refused(&mut self, n: u64) -> (std::process::ExitStatus, String) {
        assert!(!self.running.contains_key(&n), "replica {n} runs already");
        let mut child = self
            .command(n, "schedd")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start schedd");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                return (status, err);
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("replica {n} did not refuse to start\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts an agent for `node` (fake GPUs), given every replica's address (it finds the
    /// leader by itself), enrolled first unless its spool holds a certificate already.
    pub fn start_agent(&mut self, node: &crate::FakeNode) {
        let d = self.dir.path();
        let gpus = d.join(format!("{}-gpus.toml", node.name));
        std::fs::write(&gpus, node.inventory_toml()).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join(format!("noded-{}.log", node.name)))
            .unwrap();
        let spool = d.join("spool").join(&node.name);
        let mut cmd = self.command(1, "noded");
        if !spool.join("identity").join("node.crt").exists() {
            let token = d.join(format!("{}.token", node.name));
            std::fs::write(&token, self.enrol_token(&node.name)).unwrap();
            cmd.arg("--enrol-token").arg(token);
        }
        let child = cmd
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

    /// Stops replica `n` as its unit would (SIGTERM) and waits until it is gone.
    pub fn stop(&mut self, n: u64) {
        let Some(mut child) = self.running.remove(&n) else {
            return;
        };
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            Signal::SIGTERM,
        );
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("replica {n} did not stop on SIGTERM\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
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

    /// Runs a CLI against replica `n`'s client socket as `uid`/`gid` (a copy of the binary
    /// in the replicas' directory: the build tree may be closed to other users).
    pub fn run_as(&self, n: u64, uid: u32, gid: u32, bin: &str, args: &[&str]) -> Output {
        use std::os::unix::process::CommandExt;
        let copy = self.dir.path().join(format!("{bin}-copy"));
        if !copy.exists() {
            let tmp = copy.with_extension("tmp");
            std::fs::copy(self.bin_dir.join(bin), &tmp).unwrap();
            std::fs::rename(&tmp, &copy).unwrap();
        }
        let mut cmd = Command::new(&copy);
        cmd.env(
            "YSCHED_CONF",
            self.dir.path().join(format!("replica-{n}.toml")),
        )
        .env("YSCHED_TEST_TAG", &self.tag)
        .env_remove("RUST_LOG")
        .current_dir(self.dir.path())
        .args(args)
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null());
        // ETXTBSY: a child another test thread forked meanwhile holds a copy of the copy's
        // write descriptor until its own exec (microseconds to milliseconds): try again.
        let mut tries = 0;
        loop {
            match cmd.output() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                result => return result.expect("run CLI"),
            }
        }
    }

    /// A handle for other threads to run CLIs against the replicas (clients submitting
    /// while the test kills and restarts replicas).
    pub fn clients(&self) -> Clients {
        Clients {
            dir: self.dir.path().to_path_buf(),
            bin_dir: self.bin_dir.clone(),
            tag: self.tag.clone(),
        }
    }

    /// `yctl cluster --json` as replica `n` answers it (one object per replica), or `None`
    /// when it does not answer within 3 s.
    pub fn cluster(&self, n: u64) -> Option<Vec<Value>> {
        let out = self.run_within(n, Duration::from_secs(3), "yctl", &["cluster", "--json"]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    fn run_within(&self, n: u64, timeout: Duration, bin: &str, args: &[&str]) -> Output {
        self.clients().run_within(n, timeout, bin, args)
    }

    /// The replica that serves clients (leads), once one does, and how long that took: the
    /// one a running replica's `yctl cluster` says leads (in the highest term), once it
    /// answers `yq` on its own socket (followers forward, so their answering proves nothing);
    /// the first time, once every replica votes too (the cluster is formed).
    pub fn leader(&mut self, timeout: Duration) -> (u64, Duration) {
        let start = Instant::now();
        loop {
            for n in 1..=self.count {
                if !self.runs(n) {
                    continue;
                }
                let Some(rows) = self.cluster(n) else {
                    continue;
                };
                let leader = rows
                    .iter()
                    .filter(|r| r["role"] == "leader")
                    .max_by_key(|r| r["term"].as_u64())
                    .and_then(|r| r["replica"].as_u64());
                // Until the cluster is formed, it counts only once every replica votes.
                let formed = self.formed
                    || rows.iter().filter(|r| r["membership"] == "voter").count()
                        == self.count as usize;
                if let Some(l) = leader.filter(|_| formed) {
                    if self.runs(l)
                        && self
                            .run_within(l, Duration::from_secs(2), "yq", &["--json"])
                            .status
                            .success()
                    {
                        self.formed = true;
                        return (l, start.elapsed());
                    }
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
        assert!(
            out.status.success(),
            "yq on replica {n}: {}\n{}",
            stderr(&out),
            self.logs()
        );
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
            // Lossy: a log line may quote bytes that are not UTF-8.
            let text =
                String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
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

/// What a thread needs to run CLIs against the replicas' client sockets.
#[derive(Clone)]
pub struct Clients {
    dir: PathBuf,
    bin_dir: PathBuf,
    tag: String,
}

impl Clients {
    /// Runs `bin` against replica `n`'s socket; killed if it has not answered within 20 s.
    pub fn run(&self, n: u64, bin: &str, args: &[&str]) -> Output {
        self.run_within(n, Duration::from_secs(20), bin, args)
    }

    /// Runs `bin` against replica `n`'s socket; killed if it has not answered in `timeout`.
    pub fn run_within(&self, n: u64, timeout: Duration, bin: &str, args: &[&str]) -> Output {
        self.run_via(n, None, timeout, bin, args)
    }

    /// Runs `bin` with replica `n`'s config, against `agent`'s client socket when given (as
    /// on that node: see [`Replicas::start_agent`]), else against the replica's own; killed
    /// if it has not answered in `timeout`.
    pub fn run_via(
        &self,
        n: u64,
        agent: Option<&str>,
        timeout: Duration,
        bin: &str,
        args: &[&str],
    ) -> Output {
        self.run_via_as(n, agent, None, timeout, bin, args)
    }

    /// [`Clients::run_via`] as `uid` (its own group too) when given (a copy of the binary in
    /// the replicas' directory: the build tree may be closed to other users).
    pub fn run_via_as(
        &self,
        n: u64,
        agent: Option<&str>,
        uid: Option<u32>,
        timeout: Duration,
        bin: &str,
        args: &[&str],
    ) -> Output {
        let mut cmd = match uid {
            None => Command::new(self.bin_dir.join(bin)),
            Some(uid) => {
                use std::os::unix::process::CommandExt;
                let copy = self.dir.join(format!("{bin}-copy"));
                if !copy.exists() {
                    // Threads may copy at once: each its own file, renamed over the copy.
                    let tmp = copy.with_extension(format!("{:?}.tmp", std::thread::current().id()));
                    std::fs::copy(self.bin_dir.join(bin), &tmp).unwrap();
                    std::fs::rename(&tmp, &copy).unwrap();
                }
                let mut cmd = Command::new(copy);
                cmd.uid(uid).gid(uid);
                cmd
            }
        };
        if let Some(agent) = agent {
            cmd.env("YSCHED_SOCKET", self.dir.join(format!("{agent}.sock")));
        }
        cmd.env("YSCHED_CONF", self.dir.join(format!("replica-{n}.toml")))
            .env("YSCHED_TEST_TAG", &self.tag)
            .env_remove("RUST_LOG")
            .current_dir(&self.dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // ETXTBSY: a child another thread forked meanwhile holds a copy of a fresh copy's
        // write descriptor until its own exec (microseconds to milliseconds): try again.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                spawned => break spawned.expect("run CLI"),
            }
        };
        // Read as it comes: an answer larger than a pipe's buffer (a listing of a few hundred
        // jobs) would otherwise hold the CLI until it is killed. Both pipes close when the CLI
        // exits: their ends are what is waited for (no polling, which rounded every latency
        // `bench replicas` measures up to its period).
        let (tx, rx) = std::sync::mpsc::channel();
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>,
                     tx: std::sync::mpsc::Sender<()>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                let _ = tx.send(());
                bytes
            })
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _), tx.clone());
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _), tx);
        let deadline = Instant::now() + timeout;
        for _ in 0..2 {
            let left = deadline.saturating_duration_since(Instant::now());
            if rx.recv_timeout(left).is_err() {
                let _ = child.kill();
                break;
            }
        }
        let status = child.wait().expect("CLI status");
        Output {
            status,
            stdout: stdout.join().expect("stdout reader"),
            stderr: stderr.join().expect("stderr reader"),
        }
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
        crate::process::remove_job_cgroups(&self.dir.path().join("spool"));
    }
}
