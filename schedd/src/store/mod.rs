//! Durable state in sled. The only module that knows sled or the key layout.
//!
//! Trees and keys:
//! - `jobs`:     job id (u64 big-endian) → `Job` as JSON, with `spec.script`/`spec.env` emptied.
//!   The task of an array is stored without its spec (which all tasks share: a default spec
//!   stands in, recognisable as such since its `array` is `None` while the job's is set).
//! - `array_specs`: array id → the `JobSpec` its tasks share, as JSON, written once with them.
//! - `arrays`:   array id → its tasks as submitted, as JSON ([`ArrayRecord`]: the first task's
//!   record and how the others differ from it), so that submitting 10,000 tasks is a handful
//!   of writes, not 10,000 records. A task gets its own record in `jobs` the first time it
//!   changes, which then stands for it; a task without one is as it was submitted, or as it
//!   ended when it ended without changing before (see [`ended`]: cancelling a queued array
//!   writes its record again, not a record per task).
//! - `payloads`: job id → `Payload` (script and environment: large, only needed at launch);
//!   an array's tasks share one, under the array's id
//! - `events`:   job id ++ sequence (u64 BE each) → `JobEvent` as JSON, append-only. An
//!   array's submit is one event, under the array's id ([`Store::job_events`] shows it in
//!   each task's history).
//! - `nodes`:    node name → `Node` as JSON
//! - `audit`:    a sled-generated increasing id (u64 BE) → `AuditRecord` as JSON, append-only;
//!   each detail bounded, the oldest entries removed past the retention (see [`upkeep`])
//! - `meta`:     `next_job_id` → u64 BE. Written in the same transaction as each new job, so an
//!   id is never reused, even after a crash (sled's `generate_id` jumps after recovery).
//! - `usage`:    end time (i64 with the sign bit flipped, BE) ++ job id (u64 BE) ++ restart
//!   count (u32 BE) → `RunRecord` in a compact binary form (see [`usage`]): one entry per run,
//!   written in the batch of the event that ended it. Ordered by end time, so a time range is
//!   one range scan; a run written again (the same end, job and restart) replaces itself and
//!   is never counted twice.
//!
//! Writes become durable on [`Store::flush`]; callers acknowledge only after it.

use crate::state::{Effects, JobEventKind};
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::collections::BTreeMap;
use std::path::Path;
use ysched_common::{AuditRecord, Job, JobEvent, JobId, JobSpec, Node, RunRecord, RunView};

mod ended;
mod upkeep;
mod usage;

pub use crate::state::commands::Payload;
pub use crate::state::reactor::Room;
pub use upkeep::{bounded_detail, AUDIT_DETAIL_MAX_BYTES, BALLAST_BYTES, BALLAST_FILE};

#[cfg(test)]
mod array_tests;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state store: {0}")]
    Sled(#[from] sled::Error),
    #[error("state store: corrupt record {key}: {source}")]
    Corrupt {
        key: String,
        source: serde_json::Error,
    },
    #[error("state store: job {id} is a task of array {array_id}, whose spec is missing")]
    MissingArraySpec { id: u64, array_id: u64 },
    #[error("state store: corrupt usage record {key}: {why}")]
    CorruptRun { key: String, why: String },
    #[error("state store: cannot open {path}: {source}")]
    Open { path: String, source: sled::Error },
    /// The state disk has too little free space for the change (see [`Store::check_room`]).
    #[error("state store full: {0}; nothing was changed: free some space and retry")]
    Full(String),
    #[error("state store unwritable: cannot check free space in {dir}: {source}")]
    Statvfs { dir: String, source: nix::Error },
    #[error("state store unwritable: writes are refused (a test's failure injection)")]
    Injected,
}

impl Error {
    /// sled itself failed a write: it cannot go on (a later write or flush may never return,
    /// as after ENOSPC in the middle of a write), and only a restart from what is on disk
    /// is safe.
    pub fn is_fatal_write(&self) -> bool {
        matches!(self, Error::Sled(_))
    }

    /// The store could not take a write (disk full, I/O error): the request was refused and
    /// nothing changed, as opposed to a bad record.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Full(_)
                | Error::Statvfs { .. }
                | Error::Injected
                | Error::Sled(sled::Error::Io(_))
        )
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Everything recovered at start-up.
pub struct Recovered {
    /// Jobs that are not finished.
    pub active_jobs: BTreeMap<JobId, Job>,
    pub nodes: BTreeMap<String, Node>,
    pub next_job_id: u64,
}

/// One atomic change: job records, events and nodes written together.
#[derive(Default)]
pub struct Batch {
    jobs: Vec<(JobId, JobWrite)>,
    events: Vec<(JobId, JobEvent)>,
    payloads: Vec<(JobId, Vec<u8>)>,
    nodes: Vec<(String, Vec<u8>)>,
    audit: Vec<Vec<u8>>,
    next_job_id: Option<u64>,
    runs: Vec<(usage::RunKey, Vec<u8>)>,
    array_specs: Vec<(JobId, Vec<u8>)>,
    arrays: Vec<(JobId, Vec<u8>)>,
    /// About how many bytes the batch writes (keys and values), for [`Store::check_room`].
    bytes: u64,
}

/// What [`Batch::bytes`] counts for an array task that ends without having run: usually
/// kept in its array's record, whose size the batch does not know beforehand.
const ENDED_TASK_BYTES: u64 = 512;

