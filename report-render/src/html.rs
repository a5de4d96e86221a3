//! The HTML of the reports: one self-contained page (no script, no font file, no link) with
//! one style sheet, escaped text, tables and SVG figures.

use crate::table::Align;
use std::fmt::Write as _;

/// `s` with the characters HTML gives a meaning to (`<`, `>`, `&`, `"`, `'`) escaped, so it
/// is safe as text and inside quoted attributes.
pub fn escape(s: &str) -> String {
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

/// The page up to and including `<body>`, titled `title` (escaped here): the browser's
/// sans-serif, bordered tables whose `td.n` cells (numbers) are right-aligned.
pub fn page_start(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 2em; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 4px 8px; }}\n\
         td.n {{ text-align: right; }}\n th {{ background: #f0f0f0; }}\n\
         figure {{ margin: 1.5em 0; }}\n</style>\n</head>\n<body>\n",
        escape(title)
    )
}

/// What closes the page [`page_start`] opened.
pub const PAGE_END: &str = "</body>\n</html>\n";

/// Appends `svg` (a chart of [`crate::chart`]) as a figure.
pub fn push_figure(page: &mut String, svg: &str) {
    let _ = write!(page, "<figure>\n{svg}\n</figure>\n");
}

/// `rows` as a table: the first row is the header (`<th>`), the others data, whose column `c`
/// is text (`<td>`) where `align[c]` is [`Align::Left`] and a number (`<td class="n">`,
/// right-aligned) where it is [`Align::Right`]. Every cell is escaped.
pub fn table(rows: &[Vec<String>], align: &[Align]) -> String {
    let mut h = String::from("<table>\n");
    for (i, row) in rows.iter().enumerate() {
        h.push_str("<tr>");
        for (c, cell) in row.iter().enumerate() {
            let open = match (i, align.get(c)) {
                (0, _) => "<th>",
                (_, Some(Align::Right)) => "<td class=\"n\">",
                _ => "<td>",
            };
            let close = if i == 0 { "</th>" } else { "</td>" };
            let _ = write!(h, "{open}{}{close}", escape(cell));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_everywhere() {
        assert_eq!(
            escape("<a href=\"x\">R&D's</a>"),
            "&lt;a href=&quot;x&quot;&gt;R&amp;D&#39;s&lt;/a&gt;"
        );
        let page = page_start("usage <b>");
        assert!(page.starts_with("<!DOCTYPE html>\n"));
        assert!(page.contains("<title>usage &lt;b&gt;</title>"));
        assert!(page.ends_with("<body>\n"));
    }

    #[test]
    fn tables_have_a_header_then_text_and_number_cells() {
        let rows = vec![
            vec!["team".to_string(), "share".to_string()],
            vec!["a&b".to_string(), "12.5%".to_string()],
        ];
        assert_eq!(
            table(&rows, &[Align::Left, Align::Right]),
            "<table>\n<tr><th>team</th><th>share</th></tr>\n\
             <tr><td>a&amp;b</td><td class=\"n\">12.5%</td></tr>\n</table>\n"
        );
    }
}
