//! What a simulation measured, per policy and per tier, from the runs schedd recorded
//! (`RunRecord`s, exactly as `yctl report` reads them) and the agents' account of lost work.
//!
//! - **Start latency**: a job's first start minus its submit (restarts after a preemption are
//!   not starts), mean, p50 and p95 (nearest rank) over the jobs of the tier that started.
//! - **GPU utilization**: GPU-time held by runs (a stopping victim's grace included) inside
//!   the window, over the window's capacity (every GPU of every node).
//! - **Preemptions**: runs stopped for a preemptor. **Checkpoint success**: the share of them
//!   whose checkpoint was written within the grace.
//! - **GPU-hours lost**: work thrown away by preempted runs (since their last checkpoint, when
//!   the grace was too short to write one), which had to be done again.
//! - **Restarts**: preempted runs that went back to the queue and ended inside the window, in
//!   all and per week of window (the output shows the totals for a window shorter than a
//!   week: a rate from minutes of trace would be an extrapolation, not a measurement).
//! - **Team share**: each account's part of the GPU-time used inside the window.
//! - **Per team** (account), as per tier: start latency over the team's jobs that started,
//!   and its runs preempted, checkpoints saved and restarts.

use crate::engine::PolicySpec;
use crate::outcome::Outcome;
use crate::workload::{Workload, HOUR, WEEK};
use serde::Serialize;
use std::collections::BTreeMap;
use ysched_common::time::Millis;
use ysched_report::ratio;
use ysched_schedd::state::usage::REQUEUED;

