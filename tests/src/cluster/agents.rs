//! The test cluster's agents: started, changed under, signalled and stopped; impostors, logins.

use super::TestCluster;
use crate::mock_nvml::{self, Machine};
use crate::wait_until;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

impl TestCluster {
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
    /// `noded-<name>-dup.log`), not enrolled: it has only the cluster key, if the cluster
    /// has one (see [`TestCluster::write_cluster_key`]); the caller kills it.
    pub fn spawn_impostor_agent(&self, name: &str) -> Child {
        self.spawn_agent_with(name, &format!("{name}-dup"), None)
    }

    /// A token enrolling host `name` (a login host with `login`), from `yctl node enrol`.
    pub fn enrol_token(&self, name: &str, login: bool) -> String {
        let mut args = vec!["node", "enrol", name];
        if login {
            args.push("--login");
        }
        let out = self.run("yctl", &args);
        assert!(
            out.status.success(),
            "yctl node enrol {name}: {}\n{}",
            crate::stderr(&out),
            self.logs()
        );
        crate::stdout(&out).trim().to_string()
    }

    /// The enrolment token file to start agent `instance` with: none when its spool holds a
    /// certificate already, else a new token for host `name`.
    fn token_file(&self, name: &str, instance: &str, login: bool) -> Option<PathBuf> {
        let spool = self.dir.path().join("spool").join(instance);
        if spool.join("identity").join("node.crt").exists() {
            return None;
        }
        let path = self.dir.path().join(format!("{instance}.token"));
        std::fs::write(&path, self.enrol_token(name, login)).unwrap();
        Some(path)
    }

    /// Starts a login agent (`noded --no-jobs`) named `name`: no GPUs, runs nothing, serves
    /// its client socket ([`TestCluster::agent_socket`]). Stop it with `stop_agent`.
    pub fn start_login_agent(&mut self, name: &str) {
        let spool = self.dir.path().join("spool").join(name);
        let mut cmd = self.command("noded");
        if let Some(token) = self.token_file(name, name, true) {
            cmd.arg("--enrol-token").arg(token);
        }
        let child = cmd
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
    /// spool, log and client socket named after `instance`, enrolled as `name` first unless
    /// its spool holds a certificate already.
    fn spawn_agent(&self, name: &str, instance: &str) -> Child {
        let token = self.token_file(name, instance, false);
        self.spawn_agent_with(name, instance, token)
    }

    /// [`Self::spawn_agent`] with the enrolment token file `token` (none: not enrolled now).
    fn spawn_agent_with(&self, name: &str, instance: &str, token: Option<PathBuf>) -> Child {
        let spool = self.spool_dir(instance);
        let mut cmd = self.daemon_command("noded", instance);
        if let Some(token) = token {
            cmd.arg("--enrol-token").arg(token);
        }
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
}
