//! The replica's Raft log, vote and commit point, in its store's `raft_log` and `raft_meta`
//! (see `store::raft`). Appends and votes are flushed before openraft is told they are saved:
//! an entry this replica acknowledged survives its crash. The commit point is written with
//! them and flushed by the next append (see [`LogStore::save_committed`]).

use super::{decode, encode, StorageError, TypeConfig};
use crate::store::Store;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

/// `raft_meta` key: this replica's vote.
const VOTE: &[u8] = b"vote";
/// `raft_meta` key: the last entry known committed.
const COMMITTED: &[u8] = b"committed";
/// `raft_meta` key: the last entry purged from the log (a snapshot covers it).
const LAST_PURGED: &[u8] = b"last_purged";

/// The log of one replica; clones share it.
#[derive(Clone)]
pub struct LogStore {
    store: Store,
}

impl LogStore {
    pub fn new(store: Store) -> Self {
        LogStore { store }
    }

    fn value<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        err: fn(openraft::AnyError) -> StorageIOError<u64>,
    ) -> Result<Option<T>, StorageError> {
        let bytes = self
            .store
            .replica_value(key)
            .map_err(|e| err(openraft::AnyError::new(&e)))?;
        bytes
            .map(|b| decode(&b).map_err(|e| err(openraft::AnyError::new(&e)).into()))
            .transpose()
    }

    async fn set_value<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        err: fn(openraft::AnyError) -> StorageIOError<u64>,
    ) -> Result<(), StorageError> {
        let wrap =
            |e: crate::store::Error| -> StorageError { err(openraft::AnyError::new(&e)).into() };
        self.store
            .set_replica_value(key, &encode(value))
            .map_err(wrap)?;
        self.store.flush().await.map_err(wrap)
    }
}

fn logs_read(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_logs(openraft::AnyError::new(&e)).into()
}

fn logs_written(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(openraft::AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError> {
        let from = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(i) => Some(i.saturating_add(1)),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        self.store
            .log_entries(from, to, usize::MAX)
            .map_err(logs_read)?
            .into_iter()
            .map(|(_, bytes)| decode(&bytes).map_err(logs_read))
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId<u64>> = self.value(LAST_PURGED, StorageIOError::read_logs)?;
        let last = match self.store.log_last().map_err(logs_read)? {
            Some((_, bytes)) => Some(
                decode::<Entry<TypeConfig>>(&bytes)
                    .map_err(logs_read)?
                    .log_id,
            ),
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.set_value(VOTE, vote, StorageIOError::write_vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.value(VOTE, StorageIOError::read_vote)
    }

    /// Written, not flushed: it becomes durable with the next append's flush. openraft
    /// waits for this before it applies what was committed, so a flush here cost every
    /// replicated change one more sync in turn (4 of a submit's 12 ms in a release build).
    /// A commit point lost to a crash is learnt again from the leader; the store reverts to
    /// a prefix of the log (its applied mark is written with each change), and a replica
    /// applies everything committed before it leads.
    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError> {
        self.store
            .set_replica_value(COMMITTED, &encode(&committed))
            .map_err(|e| StorageIOError::write_logs(openraft::AnyError::new(&e)).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError> {
        Ok(self
            .value::<Option<LogId<u64>>>(COMMITTED, StorageIOError::read_logs)?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let encoded: Vec<(u64, Vec<u8>)> = entries
            .into_iter()
            .map(|e| (e.log_id.index, encode(&e)))
            .collect();
        self.store.log_append(encoded).map_err(logs_written)?;
        let flushed = self.store.flush().await;
        let result = flushed
            .as_ref()
            .map(|_| ())
            .map_err(|e| std::io::Error::other(e.to_string()));
        callback.log_io_completed(result);
        flushed.map_err(logs_written)
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        self.store
            .log_remove_from(log_id.index)
            .map_err(logs_written)?;
        self.store.flush().await.map_err(logs_written)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        // The mark first: a crash between the two leaves entries a later purge removes,
        // never a log that starts after what it says it purged.
        self.set_value(LAST_PURGED, &log_id, StorageIOError::write_logs)
            .await?;
        self.store
            .log_remove_upto(log_id.index)
            .map_err(logs_written)?;
        self.store.flush().await.map_err(logs_written)
    }
}
