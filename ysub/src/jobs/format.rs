//! `yq --format/-o`: the listing's columns chosen by the user, either as squeue's `%` codes
//! (`"%.10i %9P %j %T"`, text between codes kept) or as a list of column names (`id,name,
//! state`, the table's headers in any case).

use super::table::JobLine;
use super::{compact_state, display_id, gpus_requested, node_list, shown_state, total_run_secs};
use crate::output::{render_table, Align, Column};
use anyhow::{bail, Result};
use std::borrow::Cow;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, rfc3339, Millis};
use ysched_proto::JobInfo;

/// One thing a column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `%i`, JOBID: `12`, `12_7`, or a folded line's `12_[40-199]`.
    JobId,
    /// `%j`, NAME.
    Name,
    /// `%u`, USER.
    User,
    /// `%T`, STATE: the long state (COMPLETING in a cancel's grace).
    State,
    /// `%t`, ST: squeue's compact code.
    CompactState,
    /// `%M`, TIME: run time over every run.
    Time,
    /// `%l`, TIME_LIMIT: `1:00:00`, `UNLIMITED`.
    TimeLimit,
    /// `%D`, NODES: the nodes held, else the nodes asked for.
    Nodes,
    /// `%R`, NODELIST(REASON): the nodes held, else `(reason)`.
    NodeListReason,
    /// `%P`, TIER (squeue's PARTITION).
    Tier,
    /// `%C`, CPUS: held, over every node.
    Cpus,
    /// `%b`, GPUS: requested (squeue's TRES_PER_NODE, here the job's total).
    Gpus,
    /// `%N`, NODELIST: the nodes held, empty when none.
    NodeList,
    /// `%V`, SUBMIT_TIME.
    SubmitTime,
    /// `%S`, START_TIME: the current (or last) run's start, `N/A` before.
    StartTime,
    /// `%a`, ACCOUNT.
    Account,
    /// `%A`, ARRAY_JOB_ID: an array task's array id, else the job's id.
    ArrayJobId,
    /// `%K`, ARRAY_TASK_ID: an array task's index, else `N/A`.
    ArrayTaskId,
    /// `%Q`, PRIORITY: the tier's value.
    Priority,
    /// REASON: why it waits or how it ended, `None` when there is none.
    Reason,
    /// PLACE: a pending job's place in its tier's queue, `-` otherwise.
    Place,
    /// FAIRSHARE: a pending job's account's fair-share factor, `-` otherwise.
    FairShare,
}

/// Every field: its squeue code (if it has one), its column name, and how it aligns.
const FIELDS: &[(Option<char>, &str, Field, Align)] = &[
    (Some('i'), "JOBID", Field::JobId, Align::Right),
    (Some('j'), "NAME", Field::Name, Align::Left),
    (Some('u'), "USER", Field::User, Align::Left),
    (Some('P'), "TIER", Field::Tier, Align::Left),
    (Some('T'), "STATE", Field::State, Align::Left),
    (Some('t'), "ST", Field::CompactState, Align::Left),
    (Some('M'), "TIME", Field::Time, Align::Right),
    (Some('l'), "TIME_LIMIT", Field::TimeLimit, Align::Right),
    (Some('b'), "GPUS", Field::Gpus, Align::Right),
    (Some('D'), "NODES", Field::Nodes, Align::Right),
    (Some('C'), "CPUS", Field::Cpus, Align::Right),
    (
        Some('R'),
        "NODELIST(REASON)",
        Field::NodeListReason,
        Align::Left,
    ),
    (Some('N'), "NODELIST", Field::NodeList, Align::Left),
    (Some('V'), "SUBMIT_TIME", Field::SubmitTime, Align::Left),
    (Some('S'), "START_TIME", Field::StartTime, Align::Left),
    (Some('a'), "ACCOUNT", Field::Account, Align::Left),
    (Some('A'), "ARRAY_JOB_ID", Field::ArrayJobId, Align::Right),
    (Some('K'), "ARRAY_TASK_ID", Field::ArrayTaskId, Align::Right),
    (Some('Q'), "PRIORITY", Field::Priority, Align::Right),
    (None, "REASON", Field::Reason, Align::Left),
    (None, "PLACE", Field::Place, Align::Right),
    (None, "FAIRSHARE", Field::FairShare, Align::Right),
];

