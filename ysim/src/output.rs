//! The comparison as text (a table per question), as JSON, and as one self-contained HTML
//! file with SVG charts, drawn by `ysched_report` as `yctl report --html` draws its own: no
//! script, no font file, no link.

use crate::metrics::{restarts_as_totals, Results, TeamResults, TierResults, SERIES_POINTS};
use crate::Report;
use anyhow::{anyhow, Result};
use std::collections::BTreeSet;
use std::fmt::Write;
use ysched_report::html::{self, push_figure, PAGE_END};
use ysched_report::percent;
use ysched_report::sections::{self, Section};
use ysched_report::table::Align;

/// `45s`, `12.5m`, `3.4h`, `2.1d`; `-` for nothing.
pub fn duration(secs: Option<f64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 120.0 => format!("{s:.0}s"),
        Some(s) if s < 7200.0 => format!("{:.1}m", s / 60.0),
        Some(s) if s < 172_800.0 => format!("{:.1}h", s / 3600.0),
        Some(s) => format!("{:.1}d", s / 86400.0),
    }
}

/// Alignments for a table whose first column names its rows and whose others are figures.
fn label_then_figures(rows: &[Vec<String>]) -> Vec<Align> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..columns)
        .map(|c| if c == 0 { Align::Left } else { Align::Right })
        .collect()
}

/// Every tier any policy reports, in the first policy's order, then the others'.
fn tier_names(r: &Report) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for p in &r.policies {
        for t in &p.tiers {
            if seen.insert(t.tier.clone()) {
                names.push(t.tier.clone());
            }
        }
    }
    names
}

fn team_names(r: &Report) -> Vec<String> {
    let set: BTreeSet<String> = r
        .policies
        .iter()
        .flat_map(|p| p.teams.iter().map(|t| t.account.clone()))
        .collect();
    set.into_iter().collect()
}

/// Restarts shown as totals (the window is shorter than a week) rather than per week.
fn restart_totals(r: &Report) -> bool {
    restarts_as_totals(r.workload.window_hours)
}

fn summary_rows(r: &Report) -> Vec<Vec<String>> {
    let totals = restart_totals(r);
    let mut rows = vec![[
        "policy",
        "GPU util",
        "preemptions",
        "ckpt saved",
        "GPU-h lost",
        if totals { "restarts" } else { "restarts/wk" },
        "completed",
        "other end",
        "never ran",
        "refused",
        "makespan",
    ]
    .map(String::from)
    .to_vec()];
    for p in &r.policies {
        rows.push(vec![
            p.policy.clone(),
            percent(Some(p.utilization)),
            p.preemptions.to_string(),
            percent(p.checkpoint_success),
            format!("{:.1}", p.lost_gpu_hours),
            if totals {
                p.restarts.to_string()
            } else {
                format!("{:.1}", p.restarts_per_week)
            },
            p.completed.to_string(),
            p.other_ends.values().sum::<u64>().to_string(),
            p.never_started.to_string(),
            p.refused.to_string(),
            duration(Some(p.makespan_hours * 3600.0)),
        ]);
    }
    rows
}

/// A table with a row per tier: `leading` columns, then one per policy, whose cell `cell`
/// makes from what that policy did for the tier (`None`: nothing of that tier).
fn per_tier_rows(
    r: &Report,
    head: &[&str],
    leading: impl Fn(&str) -> Vec<String>,
    cell: impl Fn(Option<&TierResults>) -> String,
) -> Vec<Vec<String>> {
    let mut first: Vec<String> = head.iter().map(|h| h.to_string()).collect();
    first.extend(r.policies.iter().map(|p| p.policy.clone()));
    let mut rows = vec![first];
    for tier in tier_names(r) {
        let mut row = leading(&tier);
        for p in &r.policies {
            row.push(cell(p.tiers.iter().find(|t| t.tier == tier)));
        }
        rows.push(row);
    }
    rows
}

fn latency_rows(r: &Report) -> Vec<Vec<String>> {
    let jobs_of = |tier: &str| {
        r.policies
            .iter()
            .find_map(|p| p.tiers.iter().find(|t| t.tier == tier))
            .map_or(0, |t| t.jobs)
    };
    per_tier_rows(
        r,
        &["tier", "jobs"],
        |tier| vec![tier.to_string(), jobs_of(tier).to_string()],
        |t| match t {
            Some(t) if t.started > 0 => format!(
                "{} / {} / {}",
                duration(t.latency_mean_s),
                duration(t.latency_p50_s),
                duration(t.latency_p95_s)
            ),
            _ => "-".into(),
        },
    )
}

/// `N restarts` over the window, or `N.N restarts/wk` for a window of a week or more.
fn restarts_text(totals: bool, restarts: u64, per_week: f64) -> String {
    if totals {
        format!("{restarts} restarts")
    } else {
        format!("{per_week:.1} restarts/wk")
    }
}

