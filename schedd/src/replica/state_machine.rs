//! The replicated state: committed entries applied in order to the replica's store, each
//! with the mark of its position in the same transaction (see `store::raft`), so that an
//! entry is applied exactly once across crashes; snapshots are the whole state.

use super::{decode, encode, StorageError, TypeConfig};
use crate::store::{Store, APPLIED_MARK, MEMBERSHIP_MARK};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageIOError,
    StoredMembership,
};
use std::io::Cursor;
use std::sync::{Arc, Mutex};

/// The entry applied last and the membership in effect then.
type Applied = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>);

/// The last snapshot built or installed: its description and its bytes.
type Current = Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>;

/// The state machine of one replica; clones share it (a clone builds snapshots).
#[derive(Clone)]
pub struct StateMachine {
    store: Store,
    current: Arc<Mutex<Current>>,
    /// Snapshots built so far: part of each one's id, unique when two cover the same entry.
    built: Arc<std::sync::atomic::AtomicU64>,
}

impl StateMachine {
    pub fn new(store: Store) -> Self {
        StateMachine {
            store,
            current: Default::default(),
            built: Default::default(),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
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

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (data, applied, membership) = self.store.export_state().map_err(state_read)?;
        let (last_log_id, last_membership) = marks(applied, membership)?;
        let n = self
            .built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{n}", id.leader_id.term, id.index),
            None => format!("none-{n}"),
        };
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        *self.current() = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
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
            self.store.apply_replicated(batch, marks).map_err(|e| {
                StorageError::from(StorageIOError::apply(
                    entry.log_id,
                    openraft::AnyError::new(&e),
                ))
            })?;
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let failed = |e: crate::store::Error| -> StorageError {
            StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::new(&e))
                .into()
        };
        self.store.import_state(&data).map_err(failed)?;
        self.store.flush().await.map_err(failed)?;
        *self.current() = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.current().clone().map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
