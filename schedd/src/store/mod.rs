//! Durable state in sled. The only module that knows sled or the key layout.
//!
//! Trees and keys:
//! - `jobs`:     job id (u64 big-endian) → `Job` as JSON, with `spec.script`/`spec.env` emptied
//! - `payloads`: job id → `Payload` (script and environment: large, only needed at launch)
//! - `events`:   job id ++ sequence (u64 BE each) → `JobEvent` as JSON, append-only
//! - `nodes`:    node name → `Node` as JSON
//! - `audit`:    a sled-generated increasing id (u64 BE) → `AuditRecord` as JSON, append-only
//! - `meta`:     `next_job_id` → u64 BE. Written in the same transaction as each new job, so an
//!   id is never reused, even after a crash (sled's `generate_id` jumps after recovery).
//! - `usage`:    end time (i64 with the sign bit flipped, BE) ++ job id (u64 BE) ++ restart
//!   count (u32 BE) → `RunRecord` in a compact binary form (see [`usage`]): one entry per run,
//!   written in the batch of the event that ended it. Ordered by end time, so a time range is
//!   one range scan; a run written again (the same end, job and restart) replaces itself and
//!   is never counted twice.
//!
//! Writes become durable on [`Store::flush`]; callers acknowledge only after it.

use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::collections::BTreeMap;
use std::path::Path;
use ysched_common::{AuditRecord, Job, JobEvent, JobId, Node, RunRecord, RunView};

mod usage;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state store: {0}")]
    Sled(#[from] sled::Error),
    #[error("state store: corrupt record {key}: {source}")]
    Corrupt {
        key: String,
        source: serde_json::Error,
    },
    #[error("state store: corrupt usage record {key}: {why}")]
    CorruptRun { key: String, why: String },
    #[error("state store: cannot open {path}: {source}")]
    Open { path: String, source: sled::Error },
    #[error(
        "state store full: {dir} has {free} free, below the reserve of {reserve} MiB \
         (scheduler.state_reserve_mib); nothing was changed: free some space and retry"
    )]
    Full {
        dir: String,
        free: String,
        reserve: u64,
    },
    #[error("state store unwritable: cannot check free space in {dir}: {source}")]
    Statvfs { dir: String, source: nix::Error },
    #[error("state store unwritable: writes are refused (a test's failure injection)")]
    Injected,
}

impl Error {
    /// The store could not take a write (disk full, I/O error): the request was refused and
    /// nothing changed, as opposed to a bad record.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Full { .. }
                | Error::Statvfs { .. }
                | Error::Injected
                | Error::Sled(sled::Error::Io(_))
        )
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The parts of a job spec kept out of memory until launch.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Payload {
    pub script: String,
    pub env: BTreeMap<String, String>,
}

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
    jobs: Vec<Vec<u8>>,
    job_values: Vec<Vec<u8>>,
    events: Vec<(JobId, JobEvent)>,
    payloads: Vec<(JobId, Vec<u8>)>,
    nodes: Vec<(String, Vec<u8>)>,
    audit: Vec<Vec<u8>>,
    next_job_id: Option<u64>,
    runs: Vec<(usage::RunKey, Vec<u8>)>,
}

impl Batch {
    pub fn put_job(&mut self, job: &Job) {
        self.jobs.push(job.id.0.to_be_bytes().to_vec());
        // Script and environment live in `payloads`; a job record never repeats them.
        let value = if job.spec.script.is_empty() && job.spec.env.is_empty() {
            serde_json::to_vec(job)
        } else {
            let mut slim = job.clone();
            let spec = std::sync::Arc::make_mut(&mut slim.spec);
            spec.script.clear();
            spec.env.clear();
            serde_json::to_vec(&slim)
        };
        self.job_values.push(value.expect("job serializes"));
    }

    pub fn put_payload(&mut self, id: JobId, payload: &Payload) {
        self.payloads
            .push((id, serde_json::to_vec(payload).expect("payload serializes")));
    }

    pub fn event(&mut self, id: JobId, time: i64, kind: &str, detail: impl Into<String>) {
        self.events.push((
            id,
            JobEvent {
                time,
                kind: kind.to_string(),
                detail: detail.into(),
            },
        ));
    }

    pub fn put_node(&mut self, node: &Node) {
        self.nodes.push((
            node.name.clone(),
            serde_json::to_vec(node).expect("node serializes"),
        ));
    }

    pub fn audit(&mut self, record: &AuditRecord) {
        self.audit
            .push(serde_json::to_vec(record).expect("audit record serializes"));
    }

    /// A run's usage record (see the `usage` tree).
    pub fn put_run(&mut self, run: &RunRecord) {
        self.runs.push((usage::key(run), usage::encode(run)));
    }

    pub fn set_next_job_id(&mut self, next: u64) {
        self.next_job_id = Some(next);
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.events.is_empty()
            && self.payloads.is_empty()
            && self.nodes.is_empty()
            && self.audit.is_empty()
            && self.next_job_id.is_none()
            && self.runs.is_empty()
    }
}

#[derive(Clone)]
pub struct Store {
    dir: std::path::PathBuf,
    /// Set by tests: every write is refused, as on a failing disk.
    fail_writes: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Free space below which writes are refused (bytes).
    reserve_bytes: u64,
    db: sled::Db,
    jobs: sled::Tree,
    payloads: sled::Tree,
    events: sled::Tree,
    nodes: sled::Tree,
    audit: sled::Tree,
    meta: sled::Tree,
    usage: sled::Tree,
}