/// A job's write: its record, or an array task that ended without running, which
/// [`Store::apply`] keeps in its array's record when it can (see [`ended`]).
enum JobWrite {
    Record(Vec<u8>),
    EndedTask(Box<Job>),
}

/// Whether two tasks of one array are the same but for their id, index and checkpoint
/// directory (what an [`ArrayRecord`] keeps once for all). Every other field is named, so
/// that a field added to `Job` must be considered here.
fn same_but_place(a: &Job, b: &Job) -> bool {
    let Job {
        id: _,
        array: _,
        checkpoint_dir: _,
        spec,
        owner,
        tier_value,
        state,
        reason,
        alloc,
        restart_count,
        exit_code,
        signal,
        submit_time,
        start_time,
        end_time,
        launched,
        grace_secs,
        stop,
        last_checkpoint,
        parts,
        launch_attempts,
        queued_at,
    } = a;
    (std::sync::Arc::ptr_eq(spec, &b.spec) || **spec == *b.spec)
        && (std::sync::Arc::ptr_eq(owner, &b.owner) || **owner == *b.owner)
        && *tier_value == b.tier_value
        && *state == b.state
        && *reason == b.reason
        && *alloc == b.alloc
        && *restart_count == b.restart_count
        && *exit_code == b.exit_code
        && *signal == b.signal
        && *submit_time == b.submit_time
        && *start_time == b.start_time
        && *end_time == b.end_time
        && *launched == b.launched
        && *grace_secs == b.grace_secs
        && *stop == b.stop
        && *last_checkpoint == b.last_checkpoint
        && *parts == b.parts
        && *launch_attempts == b.launch_attempts
        && *queued_at == b.queued_at
}

/// An array's tasks as submitted: every task is its first one (`first`, stored slim, like
/// any task record) but for its id (`first.id` plus its place), its index (from the spec's
/// task list) and its checkpoint directory (the same for all, or `checkpoint_prefix` and the
/// job id).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArrayRecord {
    first: Job,
    count: u32,
    checkpoint_prefix: Option<String>,
    /// Tasks that ended without changing before, as they ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ended: Vec<ended::EndedTasks>,
}

impl ArrayRecord {
    /// Task `i` (by place) as submitted; `first` complete (with its spec), `tasks` its
    /// indices.
    fn task(&self, first: &Job, i: usize) -> Job {
        let id = JobId(first.id.0 + i as u64);
        let mut job = first.clone();
        job.id = id;
        let task = first.spec.array.as_ref().and_then(|a| a.task_at(i as u64));
        job.array = Some(ysched_common::ArrayTask {
            array_id: first.id,
            task: task.unwrap_or(i as u32),
        });
        if let Some(prefix) = &self.checkpoint_prefix {
            job.checkpoint_dir = format!("{prefix}{id}");
        }
        if let Some(ended) = self.ended_at(i) {
            ended.apply_to(&mut job);
        }
        job
    }
}

/// A job's record. Script and environment live in `payloads`; a job record never repeats
/// them. An array's task leaves its whole spec to `array_specs` (see `put_array_spec`).
fn encode_job(job: &Job) -> Vec<u8> {
    let value = if spec_shared(job) {
        let mut slim = job.clone();
        slim.spec = std::sync::Arc::clone(spec_placeholder());
        serde_json::to_vec(&slim)
    } else if job.spec.script.is_empty() && job.spec.env.is_empty() {
        serde_json::to_vec(job)
    } else {
        let mut slim = job.clone();
        let spec = std::sync::Arc::make_mut(&mut slim.spec);
        spec.script.clear();
        spec.env.clear();
        serde_json::to_vec(&slim)
    };
    value.expect("job serializes")
}

/// What an array task's record carries in place of the spec its tasks share.
fn spec_placeholder() -> &'static std::sync::Arc<JobSpec> {
    static PLACEHOLDER: std::sync::OnceLock<std::sync::Arc<JobSpec>> = std::sync::OnceLock::new();
    PLACEHOLDER.get_or_init(Default::default)
}

/// Whether a job's stored record leaves its spec to `array_specs`.
fn spec_shared(job: &Job) -> bool {
    job.array.is_some() && job.spec.array.is_some()
}

/// The spec and owner a recovery or a scan shares between the tasks of each array.
#[derive(Default)]
struct Shared {
    arrays: BTreeMap<
        JobId,
        (
            std::sync::Arc<JobSpec>,
            Option<std::sync::Arc<ysched_common::Owner>>,
        ),
    >,
}

/// An event's durable change, encoded: its submit's jobs (an array's as one record), the new
/// versions of jobs and nodes, payloads, history entries (their kinds as their stored text),
/// audit records, usage records and the id counter.
impl From<&Effects> for Batch {
    fn from(effects: &Effects) -> Batch {
        let mut batch = Batch::default();
        batch.put_array(&effects.submitted);
        for job in &effects.jobs {
            batch.put_job(job);
        }
        for (id, payload) in &effects.payloads {
            batch.put_payload(*id, payload);
        }
        for entry in &effects.events {
            batch.event(
                entry.job,
                entry.time,
                entry.kind.as_str(),
                entry.detail.as_str(),
            );
        }
        for node in &effects.nodes {
            batch.put_node(node);
        }
        for record in &effects.audit {
            batch.audit(record);
        }
        for run in &effects.runs {
            batch.put_run(run);
        }
        if let Some(next) = effects.next_job_id {
            batch.set_next_job_id(next);
        }
        batch
    }
}

