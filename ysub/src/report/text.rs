//! The default text report: the cluster's lines, then a table of the groups.

use super::json::report_json;
use crate::output::{Column, Table};
use std::borrow::Cow;
use std::fmt::Write as _;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, Millis};
use ysched_proto::{ReportReply, TierWait};
use ysched_report::percent;

/// A wait as the table and the HTML page show it, never rounded up (as whole seconds rounded
/// up, a 1.03 s wait once read `0:02`): under a minute in seconds to the hundredth, cut
/// (`1.03s`, `0.40s`); from a minute on `M:SS`, `H:MM:SS` or `D-HH:MM:SS`, in whole seconds
/// cut. The exact value is in `--json` and `--csv` (seconds, to the millisecond).
pub(super) fn wait_text(ms: Millis) -> String {
    let ms = ms.max(0) as u64;
    if ms < 60_000 {
        format!("{}.{:02}s", ms / 1000, ms % 1000 / 10)
    } else {
        format_elapsed(ms / 1000)
    }
}

pub(super) fn waits_text(w: &[TierWait]) -> String {
    let parts: Vec<String> = w
        .iter()
        .map(|w| {
            format!(
                "{} {}/{} ({})",
                escape_for_terminal(&w.tier),
                wait_text(w.wait_p50_ms),
                wait_text(w.wait_p95_ms),
                w.starts
            )
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

const GROUP_COLUMNS: &[Column; 12] = &[
    Column::left("NAME"),
    Column::right("GPU-HOURS"),
    Column::right("SHARE"),
    Column::right("JOBS"),
    Column::right("RUNS"),
    Column::right("RUNNING"),
    Column::right("RESTARTS"),
    Column::right("PREEMPTED"),
    Column::right("CAUSED"),
    Column::right("CKPT-SAVED"),
    Column::right("LOST-GPU-H"),
    Column::left("WAIT P50/P95 (STARTS) BY TIER"),
];

/// The default text report: the cluster's lines, then one row per group.
pub fn format_report(r: &ReportReply) -> String {
    let j = report_json(r);
    let c = &j.cluster;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Usage from {} to {}, by {}{}",
        j.from,
        j.to,
        j.by,
        if j.all_accounts {
            ""
        } else {
            " (only the accounts you may charge)"
        }
    );
    let _ = writeln!(
        out,
        "Cluster: {} GPUs, capacity {:.1} GPU-hours, used {:.1} ({}); {} jobs, {} runs ended, \
         {} running",
        c.gpus,
        c.capacity_gpu_hours,
        c.used_gpu_hours,
        percent(c.utilization),
        c.jobs,
        c.runs,
        c.running
    );
    let _ = writeln!(
        out,
        "Preemptions: {}, checkpoint saved in {} ({}), {:.2} GPU-hours lost",
        c.preemptions,
        c.checkpoints_saved,
        percent(c.checkpoint_rate),
        c.lost_gpu_hours
    );
    let cluster = r.cluster.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "Start latency p50/p95 (starts): {}",
        waits_text(&cluster.start_latency)
    );
    let days: Vec<String> = j
        .days
        .iter()
        .map(|d| format!("{} {}", &d.date[5..], percent(d.utilization)))
        .collect();
    if !days.is_empty() {
        let _ = writeln!(out, "Daily GPU utilization: {}", days.join(", "));
    }
    out.push('\n');
    let mut table = Table::with_capacity(GROUP_COLUMNS, r.groups.len());
    for (g, gj) in r.groups.iter().zip(&j.groups) {
        table.push_row([
            escape_for_terminal(&g.name),
            Cow::Owned(format!("{:.1}", gj.gpu_hours)),
            Cow::Owned(percent(gj.share_of_used)),
            Cow::Owned(g.jobs.to_string()),
            Cow::Owned(g.runs.to_string()),
            Cow::Owned(g.running.to_string()),
            Cow::Owned(g.restarts.to_string()),
            Cow::Owned(g.preemptions_suffered.to_string()),
            Cow::Owned(g.preemptions_caused.to_string()),
            Cow::Owned(if g.preemptions_suffered == 0 {
                "-".into()
            } else {
                format!(
                    "{}/{} ({})",
                    g.checkpoints_saved,
                    g.preemptions_suffered,
                    percent(gj.checkpoint_rate)
                )
            }),
            Cow::Owned(format!("{:.2}", gj.lost_gpu_hours)),
            Cow::Owned(waits_text(&g.waits)),
        ]);
    }
    if r.groups.is_empty() {
        out.push_str("(no usage in this window)\n");
    } else {
        table.render(&mut out, true);
    }
    out
}