const NEXT_JOB_ID: &[u8] = b"next_job_id";

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|source| Error::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

/// Event keys are the job id, then an increasing number: this bit and a store-wide id (from
/// `sled::Db::generate_id`), or a per-job sequence number in stores written before.
const EVENT_ID_BASE: u64 = 1 << 63;

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
    /// reopening), so a full disk must be caught before sled sees it.
    pub fn open_with_reserve(dir: &Path, reserve_mib: u64) -> Result<Store> {
        let db = sled::Config::new()
            .path(dir.join("db"))
            // The page cache is sled's main memory cost, and a bound, not an allocation: job
            // records are small and read rarely, but a usage report walks a week of runs (a
            // million, some 80 MiB of pages), which this keeps in memory after the first: a
            // report from cached pages takes half the time of one read from the file.
            .cache_capacity(128 * 1024 * 1024)
            .open()
            .map_err(|source| Error::Open {
                path: dir.display().to_string(),
                source,
            })?;
        Ok(Store {
            dir: dir.to_path_buf(),
            fail_writes: Default::default(),
            reserve_bytes: reserve_mib.saturating_mul(1024 * 1024),
            jobs: db.open_tree("jobs")?,
            payloads: db.open_tree("payloads")?,
            events: db.open_tree("events")?,
            nodes: db.open_tree("nodes")?,
            audit: db.open_tree("audit")?,
            meta: db.open_tree("meta")?,
            usage: db.open_tree("usage")?,
            db,
        })
    }

    pub fn recover(&self) -> Result<Recovered> {
        let mut active_jobs = BTreeMap::new();
        let mut max_id = 0;
        for kv in self.jobs.iter() {
            let (k, v) = kv?;
            let job: Job = decode(&k, &v)?;
            max_id = max_id.max(job.id.0);
            if !job.state.is_terminal() {
                active_jobs.insert(job.id, job);
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

    /// Applies a batch atomically (not yet durable: see [`Store::flush`]).
    pub fn apply(&self, batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        let mut audit = Vec::with_capacity(batch.audit.len());
        for rec in &batch.audit {
            audit.push((self.db.generate_id()?.to_be_bytes(), rec.as_slice()));
        }
        let mut events = Vec::with_capacity(batch.events.len());
        for (id, ev) in &batch.events {
            // The store's own increasing ids order a job's events without reading its last
            // one first. The top bit puts them after the per-job sequence numbers that
            // stores written by earlier versions hold.
            let seq = EVENT_ID_BASE | self.db.generate_id()?;
            events.push((event_key(*id, seq), serde_json::to_vec(ev).expect("event")));
        }
        let res: std::result::Result<(), TransactionError<()>> = (
            &self.jobs,
            &self.payloads,
            &self.events,
            &self.nodes,
            &self.audit,
            &self.meta,
            &self.usage,
        )
            .transaction(|(jobs, payloads, ev, nodes, au, meta, usage)| {
                for (k, v) in batch.jobs.iter().zip(&batch.job_values) {
                    jobs.insert(k.as_slice(), v.as_slice())?;
                }
                for (id, v) in &batch.payloads {
                    payloads.insert(&id.0.to_be_bytes(), v.as_slice())?;
                }
                for (k, v) in &events {
                    ev.insert(k, v.as_slice())?;
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
            });
        match res {
            Ok(()) => Ok(()),
            Err(TransactionError::Storage(e)) => Err(e.into()),
            Err(TransactionError::Abort(())) => unreachable!("no transaction aborts"),
        }
    }

    /// Makes everything applied so far durable against a process crash.
    /// For tests: refuse every write from now on (`true`), as a failing disk would, or stop.
    pub fn fail_writes(&self, fail: bool) {
        self.fail_writes
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    /// Refuses (with [`Error::Full`]) when the file system is below the reserve: called before
    /// anything that writes, so a full disk refuses requests instead of breaking sled.
    pub fn check_room(&self) -> Result<()> {
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        if self.reserve_bytes == 0 {
            return Ok(());
        }
        let st = nix::sys::statvfs::statvfs(&self.dir).map_err(|source| Error::Statvfs {
            dir: self.dir.display().to_string(),
            source,
        })?;
        let free = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
        if free < self.reserve_bytes {
            return Err(Error::Full {
                dir: self.dir.display().to_string(),
                free: ysched_common::parse::format_size(free),
                reserve: self.reserve_bytes / (1024 * 1024),
            });
        }
        Ok(())
    }

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
        match self.jobs.get(id.0.to_be_bytes())? {
            Some(v) => Ok(Some(decode(&id.0.to_be_bytes(), &v)?)),
            None => Ok(None),
        }
    }

    /// Finished jobs, oldest id first, for listings that include history.
    pub fn finished_jobs(&self) -> Result<Vec<Job>> {
        let mut res = Vec::new();
        for kv in self.jobs.iter() {
            let (k, v) = kv?;
            let job: Job = decode(&k, &v)?;
            if job.state.is_terminal() {
                res.push(job);
            }
        }
        Ok(res)
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