impl Batch {
    pub fn put_job(&mut self, job: &Job) {
        let write = if ended::candidate(job) {
            self.bytes += ENDED_TASK_BYTES;
            JobWrite::EndedTask(Box::new(job.clone()))
        } else {
            let record = encode_job(job);
            self.bytes += 8 + record.len() as u64;
            JobWrite::Record(record)
        };
        self.jobs.push((job.id, write));
    }

    /// Every task of an array, as just submitted (`tasks`: consecutive ids from the array's,
    /// in task order, sharing one spec): their spec and one record of them all (see
    /// [`ArrayRecord`]), instead of a record each. Tasks that do not follow the pattern (none
    /// do, as the state machine makes them) are written one by one.
    pub fn put_array(&mut self, tasks: &[Job]) {
        let Some(first) = tasks.first() else {
            return;
        };
        let Some(spec) = first.spec.array.as_ref().filter(|_| spec_shared(first)) else {
            for job in tasks {
                self.put_job(job);
            }
            return;
        };
        let indices = spec.tasks();
        let same_dir = tasks
            .iter()
            .all(|j| j.checkpoint_dir == first.checkpoint_dir);
        let prefix = if same_dir {
            None
        } else {
            first
                .checkpoint_dir
                .strip_suffix(&first.id.to_string())
                .map(str::to_string)
        };
        let record = ArrayRecord {
            first: first.clone(),
            count: tasks.len() as u32,
            checkpoint_prefix: prefix,
            ended: Vec::new(),
        };
        let mut dir = String::new();
        let follows = indices.len() == tasks.len()
            && (same_dir || record.checkpoint_prefix.is_some())
            && tasks.iter().enumerate().all(|(i, j)| {
                let id = JobId(first.id.0 + i as u64);
                let task = ysched_common::ArrayTask {
                    array_id: first.id,
                    task: indices[i],
                };
                let dir_ok = match &record.checkpoint_prefix {
                    None => j.checkpoint_dir == first.checkpoint_dir,
                    Some(prefix) => {
                        use std::fmt::Write;
                        dir.clear();
                        let _ = write!(dir, "{prefix}{id}");
                        j.checkpoint_dir == dir
                    }
                };
                j.id == id && j.array == Some(task) && dir_ok && same_but_place(j, first)
            });
        if !follows {
            for job in tasks {
                self.put_job(job);
            }
            self.put_array_spec(first.id, &first.spec);
            return;
        }
        let mut slim = record;
        slim.first.spec = std::sync::Arc::clone(spec_placeholder());
        let value = serde_json::to_vec(&slim).expect("array record serializes");
        self.bytes += 8 + value.len() as u64;
        self.arrays.push((first.id, value));
        self.put_array_spec(first.id, &first.spec);
    }

    /// The spec the tasks of array `array_id` share (written once, with the tasks).
    pub fn put_array_spec(&mut self, array_id: JobId, spec: &JobSpec) {
        let value = if spec.script.is_empty() && spec.env.is_empty() {
            serde_json::to_vec(spec)
        } else {
            let mut slim = spec.clone();
            slim.script.clear();
            slim.env.clear();
            serde_json::to_vec(&slim)
        };
        let value = value.expect("spec serializes");
        self.bytes += 8 + value.len() as u64;
        self.array_specs.push((array_id, value));
    }

    pub fn put_payload(&mut self, id: JobId, payload: &Payload) {
        let value = serde_json::to_vec(payload).expect("payload serializes");
        self.bytes += 8 + value.len() as u64;
        self.payloads.push((id, value));
    }

    pub fn event(&mut self, id: JobId, time: i64, kind: &str, detail: impl Into<String>) {
        let event = JobEvent {
            time,
            kind: kind.to_string(),
            detail: detail.into(),
        };
        // Its JSON: the two strings and some 40 bytes around them.
        self.bytes += 16 + 40 + (event.kind.len() + event.detail.len()) as u64;
        self.events.push((id, event));
    }

    pub fn put_node(&mut self, node: &Node) {
        let value = serde_json::to_vec(node).expect("node serializes");
        self.bytes += (node.name.len() + value.len()) as u64;
        self.nodes.push((node.name.clone(), value));
    }

    /// An audit entry; its detail is cut to [`AUDIT_DETAIL_MAX_BYTES`].
    pub fn audit(&mut self, record: &AuditRecord) {
        let value = match bounded_detail(&record.detail, AUDIT_DETAIL_MAX_BYTES) {
            std::borrow::Cow::Borrowed(_) => serde_json::to_vec(record),
            std::borrow::Cow::Owned(detail) => serde_json::to_vec(&AuditRecord {
                detail,
                ..record.clone()
            }),
        }
        .expect("audit record serializes");
        self.bytes += 8 + value.len() as u64;
        self.audit.push(value);
    }

    /// A run's usage record (see the `usage` tree).
    pub fn put_run(&mut self, run: &RunRecord) {
        let (key, value) = (usage::key(run), usage::encode(run));
        self.bytes += (key.len() + value.len()) as u64;
        self.runs.push((key, value));
    }

    pub fn set_next_job_id(&mut self, next: u64) {
        self.next_job_id = Some(next);
    }

    /// Whether the batch writes audit entries.
    pub fn has_audit(&self) -> bool {
        !self.audit.is_empty()
    }

