//! Workloads: the cluster (nodes) and the jobs submitted to it, with what the simulated agents
//! need to know about each job (how long it runs, how it checkpoints). Three sources:
//!
//! - [`alibaba`]: the Alibaba GPU trace v2023 ("openb"), its nodes and tasks;
//! - [`factory`]: a generator shaped like the motivating case (a "model factory": long `low`
//!   training runs, `medium` sweeps, `high` release jobs, rare `critical` hotfixes);
//! - [`csv`]: a CSV of jobs (the format of `yctl report --export-trace`, see
//!   `docs/simulation.md`) on a cluster of identical nodes.

pub mod alibaba;
pub mod csv;
pub mod factory;

use std::collections::BTreeMap;
use ysched_common::config::AccountConfig;
use ysched_common::time::Millis;

/// Milliseconds in a second, minute, hour, day and week.
pub const SEC: Millis = ysched_common::time::SECOND_MS;
pub const MIN: Millis = ysched_common::time::MINUTE_MS;
pub const HOUR: Millis = ysched_common::time::HOUR_MS;
pub const DAY: Millis = ysched_common::time::DAY_MS;
pub const WEEK: Millis = ysched_common::time::WEEK_MS;

/// What the simulator replays.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// For the report: `factory`, `alibaba`, the CSV file's name.
    pub name: String,
    pub nodes: Vec<SimNode>,
    /// By submit time (ties keep their order: they are submitted in it).
    pub jobs: Vec<SimJob>,
    /// Utilization, restarts per week and team shares are measured over `[0, window)`
    /// (milliseconds from the start of the simulation): the period jobs arrive in.
    pub window_ms: Millis,
    /// How the source was mapped (what was rounded, left out, assumed), for the report.
    pub notes: Vec<String>,
    /// The teams and their shares, where the workload defines them (the built-in policies'
    /// `[accounts]`).
    pub accounts: BTreeMap<String, AccountConfig>,
}

impl Workload {
    pub fn gpus(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus)).sum()
    }

    /// Sorts the jobs by submit time (stable) and sets the window to the last submit (at
    /// least `min_window`).
    pub fn finish(&mut self, min_window: Millis) {
        self.jobs.sort_by_key(|j| j.submit_ms);
        let last = self.jobs.last().map_or(0, |j| j.submit_ms);
        self.window_ms = last.max(min_window).max(1);
    }
}

/// One node: identical GPUs of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct SimNode {
    pub name: String,
    pub gpus: u32,
    /// As an agent would register it (`NVIDIA A100-SXM4-80GB`, or the trace's `T4`).
    pub model: String,
    /// All GPUs NVLinked to each other (an NVSwitch box); otherwise no topology is known and
    /// every pair counts as `SYS`.
    pub nvlink: bool,
    pub cpus: u32,
    pub mem_mib: u64,
}

/// One job as submitted, and how it behaves when run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// The job's name in the source (a trace's task name, the CSV's `job_id`).
    pub name: String,
    /// Milliseconds after the start of the simulation.
    pub submit_ms: Millis,
    pub tier: String,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Nodes it spans (`--nodes`); its GPUs are split evenly over them.
    pub nodes: u32,
    /// Accepted GPU models (`--gpu-type A|B`); empty: any.
    pub gpu_types: Vec<String>,
    pub cpus: u32,
    pub mem_mib: u64,
    /// Work it needs to complete, in milliseconds of running (at least 1 s).
    pub duration_ms: Millis,
    /// `--time`: the agent stops a run at this (TIMEOUT).
    pub time_limit_secs: Option<u64>,
    /// It saves a checkpoint every this much running (0: never, only when stopped).
    pub checkpoint_interval_ms: Millis,
    /// How long writing a checkpoint takes after SIGTERM.
    pub checkpoint_write_ms: Millis,
    /// `--grace`; `None`: its tier's default.
    pub grace_secs: Option<u32>,
}

impl SimJob {
    /// A job with the defaults of the CSV format: 1 GPU, one node, 1 CPU, no limit, no
    /// periodic checkpoint, an instant checkpoint on SIGTERM, the tier's grace.
    pub fn new(name: &str, submit_ms: Millis, tier: &str, duration_ms: Millis) -> SimJob {
        SimJob {
            name: name.to_string(),
            submit_ms,
            tier: tier.to_string(),
            account: "default".into(),
            user: "user".into(),
            gpus: 1,
            nodes: 1,
            gpu_types: Vec::new(),
            cpus: 1,
            mem_mib: 0,
            duration_ms,
            time_limit_secs: None,
            checkpoint_interval_ms: 0,
            checkpoint_write_ms: 0,
            grace_secs: None,
        }
    }
}
