//! The harness for end-to-end tests: a real `schedd` and real `noded` agents on loopback, in a
//! temp dir, with fake GPU inventories (or GPUs found through NVML: the mock NVML library
//! serving a machine file, see [`NvmlNode`]), driven through the real CLIs.
//!
//! Every process the harness starts carries `YSCHED_TEST_TAG` in its environment (jobs inherit
//! it through `--export=ALL`), so dropping the harness kills all of them, shepherds and jobs
//! included, even after an agent was killed.

pub mod core_bench;
pub mod fleet;
pub mod fuzz;
pub mod neighbour;

pub use ysched_mock_nvml::machine as mock_nvml;

use mock_nvml::Machine;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One fake node: name and GPUs (model per GPU; NVLink given per GPU as peer indices).
#[derive(Clone)]
pub struct FakeNode {
    pub name: String,
    pub gpus: Vec<FakeGpu>,
}

#[derive(Clone)]
pub struct FakeGpu {
    pub model: String,
    pub memory_mib: u64,
    pub nvlink: Vec<u32>,
    /// This GPU's row of `nvidia-smi topo -m` (PCIe relations); empty: not given.
    pub pcie: Vec<&'static str>,
}

impl FakeNode {
    /// `n` GPUs of one model, all NVLinked to each other (DGX-style).
    pub fn uniform(name: &str, n: u32, model: &str) -> FakeNode {
        FakeNode {
            name: name.into(),
            gpus: (0..n)
                .map(|i| FakeGpu {
                    model: model.into(),
                    memory_mib: 81920,
                    nvlink: (0..n).filter(|j| *j != i).collect(),
                    pcie: Vec::new(),
                })
                .collect(),
        }
    }