    /// About how many bytes the batch writes: its keys and values.
    pub fn bytes(&self) -> u64 {
        self.bytes + if self.next_job_id.is_some() { 19 } else { 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.events.is_empty()
            && self.payloads.is_empty()
            && self.nodes.is_empty()
            && self.audit.is_empty()
            && self.next_job_id.is_none()
            && self.runs.is_empty()
            && self.array_specs.is_empty()
            && self.arrays.is_empty()
    }
}

/// How many of each kind of write a batch holds (for tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BatchCounts {
    pub jobs: usize,
    pub events: usize,
    pub payloads: usize,
    pub audit: usize,
    pub array_specs: usize,
    pub arrays: usize,
    pub next_job_id: Option<u64>,
}

#[cfg(test)]
impl Batch {
    pub(crate) fn counts(&self) -> BatchCounts {
        BatchCounts {
            jobs: self.jobs.len(),
            events: self.events.len(),
            payloads: self.payloads.len(),
            audit: self.audit.len(),
            array_specs: self.array_specs.len(),
            arrays: self.arrays.len(),
            next_job_id: self.next_job_id,
        }
    }
}

#[derive(Clone)]
pub struct Store {
    dir: std::path::PathBuf,
    /// Set by tests: every write is refused, as on a failing disk.
    fail_writes: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Free space below which writes are refused (bytes).
    reserve_bytes: u64,
    /// Bytes the audit log holds (see [`Store::audit_bytes`]).
    audit_bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    db: sled::Db,
    jobs: sled::Tree,
    payloads: sled::Tree,
    events: sled::Tree,
    nodes: sled::Tree,
    audit: sled::Tree,
    meta: sled::Tree,
    usage: sled::Tree,
    array_specs: sled::Tree,
    arrays: sled::Tree,
}

const NEXT_JOB_ID: &[u8] = b"next_job_id";

/// How many bytes of disk a write of one byte may take: the value, and the log's pages
/// around it (see [`Store::check_room`]).
const WRITE_AMPLIFICATION: u64 = 2;

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|source| Error::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

/// Event keys are the job id, then an increasing number: this bit and a store-wide id (from
/// `sled::Db::generate_id`), or a per-job sequence number in stores written before.
const EVENT_ID_BASE: u64 = 1 << 63;

/// Bits of an event's sequence for its place in its batch (see [`Store::apply`]).
const EVENT_SEQ_BITS: u32 = 24;

