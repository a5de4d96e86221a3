//! Usage accounting, as pure functions on domain records: every run that an event ends
//! becomes a [`RunRecord`], written in the event's own batch (so it is exactly as durable as
//! the job's change: a crash loses both or neither, and an agent's end report applied again
//! after a restart finds the run already over and records nothing), and handed to fair share
//! with the committed effects.
//!
//! A run ends when a job that held resources with a start time gets a version that does not
//! (a final state, back in the queue, or another start): [`Records::account_runs`] compares
//! each new version in an event's effects with the one before it, so every path that ends a
//! run (an agent's end report, a registration that no longer knows a job, a silent node's
//! fence, a cancel) is counted without each knowing about usage. The shell calls it on every
//! event before the event's batch is written.
//!
//! Also here: a running job's usage so far ([`running_run`], for reports) and the effects of
//! an import of runs recorded elsewhere ([`import_runs`]).

use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use std::collections::{BTreeMap, BTreeSet};
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Caller, Job, JobId, JobState, RunRecord};
use ysched_common::{StopReason, StopRequest};

/// The outcome of a run that went back to the queue (preempted and requeued, `yctl requeue`,
/// a node's fence, a launch never confirmed).
pub const REQUEUED: &str = "REQUEUED";
/// The outcome of a run still going, as [`running_run`] charges it so far.
pub const RUNNING: &str = "RUNNING";

/// How a run ended, as an agent's report of its last part said (see
/// `lifecycle::EndOutcome::run_ended_at`): the time the part ended, and whether a checkpoint
/// was saved during its grace. Runs ended otherwise (a cancel while queued cannot end one; a
/// node lost or fenced) end at the event's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    pub job: JobId,
    pub at: Millis,
    pub checkpoint_saved: bool,
}

/// GPUs and CPUs of the run `job` holds (or held): every node of it, the parts that ended
/// already (`parts.ended`) included.
fn run_size(job: &Job) -> (u32, u32) {
    job.alloc
        .iter()
        .chain(&job.parts.ended)
        .fold((0u32, 0u32), |(g, c), a| {
            (g + a.gpus.len() as u32, c.saturating_add(a.cpus))
        })
}

/// The job that preempts `job`'s run, if one does.
fn preemptor(job: &Job) -> Option<JobId> {
    match job.stop.as_deref() {
        Some(StopRequest {
            reason: StopReason::Preempt { by },
            ..
        }) => Some(*by),
        _ => None,
    }
}

/// The usage record of `job`'s current run (it holds resources and has a start time), as if
/// it ended at `end` with `outcome`: its wait clamped to [submit or start, start] and its end
/// to [start, `latest`] (an agent's clock may be off; no run is charged before it started or
/// after schedd's now).
fn record(job: &Job, start: Millis, end: Millis, latest: Millis, outcome: &str) -> RunRecord {
    let (gpus, cpus) = run_size(job);
    let end = end.clamp(start, latest.max(start));
    let queued_at = job
        .queued_at
        .unwrap_or(job.submit_time)
        .clamp(job.submit_time.min(start), start);
    RunRecord {
        job_id: job.id,
        restart_count: job.restart_count,
        account: job.spec.account.clone(),
        user: job.owner.user.clone(),
        uid: job.owner.uid,
        tier: job.spec.tier.clone(),
        gpus,
        cpus,
        queued_at,
        start,
        end,
        outcome: outcome.to_string(),
        preempted_by: preemptor(job),
        preemptor_account: None,
        checkpoint_saved: false,
        lost_gpu_secs: 0,
    }
}

/// A running job's usage so far, as a run ending `now` with outcome [`RUNNING`] (`None` for a
/// job not holding resources): reports charge running jobs as they run.
pub fn running_run(job: &Job, now: Millis) -> Option<RunRecord> {
    let start = job.start_time.filter(|_| job.state.holds_resources())?;
    Some(record(job, start, now, now, RUNNING))
}

/// The record of the run that `old` (the job's previous version) had and `new` no longer
/// has, if it ended; `end` is how its last part ended where an agent said so.
fn ended_run(old: &Job, new: &Job, end: Option<&RunEnd>, now: Millis) -> Option<RunRecord> {
    let start = old.start_time.filter(|_| old.state.holds_resources())?;
    let same_run = new.state.holds_resources()
        && new.start_time == Some(start)
        && new.restart_count == old.restart_count;
    if same_run {
        return None;
    }
    let at = end.map(|e| e.at).or(new.end_time).unwrap_or(now);
    let outcome = if new.state.is_terminal() {
        new.state.as_str()
    } else {
        REQUEUED
    };
    let mut run = record(old, start, at, now, outcome);
    if run.preempted_by.is_some() {
        run.checkpoint_saved = end.is_some_and(|e| e.checkpoint_saved);
        // The work since the newest checkpoint known (since the start when none is): lost
        // unless the grace saved it.
        let since = old.last_checkpoint.unwrap_or(start).clamp(start, run.end);
        run.lost_gpu_secs = u64::from(run.gpus) * ((run.end - since) as u64) / 1000;
    }
    Some(run)
}