    /// GPUs in NVLink islands of `island` GPUs (PIX inside an island, SYS across), e.g.
    /// `islands("n1", 8, 4, ..)` is two 4-GPU islands; `island` 1 means no NVLink at all.
    pub fn islands(name: &str, n: u32, island: u32, model: &str) -> FakeNode {
        let same = |a: u32, b: u32| a / island == b / island;
        FakeNode {
            name: name.into(),
            gpus: (0..n)
                .map(|i| FakeGpu {
                    model: model.into(),
                    memory_mib: 81920,
                    nvlink: (0..n)
                        .filter(|j| *j != i && same(i, *j) && island > 1)
                        .collect(),
                    pcie: (0..n)
                        .map(|j| {
                            if i == j {
                                "X"
                            } else if same(i, j) || (island == 1 && i / 2 == j / 2) {
                                "PIX"
                            } else {
                                "SYS"
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    pub fn inventory_toml(&self) -> String {
        self.inventory_toml_with(&[])
    }

    /// The inventory with extra lines in some GPUs' tables, e.g. `(3, r#"fault = "XID 79""#)`
    /// (the fake GPU faults the agent's health monitor reads, see `noded/src/gpu/fake_health.rs`).
    pub fn inventory_toml_with(&self, extra: &[(u32, &str)]) -> String {
        let mut s = String::new();
        for (i, g) in self.gpus.iter().enumerate() {
            s.push_str(&format!(
                "[[gpu]]\nindex = {i}\nuuid = \"GPU-{}-{i:04}\"\nmodel = \"{}\"\nmemory_mib = {}\nnvlink = {:?}\n",
                self.name, g.model, g.memory_mib, g.nvlink
            ));
            if !g.pcie.is_empty() {
                s.push_str(&format!("pcie = {:?}\n", g.pcie));
            }
            for (_, line) in extra.iter().filter(|(gpu, _)| *gpu as usize == i) {
                s.push_str(line);
                s.push('\n');
            }
            s.push('\n');
        }
        s
    }
}

/// A node whose agent finds its GPUs through NVML, as on a real GPU host: `noded
/// --nvml-library` loads the mock NVML library (`tests/mock-nvml`), which serves `machine`.
#[derive(Clone)]
pub struct NvmlNode {
    pub name: String,
    pub machine: Machine,
}

impl NvmlNode {
    pub fn new(name: &str, machine: Machine) -> NvmlNode {
        NvmlNode {
            name: name.into(),
            machine,
        }
    }
}

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    /// A world-writable directory for job files (jobs may run as `nobody`).
    pub work: PathBuf,
    pub port: u16,
    tag: String,
    bin_dir: PathBuf,
    schedd: Option<Child>,
    agents: BTreeMap<String, Child>,
    nodes: Vec<FakeNode>,
    nvml_nodes: Vec<NvmlNode>,
    /// `RLIMIT_AS` (bytes) for schedd, from its next start (see
    /// [`TestCluster::restart_schedd_with_memory_limit`]).
    schedd_address_space: Option<u64>,
}

/// Where cargo put the binaries: next to the test executable's `deps/` directory.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // Tests run from target/<profile>/deps, the bench binary from target/<profile>.
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    for b in ["schedd", "noded", "ysub", "yq", "ycancel", "yctl"] {
        assert!(
            dir.join(b).exists(),
            "{} missing: build the binaries first (scripts/test.sh does `cargo build --bins`)",
            dir.join(b).display()
        );
    }
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl TestCluster {
    /// Starts schedd and one agent per node, and waits until every node is registered.
    pub fn start(nodes: Vec<FakeNode>) -> TestCluster {
        Self::start_with_config(nodes, "")
    }

    /// As [`start`], with extra TOML appended to the generated config (e.g. tiers).
    pub fn start_with_config(nodes: Vec<FakeNode>, extra_toml: &str) -> TestCluster {
        Self::start_with(nodes, "", extra_toml)
    }

    /// As [`start`], with `scheduler_toml` added to the `[scheduler]` table and `extra_toml`
    /// appended after the `[node]` table (node keys, then other tables such as tiers).
    pub fn start_with(nodes: Vec<FakeNode>, scheduler_toml: &str, extra_toml: &str) -> TestCluster {
        Self::start_all(nodes, Vec::new(), scheduler_toml, extra_toml)
    }

    /// As [`start`], with `nvml_nodes` too: agents that find their GPUs through NVML.
    pub fn start_with_nvml(nodes: Vec<FakeNode>, nvml_nodes: Vec<NvmlNode>) -> TestCluster {
        Self::start_all(nodes, nvml_nodes, "", "")
    }

    /// As [`start_with_nvml`], with `scheduler_toml` and `extra_toml` as in [`start_with`].
    pub fn start_with_nvml_config(
        nodes: Vec<FakeNode>,
        nvml_nodes: Vec<NvmlNode>,
        scheduler_toml: &str,
        extra_toml: &str,
    ) -> TestCluster {
        Self::start_all(nodes, nvml_nodes, scheduler_toml, extra_toml)
    }

    fn start_all(
        nodes: Vec<FakeNode>,
        nvml_nodes: Vec<NvmlNode>,
        scheduler_toml: &str,
        extra_toml: &str,
    ) -> TestCluster {
        let dir = tempfile::Builder::new().prefix("ys").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let port = free_port();
        let conf = dir.path().join("ysched.toml");
        let d = dir.path().display();
        std::fs::write(
            &conf,
            format!(
                "[scheduler]\n{scheduler_toml}\nlisten = \"127.0.0.1:{port}\"\nsocket = \"{d}/schedd.sock\"\nstate_dir = \"{d}/state\"\n\
                 cluster_key_file = \"{d}/cluster.key\"\ncheckpoint_root = \"{d}/work/ckpt\"\nheartbeat_secs = 2\n\
                 [node]\nspool_dir = \"{d}/spool\"\n{extra_toml}\n"
            ),
        )
        .unwrap();
        let tag = format!("ystest-{}-{port}", std::process::id());
        let mut c = TestCluster {
            dir,
            conf,
            work,
            port,
            tag,
            bin_dir: bin_dir(),
            schedd: None,
            agents: BTreeMap::new(),
            nodes: nodes.clone(),
            nvml_nodes: nvml_nodes.clone(),
            schedd_address_space: None,
        };
        c.start_schedd();
        for name in nodes
            .iter()
            .map(|n| &n.name)
            .chain(nvml_nodes.iter().map(|n| &n.name))
        {
            c.start_agent(name);
        }
        c.wait_nodes_up(c.node_count());
        c
    }

    /// The nodes the cluster was started with.
    fn node_count(&self) -> usize {
        self.nodes.len() + self.nvml_nodes.len()
    }

    /// Restarts schedd with `scheduler.node_timeout_secs` set (the agents stay connected).
    pub fn with_node_timeout(mut self, secs: u64) -> TestCluster {
        let text = std::fs::read_to_string(&self.conf).unwrap();
        let text = text.replacen(
            "[scheduler]\n",
            &format!("[scheduler]\nnode_timeout_secs = {secs}\n"),
            1,
        );
        std::fs::write(&self.conf, text).unwrap();
        self.stop_schedd(nix::sys::signal::Signal::SIGTERM);
        self.start_schedd();
        self.wait_nodes_up(self.node_count());
        self
    }

    fn command(&self, bin: &str) -> Command {
        self.command_at(&self.bin_dir.join(bin))
    }

    fn command_at(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("YSCHED_CONF", &self.conf)
            .env("YSCHED_TEST_TAG", &self.tag)
            .env_remove("RUST_LOG")
            .current_dir(&self.work);
        cmd
    }

    fn log_file(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .unwrap()
    }

    pub fn schedd_pid(&self) -> Option<u32> {
        self.schedd.as_ref().map(|c| c.id())
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("schedd.sock")
    }

    pub fn start_schedd(&mut self) {
        use std::os::unix::process::CommandExt;
        assert!(self.schedd.is_none(), "schedd already running");
        let mut cmd = self.command("schedd");
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

    pub fn start_agent(&mut self, name: &str) {
        if let Some(node) = self.nvml_nodes.iter().find(|n| n.name == name) {
            node.machine.write(&self.machine_file(name)).unwrap();
            let child = self.spawn_agent(name, name);
            self.agents.insert(name.to_string(), child);
            return;
        }
        let node = self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .expect("known node")
            .clone();
        std::fs::write(
            self.dir.path().join(format!("{name}-gpus.toml")),
            node.inventory_toml(),
        )
        .unwrap();
        let child = self.spawn_agent(name, name);
        self.agents.insert(name.to_string(), child);
    }

    /// Rewrites node `name`'s fake GPU inventory with `extra` lines in some GPUs' tables (see
    /// [`FakeNode::inventory_toml_with`]): a new file renamed over the old one, so that the
    /// agent's health monitor never reads half of it.
    pub fn set_gpu_faults(&self, name: &str, extra: &[(u32, &str)]) {
        let node = self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .expect("known node");
        let path = self.dir.path().join(format!("{name}-gpus.toml"));
        let new = self.dir.path().join(format!("{name}-gpus.toml.new"));
        std::fs::write(&new, node.inventory_toml_with(extra)).unwrap();
        std::fs::rename(&new, &path).unwrap();
    }

    /// The agent's pid, while the harness runs it.
    pub fn agent_pid(&self, name: &str) -> Option<i32> {
        self.agents.get(name).map(|c| c.id() as i32)
    }

    /// Sends `signal` to the agent without reaping it (e.g. SIGSTOP/SIGCONT).
    pub fn signal_agent(&self, name: &str, signal: nix::sys::signal::Signal) {
        let pid = self.agent_pid(name).expect("agent running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    }

    /// Starts a second agent that claims the name of node `name` (its own spool and log,
    /// `noded-<name>-dup.log`); the caller kills it.
    pub fn spawn_impostor_agent(&self, name: &str) -> Child {
        self.spawn_agent(name, &format!("{name}-dup"))
    }

    /// Starts a login agent (`noded --no-jobs`) named `name`: no GPUs, runs nothing, serves
    /// its client socket ([`TestCluster::agent_socket`]). Stop it with `stop_agent`.
    pub fn start_login_agent(&mut self, name: &str) {
        let spool = self.dir.path().join("spool").join(name);
        let child = self
            .command("noded")
            .args(["-v", "--no-jobs", "--name", name, "--spool-dir"])
            .arg(&spool)
            .arg("--client-socket")
            .arg(self.agent_socket(name))
            .stdout(Stdio::null())
            .stderr(self.log_file(&format!("noded-{name}")))
            .spawn()
            .expect("start noded --no-jobs");
        self.agents.insert(name.to_string(), child);
        let sock = self.agent_socket(name);
        wait_until(
            Duration::from_secs(20),
            "login agent's client socket",
            || std::os::unix::net::UnixStream::connect(&sock).is_ok(),
        );
    }

    /// The client socket of agent `name` (each agent of the harness serves its own, as each
    /// host of a cluster does).
    pub fn agent_socket(&self, name: &str) -> PathBuf {
        self.dir.path().join("sock").join(format!("{name}.sock"))
    }

    /// The machine file the mock NVML library of NVML node `name` serves.
    pub fn machine_file(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}-nvml.toml"))
    }

    /// Changes the machine NVML node `name` runs on, as its running agent sees it.
    pub fn change_machine(&mut self, name: &str, edit: impl FnOnce(&mut Machine)) {
        let node = self
            .nvml_nodes
            .iter_mut()
            .find(|n| n.name == name)
            .expect("an NVML node");
        edit(&mut node.machine);
        let machine = node.machine.clone();
        machine.write(&self.machine_file(name)).unwrap();
    }

    /// Starts `noded` for node `name` (whose inventory or machine file is written), with
    /// spool, log and client socket named after `instance`.
    fn spawn_agent(&self, name: &str, instance: &str) -> Child {
        let spool = self.dir.path().join("spool").join(instance);
        let mut cmd = self.command("noded");
        cmd.args(["-v", "--name", name, "--cpus", "64", "--mem", "512G"]);
        if self.nvml_nodes.iter().any(|n| n.name == name) {
            cmd.arg("--nvml-library")
                .arg(mock_nvml::library())
                .env(mock_nvml::MACHINE_ENV, self.machine_file(name));
        } else {
            cmd.arg("--fake-gpus")
                .arg(self.dir.path().join(format!("{name}-gpus.toml")));
        }
        cmd.arg("--spool-dir")
            .arg(&spool)
            .arg("--client-socket")
            .arg(self.agent_socket(instance))
            .stdout(Stdio::null())
            .stderr(self.log_file(&format!("noded-{instance}")))
            .spawn()
            .expect("start noded")
    }

    pub fn stop_agent(&mut self, name: &str, signal: nix::sys::signal::Signal) {
        if let Some(mut c) = self.agents.remove(name) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal);
            let _ = c.wait();
        }
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

    /// Submits with `ysub --parsable` and returns the id; panics with the error otherwise.
    pub fn submit(&self, args: &[&str]) -> u64 {
        let out = self.run("ysub", &[&["--parsable"], args].concat());
        assert!(
            out.status.success(),
            "ysub {args:?} failed: {}",
            stderr(&out)
        );
        stdout(&out).trim().parse().expect("job id")
    }

    /// All jobs, finished ones too, from `yq --all --json`.
    pub fn jobs(&self) -> Vec<Value> {
        let out = self.run("yq", &["--all", "--json"]);
        assert!(out.status.success(), "yq failed: {}", stderr(&out));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("yq json")
    }

    pub fn job(&self, id: u64) -> Value {
        let out = self.run("yq", &["--all", "--json", "-j", &id.to_string()]);
        assert!(out.status.success(), "yq failed: {}", stderr(&out));
        let v: Vec<Value> = serde_json::from_slice(&out.stdout).expect("yq json");
        v.into_iter()
            .next()
            .unwrap_or_else(|| panic!("job {id} not listed"))
    }

    /// Waits until job `id` is in `state` and returns it.
    pub fn wait_state(&self, id: u64, state: &str, timeout: Duration) -> Value {
        let start = Instant::now();
        loop {
            let j = self.job(id);
            if j["state"] == state {
                return j;
            }
            if start.elapsed() > timeout {
                panic!(
                    "job {id} not {state} after {timeout:?}: {j}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until a scheduling pass has looked at pending job `id` and left it waiting (it
    /// then has a reason, which a new job lacks), and returns the job; fails at once if the
    /// job leaves the queue meanwhile. A test that something does not happen waits for this
    /// evidence that the scheduler decided, not for a fixed time.
    pub fn wait_waiting(&self, id: u64, timeout: Duration) -> Value {
        let start = Instant::now();
        loop {
            let j = self.job(id);
            assert_eq!(j["state"], "PENDING", "job {id} left the queue: {j}");
            if j["reason"].as_str().is_some_and(|r| !r.is_empty()) {
                return j;
            }
            if start.elapsed() > timeout {
                panic!(
                    "job {id} had no reason after {timeout:?}: {j}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn nodes(&self) -> Vec<Value> {
        let out = self.run("yctl", &["nodes", "--json"]);
        assert!(out.status.success(), "yctl nodes failed: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("nodes json")
    }

    pub fn wait_nodes_up(&self, n: usize) {
        let start = Instant::now();
        loop {
            let out = self.run("yctl", &["nodes", "--json"]);
            if out.status.success() {
                let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
                if v.iter().filter(|n| n["state"] != "DOWN").count() >= n {
                    return;
                }
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!("{n} nodes not up: {}\n{}", stdout(&out), self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        if let Ok(rd) = std::fs::read_dir(self.dir.path()) {
            let mut files: Vec<_> = rd
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .collect();
            files.sort_by_key(|e| e.path());
            for e in files {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                s.push_str(&format!("--- {}\n", e.path().display()));
                for l in tail.into_iter().rev() {
                    s.push_str(l);
                    s.push('\n');
                }
            }
        }
        s
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    /// Writes an executable script into the work dir.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.work.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        use nix::sys::signal::Signal::SIGKILL;
        self.stop_schedd(SIGKILL);
        let names: Vec<String> = self.agents.keys().cloned().collect();
        for n in names {
            self.stop_agent(&n, SIGKILL);
        }
        kill_tagged(&self.tag);
    }
}

/// SIGKILLs every process whose environment carries `YSCHED_TEST_TAG=<tag>`.
pub fn kill_tagged(tag: &str) {
    let needle = format!("YSCHED_TEST_TAG={tag}");
    for _ in 0..3 {
        let mut found = false;
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                if pid == std::process::id() as i32 {
                    continue;
                }
                let Ok(env) = std::fs::read(e.path().join("environ")) else {
                    continue;
                };
                if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                    found = true;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        if !found {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A file system mounted for one test, unmounted (lazily) when dropped.
pub struct Mounted(pub PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Mounts a tmpfs of `size` (e.g. `"64m"`) on `dir`, created if missing (the suite runs as
/// root).
pub fn mount_tmpfs(dir: &Path, size: &str) -> Mounted {
    std::fs::create_dir_all(dir).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(
        ok.success(),
        "cannot mount a tmpfs (the suite runs as root)"
    );
    Mounted(dir.to_path_buf())
}

/// Free bytes on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    st.blocks_available() as u64 * st.fragment_size() as u64
}

/// Fills the file system holding `dir` until it has no space left; returns the filler.
pub fn fill(dir: &Path) -> PathBuf {
    fill_leaving(dir, 0)
}

/// Fills the file system holding `dir` until about `leave` bytes are free (none: until it
/// has no space left); returns the filler, `dir/filler` (or `filler.2`, ... if taken).
pub fn fill_leaving(dir: &Path, leave: u64) -> PathBuf {
    use std::io::Write;
    let mut path = dir.join("filler");
    for i in 2.. {
        if !path.exists() {
            break;
        }
        path = dir.join(format!("filler.{i}"));
    }
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0x55u8; 1 << 16];
    loop {
        let free = free_bytes(dir);
        if free <= leave {
            break;
        }
        let n = (free - leave).min(block.len() as u64) as usize;
        if f.write_all(&block[..n]).is_err() {
            break;
        }
        let _ = f.flush();
    }
    let _ = f.sync_all();
    path
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

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

/// Of `streams`, how many the peer has closed (end of file or reset) by now; the others are
/// open (what the peer sent them is read and dropped).
pub fn count_closed<S: std::io::Read + NonBlocking>(streams: &mut [S]) -> usize {
    let mut closed = 0;
    for s in streams.iter_mut() {
        s.make_nonblocking();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    closed
}

/// Streams [`count_closed`] can look at without blocking.
pub trait NonBlocking {
    fn make_nonblocking(&self);
}

impl NonBlocking for std::os::unix::net::UnixStream {
    fn make_nonblocking(&self) {
        self.set_nonblocking(true).unwrap();
    }
}

impl NonBlocking for std::net::TcpStream {
    fn make_nonblocking(&self) {
        self.set_nonblocking(true).unwrap();
    }
}

/// Polls `cond` until true or panics after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The GPU indices a job holds, as `yq --json` / `yctl show job --json` list them (none when
/// it holds none).
pub fn job_gpus(job: &serde_json::Value) -> Vec<u64> {
    job["gpus"]
        .as_array()
        .map(|a| a.iter().map(|g| g.as_u64().unwrap()).collect())
        .unwrap_or_default()
}

/// Reads a file a job writes, waiting until its last line is complete. A shell's `> file`
/// creates the file before the command writes a byte, so "it exists" alone can read nothing.
pub fn read_when_exists(p: &Path, timeout: Duration) -> String {
    let mut text = String::new();
    wait_until(
        timeout,
        &format!("a complete line in {}", p.display()),
        || {
            text = std::fs::read_to_string(p).unwrap_or_default();
            text.ends_with('\n')
        },
    );
    text
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

/// Says that the running test could not run here and passes it: one line
/// `SKIPPED: <test>: <why>` written straight to stderr (not captured by the test harness, so
/// it shows even when the test passes), which `scripts/test.sh` counts and lists at the end.
/// Never skip silently: a test that returns early without this line passed for nothing.
pub fn skipped(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// The resident memory of process `pid` in MiB (`VmRSS`), 0 when it is gone.
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}
