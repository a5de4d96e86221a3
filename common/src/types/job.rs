//! A job as schedd keeps it: its id, state, validated spec, stop request and history.

use super::{NodeAlloc, Owner, PartsProgress};
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Job ids increase and are never reused, also across crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Held,
    Running,
    /// Evicted for a higher tier: SIGTERM sent, waiting for its exit within the grace.
    Preempting,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    /// Evicted with `--no-requeue` (or past the requeue limit).
    Preempted,
    /// The kernel killed a process of the job for going over its memory limit (`--mem`).
    OutOfMemory,
}

impl JobState {
    pub const ALL: [JobState; 11] = [
        JobState::Pending,
        JobState::Held,
        JobState::Running,
        JobState::Preempting,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::Preempted,
        JobState::OutOfMemory,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Held => "HELD",
            JobState::Running => "RUNNING",
            JobState::Preempting => "PREEMPTING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::Preempted => "PREEMPTED",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
        }
    }

    /// Accepts the full name or squeue's short codes (PD, R, CD, ...), any case.
    pub fn parse(s: &str) -> Option<JobState> {
        let u = s.trim().to_ascii_uppercase();
        let short = match u.as_str() {
            "PD" => Some(JobState::Pending),
            "R" => Some(JobState::Running),
            "CD" => Some(JobState::Completed),
            "F" => Some(JobState::Failed),
            "CA" => Some(JobState::Cancelled),
            "TO" => Some(JobState::Timeout),
            "NF" => Some(JobState::NodeFail),
            "PR" => Some(JobState::Preempted),
            "OOM" => Some(JobState::OutOfMemory),
            _ => None,
        };
        short.or_else(|| JobState::ALL.into_iter().find(|st| st.as_str() == u))
    }

    /// [`JobState::parse`], or the one refusal of a word that is no job state, naming every
    /// state: `invalid job state 'X': use one of PENDING, HELD, ... (or short codes like PD,
    /// R, CD)`. For every filter by state (`yq -t`, `ycancel -t`).
    pub fn parse_named(s: &str) -> Result<JobState, String> {
        JobState::parse(s).ok_or_else(|| {
            let known: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            format!(
                "invalid job state '{}': use one of {} (or short codes like PD, R, CD)",
                crate::text::excerpt(s, 32),
                known.join(", ")
            )
        })
    }

    /// A finished job never changes state again.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            JobState::Pending | JobState::Held | JobState::Running | JobState::Preempting
        )
    }

    /// Holds GPUs on a node.
    pub fn holds_resources(self) -> bool {
        matches!(self, JobState::Running | JobState::Preempting)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
/// Who holds a HELD job, as Slurm tells them apart: a user's hold may be released by the job's
/// owner or an administrator, an administrator's only by an administrator. A job held by an
/// earlier version (which had one kind of hold) reads as held by its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeldBy {
    /// Its owner (or an administrator on the owner's behalf, at submit).
    #[default]
    User,
    /// An administrator (`Config::is_admin`).
    Admin,
}

impl HeldBy {
    /// Slurm's pending reason of a job so held: `JobHeldUser`, `JobHeldAdmin`.
    pub fn reason(self) -> &'static str {
        match self {
            HeldBy::User => "JobHeldUser",
            HeldBy::Admin => "JobHeldAdmin",
        }
    }

    /// `user`, `admin`: as `yq --json` and `yctl show job` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldBy::User => "user",
            HeldBy::Admin => "admin",
        }
    }
}

