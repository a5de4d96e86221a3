//! `yctl report --html`: one self-contained HTML file with the report's tables and three SVG
//! charts.

use super::json::{day_label, hours, report_json};
use super::text::{percent, waits_text};
use anyhow::{anyhow, Result};
use std::fmt::Write as _;
use ysched_proto::ReportReply;

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

mod charts {
    //! The report's charts as SVG text, drawn with `plotters`' SVG backend. Text is SVG
    //! `<text>` in the browser's sans-serif: no font file is read or linked.

    use super::{day_label, hours, ReportReply};
    use plotters::coord::ranged1d::{IntoSegmentedCoord, SegmentValue};
    use plotters::prelude::*;

    const W: u32 = 900;
    const H: u32 = 340;
    /// Colour-blind-safe (Okabe–Ito), then some more.
    const COLOURS: [RGBColor; 12] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(213, 94, 0),
        RGBColor(240, 228, 66),
        RGBColor(0, 0, 0),
        RGBColor(136, 34, 85),
        RGBColor(68, 170, 153),
        RGBColor(153, 153, 51),
        RGBColor(170, 68, 153),
    ];

    type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

    fn finish(svg: String) -> String {
        // Inline in HTML5 an SVG needs no namespace: leave no URL in the file.
        svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
    }

    fn label_at(labels: &[String], v: &SegmentValue<u32>) -> String {
        match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        }
    }

    /// Daily GPU utilization, in percent, one bar per day.
    pub fn utilization(r: &ReportReply) -> DrawResult<String> {
        let labels: Vec<String> = r.days.iter().map(|d| day_label(d.start_ms)).collect();
        let values: Vec<f64> = r
            .days
            .iter()
            .map(|d| {
                if d.capacity_gpu_ms == 0 {
                    0.0
                } else {
                    100.0 * d.used_gpu_ms as f64 / d.capacity_gpu_ms as f64
                }
            })
            .collect();
        let top = values.iter().copied().fold(100.0, f64::max);
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
            root.fill(&WHITE)?;
            // The segments are inclusive of the range's end: one per label.
            let last = labels.len().saturating_sub(1) as u32;
            let mut chart = ChartBuilder::on(&root)
                .caption("Daily GPU utilization (%)", ("sans-serif", 18))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .x_labels(labels.len().max(1))
                .x_label_formatter(&|v| label_at(&labels, v))
                .y_desc("% of capacity")
                .draw()?;
            chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let i = i as u32;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *v),
                    ],
                    COLOURS[0].filled(),
                );
                bar.set_margin(0, 0, 6, 6);
                bar
            }))?;
            root.present()?;
        }
        Ok(finish(svg))
    }

    /// GPU-hours per group, stacked per day.
    pub fn gpu_hours_by_day(r: &ReportReply) -> DrawResult<String> {
        let labels: Vec<String> = r.days.iter().map(|d| day_label(d.start_ms)).collect();
        let names: Vec<&str> = r.groups.iter().map(|g| g.name.as_str()).collect();
        let top = r
            .days
            .iter()
            .map(|d| hours(d.groups.iter().map(|g| g.gpu_ms).sum()))
            .fold(0.0, f64::max)
            .max(1e-3)
            // Room for the legend above the bars.
            * 1.35;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
            root.fill(&WHITE)?;
            // The segments are inclusive of the range's end: one per label.
            let last = labels.len().saturating_sub(1) as u32;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("GPU-hours per {} and day", r.by),
                    ("sans-serif", 18),
                )
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .x_labels(labels.len().max(1))
                .x_label_formatter(&|v| label_at(&labels, v))
                .y_desc("GPU-hours")
                .draw()?;
            // Each group's bars sit on the ones of the groups before it.
            let mut base = vec![0.0f64; r.days.len()];
            for (gi, name) in names.iter().enumerate() {
                let colour = COLOURS[gi % COLOURS.len()];
                let mut bars = Vec::new();
                for (di, day) in r.days.iter().enumerate() {
                    let h = day
                        .groups
                        .iter()
                        .find(|g| g.name == *name)
                        .map_or(0.0, |g| hours(g.gpu_ms));
                    if h > 0.0 {
                        let i = di as u32;
                        let mut bar = Rectangle::new(
                            [
                                (SegmentValue::Exact(i), base[di]),
                                (SegmentValue::Exact(i + 1), base[di] + h),
                            ],
                            colour.filled(),
                        );
                        bar.set_margin(0, 0, 6, 6);
                        bars.push(bar);
                        base[di] += h;
                    }
                }
                chart
                    .draw_series(bars)?
                    .label(name.to_string())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                    });
            }
            if !names.is_empty() {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK.mix(0.3))
                    .draw()?;
            }
            root.present()?;
        }
        Ok(finish(svg))
    }

    /// Start latency per tier: p50 and p95 side by side.
    pub fn wait_by_tier(r: &ReportReply) -> DrawResult<String> {
        let waits = r
            .cluster
            .as_ref()
            .map(|c| c.start_latency.clone())
            .unwrap_or_default();
        let max_ms = waits.iter().map(|w| w.wait_p95_ms).max().unwrap_or(0);
        let (unit, per) = if max_ms < 120_000 {
            ("seconds", 1_000.0)
        } else if max_ms < 7_200_000 {
            ("minutes", 60_000.0)
        } else {
            ("hours", 3_600_000.0)
        };
        let mut labels = Vec::new();
        let mut values = Vec::new();
        for w in &waits {
            labels.push(format!("{} p50", w.tier));
            values.push(w.wait_p50_ms as f64 / per);
            labels.push(format!("{} p95", w.tier));
            values.push(w.wait_p95_ms as f64 / per);
        }
        let top = values.iter().copied().fold(0.0, f64::max).max(1.0) * 1.1;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
            root.fill(&WHITE)?;
            // The segments are inclusive of the range's end: one per label.
            let last = labels.len().saturating_sub(1) as u32;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("Wait to start by tier ({unit})"),
                    ("sans-serif", 18),
                )
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .x_labels(labels.len().max(1))
                .x_label_formatter(&|v| label_at(&labels, v))
                .y_desc(unit)
                .draw()?;
            chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let colour = COLOURS[if i % 2 == 0 { 4 } else { 5 }];
                let i = i as u32;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *v),
                    ],
                    colour.filled(),
                );
                bar.set_margin(0, 0, 8, 8);
                bar
            }))?;
            root.present()?;
        }
        Ok(finish(svg))
    }
}

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
    let e = html_escape;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>ysched usage {} to {}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 2em; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 4px 8px; }}\n\
         td.n {{ text-align: right; }}\n th {{ background: #f0f0f0; }}\n\
         figure {{ margin: 1.5em 0; }}\n</style>\n</head>\n<body>\n\
         <h1>Cluster usage</h1>\n<p>From {} to {}, by {}. Generated {}.{}</p>\n",
        e(&j.from),
        e(&j.to),
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
    let _ = write!(
        h,
        "<h2>By {}</h2>\n<table>\n<tr><th>{}</th><th>GPU-hours</th><th>Share of capacity</th>\
         <th>Jobs</th><th>Runs</th><th>Running</th><th>Restarts</th><th>Preempted</th>\
         <th>Caused</th><th>Checkpoint saved</th><th>GPU-hours lost</th>\
         <th>Wait p50/p95 (starts) by tier</th></tr>\n",
        e(&j.by),
        e(&j.by)
    );
    for (g, gj) in r.groups.iter().zip(&j.groups) {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{:.2}</td><td>{}</td></tr>",
            e(&g.name),
            gj.gpu_hours,
            percent(gj.capacity_share),
            g.jobs,
            g.runs,
            g.running,
            g.restarts,
            g.preemptions_suffered,
            g.preemptions_caused,
            if g.preemptions_suffered == 0 {
                "-".to_string()
            } else {
                format!(
                    "{}/{} ({})",
                    g.checkpoints_saved,
                    g.preemptions_suffered,
                    percent(gj.checkpoint_rate)
                )
            },
            gj.lost_gpu_hours,
            e(&waits_text(&g.waits))
        );
    }
    h.push_str("</table>\n");
    for svg in [utilization, by_day, waits] {
        let _ = write!(h, "<figure>\n{svg}\n</figure>\n");
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}
