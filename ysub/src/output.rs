//! Text output shared by the tools: column-aligned tables (`ysched_report::table`), cells, and
//! writing to stdout.

use anyhow::Result;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
pub use ysched_report::table::{display_width, render_table, Align, Column, Row, Table};

/// Number of digits of `n` in decimal.
pub fn decimal_width(mut n: u64) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

/// Appends `n` in decimal without an intermediate string.
pub fn push_decimal(out: &mut String, n: u64) {
    let _ = write!(out, "{n}");
}

/// Formats a number into a table cell.
pub fn cell_num(n: impl std::fmt::Display) -> Cow<'static, str> {
    let mut s = String::new();
    let _ = write!(s, "{n}");
    Cow::Owned(s)
}

/// Writes `text` to stdout in one go. A closed pipe (`yq | head`) is not an error.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes `value` as JSON and a newline to stdout: indented on a terminal, compact otherwise
/// (scripts parse it either way, and ten thousand jobs print twice as fast compact).
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut text = if std::io::stdout().is_terminal() {
        serde_json::to_string_pretty(value)?
    } else {
        serde_json::to_string(value)?
    };
    text.push('\n');
    print_stdout(&text)
}

/// Whether `e` is a write to a closed pipe (`yq | head`), which is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    let kind = e
        .downcast_ref::<std::io::Error>()
        .map(std::io::Error::kind)
        .or_else(|| e.downcast_ref::<serde_json::Error>()?.io_error_kind());
    kind == Some(std::io::ErrorKind::BrokenPipe)
}

/// A JSON array written to stdout as its elements come (a listing page by page), with the
/// very text [`print_json`] writes of the whole array: indented on a terminal, compact
/// otherwise.
pub struct JsonArrayOut {
    pretty: bool,
    /// Elements written so far.
    written: usize,
}

impl Default for JsonArrayOut {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonArrayOut {
    pub fn new() -> Self {
        Self::with_layout(std::io::stdout().is_terminal())
    }

    /// Indented (`pretty`) or compact, wherever stdout goes.
    fn with_layout(pretty: bool) -> Self {
        JsonArrayOut { pretty, written: 0 }
    }

    /// Writes `items`, the array's next elements, through one buffer: a page of 30,000 jobs
    /// is 20 MB of text, which is never held whole.
    pub fn extend<T: serde::Serialize>(
        &mut self,
        items: impl IntoIterator<Item = T>,
    ) -> Result<()> {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        let written = self
            .write_items(&mut out, items)
            .and_then(|()| Ok(out.flush()?));
        match written {
            Err(e) if !is_broken_pipe(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Writes the array's next elements to `out`.
    fn write_items<T: serde::Serialize>(
        &mut self,
        out: &mut impl std::io::Write,
        items: impl IntoIterator<Item = T>,
    ) -> Result<()> {
        for item in items {
            out.write_all(match (self.written, self.pretty) {
                (0, true) => b"[\n",
                (0, false) => b"[",
                (_, true) => b",\n",
                (_, false) => b",",
            })?;
            if self.pretty {
                // As serde_json indents an array's elements: each line one level in (a
                // string's newlines are escaped, so every line break is the layout's).
                for (i, line) in serde_json::to_string_pretty(&item)?.split('\n').enumerate() {
                    if i > 0 {
                        out.write_all(b"\n")?;
                    }
                    out.write_all(b"  ")?;
                    out.write_all(line.as_bytes())?;
                }
            } else {
                serde_json::to_writer(&mut *out, &item)?;
            }
            self.written += 1;
        }
        Ok(())
    }

    /// The text of the array's next elements.
    #[cfg(test)]
    fn text_of<T: serde::Serialize>(
        &mut self,
        items: impl IntoIterator<Item = T>,
    ) -> Result<String> {
        let mut text = Vec::new();
        self.write_items(&mut text, items)?;
        Ok(String::from_utf8(text)?)
    }

    /// The text that closes the array (and the line).
    fn end_text(&self) -> &'static str {
        match (self.written, self.pretty) {
            (0, _) => "[]\n",
            (_, true) => "\n]\n",
            (_, false) => "]\n",
        }
    }

    /// Closes the array (and the line).
    pub fn finish(self) -> Result<()> {
        print_stdout(self.end_text())
    }
}

/// A size in MiB as a short human figure: `512M`, `16G`, `1.5T`.
pub fn format_mib(mib: u64) -> String {
    const GIB: u64 = 1024;
    const TIB: u64 = 1024 * 1024;
    let scaled = |unit: u64, suffix: &str| {
        let remainder = mib % unit;
        if remainder == 0 {
            format!("{}{suffix}", mib / unit)
        } else {
            format!("{:.1}{suffix}", mib as f64 / unit as f64)
        }
    };
    if mib >= TIB {
        scaled(TIB, "T")
    } else if mib >= GIB {
        scaled(GIB, "G")
    } else {
        format!("{mib}M")
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_json_array_written_in_pages_is_the_text_of_the_whole() {
        let items: Vec<serde_json::Value> = vec![
            serde_json::json!({"id": 1, "name": "a\nb", "alloc": [{"node": "n1"}]}),
            serde_json::json!({"id": 2, "tags": [], "inner": {"x": [1, 2]}}),
            serde_json::json!({"id": 3}),
        ];
        for pretty in [true, false] {
            let whole = if pretty {
                serde_json::to_string_pretty(&items).unwrap()
            } else {
                serde_json::to_string(&items).unwrap()
            } + "\n";
            for split in 0..=items.len() {
                let mut out = super::JsonArrayOut::with_layout(pretty);
                let mut text = out.text_of(&items[..split]).unwrap();
                text += &out
                    .text_of(std::iter::empty::<&serde_json::Value>())
                    .unwrap();
                text += &out.text_of(&items[split..]).unwrap();
                text += out.end_text();
                assert_eq!(text, whole, "pretty {pretty}, pages split at {split}");
            }
            let empty = super::JsonArrayOut::with_layout(pretty);
            let none: Vec<serde_json::Value> = Vec::new();
            let whole = if pretty {
                serde_json::to_string_pretty(&none).unwrap()
            } else {
                serde_json::to_string(&none).unwrap()
            } + "\n";
            assert_eq!(empty.end_text(), whole);
        }
    }

    use super::*;

    const COLUMNS: &[Column; 3] = &[
        Column::right("ID"),
        Column::left("NAME"),
        Column::left("NOTE"),
    ];

    #[test]
    fn table_aligns_columns_without_trailing_blanks() {
        let mut table = Table::with_capacity(COLUMNS, 2);
        table.push_row([cell_num(7), "a".into(), "x".into()]);
        table.push_row([cell_num(1234), "longname".into(), "".into()]);
        let mut out = String::new();
        table.render(&mut out, true);
        assert_eq!(
            out,
            "  ID  NAME      NOTE\n   7  a         x\n1234  longname\n"
        );
        let mut out = String::new();
        table.render(&mut out, false);
        assert_eq!(out.lines().next().unwrap(), "   7  a         x");
    }

    #[test]
    fn decimal_widths() {
        for n in [0, 9, 10, 99, 100, 12_345, u64::MAX] {
            assert_eq!(decimal_width(n), n.to_string().len(), "{n}");
        }
    }

    #[test]
    fn mib_formats() {
        assert_eq!(format_mib(0), "0M");
        assert_eq!(format_mib(512), "512M");
        assert_eq!(format_mib(16384), "16G");
        assert_eq!(format_mib(1536), "1.5G");
        assert_eq!(format_mib(1024 * 1024), "1T");
    }
}
