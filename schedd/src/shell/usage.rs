//! Usage: reports (`yctl report`), built off the lock on a blocking thread from a scan of the
//! store's recorded runs and a copy of the running jobs' usage so far, and imports of runs
//! recorded elsewhere (`yctl usage import`), as one event.

use super::{lock, Cluster};
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::report::{self, GroupBy, Report};
use crate::state::usage;
use ysched_common::time::now_ms;
use ysched_common::Caller;
use ysched_common::JobId;
use ysched_common::RunRecord;

/// The longest window a report may cover (ten years: a day line each).
const MAX_REPORT_DAYS: i64 = 3660;

/// The window `[from, to)` a request names (0: seven days before `to_ms`; 0: now), checked.
fn window(from_ms: i64, to_ms: i64, now: i64) -> ApiResult<(i64, i64)> {
    let to = if to_ms == 0 { now } else { to_ms };
    let from = if from_ms == 0 {
        to.saturating_sub(7 * report::DAY_MS)
    } else {
        from_ms
    };
    if from >= to {
        return Err(ApiError::Invalid(format!(
            "the report's start ({}) is not before its end ({})",
            ysched_common::time::rfc3339(from),
            ysched_common::time::rfc3339(to)
        )));
    }
    if to.saturating_sub(from) > MAX_REPORT_DAYS * report::DAY_MS {
        return Err(ApiError::Invalid(format!(
            "a report covers at most {MAX_REPORT_DAYS} days"
        )));
    }
    Ok((from, to))
}

/// A trace export (`yctl report --export-trace`) and what it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    pub trace: report::Trace,
    pub from: i64,
    pub to: i64,
    /// schedd's clock when it was made.
    pub generated: i64,
    /// false: only jobs of the accounts the caller may charge.
    pub all_accounts: bool,
}

impl Cluster {
    /// The usage report for `[from_ms, to_ms)` (0: seven days before `to_ms`; 0: now) by
    /// `by`, as `caller` may see it (see `scheduler.reports_public`).
    pub async fn usage_report(
        &self,
        caller: &Caller,
        from_ms: i64,
        to_ms: i64,
        by: &str,
    ) -> ApiResult<Report> {
        let by = GroupBy::parse(by).map_err(ApiError::Invalid)?;
        let now = now_ms();
        let (from, to) = window(from_ms, to_ms, now)?;
        let (running, nodes) = {
            let st = lock(&self.state);
            let running: Vec<RunRecord> = st
                .rec
                .jobs()
                .values()
                .filter_map(|j| usage::running_run(j, now))
                .collect();
            let nodes: Vec<report::NodeCapacity> = st
                .rec
                .nodes()
                .values()
                .map(|n| report::NodeCapacity {
                    gpus: n.gpus.len() as u32,
                    registered_at: n.registered_at,
                })
                .collect();
            (running, nodes)
        };
        let mut tiers: Vec<(&String, i64)> = self
            .config
            .tiers
            .iter()
            .map(|(name, t)| (name, t.value))
            .collect();
        tiers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let params = report::Params {
            from,
            to,
            now,
            by,
            nodes,
            tier_order: tiers.into_iter().map(|(n, _)| n.clone()).collect(),
            all_accounts: self.config.sees_all_usage(caller),
        };
        let store = self.store.clone();
        let config = self.config.clone();
        let owner = caller.owner.clone();
        tokio::task::spawn_blocking(move || {
            let mut b =
                report::Builder::new(params, |account: &str| config.may_charge(&owner, account));
            // Runs that ended from the window's start on: a run that ended after the window
            // may have begun inside it.
            store.scan_run_views(from, i64::MAX, |run| b.add_view(run, false))?;
            for run in &running {
                b.add(run, true);
            }
            Ok::<_, ApiError>(b.finish())
        })
        .await
        .map_err(|e| ApiError::Internal(format!("report failed: {e}")))?
    }

    /// The jobs whose runs ended in `[from_ms, to_ms)` (the window as [`Cluster::usage_report`]
    /// takes it) as a trace `ysim` replays (`yctl report --export-trace`, see
    /// [`report::TraceBuilder`]), with the window, the time and whether every account is in
    /// it. With `scheduler.reports_public = false`, a caller who is no administrator gets only
    /// the jobs of accounts they may charge, and is refused when there are jobs but none of
    /// theirs.
    pub async fn export_trace(
        &self,
        caller: &Caller,
        from_ms: i64,
        to_ms: i64,
    ) -> ApiResult<TraceExport> {
        let now = now_ms();
        let (from, to) = window(from_ms, to_ms, now)?;
        let all_accounts = self.config.sees_all_usage(caller);
        let store = self.store.clone();
        let config = self.config.clone();
        let owner = caller.owner.clone();
        let trace = tokio::task::spawn_blocking(move || {
            let mut b = report::TraceBuilder::new();
            let mut memo: std::collections::HashMap<String, bool> = Default::default();
            let mut hidden = false;
            store.scan_run_views(from, to, |run| {
                let visible = all_accounts
                    || match memo.get(run.account) {
                        Some(v) => *v,
                        None => {
                            let v = config.may_charge(&owner, run.account);
                            memo.insert(run.account.to_string(), v);
                            v
                        }
                    };
                if visible {
                    b.add_view(run);
                } else {
                    hidden = true;
                }
            })?;
            if hidden && b.is_empty() {
                return Err(ApiError::Denied(format!(
                    "reports are not public here (scheduler.reports_public = false) and no job \
                     whose runs ended from {} to {} is of an account you may charge; ask an \
                     administrator for the trace",
                    ysched_common::time::rfc3339(from),
                    ysched_common::time::rfc3339(to)
                )));
            }
            // Every job has a record in the store (unfinished ones too; an array's task with
            // the spec its array shares). Imported runs may name jobs it never had. Read in
            // batches: a month's jobs whole would be a lot of memory, and the tasks of an
            // array (consecutive ids) share one read of their spec within a batch.
            let mut specs: std::collections::HashMap<JobId, report::TraceSpec> = Default::default();
            for ids in b.ended_jobs().chunks(1024) {
                for job in store.jobs_by_id(ids.iter().copied())? {
                    specs.insert(job.id, report::TraceSpec::of(&job));
                }
            }
            Ok::<_, ApiError>(b.finish(|id| specs.remove(&id)))
        })
        .await
        .map_err(|e| ApiError::Internal(format!("trace export failed: {e}")))??;
        Ok(TraceExport {
            trace,
            from,
            to,
            generated: now,
            all_accounts,
        })
    }

    /// Records `runs` from elsewhere (administrators only; see [`usage::import_runs`]) as one
    /// event, durably, before answering with how many were new.
    pub async fn import_usage(&self, caller: &Caller, runs: Vec<RunRecord>) -> ApiResult<u64> {
        let known = |run: &RunRecord| self.store.has_run(run).map_err(ApiError::from);
        let (changed, wake, imported) =
            self.run_event(|_, now| usage::import_runs(caller, runs, &known, now))?;
        self.settle(changed, wake).await?;
        Ok(imported)
    }
}
