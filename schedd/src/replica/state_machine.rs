//! The replicated state: committed entries applied in order to the replica's store, each
//! with the mark of its position in the same transaction (see `store::raft`), so that an
//! entry is applied exactly once across crashes; snapshots are the whole state, kept as files
//! in the store's `snapshots/` (built, sent and received as streams: the state of 100,000 jobs
//! is some hundreds of MiB).
//!
//! A follower also keeps warm what a new leader needs ([`Warm`]: the active jobs, nodes, id
//! counter and usage book that start-up would read from the store), brought up to date from
//! each entry it applies and rebuilt after a snapshot is installed, so that once elected it
//! serves without reading its whole state again.

use super::{decode, encode, StorageError, TypeConfig};
use crate::fair_share::UsageBook;
use crate::store::{Recovered, Store, APPLIED_MARK, MEMBERSHIP_MARK};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageIOError,
    StoredMembership,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The entry applied last and the membership in effect then.
type Applied = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>);

/// The last snapshot built or installed: its description and its file.
type Current = Option<(SnapshotMeta<u64, BasicNode>, PathBuf)>;

/// What a follower keeps of its state for the day it leads: what `Cluster::start` would
/// otherwise read from the store.
#[derive(Debug, Clone)]
pub struct Warm {
    /// The active jobs, the nodes and the id counter, as `Store::recover` reads them.
    pub recovered: Recovered,
    /// Every recorded run, decayed as of the last one (the leader moves it on to its time).
    pub usage: UsageBook,
    /// The entry applied last: the state these are of.
    applied: Option<LogId<u64>>,
}

impl Warm {
    /// Read whole from `store` (at start, and after a snapshot is installed).
    fn read(store: &Store, usage_half_life_ms: i64) -> Result<Warm, crate::store::Error> {
        let recovered = store.recover_read_only()?;
        let mut usage = UsageBook::new(usage_half_life_ms, 0);
        store.scan_runs(0, i64::MAX, |run| usage.add_run(&run))?;
        let applied = marks(store.state_mark(APPLIED_MARK)?, None)
            .map_err(|e| crate::store::Error::Snapshot(e.to_string()))?
            .0;
        Ok(Warm {
            recovered,
            usage,
            applied,
        })
    }
}

/// Where the warm state stands.
enum Kept {
    /// Not kept (a state machine for tests, or one whose warm state could not be kept up).
    Off,
    /// Kept: with the half-life the usage book is built with.
    On(Box<Warm>, i64),
    /// Handed to the leader, with the half-life to keep it again with once it steps down.
    Taken(i64),
}

/// The state machine of one replica; clones share it (a clone builds snapshots).
#[derive(Clone)]
pub struct StateMachine {
    store: Store,
    current: Arc<Mutex<Current>>,
    /// Snapshots built so far: part of each one's id, unique when two cover the same entry.
    built: Arc<std::sync::atomic::AtomicU64>,
    /// What this replica keeps warm; locked across each entry's apply, so that it is always
    /// of the entry the store's mark names.
    warm: Arc<Mutex<Kept>>,
}

