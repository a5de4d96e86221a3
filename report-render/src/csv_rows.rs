//! ysched's CSV, through the `csv` crate: rows of a serde type written as RFC 4180 (quoted only
//! where needed, `\n` line ends), and the files `ysim` takes read back (traces, clusters, the
//! Alibaba trace's tables): a header row naming the columns in any order and any case, then
//! one record per row, RFC 4180 quoting, fields trimmed, an empty field the same as a missing
//! one; blank lines and lines starting with `#` are skipped. Errors name the line.

use csv::{QuoteStyle, ReaderBuilder, StringRecord, Terminator, Trim, WriterBuilder};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CsvError {
    #[error("empty file: expected a header row")]
    NoHeader,
    #[error("line {line}: {fields} fields, but the header names {columns} columns")]
    TooManyFields {
        line: usize,
        fields: usize,
        columns: usize,
    },
    /// A quoted field ran past the end of its line: a row is one line.
    #[error("line {0}: unterminated quote")]
    UnterminatedQuote(usize),
    #[error("line {line}: {message}")]
    Field { line: usize, message: String },
    #[error("{0}")]
    Csv(#[from] csv::Error),
}

/// `header`, then `rows`, one line each (a row's fields in the order its type declares them,
/// a sequence within it spread over as many columns), each line ending in `\n`; a field is
/// quoted only when it holds a comma, a quote or a line break (RFC 4180). The header is given
/// rather than taken from the type, so that it may name columns a row repeats (one per tier).
/// Fails only for a row type `csv` cannot write (one holding a map).
pub fn write_rows<H, R>(header: H, rows: &[R]) -> Result<String, CsvError>
where
    H: IntoIterator,
    H::Item: AsRef<[u8]>,
    R: Serialize,
{
    let mut writer = WriterBuilder::new()
        .has_headers(false)
        .quote_style(QuoteStyle::Necessary)
        .terminator(Terminator::Any(b'\n'))
        .from_writer(Vec::with_capacity(64 * (rows.len() + 1)));
    writer.write_record(header)?;
    for row in rows {
        writer.serialize(row)?;
    }
    let bytes = writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    // Every field was a Rust string or a number.
    Ok(String::from_utf8(bytes).expect("the fields are UTF-8"))
}

/// The header `csv` writes for `row`: the names of its fields, in order, for a flat row type
/// (no sequence or struct in it) whose columns are its fields, so that a header never needs
/// writing out by hand.
pub fn header_of<R: Serialize>(row: &R) -> Result<Vec<String>, CsvError> {
    let mut writer = WriterBuilder::new()
        .has_headers(true)
        .terminator(Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    writer.serialize(row)?;
    let bytes = writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    // Every field was a Rust string or a number.
    let text = String::from_utf8(bytes).expect("the fields are UTF-8");
    split_line(text.lines().next().unwrap_or_default())
}

/// `text` without its blank and comment lines, and for each line left its number in `text`.
fn without_comments(text: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(text.len());
    let mut numbers = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if !trimmed.trim_end().is_empty() && !trimmed.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            numbers.push(i + 1);
        }
    }
    (out, numbers)
}

/// A reader of `text`, whose every line ends in a newline: a quote still open at the end of
/// a line takes that newline into its field, which is how an unterminated quote shows.
fn reader(text: &str) -> csv::Reader<&[u8]> {
    ReaderBuilder::new()
        // Rows end at a newline only: a carriage return inside a line is text, as in the
        // reader this one replaced (`lines()` has taken any before a newline already).
        .terminator(Terminator::Any(b'\n'))
        .has_headers(false)
        .flexible(true)
        // Trimmed by `take` once the fields are checked for a newline.
        .trim(Trim::None)
        .from_reader(text.as_bytes())
}

/// `record`, from line `line`, with its fields trimmed; an error if a field holds a newline
/// (its quote was still open at the end of its line).
fn take(mut record: StringRecord, line: usize) -> Result<StringRecord, CsvError> {
    if record.iter().any(|f| f.contains('\n')) {
        return Err(CsvError::UnterminatedQuote(line));
    }
    record.trim();
    Ok(record)
}

/// The fields of one line (no line break in it), unquoted and trimmed.
pub fn split_line(line: &str) -> Result<Vec<String>, CsvError> {
    let text = format!("{line}\n");
    let mut record = StringRecord::new();
    reader(&text).read_record(&mut record)?;
    Ok(take(record, 1)?.iter().map(String::from).collect())
}