/// Other names a column list may use for a field (squeue's, and the obvious short ones).
const ALIASES: &[(&str, Field)] = &[
    ("ID", Field::JobId),
    ("PARTITION", Field::Tier),
    ("PRIORITY_TIER", Field::Tier),
    ("STATE_COMPACT", Field::CompactState),
    ("TIMELIMIT", Field::TimeLimit),
    ("SUBMIT", Field::SubmitTime),
    ("START", Field::StartTime),
];

/// A parsed `--format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// squeue's: text and `%` codes, each with its width and alignment.
    Squeue(Vec<Piece>),
    /// A column list: an aligned table of these.
    Columns(Vec<Field>),
}

/// A piece of a squeue format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Code {
        field: Field,
        /// `%10i`: at least (and at most) 10 wide; `None`: as wide as the value.
        width: Option<usize>,
        /// `%.10i`: right-justified (squeue's `.`).
        right: bool,
    },
}

/// The codes and names users may give, for the message refusing an unknown one.
fn known() -> String {
    let codes: Vec<String> = FIELDS
        .iter()
        .filter_map(|(code, _, _, _)| code.map(|c| format!("%{c}")))
        .collect();
    let names: Vec<String> = FIELDS
        .iter()
        .map(|(_, name, _, _)| name.to_ascii_lowercase())
        .collect();
    format!(
        "codes: {}; column names: {}",
        codes.join(" "),
        names.join(", ")
    )
}

fn header_of(field: Field) -> &'static str {
    FIELDS
        .iter()
        .find(|(_, _, f, _)| *f == field)
        .map_or("?", |(_, name, _, _)| name)
}

fn align_of(field: Field) -> Align {
    FIELDS
        .iter()
        .find(|(_, _, f, _)| *f == field)
        .map_or(Align::Left, |(_, _, _, align)| *align)
}

/// Parses `--format`: with a `%` it is squeue's format, else a comma list of column names.
pub fn parse_format(text: &str) -> Result<Format> {
    if text.contains('%') {
        return parse_squeue(text).map(Format::Squeue);
    }
    let mut fields = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        let upper = name.to_ascii_uppercase();
        let field = FIELDS
            .iter()
            .find(|(_, n, _, _)| *n == upper)
            .map(|(_, _, f, _)| *f)
            .or_else(|| ALIASES.iter().find(|(n, _)| *n == upper).map(|(_, f)| *f));
        match field {
            Some(field) => fields.push(field),
            None => bail!(
                "unknown column '{}' in --format ({})",
                ysched_common::text::excerpt(name, 40),
                known()
            ),
        }
    }
    if fields.is_empty() {
        bail!("--format names no column ({})", known());
    }
    Ok(Format::Columns(fields))
}

/// squeue's format: `%[.][width]code`, other text kept as is (`%%`: a percent sign), read by
/// the parser `squeue` itself uses (`crate::slurm::format`), each code then named here.
fn parse_squeue(text: &str) -> Result<Vec<Piece>> {
    use crate::slurm::format::{parse_percent_format, Piece as Percent};
    let codes: Vec<char> = FIELDS.iter().filter_map(|(code, _, _, _)| *code).collect();
    let pieces = parse_percent_format(text, &codes)
        // `format '...': unknown field %z (known: ...)` becomes `--format '...': ...`.
        .map_err(|why| anyhow::anyhow!("--{why}"))?;
    Ok(pieces
        .into_iter()
        .map(|piece| match piece {
            Percent::Text(text) => Piece::Text(text),
            Percent::Field(f) => Piece::Code {
                field: FIELDS
                    .iter()
                    .find(|(code, _, _, _)| *code == Some(f.code))
                    .map(|(_, _, field, _)| *field)
                    .expect("parse_percent_format keeps to the codes it is given"),
                width: f.width,
                right: f.right,
            },
        })
        .collect())
}

