//! What `yctl report` (in `ysub`) and `ysim` both render, written once: text tables, the HTML
//! page around a report, SVG charts, and the CSV trace one writes and the other reads.
//!
//! # Layout
//! - [`table`]: column-aligned text tables (every `yq`, `yctl` and `ysim` table).
//! - [`html`]: escaping, the page skeleton and style, HTML tables and figures.
//! - [`chart`]: bar and line charts as inline SVG, drawn with `plotters` (the only crate that
//!   depends on it), in one palette and one look.
//! - [`sections`]: a report's titled tables, rendered as text and as HTML from one list.
//! - [`csv_rows`]: reading the CSV files `ysim` takes (header row, `#` comments, RFC 4180).
//! - [`trace`]: the trace CSV's row type, its writer and its reader.
//!
//! Nothing here does I/O: every function takes data and returns text.

pub mod chart;
pub mod csv_rows;
pub mod html;
pub mod sections;
pub mod table;
pub mod trace;

/// `part` of `whole` (a utilization, a checkpoint rate); `None` without a whole.
pub fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// A ratio as a percentage with one decimal (`12.5%`); `-` for none.
pub fn percent(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".into(), |r| format!("{:.1}%", r * 100.0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentages() {
        assert_eq!(super::percent(Some(0.125)), "12.5%");
        assert_eq!(super::percent(Some(1.0)), "100.0%");
        assert_eq!(super::percent(None), "-");
        assert_eq!(super::ratio(1, 8), Some(0.125));
        assert_eq!(super::ratio(1, 0), None);
    }
}
