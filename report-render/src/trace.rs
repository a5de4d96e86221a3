//! The CSV trace format of `docs/simulation.md`, as one row type: `yctl report --export-trace`
//! writes it, `ysim --trace FILE` reads it. A row is text, column by column: the writer
//! formats each field, the reader parses each with the trace's own grammars (durations,
//! times) and its defaults for empty fields.

use crate::csv_rows::{self, CsvError};
use serde::{Deserialize, Serialize};

/// One job of a trace. The fields are the columns, in the order the exporter writes them;
/// `None` is an empty field (the reader's default). Readers ignore columns they do not know,
/// so `outcome` and `restarts`, which only the exporter writes, are for people.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceRecord {
    pub job_id: Option<String>,
    pub submit_time: Option<String>,
    pub tier: Option<String>,
    pub account: Option<String>,
    pub user: Option<String>,
    pub gpus: Option<String>,
    pub gpu_type: Option<String>,
    pub nodes: Option<String>,
    pub cpus: Option<String>,
    pub mem: Option<String>,
    pub duration: Option<String>,
    pub time_limit: Option<String>,
    pub checkpoint_interval: Option<String>,
    pub checkpoint_write: Option<String>,
    pub grace: Option<String>,
    pub outcome: Option<String>,
    pub restarts: Option<String>,
}

/// The header the exporter writes: [`TraceRecord`]'s fields, in order.
pub const TRACE_COLUMNS: [&str; 17] = [
    "job_id",
    "submit_time",
    "tier",
    "account",
    "user",
    "gpus",
    "gpu_type",
    "nodes",
    "cpus",
    "mem",
    "duration",
    "time_limit",
    "checkpoint_interval",
    "checkpoint_write",
    "grace",
    "outcome",
    "restarts",
];

/// `records` as a trace: the header, then one line per record, each ending in `\n`; a field is
/// quoted only when it holds a comma, a quote or a line break (RFC 4180).
pub fn write_trace(records: &[TraceRecord]) -> String {
    // Every field is text, which always writes.
    csv_rows::write_rows(TRACE_COLUMNS, records).expect("a trace of text fields writes")
}

/// The records of a trace (see `csv_rows` for the file's conventions) with their line numbers.
pub fn read_trace(text: &str) -> Result<Vec<(usize, TraceRecord)>, CsvError> {
    csv_rows::rows(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn the_header_names_the_fields_in_order() {
        let record = TraceRecord {
            job_id: some("1"),
            ..TraceRecord::default()
        };
        let text = write_trace(&[record]);
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header, TRACE_COLUMNS);
        // serde's names, checked by reading the header back into a record.
        let named: Vec<(usize, TraceRecord)> = csv_rows::rows(&format!(
            "{}\n{}\n",
            TRACE_COLUMNS.join(","),
            TRACE_COLUMNS.join(",")
        ))
        .unwrap();
        let r = &named[0].1;
        assert_eq!(r.job_id.as_deref(), Some("job_id"));
        assert_eq!(r.restarts.as_deref(), Some("restarts"));
        assert_eq!(r.checkpoint_write.as_deref(), Some("checkpoint_write"));
    }

    #[test]
    fn quoted_only_where_needed_and_read_back_as_written() {
        let records = vec![
            TraceRecord {
                job_id: some("12_7"),
                submit_time: some("2026-01-05T00:00:01.500Z"),
                account: some("r&d, \"core\""),
                user: some("o,brien"),
                gpus: some("8"),
                gpu_type: some("A100|H100"),
                duration: some("2.25"),
                outcome: some("TIMEOUT"),
                ..TraceRecord::default()
            },
            TraceRecord {
                job_id: some("13"),
                tier: some("#low"),
                user: some("cr\rx"),
                ..TraceRecord::default()
            },
        ];
        let text = write_trace(&records);
        assert_eq!(
            text,
            "job_id,submit_time,tier,account,user,gpus,gpu_type,nodes,cpus,mem,duration,\
             time_limit,checkpoint_interval,checkpoint_write,grace,outcome,restarts\n\
             12_7,2026-01-05T00:00:01.500Z,,\"r&d, \"\"core\"\"\",\"o,brien\",8,A100|H100,,,,\
             2.25,,,,,TIMEOUT,\n\
             13,,#low,,\"cr\rx\",,,,,,,,,,,,\n"
        );
        let back: Vec<TraceRecord> = read_trace(&text)
            .unwrap()
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        assert_eq!(back, records);
        assert_eq!(write_trace(&[]), format!("{}\n", TRACE_COLUMNS.join(",")));
    }
}
