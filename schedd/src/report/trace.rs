//! The trace export (`yctl report --export-trace`, the `ExportTrace` RPC): one row per
//! finished job from its runs and its spec, in the CSV format `ysim` replays.

use super::IdMap;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord, RunView};

/// What a trace row takes from a job's record (`yctl report --export-trace`): its id as
/// displayed and the parts of its spec `ysim` replays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSpec {
    /// `12`, or `12_7` for a task of an array.
    pub display_id: String,
    /// Who submitted it and the account it charges: a record is taken for a job's runs only
    /// if they agree (imported runs may carry the id of another job).
    pub user: String,
    pub account: String,
    /// Accepted GPU models; empty: any.
    pub gpu_types: Vec<String>,
    /// `--nodes`, at least 1.
    pub nodes: u32,
    /// `--cpus`, at least 1.
    pub cpus: u32,
    /// `--mem` (0: none).
    pub mem_mib: u64,
    /// `--time` (`None`: no limit).
    pub time_limit_secs: Option<u64>,
    /// `--grace` as asked (`None`: the tier's default).
    pub grace_secs: Option<u32>,
}

impl TraceSpec {
    pub fn of(job: &ysched_common::Job) -> TraceSpec {
        let s = &job.spec;
        TraceSpec {
            display_id: job.display_id(),
            user: job.owner.user.clone(),
            account: s.account.clone(),
            gpu_types: s.gpu_types.clone(),
            nodes: s.nodes.max(1),
            cpus: s.cpus.max(1),
            mem_mib: s.mem_mib,
            time_limit_secs: s.time_limit_secs.filter(|t| *t > 0),
            grace_secs: s.grace_secs,
        }
    }
}

/// One job of an exported trace: a row of the CSV format of `docs/simulation.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    pub job_id: JobId,
    /// The job's id as displayed (`12_7`); its number when the job's record is unknown.
    pub display_id: String,
    /// `queued_at` of its first run (restart 0), else of the earliest run known.
    pub submit_ms: Millis,
    pub tier: String,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// The work the job needed (see [`TraceBuilder`]).
    pub duration_ms: Millis,
    /// Its last run's outcome and restart count.
    pub outcome: String,
    pub restarts: u32,
    /// From its spec; `None` when schedd has no record of the job (imported runs).
    pub spec: Option<TraceSpec>,
    /// CPUs of its last run (all nodes): stands in for the spec's.
    pub run_cpus: u32,
}

/// A job's runs so far, as the trace needs them.
struct TraceAcc {
    /// The run with the lowest restart count: (its restart count, its `queued_at`).
    first: (u32, Millis),
    /// The last run (highest restart count, then latest end): (its restart count, its end);
    /// the fields below but `work_ms` are its.
    last: (u32, Millis),
    outcome: String,
    cpus: u32,
    tier: String,
    account: String,
    user: String,
    gpus: u32,
    work_ms: Millis,
}

/// What a trace is made of: the jobs' rows, and how many jobs were left out because their
/// last run in the window went back to the queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// By submit time, then job id.
    pub rows: Vec<TraceRow>,
    pub unfinished: u64,
}

/// Builds the trace of `yctl report --export-trace` from recorded runs (those that ended in
/// the window, in any order) and the jobs' specs, as `docs/simulation.md` ("Producing it from
/// usage records") says: one row per job whose last run in the window ended it (any outcome
/// but `REQUEUED`); a job whose last run there went back to the queue was running or pending
/// at the window's end and is left out (counted in [`Trace::unfinished`]).
///
/// - `submit`: `queued_at` of the run with restart count 0, else of the earliest one known
///   (its first runs ended before the window);
/// - `duration`: the sum over its runs of `end - start`, less, for each run preempted without
///   a checkpoint saved, the work it lost (`lost_gpu_secs / gpus`, which it did again); a run
///   counts at least 0. A job that ended `TIMEOUT` needed its time limit (at least: it was
///   stopped there), when its spec gives one;
/// - tier, account, user, GPUs: from its last run (the same in all).
///
/// No store, no lock, no clock: the shell feeds it from a scan.
#[derive(Default)]
pub struct TraceBuilder {
    jobs: IdMap<TraceAcc>,
}

