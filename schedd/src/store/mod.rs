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

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

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
mod recover;
mod room;
mod stable;
mod upkeep;
mod usage;
mod write;

#[cfg(test)]
use arrays::spec_placeholder;
use arrays::{same_but_place, spec_shared, ArrayRecord};
pub use batch::Batch;
pub use error::{Error, Result};
pub use history::Expired;
pub use listed::{Finished, FinishedEntry, PageRoom, StoredBytes};
use lock::open_when_unlocked;
pub use raft::{create_snapshot_file, APPLIED_MARK, MEMBERSHIP_MARK};
pub use recover::Recovered;
pub use room::Room;

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

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|source| Error::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
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

    /// The write lock (see [`Store::writes`]).
    pub(super) fn writing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For tests: refuse every write from now on (`true`), as a failing disk would, or stop.
    pub fn fail_writes(&self, fail: bool) {
        self.fail_writes
            .store(fail, std::sync::atomic::Ordering::SeqCst);
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
