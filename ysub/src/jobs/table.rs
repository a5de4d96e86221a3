//! The `yq` tables: one line per job or array tasks folded as squeue folds them, the long
//! form (`--long`) and the expected starts (`--start`).

use super::{gpus_requested, shown_state, total_run_secs};
use crate::output::{decimal_width, display_width, push_decimal, render_table, Column, Row, Table};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use ysched_common::array::fold_tasks;
use ysched_common::text::{escape_for_terminal, escaped_width};
use ysched_common::time::{format_elapsed, rfc3339, Millis};
use ysched_common::JobState;
use ysched_proto::JobInfo;

pub const JOB_COLUMNS: &[Column; 8] = &[
    Column::right("JOBID"),
    Column::left("NAME"),
    Column::left("USER"),
    Column::left("TIER"),
    Column::left("STATE"),
    Column::right("TIME"),
    Column::right("GPUS"),
    Column::left("NODELIST(REASON)"),
];

/// The `yq` table: `JOBID NAME USER TIER STATE TIME GPUS NODELIST(REASON)`, in the order given.
/// The last column is the node list of a job holding nodes, else `(reason)` (`(None)` if none).
/// One line per job; see [`format_queue`] for the folded form.
pub fn format_job_table(jobs: &[JobInfo], now_ms: Millis, header: bool) -> String {
    format_queue(&job_lines(jobs, Fold::Never), now_ms, header, false)
}

/// One line of a `yq` listing: a job, or the waiting tasks of an array folded into one.
#[derive(Debug, Clone)]
pub struct JobLine<'a> {
    /// The job shown (for a folded line, its first task): every cell but JOBID is its.
    pub job: &'a JobInfo,
    /// The JOBID cell of a folded line, `12_[40-199%16]`; `None`: the job's own.
    pub label: Option<String>,
}

/// Which array tasks [`job_lines`] folds into one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// One line per job (`yq --array`, `--json`).
    Never,
    /// The waiting (PENDING or HELD) tasks of an array with the same state and reason, as
    /// squeue shows them.
    Waiting,
    /// As `Waiting`, and only tasks expected to start at the same time on the same nodes
    /// (`yq --start`).
    WaitingAndExpected,
}

/// What makes the waiting tasks of an array one line.
#[derive(PartialEq, Eq, Hash)]
struct FoldKey<'a> {
    array: u64,
    state: &'a str,
    reason: &'a str,
    expected_start_ms: i64,
    expected_nodes: &'a [String],
}

/// The lines of a listing, in the order of `jobs`: a folded line stands where its first task
/// was. A waiting task alone in its group keeps its own line (`12_49`); running and finished
/// tasks always do, as squeue shows them.
pub fn job_lines<'a>(jobs: impl IntoIterator<Item = &'a JobInfo>, fold: Fold) -> Vec<JobLine<'a>> {
    let jobs = jobs.into_iter();
    let mut lines: Vec<JobLine> = Vec::with_capacity(jobs.size_hint().0);
    if fold == Fold::Never {
        lines.extend(jobs.map(|job| JobLine { job, label: None }));
        return lines;
    }
    let mut groups: HashMap<FoldKey, usize> = HashMap::new();
    // Per folded line (by its index in `lines`): the task indices it holds.
    let mut tasks: HashMap<usize, Vec<u32>> = HashMap::new();
    for job in jobs {
        let waiting = matches!(
            JobState::parse(&job.state),
            Some(JobState::Pending | JobState::Held)
        );
        let (Some(array), Some(task), true) = (job.array_job_id, job.array_task_id, waiting) else {
            lines.push(JobLine { job, label: None });
            continue;
        };
        let expected = fold == Fold::WaitingAndExpected;
        let key = FoldKey {
            array,
            state: &job.state,
            reason: &job.reason,
            expected_start_ms: if expected { job.expected_start_ms } else { 0 },
            expected_nodes: if expected { &job.expected_nodes } else { &[] },
        };
        let line = *groups.entry(key).or_insert_with(|| {
            lines.push(JobLine { job, label: None });
            lines.len() - 1
        });
        tasks.entry(line).or_default().push(task);
    }
    for (line, mut tasks) in tasks {
        if tasks.len() < 2 {
            continue;
        }
        tasks.sort_unstable();
        tasks.dedup();
        let job = lines[line].job;
        let array = job.array_job_id.unwrap_or(job.id);
        let mut label = format!("{array}_[{}", fold_tasks(&tasks));
        if job.array_max_running > 0 {
            let _ = write!(label, "%{}", job.array_max_running);
        }
        label.push(']');
        lines[line].label = Some(label);
    }
    lines
}