fn preemption_rows(r: &Report) -> Vec<Vec<String>> {
    let totals = restart_totals(r);
    per_tier_rows(
        r,
        &["victim tier"],
        |tier| vec![tier.to_string()],
        |t| match t {
            Some(t) if t.preempted > 0 => format!(
                "{} ({} saved, {:.1} GPU-h, {})",
                t.preempted,
                percent(t.checkpoint_success),
                t.lost_gpu_hours,
                restarts_text(totals, t.restarts, t.restarts_per_week)
            ),
            _ => "0".into(),
        },
    )
}

/// Every team (account) with a job, by name.
fn result_team_names(r: &Report) -> Vec<String> {
    let set: BTreeSet<String> = r
        .policies
        .iter()
        .flat_map(|p| p.team_results.iter().map(|t| t.account.clone()))
        .collect();
    set.into_iter().collect()
}

/// A row per team: its name and jobs, then per policy what `cell` makes of the team's
/// results (`None`: no job of that team).
fn per_team_rows(r: &Report, cell: impl Fn(Option<&TeamResults>) -> String) -> Vec<Vec<String>> {
    let mut head = vec!["team".to_string(), "jobs".to_string()];
    head.extend(r.policies.iter().map(|p| p.policy.clone()));
    let mut rows = vec![head];
    fn of<'p>(p: &'p Results, team: &str) -> Option<&'p TeamResults> {
        p.team_results.iter().find(|t| t.account == team)
    }
    for team in result_team_names(r) {
        let jobs = r
            .policies
            .iter()
            .find_map(|p| of(p, &team))
            .map_or(0, |t| t.jobs);
        let mut row = vec![team.clone(), jobs.to_string()];
        row.extend(r.policies.iter().map(|p| cell(of(p, &team))));
        rows.push(row);
    }
    rows
}

/// Each team's start latency: mean / p50 / p95.
fn team_latency_rows(r: &Report) -> Vec<Vec<String>> {
    per_team_rows(r, |t| match t {
        Some(t) if t.started > 0 => format!(
            "{} / {} / {}",
            duration(t.latency_mean_s),
            duration(t.latency_p50_s),
            duration(t.latency_p95_s)
        ),
        _ => "-".into(),
    })
}

/// Each team's runs preempted, checkpoints saved and restarts (totals over the window: a
/// team's weekly figure is the week's run of ysim).
fn team_preemption_rows(r: &Report) -> Vec<Vec<String>> {
    per_team_rows(r, |t| match t {
        Some(t) if t.preempted > 0 => format!(
            "{} ({} saved, {} restarts)",
            t.preempted, t.checkpoints_saved, t.restarts
        ),
        _ => "0".into(),
    })
}

fn team_rows(r: &Report) -> Vec<Vec<String>> {
    let mut head = vec!["team".to_string()];
    head.extend(r.policies.iter().map(|p| p.policy.clone()));
    let mut rows = vec![head];
    for team in team_names(r) {
        let mut row = vec![team.clone()];
        for p in &r.policies {
            let share = p.teams.iter().find(|t| t.account == team).map(|t| t.share);
            row.push(percent(share));
        }
        rows.push(row);
    }
    rows
}

/// The report's tables, in order, with their headings in text and on the page: one list for
/// both.
fn sections(r: &Report) -> Vec<Section> {
    let section = |text_heading, html_heading, rows: Vec<Vec<String>>| Section {
        text_heading,
        html_heading,
        align: label_then_figures(&rows),
        rows,
    };
    vec![
        section(None, "Policies", summary_rows(r)),
        section(
            Some("start latency (first start - submit) by tier: mean / p50 / p95"),
            "Start latency by tier (mean / p50 / p95)",
            latency_rows(r),
        ),
        section(
            Some(
                "preempted runs by tier (checkpoint saved within the grace, work lost, \
                 restarts)",
            ),
            "Preempted runs by tier",
            preemption_rows(r),
        ),
        section(
            Some("team share of the GPU-hours used in the window"),
            "Team share of the GPU-hours used",
            team_rows(r),
        ),
        section(
            Some("start latency (first start - submit) by team: mean / p50 / p95"),
            "Start latency by team (mean / p50 / p95)",
            team_latency_rows(r),
        ),
        section(
            Some("preempted runs by team (checkpoints saved, restarts in the window)"),
            "Preempted runs by team (checkpoints saved, restarts)",
            team_preemption_rows(r),
        ),
    ]
}

/// The report as text: the workload, then one table per question.
pub fn table(r: &Report) -> String {
    let w = &r.workload;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "ysim: {}: {} nodes, {} GPUs, {} jobs, window {} (seed {})",
        w.name,
        w.nodes,
        w.gpus,
        w.jobs,
        duration(Some(w.window_hours * 3600.0)),
        r.seed
    );
    for note in &w.notes {
        let _ = writeln!(s, "  - {note}");
    }
    s.push('\n');
    s.push_str(&sections::text(&sections(r)));
    let refusals = refusals(r);
    if !refusals.is_empty() {
        s.push_str("\nrefused at submit\n");
        for line in refusals {
            let _ = writeln!(s, "  {line}");
        }
    }
    s
}

/// `policy: N x reason`, for each policy and reason a job was refused for.
fn refusals(r: &Report) -> Vec<String> {
    r.policies
        .iter()
        .flat_map(|p| {
            p.refused_reasons
                .iter()
                .map(move |(why, n)| format!("{}: {n} x {why}", p.policy))
        })
        .collect()
}