impl Records {
    /// Records the usage of every run that the event `fx` ends (see the module docs): one
    /// [`RunRecord`] per run, in `fx.runs` and in its batch. Call it once per event, before
    /// the batch is written. `now` is the event's time: a run ends then unless an agent's
    /// report of its last part says when.
    pub fn account_runs(&self, fx: &mut Effects, now: Millis) {
        if fx.jobs.is_empty() {
            return;
        }
        let mut runs = Vec::new();
        // The version before each one in the event: the records', then the event's own.
        let mut before: BTreeMap<JobId, &Job> = BTreeMap::new();
        for new in &fx.jobs {
            let old = before
                .insert(new.id, new)
                .or_else(|| self.jobs.get(&new.id).map(|j| &**j));
            let Some(old) = old else {
                continue;
            };
            let end = fx.run_ends.iter().rev().find(|e| e.job == new.id);
            if let Some(mut run) = ended_run(old, new, end, now) {
                run.preemptor_account = run.preempted_by.and_then(|by| {
                    before
                        .get(&by)
                        .copied()
                        .or_else(|| self.jobs.get(&by).map(|j| &**j))
                        .map(|p| p.spec.account.clone())
                });
                runs.push(run);
            }
        }
        for run in runs {
            fx.put_run(run);
        }
    }
}

/// The outcomes a run may have ended with.
fn known_outcome(outcome: &str) -> bool {
    outcome == REQUEUED
        || JobState::parse(outcome).is_some_and(|s| s.is_terminal() && s.as_str() == outcome)
}

/// The longest account, user, tier or outcome an imported run may name.
pub const MAX_NAME_BYTES: usize = 256;

/// Why `run` cannot be imported, if it cannot: names the run and the field.
fn import_refusal(run: &RunRecord, now: Millis) -> Option<String> {
    let which = format!("run of job {} (restart {})", run.job_id, run.restart_count);
    let text = |field: &str, value: &str, required: bool| -> Option<String> {
        if required && value.is_empty() {
            return Some(format!("{which}: {field} is empty"));
        }
        if value.len() > MAX_NAME_BYTES {
            return Some(format!(
                "{which}: {field} is longer than {MAX_NAME_BYTES} bytes"
            ));
        }
        ysched_common::text::check_printable(field, value)
            .err()
            .map(|e| format!("{which}: {e}"))
    };
    if let Some(e) = text("account", &run.account, true)
        .or_else(|| text("user", &run.user, true))
        .or_else(|| text("tier", &run.tier, true))
        .or_else(|| text("outcome", &run.outcome, true))
        .or_else(|| {
            text(
                "preemptor_account",
                run.preemptor_account.as_deref().unwrap_or(""),
                false,
            )
        })
    {
        return Some(e);
    }
    if !known_outcome(&run.outcome) {
        return Some(format!(
            "{which}: outcome {:?} is none of COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, \
             OUT_OF_MEMORY, PREEMPTED, REQUEUED",
            run.outcome
        ));
    }
    if run.job_id.0 == 0 {
        return Some(format!("{which}: job_id must be at least 1"));
    }
    if run.start <= 0 || run.end < run.start {
        return Some(format!(
            "{which}: start ({}) must be after 1970 and end ({}) not before it",
            run.start, run.end
        ));
    }
    // A minute of slack for clocks; usage in the future is a mistake.
    if run.end > now + 60_000 {
        return Some(format!(
            "{which}: it ends in the future ({})",
            ysched_common::time::rfc3339(run.end)
        ));
    }
    if run.queued_at < 0 || run.queued_at > run.start {
        return Some(format!(
            "{which}: queued_at ({}) must be between 1970 and its start ({})",
            run.queued_at, run.start
        ));
    }
    None
}

/// An administrator's import of runs recorded elsewhere (`yctl usage import`, e.g. from
/// another scheduler's accounting): the runs, checked, as one event that records them (in its
/// batch and its `runs`, so fair share counts them too) with one audit entry. A run given twice
/// is recorded once; `known` says whether a run is recorded already (the store's record with
/// the same end, job and restart), and those are left out, so importing a file again charges
/// nothing twice. Returns the effects and how many runs are new.
pub fn import_runs(
    caller: &Caller,
    runs: Vec<RunRecord>,
    known: &dyn Fn(&RunRecord) -> ApiResult<bool>,
    now: Millis,
) -> ApiResult<(Effects, u64)> {
    if !caller.is_admin() {
        return Err(ApiError::Denied(format!(
            "only administrators may import usage ({} is not one: root on the schedd host, \
             scheduler.admin_group, root on scheduler.admin_hosts)",
            caller.describe()
        )));
    }
    if let Some(why) = runs.iter().find_map(|r| import_refusal(r, now)) {
        return Err(ApiError::Invalid(format!("usage import refused: {why}")));
    }
    let given = runs.len();
    let mut seen = BTreeSet::new();
    let mut fx = Effects::default();
    for run in runs {
        if !seen.insert((run.end, run.job_id, run.restart_count)) || known(&run)? {
            continue;
        }
        fx.put_run(run);
    }
    let imported = fx.runs.len() as u64;
    fx.audit(AuditRecord {
        time: now,
        user: caller.owner.user.clone(),
        uid: caller.owner.uid,
        action: "usage_import".into(),
        job_id: None,
        detail: format!(
            "{imported} runs imported ({} given, {} already recorded or repeated)",
            given,
            given as u64 - imported
        ),
        host: caller.host.clone(),
    });
    Ok((fx, imported))
}