/// Whether `value` is its type's default. Such fields are left out of the records schedd
/// stores (and of its replicas' log entries) and read back as the default: a typical
/// finished job's record was 1,130 bytes with them, 470 without, and sled replays its log
/// (a year of history) when schedd opens the store.
pub fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// A validated submit request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct JobSpec {
    #[serde(skip_serializing_if = "is_default")]
    pub name: String,
    #[serde(skip_serializing_if = "is_default")]
    pub tier: String,
    #[serde(skip_serializing_if = "is_default")]
    pub gpus: u32,
    /// Accepted GPU models (`A100|H100` gives two); empty accepts any.
    #[serde(skip_serializing_if = "is_default")]
    pub gpu_types: Vec<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub cpus: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub mem_mib: u64,
    #[serde(skip_serializing_if = "is_default")]
    pub time_limit_secs: Option<u64>,
    #[serde(skip_serializing_if = "is_default")]
    pub grace_secs: Option<u32>,
    #[serde(skip_serializing_if = "is_default")]
    pub checkpoint_dir: Option<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub account: String,
    #[serde(skip_serializing_if = "is_default")]
    pub stdout_path: Option<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub stderr_path: Option<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub workdir: String,
    #[serde(skip_serializing_if = "is_default")]
    pub script: String,
    #[serde(skip_serializing_if = "is_default")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "is_default")]
    pub hold: bool,
    #[serde(skip_serializing_if = "is_default")]
    pub nodes: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub no_requeue: bool,
    #[serde(skip_serializing_if = "is_default")]
    pub interconnect: Option<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub constraints: Vec<String>,
    /// `--signal`: a signal sent before the time limit.
    #[serde(skip_serializing_if = "is_default")]
    pub warn_signal: Option<crate::signals::WarnSignal>,
    /// `--array`: this spec is shared by every task of an array (see [`crate::array`]).
    #[serde(skip_serializing_if = "is_default")]
    pub array: Option<crate::array::ArraySpec>,
    /// `--dependency`, resolved into job ids at submit.
    #[serde(skip_serializing_if = "is_default")]
    pub dependency: Option<crate::dependency::Dependency>,
    /// `-w/--nodelist`: the job runs on exactly these nodes.
    #[serde(skip_serializing_if = "is_default")]
    pub nodelist: Vec<String>,
    /// `-x/--exclude`: the job never runs on these nodes.
    #[serde(skip_serializing_if = "is_default")]
    pub exclude: Vec<String>,
    /// `--exclusive`: the job takes whole nodes.
    #[serde(skip_serializing_if = "is_default")]
    pub exclusive: bool,
    /// `--begin`: not started before this time (seconds since the epoch).
    #[serde(skip_serializing_if = "is_default")]
    pub begin_unix_secs: Option<u64>,
    /// `--mail-type`: the events mailed to `mail_user` (upper case, `ALL` expanded).
    #[serde(skip_serializing_if = "is_default")]
    pub mail_types: Vec<String>,
    /// `--mail-user`: the address mailed (empty: the user).
    #[serde(skip_serializing_if = "is_default")]
    pub mail_user: String,
    /// `--ntasks-per-node`: processes the job's own launcher starts per node (0: not given).
    #[serde(skip_serializing_if = "is_default")]
    pub ntasks_per_node: u32,
    /// Slurm's partition as given (the tier it mapped to is `tier`); empty: none given.
    #[serde(skip_serializing_if = "is_default")]
    pub partition: String,
    /// Slurm's QOS as given (mapped to `tier`); empty: none given.
    #[serde(skip_serializing_if = "is_default")]
    pub qos: String,
    /// `--slurm-env`: the job sees Slurm's `SLURM_*` variables too.
    #[serde(skip_serializing_if = "is_default")]
    pub slurm_env: bool,
    /// `--open-mode=append`: output files are appended to.
    #[serde(skip_serializing_if = "is_default")]
    pub open_append: bool,
    /// `--comment`: free text kept with the job.
    #[serde(skip_serializing_if = "is_default")]
    pub comment: String,
}

/// Why a running job was asked to stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    Cancel {
        by: String,
    },
    Preempt {
        by: JobId,
    },
    NodeDrain,
    /// `yctl requeue` by `by`: back to the queue once stopped.
    Requeue {
        by: String,
    },
    /// GPU `gpu` of `node`, which the job holds, failed (`fault`, as its node's health monitor
    /// said): the job is requeued once stopped, when it may be (see
    /// `lifecycle::may_requeue`), else it ends NODE_FAIL.
    GpuFailed {
        node: String,
        gpu: u32,
        fault: String,
    },
}