/// The report as pretty JSON, with a final newline.
pub fn json(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(r).expect("a report serializes");
    s.push('\n');
    s
}

mod charts {
    //! The simulator's charts as data for `ysched_report::chart`: utilization over time and
    //! each tier's start-latency distribution, one line per policy.

    use super::{Report, Results, SERIES_POINTS};
    use ysched_report::chart::{
        line_chart, line_colour, DrawResult, Frame, Line, LineChart, XAxis,
    };

    fn frame(caption: String, caption_size: u32, y_desc: &str) -> Frame {
        Frame {
            caption,
            caption_size,
            y_desc: y_desc.into(),
            y_label_area: 50,
        }
    }

    /// GPU utilization over the window, one line per policy.
    pub fn utilization(r: &Report) -> DrawResult<String> {
        let days = r.workload.window_hours / 24.0;
        let (unit, span) = if days >= 2.0 {
            ("days", days)
        } else {
            ("hours", r.workload.window_hours)
        };
        let step = span / SERIES_POINTS as f64;
        let lines = r
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| Line {
                name: p.policy.clone(),
                colour: line_colour(i),
                points: p
                    .utilization_series
                    .iter()
                    .enumerate()
                    .map(|(k, u)| ((k as f64 + 0.5) * step, 100.0 * u))
                    .collect(),
            })
            .collect();
        line_chart(&LineChart {
            frame: frame("GPU utilization over time (%)".into(), 18, "% of capacity"),
            x: XAxis::Linear(span.max(1e-9)),
            x_desc: unit.into(),
            y_max: 110.0,
            lines,
        })
    }

    /// The start-latency distribution of one tier, one line per policy: the share of the
    /// tier's jobs started within each latency (log scale, from one second).
    pub fn latency(r: &Report, tier: &str) -> DrawResult<String> {
        let curves: Vec<(&Results, Vec<f64>)> = r
            .policies
            .iter()
            .filter_map(|p| {
                let t = p.tiers.iter().find(|t| t.tier == tier)?;
                (!t.latency_percentiles_s.is_empty()).then(|| (p, t.latency_percentiles_s.clone()))
            })
            .collect();
        let max_s = curves
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(1.0f64, f64::max);
        let (unit, per) = if max_s < 120.0 {
            ("seconds", 1.0)
        } else if max_s < 7200.0 {
            ("minutes", 60.0)
        } else {
            ("hours", 3600.0)
        };
        let lo = 1.0 / per;
        let hi = (max_s / per * 1.5).max(lo * 10.0);
        // Each policy keeps its colour, whether or not it started jobs of this tier.
        let lines = r
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let (_, pct) = curves.iter().find(|(c, _)| c.policy == p.policy)?;
                Some(Line {
                    name: p.policy.clone(),
                    colour: line_colour(i),
                    points: pct
                        .iter()
                        .enumerate()
                        .map(|(k, s)| ((s / per).max(lo), k as f64 * 5.0))
                        .collect(),
                })
            })
            .collect();
        line_chart(&LineChart {
            frame: frame(
                format!(
                    "Start latency, tier {tier}: share of jobs started within ({unit}, log scale)"
                ),
                16,
                "% of jobs",
            ),
            x: XAxis::Log(lo, hi),
            x_desc: format!("latency ({unit})"),
            y_max: 100.0,
            lines,
        })
    }
}

/// The report as one HTML file: the tables of [`table`] and the charts (utilization over
/// time, the latency distribution of each tier).
pub fn html(r: &Report) -> Result<String> {
    let chart = |name: &str, svg: Result<String, Box<dyn std::error::Error>>| {
        svg.map_err(|e| anyhow!("cannot draw the {name} chart: {e}"))
    };
    let e = html::escape;
    let w = &r.workload;
    let mut h = html::page_start(&format!("ysim: {}", w.name));
    let _ = write!(
        h,
        "<h1>ysim: {}</h1>\n<p>{} nodes, {} GPUs, {} jobs, window {}, seed {}.</p>\n<ul>\n",
        e(&w.name),
        w.nodes,
        w.gpus,
        w.jobs,
        e(&duration(Some(w.window_hours * 3600.0))),
        r.seed
    );
    for note in &w.notes {
        let _ = writeln!(h, "<li>{}</li>", e(note));
    }
    h.push_str("</ul>\n");
    h.push_str(&sections::html(&sections(r)));
    let refusals = refusals(r);
    if !refusals.is_empty() {
        h.push_str("<h2>Refused at submit</h2>\n<ul>\n");
        for line in refusals {
            let _ = writeln!(h, "<li>{}</li>", e(&line));
        }
        h.push_str("</ul>\n");
    }
    let util = chart("utilization", charts::utilization(r))?;
    push_figure(&mut h, &util);
    for tier in tier_names(r) {
        let svg = chart("latency", charts::latency(r, &tier))?;
        push_figure(&mut h, &svg);
    }
    h.push_str(PAGE_END);
    Ok(h)
}
