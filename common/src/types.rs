//! Job and node records as schedd keeps them. The scheduling core reads these; the store
//! persists them (as JSON); the server converts them to the wire format.

use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
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

/// Who submitted a job, as the kernel reported it on the socket (never as the client claimed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    /// Names of the primary and supplementary groups.
    pub groups: Vec<String>,
}

impl Owner {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Who sent a client request, as schedd established it: the identity (from the kernel on its
/// own socket, or relayed by an authenticated agent), where it came from, and whether it is an
/// administrator (see `Config::is_admin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub owner: Owner,
    /// The node whose agent relayed the request; `None`: schedd's own socket.
    pub host: Option<String>,
    /// May drain and resume, read the audit log, act on anyone's jobs and use every tier.
    pub admin: bool,
}

impl Caller {
    /// A caller on schedd's own socket, administrator as root (tests, and the local socket
    /// without an admin group).
    pub fn local(owner: Owner) -> Caller {
        let admin = owner.is_root();
        Caller {
            owner,
            host: None,
            admin,
        }
    }

    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// `alice`, or `alice@login1` for a relayed request.
    pub fn describe(&self) -> String {
        match &self.host {
            Some(host) => format!("{}@{host}", self.owner.user),
            None => self.owner.user.clone(),
        }
    }
}

/// A validated submit request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct JobSpec {
    pub name: String,
    pub tier: String,
    pub gpus: u32,
    /// Accepted GPU models (`A100|H100` gives two); empty accepts any.
    pub gpu_types: Vec<String>,
    pub cpus: u32,
    pub mem_mib: u64,
    pub time_limit_secs: Option<u64>,
    pub grace_secs: Option<u32>,
    pub checkpoint_dir: Option<String>,
    pub account: String,
    pub stdout_path: Option<String>,
    pub stderr_path: Option<String>,
    pub workdir: String,
    pub script: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub hold: bool,
    pub nodes: u32,
    pub no_requeue: bool,
    pub interconnect: Option<String>,
    pub constraints: Vec<String>,
    /// `--signal`: a signal sent before the time limit.
    #[serde(default)]
    pub warn_signal: Option<crate::signals::WarnSignal>,
    /// `--array`: this spec is shared by every task of an array (see [`crate::array`]).
    #[serde(default)]
    pub array: Option<crate::array::ArraySpec>,
    /// `--dependency`, resolved into job ids at submit.
    #[serde(default)]
    pub dependency: Option<crate::dependency::Dependency>,
}

/// What one job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAlloc {
    pub node: String,
    pub gpus: Vec<u32>,
    pub cpus: u32,
    pub mem_mib: u64,
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
    pub reason: String,
    pub alloc: Vec<NodeAlloc>,
    pub restart_count: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub submit_time: Millis,
    pub start_time: Option<Millis>,
    pub end_time: Option<Millis>,
    /// The agent confirmed the process started (a running job the agent does not know is
    /// requeued when unconfirmed, NODE_FAIL when confirmed).
    pub launched: bool,
    /// Resolved grace and checkpoint directory.
    pub grace_secs: u32,
    pub checkpoint_dir: String,
    pub stop: Option<StopRequest>,
    /// When the job last saved a checkpoint, where known.
    pub last_checkpoint: Option<Millis>,
    /// Progress of a multi-node run: which parts have ended.
    #[serde(default)]
    pub parts: PartsProgress,
    /// Launches of the current run that never reached (or were never confirmed by) an agent;
    /// at `scheduler.max_launch_attempts` the job ends FAILED instead of cycling.
    #[serde(default)]
    pub launch_attempts: u32,
    /// When the current wait began: submit, release from hold, or requeue (the start of the
    /// wait that `RunRecord::wait_ms` measures). `None` in records written before it existed:
    /// the submit time stands in.
    #[serde(default)]
    pub queued_at: Option<Millis>,
    /// The task of an array this job is (`12_7`); `None` for a plain job.
    #[serde(default)]
    pub array: Option<crate::array::ArrayTask>,
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

impl Job {
    /// `12_7` for an array task, `19` otherwise.
    pub fn display_id(&self) -> String {
        crate::array::display_id(self.id, self.array.as_ref())
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

/// One GPU as the node agent reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_mib: u64,
    pub pci_bus_id: String,
    pub numa_node: Option<i32>,
    /// Indices of local GPUs this one reaches over NVLink (directly or through an NVSwitch).
    pub nvlink: Vec<u32>,
    /// How this GPU reaches each other GPU of the node, as `nvidia-smi topo -m` shows it.
    /// Empty when the agent reported no topology (treated as `SYS` between every pair).
    #[serde(default)]
    pub links: Vec<GpuLink>,
}

/// The path between two GPUs of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLink {
    pub peer: u32,
    /// PCIe relation (`topology_common_ancestor`).
    pub pcie: PcieRelation,
    /// Number of NVLink links between the two (0: none). Through an NVSwitch: the links of
    /// this GPU to the switch fabric.
    pub nvlinks: u32,
}

