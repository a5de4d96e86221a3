//! The three charts of `yctl report --html` as data for `ysched_report::chart`: daily
//! utilization, GPU-hours per group stacked per day, and the wait to start by tier (p50 and
//! p95, named in a legend, on a log scale: waits of seconds beside waits of hours).

use super::json::{day_label, hours};
use ysched_proto::ReportReply;
use ysched_report::chart::{
    bar_chart, bar_colour, Bar, BarChart, BarSeries, DrawResult, Frame, YScale, PALETTE,
};

fn frame(caption: String, y_desc: &str, y_label_area: u32) -> Frame {
    Frame {
        caption,
        caption_size: 18,
        y_desc: y_desc.into(),
        y_label_area,
    }
}

fn day_labels(r: &ReportReply) -> Vec<String> {
    r.days.iter().map(|d| day_label(d.start_ms)).collect()
}

/// Daily GPU utilization, in percent, one bar per day.
pub fn utilization(r: &ReportReply) -> DrawResult<String> {
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
    let bars = values
        .iter()
        .enumerate()
        .map(|(i, v)| Bar {
            slot: i as u32,
            low: 0.0,
            high: *v,
            colour: PALETTE[0],
            margin: 6,
        })
        .collect();
    bar_chart(&BarChart {
        frame: frame("Daily GPU utilization (%)".into(), "% of capacity", 50),
        labels: day_labels(r),
        top,
        y: YScale::Linear,
        series: vec![BarSeries { bars, legend: None }],
    })
}

/// GPU-hours per group, stacked per day.
pub fn gpu_hours_by_day(r: &ReportReply) -> DrawResult<String> {
    let top = r
        .days
        .iter()
        .map(|d| hours(d.groups.iter().map(|g| g.gpu_ms).sum()))
        .fold(0.0, f64::max)
        .max(1e-3)
        // Room for the legend above the bars.
        * 1.35;
    // Each group's bars sit on the ones of the groups before it.
    let mut base = vec![0.0f64; r.days.len()];
    let series = r
        .groups
        .iter()
        .enumerate()
        .map(|(gi, group)| {
            let colour = bar_colour(gi);
            let mut bars = Vec::new();
            for (di, day) in r.days.iter().enumerate() {
                let h = day
                    .groups
                    .iter()
                    .find(|g| g.name == group.name)
                    .map_or(0.0, |g| hours(g.gpu_ms));
                if h > 0.0 {
                    bars.push(Bar {
                        slot: di as u32,
                        low: base[di],
                        high: base[di] + h,
                        colour,
                        margin: 6,
                    });
                    base[di] += h;
                }
            }
            BarSeries {
                bars,
                legend: Some((group.name.clone(), colour)),
            }
        })
        .collect();
    bar_chart(&BarChart {
        frame: frame(format!("GPU-hours per {} and day", r.by), "GPU-hours", 60),
        labels: day_labels(r),
        top,
        y: YScale::Linear,
        series,
    })
}

/// The bottom of a log axis for `values` (any order): a decade below the smallest one above
/// 0, so that it shows as a bar; 1 when none is.
fn log_bottom(values: &[f64]) -> f64 {
    let least = values
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min);
    if least == f64::MAX {
        1.0
    } else {
        10f64.powf(least.log10().floor() - 1.0)
    }
}

/// Start latency per tier: p50 and p95 side by side in two colours named in the legend, on a
/// log scale (a wait of 0 draws no bar).
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
        values.push(w.wait_p50_ms.max(0) as f64 / per);
        labels.push(format!("{} p95", w.tier));
        values.push(w.wait_p95_ms.max(0) as f64 / per);
    }
    let bottom = log_bottom(&values);
    // Two decades above the highest bar: room for the legend.
    let top = values.iter().copied().fold(bottom, f64::max) * 100.0;
    let colours = [PALETTE[4], PALETTE[5]];
    let series = ["p50", "p95"]
        .into_iter()
        .zip(colours)
        .enumerate()
        .map(|(k, (name, colour))| BarSeries {
            bars: values
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == k)
                .map(|(i, v)| Bar {
                    slot: i as u32,
                    low: 0.0,
                    high: *v,
                    colour,
                    margin: 8,
                })
                .collect(),
            legend: Some((name.to_string(), colour)),
        })
        .collect();
    bar_chart(&BarChart {
        frame: frame(
            format!("Wait to start by tier ({unit}, log scale)"),
            &format!("{unit} (log scale)"),
            60,
        ),
        labels,
        top,
        y: YScale::Log(bottom),
        series,
    })
}