/// The records of `text` with their line numbers, and the header, its names in lower case.
fn read(text: &str) -> Result<(StringRecord, Vec<(usize, StringRecord)>), CsvError> {
    let (text, numbers) = without_comments(text);
    let mut reader = reader(&text);
    let mut rows = reader.records();
    let header = take(
        rows.next().ok_or(CsvError::NoHeader)??,
        numbers.first().copied().unwrap_or(1),
    )?;
    let header: StringRecord = header.iter().map(str::to_ascii_lowercase).collect();
    let mut out = Vec::new();
    for row in rows {
        let row = row?;
        // The line in `text` of the record's first line in what the reader read.
        let line = row
            .position()
            .and_then(|p| numbers.get((p.line() as usize).checked_sub(1)?))
            .copied()
            .unwrap_or(0);
        let row = take(row, line)?;
        if row.len() > header.len() {
            return Err(CsvError::TooManyFields {
                line,
                fields: row.len(),
                columns: header.len(),
            });
        }
        out.push((line, row));
    }
    Ok((header, out))
}

/// A row as a map from column name (lower case) to its field, for the columns it has.
pub type Record = BTreeMap<String, String>;

/// The rows of `text` as maps from column name (lower case) to field, without the empty
/// fields, with their line numbers.
pub fn records(text: &str) -> Result<Vec<(usize, Record)>, CsvError> {
    let (header, rows) = read(text)?;
    Ok(rows
        .into_iter()
        .map(|(line, row)| {
            let map = header
                .iter()
                .zip(row.iter())
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (line, map)
        })
        .collect())
}

/// The rows of `text` as `T`, whose fields are the columns (lower case; unknown columns are
/// ignored, a missing or empty one is `None` for an `Option` field), with their line numbers.
pub fn rows<T: DeserializeOwned>(text: &str) -> Result<Vec<(usize, T)>, CsvError> {
    let (header, rows) = read(text)?;
    rows.into_iter()
        .map(|(line, mut row)| {
            // A short row lacks its last columns: empty, as their fields would be.
            while row.len() < header.len() {
                row.push_field("");
            }
            row.deserialize(Some(&header))
                .map(|value| (line, value))
                .map_err(|e| CsvError::Field {
                    line,
                    message: e.to_string(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blank_lines_quotes_and_line_numbers() {
        let text = "# exported\n\nName , GPUS,extra\r\n  # indented comment\n\"a,b\" ,8,x\n\
                    \"say \"\"hi\"\"\",,\n   \nc\n";
        let rows = records(text).unwrap();
        let lines: Vec<usize> = rows.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [5, 6, 8]);
        assert_eq!(rows[0].1["name"], "a,b");
        assert_eq!(rows[0].1["gpus"], "8");
        assert_eq!(rows[1].1["name"], "say \"hi\"");
        assert!(!rows[1].1.contains_key("gpus"), "empty is missing");
        assert_eq!(rows[2].1.len(), 1, "a short row lacks the rest");
        let rows = records("a,b\n\"x\ry\",z\rw\n").unwrap();
        assert_eq!(
            (rows[0].1["a"].as_str(), rows[0].1["b"].as_str()),
            ("x\ry", "z\rw")
        );
    }

    #[test]
    fn a_header_names_a_rows_fields() {
        #[derive(Serialize)]
        struct Row {
            name: &'static str,
            gpus: Option<u32>,
        }
        let row = Row {
            name: "a,b",
            gpus: None,
        };
        assert_eq!(header_of(&row).unwrap(), ["name", "gpus"]);
    }

    #[test]
    fn one_line_splits_into_its_fields() {
        assert_eq!(
            split_line(r#"a, "b,c" ,"say ""hi""",,d "#).unwrap(),
            ["a", "\"b", "c\"", "say \"hi\"", "", "d"]
        );
        assert!(matches!(
            split_line("a,\"open"),
            Err(CsvError::UnterminatedQuote(1))
        ));
    }

    #[test]
    fn malformed_files_name_the_line() {
        assert!(matches!(records(""), Err(CsvError::NoHeader)));
        assert!(matches!(records("# only\n\n"), Err(CsvError::NoHeader)));
        assert_eq!(
            records("a,b\n1,2,3\n").unwrap_err().to_string(),
            "line 2: 3 fields, but the header names 2 columns"
        );
        assert_eq!(
            records("a\n\"open\nb\n").unwrap_err().to_string(),
            "line 2: unterminated quote"
        );
        assert_eq!(
            records("a\nb\n\"open").unwrap_err().to_string(),
            "line 3: unterminated quote"
        );
    }

    #[test]
    fn typed_rows_ignore_unknown_columns() {
        #[derive(Debug, serde::Deserialize)]
        struct Node {
            name: String,
            gpus: Option<String>,
        }
        let rows: Vec<(usize, Node)> = rows("NAME,colour,gpus\nn1,red,\nn2,,8\nn3\n").unwrap();
        assert_eq!(rows[0].1.name, "n1");
        assert_eq!(rows[0].1.gpus, None);
        assert_eq!(rows[1].1.gpus.as_deref(), Some("8"));
        assert_eq!((rows[2].1.name.as_str(), &rows[2].1.gpus), ("n3", &None));
        let e = super::rows::<Node>("gpus\n8\n").unwrap_err().to_string();
        assert!(e.starts_with("line 2:") && e.contains("name"), "{e}");
    }
}
