//! Bar and line charts as SVG text for inline HTML, drawn with `plotters`' SVG backend: text is
//! SVG `<text>` in the browser's sans-serif (no font file is read or linked), colours from one
//! colour-blind-safe palette, and no namespace URL in the output.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::ranged1d::{AsRangedCoord, IntoSegmentedCoord, Ranged, SegmentValue};
use plotters::prelude::*;

/// A chart's size in pixels.
const W: u32 = 900;
const H: u32 = 340;

/// Colour-blind-safe (Okabe–Ito), then some more.
pub const PALETTE: [RGBColor; 12] = [
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

/// The palette's yellow: fine as a bar, too pale as a thin line on white.
const PALE: usize = 6;

/// The colour of the `i`-th bar series (the palette, round and round).
pub fn bar_colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The colour of the `i`-th line: the palette without its pale yellow, round and round.
pub fn line_colour(i: usize) -> RGBColor {
    let k = i % (PALETTE.len() - 1);
    PALETTE[if k >= PALE { k + 1 } else { k }]
}

/// Why a chart could not be drawn (plotters' error, as text).
pub type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// What every chart has: a caption above, the y axis's description and the room for its
/// labels.
#[derive(Debug, Clone)]
pub struct Frame {
    pub caption: String,
    /// The caption's font size in pixels.
    pub caption_size: u32,
    pub y_desc: String,
    /// Pixels left of the plot for the y axis's labels and description.
    pub y_label_area: u32,
}

/// One bar, spanning its slot on the x axis from `low` to `high`.
#[derive(Debug, Clone)]
pub struct Bar {
    pub slot: u32,
    pub low: f64,
    pub high: f64,
    pub colour: RGBColor,
    /// Pixels left free on each side of the bar within its slot.
    pub margin: u32,
}

/// Bars drawn together, named in the legend when `legend` is set.
#[derive(Debug, Clone)]
pub struct BarSeries {
    pub bars: Vec<Bar>,
    pub legend: Option<(String, RGBColor)>,
}

/// How a bar chart's y axis runs up to its top.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum YScale {
    /// From 0.
    Linear,
    /// From this bottom (> 0), log scale: for values of several orders of magnitude (waits
    /// of seconds beside waits of hours). A bar's ends are kept inside the axis, so a bar
    /// at or below the bottom is not seen.
    Log(f64),
}

/// Bars over labelled slots (days, tiers), up to `top` on a `y` scale; a legend in the upper
/// right when a series is named.
#[derive(Debug, Clone)]
pub struct BarChart {
    pub frame: Frame,
    /// One per slot, left to right.
    pub labels: Vec<String>,
    pub top: f64,
    pub y: YScale,
    pub series: Vec<BarSeries>,
}

/// One line of a [`LineChart`], named in the legend.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub colour: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// The x axis of a [`LineChart`].
#[derive(Debug, Clone, Copy)]
pub enum XAxis {
    /// From 0 to this.
    Linear(f64),
    /// From the first to the second, log scale.
    Log(f64, f64),
}

/// Lines over a numeric x axis, from 0 to `y_max`; the legend in the lower right.
#[derive(Debug, Clone)]
pub struct LineChart {
    pub frame: Frame,
    pub x: XAxis,
    pub x_desc: String,
    pub y_max: f64,
    pub lines: Vec<Line>,
}

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

/// A legend entry's mark: a small square in the series' colour.
fn legend_mark(colour: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
}

/// The bar chart as SVG text.
pub fn bar_chart(c: &BarChart) -> DrawResult<String> {
    match c.y {
        YScale::Linear => draw_bars(c, 0f64..c.top, 0.0),
        YScale::Log(bottom) => {
            // A log axis needs 0 < bottom < top.
            let bottom = if bottom > 0.0 { bottom } else { 1e-3 };
            let top = c.top.max(bottom * 10.0);
            draw_bars(c, (bottom..top).log_scale(), bottom)
        }
    }
}

