//! How jobs are shown: the `yq` table row, the JSON object (`yq --json`, `yctl show job
//! --json`) and the `yctl show job` text. All take `now_ms` as a parameter so they are pure.

use crate::output::{
    decimal_width, display_width, format_mib, push_decimal, render_table, Column, Row, Table,
};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::LazyLock;
use ysched_common::array::{fold_tasks, JobTarget};
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, rfc3339, Millis};
use ysched_common::JobState;
use ysched_proto::{JobDetail, JobEvent, JobInfo, JobRef, JobSpec, NodeAlloc};

/// Job ids as users type them on a command line: `12`, `12_7`, `12_[1-5,9]`, several joined by
/// commas (the commas inside brackets belong to the task list). What `ycancel`, `yq -j` and
/// `yctl hold|release|requeue` take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetList(pub Vec<JobTarget>);

/// The value parser of a job list: every id is checked, so a typo sends nothing.
pub fn parse_target_list(text: &str) -> Result<TargetList, String> {
    split_job_list(text)
        .into_iter()
        .map(JobTarget::parse)
        .collect::<Result<Vec<_>, _>>()
        .map(TargetList)
}

/// The value parser of one job (`yctl show job`): `12` or `12_7`, not a range of tasks.
pub fn parse_single_target(text: &str) -> Result<JobTarget, String> {
    let target = JobTarget::parse(text)?;
    match target.tasks_named() {
        Some(n) if target.single_task().is_none() => Err(format!(
            "'{}' names {n} tasks; give one job (12) or one task (12_7)",
            ysched_common::text::excerpt(text.trim(), 40),
        )),
        _ => Ok(target),
    }
}

/// `text` split at the commas that are not inside `[...]`.
fn split_job_list(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The targets of several command-line words, in order.
pub fn flatten_targets(lists: &[TargetList]) -> Vec<JobTarget> {
    lists.iter().flat_map(|l| l.0.iter().cloned()).collect()
}

/// Refuses more job ids than one request may carry (`limits::TARGETS`), as schedd would.
pub fn check_target_count(targets: &[JobTarget]) -> anyhow::Result<()> {
    ysched_common::limits::TARGETS
        .check_count(targets.len() as u64)
        .map_err(anyhow::Error::msg)
}

/// The request naming `target`. schedd reads `target`; `job_id` is set for a plain id only, so
/// that a server older than arrays, which reads `job_id` alone, never acts on a task's array
/// (`12_7` is not job 12) but refuses job 0.
pub fn job_ref(target: &JobTarget) -> JobRef {
    JobRef {
        job_id: if target.tasks.is_none() {
            target.id.0
        } else {
            0
        },
        target: target.to_string(),
    }
}

/// How the job is named: `12_7` for an array task, else its id (servers older than arrays
/// send no `display_id`).
pub fn display_id(job: &JobInfo) -> Cow<'_, str> {
    if job.display_id.is_empty() {
        Cow::Owned(job.id.to_string())
    } else {
        Cow::Borrowed(&job.display_id)
    }
}

/// Seconds the job has run in its current (or last) run: 0 while it waits, up to now while it
/// runs, up to its end once finished.
pub fn elapsed_secs(job: &JobInfo, now_ms: Millis) -> u64 {
    let state = JobState::parse(&job.state);
    if job.start_time_ms <= 0 || matches!(state, Some(JobState::Pending | JobState::Held)) {
        return 0;
    }
    // An unknown state with an end time is taken as finished.
    let still_running = state.is_some_and(|s| !s.is_terminal());
    let end = if job.end_time_ms > 0 && !still_running {
        job.end_time_ms
    } else {
        now_ms
    };
    (end.saturating_sub(job.start_time_ms).max(0) / 1000) as u64
}

