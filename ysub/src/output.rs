//! Text output shared by the tools: column-aligned tables and writing to stdout.

use anyhow::Result;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

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

/// One line of a table, able to say how wide each cell is before writing it. Rows of the big
/// tables (`yq`) implement it over their records directly, so no cell needs its own string.
pub trait Row {
    /// Display width of cell `column`.
    fn width(&self, column: usize) -> usize;
    /// Appends cell `column` to `out`.
    fn write(&self, column: usize, out: &mut String);
}

/// Appends `rows` to `out` as a table whose columns are as wide as their widest cell, with a
/// header line when `header` is set. The last column is not padded, so lines carry no
/// trailing blanks.
pub fn render_table<R: Row>(columns: &[Column], rows: &[R], header: bool, out: &mut String) {
    let header_row = HeaderRow(columns);
    let mut widths: Vec<usize> = (0..columns.len())
        .map(|i| if header { header_row.width(i) } else { 0 })
        .collect();
    for row in rows {
        for (i, width) in widths.iter_mut().enumerate() {
            *width = (*width).max(row.width(i));
        }
    }
    let line_len = widths.iter().sum::<usize>() + columns.len() * COLUMN_GAP.len() + 1;
    out.reserve((rows.len() + 1) * line_len);
    if header {
        render_line(columns, &widths, &header_row, out);
    }
    for row in rows {
        render_line(columns, &widths, row, out);
    }
}

fn render_line(columns: &[Column], widths: &[usize], row: &impl Row, out: &mut String) {
    let last = columns.len() - 1;
    for (i, (column, &width)) in columns.iter().zip(widths).enumerate() {
        if i > 0 {
            out.push_str(COLUMN_GAP);
        }
        let pad = width.saturating_sub(row.width(i));
        match column.align {
            Align::Right => {
                push_spaces(out, pad);
                row.write(i, out);
            }
            Align::Left => {
                row.write(i, out);
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

struct HeaderRow<'c>(&'c [Column]);

impl Row for HeaderRow<'_> {
    fn width(&self, column: usize) -> usize {
        display_width(self.0[column].header)
    }
    fn write(&self, column: usize, out: &mut String) {
        out.push_str(self.0[column].header);
    }
}

/// A row of ready-made cells, for the small tables.
impl<const N: usize> Row for [Cow<'_, str>; N] {
    fn width(&self, column: usize) -> usize {
        display_width(&self[column])
    }
    fn write(&self, column: usize, out: &mut String) {
        out.push_str(&self[column]);
    }
}

/// A table built row by row from ready-made cells.
pub struct Table<'a, const N: usize> {
    columns: &'static [Column; N],
    rows: Vec<[Cow<'a, str>; N]>,
}

impl<'a, const N: usize> Table<'a, N> {
    pub fn with_capacity(columns: &'static [Column; N], rows: usize) -> Self {
        Table {
            columns,
            rows: Vec::with_capacity(rows),
        }
    }

    pub fn push_row(&mut self, row: [Cow<'a, str>; N]) {
        self.rows.push(row);
    }

    /// Appends the table to `out`, see [`render_table`].
    pub fn render(&self, out: &mut String, header: bool) {
        render_table(self.columns, &self.rows, header, out);
    }
}

/// Width of text in a fixed-width terminal, counting each character as one column.
pub fn display_width(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

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