/// The `yq` table of `lines` ([`job_lines`]), in the long form (`--long`) when `long` is set.
pub fn format_queue(lines: &[JobLine], now_ms: Millis, header: bool, long: bool) -> String {
    let mut out = String::new();
    if long {
        let rows: Vec<LongJobRow> = lines
            .iter()
            .map(|line| LongJobRow(JobRow::new(line, now_ms)))
            .collect();
        render_table(LONG_JOB_COLUMNS, &rows, header, &mut out);
    } else {
        let rows: Vec<JobRow> = lines.iter().map(|line| JobRow::new(line, now_ms)).collect();
        render_table(JOB_COLUMNS, &rows, header, &mut out);
    }
    out
}

pub const START_COLUMNS: &[Column; 8] = &[
    Column::right("JOBID"),
    Column::left("TIER"),
    Column::left("NAME"),
    Column::left("USER"),
    Column::left("ST"),
    Column::left("START_TIME"),
    Column::left("SCHEDNODES"),
    Column::left("REASON"),
];

/// `yq --start`, as `squeue --start`: the pending jobs with when and where schedd's last pass
/// expects them to start (`N/A`: it cannot tell), soonest first, those it cannot tell last
/// in the order given. Array tasks fold as in the queue unless `fold` is [`Fold::Never`].
pub fn format_start_table(jobs: &[JobInfo], header: bool, fold: Fold) -> String {
    let fold = match fold {
        Fold::Never => Fold::Never,
        _ => Fold::WaitingAndExpected,
    };
    let pending = jobs
        .iter()
        .filter(|j| JobState::parse(&j.state) == Some(JobState::Pending));
    let mut lines = job_lines(pending, fold);
    // Stable: equal times (and every unknown one) keep their order.
    lines.sort_by_key(|line| match line.job.expected_start_ms {
        ms if ms > 0 => (0, ms),
        _ => (1, 0),
    });
    let mut table = Table::with_capacity(START_COLUMNS, lines.len());
    for line in &lines {
        let job = line.job;
        table.push_row([
            match &line.label {
                Some(label) => Cow::Owned(label.clone()),
                None if job.display_id.is_empty() => Cow::Owned(job.id.to_string()),
                None => escape_for_terminal(&job.display_id),
            },
            escape_for_terminal(&job.tier),
            escape_for_terminal(&job.name),
            escape_for_terminal(&job.user),
            Cow::Borrowed("PD"),
            match job.expected_start_ms {
                ms if ms > 0 => Cow::Owned(rfc3339(ms)),
                _ => Cow::Borrowed("N/A"),
            },
            if job.expected_nodes.is_empty() {
                Cow::Borrowed("N/A")
            } else {
                Cow::Owned(escape_for_terminal(&job.expected_nodes.join(",")).into_owned())
            },
            if job.reason.is_empty() {
                Cow::Borrowed("None")
            } else {
                escape_for_terminal(&job.reason)
            },
        ]);
    }
    let mut out = String::new();
    table.render(&mut out, header);
    out
}

pub const LONG_JOB_COLUMNS: &[Column; 11] = &[
    Column::right("JOBID"),
    Column::left("NAME"),
    Column::left("USER"),
    Column::left("ACCOUNT"),
    Column::left("TIER"),
    Column::left("STATE"),
    Column::right("TIME"),
    Column::right("GPUS"),
    Column::right("PLACE"),
    Column::right("FAIRSHARE"),
    Column::left("NODELIST(REASON)"),
];

/// `yq --long`: the table with the job's account and, for a pending job, its place in its
/// tier's queue (1: next) and its account's fair-share factor at schedd's last pass (`-` for
/// other jobs, and for a job submitted since).
/// One line per job; see [`format_queue`] for the folded form.
pub fn format_job_table_long(jobs: &[JobInfo], now_ms: Millis, header: bool) -> String {
    format_queue(&job_lines(jobs, Fold::Never), now_ms, header, true)
}

/// A `yq --long` line: a [`JobRow`] with three more cells.
struct LongJobRow<'a>(JobRow<'a>);