/// The nodes the job holds, comma-joined, or `None` when it holds none.
pub fn node_list(job: &JobInfo) -> Option<String> {
    match job.alloc.as_slice() {
        [] => None,
        [only] => Some(only.node.clone()),
        allocs => Some(
            allocs
                .iter()
                .map(|a| a.node.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

/// GPUs the job asked for (listings carry no spec, only this number).
pub fn gpus_requested(job: &JobInfo) -> u32 {
    match &job.spec {
        Some(spec) => spec.gpus,
        None => job.gpus_requested,
    }
}

/// An epoch-milliseconds time as RFC 3339, `None` when unset (0).
fn time_or_none(ms: Millis) -> Option<String> {
    (ms > 0).then(|| rfc3339(ms))
}

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
        let time = match elapsed_secs(job, now_ms) {
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
                None => display_width(&escape_for_terminal(&job.display_id)),
            },
            1 => display_width(&escape_for_terminal(&job.name)),
            2 => display_width(&escape_for_terminal(&job.user)),
            3 => display_width(&escape_for_terminal(&job.tier)),
            4 => display_width(&escape_for_terminal(&job.state)),
            5 => self.time.len(),
            6 => decimal_width(self.gpus.into()),
            _ if !job.alloc.is_empty() => {
                job.alloc
                    .iter()
                    .map(|a| display_width(&escape_for_terminal(&a.node)))
                    .sum::<usize>()
                    + job.alloc.len()
                    - 1
            }
            _ if job.reason.is_empty() && job.usage_private => PRIVATE_NODES.len(),
            _ if job.reason.is_empty() => "(None)".len(),
            _ => display_width(&escape_for_terminal(&job.reason)) + 2,
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
            4 => out.push_str(&escape_for_terminal(&job.state)),
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

/// A job as `yq --json` prints it; `yctl show job --json` adds to it. It borrows from the
/// `JobInfo` and builds nothing per job: `yq --json` may print ten thousand of these.
#[derive(Debug, Serialize)]
pub struct JobJson<'a> {
    pub id: u64,
    /// `12_7` for an array task, else the id.
    pub display_id: Cow<'a, str>,
    /// An array task's array id (its first task's job id) and index; null for other jobs.
    pub array_job_id: Option<u64>,
    pub array_task_id: Option<u32>,
    pub name: &'a str,
    pub user: &'a str,
    pub uid: u32,
    pub account: &'a str,
    pub tier: &'a str,
    pub tier_value: i64,
    pub state: &'a str,
    pub reason: &'a str,
    /// A pending job's place in its tier's queue (1: next) at schedd's last scheduling pass;
    /// null for other jobs.
    pub queue_position: Option<u32>,
    /// A pending job's account's fair-share factor (0 to 1, 1: no recent usage) at that pass;
    /// null for other jobs.
    pub fair_share: Option<f64>,
    /// The nodes held, comma-joined; null when none.
    pub node: NodeNames<'a>,
    /// Per node: `{node, gpus, cpus, mem_mib}`.
    pub nodes: NodeAllocs<'a>,
    /// GPU indices held, over all nodes in allocation order.
    pub gpus: HeldGpus<'a>,
    pub gpus_requested: u32,
    pub restart_count: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub submit_time: Timestamp,
    pub start_time: Timestamp,
    pub end_time: Timestamp,
    /// Seconds; null when unlimited.
    pub time_limit: Option<u64>,
    pub checkpoint_dir: &'a str,
    /// The newest file in the checkpoint directory that schedd has heard of; null when none.
    pub last_checkpoint: Timestamp,
    /// A pending job: when schedd's last pass expects it to start; null when it cannot tell.
    pub expected_start: Timestamp,
    /// A pending job: the nodes it is expected to start on; empty when unknown.
    pub expected_nodes: &'a [String],
    /// The job's usage is not the caller's to see (`scheduler.reports_public = false`):
    /// `node`, `nodes`, `gpus`, `start_time`, `end_time`, `restart_count`, `last_checkpoint`
    /// and `fair_share` are empty.
    pub usage_private: bool,
}

pub fn job_to_json(job: &JobInfo) -> JobJson<'_> {
    JobJson {
        id: job.id,
        display_id: display_id(job),
        array_job_id: job.array_job_id,
        array_task_id: job.array_task_id,
        name: &job.name,
        user: &job.user,
        uid: job.uid,
        account: &job.account,
        tier: &job.tier,
        tier_value: job.tier_value,
        state: &job.state,
        reason: &job.reason,
        queue_position: job.queue_position,
        fair_share: job.fair_share,
        node: NodeNames(&job.alloc),
        nodes: NodeAllocs(&job.alloc),
        gpus: HeldGpus(&job.alloc),
        gpus_requested: gpus_requested(job),
        restart_count: job.restart_count,
        exit_code: job.exit_code,
        signal: job.signal,
        submit_time: Timestamp(job.submit_time_ms),
        start_time: Timestamp(job.start_time_ms),
        end_time: Timestamp(job.end_time_ms),
        time_limit: Some(job.time_limit_secs).filter(|&t| t > 0),
        checkpoint_dir: &job.checkpoint_dir,
        last_checkpoint: Timestamp(job.last_checkpoint_ms),
        expected_start: Timestamp(job.expected_start_ms),
        expected_nodes: &job.expected_nodes,
        usage_private: job.usage_private,
    }
}

/// Epoch milliseconds, serialized as RFC 3339, or null when 0 (unset).
#[derive(Debug, Clone, Copy)]
pub struct Timestamp(pub Millis);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match time_or_none(self.0) {
            Some(text) => serializer.serialize_str(&text),
            None => serializer.serialize_none(),
        }
    }
}

/// A job's nodes, serialized comma-joined, or null when it holds none.
#[derive(Debug, Clone, Copy)]
pub struct NodeNames<'a>(pub &'a [NodeAlloc]);

impl fmt::Display for NodeNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, alloc) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&alloc.node)?;
        }
        Ok(())
    }
}

impl Serialize for NodeNames<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_empty() {
            serializer.serialize_none()
        } else {
            serializer.collect_str(self)
        }
    }
}

/// The GPU indices a job holds, serialized as one array over all its nodes.
#[derive(Debug, Clone, Copy)]
pub struct HeldGpus<'a>(pub &'a [NodeAlloc]);

impl Serialize for HeldGpus<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().flat_map(|a| &a.gpus))
    }
}

/// A job's allocation, serialized as `[{node, gpus, cpus, mem_mib}, ...]`.
#[derive(Debug, Clone, Copy)]
pub struct NodeAllocs<'a>(pub &'a [NodeAlloc]);

impl Serialize for NodeAllocs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct NodeAllocJson<'a> {
            node: &'a str,
            gpus: &'a [u32],
            cpus: u32,
            mem_mib: u64,
        }
        serializer.collect_seq(self.0.iter().map(|a| NodeAllocJson {
            node: &a.node,
            gpus: &a.gpus,
            cpus: a.cpus,
            mem_mib: a.mem_mib,
        }))
    }
}

#[derive(Debug, Serialize)]
pub struct EventJson<'a> {
    pub time: Timestamp,
    pub kind: &'a str,
    pub detail: &'a str,
}

/// A job with its full request and history, as `yctl show job --json` prints it: the fields of
/// [`JobJson`] plus these.
#[derive(Debug, Serialize)]
pub struct JobDetailJson<'a> {
    #[serde(flatten)]
    pub job: JobJson<'a>,
    pub gid: u32,
    /// Seconds between SIGTERM and SIGKILL (resolved).
    pub grace: u32,
    pub elapsed: u64,
    pub gpu_type: &'a str,
    pub cpus: u32,
    pub mem_mib: u64,
    pub nodes_requested: u32,
    pub workdir: &'a str,
    pub stdout_path: &'a str,
    pub stderr_path: &'a str,
    pub args: &'a [String],
    /// Whether it was submitted with `--hold` (the state tells whether it is held now).
    pub hold: bool,
    pub no_requeue: bool,
    pub interconnect: &'a str,
    pub constraints: &'a [String],
    /// `--signal` as given: `USR1@60`, `B:TERM@120`; null when none.
    pub warn_signal: Option<String>,
    /// `--array` as given (`0-199%16`), on every task of the array; empty for other jobs.
    pub array: &'a str,
    /// An array task: the most tasks of its array that run at once (`%N`); 0: no limit.
    pub array_max_running: u32,
    /// `--dependency` as given (`afterok:12:13`); empty when none.
    pub dependency: &'a str,
    pub events: Vec<EventJson<'a>>,
}

