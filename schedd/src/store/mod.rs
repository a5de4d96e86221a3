//! Durable state in sled: the only module that knows sled, the key layout and how the state
//! machine's changes (`state::Effects`) are encoded (`Batch`).
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
//!   `host/` ++ host name → the host's `HostEnrolment` as JSON.
//! - `usage`:    end time (i64 with the sign bit flipped, BE) ++ job id (u64 BE) ++ restart
//!   count (u32 BE) → `RunRecord` in a compact binary form (see [`usage`]): one entry per run,
//!   written in the batch of the event that ended it. Ordered by end time, so a time range is
//!   one range scan; a run written again (the same end, job and restart) replaces itself and
//!   is never counted twice.
//! - `index`:    which jobs are active, which arrays may have tasks as submitted, and which
//!   jobs ended when (see [`history`]): start-up reads only the active, history queries and
//!   retention go by end time. An end's key keeps the job's listing entry (see [`listed`]),
//!   so that a listing by end time is one range scan.
//! - `raft_log`, `raft_meta`: a replica's Raft log, vote and commit point, as bytes the
//!   `replica` module encodes (see [`raft`]); not part of the replicated state.
//!
//! Writes become durable on [`Store::flush`], against a power loss too (see [`stable`]);
//! callers acknowledge only after it.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use ysched_common::{HostEnrolment, Job, JobId, Node};

mod arrays;
mod batch;
mod ended;
mod error;
mod follow;
mod history;
mod listed;
mod lock;
mod raft;
mod reads;
mod stable;
mod upkeep;
mod usage;

#[cfg(test)]
use arrays::spec_placeholder;
use arrays::{same_but_place, spec_shared, ArrayRecord, Shared};
pub use batch::Batch;
use batch::{encode_job, JobWrite};
pub use error::{Error, Result};
pub use history::Expired;
use history::IndexWrite;
pub use listed::{Finished, FinishedEntry, PageRoom, StoredBytes};
use lock::open_when_unlocked;
pub use raft::{create_snapshot_file, APPLIED_MARK, MEMBERSHIP_MARK};

pub use crate::state::commands::Payload;
pub use upkeep::{bounded_detail, AUDIT_DETAIL_MAX_BYTES, BALLAST_BYTES, BALLAST_FILE};

#[cfg(test)]
mod array_tests;
#[cfg(test)]
mod follow_tests;
#[cfg(test)]
mod history_tests;
#[cfg(test)]
pub(crate) mod tests;

/// Everything recovered at start-up.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    /// Jobs that are not finished.
    pub active_jobs: BTreeMap<JobId, Job>,
    pub nodes: BTreeMap<String, Node>,
    /// Every host ever enrolled.
    pub hosts: BTreeMap<String, HostEnrolment>,
    pub next_job_id: u64,
}

/// Whose write it is, which decides how much of the state disk's reserve
/// (`scheduler.state_reserve_mib`) it may use (see `store::Store::check_room`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// A client's request (a submit, a cancel, an audited refusal): refused once the free
    /// space is below the reserve.
    Request,
    /// The cluster's own bookkeeping (agents' registrations and reports, placements, nodes'
    /// health): it may use three quarters of the reserve, so that requests filling the disk
    /// never keep jobs from being started, ended and acknowledged, nor agents from
    /// registering.
    Cluster,
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
    /// The least id an event batch may take (see [`EVENT_ID_FLOOR`]); changed under the
    /// write lock only.
    event_id_floor: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// What makes a flush survive a power loss (see [`stable`]).
    stability: std::sync::Arc<stable::Stability>,
    /// Held by every write and by a flush with its syncs, so that no write is half done in
    /// sled's log when it is synced: sled writes its log buffers from several threads, and a
    /// sync that caught a later buffer without an earlier one left, after a power loss, a log
    /// whose recovery panicked in sled ("tried to serialize Uninitialized"; 2 of 7 runs of the
    /// power-loss e2e test, 0 of 20 with this lock). Writes wait for a flush in progress
    /// (they still share it: group commit).
    writes: std::sync::Arc<std::sync::Mutex<()>>,
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
    index: sled::Tree,
    /// This replica's Raft log (see [`raft`]): entry index (u64 BE) → the entry as the
    /// `replica` module encodes it.
    raft_log: sled::Tree,
    /// This replica's vote, commit point and last purged entry (see [`raft`]).
    raft_meta: sled::Tree,
}