/// One field of a line's job, as text (escaped for the terminal).
fn cell<'a>(line: &'a JobLine<'a>, field: Field, now_ms: Millis) -> Cow<'a, str> {
    let job: &JobInfo = line.job;
    let private = |text: Cow<'a, str>| {
        if job.usage_private {
            Cow::Borrowed("-")
        } else {
            text
        }
    };
    match field {
        Field::JobId => match &line.label {
            Some(label) => Cow::Borrowed(label.as_str()),
            None => Cow::Owned(escape_for_terminal(&display_id(job)).into_owned()),
        },
        Field::Name => escape_for_terminal(&job.name),
        Field::User => escape_for_terminal(&job.user),
        Field::State => escape_for_terminal(shown_state(job)),
        Field::CompactState => Cow::Borrowed(compact_state(job)),
        Field::Time => private(Cow::Owned(format_elapsed(total_run_secs(job, now_ms)))),
        Field::TimeLimit => match job.time_limit_secs {
            0 => Cow::Borrowed("UNLIMITED"),
            secs => Cow::Owned(format_elapsed(secs)),
        },
        Field::Nodes => Cow::Owned(match job.alloc.len() {
            0 => job.nodes_requested.max(1).to_string(),
            n => n.to_string(),
        }),
        Field::NodeListReason => match node_list(job) {
            Some(nodes) => Cow::Owned(escape_for_terminal(&nodes).into_owned()),
            None if job.reason.is_empty() && job.usage_private => Cow::Borrowed("(private)"),
            None if job.reason.is_empty() => Cow::Borrowed("(None)"),
            None => Cow::Owned(format!("({})", escape_for_terminal(&job.reason))),
        },
        Field::Tier => escape_for_terminal(&job.tier),
        Field::Cpus => Cow::Owned(job.alloc.iter().map(|a| a.cpus).sum::<u32>().to_string()),
        Field::Gpus => Cow::Owned(gpus_requested(job).to_string()),
        Field::NodeList => {
            Cow::Owned(escape_for_terminal(&node_list(job).unwrap_or_default()).into_owned())
        }
        Field::SubmitTime => Cow::Owned(rfc3339(job.submit_time_ms)),
        Field::StartTime => private(match job.start_time_ms {
            ms if ms > 0 => Cow::Owned(rfc3339(ms)),
            _ => Cow::Borrowed("N/A"),
        }),
        Field::Account => escape_for_terminal(&job.account),
        Field::ArrayJobId => Cow::Owned(job.array_job_id.unwrap_or(job.id).to_string()),
        Field::ArrayTaskId => match (&line.label, job.array_task_id) {
            (Some(label), _) => Cow::Owned(
                label
                    .split_once('_')
                    .map_or(label.as_str(), |(_, tasks)| tasks)
                    .to_string(),
            ),
            (None, Some(task)) => Cow::Owned(task.to_string()),
            (None, None) => Cow::Borrowed("N/A"),
        },
        Field::Priority => Cow::Owned(job.tier_value.to_string()),
        Field::Reason => match job.reason.as_str() {
            "" => Cow::Borrowed("None"),
            reason => escape_for_terminal(reason),
        },
        Field::Place => job
            .queue_position
            .map_or(Cow::Borrowed("-"), |p| Cow::Owned(p.to_string())),
        Field::FairShare => job
            .fair_share
            .map_or(Cow::Borrowed("-"), |f| Cow::Owned(format!("{f:.3}"))),
    }
}

/// `text` fitted to `width` (cut, or padded on the side `right` says), as squeue does.
fn fit(text: &str, width: Option<usize>, right: bool, out: &mut String) {
    let Some(width) = width else {
        out.push_str(text);
        return;
    };
    let cut: String = text.chars().take(width).collect();
    let pad = width - cut.chars().count();
    if right {
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(&cut);
    } else {
        out.push_str(&cut);
        out.extend(std::iter::repeat_n(' ', pad));
    }
}

