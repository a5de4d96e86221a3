//! A replica's own Raft storage beside the replicated state (issue 24), and the state's side
//! of replication. This module knows sled, not Raft: the log's entries, the vote and the
//! commit point are bytes the `replica` module encodes.
//!
//! - `raft_log`: entry index (u64 BE) → entry. Appended, truncated after a conflict (the
//!   entries from an index on), purged up to an index once a snapshot covers them.
//! - `raft_meta`: the vote, the commit point, the last purged entry.
//! - In `meta` (part of the replicated state): the mark of the last entry applied and the
//!   membership it carried, each written in the same transaction as the batch of the entry
//!   ([`Store::apply_replicated`]), so that a replica that crashes re-applies exactly the
//!   entries after it, and a snapshot of the state carries its own position.
//!
//! A snapshot is every tree of the replicated state, as (tree, key, value) records
//! ([`Store::export_state`]); installing one replaces that state whole
//! ([`Store::import_state`]).

use super::{Batch, Error, Result, Store};

/// `meta` key: the last log entry applied to this state (as `replica` encodes it).
pub const APPLIED_MARK: &[u8] = b"raft_applied";
/// `meta` key: the membership in effect at [`APPLIED_MARK`] (as `replica` encodes it).
pub const MEMBERSHIP_MARK: &[u8] = b"raft_membership";

/// A snapshot's first bytes, and its format's version.
const SNAPSHOT_MAGIC: &[u8; 8] = b"yssnap01";

impl Store {
    /// The trees of the replicated state, named as in a snapshot; the replica's own log
    /// and vote are not among them.
    fn state_trees(&self) -> [(&'static str, &sled::Tree); 10] {
        [
            ("jobs", &self.jobs),
            ("payloads", &self.payloads),
            ("events", &self.events),
            ("nodes", &self.nodes),
            ("audit", &self.audit),
            ("meta", &self.meta),
            ("usage", &self.usage),
            ("array_specs", &self.array_specs),
            ("arrays", &self.arrays),
            ("index", &self.index),
        ]
    }

    /// Appends log entries (index, encoded entry), replacing any at the same index; durable
    /// after [`Store::flush`].
    pub fn log_append(&self, entries: impl IntoIterator<Item = (u64, Vec<u8>)>) -> Result<()> {
        let mut batch = sled::Batch::default();
        for (index, entry) in entries {
            batch.insert(&index.to_be_bytes(), entry);
        }
        let _writing = self.writing();
        Ok(self.raft_log.apply_batch(batch)?)
    }

    /// The log's entries with an index in `from..to` (`to`: `None`, to the end), at most
    /// `limit`, in order.
    pub fn log_entries(
        &self,
        from: u64,
        to: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let range = match to {
            Some(to) if to <= from => return Ok(Vec::new()),
            Some(to) => self.raft_log.range(from.to_be_bytes()..to.to_be_bytes()),
            None => self.raft_log.range(from.to_be_bytes()..),
        };
        let mut out = Vec::new();
        for kv in range.take(limit) {
            let (k, v) = kv?;
            out.push((index_of(&k)?, v.to_vec()));
        }
        Ok(out)
    }

    /// The last entry of the log, if any.
    pub fn log_last(&self) -> Result<Option<(u64, Vec<u8>)>> {
        match self.raft_log.last()? {
            Some((k, v)) => Ok(Some((index_of(&k)?, v.to_vec()))),
            None => Ok(None),
        }
    }

    /// Removes the entries from `index` on (a leader's log replaced them).
    pub fn log_remove_from(&self, index: u64) -> Result<()> {
        self.log_remove(self.raft_log.range(index.to_be_bytes()..))
    }

    /// Removes the entries up to `index`, included (a snapshot covers them).
    pub fn log_remove_upto(&self, index: u64) -> Result<()> {
        self.log_remove(self.raft_log.range(..=index.to_be_bytes()))
    }

    fn log_remove(&self, range: sled::Iter) -> Result<()> {
        let mut batch = sled::Batch::default();
        for key in range.keys() {
            batch.remove(key?);
        }
        let _writing = self.writing();
        Ok(self.raft_log.apply_batch(batch)?)
    }

    /// A value of the replica's own (`raft_meta`: vote, commit point, last purged).
    pub fn replica_value(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.raft_meta.get(key)?.map(|v| v.to_vec()))
    }