const NEXT_JOB_ID: &[u8] = b"next_job_id";
/// `meta` keys of hosts' enrolments: this, then the host's name.
pub(crate) const HOST_PREFIX: &[u8] = b"host/";

fn host_key(name: &str) -> Vec<u8> {
    [HOST_PREFIX, name.as_bytes()].concat()
}

/// `meta`: the least store-wide id the next batch of events may take. Event keys order a
/// job's events by ids this store generates; a replica whose state a snapshot replaced holds
/// the leader's keys, made from the leader's ids, which may be far above its own: its next
/// events must still sort after them (else a job's history lists out of order there). Set
/// when a snapshot is installed, above every event key it brought.
const EVENT_ID_FLOOR: &[u8] = b"event_id_floor";

/// How many bytes of disk a write of one byte may take: the value, and the log's pages
/// around it (see [`Store::check_room`]).
const WRITE_AMPLIFICATION: u64 = 2;

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|source| Error::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

/// Writes the `e` keys of the array tasks `batch` ends without their having run
/// ([`JobWrite::EndedTask`]): a task written as any job gets its own (with its listing, see
/// [`listed`]), and the tasks kept in their array's record (`compacted`) one per run of
/// consecutive ids that ended at the same time: cancelling a queued 10,000-task array writes
/// one key, not 10,000 (which had taken it from ~83 to ~200 ms). Those had no `j` key (a
/// task as submitted has none), so none is removed.
fn ended_tasks_indexed(
    batch: &Batch,
    compacted: &std::collections::HashSet<JobId>,
    index: &sled::transaction::TransactionalTree,
) -> std::result::Result<(), sled::transaction::UnabortableTransactionError> {
    // By array, then end: a run never spans two arrays (expiry takes a run as its array's).
    let mut kept: Vec<(JobId, i64, JobId)> = Vec::new();
    for (id, write) in &batch.jobs {
        let JobWrite::EndedTask(job) = write else {
            continue;
        };
        let end = history::end_of(job);
        if compacted.contains(id) {
            kept.push((job.array.map_or(*id, |a| a.array_id), end, *id));
        } else {
            index.remove(&history::active_key(*id))?;
            index.insert(&history::ended_key(end, *id), listed::listed_value(job))?;
        }
    }
    kept.sort_unstable();
    let mut runs = kept.into_iter().peekable();
    while let Some((array, end, first)) = runs.next() {
        let mut last = first;
        while let Some((_, _, next)) =
            runs.next_if(|&(a, e, id)| a == array && e == end && id.0 == last.0 + 1)
        {
            last = next;
        }
        index.insert(&history::ended_key(end, first), &listed::tasks_value(last))?;
    }
    Ok(())
}

/// What [`Store::resolve_removals`] found.
#[derive(Default)]
struct ResolvedRemovals {
    events: Vec<sled::IVec>,
    audit: Vec<sled::IVec>,
    audit_bytes: u64,
}

/// Event keys are the job id, then an increasing number: this bit and a store-wide id (from
/// `sled::Db::generate_id`), or a per-job sequence number in stores written before.
const EVENT_ID_BASE: u64 = 1 << 63;

/// Bits of an event's sequence for its place in its batch (see [`Store::apply`]).
const EVENT_SEQ_BITS: u32 = 24;

/// The least store-wide id whose events sort after the event keyed `key` (0 for the per-job
/// sequence numbers of older stores, which every generated id follows).
fn event_id_after(key: &[u8]) -> u64 {
    let Some(seq) = key.get(8..16).and_then(|s| <[u8; 8]>::try_from(s).ok()) else {
        return 0;
    };
    let seq = u64::from_be_bytes(seq);
    match seq.checked_sub(EVENT_ID_BASE) {
        Some(generated) => (generated >> EVENT_SEQ_BITS).saturating_add(1),
        None => 0,
    }
}

