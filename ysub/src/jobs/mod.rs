//! How jobs are named and shown: the ids users type (`targets`), the `yq` tables (`table`),
//! the JSON objects (`json`: `yq --json`, `yctl show job --json`) and the `yctl show job` text
//! (`show`), and the columns `yq --format` chooses (`format`). All take `now_ms` as a
//! parameter so they are pure.

pub mod format;
mod json;
mod show;
mod table;
mod targets;

pub use json::{
    job_detail_to_json, job_to_json, job_to_json_at, EventJson, HeldGpus, JobDetailJson, JobJson,
    NodeAllocs, NodeNames, Timestamp,
};
pub use show::{expand_output_path, format_job_detail, warn_signal};
pub use table::{
    format_job_table, format_job_table_long, format_queue, format_start_table, job_lines, Fold,
    JobLine, JOB_COLUMNS, LONG_JOB_COLUMNS, START_COLUMNS,
};
pub use targets::{
    check_target_count, flatten_targets, job_ref, parse_single_target, parse_target_list,
    TargetList,
};

use std::borrow::Cow;
use ysched_common::time::{rfc3339, Millis};
use ysched_common::JobState;
use ysched_proto::JobInfo;

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

/// Seconds the job has run in all: its earlier runs (before requeues) and the current or
/// last one (`yq`'s TIME; `--json`'s `run_secs_total`).
pub fn total_run_secs(job: &JobInfo, now_ms: Millis) -> u64 {
    (job.run_ms_before.max(0) / 1000) as u64 + elapsed_secs(job, now_ms)
}

/// The state as `yq` shows it: a running job in the grace of a cancel is `COMPLETING`
/// (squeue's CG), else the state schedd sent.
pub fn shown_state(job: &JobInfo) -> &str {
    if job.cancelling {
        "COMPLETING"
    } else {
        &job.state
    }
}

/// The state as squeue's compact code (`%t`): PD (pending or held: squeue shows a held job
/// pending, its reason saying why), R, CG (in a cancel's grace, or being preempted), CD, F,
/// CA, TO, NF, PR, OOM: Slurm's words ([`crate::slurm::words`]), as `squeue` gives them.
pub fn compact_state(job: &JobInfo) -> &'static str {
    crate::slurm::words::slurm_job_state(job).short
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
pub(super) fn time_or_none(ms: Millis) -> Option<String> {
    (ms > 0).then(|| rfc3339(ms))
}

#[cfg(test)]
pub(crate) mod tests;