fn draw_bars<Y>(c: &BarChart, y: Y, bottom: f64) -> DrawResult<String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let f = &c.frame;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE)?;
        // The segments are inclusive of the range's end: one per label.
        let last = c.labels.len().saturating_sub(1) as u32;
        let mut chart = ChartBuilder::on(&root)
            .caption(&f.caption, ("sans-serif", f.caption_size))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(f.y_label_area)
            .build_cartesian_2d((0u32..last).into_segmented(), y)?;
        let x_label = |v: &SegmentValue<u32>| label_at(&c.labels, v);
        // A log axis's marks are powers of ten: `1000`, `0.1`, not `1000.0`.
        let shortest = |v: &f64| format!("{v}");
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh()
            .light_line_style(WHITE)
            .label_style(("sans-serif", 13))
            .x_labels(c.labels.len().max(1))
            .x_label_formatter(&x_label)
            .y_desc(&f.y_desc);
        if matches!(c.y, YScale::Log(_)) {
            mesh.y_label_formatter(&shortest);
        }
        mesh.draw()?;
        for series in &c.series {
            let bars = series.bars.iter().map(|b| {
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(b.slot), b.low.max(bottom)),
                        (SegmentValue::Exact(b.slot + 1), b.high.max(bottom)),
                    ],
                    b.colour.filled(),
                );
                bar.set_margin(0, 0, b.margin, b.margin);
                bar
            });
            let drawn = chart.draw_series(bars)?;
            if let Some((name, colour)) = &series.legend {
                drawn.label(name.clone()).legend(legend_mark(*colour));
            }
        }
        if c.series.iter().any(|s| s.legend.is_some()) {
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

/// The line chart as SVG text.
pub fn line_chart(c: &LineChart) -> DrawResult<String> {
    match c.x {
        XAxis::Linear(max) => draw_lines(c, 0f64..max),
        XAxis::Log(lo, hi) => draw_lines(c, (lo..hi).log_scale()),
    }
}

fn draw_lines<X>(c: &LineChart, x: X) -> DrawResult<String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let f = &c.frame;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&f.caption, ("sans-serif", f.caption_size))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(f.y_label_area)
            .build_cartesian_2d(x, 0f64..c.y_max)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .label_style(("sans-serif", 13))
            .x_desc(&c.x_desc)
            .y_desc(&f.y_desc)
            .draw()?;
        for line in &c.lines {
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    line.colour.stroke_width(2),
                ))?
                .label(line.name.clone())
                .legend(legend_mark(line.colour));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 13))
            .draw()?;
        root.present()?;
    }
    Ok(finish(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(caption: &str) -> Frame {
        Frame {
            caption: caption.into(),
            caption_size: 18,
            y_desc: "GPU-hours".into(),
            y_label_area: 60,
        }
    }

    #[test]
    fn line_colours_skip_the_pale_yellow_and_bars_use_every_colour() {
        let lines: Vec<RGBColor> = (0..11).map(line_colour).collect();
        assert!(!lines.contains(&PALETTE[PALE]));
        assert_eq!(lines[6], PALETTE[7]);
        assert_eq!(line_colour(11), PALETTE[0]);
        assert_eq!(bar_colour(6), PALETTE[PALE]);
        assert_eq!(bar_colour(12), PALETTE[0]);
    }

    #[test]
    fn bars_draw_their_labels_and_legend_without_a_namespace_url() {
        let chart = BarChart {
            frame: frame("GPU-hours per account and day"),
            labels: vec!["2026-01-05".into(), "2026-01-06".into()],
            top: 10.0,
            y: YScale::Linear,
            series: vec![BarSeries {
                bars: vec![Bar {
                    slot: 1,
                    low: 0.0,
                    high: 4.0,
                    colour: bar_colour(0),
                    margin: 6,
                }],
                legend: Some(("vision".into(), bar_colour(0))),
            }],
        };
        let svg = bar_chart(&chart).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["GPU-hours per account and day", "2026-01-06", "vision"] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(!svg.contains("http"));
        // Empty: still a chart, with no legend.
        let empty = BarChart {
            labels: vec![],
            series: vec![],
            ..chart
        };
        assert!(!bar_chart(&empty).unwrap().contains("vision"));
    }

    #[test]
    fn bars_draw_on_a_log_scale_with_their_legend() {
        let bar = |slot, high, colour| Bar {
            slot,
            low: 0.0,
            high,
            colour,
            margin: 6,
        };
        let chart = BarChart {
            frame: frame("Wait to start by tier"),
            labels: ["critical p50", "critical p95", "low p50", "low p95"]
                .map(String::from)
                .to_vec(),
            top: 100_000.0,
            y: YScale::Log(0.1),
            series: vec![
                BarSeries {
                    bars: vec![bar(0, 1.03, bar_colour(4)), bar(2, 3_000.0, bar_colour(4))],
                    legend: Some(("p50".into(), bar_colour(4))),
                },
                BarSeries {
                    bars: vec![bar(1, 0.0, bar_colour(5)), bar(3, 9_000.0, bar_colour(5))],
                    legend: Some(("p95".into(), bar_colour(5))),
                },
            ],
        };
        let svg = bar_chart(&chart).unwrap();
        // The legend's names and the axis's marks are lines of their own.
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        for text in ["p50", "p95", "critical p95", "low p50", "10", "10000"] {
            assert!(texts.contains(&text), "{text} missing: {texts:?}");
        }
        // A bar's height is its value's decades above the bottom: the 3,000 s bar (4.5
        // decades) is far more than twice the 1.03 s one (1 decade), and far less than
        // 3,000 times it, as it would be on a linear axis.
        let heights: Vec<f64> = svg
            .split("<rect ")
            .skip(1)
            // The p50 bars, not the legend's mark.
            .filter(|r| r.contains("fill=\"#56B4E9") && !r.contains("width=\"10\""))
            .filter_map(|r| {
                let h = r.split("height=\"").nth(1)?.split('"').next()?;
                h.parse().ok()
            })
            .collect();
        assert_eq!(heights.len(), 2, "{svg}");
        let ratio = heights[1] / heights[0];
        assert!((3.0..6.0).contains(&ratio), "{heights:?}");
        // A bottom that is no bottom still draws.
        let odd = BarChart {
            y: YScale::Log(0.0),
            ..chart
        };
        assert!(bar_chart(&odd).is_ok());
    }

    #[test]
    fn lines_draw_on_linear_and_log_axes() {
        for x in [XAxis::Linear(48.0), XAxis::Log(1.0, 1000.0)] {
            let chart = LineChart {
                frame: frame("Start latency"),
                x,
                x_desc: "latency (seconds)".into(),
                y_max: 100.0,
                lines: vec![Line {
                    name: "+backfill".into(),
                    colour: line_colour(0),
                    points: vec![(1.0, 0.0), (10.0, 50.0), (40.0, 100.0)],
                }],
            };
            let svg = line_chart(&chart).unwrap();
            assert!(
                svg.contains("<polyline") && svg.contains("+backfill"),
                "{x:?}"
            );
        }
    }
}