impl TraceBuilder {
    pub fn new() -> TraceBuilder {
        TraceBuilder::default()
    }

    /// Adds one recorded run.
    pub fn add(&mut self, run: &RunRecord) {
        self.add_view(&run.view())
    }

    /// [`TraceBuilder::add`] for a borrowed run, as a store scan hands them out.
    pub fn add_view(&mut self, run: &RunView<'_>) {
        let ran = run.end.saturating_sub(run.start).max(0);
        let lost = if run.preempted_by.is_some() && !run.checkpoint_saved && run.gpus > 0 {
            let ms = u128::from(run.lost_gpu_secs) * 1000 / u128::from(run.gpus);
            Millis::try_from(ms).unwrap_or(Millis::MAX)
        } else {
            0
        };
        let work = ran.saturating_sub(lost).max(0);
        let acc = self.jobs.entry(run.job_id.0).or_insert_with(|| TraceAcc {
            first: (run.restart_count, run.queued_at),
            last: (run.restart_count, run.end),
            outcome: run.outcome.to_string(),
            cpus: run.cpus,
            tier: run.tier.to_string(),
            account: run.account.to_string(),
            user: run.user.to_string(),
            gpus: run.gpus,
            work_ms: 0,
        });
        acc.work_ms = acc.work_ms.saturating_add(work);
        if run.restart_count < acc.first.0 {
            acc.first = (run.restart_count, run.queued_at);
        }
        if (run.restart_count, run.end) > acc.last {
            acc.last = (run.restart_count, run.end);
            acc.outcome.clear();
            acc.outcome.push_str(run.outcome);
            acc.cpus = run.cpus;
            if acc.tier != run.tier {
                acc.tier = run.tier.to_string();
            }
            if acc.account != run.account {
                acc.account = run.account.to_string();
            }
            if acc.user != run.user {
                acc.user = run.user.to_string();
            }
            acc.gpus = run.gpus;
        }
    }

    /// The jobs that ended (their last run is not `REQUEUED`), whose records the rows need.
    pub fn ended_jobs(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, a)| a.outcome != crate::state::usage::REQUEUED)
            .map(|(id, _)| JobId(*id))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// No run was added.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The trace, with each job's spec as `spec` gives it (`None`: unknown; one of another
    /// user or account than the job's runs is taken as unknown).
    pub fn finish(self, mut spec: impl FnMut(JobId) -> Option<TraceSpec>) -> Trace {
        let mut trace = Trace::default();
        for (id, acc) in self.jobs {
            if acc.outcome == crate::state::usage::REQUEUED {
                trace.unfinished += 1;
                continue;
            }
            let job_id = JobId(id);
            let spec = spec(job_id).filter(|s| s.user == acc.user && s.account == acc.account);
            let duration_ms = match spec.as_ref().and_then(|s| s.time_limit_secs) {
                Some(limit) if acc.outcome == ysched_common::JobState::Timeout.as_str() => {
                    Millis::try_from(limit.saturating_mul(1000)).unwrap_or(Millis::MAX)
                }
                _ => acc.work_ms,
            };
            trace.rows.push(TraceRow {
                job_id,
                display_id: spec
                    .as_ref()
                    .map_or_else(|| id.to_string(), |s| s.display_id.clone()),
                submit_ms: acc.first.1,
                tier: acc.tier,
                account: acc.account,
                user: acc.user,
                gpus: acc.gpus,
                duration_ms,
                outcome: acc.outcome,
                restarts: acc.last.0,
                spec,
                run_cpus: acc.cpus,
            });
        }
        trace
            .rows
            .sort_by(|a, b| a.submit_ms.cmp(&b.submit_ms).then(a.job_id.cmp(&b.job_id)));
        trace
    }
}

/// The trace of `runs` (recorded runs that ended in the window, any order) with the jobs'
/// specs from `specs` (see [`TraceBuilder`]).
pub fn trace(runs: &[RunRecord], specs: &std::collections::BTreeMap<JobId, TraceSpec>) -> Trace {
    let mut b = TraceBuilder::new();
    for r in runs {
        b.add(r);
    }
    b.finish(|id| specs.get(&id).cloned())
}