impl StopReason {
    /// `GPU 3 of n1 failed: XID 79: GPU has fallen off the bus`, for a [`StopReason::GpuFailed`].
    pub fn gpu_failure(&self) -> Option<String> {
        match self {
            StopReason::GpuFailed { node, gpu, fault } => {
                Some(format!("GPU {gpu} of {node} failed: {fault}"))
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    pub reason: StopReason,
    pub at: Millis,
    pub grace_secs: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    /// What was asked for, fixed at submit; shared, so that copying a job (into the
    /// scheduler's copy, for `yctl show job`) copies no strings.
    pub spec: Arc<JobSpec>,
    /// Who submitted it, fixed at submit; shared like the spec.
    pub owner: Arc<Owner>,
    /// Tier value at submit: the tier's config may change later, the job's place may not.
    pub tier_value: i64,
    pub state: JobState,
    /// Why pending or held, or how it ended; empty when running normally.
    #[serde(default, skip_serializing_if = "is_default")]
    pub reason: String,
    /// Who holds it, while HELD (see [`Job::hold`]); [`HeldBy::User`] otherwise.
    #[serde(default, skip_serializing_if = "is_default")]
    pub held_by: HeldBy,
    #[serde(default, skip_serializing_if = "is_default")]
    pub alloc: Vec<NodeAlloc>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub restart_count: u32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub signal: Option<i32>,
    pub submit_time: Millis,
    #[serde(default, skip_serializing_if = "is_default")]
    pub start_time: Option<Millis>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub end_time: Option<Millis>,
    /// The agent confirmed the process started (a running job the agent does not know is
    /// requeued when unconfirmed, NODE_FAIL when confirmed).
    #[serde(default, skip_serializing_if = "is_default")]
    pub launched: bool,
    /// Resolved grace and checkpoint directory.
    pub grace_secs: u32,
    pub checkpoint_dir: String,
    /// Boxed: set only while a job is being stopped, and inline it made every job 64 bytes
    /// larger in each of schedd's copies (the records, the scheduler's, `show job`'s).
    #[serde(default, skip_serializing_if = "is_default")]
    pub stop: Option<Box<StopRequest>>,
    /// When the job last saved a checkpoint, where known.
    #[serde(default, skip_serializing_if = "is_default")]
    pub last_checkpoint: Option<Millis>,
    /// Progress of a multi-node run: which parts have ended.
    #[serde(default, skip_serializing_if = "PartsProgress::is_empty")]
    pub parts: PartsProgress,
    /// Launches of the current run that never reached (or were never confirmed by) an agent;
    /// at `scheduler.max_launch_attempts` the job ends FAILED instead of cycling.
    #[serde(default, skip_serializing_if = "is_default")]
    pub launch_attempts: u32,
    /// When the current wait began: submit, release from hold, or requeue (the start of the
    /// wait that `RunRecord::wait_ms` measures). `None` in records written before it existed:
    /// the submit time stands in.
    #[serde(default, skip_serializing_if = "is_default")]
    pub queued_at: Option<Millis>,
    /// The task of an array this job is (`12_7`); `None` for a plain job.
    #[serde(default, skip_serializing_if = "is_default")]
    pub array: Option<crate::array::ArrayTask>,
    /// How long its earlier runs lasted, summed (each from its start to the end that put the
    /// job back in the queue): with the current run, the job's whole run time (`yq`'s TIME).
    #[serde(default, skip_serializing_if = "is_default")]
    pub run_ms_before: crate::time::Millis,
}

impl Job {
    /// `12_7` for an array task, `19` otherwise.
    pub fn display_id(&self) -> String {
        crate::array::display_id(self.id, self.array.as_ref())
    }

    /// Who holds it, when it is HELD.
    pub fn hold(&self) -> Option<HeldBy> {
        (self.state == JobState::Held).then_some(self.held_by)
    }

    /// Why it waits, or how it ended, as `yq` shows it: a HELD job's is its hold's (Slurm's
    /// `JobHeldUser` or `JobHeldAdmin`, whatever an earlier version wrote), others' their own.
    pub fn reason_shown(&self) -> &str {
        match self.hold() {
            Some(by) => by.reason(),
            None => &self.reason,
        }
    }

    /// Has started at least once (now running, or requeued after a run).
    pub fn has_run(&self) -> bool {
        self.start_time.is_some() || self.restart_count > 0
    }

    /// Holds resources on `node`: a part of it runs (or is being stopped) there.
    pub fn runs_on(&self, node: &str) -> bool {
        self.state.holds_resources() && self.alloc.iter().any(|a| a.node == node)
    }

    pub fn gpus_held(&self) -> impl Iterator<Item = (&str, u32)> {
        self.alloc
            .iter()
            .flat_map(|a| a.gpus.iter().map(move |g| (a.node.as_str(), *g)))
    }
}

/// An entry of a job's append-only history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    pub time: Millis,
    pub kind: String,
    pub detail: String,
}
