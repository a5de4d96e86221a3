//! What `yctl report` (in `ysub`) and `ysim` both render, written once: text tables, the HTML
//! page around a report, and SVG charts.
//!
//! # Layout
//! - [`table`]: column-aligned text tables (every `yq`, `yctl` and `ysim` table).
//! - [`html`]: escaping, the page skeleton and style, HTML tables and figures.
//! - [`chart`]: bar and line charts as inline SVG, drawn with `plotters` (the only crate that
//!   depends on it), in one palette and one look.
//!
//! Nothing here does I/O: every function takes data and returns text.

pub mod chart;
pub mod html;
pub mod table;

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
    }
}
