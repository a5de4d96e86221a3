//! How jobs are shown: the `yq` table row, the JSON object (`yq --json`, `yctl show job
//! --json`) and the `yctl show job` text. All take `now_ms` as a parameter so they are pure.

use crate::output::{
    decimal_width, display_width, format_mib, push_decimal, render_table, Column, Row, Table,
};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::sync::LazyLock;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, rfc3339, Millis};
use ysched_common::JobState;
use ysched_proto::{JobDetail, JobEvent, JobInfo, JobSpec, NodeAlloc};

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
pub fn format_job_table(jobs: &[JobInfo], now_ms: Millis, header: bool) -> String {
    let rows: Vec<JobRow> = jobs.iter().map(|job| JobRow::new(job, now_ms)).collect();
    let mut out = String::new();
    render_table(JOB_COLUMNS, &rows, header, &mut out);
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
pub fn format_job_table_long(jobs: &[JobInfo], now_ms: Millis, header: bool) -> String {
    let rows: Vec<LongJobRow> = jobs
        .iter()
        .map(|job| LongJobRow(JobRow::new(job, now_ms)))
        .collect();
    let mut out = String::new();
    render_table(LONG_JOB_COLUMNS, &rows, header, &mut out);
    out
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

/// A job as a `yq` line. Cells are written straight from the record: a queue of ten thousand
/// jobs must list in milliseconds. Text cells go through [`escape_for_terminal`], which borrows
/// unless there is something to escape.
struct JobRow<'a> {
    job: &'a JobInfo,
    /// Only running or finished jobs need a formatted time; waiting ones share "0:00".
    time: Cow<'static, str>,
    gpus: u32,
}

impl<'a> JobRow<'a> {
    fn new(job: &'a JobInfo, now_ms: Millis) -> Self {
        let time = match elapsed_secs(job, now_ms) {
            0 => Cow::Borrowed("0:00"),
            secs => Cow::Owned(format_elapsed(secs)),
        };
        JobRow {
            job,
            time,
            gpus: gpus_requested(job),
        }
    }
}

impl Row for JobRow<'_> {
    fn width(&self, column: usize) -> usize {
        let job = self.job;
        match column {
            0 => decimal_width(job.id),
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
            _ if job.reason.is_empty() => "(None)".len(),
            _ => display_width(&escape_for_terminal(&job.reason)) + 2,
        }
    }

    fn write(&self, column: usize, out: &mut String) {
        let job = self.job;
        match column {
            0 => push_decimal(out, job.id),
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
}

pub fn job_to_json(job: &JobInfo) -> JobJson<'_> {
    JobJson {
        id: job.id,
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
    // As scontrol does, show the paths with the job's own patterns filled in (%N stays: it
    // differs per node).
    let expand = |pattern: &str| {
        pattern
            .replace("%%", "\u{0}")
            .replace("%j", &job.id.to_string())
            .replace("%x", &job.name)
            .replace("%u", &job.user)
            .replace('\u{0}', "%")
    };
    let stdout = if spec.stdout_path.is_empty() {
        expand("ysched-%j.out")
    } else {
        expand(&spec.stdout_path)
    };
    let stderr = if spec.stderr_path.is_empty() {
        stdout.clone()
    } else {
        expand(&spec.stderr_path)
    };
    let args = spec
        .args
        .iter()
        .map(|a| quote_if_needed(a))
        .collect::<Vec<_>>()
        .join(" ");

    let lines: [&[(&str, String)]; 12] = [
        &[("JobId", job.id.to_string()), ("JobName", job.name.clone())],
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
        &[
            ("Restarts", job.restart_count.to_string()),
            ("Requeue", u8::from(!spec.no_requeue).to_string()),
            ("ExitCode", exit),
        ],
        &[
            ("RunTime", format_elapsed(elapsed_secs(job, now_ms))),
            ("TimeLimit", limit),
            ("Grace", job.grace_secs.to_string()),
            ("Signal", warn_signal(spec).unwrap_or_else(|| "None".into())),
        ],
        &[
            ("SubmitTime", time(job.submit_time_ms)),
            ("StartTime", time(job.start_time_ms)),
            ("EndTime", time(job.end_time_ms)),
        ],
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
            ("NodeList", node_list(job).unwrap_or_else(|| "None".into())),
            ("GpuIndices", or(&gpu_indices, "None")),
        ],
        &[
            ("Interconnect", or(&spec.interconnect, "any")),
            ("Constraints", or(&spec.constraints.join(","), "None")),
        ],
        &[
            ("CheckpointDir", or(&job.checkpoint_dir, "None")),
            ("LastCheckpoint", time(job.last_checkpoint_ms)),
        ],
        &[
            ("WorkDir", spec.workdir.clone()),
            ("StdOut", stdout),
            ("StdErr", stderr),
        ],
        &[("Args", or(&args, "None"))],
    ];

    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
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
    if detail.events.is_empty() {
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
