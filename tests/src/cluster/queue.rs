//! Submitting jobs, reading jobs and nodes as JSON, and waiting for their states.

use super::TestCluster;
use crate::{stderr, stdout};
use serde_json::Value;
use std::time::{Duration, Instant};

impl TestCluster {
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

    /// Reads a file job `id` writes in the work dir (`rel`), waiting until its last line is
    /// complete; on timeout, fails with the job as schedd lists it and the daemons' logs
    /// (a job that never writes it has usually ended or was never started: say which).
    pub fn read_job_file(&self, id: u64, rel: &str, timeout: Duration) -> String {
        let path = self.path(rel);
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.ends_with('\n') {
                return text;
            }
            if start.elapsed() > timeout {
                panic!(
                    "job {id} did not write a complete line in {} within {timeout:?} \
                     (it holds {text:?}); the job: {}\n{}",
                    path.display(),
                    self.job(id),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
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
}