/// One line of a squeue format, each code's value from `value`, without trailing blanks.
fn squeue_line(pieces: &[Piece], value: impl Fn(Field) -> String, out: &mut String) {
    let mut line = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => line.push_str(text),
            Piece::Code {
                field,
                width,
                right,
            } => fit(&value(*field), *width, *right, &mut line),
        }
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

/// The listing of `lines` in `format`, with a header line when `header` is set.
pub fn format_lines(format: &Format, lines: &[JobLine], now_ms: Millis, header: bool) -> String {
    let mut out = String::new();
    match format {
        Format::Squeue(pieces) => {
            if header {
                squeue_line(pieces, |field| header_of(field).to_string(), &mut out);
            }
            for line in lines {
                squeue_line(
                    pieces,
                    |field| cell(line, field, now_ms).into_owned(),
                    &mut out,
                );
            }
        }
        Format::Columns(fields) => {
            let columns: Vec<Column> = fields
                .iter()
                .map(|f| Column {
                    header: header_of(*f),
                    align: align_of(*f),
                })
                .collect();
            let rows: Vec<Vec<String>> = lines
                .iter()
                .map(|line| {
                    fields
                        .iter()
                        .map(|f| cell(line, *f, now_ms).into_owned())
                        .collect()
                })
                .collect();
            render_table(&columns, &rows, header, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{pending_job, running_job, T0};
    use super::*;

    fn lines(jobs: &[JobInfo]) -> Vec<JobLine<'_>> {
        jobs.iter()
            .map(|job| JobLine { job, label: None })
            .collect()
    }

    #[test]
    fn squeue_codes_with_widths_and_text_between() {
        let format = parse_format("%.6i %-8j|%t %M %l %D %R %P %C %b %Q").unwrap_err();
        // `-` is not squeue's: refused as an unknown code.
        assert!(format.to_string().contains("unknown field %-"), "{format}");
        let format = parse_format("%.6i %8j|%t %M %l %D %R %P %C %b %Q %%").unwrap();
        let jobs = [running_job()];
        let out = format_lines(&format, &lines(&jobs), T0 + 20_000, true);
        assert_eq!(
            out,
            " JOBID NAME    |ST TIME TIME_LIMIT NODES NODELIST(REASON) TIER CPUS GPUS PRIORITY %\n    \
             17 train   |R 0:10 1:00:00 2 gpu01,gpu02 high 16 4 10000 %\n"
        );
        // A width cuts what is longer.
        let format = parse_format("%3j").unwrap();
        let out = format_lines(&format, &lines(&jobs), T0, false);
        assert_eq!(out, "tra\n");
    }

    #[test]
    fn column_names_in_any_case_make_a_table() {
        let format = parse_format("id,Name,STATE,nodelist(reason),time_limit").unwrap();
        let jobs = [running_job(), pending_job()];
        let out = format_lines(&format, &lines(&jobs), T0 + 20_000, true);
        let mut rows = out.lines();
        assert_eq!(
            rows.next().unwrap().split_whitespace().collect::<Vec<_>>(),
            ["JOBID", "NAME", "STATE", "NODELIST(REASON)", "TIME_LIMIT"]
        );
        assert!(rows.next().unwrap().contains("RUNNING"));
        assert!(rows.next().unwrap().contains("PENDING"));
    }

    #[test]
    fn unknown_codes_and_columns_are_named_with_the_valid_ones() {
        let err = parse_format("%i %z").unwrap_err().to_string();
        assert!(err.contains("--format '%i %z': unknown field %z"), "{err}");
        assert!(err.contains("%i %j %u"), "{err}");
        let err = parse_format("id,colour").unwrap_err().to_string();
        assert!(err.contains("unknown column 'colour'"), "{err}");
        assert!(err.contains("jobid, name, user"), "{err}");
        assert!(parse_format(",").is_err());
        assert!(parse_format("%.").is_err());
        assert!(parse_format("%99999i").is_err());
    }
}