/// Stands in for a missing spec, so the detail views need not handle its absence field by field.
static EMPTY_SPEC: LazyLock<JobSpec> = LazyLock::new(JobSpec::default);

pub fn job_detail_to_json<'a>(
    job: &'a JobInfo,
    events: &'a [JobEvent],
    now_ms: Millis,
) -> JobDetailJson<'a> {
    let spec = job.spec.as_ref().unwrap_or(&EMPTY_SPEC);
    JobDetailJson {
        job: job_to_json(job),
        gid: job.gid,
        grace: job.grace_secs,
        elapsed: elapsed_secs(job, now_ms),
        gpu_type: &spec.gpu_type,
        cpus: spec.cpus.max(1),
        mem_mib: spec.mem_mib,
        nodes_requested: spec.nodes.max(1),
        workdir: &spec.workdir,
        stdout_path: &spec.stdout_path,
        stderr_path: &spec.stderr_path,
        args: &spec.args,
        hold: spec.hold,
        no_requeue: spec.no_requeue,
        interconnect: &spec.interconnect,
        constraints: &spec.constraints,
        warn_signal: warn_signal(spec),
        array: &spec.array,
        array_max_running: job.array_max_running,
        dependency: &spec.dependency,
        events: events
            .iter()
            .map(|e| EventJson {
                time: Timestamp(e.time_ms),
                kind: &e.kind,
                detail: &e.detail,
            })
            .collect(),
    }
}

/// The job's `--signal` in the form it takes (`USR1@60`), if it asked for one.
pub fn warn_signal(spec: &JobSpec) -> Option<String> {
    spec.warn_signal.as_ref().map(|w| {
        ysched_common::WarnSignal {
            signal: w.signal,
            secs: w.secs,
            batch_only: w.batch_only,
        }
        .to_string()
    })
}

