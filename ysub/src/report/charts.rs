//! The three charts of `yctl report --html` as data for `ysched_report::chart`: daily
//! utilization, GPU-hours per group stacked per day, and the wait to start by tier.

use super::json::{day_label, hours};
use ysched_proto::ReportReply;
use ysched_report::chart::{
    bar_chart, bar_colour, Bar, BarChart, BarSeries, DrawResult, Frame, PALETTE,
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
        series,
    })
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
    let bars = values
        .iter()
        .enumerate()
        .map(|(i, v)| Bar {
            slot: i as u32,
            low: 0.0,
            high: *v,
            // p50 and p95 in two colours.
            colour: PALETTE[if i % 2 == 0 { 4 } else { 5 }],
            margin: 8,
        })
        .collect();
    bar_chart(&BarChart {
        frame: frame(format!("Wait to start by tier ({unit})"), unit, 60),
        labels,
        top,
        series: vec![BarSeries { bars, legend: None }],
    })
}
