//! What a simulation observed: each job's fate, the scheduler's decisions, the runs.
//!
//! The reactor's observer ([`Seen`]) gathers it as events commit.

use crate::engine::EPOCH_MS;
use std::collections::BTreeMap;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord};
use ysched_schedd::state::reactor::Observer;
use ysched_schedd::state::Records;

/// What happened to one job of the workload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobOutcome {
    /// Its id in the simulated schedd (`None`: refused at submit).
    pub id: Option<JobId>,
    /// Why it was refused.
    pub refused: Option<String>,
    /// Its tier as schedd resolved it (the default tier for none, the config's spelling).
    pub tier: Option<String>,
    /// Offsets from the start of the simulation.
    pub first_start: Option<Millis>,
    /// Its final state (`COMPLETED`, `TIMEOUT`, `PREEMPTED`, ...); `None`: still active when
    /// the simulation ran out of events (it never could start).
    pub final_state: Option<String>,
    pub restarts: u32,
    /// Work (milliseconds of running, times its GPUs) thrown away by each preempted run, by
    /// the run's restart count: what had to be done again.
    pub lost_gpu_ms: BTreeMap<u32, i64>,
}

/// One decision of a pass, in order, at virtual times (offsets from the start).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    /// A run placed (`alloc` as schedd's history writes it: `n1 gpus [0,1]`).
    Start {
        at: Millis,
        job: u64,
        restart: u32,
        alloc: String,
    },
    /// A victim asked to stop for a preemptor.
    Evict {
        at: Millis,
        victim: u64,
        preemptor: u64,
        node: String,
    },
}

/// Everything a run of the simulation observed; [`crate::metrics`] turns it into results.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every run that ended, as schedd records it (times are offsets from the start).
    pub runs: Vec<RunRecord>,
    /// By workload index.
    pub jobs: Vec<JobOutcome>,
    pub decisions: Vec<Decision>,
    /// Scheduling passes run.
    pub passes: u64,
    /// When the last event happened (offset).
    pub end_ms: Millis,
}

/// The reactor's observer: what the events show of the workload's jobs.
pub(crate) struct Seen {
    /// Simulated job id -> workload index.
    pub(crate) index: BTreeMap<JobId, usize>,
    pub(crate) out: Outcome,
}

impl Observer for Seen {
    fn applying(&mut self, _rec: &Records, jobs: &[ysched_common::Job]) {
        for job in jobs {
            if let Some(&i) = self.index.get(&job.id) {
                let o = &mut self.out.jobs[i];
                o.restarts = job.restart_count;
                if job.state.is_terminal() {
                    o.final_state = Some(job.state.as_str().to_string());
                }
            }
        }
    }

    fn committed(&mut self, runs: &[RunRecord]) {
        self.out.runs.extend(runs.iter().cloned().map(|mut r| {
            r.queued_at -= EPOCH_MS;
            r.start -= EPOCH_MS;
            r.end -= EPOCH_MS;
            r
        }));
    }
}
