//! The groups' table of `yctl report`, written once for the text report and the HTML page:
//! each column's titles, alignment and cell.

use super::json::{GroupJson, ReportJson};
use super::text::waits_text;
use ysched_proto::{ReportGroup, ReportReply};
use ysched_report::percent;
use ysched_report::table::Align;

/// Where the table goes: its cells differ only in GPU-hours' decimals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Medium {
    Text,
    Html,
}

/// One column: its title in text and on the page (`None`: the grouping, `account`, `user` or
/// `tier`), its alignment (on the page, a right-aligned column holds numbers), and its cell
/// from a group's wire record (the waits in milliseconds) and its JSON figures.
struct GroupColumn {
    text: &'static str,
    html: Option<&'static str>,
    align: Align,
    cell: fn(&ReportGroup, &GroupJson, Medium) -> String,
}

const fn column(
    text: &'static str,
    html: &'static str,
    cell: fn(&ReportGroup, &GroupJson, Medium) -> String,
) -> GroupColumn {
    GroupColumn {
        text,
        html: Some(html),
        align: Align::Right,
        cell,
    }
}

const COLUMNS: [GroupColumn; 12] = [
    GroupColumn {
        text: "NAME",
        html: None,
        align: Align::Left,
        cell: |g, _, _| g.name.clone(),
    },
    column("GPU-HOURS", "GPU-hours", |_, j, medium| match medium {
        Medium::Text => format!("{:.1}", j.gpu_hours),
        Medium::Html => format!("{:.2}", j.gpu_hours),
    }),
    column("SHARE", "Share of GPU-hours used", |_, j, _| {
        percent(j.share_of_used)
    }),
    column("JOBS", "Jobs", |g, _, _| g.jobs.to_string()),
    column("RUNS", "Runs", |g, _, _| g.runs.to_string()),
    column("RUNNING", "Running", |g, _, _| g.running.to_string()),
    column("RESTARTS", "Restarts", |g, _, _| g.restarts.to_string()),
    column("PREEMPTED", "Preempted", |g, _, _| {
        g.preemptions_suffered.to_string()
    }),
    column("CAUSED", "Caused", |g, _, _| {
        g.preemptions_caused.to_string()
    }),
    column("CKPT-SAVED", "Checkpoint saved", |g, j, _| {
        if g.preemptions_suffered == 0 {
            "-".into()
        } else {
            format!(
                "{}/{} ({})",
                g.checkpoints_saved,
                g.preemptions_suffered,
                percent(j.checkpoint_rate)
            )
        }
    }),
    column("LOST-GPU-H", "GPU-hours lost", |_, j, _| {
        format!("{:.2}", j.lost_gpu_hours)
    }),
    GroupColumn {
        text: "WAIT P50/P95 (STARTS) BY TIER",
        html: Some("Wait p50/p95 (starts) by tier"),
        align: Align::Left,
        cell: |g, _, _| waits_text(&g.waits),
    },
];

/// The table as rows: the titles, then one row per group, most GPU time first.
pub(super) fn rows(r: &ReportReply, j: &ReportJson, medium: Medium) -> Vec<Vec<String>> {
    let titles = COLUMNS
        .iter()
        .map(|c| match medium {
            Medium::Text => c.text.to_string(),
            Medium::Html => c.html.unwrap_or(&j.by).to_string(),
        })
        .collect();
    let mut rows = Vec::with_capacity(r.groups.len() + 1);
    rows.push(titles);
    for (g, gj) in r.groups.iter().zip(&j.groups) {
        rows.push(COLUMNS.iter().map(|c| (c.cell)(g, gj, medium)).collect());
    }
    rows
}

/// Each column's alignment.
pub(super) fn align() -> Vec<Align> {
    COLUMNS.iter().map(|c| c.align).collect()
}