    /// Sets a value of the replica's own; durable after [`Store::flush`].
    pub fn set_replica_value(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let _writing = self.writing();
        self.raft_meta.insert(key, value)?;
        Ok(())
    }

    /// A mark the replicated state carries ([`APPLIED_MARK`], [`MEMBERSHIP_MARK`]).
    pub fn state_mark(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.meta.get(key)?.map(|v| v.to_vec()))
    }

    /// Applies a replicated entry: its batch (none for an entry that carries no change of
    /// the state) and its marks, in one transaction; returns the batch (a follower brings
    /// what it keeps warm up to date from it: see `follow`).
    pub fn apply_replicated(
        &self,
        batch: Option<Batch>,
        marks: Vec<(&'static [u8], Vec<u8>)>,
    ) -> Result<Batch> {
        let mut batch = batch.unwrap_or_default();
        batch.marks = marks;
        self.apply_batch(&batch)?;
        batch.marks.clear();
        Ok(batch)
    }

    /// The whole replicated state, as a snapshot, with the marks it carries
    /// ([`APPLIED_MARK`], [`MEMBERSHIP_MARK`]): taken under the write lock, so that no write
    /// is half in it and the marks are the snapshot's.
    #[allow(clippy::type_complexity)]
    pub fn export_state(&self) -> Result<(Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>)> {
        let _writing = self.writing();
        let applied = self.state_mark(APPLIED_MARK)?;
        let membership = self.state_mark(MEMBERSHIP_MARK)?;
        let mut out = SNAPSHOT_MAGIC.to_vec();
        for (i, (_, tree)) in self.state_trees().into_iter().enumerate() {
            for kv in tree.iter() {
                let (k, v) = kv?;
                out.push(i as u8);
                put_bytes(&mut out, &k);
                put_bytes(&mut out, &v);
            }
        }
        Ok((out, applied, membership))
    }

    /// Replaces the replicated state with a snapshot's ([`Store::export_state`]). The
    /// snapshot is read whole first: one that cannot be read changes nothing. Durable after
    /// [`Store::flush`].
    pub fn import_state(&self, snapshot: &[u8]) -> Result<()> {
        let trees = self.state_trees();
        let mut batches: Vec<sled::Batch> = trees.iter().map(|_| sled::Batch::default()).collect();
        let mut rest = snapshot
            .strip_prefix(SNAPSHOT_MAGIC)
            .ok_or_else(|| Error::Snapshot("not a ysched snapshot (or another version)".into()))?;
        while let Some((&tree, after)) = rest.split_first() {
            let batch = batches
                .get_mut(tree as usize)
                .ok_or_else(|| Error::Snapshot(format!("unknown tree {tree}")))?;
            let (key, after) = take_bytes(after)?;
            let (value, after) = take_bytes(after)?;
            batch.insert(key, value);
            rest = after;
        }
        let _writing = self.writing();
        for ((_, tree), batch) in trees.iter().zip(batches) {
            tree.clear()?;
            tree.apply_batch(batch)?;
        }
        self.audit_bytes.store(
            Self::count_audit_bytes(&self.audit)?,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }
}

fn index_of(key: &[u8]) -> Result<u64> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| Error::CorruptLog(format!("a key of {} bytes", key.len())))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// A length-prefixed piece of a snapshot, and what follows it.
fn take_bytes(input: &[u8]) -> Result<(&[u8], &[u8])> {
    let short = || Error::Snapshot("cut short".into());
    let (len, rest) = input.split_first_chunk::<4>().ok_or_else(short)?;
    let len = u32::from_be_bytes(*len) as usize;
    if rest.len() < len {
        return Err(short());
    }
    Ok(rest.split_at(len))
}
