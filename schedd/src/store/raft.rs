//! A replica's own Raft storage beside the replicated state, and the state's side
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
//! ([`Store::import_state`]). Both stream (a replica keeps its snapshots as files in
//! [`Store::snapshot_dir`]).

use super::{Batch, Error, Result, Store};
use std::io::Read;

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

    /// Removes a value of the replica's own; durable after [`Store::flush`].
    pub fn remove_replica_value(&self, key: &[u8]) -> Result<()> {
        let _writing = self.writing();
        self.raft_meta.remove(key)?;
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

    /// Where a replica keeps the files of its snapshots: `snapshots/` in the state directory
    /// (made 0700 if missing: a snapshot is the whole state, every user's scripts included;
    /// its files are made 0600, see [`create_snapshot_file`]).
    pub fn snapshot_dir(&self) -> Result<std::path::PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self.dir.join("snapshots");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::Snapshot(format!("cannot make {}: {e}", dir.display())))?;
        Ok(dir)
    }

    /// The whole replicated state, as a snapshot, with the marks it carries
    /// ([`APPLIED_MARK`], [`MEMBERSHIP_MARK`]): taken under the write lock, so that no write
    /// is half in it and the marks are the snapshot's.
    #[allow(clippy::type_complexity)]
    pub fn export_state(&self) -> Result<(Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let (applied, membership) = self.export_state_to(&mut out)?;
        Ok((out, applied, membership))
    }

    /// [`Store::export_state`] written to `out` as it is read (a replica writes it to a file:
    /// the state of 100,000 jobs is some hundreds of MiB, never all in memory); the marks.
    #[allow(clippy::type_complexity)]
    pub fn export_state_to(
        &self,
        out: &mut impl std::io::Write,
    ) -> Result<(Option<Vec<u8>>, Option<Vec<u8>>)> {
        let failed = |e: std::io::Error| Error::Snapshot(format!("cannot write: {e}"));
        let _writing = self.writing();
        let applied = self.state_mark(APPLIED_MARK)?;
        let membership = self.state_mark(MEMBERSHIP_MARK)?;
        out.write_all(SNAPSHOT_MAGIC).map_err(failed)?;
        for (i, (_, tree)) in self.state_trees().into_iter().enumerate() {
            for kv in tree.iter() {
                let (k, v) = kv?;
                out.write_all(&[i as u8]).map_err(failed)?;
                out.write_all(&(k.len() as u32).to_be_bytes())
                    .map_err(failed)?;
                out.write_all(&k).map_err(failed)?;
                out.write_all(&(v.len() as u32).to_be_bytes())
                    .map_err(failed)?;
                out.write_all(&v).map_err(failed)?;
            }
        }
        out.flush().map_err(failed)?;
        Ok((applied, membership))
    }

    /// Replaces the replicated state with a snapshot's ([`Store::export_state`]). Durable
    /// after [`Store::flush`].
    pub fn import_state(&self, snapshot: &[u8]) -> Result<()> {
        self.import_state_from(&mut std::io::Cursor::new(snapshot))
    }

    /// [`Store::import_state`] from a reader, in two passes: the snapshot is read whole
    /// first, and one that cannot be read changes nothing; then the state is replaced, in
    /// batches of bounded size (never the whole state in memory).
    pub fn import_state_from(
        &self,
        snapshot: &mut (impl std::io::Read + std::io::Seek),
    ) -> Result<()> {
        let trees = self.state_trees();
        let rewind = |s: &mut dyn std::io::Seek| {
            s.seek(std::io::SeekFrom::Start(0))
                .map(drop)
                .map_err(|e| Error::Snapshot(format!("cannot read: {e}")))
        };
        rewind(snapshot)?;
        read_records(
            &mut std::io::BufReader::new(&mut *snapshot),
            trees.len(),
            |_, _, _| Ok(()),
        )?;
        rewind(snapshot)?;
        let _writing = self.writing();
        for (_, tree) in &trees {
            tree.clear()?;
        }
        // Records come tree by tree: a batch goes when it is full or its tree is done.
        let mut pending: Option<(usize, sled::Batch, usize)> = None;
        let events_tree = trees
            .iter()
            .position(|(name, _)| *name == "events")
            .unwrap_or(usize::MAX);
        let mut event_id_floor = 0;
        read_records(
            &mut std::io::BufReader::new(&mut *snapshot),
            trees.len(),
            |tree, key, value| {
                if tree == events_tree {
                    event_id_floor = event_id_floor.max(super::write::event_id_after(&key));
                }
                if let Some((t, batch, bytes)) = pending.take() {
                    if t == tree && bytes < IMPORT_BATCH_BYTES {
                        pending = Some((t, batch, bytes));
                    } else {
                        trees[t].1.apply_batch(batch)?;
                    }
                }
                let (_, batch, bytes) =
                    pending.get_or_insert_with(|| (tree, sled::Batch::default(), 0));
                *bytes += key.len() + value.len();
                batch.insert(key, value);
                Ok(())
            },
        )?;
        if let Some((t, batch, _)) = pending {
            trees[t].1.apply_batch(batch)?;
        }
        // This store's next events sort after those the snapshot brought (see
        // `EVENT_ID_FLOOR`), after a restart too.
        let floor = event_id_floor.max(
            self.event_id_floor
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        self.meta
            .insert(super::EVENT_ID_FLOOR, &floor.to_be_bytes())?;
        self.event_id_floor
            .store(floor, std::sync::atomic::Ordering::Relaxed);
        self.audit_bytes.store(
            Self::count_audit_bytes(&self.audit)?,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }
}

/// How many bytes of records an import writes at a time.
const IMPORT_BATCH_BYTES: usize = 8 << 20;

/// Reads a snapshot's records in order, handing each (tree, key, value) to `each`.
fn read_records(
    input: &mut impl std::io::Read,
    trees: usize,
    mut each: impl FnMut(usize, Vec<u8>, Vec<u8>) -> Result<()>,
) -> Result<()> {
    let mut magic = [0u8; 8];
    read_exact(input, &mut magic)?;
    if &magic != SNAPSHOT_MAGIC {
        return Err(Error::Snapshot(
            "not a ysched snapshot (or another version)".into(),
        ));
    }
    loop {
        let mut tree = [0u8; 1];
        match input.read(&mut tree) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Snapshot(format!("cannot read: {e}"))),
        }
        let tree = tree[0] as usize;
        if tree >= trees {
            return Err(Error::Snapshot(format!("unknown tree {tree}")));
        }
        let key = take_bytes(input)?;
        let value = take_bytes(input)?;
        each(tree, key, value)?;
    }
}

fn read_exact(input: &mut impl std::io::Read, buf: &mut [u8]) -> Result<()> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::Snapshot("cut short".into()),
        _ => Error::Snapshot(format!("cannot read: {e}")),
    })
}

/// A length-prefixed piece of a snapshot.
fn take_bytes(input: &mut impl std::io::Read) -> Result<Vec<u8>> {
    let mut len = [0u8; 4];
    read_exact(input, &mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    // Read in steps, so that a length a cut or corrupt snapshot makes up allocates no more
    // than the snapshot holds.
    let mut out = Vec::with_capacity(len.min(1 << 20));
    input
        .by_ref()
        .take(len as u64)
        .read_to_end(&mut out)
        .map_err(|e| Error::Snapshot(format!("cannot read: {e}")))?;
    if out.len() < len {
        return Err(Error::Snapshot("cut short".into()));
    }
    Ok(out)
}

fn index_of(key: &[u8]) -> Result<u64> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| Error::CorruptLog(format!("a key of {} bytes", key.len())))
}

/// Creates (or truncates) a snapshot's file in [`Store::snapshot_dir`], mode 0600 whatever
/// the umask: it holds the whole state.
pub fn create_snapshot_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}