/// PCIe relation of two GPUs, best first (the order `nvidia-smi topo -m` documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PcieRelation {
    /// Behind one PCIe switch (or on the same board).
    Pix,
    /// Across several PCIe switches, not the host bridge.
    Pxb,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across NUMA nodes (the SMP interconnect).
    Sys,
}

impl PcieRelation {
    pub fn as_str(self) -> &'static str {
        match self {
            PcieRelation::Pix => "PIX",
            PcieRelation::Pxb => "PXB",
            PcieRelation::Phb => "PHB",
            PcieRelation::Node => "NODE",
            PcieRelation::Sys => "SYS",
        }
    }

    pub fn parse(s: &str) -> Option<PcieRelation> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "PIX" => PcieRelation::Pix,
            "PXB" => PcieRelation::Pxb,
            "PHB" => PcieRelation::Phb,
            "NODE" => PcieRelation::Node,
            "SYS" => PcieRelation::Sys,
            _ => return None,
        })
    }
}

impl Gpu {
    /// The PCIe relation to `peer`; `SYS` when unknown.
    pub fn pcie_to(&self, peer: u32) -> PcieRelation {
        self.links
            .iter()
            .find(|l| l.peer == peer)
            .map(|l| l.pcie)
            .unwrap_or(PcieRelation::Sys)
    }

    pub fn has_nvlink_to(&self, peer: u32) -> bool {
        self.nvlink.contains(&peer)
    }
}

/// A node as schedd knows it: what its agent reported at registration plus admin state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub address: String,
    pub cpus: u32,
    pub mem_mib: u64,
    /// Shared, never changed in place: a registration brings a new list. Copies of the node
    /// (the scheduler's snapshot) share it, so the scheduler can tell by its address that a
    /// node's inventory is the one it already knows the topology of.
    pub gpus: Arc<Vec<Gpu>>,
    pub features: Vec<String>,
    /// Set by `yctl drain`: no new jobs; running ones finish.
    pub drain_reason: Option<String>,
    /// The drain is the node's own: its agent said it cannot take jobs (a full spool), and
    /// it is resumed when the agent says it can again. An administrator's drain or resume
    /// clears it (theirs is never undone by the node).
    #[serde(default)]
    pub drained_by_node: bool,
    /// Its agent has a live session.
    pub connected: bool,
    pub last_seen: Millis,
    /// Jobs schedd no longer counts as running that the agent still ran when it registered
    /// (they were failed while it was away) and is killing now. Their GPUs are in use until
    /// the agent reports them gone, so the node takes no new job meanwhile. Not persisted:
    /// the next registration reports them again.
    #[serde(skip)]
    pub killing: BTreeSet<u64>,
    /// Its agent stops its jobs after this long without schedd (`node.fence_after_secs`, as
    /// it registered); 0: it never does, so the jobs of a silent node cannot be run again.
    #[serde(default)]
    pub fence_after_secs: u32,
    /// GPUs out of service, by index: no new job gets them. Its node's health monitor found
    /// them failing, or an administrator took them out; they return only when an
    /// administrator says so (`yctl resume NODE --gpu N`), whatever the node reports later.
    /// Kept across registrations, even for an index the node no longer reports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_out_of_service: BTreeMap<u32, GpuOutage>,
    /// GPUs an administrator returned to service whose agent has not yet confirmed that it
    /// forgot their past faults: faults it reports for them are ignored until it does (they
    /// may predate the forget), and no job gets them meanwhile (the confirmation may say they
    /// still fail). Kept in the store, so that a restarted schedd (or an agent
    /// that was away) still waits for the confirmation, and asks again at registration.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub gpus_forgetting: BTreeSet<u32>,
}

/// Who took a GPU out of service when its node's health monitor found it failing
/// ([`GpuOutage::by`]); an administrator's outage names the administrator (a user name has no
/// space).
pub const GPU_HEALTH_BY: &str = "noded health";

/// Why a GPU is out of service, since when, and who took it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuOutage {
    /// The fault (`XID 79: GPU has fallen off the bus`) or the administrator's reason.
    pub reason: String,
    pub since: Millis,
    /// [`GPU_HEALTH_BY`], or the administrator's user name.
    pub by: String,
}