/// Points of the utilization-over-time series.
pub const SERIES_POINTS: usize = 200;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Results {
    pub policy: String,
    pub fair_share: bool,
    pub backfill: bool,
    pub jobs: u64,
    /// Refused at submit (an unknown tier, a job no node could ever run, ...).
    pub refused: u64,
    /// How many were refused for each reason (schedd's message).
    pub refused_reasons: BTreeMap<String, u64>,
    pub completed: u64,
    /// Ended otherwise, by final state (`TIMEOUT`, `PREEMPTED` after `max_requeues`, ...).
    pub other_ends: BTreeMap<String, u64>,
    /// Still waiting when nothing was left to happen (could never start).
    pub never_started: u64,
    pub window_hours: f64,
    /// From the start until the last job ended.
    pub makespan_hours: f64,
    pub utilization: f64,
    pub preemptions: u64,
    pub checkpoints_saved: u64,
    pub checkpoint_success: Option<f64>,
    pub lost_gpu_hours: f64,
    /// schedd's own estimate (`RunRecord::lost_gpu_secs`, from the checkpoint times agents
    /// reported), for comparison with what the agents know was lost.
    pub lost_gpu_hours_schedd_estimate: f64,
    pub restarts: u64,
    pub restarts_per_week: f64,
    pub passes: u64,
    pub tiers: Vec<TierResults>,
    pub teams: Vec<TeamShare>,
    /// Start latency and preemptions per team (account), by name: every team with a job.
    pub team_results: Vec<TeamResults>,
    /// Utilization (0 to 1) in [`SERIES_POINTS`] equal slices of the window.
    pub utilization_series: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TierResults {
    pub tier: String,
    pub jobs: u64,
    pub started: u64,
    pub latency_mean_s: Option<f64>,
    pub latency_p50_s: Option<f64>,
    pub latency_p95_s: Option<f64>,
    pub latency_max_s: Option<f64>,
    /// Runs of this tier preempted.
    pub preempted: u64,
    pub checkpoints_saved: u64,
    pub checkpoint_success: Option<f64>,
    pub lost_gpu_hours: f64,
    /// Preempted runs of this tier that went back to the queue inside the window, and per
    /// week of the window.
    pub restarts: u64,
    pub restarts_per_week: f64,
    /// Latency percentiles 0, 5, ..., 100 (seconds), for the distribution chart.
    pub latency_percentiles_s: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TeamShare {
    pub account: String,
    pub gpu_hours: f64,
    /// Of all GPU-time used in the window.
    pub share: f64,
}

/// What one team's (account's) jobs waited and suffered: the per-tier figures, per team.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TeamResults {
    pub account: String,
    pub jobs: u64,
    pub started: u64,
    pub latency_mean_s: Option<f64>,
    pub latency_p50_s: Option<f64>,
    pub latency_p95_s: Option<f64>,
    pub latency_max_s: Option<f64>,
    /// Runs of the team's jobs preempted, and of those, checkpoints saved within the grace.
    pub preempted: u64,
    pub checkpoints_saved: u64,
    /// Preempted runs of the team that went back to the queue inside the window.
    pub restarts: u64,
}

/// The window is shorter than a week: the output shows restarts as totals, not per week.
pub fn restarts_as_totals(window_hours: f64) -> bool {
    window_hours * (HOUR as f64) < WEEK as f64
}

/// Mean, p50, p95 and max (seconds) of sorted latencies (ms); `None` each without any.
fn latency_summary(sorted: &[Millis]) -> [Option<f64>; 4] {
    let mean = (!sorted.is_empty())
        .then(|| sorted.iter().map(|v| secs(*v)).sum::<f64>() / sorted.len() as f64);
    [
        mean,
        percentile(sorted, 50.0).map(secs),
        percentile(sorted, 95.0).map(secs),
        sorted.last().copied().map(secs),
    ]
}

/// Nearest-rank percentile `p` (0 to 100) of sorted values.
pub fn percentile(sorted: &[Millis], p: f64) -> Option<Millis> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn secs(ms: Millis) -> f64 {
    ms as f64 / 1000.0
}

/// The results of one policy's run.
pub fn measure(workload: &Workload, policy: &PolicySpec, out: &Outcome) -> Results {
    let window = workload.window_ms.max(1);
    let capacity = workload.gpus() as f64 * window as f64;
    // Held GPU-time inside the window, per slice and per account.
    let mut series = vec![0f64; SERIES_POINTS];
    let slice = window as f64 / SERIES_POINTS as f64;
    let mut used = 0f64;
    let mut by_account: BTreeMap<&str, f64> = BTreeMap::new();
    for run in &out.runs {
        let (s, e) = (run.start.max(0), run.end.min(window));
        if e <= s {
            continue;
        }
        let g = f64::from(run.gpus);
        used += g * (e - s) as f64;
        *by_account.entry(run.account.as_str()).or_default() += g * (e - s) as f64;
        let first = ((s as f64 / slice) as usize).min(SERIES_POINTS - 1);
        let last = (((e as f64) / slice).ceil() as usize).min(SERIES_POINTS);
        for (k, point) in series.iter_mut().enumerate().take(last).skip(first) {
            let lo = (k as f64 * slice).max(s as f64);
            let hi = ((k + 1) as f64 * slice).min(e as f64);
            if hi > lo {
                *point += g * (hi - lo);
            }
        }
    }
    let per_slice = workload.gpus() as f64 * slice;
    let utilization_series = series
        .iter()
        .map(|v| if per_slice > 0.0 { v / per_slice } else { 0.0 })
        .collect();

    // Preempted runs, and what each lost by the agents' account.
    let mut lost_by_run: BTreeMap<(u64, u32), i64> = BTreeMap::new();
    for o in &out.jobs {
        if let Some(id) = o.id {
            for (restart, lost) in &o.lost_gpu_ms {
                lost_by_run.insert((id.0, *restart), *lost);
            }
        }
    }
    #[derive(Default)]
    struct TierAcc {
        jobs: u64,
        latencies: Vec<Millis>,
        preempted: u64,
        saved: u64,
        lost_gpu_ms: i64,
        restarts: u64,
    }
    let mut tiers: BTreeMap<String, TierAcc> = BTreeMap::new();
    // The same per team (account); `jobs` and latencies from the workload, the rest from runs.
    let mut teams: BTreeMap<String, TierAcc> = BTreeMap::new();
    let (mut preemptions, mut saved, mut lost_ms, mut estimate_secs) = (0u64, 0u64, 0i64, 0u64);
    let mut restarts = 0u64;
    for run in out.runs.iter().filter(|r| r.preempted_by.is_some()) {
        preemptions += 1;
        let t = tiers.entry(run.tier.clone()).or_default();
        t.preempted += 1;
        let team = teams.entry(run.account.clone()).or_default();
        team.preempted += 1;
        if run.checkpoint_saved {
            saved += 1;
            t.saved += 1;
            team.saved += 1;
        }
        let lost = lost_by_run
            .get(&(run.job_id.0, run.restart_count))
            .copied()
            .unwrap_or(0);
        lost_ms += lost;
        t.lost_gpu_ms += lost;
        estimate_secs += run.lost_gpu_secs;
        if run.outcome == REQUEUED && run.end <= window {
            restarts += 1;
            t.restarts += 1;
            teams.entry(run.account.clone()).or_default().restarts += 1;
        }
    }
    let (mut completed, mut refused, mut never_started) = (0u64, 0u64, 0u64);
    let mut refused_reasons: BTreeMap<String, u64> = BTreeMap::new();
    let mut other_ends: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_end: Millis = 0;
    for run in &out.runs {
        last_end = last_end.max(run.end);
    }
    for (job, o) in workload.jobs.iter().zip(&out.jobs) {
        let tier = o.tier.as_ref().unwrap_or(&job.tier);
        let t = tiers.entry(tier.clone()).or_default();
        t.jobs += 1;
        let team = teams.entry(job.account.clone()).or_default();
        team.jobs += 1;
        if let Some(why) = &o.refused {
            refused += 1;
            *refused_reasons.entry(why.clone()).or_default() += 1;
            continue;
        }
        match (o.first_start, o.final_state.as_deref()) {
            (None, _) => never_started += 1,
            (Some(start), _) => {
                t.latencies.push(start - job.submit_ms);
                team.latencies.push(start - job.submit_ms);
            }
        }
        match o.final_state.as_deref() {
            Some("COMPLETED") => completed += 1,
            Some(other) => *other_ends.entry(other.to_string()).or_default() += 1,
            None => {}
        }
    }
    // Tiers by value, highest first (equal values, as in `fifo`, by the default tiers'
    // values); tiers the config does not know (refused) last.
    let config = &policy.config;
    let defaults = ysched_common::config::default_tiers();
    let value = |tiers: &BTreeMap<String, ysched_common::TierConfig>, n: &str| {
        std::cmp::Reverse(tiers.get(n).map_or(i64::MIN, |t| t.value))
    };
    let mut names: Vec<String> = tiers.keys().cloned().collect();
    names.sort_by_key(|n| (value(&config.tiers, n), value(&defaults, n), n.clone()));
    let tier_results = names
        .into_iter()
        .map(|name| {
            let mut acc = tiers.remove(&name).unwrap_or_default();
            acc.latencies.sort_unstable();
            let l = &acc.latencies;
            let [mean, p50, p95, max] = latency_summary(l);
            TierResults {
                tier: name,
                jobs: acc.jobs,
                started: l.len() as u64,
                latency_mean_s: mean,
                latency_p50_s: p50,
                latency_p95_s: p95,
                latency_max_s: max,
                preempted: acc.preempted,
                checkpoints_saved: acc.saved,
                checkpoint_success: ratio(acc.saved, acc.preempted),
                lost_gpu_hours: acc.lost_gpu_ms as f64 / HOUR as f64,
                restarts: acc.restarts,
                restarts_per_week: acc.restarts as f64 * WEEK as f64 / window as f64,
                latency_percentiles_s: if l.is_empty() {
                    Vec::new()
                } else {
                    (0..=20)
                        .filter_map(|k| percentile(l, f64::from(k) * 5.0).map(secs))
                        .collect()
                },
            }
        })
        .collect();
    let team_results = teams
        .into_iter()
        .map(|(account, mut acc)| {
            acc.latencies.sort_unstable();
            let [mean, p50, p95, max] = latency_summary(&acc.latencies);
            TeamResults {
                account,
                jobs: acc.jobs,
                started: acc.latencies.len() as u64,
                latency_mean_s: mean,
                latency_p50_s: p50,
                latency_p95_s: p95,
                latency_max_s: max,
                preempted: acc.preempted,
                checkpoints_saved: acc.saved,
                restarts: acc.restarts,
            }
        })
        .collect();
    let teams = by_account
        .iter()
        .map(|(account, ms)| TeamShare {
            account: account.to_string(),
            gpu_hours: ms / HOUR as f64,
            share: if used > 0.0 { ms / used } else { 0.0 },
        })
        .collect();
    Results {
        policy: policy.name.clone(),
        fair_share: policy.fair_share,
        backfill: config.scheduler.backfill,
        jobs: workload.jobs.len() as u64,
        refused,
        refused_reasons,
        completed,
        other_ends,
        never_started,
        window_hours: window as f64 / HOUR as f64,
        makespan_hours: last_end.max(out.end_ms) as f64 / HOUR as f64,
        utilization: if capacity > 0.0 { used / capacity } else { 0.0 },
        preemptions,
        checkpoints_saved: saved,
        checkpoint_success: ratio(saved, preemptions),
        lost_gpu_hours: lost_ms as f64 / HOUR as f64,
        lost_gpu_hours_schedd_estimate: estimate_secs as f64 / 3600.0,
        restarts,
        restarts_per_week: restarts as f64 * WEEK as f64 / window as f64,
        passes: out.passes,
        tiers: tier_results,
        teams,
        team_results,
        utilization_series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 50.0), Some(5));
        assert_eq!(percentile(&v, 95.0), Some(10));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7], 95.0), Some(7));
    }
}