fn event_key(id: JobId, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.0.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

impl Store {
    /// Opens (or creates) the store under `dir`.
    /// Opens the store with no free-space reserve (tests); schedd uses [`Store::open_with_reserve`].
    pub fn open(dir: &Path) -> Result<Store> {
        Self::open_with_reserve(dir, 0)
    }

    /// Opens the store; writes are refused while the file system has less than
    /// `reserve_mib` free. sled fails for good after one write error (it would need
    /// reopening), so a full disk must be caught before sled sees it. A store on a full disk
    /// still opens, in the space of the ballast (see [`upkeep`]).
    pub fn open_with_reserve(dir: &Path, reserve_mib: u64) -> Result<Store> {
        let open = || {
            sled::Config::new()
                .path(dir.join("db"))
                // The page cache is sled's main memory cost, and a bound, not an allocation:
                // job records are small and read rarely, but a usage report walks a week of
                // runs (a million, some 80 MiB of pages), which this keeps in memory after
                // the first: a report from cached pages takes half the time of one read from
                // the file.
                .cache_capacity(128 * 1024 * 1024)
                .open()
        };
        let db = upkeep::open_db(dir, open).map_err(|source| Error::Open {
            path: dir.display().to_string(),
            source,
        })?;
        let audit = db.open_tree("audit")?;
        Ok(Store {
            dir: dir.to_path_buf(),
            fail_writes: Default::default(),
            reserve_bytes: reserve_mib.saturating_mul(1024 * 1024),
            audit_bytes: std::sync::Arc::new(Self::count_audit_bytes(&audit)?.into()),
            jobs: db.open_tree("jobs")?,
            payloads: db.open_tree("payloads")?,
            events: db.open_tree("events")?,
            nodes: db.open_tree("nodes")?,
            audit,
            meta: db.open_tree("meta")?,
            usage: db.open_tree("usage")?,
            array_specs: db.open_tree("array_specs")?,
            arrays: db.open_tree("arrays")?,
            db,
        })
    }

    pub fn recover(&self) -> Result<Recovered> {
        let mut active_jobs = BTreeMap::new();
        let mut max_id = 0;
        let mut shared = Shared::default();
        for kv in self.jobs.iter() {
            let (k, v) = kv?;
            let job: Job = decode(&k, &v)?;
            max_id = max_id.max(job.id.0);
            if !job.state.is_terminal() {
                let job = self.complete(job, &mut shared)?;
                active_jobs.insert(job.id, job);
            }
        }
        // Tasks still as submitted: every task of an array without a record of its own.
        for kv in self.arrays.iter() {
            let (k, v) = kv?;
            let record: ArrayRecord = decode(&k, &v)?;
            let array_id = record.first.id;
            max_id = max_id.max(array_id.0 + u64::from(record.count).saturating_sub(1));
            let mut first: Option<Job> = None;
            for i in 0..record.count as usize {
                let id = JobId(array_id.0 + i as u64);
                if record.ended_at(i).is_some()
                    || active_jobs.contains_key(&id)
                    || self.jobs.contains_key(id.0.to_be_bytes())?
                {
                    continue;
                }
                if first.is_none() {
                    first = Some(self.first_task(&record, &mut shared)?);
                }
                let job = first.as_ref().expect("set above");
                active_jobs.insert(id, record.task(job, i));
            }
        }
        let mut nodes = BTreeMap::new();
        for kv in self.nodes.iter() {
            let (k, v) = kv?;
            let mut node: Node = decode(&k, &v)?;
            node.connected = false;
            nodes.insert(node.name.clone(), node);
        }
        let stored_next = self
            .meta
            .get(NEXT_JOB_ID)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(1);
        Ok(Recovered {
            active_jobs,
            nodes,
            next_job_id: stored_next.max(max_id + 1),
        })
    }

    /// Applies a change atomically (not yet durable: see [`Store::flush`]): a batch, or an
    /// event's effects, encoded here.
    pub fn apply(&self, change: impl Into<Batch>) -> Result<()> {
        let batch = change.into();
        if batch.is_empty() {
            return Ok(());
        }
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        let mut audit = Vec::with_capacity(batch.audit.len());
        let mut audit_bytes = 0;
        for rec in &batch.audit {
            audit.push((self.db.generate_id()?.to_be_bytes(), rec.as_slice()));
            audit_bytes += 8 + rec.len() as u64;
        }
        // Keyed here, and written in the transaction unless their task was compacted.
        let mut events = Vec::with_capacity(batch.events.len());
        if !batch.events.is_empty() {
            // The store's own increasing ids order a job's events without reading its last
            // one first: one per batch, shifted, plus the event's place in the batch (a
            // batch may hold thousands: an array's cancel). Sequences after those of earlier
            // batches (a generated id is larger than every earlier one, shifted or not), and
            // the top bit puts them after the per-job sequence numbers that stores written
            // by earlier versions hold.
            let base = EVENT_ID_BASE + (self.db.generate_id()? << EVENT_SEQ_BITS);
            for (i, (id, ev)) in batch.events.iter().enumerate() {
                let seq = base + i as u64;
                events.push((*id, event_key(*id, seq), ev));
            }
        }
        let own_records = self.own_records_of_ended_tasks(&batch)?;
        let res: std::result::Result<(), TransactionError<()>> = (
            &self.jobs,
            &self.payloads,
            &self.events,
            &self.nodes,
            &self.audit,
            &self.meta,
            &self.usage,
            &self.array_specs,
            &self.arrays,
        )
            .transaction(
                |(jobs, payloads, ev, nodes, au, meta, usage, specs, arrays)| {
                    // Arrays first: a task may end in the batch that submits it.
                    for (id, v) in &batch.array_specs {
                        specs.insert(&id.0.to_be_bytes(), v.as_slice())?;
                    }
                    for (id, v) in &batch.arrays {
                        arrays.insert(&id.0.to_be_bytes(), v.as_slice())?;
                    }
                    let mut compactor = ended::Compactor::new(own_records.clone());
                    for (id, write) in &batch.jobs {
                        let key = id.0.to_be_bytes();
                        match write {
                            JobWrite::Record(v) => {
                                jobs.insert(&key, v.as_slice())?;
                                compactor.written(*id);
                            }
                            JobWrite::EndedTask(job) => {
                                if !compactor.take(job, arrays, specs)? {
                                    jobs.insert(&key, encode_job(job))?;
                                    compactor.written(*id);
                                }
                            }
                        }
                    }
                    let finished = compactor.finish(&batch.events, arrays)?;
                    for job in finished.apart {
                        jobs.insert(&job.id.0.to_be_bytes(), encode_job(job))?;
                    }
                    for (id, k, event) in &events {
                        if !finished.compacted.contains(id) {
                            ev.insert(k, serde_json::to_vec(event).expect("event"))?;
                        }
                    }
                    for (id, v) in &batch.payloads {
                        payloads.insert(&id.0.to_be_bytes(), v.as_slice())?;
                    }
                    for (name, v) in &batch.nodes {
                        nodes.insert(name.as_bytes(), v.as_slice())?;
                    }
                    for (k, v) in &audit {
                        au.insert(k, *v)?;
                    }
                    if let Some(next) = batch.next_job_id {
                        meta.insert(NEXT_JOB_ID, &next.to_be_bytes())?;
                    }
                    for (k, v) in &batch.runs {
                        usage.insert(k, v.as_slice())?;
                    }
                    Ok::<(), ConflictableTransactionError<()>>(())
                },
            );
        match res {
            Ok(()) => {
                self.audit_bytes
                    .fetch_add(audit_bytes, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            Err(TransactionError::Storage(e)) => Err(e.into()),
            Err(TransactionError::Abort(())) => unreachable!("no transaction aborts"),
        }
    }

    /// Which of the array tasks `batch` ends without their having run have a record of their
    /// own in `jobs` (those are written as any job): one range scan per array.
    fn own_records_of_ended_tasks(
        &self,
        batch: &Batch,
    ) -> Result<std::collections::HashSet<JobId>> {
        let mut spans: BTreeMap<JobId, (u64, u64)> = BTreeMap::new();
        for (id, write) in &batch.jobs {
            if let JobWrite::EndedTask(job) = write {
                let Some(task) = job.array else { continue };
                let span = spans.entry(task.array_id).or_insert((id.0, id.0));
                span.0 = span.0.min(id.0);
                span.1 = span.1.max(id.0);
            }
        }
        let mut own = std::collections::HashSet::new();
        for (from, to) in spans.into_values() {
            for key in self
                .jobs
                .range(from.to_be_bytes()..=to.to_be_bytes())
                .keys()
            {
                let key = key?;
                if let Ok(bytes) = <[u8; 8]>::try_from(key.as_ref()) {
                    own.insert(JobId(u64::from_be_bytes(bytes)));
                }
            }
        }
        Ok(own)
    }

    /// For tests: refuse every write from now on (`true`), as a failing disk would, or stop.
    pub fn fail_writes(&self, fail: bool) {
        self.fail_writes
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    /// Refuses (with [`Error::Full`]) a write of about `bytes` (see [`Batch::bytes`]) that
    /// would leave the file system with less free than `room` may use up to: called before
    /// anything that writes, so a full disk refuses requests instead of breaking sled
    /// (after ENOSPC in the middle of a write, sled never finishes another write or flush).
    /// sled writes a value about once (a large one as a file of its own) plus the log's
    /// pages around it: twice the batch's size is counted. With no reserve, nothing is
    /// checked.
    pub fn check_room(&self, bytes: u64, room: Room) -> Result<()> {
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        if self.reserve_bytes == 0 {
            return Ok(());
        }
        let free = self.free_bytes()?;
        let kept = match room {
            Room::Request => self.reserve_bytes,
            Room::Cluster => self.reserve_bytes / 4,
        };
        let change = bytes.saturating_mul(WRITE_AMPLIFICATION);
        if free >= kept.saturating_add(change) {
            return Ok(());
        }
        let size = ysched_common::parse::format_size;
        let reserve_mib = self.reserve_bytes / (1024 * 1024);
        let kept_text = match room {
            Room::Request => format!("the reserve of {reserve_mib} MiB"),
            Room::Cluster => format!(
                "{} (a quarter of the reserve of {reserve_mib} MiB, which the cluster's own \
                 writes may use)",
                size(kept)
            ),
        };
        let dir = self.dir.display();
        Err(Error::Full(if free < kept || change < 1024 * 1024 {
            format!(
                "{dir} has {} free, below {kept_text} (scheduler.state_reserve_mib)",
                size(free)
            )
        } else {
            format!(
                "{dir} has {} free, and this change of {} would leave less than {kept_text} \
                 (scheduler.state_reserve_mib)",
                size(free),
                size(bytes)
            )
        }))
    }

    /// Free space on the store's file system, for unprivileged use (bytes).
    fn free_bytes(&self) -> Result<u64> {
        let st = nix::sys::statvfs::statvfs(&self.dir).map_err(|source| Error::Statvfs {
            dir: self.dir.display().to_string(),
            source,
        })?;
        Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
    }

    /// Makes everything applied so far durable against a process crash.
    pub async fn flush(&self) -> Result<()> {
        self.db.flush_async().await?;
        Ok(())
    }

    pub fn payload(&self, id: JobId) -> Result<Payload> {
        match self.payloads.get(id.0.to_be_bytes())? {
            Some(v) => decode(&id.0.to_be_bytes(), &v),
            None => Ok(Payload::default()),
        }
    }

    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.job_shared(id, &mut Shared::default())
    }

    fn job_shared(&self, id: JobId, shared: &mut Shared) -> Result<Option<Job>> {
        match self.jobs.get(id.0.to_be_bytes())? {
            Some(v) => {
                let job = decode(&id.0.to_be_bytes(), &v)?;
                Ok(Some(self.complete(job, shared)?))
            }
            None => match self.submitted_task(id)? {
                Some((record, i)) => {
                    let first = self.first_task(&record, shared)?;
                    Ok(Some(record.task(&first, i)))
                }
                None => Ok(None),
            },
        }
    }

    /// An array's first task made whole: what [`ArrayRecord::task`] makes every task from.
    fn first_task(&self, record: &ArrayRecord, shared: &mut Shared) -> Result<Job> {
        self.complete(record.first.clone(), shared)
    }

    /// The array record that holds job `id` as submitted, and its place there, when `id` is
    /// a task without a record of its own.
    fn submitted_task(&self, id: JobId) -> Result<Option<(ArrayRecord, usize)>> {
        let Some((k, v)) = self
            .arrays
            .range(..=id.0.to_be_bytes())
            .next_back()
            .transpose()?
        else {
            return Ok(None);
        };
        let record: ArrayRecord = decode(&k, &v)?;
        let place = id.0 - record.first.id.0;
        Ok((place < u64::from(record.count)).then_some((record, place as usize)))
    }

    /// How job `id` is as far as its record says, without its spec (cheaper than
    /// [`Store::job`] for an array's task): its state.
    pub fn job_state(&self, id: JobId) -> Result<Option<ysched_common::JobState>> {
        match self.jobs.get(id.0.to_be_bytes())? {
            Some(v) => Ok(Some(decode::<Job>(&id.0.to_be_bytes(), &v)?.state)),
            None => Ok(self.submitted_task(id)?.map(|(record, i)| {
                record
                    .ended_at(i)
                    .map_or(record.first.state, |ended| ended.state)
            })),
        }
    }

    /// The jobs of `ids` that exist, in the order asked (the tasks of an array share one
    /// read of their spec).
    pub fn jobs_by_id(&self, ids: impl IntoIterator<Item = JobId>) -> Result<Vec<Job>> {
        let mut shared = Shared::default();
        let mut found = Vec::new();
        for id in ids {
            if let Some(job) = self.job_shared(id, &mut shared)? {
                found.push(job);
            }
        }
        Ok(found)
    }

    /// Finished jobs, oldest id first, for listings that include history.
    pub fn finished_jobs(&self) -> Result<Vec<Job>> {
        let mut res = Vec::new();
        let mut shared = Shared::default();
        for kv in self.jobs.iter() {
            let (k, v) = kv?;
            let job: Job = decode(&k, &v)?;
            if job.state.is_terminal() {
                res.push(self.complete(job, &mut shared)?);
            }
        }
        // Tasks that ended without a record of their own.
        let before = res.len();
        for kv in self.arrays.iter() {
            let (k, v) = kv?;
            let record: ArrayRecord = decode(&k, &v)?;
            if record.ended.is_empty() {
                continue;
            }
            let first = self.first_task(&record, &mut shared)?;
            for place in record.ended.iter().flat_map(|e| e.iter()) {
                let id = first.id.0 + u64::from(place);
                if !self.jobs.contains_key(id.to_be_bytes())? {
                    res.push(record.task(&first, place as usize));
                }
            }
        }
        if res.len() > before {
            res.sort_by_key(|j| j.id);
        }
        Ok(res)
    }

    /// A decoded job record made whole: an array task gets the spec its array shares (read
    /// once per array and shared through `shared`, as is its owner). Records written before
    /// arrays existed carry their own spec and are returned as they are.
    fn complete(&self, mut job: Job, shared: &mut Shared) -> Result<Job> {
        let Some(task) = job.array else {
            return Ok(job);
        };
        let array_id = task.array_id;
        let entry = match shared.arrays.entry(array_id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) if job.spec.array.is_none() => {
                let key = array_id.0.to_be_bytes();
                let v = self.array_specs.get(key)?.ok_or(Error::MissingArraySpec {
                    id: job.id.0,
                    array_id: array_id.0,
                })?;
                let spec: JobSpec = decode(&key, &v)?;
                e.insert((std::sync::Arc::new(spec), None))
            }
            // A record that carries its own spec (written before arrays had `array_specs`).
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert((std::sync::Arc::clone(&job.spec), None))
            }
        };
        if job.spec.array.is_none() || *entry.0 == *job.spec {
            job.spec = std::sync::Arc::clone(&entry.0);
        }
        match &entry.1 {
            Some(owner) if **owner == *job.owner => job.owner = std::sync::Arc::clone(owner),
            Some(_) => {}
            None => entry.1 = Some(std::sync::Arc::clone(&job.owner)),
        }
        Ok(job)
    }

    /// The newest `limit` audit records (all when 0), newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<AuditRecord>> {
        let n = if limit == 0 { usize::MAX } else { limit };
        self.audit
            .iter()
            .rev()
            .take(n)
            .map(|kv| {
                let (k, v) = kv?;
                decode(&k, &v)
            })
            .collect()
    }

    /// The recorded runs that ended in `[from_ms, to_ms)`, oldest end first.
    pub fn runs_between(&self, from_ms: i64, to_ms: i64) -> Result<Vec<RunRecord>> {
        let mut runs = Vec::new();
        self.scan_runs(from_ms, to_ms, |run| runs.push(run))?;
        Ok(runs)
    }

    /// Calls `each` with every recorded run that ended in `[from_ms, to_ms)`, oldest end
    /// first, without collecting them.
    pub fn scan_runs(
        &self,
        from_ms: i64,
        to_ms: i64,
        mut each: impl FnMut(RunRecord),
    ) -> Result<()> {
        self.scan_run_views(from_ms, to_ms, |run| each(run.to_record()))
    }

    /// [`Store::scan_runs`] with each run borrowed from the store's page: a report over a
    /// million runs copies no string. Two threads share the work: one walks the tree and hands
    /// over batches of entries (sled's iteration is most of the cost), the caller's decodes
    /// them and calls `each`.
    pub fn scan_run_views(
        &self,
        from_ms: i64,
        to_ms: i64,
        mut each: impl FnMut(&RunView<'_>),
    ) -> Result<()> {
        if from_ms >= to_ms {
            return Ok(());
        }
        const BATCH: usize = 4096;
        type Entries = Vec<(sled::IVec, sled::IVec)>;
        let range = usage::first_key(from_ms)..usage::first_key(to_ms);
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<std::result::Result<Entries, sled::Error>>(8);
        std::thread::scope(|scope| {
            let tree = &self.usage;
            scope.spawn(move || {
                let mut batch = Vec::with_capacity(BATCH);
                for kv in tree.range(range) {
                    match kv {
                        Ok(kv) => batch.push(kv),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                    if batch.len() == BATCH {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                        if tx.send(Ok(full)).is_err() {
                            return; // the reader stopped (a corrupt record)
                        }
                    }
                }
                if !batch.is_empty() {
                    let _ = tx.send(Ok(batch));
                }
            });
            for batch in rx {
                for (k, v) in batch? {
                    each(&usage::decode(&k, &v)?);
                }
            }
            Ok(())
        })
    }

    /// Whether a run with the same end, job and restart as `run` is recorded.
    pub fn has_run(&self, run: &RunRecord) -> Result<bool> {
        Ok(self.usage.contains_key(usage::key(run))?)
    }

    /// How many runs are recorded (counts them: for tests and benchmarks).
    pub fn run_count(&self) -> usize {
        self.usage.len()
    }

    /// A job's history: for an array's task, the array's submit first (one event for all
    /// its tasks, under the array's id), then its own.
    pub fn job_events(&self, job: &Job) -> Result<Vec<JobEvent>> {
        let mut events = self.events(job.id)?;
        if let Some(task) = job.array.filter(|a| a.array_id != job.id) {
            let submitted = self
                .events(task.array_id)?
                .into_iter()
                .find(|e| e.kind == JobEventKind::Submitted.as_str());
            if let Some(e) = submitted {
                events.insert(0, e);
            }
        }
        // A task that ended without a record of its own: its end's events are kept with the
        // array.
        if job.array.is_some() && !self.jobs.contains_key(job.id.0.to_be_bytes())? {
            if let Some((record, i)) = self.submitted_task(job.id)? {
                if let Some(ended) = record.ended_at(i) {
                    events.extend(ended.events.iter().cloned());
                }
            }
        }
        Ok(events)
    }

    pub fn events(&self, id: JobId) -> Result<Vec<JobEvent>> {
        self.events
            .scan_prefix(id.0.to_be_bytes())
            .map(|kv| {
                let (k, v) = kv?;
                decode(&k, &v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_common::{JobSpec, JobState, Owner};

    fn job(id: u64, state: JobState) -> Job {
        Job {
            id: JobId(id),
            spec: std::sync::Arc::new(JobSpec {
                script: "#!/bin/sh\ntrue\n".into(),
                ..Default::default()
            }),
            owner: std::sync::Arc::new(Owner {
                uid: 0,
                gid: 0,
                user: "root".into(),
                groups: vec![],
            }),
            tier_value: 1000,
            state,
            reason: String::new(),
            alloc: vec![],
            restart_count: 0,
            exit_code: None,
            signal: None,
            submit_time: 1,
            start_time: None,
            end_time: None,
            launched: false,
            grace_secs: 30,
            checkpoint_dir: String::new(),
            stop: None,
            last_checkpoint: None,
            parts: Default::default(),
            launch_attempts: 0,
            queued_at: None,
            array: None,
        }
    }

    #[tokio::test]
    async fn roundtrip_and_recover() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let mut b = Batch::default();
            b.put_job(&job(1, JobState::Pending));
            b.put_payload(
                JobId(1),
                &Payload {
                    script: "s".into(),
                    env: Default::default(),
                },
            );
            b.put_job(&job(2, JobState::Completed));
            b.event(JobId(1), 5, "submitted", "x");
            b.event(JobId(1), 6, "started", "y");
            b.set_next_job_id(3);
            for action in ["first", "second"] {
                b.audit(&AuditRecord {
                    time: 1,
                    user: "root".into(),
                    uid: 0,
                    action: action.into(),
                    job_id: None,
                    detail: String::new(),
                    host: None,
                });
            }
            store.apply(b).unwrap();
            let log = store.audit_log(0).unwrap();
            assert_eq!(
                log.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
                ["second", "first"]
            );
            assert_eq!(store.audit_log(1).unwrap().len(), 1);
            let mut b = Batch::default();
            b.event(JobId(1), 7, "ended", "z");
            store.apply(b).unwrap();
            store.flush().await.unwrap();
            let ev = store.events(JobId(1)).unwrap();
            assert_eq!(ev.iter().map(|e| e.time).collect::<Vec<_>>(), [5, 6, 7]);
            assert_eq!(store.payload(JobId(1)).unwrap().script, "s");
            assert!(store.job(JobId(1)).unwrap().unwrap().spec.script.is_empty());
        }
        // sled's flusher may still hold the lock briefly after drop (sled#1234).
        let store = loop {
            match Store::open(dir.path()) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        let rec = store.recover().unwrap();
        assert_eq!(rec.next_job_id, 3);
        assert_eq!(
            rec.active_jobs.keys().copied().collect::<Vec<_>>(),
            [JobId(1)]
        );
        assert_eq!(store.finished_jobs().unwrap().len(), 1);
    }

    fn run(job: u64, end: i64) -> RunRecord {
        RunRecord {
            job_id: JobId(job),
            restart_count: 0,
            account: "vision".into(),
            user: "alice".into(),
            uid: 1000,
            tier: "high".into(),
            gpus: 2,
            cpus: 4,
            queued_at: end - 20,
            start: end - 10,
            end,
            outcome: "COMPLETED".into(),
            preempted_by: None,
            preemptor_account: None,
            checkpoint_saved: false,
            lost_gpu_secs: 0,
        }
    }

    #[tokio::test]
    async fn runs_are_scanned_by_end_written_once_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let mut b = Batch::default();
            for (job, end) in [(3, 300), (1, 100), (2, 200), (4, 400)] {
                b.put_run(&run(job, end));
            }
            b.put_job(&job(1, JobState::Completed));
            store.apply(b).unwrap();
            // The same run written again (an event applied twice) replaces itself.
            let mut b = Batch::default();
            b.put_run(&run(2, 200));
            assert!(!b.is_empty());
            store.apply(b).unwrap();
            store.flush().await.unwrap();
            assert_eq!(store.run_count(), 4);
            let ends = |from, to| {
                store
                    .runs_between(from, to)
                    .unwrap()
                    .iter()
                    .map(|r| r.end)
                    .collect::<Vec<_>>()
            };
            assert_eq!(ends(100, 400), [100, 200, 300], "[from, to)");
            assert_eq!(ends(101, i64::MAX), [200, 300, 400]);
            assert_eq!(ends(400, 100), Vec::<i64>::new());
            assert!(store.has_run(&run(3, 300)).unwrap());
            assert!(!store.has_run(&run(3, 301)).unwrap());
        }
        let store = loop {
            match Store::open(dir.path()) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        assert_eq!(store.runs_between(0, i64::MAX).unwrap()[0], run(1, 100));
        assert_eq!(store.run_count(), 4);
    }
}
