//! `yctl report --csv`: one row per group, then one for the whole cluster, written through
//! the `csv` crate from one row type ([`UsageRow`]), whose fields name the header's columns.

use super::json::{report_json, WaitJson};
use serde::{Serialize, Serializer};
use ysched_proto::ReportReply;
use ysched_report::csv_rows::{header_of, write_rows, CsvError};

/// One row of the CSV: a group's figures, then its waits per tier.
#[derive(Debug, Serialize)]
struct UsageRow<'a> {
    figures: UsageFigures<'a>,
    /// One per tier of the header, in its order.
    waits: Vec<TierWaits>,
}

/// A row's columns before the waits, which name the header's: a group's figures (`by` =
/// `account`, `user` or `tier`) or the whole cluster's (`by` = `cluster`, no name). Hours and
/// shares have six decimals, seconds three; `None` is an empty field.
#[derive(Debug, Serialize)]
struct UsageFigures<'a> {
    by: &'a str,
    name: &'a str,
    #[serde(serialize_with = "decimals_6")]
    gpu_hours: f64,
    #[serde(serialize_with = "decimals_3")]
    gpu_seconds: f64,
    /// For the cluster: its utilization.
    #[serde(serialize_with = "optional_decimals_6")]
    capacity_share: Option<f64>,
    /// Not known for the cluster as a whole.
    #[serde(serialize_with = "optional_decimals_6")]
    cpu_hours: Option<f64>,
    jobs: u64,
    runs: u64,
    running: u64,
    restarts: u64,
    preemptions_suffered: u64,
    preemptions_caused: u64,
    checkpoints_saved: u64,
    #[serde(serialize_with = "optional_decimals_6")]
    checkpoint_rate: Option<f64>,
    #[serde(serialize_with = "decimals_6")]
    lost_gpu_hours: f64,
    /// Of the GPU-hours every group used (for the cluster: 1 when it used any).
    #[serde(serialize_with = "optional_decimals_6")]
    share_of_used: Option<f64>,
}

/// A row's three columns for one tier: runs started, and the median and 95th percentile wait
/// in seconds (empty when none started).
#[derive(Debug, Serialize)]
struct TierWaits {
    starts: u64,
    #[serde(serialize_with = "optional_shortest")]
    wait_p50_secs: Option<f64>,
    #[serde(serialize_with = "optional_shortest")]
    wait_p95_secs: Option<f64>,
}

fn decimals_6<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&format_args!("{value:.6}"))
}

fn decimals_3<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&format_args!("{value:.3}"))
}

fn optional_decimals_6<S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => decimals_6(value, serializer),
        None => serializer.serialize_none(),
    }
}

/// As Rust shows a float (`4`, `60.5`), not `csv`'s own form (`4.0`).
fn optional_shortest<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.collect_str(value),
        None => serializer.serialize_none(),
    }
}

/// The waits of `waits` for each of `tiers`, a tier without any as no start and no waits.
fn tier_waits(tiers: &[String], waits: &[WaitJson]) -> Vec<TierWaits> {
    tiers
        .iter()
        .map(|tier| match waits.iter().find(|w| &w.tier == tier) {
            Some(w) => TierWaits {
                starts: w.starts,
                wait_p50_secs: Some(w.wait_p50_secs),
                wait_p95_secs: Some(w.wait_p95_secs),
            },
            None => TierWaits {
                starts: 0,
                wait_p50_secs: None,
                wait_p95_secs: None,
            },
        })
        .collect()
}

/// `yctl report --csv`: a header, one row per group, then the whole cluster (`by` =
/// `cluster`). Waits are columns per tier (`wait_p50_secs_<tier>`, `..._p95_...`).
pub fn report_csv(r: &ReportReply) -> Result<String, CsvError> {
    let j = report_json(r);
    let tiers: Vec<String> = j
        .cluster
        .start_latency
        .iter()
        .map(|w| w.tier.clone())
        .collect();
    let mut rows: Vec<UsageRow> = j
        .groups
        .iter()
        .map(|g| UsageRow {
            figures: UsageFigures {
                by: &j.by,
                name: &g.name,
                gpu_hours: g.gpu_hours,
                gpu_seconds: g.gpu_seconds,
                capacity_share: g.capacity_share,
                cpu_hours: Some(g.cpu_hours),
                jobs: g.jobs,
                runs: g.runs,
                running: g.running,
                restarts: g.restarts,
                preemptions_suffered: g.preemptions_suffered,
                preemptions_caused: g.preemptions_caused,
                checkpoints_saved: g.checkpoints_saved,
                checkpoint_rate: g.checkpoint_rate,
                lost_gpu_hours: g.lost_gpu_hours,
                share_of_used: g.share_of_used,
            },
            waits: tier_waits(&tiers, &g.waits),
        })
        .collect();
    let c = &j.cluster;
    let cluster = UsageRow {
        figures: UsageFigures {
            by: "cluster",
            name: "",
            gpu_hours: c.used_gpu_hours,
            gpu_seconds: c.used_gpu_seconds,
            capacity_share: c.utilization,
            cpu_hours: None,
            jobs: c.jobs,
            runs: c.runs,
            running: c.running,
            restarts: c.restarts,
            // A preemption is suffered by one job and caused by another, both in the cluster.
            preemptions_suffered: c.preemptions,
            preemptions_caused: c.preemptions,
            checkpoints_saved: c.checkpoints_saved,
            checkpoint_rate: c.checkpoint_rate,
            lost_gpu_hours: c.lost_gpu_hours,
            share_of_used: (c.used_gpu_seconds > 0.0).then_some(1.0),
        },
        waits: tier_waits(&tiers, &c.start_latency),
    };
    let mut header = header_of(&cluster.figures)?;
    for t in &tiers {
        header.extend([
            format!("starts_{t}"),
            format!("wait_p50_secs_{t}"),
            format!("wait_p95_secs_{t}"),
        ]);
    }
    rows.push(cluster);
    write_rows(&header, &rows)
}
