//! ysim: replays a workload through schedd's state machine and scheduling core in virtual
//! time (no sleeping, no processes, no network), and measures what each policy (a config)
//! does with it. Same workload, policies and seed: the same output, byte for byte.
//!
//! # Layout
//! - [`workload`]: the jobs and nodes to replay: the Alibaba GPU trace v2023, the generated
//!   `factory` scenario, or a CSV of jobs.
//! - [`engine`]: the simulation: events in virtual time, schedd's `Records` and
//!   `core::schedule_with` as the shell drives them, minus I/O.
//! - [`outcome`]: what a simulation observed (each job's fate, the decisions, the runs).
//! - `agents`: simulated node agents (jobs as timers, stops with grace and checkpoints).
//! - [`policy`]: the built-in policies (`fifo` .. `+backfill`) and config files.
//! - [`metrics`]: latency, utilization, preemptions, checkpoints, lost work, team shares.
//! - [`output`]: the comparison as a table, JSON, or one HTML file with SVG charts.
//! - [`rng`]: the seeded generator the workloads draw from.

mod agents;
pub mod engine;
pub mod metrics;
pub mod outcome;
pub mod output;
pub mod policy;
pub mod rng;
pub mod workload;

pub use engine::{simulate, PolicySpec, EPOCH_MS};
pub use metrics::Results;
pub use outcome::{Decision, JobOutcome, Outcome};
pub use workload::{SimJob, SimNode, Workload};

use serde::Serialize;

/// The workload, as the report describes it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkloadSummary {
    pub name: String,
    pub nodes: usize,
    pub gpus: u64,
    pub jobs: usize,
    pub window_hours: f64,
    pub notes: Vec<String>,
}

/// Every policy's results on one workload.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub workload: WorkloadSummary,
    pub seed: u64,
    pub policies: Vec<Results>,
}

pub fn summary(workload: &Workload) -> WorkloadSummary {
    WorkloadSummary {
        name: workload.name.clone(),
        nodes: workload.nodes.len(),
        gpus: workload.gpus(),
        jobs: workload.jobs.len(),
        window_hours: workload.window_ms as f64 / workload::HOUR as f64,
        notes: workload.notes.clone(),
    }
}

/// Runs `workload` under `policy` and measures it.
pub fn run_simulation(workload: &Workload, policy: &PolicySpec) -> (Results, Outcome) {
    let outcome = simulate(workload, policy);
    (metrics::measure(workload, policy, &outcome), outcome)
}

/// Runs `workload` under each policy, in order; `progress` hears of each policy as it is
/// done, with the wall-clock time it took (for the caller's log: never part of the report).
pub fn compare(
    workload: &Workload,
    policies: &[PolicySpec],
    seed: u64,
    mut progress: impl FnMut(&Results, std::time::Duration),
) -> Report {
    let mut results = Vec::new();
    for policy in policies {
        let began = std::time::Instant::now();
        let (r, _) = run_simulation(workload, policy);
        progress(&r, began.elapsed());
        results.push(r);
    }
    Report {
        workload: summary(workload),
        seed,
        policies: results,
    }
}

#[cfg(test)]
mod tests;
