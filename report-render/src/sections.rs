//! A report as a list of titled tables, written once and rendered both as text (each table
//! under its heading line) and as HTML (each under an `<h2>`), so that a report's text and
//! its page show the same tables in the same order.

use crate::html;
use crate::table::{render_rows, Align};
use std::fmt::Write as _;

/// One table of a report: its header row first, then its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The line above the table in text; `None`: none (a table right under the report's
    /// head).
    pub text_heading: Option<&'static str>,
    /// The `<h2>` above the table on the page.
    pub html_heading: &'static str,
    pub rows: Vec<Vec<String>>,
    /// Each column's alignment: in HTML, [`Align::Right`] marks a number.
    pub align: Vec<Align>,
}

/// The sections as text: each table under a blank line and its heading (if it has one),
/// columns padded to their widest cell.
pub fn text(sections: &[Section]) -> String {
    let mut out = String::new();
    for section in sections {
        if let Some(heading) = section.text_heading {
            let _ = writeln!(out, "\n{heading}");
        }
        out.push_str(&render_rows(&section.rows, &section.align));
    }
    out
}

/// The sections as HTML: each table under an `<h2>` (escaped, as every cell is).
pub fn html(sections: &[Section]) -> String {
    let mut out = String::new();
    for section in sections {
        let _ = writeln!(out, "<h2>{}</h2>", html::escape(section.html_heading));
        out.push_str(&html::table(&section.rows, &section.align));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_html_show_the_same_tables_in_order() {
        let section = |text_heading, html_heading, cell: &str| Section {
            text_heading,
            html_heading,
            rows: vec![
                vec!["team".to_string(), "share".to_string()],
                vec![cell.to_string(), "1.0%".to_string()],
            ],
            align: vec![Align::Left, Align::Right],
        };
        let sections = [
            section(None, "Teams", "a"),
            section(Some("teams again"), "Teams & more", "b"),
        ];
        assert_eq!(
            text(&sections),
            "team  share\na      1.0%\n\nteams again\nteam  share\nb      1.0%\n"
        );
        let page = html(&sections);
        assert!(page.starts_with("<h2>Teams</h2>\n<table>\n"), "{page}");
        assert!(
            page.contains("<h2>Teams &amp; more</h2>\n<table>\n"),
            "{page}"
        );
        assert!(page.contains("<td>b</td>"), "{page}");
    }
}
