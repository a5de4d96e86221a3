//! Text output shared by the tools: column-aligned tables and writing to stdout.

use anyhow::Result;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub header: &'static str,
    pub align: Align,
}

impl Column {
    pub const fn left(header: &'static str) -> Column {
        Column {
            header,
            align: Align::Left,
        }
    }
    pub const fn right(header: &'static str) -> Column {
        Column {
            header,
            align: Align::Right,
        }
    }
}

/// Gap between columns.
const COLUMN_GAP: &str = "  ";

/// A table whose columns are as wide as their widest cell. Cells borrow from the records where
/// they can, so a table of thousands of jobs costs little more than the formatted numbers.
pub struct Table<'a> {
    columns: &'static [Column],
    /// Row-major, `columns.len()` cells per row.
    cells: Vec<Cow<'a, str>>,
}

impl<'a> Table<'a> {
    pub fn new(columns: &'static [Column]) -> Self {
        Table {
            columns,
            cells: Vec::new(),
        }
    }

    pub fn with_capacity(columns: &'static [Column], rows: usize) -> Self {
        Table {
            columns,
            cells: Vec::with_capacity(rows * columns.len()),
        }
    }

    /// Adds a row; it must have exactly one cell per column.
    pub fn push_row<const N: usize>(&mut self, row: [Cow<'a, str>; N]) {
        assert_eq!(N, self.columns.len(), "row width differs from the table's");
        self.cells.extend(row);
    }

    pub fn rows(&self) -> usize {
        self.cells.len() / self.columns.len()
    }

    /// Appends the table to `out`, with a header line when `header` is set. The last column is
    /// not padded, so lines carry no trailing blanks.
    pub fn render(&self, out: &mut String, header: bool) {
        let ncols = self.columns.len();
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .map(|c| if header { c.header.chars().count() } else { 0 })
            .collect();
        for row in self.cells.chunks(ncols) {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(display_width(cell));
            }
        }
        out.reserve(self.rows() * (widths.iter().sum::<usize>() + ncols * COLUMN_GAP.len() + 1));
        if header {
            let headers: Vec<&str> = self.columns.iter().map(|c| c.header).collect();
            self.render_row(out, &widths, headers.iter().copied());
        }
        for row in self.cells.chunks(ncols) {
            self.render_row(out, &widths, row.iter().map(|c| c.as_ref()));
        }
    }

    fn render_row<'s>(
        &self,
        out: &mut String,
        widths: &[usize],
        cells: impl Iterator<Item = &'s str>,
    ) {
        let last = self.columns.len() - 1;
        for (i, ((cell, column), &width)) in cells.zip(self.columns).zip(widths).enumerate() {
            if i > 0 {
                out.push_str(COLUMN_GAP);
            }
            let pad = width.saturating_sub(display_width(cell));
            match column.align {
                Align::Right => {
                    push_spaces(out, pad);
                    out.push_str(cell);
                }
                Align::Left => {
                    out.push_str(cell);
                    if i != last {
                        push_spaces(out, pad);
                    }
                }
            }
        }
        // Empty trailing cells would otherwise leave the gap behind.
        while out.ends_with(' ') {
            out.pop();
        }
        out.push('\n');
    }
}

fn display_width(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

fn push_spaces(out: &mut String, n: usize) {
    for _ in 0..n {
        out.push(' ');
    }
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

/// Serializes `value` as pretty JSON followed by a newline and writes it to stdout.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    print_stdout(&text)
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
    use super::*;

    const COLUMNS: &[Column] = &[
        Column::right("ID"),
        Column::left("NAME"),
        Column::left("NOTE"),
    ];

    #[test]
    fn table_aligns_columns_without_trailing_blanks() {
        let mut table = Table::new(COLUMNS);
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
    fn mib_formats() {
        assert_eq!(format_mib(0), "0M");
        assert_eq!(format_mib(512), "512M");
        assert_eq!(format_mib(16384), "16G");
        assert_eq!(format_mib(1536), "1.5G");
        assert_eq!(format_mib(1024 * 1024), "1T");
    }
}
