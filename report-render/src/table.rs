//! Column-aligned text tables: each column as wide as its widest cell, two spaces apart, no
//! trailing blanks.

use std::borrow::Cow;

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
    // Each cell measured once: its width makes the column's and then its padding (a cell's
    // width escapes and counts its text: for `yq` of 10,000 jobs, a good part of the work).
    let mut cell_widths = Vec::with_capacity(rows.len() * columns.len());
    for row in rows {
        for (i, width) in widths.iter_mut().enumerate() {
            let cell = row.width(i);
            *width = (*width).max(cell);
            cell_widths.push(cell);
        }
    }
    let line_len = widths.iter().sum::<usize>() + columns.len() * COLUMN_GAP.len() + 1;
    out.reserve((rows.len() + 1) * line_len);
    if header {
        let header_widths: Vec<usize> = (0..columns.len()).map(|i| header_row.width(i)).collect();
        render_line(columns, &widths, &header_widths, &header_row, out);
    }
    for (row, cells) in rows
        .iter()
        .zip(cell_widths.chunks_exact(columns.len().max(1)))
    {
        render_line(columns, &widths, cells, row, out);
    }
}

/// One line: `cells` are the row's cell widths, `widths` the columns'.
fn render_line(
    columns: &[Column],
    widths: &[usize],
    cells: &[usize],
    row: &impl Row,
    out: &mut String,
) {
    let last = columns.len() - 1;
    for (i, ((column, &width), &cell)) in columns.iter().zip(widths).zip(cells).enumerate() {
        if i > 0 {
            out.push_str(COLUMN_GAP);
        }
        let pad = width.saturating_sub(cell);
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

/// A row of as many cells as its table has columns, for tables whose columns are data (one
/// per policy in `ysim`).
impl Row for Vec<String> {
    fn width(&self, column: usize) -> usize {
        self.get(column).map_or(0, |cell| display_width(cell))
    }
    fn write(&self, column: usize, out: &mut String) {
        if let Some(cell) = self.get(column) {
            out.push_str(cell);
        }
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

/// `rows` (its first one the header, written as any other) as a table whose column `c` is
/// aligned as `align[c]`.
pub fn render_rows(rows: &[Vec<String>], align: &[Align]) -> String {
    let columns: Vec<Column> = align
        .iter()
        .map(|&align| Column { header: "", align })
        .collect();
    let mut out = String::new();
    if !columns.is_empty() {
        render_table(&columns, rows, false, &mut out);
    }
    out
}

/// Width of text in a fixed-width terminal, counting each character as one column.
pub fn display_width(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

fn push_spaces(out: &mut String, n: usize) {
    const SPACES: &str = "                                                                ";
    let mut left = n;
    while left > 0 {
        let now = left.min(SPACES.len());
        out.push_str(&SPACES[..now]);
        left -= now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_strings_align_as_told_without_trailing_blanks() {
        let rows: Vec<Vec<String>> = [
            ["policy", "util", "note"],
            ["fifo", "12.5%", ""],
            ["+backfill", "7.0%", "é"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect();
        let out = render_rows(&rows, &[Align::Left, Align::Right, Align::Right]);
        assert_eq!(
            out,
            "policy      util  note\nfifo       12.5%\n+backfill   7.0%     é\n"
        );
        assert_eq!(render_rows(&[], &[Align::Left]), "");
    }
}
