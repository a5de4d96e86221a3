//! A run of a job: what it holds on each node, how far the parts of a multi-node run have
//! got, and the usage record written when the run ends.

use super::JobId;
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What one job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAlloc {
    pub node: String,
    pub gpus: Vec<u32>,
    pub cpus: u32,
    pub mem_mib: u64,
}

/// The usage of one run of one job, recorded durably when the run ends (in the same batch as
/// the job's change), whatever its end: completed, failed, cancelled, timed out, node lost,
/// preempted (requeued or not), requeued on request or after a fence. The unit of accounting,
/// fair share and reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub job_id: JobId,
    /// Of the job, 0 for its first run.
    pub restart_count: u32,
    pub account: String,
    pub user: String,
    pub uid: u32,
    pub tier: String,
    /// GPUs and CPUs the run held (all its nodes).
    pub gpus: u32,
    pub cpus: u32,
    /// When its wait began (`Job::queued_at`), when it started, when it ended.
    pub queued_at: Millis,
    pub start: Millis,
    pub end: Millis,
    /// How the run ended: the job's final state (`COMPLETED`, `FAILED`, `CANCELLED`,
    /// `TIMEOUT`, `NODE_FAIL`, `OUT_OF_MEMORY`, `PREEMPTED`), or `REQUEUED` when it went back
    /// to the queue (after a preemption, `yctl requeue`, or its node's fence).
    pub outcome: String,
    /// The job that preempted this run, if one did.
    pub preempted_by: Option<JobId>,
    /// That preemptor's account ("preemptions caused").
    pub preemptor_account: Option<String>,
    /// For a preempted run: a checkpoint was written during its grace.
    pub checkpoint_saved: bool,
    /// For a preempted run: GPU-seconds of work since its last known checkpoint (since its
    /// start when none is known), i.e. work lost unless the grace saved it.
    pub lost_gpu_secs: u64,
}

impl RunRecord {
    pub fn gpu_secs(&self) -> u64 {
        u64::from(self.gpus) * (self.end - self.start).max(0) as u64 / 1000
    }

    pub fn cpu_secs(&self) -> u64 {
        u64::from(self.cpus) * (self.end - self.start).max(0) as u64 / 1000
    }

    pub fn wait_ms(&self) -> i64 {
        (self.start - self.queued_at).max(0)
    }

    /// The record borrowed, as a scan of many hands them out without copying strings.
    pub fn view(&self) -> RunView<'_> {
        RunView {
            job_id: self.job_id,
            restart_count: self.restart_count,
            account: &self.account,
            user: &self.user,
            uid: self.uid,
            tier: &self.tier,
            gpus: self.gpus,
            cpus: self.cpus,
            queued_at: self.queued_at,
            start: self.start,
            end: self.end,
            outcome: &self.outcome,
            preempted_by: self.preempted_by,
            preemptor_account: self.preemptor_account.as_deref(),
            checkpoint_saved: self.checkpoint_saved,
            lost_gpu_secs: self.lost_gpu_secs,
        }
    }
}

/// A [`RunRecord`] with borrowed strings: what a scan of a million recorded runs (a report)
/// reads, without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunView<'a> {
    pub job_id: JobId,
    pub restart_count: u32,
    pub account: &'a str,
    pub user: &'a str,
    pub uid: u32,
    pub tier: &'a str,
    pub gpus: u32,
    pub cpus: u32,
    pub queued_at: Millis,
    pub start: Millis,
    pub end: Millis,
    pub outcome: &'a str,
    pub preempted_by: Option<JobId>,
    pub preemptor_account: Option<&'a str>,
    pub checkpoint_saved: bool,
    pub lost_gpu_secs: u64,
}

impl RunView<'_> {
    pub fn wait_ms(&self) -> i64 {
        self.start.saturating_sub(self.queued_at).max(0)
    }

    pub fn to_record(&self) -> RunRecord {
        RunRecord {
            job_id: self.job_id,
            restart_count: self.restart_count,
            account: self.account.to_string(),
            user: self.user.to_string(),
            uid: self.uid,
            tier: self.tier.to_string(),
            gpus: self.gpus,
            cpus: self.cpus,
            queued_at: self.queued_at,
            start: self.start,
            end: self.end,
            outcome: self.outcome.to_string(),
            preempted_by: self.preempted_by,
            preemptor_account: self.preemptor_account.map(str::to_string),
            checkpoint_saved: self.checkpoint_saved,
            lost_gpu_secs: self.lost_gpu_secs,
        }
    }
}

/// How far the parts of a run have got ([`Parts`]), kept out of line: only a job that runs
/// has any, and a queued job's record (ten thousand of them for an array) carries one pointer
/// instead. Reads of a job without parts see an empty [`Parts`]; the first write makes them.
#[derive(Clone, Default)]
pub struct PartsProgress(Option<Box<Parts>>);

/// What a queued job's [`PartsProgress`] reads as.
static NO_PARTS: Parts = Parts {
    nodelist: Vec::new(),
    ended: Vec::new(),
    first_failure: None,
    master_port: 0,
};

impl std::ops::Deref for PartsProgress {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        self.0.as_deref().unwrap_or(&NO_PARTS)
    }
}

impl std::ops::DerefMut for PartsProgress {
    fn deref_mut(&mut self) -> &mut Parts {
        self.0.get_or_insert_with(Default::default)
    }
}

impl From<Parts> for PartsProgress {
    fn from(parts: Parts) -> PartsProgress {
        PartsProgress((parts != NO_PARTS).then(|| Box::new(parts)))
    }
}

impl PartsProgress {
    /// No part has ended yet (what a stored record leaves out).
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl PartialEq for PartsProgress {
    fn eq(&self, other: &PartsProgress) -> bool {
        **self == **other
    }
}

impl Eq for PartsProgress {}

impl fmt::Debug for PartsProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for PartsProgress {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PartsProgress {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Parts::deserialize(deserializer).map(PartsProgress::from)
    }
}

/// How far the parts of a multi-node run have got. A part's GPUs are released as soon as its
/// process is gone, so while some parts run, `Job::alloc` lists only the live ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Parts {
    /// All nodes of the run in rank order (rank 0 first).
    pub nodelist: Vec<String>,
    /// Allocations of the parts that have ended.
    pub ended: Vec<NodeAlloc>,
    /// The first part that failed; it decides how the whole job ends.
    pub first_failure: Option<PartFailure>,
    /// `MASTER_PORT` of the run: the rendezvous port on rank 0's node.
    #[serde(default)]
    pub master_port: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartFailure {
    pub node: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub error: String,
    pub description: String,
    /// The kernel killed a process of the part for going over its memory limit.
    #[serde(default)]
    pub out_of_memory: bool,
    /// The part's node lost contact with schedd and its fence stopped the part: the run ends
    /// NODE_FAIL (when it may not be requeued).
    #[serde(default)]
    pub fenced: bool,
}