/// `yctl show job`: `Key=Value` lines like `scontrol show job`, then the job's events.
pub fn format_job_detail(detail: &JobDetail, now_ms: Millis) -> String {
    let Some(job) = &detail.job else {
        return String::from("(no job in reply)\n");
    };
    let spec = job.spec.as_ref().unwrap_or(&EMPTY_SPEC);
    let or = |value: &str, default: &'static str| -> String {
        if value.is_empty() {
            default.to_string()
        } else {
            value.to_string()
        }
    };
    let time = |ms: Millis| time_or_none(ms).unwrap_or_else(|| "None".into());
    // What the job used, when it is not the caller's to see (`scheduler.reports_public`).
    let usage = |value: String| -> String {
        if job.usage_private {
            "private".into()
        } else {
            value
        }
    };
    let limit = match spec.time_limit_secs {
        0 => "UNLIMITED".to_string(),
        secs => format_elapsed(secs),
    };
    let exit = format!(
        "{}:{}",
        job.exit_code.map_or("-".into(), |c| c.to_string()),
        job.signal.unwrap_or(0)
    );
    let gpu_indices = job
        .alloc
        .iter()
        .map(|a| {
            let gpus: Vec<String> = a.gpus.iter().map(u32::to_string).collect();
            format!("{}:{}", a.node, gpus.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let stdout = expand_output_path(job, &spec.stdout_path);
    let stderr = if spec.stderr_path.is_empty() {
        stdout.clone()
    } else {
        expand_output_path(job, &spec.stderr_path)
    };
    let args = spec
        .args
        .iter()
        .map(|a| quote_if_needed(a))
        .collect::<Vec<_>>()
        .join(" ");

    let mut first = vec![("JobId", job.id.to_string())];
    if let (Some(array), Some(task)) = (job.array_job_id, job.array_task_id) {
        first.push(("ArrayJobId", array.to_string()));
        first.push(("ArrayTaskId", task.to_string()));
        if job.array_max_running > 0 {
            first.push(("ArrayTaskThrottle", job.array_max_running.to_string()));
        }
    }
    first.push(("JobName", job.name.clone()));
    // Where and when the last pass expects a pending job to start, if it could tell.
    let expected_start = (job.expected_start_ms > 0).then(|| {
        let mut when = rfc3339(job.expected_start_ms);
        if !job.expected_nodes.is_empty() {
            let _ = write!(when, " on {}", job.expected_nodes.join(","));
        }
        [("ExpectedStart", when)]
    });

    let lines: [&[(&str, String)]; 14] = [
        &first,
        &[
            ("UserId", format!("{}({})", job.user, job.uid)),
            ("GroupId", job.gid.to_string()),
            ("Account", job.account.clone()),
        ],
        &[
            ("Tier", job.tier.clone()),
            ("TierValue", job.tier_value.to_string()),
            ("JobState", job.state.clone()),
            ("Reason", or(&job.reason, "None")),
        ],
        &[("Dependency", or(&spec.dependency, "None"))],
        &[
            ("Restarts", usage(job.restart_count.to_string())),
            ("Requeue", u8::from(!spec.no_requeue).to_string()),
            ("ExitCode", exit),
        ],
        &[
            ("RunTime", usage(format_elapsed(elapsed_secs(job, now_ms)))),
            ("TimeLimit", limit),
            ("Grace", job.grace_secs.to_string()),
            ("Signal", warn_signal(spec).unwrap_or_else(|| "None".into())),
        ],
        &[
            ("SubmitTime", time(job.submit_time_ms)),
            ("StartTime", usage(time(job.start_time_ms))),
            ("EndTime", usage(time(job.end_time_ms))),
        ],
        expected_start.as_ref().map_or(&[], |line| line.as_slice()),
        &[
            ("NumNodes", spec.nodes.max(1).to_string()),
            ("GPUs", gpus_requested(job).to_string()),
            ("GpuType", or(&spec.gpu_type, "any")),
            ("CPUs", spec.cpus.max(1).to_string()),
            (
                "Mem",
                if spec.mem_mib == 0 {
                    "None".into()
                } else {
                    format_mib(spec.mem_mib)
                },
            ),
        ],
        &[
            (
                "NodeList",
                usage(node_list(job).unwrap_or_else(|| "None".into())),
            ),
            ("GpuIndices", usage(or(&gpu_indices, "None"))),
        ],
        &[
            ("Interconnect", or(&spec.interconnect, "any")),
            ("Constraints", or(&spec.constraints.join(","), "None")),
        ],
        &[
            ("CheckpointDir", or(&job.checkpoint_dir, "None")),
            ("LastCheckpoint", usage(time(job.last_checkpoint_ms))),
        ],
        &[
            ("WorkDir", spec.workdir.clone()),
            ("StdOut", stdout),
            ("StdErr", stderr),
        ],
        &[("Args", or(&args, "None"))],
    ];

    let mut out = String::new();
    for (i, line) in lines.iter().filter(|l| !l.is_empty()).enumerate() {
        out.push_str(if i == 0 { "" } else { "   " });
        for (j, (key, value)) in line.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            // Every value may hold what a user typed (names, paths, reasons, arguments).
            let _ = write!(out, "{key}={}", escape_for_terminal(value));
        }
        out.push('\n');
    }
    out.push_str("Events:\n");
    if job.usage_private {
        out.push_str("   (private: reports are not public here)\n");
    } else if detail.events.is_empty() {
        out.push_str("   (none)\n");
    }
    let mut table = Table::with_capacity(EVENT_COLUMNS, detail.events.len());
    for event in &detail.events {
        table.push_row([
            Cow::Owned(time(event.time_ms)),
            escape_for_terminal(&event.kind),
            escape_for_terminal(&event.detail),
        ]);
    }
    let mut events = String::new();
    table.render(&mut events, false);
    for line in events.lines() {
        let _ = writeln!(out, "   {line}");
    }
    out
}

/// An output path of the job as scontrol shows it: its patterns filled in (`%N` stays: it
/// differs per node); empty: the default, `ysched-%j.out`, or `ysched-%A_%a.out` for an array
/// task. `%A` is the array's id (a plain job: its own id), `%a` the task index (a plain job: 0),
/// as noded expands them.
pub fn expand_output_path(job: &JobInfo, pattern: &str) -> String {
    let array_task = job.array_job_id.zip(job.array_task_id);
    let pattern = match (pattern.is_empty(), array_task) {
        (false, _) => pattern,
        (true, Some(_)) => "ysched-%A_%a.out",
        (true, None) => "ysched-%j.out",
    };
    ysched_common::text::expand_output_pattern(
        pattern,
        &ysched_common::text::PatternVars {
            job_id: job.id,
            job_name: &job.name,
            user: &job.user,
            node: None,
            array: array_task,
        },
    )
}

const EVENT_COLUMNS: &[Column; 3] = &[
    Column::left("TIME"),
    Column::left("KIND"),
    Column::left("DETAIL"),
];

/// Single-quotes an argument containing blanks or quotes, so the `Args=` line reads unambiguously.
fn quote_if_needed(arg: &str) -> Cow<'_, str> {
    if !arg.is_empty()
        && !arg.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == '\\')
    {
        Cow::Borrowed(arg)
    } else {
        Cow::Owned(format!("'{}'", arg.replace('\'', r"'\''")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z
    pub const T0: Millis = 1_767_225_600_000;

    pub fn running_job() -> JobInfo {
        JobInfo {
            id: 17,
            name: "train".into(),
            user: "alice".into(),
            uid: 1000,
            gid: 1000,
            account: "ml".into(),
            tier: "high".into(),
            tier_value: 10_000,
            state: "RUNNING".into(),
            reason: String::new(),
            alloc: vec![
                NodeAlloc {
                    node: "gpu01".into(),
                    gpus: vec![0, 1],
                    cpus: 8,
                    mem_mib: 16384,
                },
                NodeAlloc {
                    node: "gpu02".into(),
                    gpus: vec![4, 5],
                    cpus: 8,
                    mem_mib: 16384,
                },
            ],
            restart_count: 1,
            exit_code: None,
            signal: None,
            submit_time_ms: T0,
            start_time_ms: T0 + 10_000,
            end_time_ms: 0,
            spec: Some(JobSpec {
                name: "train".into(),
                gpus: 4,
                gpu_type: "A100".into(),
                cpus: 8,
                mem_mib: 16384,
                time_limit_secs: 3600,
                workdir: "/home/alice".into(),
                args: vec!["--lr".into(), "a b".into()],
                nodes: 2,
                constraints: vec!["ib".into()],
                ..Default::default()
            }),
            checkpoint_dir: "/ckpt/17".into(),
            grace_secs: 30,
            gpus_requested: 4,
            time_limit_secs: 3600,
            last_checkpoint_ms: T0 + 15_000,
            fair_share: None,
            queue_position: None,
            ..Default::default()
        }
    }

    pub fn pending_job() -> JobInfo {
        JobInfo {
            id: 18,
            name: "eval".into(),
            user: "bob".into(),
            tier: "low".into(),
            state: "PENDING".into(),
            reason: "Resources".into(),
            submit_time_ms: T0,
            spec: Some(JobSpec {
                gpus: 1,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn elapsed_time_by_state() {
        let now = T0 + 10_000 + 65_000;
        assert_eq!(elapsed_secs(&running_job(), now), 65);
        assert_eq!(elapsed_secs(&pending_job(), now), 0);
        let mut done = running_job();
        done.state = "COMPLETED".into();
        done.end_time_ms = T0 + 10_000 + 3_000;
        assert_eq!(elapsed_secs(&done, now), 3);
        // A requeued job keeps its old start time but is waiting again.
        let mut requeued = running_job();
        requeued.state = "PENDING".into();
        assert_eq!(elapsed_secs(&requeued, now), 0);
    }

    #[test]
    fn table_rows() {
        let now = T0 + 10_000 + 3_725_000;
        let out = format_job_table(&[running_job(), pending_job()], now, true);
        let lines: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            [
                "JOBID",
                "NAME",
                "USER",
                "TIER",
                "STATE",
                "TIME",
                "GPUS",
                "NODELIST(REASON)"
            ]
        );
        assert_eq!(
            lines[1],
            [
                "17",
                "train",
                "alice",
                "high",
                "RUNNING",
                "1:02:05",
                "4",
                "gpu01,gpu02"
            ]
        );
        assert_eq!(
            lines[2],
            [
                "18",
                "eval",
                "bob",
                "low",
                "PENDING",
                "0:00",
                "1",
                "(Resources)"
            ]
        );
        assert_eq!(lines.len(), 3);
        // Columns line up: every row has its STATE at the header's offset.
        let state_at = out.lines().next().unwrap().find("STATE").unwrap();
        for line in out.lines().skip(1) {
            assert!(line[state_at..].starts_with(['R', 'P']), "{line}");
        }
        assert_eq!(format_job_table(&[], now, false), "");
        assert_eq!(format_job_table(&[], now, true).lines().count(), 1);
    }

    #[test]
    fn table_escapes_control_characters_and_keeps_unicode() {
        let mut evil = running_job();
        evil.name = "x\x1b[2J\nforged".into();
        evil.alloc[1].node = "gpu\u{202e}20".into();
        let mut wide = pending_job();
        wide.name = "训练-é".into();
        wide.reason = "Held\r".into();
        let out = format_job_table(&[evil, wide], T0, true);
        assert!(
            !out.contains(|c: char| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{out:?}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[1].contains(" x\\x1b[2J\\nforged "), "{out}");
        assert!(lines[1].ends_with("gpu01,gpu\\u{202e}20"), "{out}");
        assert!(lines[2].contains(" 训练-é "), "{out}");
        assert!(lines[2].ends_with("(Held\\r)"), "{out}");
        // Widths count the escapes, so the columns still line up.
        let column = |line: &str, word: &str| line[..line.find(word).unwrap()].chars().count();
        let state = column(lines[0], "STATE");
        assert_eq!(column(lines[1], "RUNNING"), state, "{out}");
        assert_eq!(column(lines[2], "PENDING"), state, "{out}");
    }

    #[test]
    fn detail_text_escapes_every_value() {
        let mut detail = detail();
        let job = detail.job.as_mut().unwrap();
        job.name = "n\x1b]0;t\x07".into();
        job.account = "acct\n".into();
        job.checkpoint_dir = "/ckpt/\u{2066}x".into();
        let spec = job.spec.as_mut().unwrap();
        spec.workdir = "/w\r".into();
        spec.stdout_path = "%x.out".into();
        spec.args = vec!["a\tb".into()];
        detail.events[0].detail = "tier\nhigh".into();
        let out = format_job_detail(&detail, T0 + 20_000);
        assert!(
            !out.contains(|c: char| (c.is_control() && c != '\n') || c == '\u{2066}'),
            "{out:?}"
        );
        for expected in [
            "JobName=n\\x1b]0;t\\x07",
            "Account=acct\\n",
            "CheckpointDir=/ckpt/\\u{2066}x",
            "WorkDir=/w\\r",
            "StdOut=n\\x1b]0;t\\x07.out",
            "Args='a\\tb'",
            "tier\\nhigh",
        ] {
            assert!(out.contains(expected), "missing {expected} in\n{out}");
        }
        assert_eq!(out.split_once("Events:\n").unwrap().1.lines().count(), 2);
    }

    #[test]
    fn json_object() {
        let value = serde_json::to_value(job_to_json(&running_job())).unwrap();
        assert_eq!(value["id"], 17);
        assert_eq!(value["name"], "train");
        assert_eq!(value["user"], "alice");
        assert_eq!(value["account"], "ml");
        assert_eq!(value["tier"], "high");
        assert_eq!(value["tier_value"], 10_000);
        assert_eq!(value["state"], "RUNNING");
        assert_eq!(value["node"], "gpu01,gpu02");
        assert_eq!(value["gpus"], serde_json::json!([0, 1, 4, 5]));
        assert_eq!(value["nodes"][1]["node"], "gpu02");
        assert_eq!(value["nodes"][1]["gpus"], serde_json::json!([4, 5]));
        assert_eq!(value["restart_count"], 1);
        assert_eq!(value["exit_code"], serde_json::Value::Null);
        assert_eq!(value["submit_time"], "2026-01-01T00:00:00Z");
        assert_eq!(value["start_time"], "2026-01-01T00:00:10Z");
        assert_eq!(value["end_time"], serde_json::Value::Null);
        assert_eq!(value["reason"], "");
        assert_eq!(value["uid"], 1000);
        assert_eq!(value["time_limit"], 3600);
        assert_eq!(value["gpus_requested"], 4);
        assert_eq!(value["checkpoint_dir"], "/ckpt/17");
        assert_eq!(value["last_checkpoint"], "2026-01-01T00:00:15Z");
        assert_eq!(value["signal"], serde_json::Value::Null);

        let value = serde_json::to_value(job_to_json(&pending_job())).unwrap();
        assert_eq!(value["node"], serde_json::Value::Null);
        assert_eq!(value["gpus"], serde_json::json!([]));
        assert_eq!(value["start_time"], serde_json::Value::Null);
        assert_eq!(value["time_limit"], serde_json::Value::Null);
        assert_eq!(value["last_checkpoint"], serde_json::Value::Null);
        assert_eq!(value["reason"], "Resources");
        assert_eq!(value["queue_position"], serde_json::Value::Null);
        assert_eq!(value["fair_share"], serde_json::Value::Null);
        let value = serde_json::to_value(job_to_json(&placed_pending_job())).unwrap();
        assert_eq!(value["queue_position"], 3);
        assert_eq!(value["fair_share"], 0.25);
    }

    /// A pending job whose place the last pass gave.
    fn placed_pending_job() -> JobInfo {
        JobInfo {
            account: "vision".into(),
            reason: "AccountLimit".into(),
            queue_position: Some(3),
            fair_share: Some(0.25),
            ..pending_job()
        }
    }

    #[test]
    fn long_table_shows_account_place_and_fair_share() {
        let now = T0 + 10_000 + 3_725_000;
        let jobs = [running_job(), placed_pending_job(), pending_job()];
        let out = format_job_table_long(&jobs, now, true);
        let lines: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            [
                "JOBID",
                "NAME",
                "USER",
                "ACCOUNT",
                "TIER",
                "STATE",
                "TIME",
                "GPUS",
                "PLACE",
                "FAIRSHARE",
                "NODELIST(REASON)"
            ]
        );
        assert_eq!(
            lines[1],
            [
                "17",
                "train",
                "alice",
                "ml",
                "high",
                "RUNNING",
                "1:02:05",
                "4",
                "-",
                "-",
                "gpu01,gpu02"
            ]
        );
        assert_eq!(
            lines[2],
            [
                "18",
                "eval",
                "bob",
                "vision",
                "low",
                "PENDING",
                "0:00",
                "1",
                "3",
                "0.250",
                "(AccountLimit)"
            ]
        );
        // A job the last pass has not seen, with no account: the cells still line up.
        assert_eq!(lines[3].len(), 10, "{out}");
        let place_at = out.lines().next().unwrap().find("PLACE").unwrap() + "PLACE".len();
        for line in out.lines().skip(1) {
            assert!(
                line[..place_at].ends_with(['-', '3']),
                "PLACE is right-aligned: {line}"
            );
        }
    }

    /// Task `task` of array 12 (`12_[0-199%16]`, job ids 12 to 211) in `state`.
    fn task(task: u32, state: &str, reason: &str) -> JobInfo {
        let mut job = if state == "RUNNING" {
            running_job()
        } else {
            pending_job()
        };
        job.id = 12 + u64::from(task);
        job.name = "sweep".into();
        job.state = state.into();
        job.reason = reason.into();
        job.display_id = format!("12_{task}");
        job.array_job_id = Some(12);
        job.array_task_id = Some(task);
        job.array_max_running = 16;
        job
    }

    fn first_cells(out: &str) -> Vec<&str> {
        out.lines()
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect()
    }

    #[test]
    fn pending_tasks_fold_into_one_line_running_ones_do_not() {
        let mut jobs: Vec<JobInfo> = (0..16).map(|t| task(t, "RUNNING", "")).collect();
        jobs.push(pending_job());
        jobs.extend((16..200).map(|t| task(t, "PENDING", "JobArrayTaskLimit")));
        let now = T0 + 20_000;
        let out = format_queue(&job_lines(&jobs, Fold::Waiting), now, true, false);
        let ids = first_cells(&out);
        assert_eq!(ids.len(), 1 + 16 + 1 + 1, "{out}");
        assert_eq!(ids[0], "JOBID");
        assert_eq!(ids[1], "12_0");
        assert_eq!(ids[16], "12_15");
        assert_eq!(ids[17], "18", "a plain job keeps its place");
        assert_eq!(ids[18], "12_[16-199%16]");
        let folded: Vec<&str> = out.lines().last().unwrap().split_whitespace().collect();
        assert_eq!(
            folded,
            [
                "12_[16-199%16]",
                "sweep",
                "bob",
                "low",
                "PENDING",
                "0:00",
                "1",
                "(JobArrayTaskLimit)"
            ]
        );
        // Right-aligned JOBID column: every line as wide up to the NAME column.
        let name_at = out.lines().next().unwrap().find("NAME").unwrap();
        for line in out.lines().skip(1) {
            assert_eq!(&line[name_at - 2..name_at], "  ", "{line}");
        }

        // --array: one line per task, as the JSON has them.
        let out = format_queue(&job_lines(&jobs, Fold::Never), now, false, false);
        let ids = first_cells(&out);
        assert_eq!(ids.len(), 201);
        assert_eq!(ids[200], "12_199");
        assert!(!out.contains("12_["), "{out}");
        assert_eq!(
            format_job_table(&jobs, now, false),
            out,
            "the plain table never folds"
        );
    }

    #[test]
    fn tasks_fold_by_state_and_reason() {
        let mut jobs = vec![
            task(40, "PENDING", "Priority"),
            task(41, "PENDING", "Dependency"),
            task(42, "PENDING", "Priority"),
            task(43, "HELD", "JobHeldUser"),
            task(45, "PENDING", "Priority"),
            task(44, "HELD", "JobHeldUser"),
            task(46, "COMPLETED", ""),
            task(47, "COMPLETED", ""),
            task(3, "RUNNING", ""),
        ];
        // An array without %N, and another array.
        let mut other = task(1, "PENDING", "Priority");
        other.id = 300;
        other.array_job_id = Some(299);
        other.display_id = "299_1".into();
        let mut other2 = other.clone();
        other2.id = 301;
        other2.array_task_id = Some(2);
        other2.display_id = "299_2".into();
        other.array_max_running = 0;
        other2.array_max_running = 0;
        jobs.extend([other, other2]);
        let lines = job_lines(&jobs, Fold::Waiting);
        let labels: Vec<String> = lines
            .iter()
            .map(|l| {
                l.label
                    .clone()
                    .unwrap_or_else(|| display_id(l.job).into_owned())
            })
            .collect();
        assert_eq!(
            labels,
            [
                "12_[40,42,45%16]",
                "12_41",
                "12_[43-44%16]",
                "12_46",
                "12_47",
                "12_3",
                "299_[1-2]"
            ]
        );
        // Finished and running tasks are never folded, and a folded line shows its state.
        assert_eq!(lines[2].job.state, "HELD");
    }

    #[test]
    fn jobs_from_servers_without_display_ids_show_their_ids() {
        let mut job = task(7, "PENDING", "Priority");
        job.display_id.clear();
        let out = format_job_table(&[job.clone()], T0, false);
        assert!(out.starts_with("19  sweep"), "{out}");
        assert_eq!(display_id(&job), "19");
        let value = serde_json::to_value(job_to_json(&job)).unwrap();
        assert_eq!(value["display_id"], "19");
        // Long form too.
        let out = format_job_table_long(&[task(7, "RUNNING", "")], T0, true);
        assert_eq!(first_cells(&out), ["JOBID", "12_7"]);
        let pair = [
            task(1, "PENDING", "Priority"),
            task(2, "PENDING", "Priority"),
        ];
        let lines = job_lines(&pair, Fold::Waiting);
        let out = format_queue(&lines, T0, false, true);
        assert!(out.starts_with("12_[1-2%16]  sweep  bob"), "{out}");
    }

    #[test]
    fn start_lists_pending_jobs_with_expected_times_and_nodes() {
        let mut reserved = pending_job();
        reserved.id = 30;
        reserved.display_id = "30".into();
        reserved.expected_start_ms = T0 + 1_800_000;
        reserved.expected_nodes = vec!["n1".into(), "n2".into()];
        let mut sooner = pending_job();
        sooner.id = 31;
        sooner.expected_start_ms = T0 + 600_000;
        sooner.expected_nodes = vec!["n3".into()];
        let unknown = pending_job();
        let mut tasks: Vec<JobInfo> = (0..4).map(|t| task(t, "PENDING", "Priority")).collect();
        tasks[0].expected_start_ms = T0 + 900_000;
        tasks[0].expected_nodes = vec!["n1".into()];
        let jobs: Vec<JobInfo> = [running_job(), unknown, reserved, sooner]
            .into_iter()
            .chain(tasks)
            .collect();
        let out = format_start_table(&jobs, true, Fold::Waiting);
        let rows: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[0],
            [
                "JOBID",
                "TIER",
                "NAME",
                "USER",
                "ST",
                "START_TIME",
                "SCHEDNODES",
                "REASON"
            ]
        );
        assert_eq!(
            rows[1],
            [
                "31",
                "low",
                "eval",
                "bob",
                "PD",
                "2026-01-01T00:10:00Z",
                "n3",
                "Resources"
            ]
        );
        assert_eq!(rows[2][0], "12_0");
        assert_eq!(rows[2][5..7], ["2026-01-01T00:15:00Z", "n1"]);
        assert_eq!(rows[3][0], "30");
        assert_eq!(rows[3][6], "n1,n2");
        // Unknown: N/A, last, in the order given; the running job is not listed.
        assert_eq!(
            rows[4],
            ["18", "low", "eval", "bob", "PD", "N/A", "N/A", "Resources"]
        );
        assert_eq!(rows[5][0], "12_[1-3%16]");
        assert_eq!(rows[5][5..], ["N/A", "N/A", "Priority"]);
        assert_eq!(rows.len(), 6, "{out}");
        // --array: every task on its own line.
        let out = format_start_table(&jobs, false, Fold::Never);
        assert_eq!(out.lines().count(), 7, "{out}");
        assert!(!out.contains("12_["), "{out}");
    }

    #[test]
    fn json_has_array_and_expected_start_fields() {
        let mut job = task(7, "PENDING", "JobArrayTaskLimit");
        job.expected_start_ms = T0 + 60_000;
        job.expected_nodes = vec!["n1".into()];
        let value = serde_json::to_value(job_to_json(&job)).unwrap();
        assert_eq!(value["id"], 19);
        assert_eq!(value["display_id"], "12_7");
        assert_eq!(value["array_job_id"], 12);
        assert_eq!(value["array_task_id"], 7);
        assert_eq!(value["expected_start"], "2026-01-01T00:01:00Z");
        assert_eq!(value["expected_nodes"], serde_json::json!(["n1"]));
        assert_eq!(value["reason"], "JobArrayTaskLimit");
        let value = serde_json::to_value(job_to_json(&running_job())).unwrap();
        assert_eq!(value["array_job_id"], serde_json::Value::Null);
        assert_eq!(value["array_task_id"], serde_json::Value::Null);
        assert_eq!(value["expected_start"], serde_json::Value::Null);
        assert_eq!(value["expected_nodes"], serde_json::json!([]));
    }

    #[test]
    fn detail_of_an_array_task_with_a_dependency_and_an_expected_start() {
        let mut job = task(7, "PENDING", "Dependency");
        job.expected_start_ms = T0 + 3_600_000;
        job.expected_nodes = vec!["n1".into()];
        let spec = job.spec.as_mut().unwrap();
        spec.array = "0-199%16".into();
        spec.dependency = "afterok:5".into();
        spec.stderr_path = "logs/%x-%A_%a.err".into();
        let detail = JobDetail {
            job: Some(job),
            events: vec![],
        };
        let out = format_job_detail(&detail, T0);
        assert!(
            out.starts_with(
                "JobId=19 ArrayJobId=12 ArrayTaskId=7 ArrayTaskThrottle=16 JobName=sweep\n"
            ),
            "{out}"
        );
        for expected in [
            "   Dependency=afterok:5\n",
            "   ExpectedStart=2026-01-01T01:00:00Z on n1\n",
            "StdOut=ysched-12_7.out",
            "StdErr=logs/sweep-12_7.err",
        ] {
            assert!(out.contains(expected), "missing {expected} in\n{out}");
        }
        let value = serde_json::to_value(job_detail_to_json(detail.job.as_ref().unwrap(), &[], T0))
            .unwrap();
        assert_eq!(value["array"], "0-199%16");
        assert_eq!(value["array_max_running"], 16);
        assert_eq!(value["dependency"], "afterok:5");
        assert_eq!(value["display_id"], "12_7");
        assert_eq!(value["expected_start"], "2026-01-01T01:00:00Z");

        // A plain job: no array keys, Dependency=None, no ExpectedStart line.
        let out = format_job_detail(&super::tests::detail(), T0 + 20_000);
        assert!(out.contains("   Dependency=None\n"), "{out}");
        assert!(
            !out.contains("ExpectedStart") && !out.contains("Array"),
            "{out}"
        );
    }

    #[test]
    fn output_paths_expand_like_noded_does() {
        let mut job = task(7, "RUNNING", "");
        job.user = "alice".into();
        assert_eq!(expand_output_path(&job, ""), "ysched-12_7.out");
        assert_eq!(
            expand_output_path(&job, "%x/%A_%a-%j-%u-%N-%%a-%"),
            "sweep/12_7-19-alice-%N-%a-%"
        );
        let plain = running_job();
        assert_eq!(expand_output_path(&plain, ""), "ysched-17.out");
        assert_eq!(expand_output_path(&plain, "o-%A_%a"), "o-17_0");
    }

    #[test]
    fn job_lists_split_outside_brackets() {
        let names = |text: &str| -> Vec<String> {
            parse_target_list(text)
                .unwrap()
                .0
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(names("12"), ["12"]);
        assert_eq!(names("12,13_7"), ["12", "13_7"]);
        assert_eq!(names("12_[1-5,9],14"), ["12_[1-5,9]", "14"]);
        assert_eq!(names("12_[3]"), ["12_3"]);
        for bad in ["", "12,", ",12", "12_[1-5", "12_1-5]", "x", "12_[1-5],y"] {
            assert!(parse_target_list(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_single_target("12_[1,2]").is_err());
        assert_eq!(parse_single_target("12_[2]").unwrap().to_string(), "12_2");
        let r = job_ref(&parse_single_target("12").unwrap());
        assert_eq!((r.job_id, r.target.as_str()), (12, "12"));
        let r = job_ref(&parse_single_target("12_2").unwrap());
        assert_eq!((r.job_id, r.target.as_str()), (0, "12_2"));
    }

    fn detail() -> JobDetail {
        JobDetail {
            job: Some(running_job()),
            events: vec![
                JobEvent {
                    time_ms: T0,
                    kind: "SUBMITTED".into(),
                    detail: "tier high".into(),
                },
                JobEvent {
                    time_ms: T0 + 10_000,
                    kind: "STARTED".into(),
                    detail: "gpu01,gpu02".into(),
                },
            ],
        }
    }

    #[test]
    fn detail_json_extends_the_job_object() {
        let detail = detail();
        let value = serde_json::to_value(job_detail_to_json(
            detail.job.as_ref().unwrap(),
            &detail.events,
            T0 + 20_000,
        ))
        .unwrap();
        assert_eq!(value["id"], 17);
        assert_eq!(value["node"], "gpu01,gpu02");
        assert_eq!(value["grace"], 30);
        assert_eq!(value["gpu_type"], "A100");
        assert_eq!(value["nodes_requested"], 2);
        assert_eq!(value["elapsed"], 10);
        assert_eq!(value["args"], serde_json::json!(["--lr", "a b"]));
        assert_eq!(value["events"][1]["kind"], "STARTED");
        assert_eq!(value["events"][0]["time"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn detail_text() {
        let out = format_job_detail(&detail(), T0 + 20_000);
        assert!(out.starts_with("JobId=17 JobName=train\n"), "{out}");
        for expected in [
            "UserId=alice(1000)",
            "JobState=RUNNING",
            "Reason=None",
            "ExitCode=-:0",
            "RunTime=0:10",
            "TimeLimit=1:00:00",
            "Grace=30",
            "NodeList=gpu01,gpu02",
            "GpuIndices=gpu01:0,1 gpu02:4,5",
            "CheckpointDir=/ckpt/17 LastCheckpoint=2026-01-01T00:00:15Z",
            "StdOut=ysched-17.out",
            "Args=--lr 'a b'",
            "Constraints=ib",
            "Mem=16G",
        ] {
            assert!(out.contains(expected), "missing {expected} in\n{out}");
        }
        let events = out.split_once("Events:\n").unwrap().1;
        assert_eq!(events.lines().count(), 2);
        assert!(events.lines().nth(1).unwrap().contains("STARTED"));
        assert!(out.contains("Grace=30 Signal=None\n"), "{out}");
    }

    /// `running_job` as schedd sends it to a user who may not see its usage.
    fn private_running_job() -> JobInfo {
        JobInfo {
            alloc: Vec::new(),
            start_time_ms: 0,
            restart_count: 0,
            last_checkpoint_ms: 0,
            usage_private: true,
            ..running_job()
        }
    }

    #[test]
    fn a_job_whose_usage_is_private_says_so_instead_of_showing_zeros() {
        let now = T0 + 20_000;
        let out = format_job_table_long(&[private_running_job()], now, false);
        let cells: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "17",
                "train",
                "alice",
                "ml",
                "high",
                "RUNNING",
                "-",
                "4",
                "-",
                "-",
                "(private)"
            ]
        );
        let value = serde_json::to_value(job_to_json(&private_running_job())).unwrap();
        assert_eq!(value["usage_private"], true);
        assert_eq!(value["node"], serde_json::Value::Null);
        assert_eq!(value["start_time"], serde_json::Value::Null);
        let plain = serde_json::to_value(job_to_json(&running_job())).unwrap();
        assert_eq!(plain["usage_private"], false);

        let detail = JobDetail {
            job: Some(private_running_job()),
            events: Vec::new(),
        };
        let out = format_job_detail(&detail, now);
        for expected in [
            "Restarts=private",
            "RunTime=private",
            "StartTime=private EndTime=private",
            "NodeList=private GpuIndices=private",
            "LastCheckpoint=private",
            "JobState=RUNNING",
            "GPUs=4",
        ] {
            assert!(out.contains(expected), "missing {expected} in\n{out}");
        }
        assert!(
            out.ends_with("Events:\n   (private: reports are not public here)\n"),
            "{out}"
        );
    }

    #[test]
    fn a_warning_signal_and_out_of_memory_are_shown() {
        let mut detail = detail();
        let job = detail.job.as_mut().unwrap();
        job.state = "OUT_OF_MEMORY".into();
        job.reason = "out of memory: the job exceeded its memory limit (--mem 16G) on gpu01".into();
        job.spec.as_mut().unwrap().warn_signal = Some(ysched_proto::WarnSignal {
            signal: 10,
            secs: 60,
            batch_only: false,
        });
        let out = format_job_detail(&detail, T0 + 20_000);
        assert!(out.contains("Signal=USR1@60"), "{out}");
        assert!(out.contains("JobState=OUT_OF_MEMORY"), "{out}");
        assert!(out.contains("(--mem 16G) on gpu01"), "{out}");
        let job = detail.job.as_mut().unwrap();
        job.spec
            .as_mut()
            .unwrap()
            .warn_signal
            .as_mut()
            .unwrap()
            .batch_only = true;
        let value = serde_json::to_value(job_detail_to_json(job, &[], T0)).unwrap();
        assert_eq!(value["warn_signal"], "B:USR1@60");
        assert_eq!(value["state"], "OUT_OF_MEMORY");
        let value = serde_json::to_value(job_detail_to_json(&pending_job(), &[], T0)).unwrap();
        assert_eq!(value["warn_signal"], serde_json::Value::Null);
    }
}