fn event_key(id: JobId, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.0.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

impl Store {
    /// Opens (or creates) the store under `dir`, with no free-space reserve (tests); schedd
    /// uses [`Store::open_with_reserve`].
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
                // The page cache is sled's main memory cost, and a bound, not an allocation
                // (sled counts pages at their size in the log; in memory they take somewhat
                // more). Every write brings its page in: with 100,000 jobs queued behind
                // 1,000 busy nodes (`bench loaded`) the pages of their records filled it, and
                // 128 MiB cost about 65 MiB more RSS than 64 (268 against 325-335 MiB: the
                // target is 300). A usage report walks a week of runs and reads again what
                // does not fit: over a million runs it takes 1.6-1.9 s with 64 MiB against
                // 0.5 s with 128 (the target is 2 s; 32 MiB took 5.3 s).
                .cache_capacity(64 * 1024 * 1024)
                .open()
        };
        let db = open_when_unlocked(dir, || upkeep::open_db(dir, open))?;
        let stability = stable::Stability::open(dir).map_err(Error::Sync)?;
        let audit = db.open_tree("audit")?;
        let store = Store {
            stability: std::sync::Arc::new(stability),
            writes: Default::default(),
            dir: dir.to_path_buf(),
            fail_writes: Default::default(),
            reserve_bytes: reserve_mib.saturating_mul(1024 * 1024),
            audit_bytes: std::sync::Arc::new(Self::count_audit_bytes(&audit)?.into()),
            event_id_floor: Default::default(),
            jobs: db.open_tree("jobs")?,
            payloads: db.open_tree("payloads")?,
            events: db.open_tree("events")?,
            nodes: db.open_tree("nodes")?,
            audit,
            meta: db.open_tree("meta")?,
            usage: db.open_tree("usage")?,
            array_specs: db.open_tree("array_specs")?,
            arrays: db.open_tree("arrays")?,
            index: db.open_tree("index")?,
            raft_log: db.open_tree("raft_log")?,
            raft_meta: db.open_tree("raft_meta")?,
            db,
        };
        store.build_index()?;
        if let Some(floor) = store.meta.get(EVENT_ID_FLOOR)? {
            let floor = <[u8; 8]>::try_from(floor.as_ref()).map_or(0, u64::from_be_bytes);
            store.event_id_floor.store(floor, Relaxed);
        }
        Ok(store)
    }

    /// What start-up needs: the active jobs (read through the index, so that the time does
    /// not grow with the history), the nodes and the id counter.
    pub fn recover(&self) -> Result<Recovered> {
        self.recover_and_tidy(true)
    }

    /// [`Store::recover`], writing nothing when `tidy` is false (a follower reads its state
    /// outside the replicated writes: see [`follow`]); with it, the arrays found to have no
    /// task as submitted left lose their index key.
    fn recover_and_tidy(&self, tidy: bool) -> Result<Recovered> {
        let mut active_jobs = BTreeMap::new();
        let mut shared = Shared::default();
        for id in self.active_ids() {
            let id = id?;
            let key = id.0.to_be_bytes();
            let Some(v) = self.jobs.get(key)? else {
                continue;
            };
            let job: Job = decode(&key, &v)?;
            if !job.state.is_terminal() {
                let job = self.complete(job, &mut shared)?;
                active_jobs.insert(job.id, job);
            }
        }
        // Tasks still as submitted: every task of a live array without a record of its own
        // that has not ended. An array with none left is live no more.
        let mut done = Vec::new();
        for array_id in self.live_array_ids() {
            let array_id = array_id?;
            if !self.tasks_as_submitted(array_id, &mut active_jobs, &mut shared)? {
                done.push(array_id);
            }
        }
        if tidy && !done.is_empty() && !self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            self.arrays_done(&done)?;
        }
        // The highest id ever given: the counter, or (in stores from before it was kept)
        // the last record's.
        let mut max_id = 0;
        if let Some(k) = self.jobs.last()?.map(|(k, _)| k) {
            if let Ok(bytes) = <[u8; 8]>::try_from(k.as_ref()) {
                max_id = u64::from_be_bytes(bytes);
            }
        }
        if let Some((k, v)) = self.arrays.last()? {
            let record: ArrayRecord = decode(&k, &v)?;
            max_id = max_id.max(record.first.id.0 + u64::from(record.count).saturating_sub(1));
        }
        let mut nodes = BTreeMap::new();
        for kv in self.nodes.iter() {
            let (k, v) = kv?;
            let mut node: Node = decode(&k, &v)?;
            node.connected = false;
            nodes.insert(node.name.clone(), node);
        }
        let mut hosts = BTreeMap::new();
        for kv in self.meta.scan_prefix(HOST_PREFIX) {
            let (k, v) = kv?;
            let host: HostEnrolment = decode(&k, &v)?;
            hosts.insert(host.name.clone(), host);
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
            hosts,
            next_job_id: stored_next.max(max_id + 1),
        })
    }

    /// Adds to `active` the tasks of array `array_id` still as submitted (none of their own
    /// record, not ended, not in `active` already); whether the array has any.
    fn tasks_as_submitted(
        &self,
        array_id: JobId,
        active: &mut BTreeMap<JobId, Job>,
        shared: &mut Shared,
    ) -> Result<bool> {
        let key = array_id.0.to_be_bytes();
        let Some(v) = self.arrays.get(key)? else {
            return Ok(false);
        };
        let record: ArrayRecord = decode(&key, &v)?;
        let mut first: Option<Job> = None;
        for i in 0..record.count as usize {
            let id = JobId(array_id.0 + i as u64);
            if record.ended_at(i).is_some()
                || active.contains_key(&id)
                || self.jobs.contains_key(id.0.to_be_bytes())?
            {
                continue;
            }
            if first.is_none() {
                first = Some(self.first_task(&record, shared)?);
            }
            let job = first.as_ref().expect("set above");
            active.insert(id, record.task(job, i));
        }
        Ok(first.is_some())
    }

    /// Applies a change atomically (not yet durable: see [`Store::flush`]): a batch, or an
    /// event's effects, encoded here.
    pub fn apply(&self, change: impl Into<Batch>) -> Result<()> {
        self.apply_batch(&change.into())
    }

    /// Applies `batches` in their order, as [`Store::apply`] of each would, in as few
    /// transactions as their kinds allow (see [`Batch::mergeable`]): sled 0.34 writes its log
    /// buffer out at every transaction, so a wave of submits written as one costs one write
    /// instead of one each. On an error, the batches before the failed transaction are
    /// applied, the rest not.
    pub fn apply_group(&self, batches: impl IntoIterator<Item = Batch>) -> Result<()> {
        let mut merged: Option<Batch> = None;
        for batch in batches {
            if batch.is_empty() {
                continue;
            }
            if !batch.mergeable() {
                if let Some(before) = merged.take() {
                    self.apply_batch(&before)?;
                }
                self.apply_batch(&batch)?;
                continue;
            }
            match &mut merged {
                Some(before) => before.absorb(batch),
                None => merged = Some(batch),
            }
        }
        match merged {
            Some(batch) => self.apply_batch(&batch),
            None => Ok(()),
        }
    }

    /// [`Store::apply`] of a batch the caller keeps.
    fn apply_batch(&self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        let _writing = self.writing();
        let mut audit = Vec::with_capacity(batch.audit.len());
        let mut audit_bytes = 0;
        if !batch.audit.is_empty() {
            // After the last entry, whatever the store's own counter says: a replica whose
            // state a snapshot replaced holds the leader's keys, and its entries must stay
            // in the log's order (retention removes the oldest: see `Removals`).
            let mut next = match self.audit.last()? {
                Some((k, _)) => <[u8; 8]>::try_from(k.as_ref())
                    .map_or(0, |k| u64::from_be_bytes(k).saturating_add(1)),
                None => 0,
            };
            for rec in &batch.audit {
                let id = self.db.generate_id()?.max(next);
                next = id.saturating_add(1);
                audit.push((id.to_be_bytes(), rec.as_slice()));
                audit_bytes += 8 + rec.len() as u64;
            }
        }
        let removed = self.resolve_removals(&batch.removals)?;
        // Keyed here, and written in the transaction unless their task was compacted.
        let mut events = Vec::with_capacity(batch.events.len());
        if !batch.events.is_empty() {
            // The store's own increasing ids order a job's events without reading its last
            // one first: one per batch, shifted, plus the event's place in the batch (a
            // batch may hold thousands: an array's cancel). Sequences after those of earlier
            // batches (a generated id is larger than every earlier one, shifted or not), and
            // the top bit puts them after the per-job sequence numbers that stores written
            // by earlier versions hold.
            let generated = self
                .db
                .generate_id()?
                .max(self.event_id_floor.load(Relaxed));
            self.event_id_floor
                .store(generated.saturating_add(1), Relaxed);
            let base = EVENT_ID_BASE + (generated << EVENT_SEQ_BITS);
            for (i, (id, ev)) in batch.events.iter().enumerate() {
                let seq = base + i as u64;
                events.push((*id, event_key(*id, seq), ev));
            }
        }
        let own_records = self.own_records_of_ended_tasks(batch)?;
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
            &self.index,
        )
            .transaction(
                |(jobs, payloads, ev, nodes, au, meta, usage, specs, arrays, index)| {
                    let gone = &batch.removals;
                    for id in &gone.jobs {
                        jobs.remove(&id.0.to_be_bytes())?;
                    }
                    for id in gone.payloads.iter().chain(&gone.arrays) {
                        payloads.remove(&id.0.to_be_bytes())?;
                    }
                    for id in &gone.arrays {
                        specs.remove(&id.0.to_be_bytes())?;
                        arrays.remove(&id.0.to_be_bytes())?;
                    }
                    for k in &removed.events {
                        ev.remove(k)?;
                    }
                    for k in &removed.audit {
                        au.remove(k)?;
                    }
                    for k in &gone.index {
                        index.remove(k.as_slice())?;
                    }
                    for k in &gone.usage {
                        usage.remove(k.as_slice())?;
                    }
                    for write in &batch.index {
                        match write {
                            IndexWrite::Active(id) => {
                                index.insert(&history::active_key(*id), &[])?;
                            }
                            IndexWrite::Ended(id, end, value) => {
                                index.remove(&history::active_key(*id))?;
                                index.insert(&history::ended_key(*end, *id), value.as_slice())?;
                            }
                            IndexWrite::EndedTasks { first, last, end } => {
                                index.insert(
                                    &history::ended_key(*end, *first),
                                    &listed::tasks_value(*last),
                                )?;
                            }
                            IndexWrite::LiveArray(id) => {
                                index.insert(&history::live_array_key(*id), &[])?;
                            }
                        }
                    }
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
                    ended_tasks_indexed(batch, &finished.compacted, index)?;
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
                    for (name, v) in &batch.hosts {
                        meta.insert(host_key(name), v.as_slice())?;
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
                    for (k, v) in &batch.marks {
                        meta.insert(*k, v.as_slice())?;
                    }
                    Ok::<(), ConflictableTransactionError<()>>(())
                },
            );
        release_deferred();
        match res {
            Ok(()) => {
                use std::sync::atomic::Ordering::Relaxed;
                self.audit_bytes.fetch_add(audit_bytes, Relaxed);
                if removed.audit_bytes > 0 {
                    let _ = self.audit_bytes.fetch_update(Relaxed, Relaxed, |b| {
                        Some(b.saturating_sub(removed.audit_bytes))
                    });
                }
                Ok(())
            }
            Err(TransactionError::Storage(e)) => Err(e.into()),
            Err(TransactionError::Abort(())) => unreachable!("no transaction aborts"),
        }
    }

    /// The keys of this store's own making that `removals` names: the history entries of
    /// its jobs and arrays, and its oldest audit entries (with their bytes). Read under the
    /// write lock, so that they are the ones its transaction removes.
    fn resolve_removals(&self, removals: &batch::Removals) -> Result<ResolvedRemovals> {
        let mut resolved = ResolvedRemovals::default();
        for id in removals.events_of.iter().chain(&removals.arrays) {
            for k in self.events.scan_prefix(id.0.to_be_bytes()).keys() {
                resolved.events.push(k?);
            }
        }
        for kv in self.audit.iter().take(removals.oldest_audit) {
            let (k, v) = kv?;
            resolved.audit_bytes += (k.len() + v.len()) as u64;
            resolved.audit.push(k);
        }
        Ok(resolved)
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

    /// The write lock (see [`Store::writes`]).
    pub(super) fn writing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Makes everything applied so far durable, against a process crash and a power loss:
    /// sled's flush, then the syncs it leaves out (see [`stable`]), on a blocking thread, with
    /// no write in progress (see [`Store::writes`]). sled's own `flush_async` would run it on
    /// sled's thread pool, one more hand-off.
    pub async fn flush(&self) -> Result<()> {
        let db = self.db.clone();
        let stability = self.stability.clone();
        let writes = self.writes.clone();
        tokio::task::spawn_blocking(move || {
            let _writing = writes.lock().unwrap_or_else(|e| e.into_inner());
            db.flush()?;
            release_deferred();
            stability.settle().map_err(Error::Sync)
        })
        .await
        .map_err(|e| Error::Sync(std::io::Error::other(e)))?
    }
}

/// Hands what sled left for later on this thread (the log buffers and pages its write or
/// flush replaced) to the shared queue, where it is freed as soon as no reader can still see
/// it. sled frees them through crossbeam's epochs, which keep each thread's deferred frees in
/// a bag of 64 until it is full: a replaced log buffer holds its 512 KiB segment, and the
/// bags of the many threads that write and flush for schedd held hundreds of them (about
/// 125 of 315 MiB of heap at 20,000 queued jobs, measured with heaptrack).
fn release_deferred() {
    crossbeam_epoch::pin().flush();
}