impl StateMachine {
    /// A state machine that keeps nothing warm (its leader reads its state from the store).
    /// The snapshot files a previous run left are removed (none is current yet).
    pub fn new(store: Store) -> Self {
        if let Ok(dir) = store.snapshot_dir() {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        StateMachine {
            store,
            current: Default::default(),
            built: Default::default(),
            warm: Arc::new(Mutex::new(Kept::Off)),
        }
    }

    /// A state machine that keeps its state warm ([`Warm`]), read whole from `store` now;
    /// `usage_half_life_ms`: the fair share's half-life the usage book decays with.
    pub fn keeping_warm(
        store: Store,
        usage_half_life_ms: i64,
    ) -> Result<Self, crate::store::Error> {
        let warm = Warm::read(&store, usage_half_life_ms)?;
        let sm = Self::new(store);
        *sm.warm() = Kept::On(Box::new(warm), usage_half_life_ms);
        Ok(sm)
    }

    /// The warm state, for the leader this replica now is, if it is of the entry the store
    /// applied last (else `None`: the leader reads the store). Kept no longer after this.
    pub fn take_warm(&self) -> Option<Warm> {
        let mut kept = self.warm();
        let half_life = match &*kept {
            Kept::On(_, half_life) | Kept::Taken(half_life) => *half_life,
            Kept::Off => return None,
        };
        let Kept::On(warm, _) = std::mem::replace(&mut *kept, Kept::Taken(half_life)) else {
            return None;
        };
        let stored = self
            .store
            .state_mark(APPLIED_MARK)
            .ok()
            .and_then(|m| marks(m, None).ok())
            .map(|(applied, _)| applied);
        if stored != Some(warm.applied) {
            tracing::warn!(
                "the warm state is of entry {:?}, the store's of {:?}: reading the store",
                warm.applied,
                stored.flatten()
            );
            return None;
        }
        Some(*warm)
    }

    /// A leader that stepped down keeps its state warm again: read whole from the store now,
    /// under the lock each entry's apply takes, so that it is of the entry the store applied
    /// last. A state machine that kept nothing warm keeps nothing; one whose read fails keeps
    /// nothing either (its next leader reads the store).
    pub fn keep_warm_again(&self) {
        let mut kept = self.warm();
        let Kept::Taken(half_life) = *kept else {
            return;
        };
        *kept = match Warm::read(&self.store, half_life) {
            Ok(warm) => Kept::On(Box::new(warm), half_life),
            Err(e) => {
                tracing::warn!(
                    "the state is no longer kept warm (the next lead reads the store): {e}"
                );
                Kept::Off
            }
        };
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn warm(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.warm.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Brings `kept` up to date with `batch`, applied as entry `log_id`; a warm state that cannot
/// follow (a record it cannot decode) is given up, with a warning: the leader would read the
/// store, as without one.
fn follow(kept: &mut Kept, store: &Store, batch: Option<&crate::store::Batch>, log_id: LogId<u64>) {
    let Kept::On(warm, _) = kept else { return };
    let warm = &mut **warm;
    let followed = match batch {
        Some(batch) => store.follow(batch, &mut warm.recovered, |run| {
            warm.usage.add_run(&run.to_record())
        }),
        None => Ok(()),
    };
    match followed {
        Ok(()) => warm.applied = Some(log_id),
        Err(e) => {
            tracing::warn!("the warm state stops following the log at entry {log_id}: {e}");
            *kept = Kept::Off;
        }
    }
}

fn state_read(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_state_machine(openraft::AnyError::new(&e)).into()
}

/// The entry applied last and the membership in effect, from the marks the state carries.
fn marks(applied: Option<Vec<u8>>, membership: Option<Vec<u8>>) -> Result<Applied, StorageError> {
    let applied = applied
        .map(|b| decode::<LogId<u64>>(&b))
        .transpose()
        .map_err(state_read)?;
    let membership = membership
        .map(|b| decode::<StoredMembership<u64, BasicNode>>(&b))
        .transpose()
        .map_err(state_read)?
        .unwrap_or_default();
    Ok((applied, membership))
}

impl StateMachine {
    /// After a snapshot replaced the state: the warm state read whole again.
    fn rebuild_warm(&self) {
        let mut kept = self.warm();
        let Kept::On(_, half_life) = &*kept else {
            return;
        };
        match Warm::read(&self.store, *half_life) {
            Ok(warm) => *kept = Kept::On(Box::new(warm), *half_life),
            Err(e) => {
                tracing::warn!("the warm state cannot be read after a snapshot: {e}");
                *kept = Kept::Off;
            }
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let n = self
            .built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let dir = self.store.snapshot_dir().map_err(state_read)?;
        let building = dir.join(format!("building-{n}"));
        let write = || -> Result<_, crate::store::Error> {
            let file = crate::store::create_snapshot_file(&building)
                .map_err(|e| crate::store::Error::Snapshot(e.to_string()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            self.store.export_state_to(&mut out)
        };
        let (applied, membership) = write().map_err(state_read)?;
        let (last_log_id, last_membership) = marks(applied, membership)?;
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{n}", id.leader_id.term, id.index),
            None => format!("none-{n}"),
        };
        let path = dir.join(format!("{snapshot_id}.snap"));
        std::fs::rename(&building, &path).map_err(state_read)?;
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        self.set_current(meta.clone(), path.clone());
        Ok(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::open(&path).await.map_err(state_read)?),
        })
    }
}

impl StateMachine {
    /// Makes `path` the current snapshot; the file of the one before is removed (a copy
    /// being sent from it still reads it: the file goes with its last reader).
    fn set_current(&self, meta: SnapshotMeta<u64, BasicNode>, path: PathBuf) {
        let before = self.current().replace((meta, path.clone()));
        if let Some((_, old)) = before.filter(|(_, old)| *old != path) {
            let _ = std::fs::remove_file(old);
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<Applied, StorageError> {
        let applied = self.store.state_mark(APPLIED_MARK).map_err(state_read)?;
        let membership = self.store.state_mark(MEMBERSHIP_MARK).map_err(state_read)?;
        marks(applied, membership)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut answers = Vec::new();
        let (mut applied, _) = self.applied_state().await?;
        for entry in entries {
            answers.push(());
            // Applied already (a defence: openraft applies each entry once, after the mark
            // the state carries; a batch applied twice would repeat its events).
            if applied.is_some_and(|a| entry.log_id.index <= a.index) {
                continue;
            }
            applied = Some(entry.log_id);
            let mut marks = vec![(APPLIED_MARK, encode(&entry.log_id))];
            let batch = match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(batch) => Some(batch),
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(entry.log_id), m);
                    marks.push((MEMBERSHIP_MARK, encode(&stored)));
                    None
                }
            };
            let mut kept = self.warm();
            let batch = self.store.apply_replicated(batch, marks).map_err(|e| {
                StorageError::from(StorageIOError::apply(
                    entry.log_id,
                    openraft::AnyError::new(&e),
                ))
            })?;
            follow(&mut kept, &self.store, Some(&batch), entry.log_id);
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let n = self
            .built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let failed = |e: std::io::Error| -> StorageError {
            StorageIOError::write_snapshot(None, openraft::AnyError::new(&e)).into()
        };
        let dir = self.store.snapshot_dir().map_err(state_read)?;
        let path = dir.join(format!("receiving-{n}"));
        let file =
            tokio::fs::File::from_std(crate::store::create_snapshot_file(&path).map_err(failed)?);
        // Unnamed from the start: it goes when it is dropped; what is installed is copied
        // to a file of its own.
        let _ = std::fs::remove_file(&path);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let failed = |e: crate::store::Error| -> StorageError {
            StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::new(&e))
                .into()
        };
        let io = |e: std::io::Error| crate::store::Error::Snapshot(e.to_string());
        let mut file = snapshot.into_std().await;
        self.store.import_state_from(&mut file).map_err(failed)?;
        self.store.flush().await.map_err(failed)?;
        // Kept as the current snapshot (sent on to a replica that needs it, if this one
        // leads): copied, as a stream, to a file of its own.
        let dir = self.store.snapshot_dir().map_err(failed)?;
        let path = dir.join(format!("{}.snap", meta.snapshot_id));
        let copied = (|| {
            use std::io::Seek;
            file.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
            let mut out = crate::store::create_snapshot_file(&path).map_err(io)?;
            std::io::copy(&mut file, &mut out).map_err(io)?;
            Ok::<_, crate::store::Error>(())
        })();
        copied.map_err(failed)?;
        self.set_current(meta.clone(), path);
        self.rebuild_warm();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // Opened under the lock: a newer snapshot removes this one's file once it is current.
        let current = self.current();
        let Some((meta, path)) = current.as_ref() else {
            return Ok(None);
        };
        let file = std::fs::File::open(path).map_err(state_read)?;
        Ok(Some(Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
    }
}
