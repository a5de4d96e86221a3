//! [`TestCluster`]: a real schedd and agents on loopback in a temp dir, started and torn down.

mod agents;
mod cli;
mod queue;
mod schedd;

use crate::{kill_tagged, FakeNode, NvmlNode};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A running test cluster: schedd and its agents in a temp dir of its own; dropping it kills
/// every process it started.
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
    /// Extra environment for a daemon, from its next start: `schedd`, or an agent's name
    /// (see [`TestCluster::set_daemon_env`]).
    daemon_env: BTreeMap<String, Vec<(std::ffi::OsString, std::ffi::OsString)>>,
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

/// A byte from the kernel's random source.
fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut b).unwrap();
    b[0]
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

    /// As [`start`], on a cluster that predates enrolment: a shared cluster key exists (see
    /// [`TestCluster::write_cluster_key`]) and schedd still takes it. The agents enrol all
    /// the same (an upgraded cluster's); an impostor has only the key.
    pub fn start_with_cluster_key(nodes: Vec<FakeNode>) -> TestCluster {
        Self::start_prepared(nodes, Vec::new(), "", "", |c| {
            c.write_cluster_key();
        })
    }

    fn start_all(
        nodes: Vec<FakeNode>,
        nvml_nodes: Vec<NvmlNode>,
        scheduler_toml: &str,
        extra_toml: &str,
    ) -> TestCluster {
        Self::start_prepared(nodes, nvml_nodes, scheduler_toml, extra_toml, |_| {})
    }

    /// Writes the config, runs `prepare` on the cluster, then starts schedd and the agents.
    fn start_prepared(
        nodes: Vec<FakeNode>,
        nvml_nodes: Vec<NvmlNode>,
        scheduler_toml: &str,
        extra_toml: &str,
        prepare: impl FnOnce(&TestCluster),
    ) -> TestCluster {
        let dir = tempfile::Builder::new().prefix("ys").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o1777)).unwrap();
        // The checkpoint root every user's jobs make their directories in, as a shared one
        // is set up on a cluster.
        let ckpt = work.join("ckpt");
        std::fs::create_dir_all(&ckpt).unwrap();
        std::fs::set_permissions(&ckpt, std::fs::Permissions::from_mode(0o1777)).unwrap();
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
        let tag = crate::process::unique_tag("ystest");
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
            daemon_env: BTreeMap::new(),
        };
        prepare(&c);
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

    /// Sets the extra environment `daemon` (`schedd`, or an agent's name) starts with from its
    /// next start on (e.g. the power-loss shim's, see [`crate::power_loss`]); empty: none.
    pub fn set_daemon_env(
        &mut self,
        daemon: &str,
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    ) {
        self.daemon_env.insert(daemon.to_string(), env);
    }

    /// A daemon's command, with the extra environment set for it.
    fn daemon_command(&self, bin: &str, daemon: &str) -> Command {
        let mut cmd = self.command(bin);
        cmd.envs(self.daemon_env.get(daemon).into_iter().flatten().cloned());
        cmd
    }

    /// Writes a shared cluster key (0600) where the config names it, as on a cluster that
    /// predates enrolment: schedd takes it from its next start, agents started afterwards
    /// send it (and one with no certificate of its own authenticates with it alone).
    pub fn write_cluster_key(&self) -> String {
        use std::os::unix::fs::OpenOptionsExt;
        let key: String = (0..32).map(|_| format!("{:02x}", rand_byte())).collect();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(self.dir.path().join("cluster.key"))
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{key}\n").as_bytes()).unwrap();
        key
    }

    /// schedd's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Node `name`'s spool directory.
    pub fn spool_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join("spool").join(name)
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

    /// The daemons' logs, for failure messages: schedd's and each agent's, then each node's
    /// supervisor's (in its spool).
    pub fn logs(&self) -> String {
        let logs_in = |dir: &Path| -> Vec<PathBuf> {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "log"))
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            files
        };
        let mut files = logs_in(self.dir.path());
        if let Ok(rd) = std::fs::read_dir(self.dir.path().join("spool")) {
            let mut spools: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            spools.sort();
            for spool in spools {
                files.extend(logs_in(&spool));
            }
        }
        let mut s = String::new();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            s.push_str(&format!("--- {}\n", path.display()));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
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
        crate::process::remove_job_cgroups(&self.dir.path().join("spool"));
    }
}
