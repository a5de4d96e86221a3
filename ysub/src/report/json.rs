//! `yctl report --json`: the reply in stable field names, hours, seconds and rates.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use ysched_common::time::{rfc3339, utc_date, Millis, HOUR_MS};
use ysched_proto::{ReportReply, TierWait};
use ysched_report::ratio;

pub(super) fn hours(ms: u64) -> f64 {
    ms as f64 / HOUR_MS as f64
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

pub(super) fn day_label(start_ms: Millis) -> String {
    utc_date(start_ms)
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct WaitJson {
    pub tier: String,
    /// Runs that started in the window.
    pub starts: u64,
    pub wait_p50_secs: f64,
    pub wait_p95_secs: f64,
    pub wait_max_secs: f64,
}

fn waits_json(w: &[TierWait]) -> Vec<WaitJson> {
    w.iter()
        .map(|w| WaitJson {
            tier: w.tier.clone(),
            starts: w.starts,
            wait_p50_secs: w.wait_p50_ms as f64 / 1000.0,
            wait_p95_secs: w.wait_p95_ms as f64 / 1000.0,
            wait_max_secs: w.wait_max_ms as f64 / 1000.0,
        })
        .collect()
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ClusterJson {
    pub gpus: u32,
    pub capacity_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub used_gpu_seconds: f64,
    /// used / capacity; null when the capacity is 0.
    pub utilization: Option<f64>,
    pub jobs: u64,
    pub runs: u64,
    pub running: u64,
    pub preemptions: u64,
    pub checkpoints_saved: u64,
    /// checkpoints_saved / preemptions; null without preemptions.
    pub checkpoint_rate: Option<f64>,
    pub lost_gpu_hours: f64,
    pub lost_gpu_seconds: f64,
    /// Runs that ended back in the queue.
    pub restarts: u64,
    pub start_latency: Vec<WaitJson>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct GroupJson {
    pub name: String,
    pub gpu_hours: f64,
    pub gpu_seconds: f64,
    /// gpu_hours / the cluster's capacity.
    pub capacity_share: Option<f64>,
    /// gpu_hours / the GPU-hours every group used in the window (the whole cluster's, also
    /// when only some groups are shown): the SHARE column; null when nothing was used.
    pub share_of_used: Option<f64>,
    pub cpu_hours: f64,
    pub jobs: u64,
    pub runs: u64,
    pub running: u64,
    pub restarts: u64,
    pub preemptions_suffered: u64,
    pub preemptions_caused: u64,
    pub checkpoints_saved: u64,
    pub checkpoint_rate: Option<f64>,
    pub lost_gpu_hours: f64,
    pub lost_gpu_seconds: f64,
    pub waits: Vec<WaitJson>,
    pub outcomes: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct DayJson {
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    pub capacity_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub utilization: Option<f64>,
    /// GPU-hours per group that day.
    pub groups: BTreeMap<String, f64>,
}

/// `yctl report --json`: stable field names; times RFC 3339 and epoch milliseconds.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ReportJson {
    pub from: String,
    pub to: String,
    pub from_ms: Millis,
    pub to_ms: Millis,
    pub generated: String,
    /// What `groups` are: account, user or tier.
    pub by: String,
    /// false: only the accounts you may charge are in `groups` and `days`.
    pub all_accounts: bool,
    pub cluster: ClusterJson,
    pub groups: Vec<GroupJson>,
    pub days: Vec<DayJson>,
}

pub fn report_json(r: &ReportReply) -> ReportJson {
    let c = r.cluster.clone().unwrap_or_default();
    ReportJson {
        from: rfc3339(r.from_ms),
        to: rfc3339(r.to_ms),
        from_ms: r.from_ms,
        to_ms: r.to_ms,
        generated: rfc3339(r.generated_ms),
        by: r.by.clone(),
        all_accounts: r.all_accounts,
        cluster: ClusterJson {
            gpus: c.gpus,
            capacity_gpu_hours: hours(c.capacity_gpu_ms),
            used_gpu_hours: hours(c.used_gpu_ms),
            used_gpu_seconds: secs(c.used_gpu_ms),
            utilization: ratio(c.used_gpu_ms, c.capacity_gpu_ms),
            jobs: c.jobs,
            runs: c.runs,
            running: c.running,
            preemptions: c.preemptions,
            checkpoints_saved: c.checkpoints_saved,
            checkpoint_rate: ratio(c.checkpoints_saved, c.preemptions),
            lost_gpu_hours: hours(c.lost_gpu_ms),
            lost_gpu_seconds: secs(c.lost_gpu_ms),
            restarts: c.restarts,
            start_latency: waits_json(&c.start_latency),
        },
        groups: r
            .groups
            .iter()
            .map(|g| GroupJson {
                name: g.name.clone(),
                gpu_hours: hours(g.gpu_ms),
                gpu_seconds: secs(g.gpu_ms),
                capacity_share: ratio(g.gpu_ms, c.capacity_gpu_ms),
                share_of_used: ratio(g.gpu_ms, c.used_gpu_ms),
                cpu_hours: hours(g.cpu_ms),
                jobs: g.jobs,
                runs: g.runs,
                running: g.running,
                restarts: g.restarts,
                preemptions_suffered: g.preemptions_suffered,
                preemptions_caused: g.preemptions_caused,
                checkpoints_saved: g.checkpoints_saved,
                checkpoint_rate: ratio(g.checkpoints_saved, g.preemptions_suffered),
                lost_gpu_hours: hours(g.lost_gpu_ms),
                lost_gpu_seconds: secs(g.lost_gpu_ms),
                waits: waits_json(&g.waits),
                outcomes: g
                    .outcomes
                    .iter()
                    .map(|o| (o.outcome.clone(), o.runs))
                    .collect(),
            })
            .collect(),
        days: r
            .days
            .iter()
            .map(|d| DayJson {
                date: day_label(d.start_ms),
                capacity_gpu_hours: hours(d.capacity_gpu_ms),
                used_gpu_hours: hours(d.used_gpu_ms),
                utilization: ratio(d.used_gpu_ms, d.capacity_gpu_ms),
                groups: d
                    .groups
                    .iter()
                    .map(|g| (g.name.clone(), hours(g.gpu_ms)))
                    .collect(),
            })
            .collect(),
    }
}