impl GpuOutage {
    /// Its node found it failing (rather than an administrator taking it out).
    pub fn failed(&self) -> bool {
        self.by == GPU_HEALTH_BY
    }
}

impl Node {
    /// May receive new jobs: connected, not drained, not killing leftovers, and with a GPU
    /// in service unless it has none (a node whose every GPU failed takes no job, not even a
    /// CPU-only one: it needs someone's attention).
    pub fn is_schedulable(&self) -> bool {
        self.connected
            && self.drain_reason.is_none()
            && self.killing.is_empty()
            && !self.all_gpus_out_of_service()
    }

    /// GPU `index` is out of service.
    pub fn gpu_out_of_service(&self, index: u32) -> bool {
        self.gpus_out_of_service.contains_key(&index)
    }

    /// The GPUs no new job may get: those out of service, and those returned to service whose
    /// node has not yet confirmed that it does not find them failing (`gpus_forgetting`).
    pub fn unusable_gpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.gpus_out_of_service
            .keys()
            .chain(&self.gpus_forgetting)
            .copied()
    }

    /// The node has GPUs and none of them is in service.
    pub fn all_gpus_out_of_service(&self) -> bool {
        !self.gpus_out_of_service.is_empty()
            && !self.gpus.is_empty()
            && self.gpus.iter().all(|g| self.gpu_out_of_service(g.index))
    }

    /// How many of its GPUs are out of service (outages of indices it no longer reports
    /// are not counted).
    pub fn gpus_out_count(&self) -> usize {
        if self.gpus_out_of_service.is_empty() {
            return 0;
        }
        self.gpus
            .iter()
            .filter(|g| self.gpu_out_of_service(g.index))
            .count()
    }
}

/// An entry of a job's append-only history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    pub time: Millis,
    pub kind: String,
    pub detail: String,
}

/// An entry of the audit log: who did what, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub time: Millis,
    /// Who acted, from peer credentials; `schedd` for the scheduler's own decisions.
    pub user: String,
    pub uid: u32,
    /// `submit_refused`, `preempt`, `cancel`, `hold`, `release`, `requeue`, `requeue_refused`,
    /// `drain`, `resume`.
    pub action: String,
    pub job_id: Option<JobId>,
    pub detail: String,
    /// The node whose agent relayed the request; `None`: schedd's own socket or schedd itself.
    #[serde(default)]
    pub host: Option<String>,
}

/// Whether a requested GPU type matches a model name: the model without the vendor word equals
/// the type or begins with `type-` or `type ` (e.g. `NVIDIA H100 80GB HBM3`), case-insensitively (`A100` matches `NVIDIA A100-SXM4-80GB`,
/// `A10` does not).
pub fn gpu_type_matches(wanted: &str, model: &str) -> bool {
    let model = model.trim();
    let bare = model
        .split_once(' ')
        .filter(|(vendor, _)| {
            ["nvidia", "amd", "intel"].contains(&vendor.to_ascii_lowercase().as_str())
        })
        .map(|(_, rest)| rest.trim())
        .unwrap_or(model);
    let (bare, wanted) = (
        bare.to_ascii_lowercase(),
        wanted.trim().to_ascii_lowercase(),
    );
    if wanted.is_empty() {
        return false;
    }
    bare == wanted
        || bare
            .strip_prefix(&wanted)
            .is_some_and(|rest| rest.starts_with('-') || rest.starts_with(' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_types() {
        assert!(gpu_type_matches("A100", "NVIDIA A100-SXM4-80GB"));
        assert!(gpu_type_matches("a100", "NVIDIA A100-PCIE-40GB"));
        assert!(gpu_type_matches("A10", "NVIDIA A10"));
        assert!(!gpu_type_matches("A10", "NVIDIA A100-SXM4-80GB"));
        assert!(gpu_type_matches("H100", "NVIDIA H100 80GB HBM3"));
        assert!(!gpu_type_matches("", "NVIDIA A10"));
    }

    #[test]
    fn states_parse() {
        assert_eq!(JobState::parse("pd"), Some(JobState::Pending));
        assert_eq!(JobState::parse("node_fail"), Some(JobState::NodeFail));
        assert_eq!(JobState::parse("bogus"), None);
        assert_eq!(JobState::parse("oom"), Some(JobState::OutOfMemory));
        assert_eq!(
            JobState::parse("OUT_OF_MEMORY"),
            Some(JobState::OutOfMemory)
        );
        assert!(JobState::OutOfMemory.is_terminal());
        assert!(JobState::Timeout.is_terminal());
        assert!(!JobState::Held.is_terminal());
    }
}
