//! `yctl report --html`: one self-contained HTML file with the report's tables and three SVG
//! charts.

use super::charts;
use super::groups::{self, Medium};
use super::json::report_json;
use super::text::waits_text;
use anyhow::{anyhow, Result};
use std::fmt::Write as _;
use ysched_proto::ReportReply;
use ysched_report::html::{self, push_figure, PAGE_END};
use ysched_report::percent;

/// `yctl report --html`: one file, readable offline in any browser: the cluster's lines and
/// the groups as tables, and three SVG charts inline (daily utilization, GPU-hours per group
/// stacked per day, wait by tier). No script, no font file, no link.
pub fn report_html(r: &ReportReply) -> Result<String> {
    let j = report_json(r);
    let c = &j.cluster;
    let chart = |name: &str, svg: Result<String, Box<dyn std::error::Error>>| {
        svg.map_err(|e| anyhow!("cannot draw the {name} chart: {e}"))
    };
    let utilization = chart("utilization", charts::utilization(r))?;
    let by_day = chart("GPU-hours", charts::gpu_hours_by_day(r))?;
    let waits = chart("wait", charts::wait_by_tier(r))?;
    let e = html::escape;
    let mut h = html::page_start(&format!("ysched usage {} to {}", j.from, j.to));
    let _ = write!(
        h,
        "<h1>Cluster usage</h1>\n<p>From {} to {}, by {}. Generated {}.{}</p>\n",
        e(&j.from),
        e(&j.to),
        e(&j.by),
        e(&j.generated),
        if j.all_accounts {
            ""
        } else {
            " Only the accounts you may charge are shown."
        }
    );
    let cluster = r.cluster.clone().unwrap_or_default();
    let _ = write!(
        h,
        "<table>\n<tr><th>GPUs</th><td class=\"n\">{}</td></tr>\n\
         <tr><th>Capacity (GPU-hours)</th><td class=\"n\">{:.1}</td></tr>\n\
         <tr><th>Used (GPU-hours)</th><td class=\"n\">{:.1} ({})</td></tr>\n\
         <tr><th>Jobs / runs ended / running</th><td class=\"n\">{} / {} / {}</td></tr>\n\
         <tr><th>Preemptions (checkpoint saved)</th><td class=\"n\">{} ({}, {})</td></tr>\n\
         <tr><th>GPU-hours lost to preemption</th><td class=\"n\">{:.2}</td></tr>\n\
         <tr><th>Start latency p50/p95 (starts)</th><td>{}</td></tr>\n</table>\n",
        c.gpus,
        c.capacity_gpu_hours,
        c.used_gpu_hours,
        percent(c.utilization),
        c.jobs,
        c.runs,
        c.running,
        c.preemptions,
        c.checkpoints_saved,
        percent(c.checkpoint_rate),
        c.lost_gpu_hours,
        e(&waits_text(&cluster.start_latency))
    );
    let _ = writeln!(h, "<h2>By {}</h2>", e(&j.by));
    let rows = groups::rows(r, &j, Medium::Html);
    h.push_str(&html::table(&rows, &groups::align()));
    for svg in [utilization, by_day, waits] {
        push_figure(&mut h, &svg);
    }
    h.push_str(PAGE_END);
    Ok(h)
}
