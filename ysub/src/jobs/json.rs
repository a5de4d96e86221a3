//! Jobs as JSON: `yq --json` and `yctl show job --json`, borrowing from the reply.

use super::show::warn_signal;
use super::{display_id, elapsed_secs, gpus_requested, total_run_secs};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;
use ysched_common::time::Millis;
use ysched_proto::{JobEvent, JobInfo, JobSpec, NodeAlloc};

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
    /// Who holds a HELD job: `"admin"` (reason `JobHeldAdmin`: only an administrator may
    /// release it) or `"user"` (`JobHeldUser`); null for a job not held.
    pub hold: Option<&'a str>,
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
    /// Seconds run in all, over every run (requeues included): `yq`'s TIME.
    pub run_secs_total: u64,
    /// Seconds of the current (or last) run only.
    pub run_secs_last: u64,
    /// Running, in the grace of a cancel (`yq` shows COMPLETING, squeue's CG); `state`
    /// stays RUNNING.
    pub cancelling: bool,
}

pub fn job_to_json(job: &JobInfo) -> JobJson<'_> {
    job_to_json_at(job, ysched_common::time::now_ms())
}

/// [`job_to_json`] with the clock given (the run times of a running job count up to it).
pub fn job_to_json_at(job: &JobInfo, now_ms: Millis) -> JobJson<'_> {
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
        hold: Some(job.hold.as_str()).filter(|h| !h.is_empty()),
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
        run_secs_total: total_run_secs(job, now_ms),
        run_secs_last: elapsed_secs(job, now_ms),
        cancelling: job.cancelling,
    }
}

/// Epoch milliseconds, serialized as RFC 3339, or null when 0 (unset).
#[derive(Debug, Clone, Copy)]
pub struct Timestamp(pub Millis);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 > 0 {
            serializer.serialize_str(ysched_common::time::Rfc3339::new(self.0).as_str())
        } else {
            serializer.serialize_none()
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
    /// The output file as the job opens it (its patterns filled in, `%N` left: it differs
    /// per node), as `yctl show job` prints it.
    pub stdout_path: String,
    /// The error file, likewise (the output file when none was given).
    pub stderr_path: String,
    /// `-o` as given (empty: the default, `ysched-%j.out`).
    pub stdout_pattern: &'a str,
    /// `-e` as given (empty: the same file as the output).
    pub stderr_pattern: &'a str,
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
    /// `--begin`, seconds since the epoch; 0: none.
    pub begin_unix_secs: u64,
    /// `-w/--nodelist` and `-x/--exclude` (node names); `--exclusive`.
    pub nodelist: &'a [String],
    pub exclude: &'a [String],
    pub exclusive: bool,
    pub events: Vec<EventJson<'a>>,
}

/// Stands in for a missing spec, so the detail views need not handle its absence field by field.
pub(super) static EMPTY_SPEC: LazyLock<JobSpec> = LazyLock::new(JobSpec::default);

pub fn job_detail_to_json<'a>(
    job: &'a JobInfo,
    events: &'a [JobEvent],
    now_ms: Millis,
) -> JobDetailJson<'a> {
    let spec = job.spec.as_deref().unwrap_or(&EMPTY_SPEC);
    JobDetailJson {
        job: job_to_json_at(job, now_ms),
        gid: job.gid,
        grace: job.grace_secs,
        elapsed: elapsed_secs(job, now_ms),
        gpu_type: &spec.gpu_type,
        cpus: spec.cpus.max(1),
        mem_mib: spec.mem_mib,
        nodes_requested: spec.nodes.max(1),
        workdir: &spec.workdir,
        stdout_path: super::expand_output_path(job, &spec.stdout_path),
        stderr_path: if spec.stderr_path.is_empty() {
            super::expand_output_path(job, &spec.stdout_path)
        } else {
            super::expand_output_path(job, &spec.stderr_path)
        },
        stdout_pattern: &spec.stdout_path,
        stderr_pattern: &spec.stderr_path,
        args: &spec.args,
        hold: spec.hold,
        no_requeue: spec.no_requeue,
        interconnect: &spec.interconnect,
        constraints: &spec.constraints,
        warn_signal: warn_signal(spec),
        array: &spec.array,
        array_max_running: job.array_max_running,
        dependency: &spec.dependency,
        begin_unix_secs: spec.begin_unix_secs,
        nodelist: &spec.nodelist,
        exclude: &spec.exclude,
        exclusive: spec.exclusive,
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
