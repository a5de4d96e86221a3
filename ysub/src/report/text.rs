//! The default text report: the cluster's lines, then the table of the groups ([`super::groups`]).

use super::groups::{self, Medium};
use super::json::report_json;
use std::fmt::Write as _;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, Millis};
use ysched_proto::{ReportReply, TierWait};
use ysched_report::percent;
use ysched_report::table::render_rows;

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
    // Names are other users' text: shown escaped, as every cell (the rest is already safe).
    let rows: Vec<Vec<String>> = groups::rows(r, &j, Medium::Text)
        .into_iter()
        .map(|row| {
            row.iter()
                .map(|cell| escape_for_terminal(cell).into_owned())
                .collect()
        })
        .collect();
    if r.groups.is_empty() {
        out.push_str("(no usage in this window)\n");
    } else {
        out.push_str(&render_rows(&rows, &groups::align()));
    }
    out
}