impl LongJobRow<'_> {
    /// The cell of the short row this column shows, or `None` for the three added ones.
    fn short_column(column: usize) -> Option<usize> {
        match column {
            0..=2 => Some(column),
            3 | 8 | 9 => None,
            4..=7 => Some(column - 1),
            _ => Some(7),
        }
    }

    fn added_cell(&self, column: usize) -> Cow<'_, str> {
        let job = self.0.job;
        match column {
            3 => escape_for_terminal(&job.account),
            8 => job
                .queue_position
                .map_or(Cow::Borrowed("-"), |p| Cow::Owned(p.to_string())),
            _ => job
                .fair_share
                .map_or(Cow::Borrowed("-"), |f| Cow::Owned(format!("{f:.3}"))),
        }
    }
}

impl Row for LongJobRow<'_> {
    fn width(&self, column: usize) -> usize {
        match Self::short_column(column) {
            Some(short) => self.0.width(short),
            None => display_width(&self.added_cell(column)),
        }
    }

    fn write(&self, column: usize, out: &mut String) {
        match Self::short_column(column) {
            Some(short) => self.0.write(short, out),
            None => out.push_str(&self.added_cell(column)),
        }
    }
}

/// The NODELIST(REASON) cell of a job whose usage (its nodes among it) the caller may not see.
const PRIVATE_NODES: &str = "(private)";

/// A job as a `yq` line. Cells are written straight from the record: a queue of ten thousand
/// jobs must list in milliseconds. Text cells go through [`escape_for_terminal`], which borrows
/// unless there is something to escape.
struct JobRow<'a> {
    job: &'a JobInfo,
    /// The JOBID cell of a folded line; `None`: the job's display id, or its id.
    label: Option<&'a str>,
    /// Only running or finished jobs need a formatted time; waiting ones share "0:00".
    time: Cow<'static, str>,
    gpus: u32,
}

impl<'a> JobRow<'a> {
    fn new(line: &'a JobLine<'a>, now_ms: Millis) -> Self {
        let job = line.job;
        let time = match total_run_secs(job, now_ms) {
            // Its run time is not the caller's to see (`scheduler.reports_public = false`).
            _ if job.usage_private => Cow::Borrowed("-"),
            0 => Cow::Borrowed("0:00"),
            secs => Cow::Owned(format_elapsed(secs)),
        };
        JobRow {
            job,
            label: line.label.as_deref(),
            time,
            gpus: gpus_requested(job),
        }
    }
}

impl Row for JobRow<'_> {
    fn width(&self, column: usize) -> usize {
        let job = self.job;
        match column {
            0 => match self.label {
                Some(label) => display_width(label),
                None if job.display_id.is_empty() => decimal_width(job.id),
                None => escaped_width(&job.display_id),
            },
            1 => escaped_width(&job.name),
            2 => escaped_width(&job.user),
            3 => escaped_width(&job.tier),
            4 => escaped_width(shown_state(job)),
            5 => self.time.len(),
            6 => decimal_width(self.gpus.into()),
            _ if !job.alloc.is_empty() => {
                job.alloc
                    .iter()
                    .map(|a| escaped_width(&a.node))
                    .sum::<usize>()
                    + job.alloc.len()
                    - 1
            }
            _ if job.reason.is_empty() && job.usage_private => PRIVATE_NODES.len(),
            _ if job.reason.is_empty() => "(None)".len(),
            _ => escaped_width(&job.reason) + 2,
        }
    }

    fn write(&self, column: usize, out: &mut String) {
        let job = self.job;
        match column {
            0 => match self.label {
                Some(label) => out.push_str(label),
                None if job.display_id.is_empty() => push_decimal(out, job.id),
                None => out.push_str(&escape_for_terminal(&job.display_id)),
            },
            1 => out.push_str(&escape_for_terminal(&job.name)),
            2 => out.push_str(&escape_for_terminal(&job.user)),
            3 => out.push_str(&escape_for_terminal(&job.tier)),
            4 => out.push_str(&escape_for_terminal(shown_state(job))),
            5 => out.push_str(&self.time),
            6 => push_decimal(out, self.gpus.into()),
            _ if !job.alloc.is_empty() => {
                for (i, alloc) in job.alloc.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&escape_for_terminal(&alloc.node));
                }
            }
            _ if job.reason.is_empty() && job.usage_private => out.push_str(PRIVATE_NODES),
            _ if job.reason.is_empty() => out.push_str("(None)"),
            _ => {
                out.push('(');
                out.push_str(&escape_for_terminal(&job.reason));
                out.push(')');
            }
        }
    }
}
