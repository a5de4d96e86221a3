//! The journal's committer thread: each batch in one write and at most one sync, the file
//! allocated ahead of its records, and compaction between batches.

use super::{
    frame, open_rw, sync_dir, CommitError, Entry, JournalOptions, Pending, Shared, ALLOCATION_STEP,
    COMPACTING_FILE, END_RESERVE_BYTES, SLACK_BYTES,
};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

/// The committer thread's own state: the file and where its records end.
pub(super) struct Committer {
    pub(super) shared: Arc<Shared>,
    pub(super) dir: PathBuf,
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// Where the next record goes.
    pub(super) end: u64,
    /// The file's length: allocated, zeros past `end`.
    pub(super) allocated: u64,
    /// Compact once `end` passes this.
    pub(super) compact_at: u64,
    pub(super) options: JournalOptions,
}

impl Committer {
    pub(super) fn run(mut self) {
        loop {
            let batch = {
                let mut queue = self.shared.queue();
                while queue.pending.is_empty() && !queue.closed {
                    queue = self
                        .shared
                        .wake
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if queue.pending.is_empty() {
                    return;
                }
                std::mem::take(&mut queue.pending)
            };
            self.commit(batch);
            if let Some(pipe) = &*self
                .shared
                .on_commit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
            {
                use std::io::Write;
                let _ = (&*pipe).write(&[1]);
            }
            if self.end > self.compact_at {
                self.compact();
            }
        }
    }

    /// Writes one batch: one `pwrite`, at most one `fdatasync`; then folds it into the live
    /// state and resolves its receipts.
    fn commit(&mut self, batch: Vec<Pending>) {
        let unended = self.shared.queue().live.unended_count();
        let mut accepted = Vec::with_capacity(batch.len());
        let mut bytes = Vec::new();
        let mut launches = 0;
        for pending in batch {
            match pending.entry.encode(&mut bytes) {
                Ok(()) => {
                    launches += u64::from(matches!(pending.entry, Entry::Launched(_)));
                    accepted.push(pending);
                }
                Err(e) => {
                    let _ = pending.done.send(Err(CommitError::from_io(&e)));
                }
            }
        }
        // Room for this batch and for the end of every job not ended yet, these included.
        let wanted = self.end + bytes.len() as u64 + (unended + launches) * END_RESERVE_BYTES;
        if let Err(e) = self.allocate(wanted + SLACK_BYTES) {
            if launches > 0 {
                // A full spool refuses launches, the only records that grow the reserve;
                // the rest uses the room reserved for it.
                let (refused, kept): (Vec<_>, Vec<_>) = accepted
                    .into_iter()
                    .partition(|p| matches!(p.entry, Entry::Launched(_)));
                for pending in refused {
                    let _ = pending.done.send(Err(CommitError::from_io(&e)));
                }
                return self.commit(kept);
            }
            if let Err(e) = self.allocate(self.end + bytes.len() as u64) {
                return fail_all(accepted, &e);
            }
        }
        let needs_sync = accepted.iter().any(|p| p.entry.needs_sync());
        let written = self.file.write_all_at(&bytes, self.end).and_then(|()| {
            if needs_sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // What was written may be on disk or not; the next batch writes over it, and a
            // replay stops at it if it is torn.
            return fail_all(accepted, &e);
        }
        self.end += bytes.len() as u64;
        let mut queue = self.shared.queue();
        queue.stats.writes += 1;
        queue.stats.syncs += u64::from(needs_sync);
        queue.stats.records += accepted.len() as u64;
        for pending in &accepted {
            queue.live.apply(&pending.entry);
        }
        drop(queue);
        for pending in accepted {
            let _ = pending.done.send(Ok(()));
        }
    }

    /// Makes the file at least `len` bytes long, allocated and written (zeros past the
    /// records; see [`allocate`]). The growth is synced before any record goes into it, so
    /// that the syncs of the records written there have no metadata of the file's to write:
    /// one `fdatasync` per [`ALLOCATION_STEP`], hundreds of records apart.
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        if len <= self.allocated {
            return Ok(());
        }
        let len = len.div_ceil(ALLOCATION_STEP) * ALLOCATION_STEP;
        allocate(&self.file, self.allocated, len)?;
        self.file.sync_data()?;
        self.allocated = len;
        Ok(())
    }

    /// Rewrites the live records into a new file and renames it over the journal (see the
    /// module docs). A failure keeps the old journal, and is tried again once it has grown
    /// as much again.
    fn compact(&mut self) {
        let snapshot = self.shared.queue().live.snapshot();
        match self.write_compacted(&snapshot) {
            Ok((file, end, allocated)) => {
                self.file = file;
                self.end = end;
                self.allocated = allocated;
                self.compact_at = self.options.compact_after_bytes.max(end.saturating_mul(2));
                self.shared.queue().stats.compactions += 1;
            }
            Err(e) => {
                let _ = std::fs::remove_file(self.dir.join(COMPACTING_FILE));
                tracing::warn!("cannot compact {}: {e}", self.path.display());
                self.compact_at = self.end.saturating_mul(2);
            }
        }
    }

    fn write_compacted(&self, snapshot: &[Entry]) -> io::Result<(File, u64, u64)> {
        let mut bytes = frame::MAGIC.to_vec();
        for entry in snapshot {
            entry.encode(&mut bytes)?;
        }
        let end = bytes.len() as u64;
        let unended = snapshot
            .iter()
            .filter(|e| matches!(e, Entry::Launched(_)))
            .count() as u64;
        let allocated = (end + unended * END_RESERVE_BYTES + SLACK_BYTES).div_ceil(ALLOCATION_STEP)
            * ALLOCATION_STEP;
        let new_path = self.dir.join(COMPACTING_FILE);
        let file = open_rw(&new_path, true)?;
        file.set_len(0)?;
        allocate(&file, 0, allocated)?;
        file.write_all_at(&bytes, 0)?;
        file.sync_data()?;
        std::fs::rename(&new_path, &self.path)?;
        sync_dir(&self.dir)?;
        Ok((file, end, allocated))
    }
}

fn fail_all(batch: Vec<Pending>, error: &io::Error) {
    tracing::error!("cannot write the journal: {error}");
    for pending in batch {
        let _ = pending.done.send(Err(CommitError::from_io(error)));
    }
}

/// Extends `file` from `from` to `to` bytes with zeros, allocated and written: `fallocate`
/// first (a full file system says so here, at once, and the blocks come in one piece where
/// it can), then the zeros written over it. Why written: `fallocate` leaves *unwritten*
/// extents, and the first write into one changes the file's extent map, metadata that every
/// `fdatasync` of a record landing there must then write too (ext4 writes the inode, or
/// commits its journal). Into blocks written before, a record's sync writes its data alone,
/// as databases do with their logs (PostgreSQL fills its WAL segments with zeros). Not synced
/// here: see [`Committer::allocate`].
pub(super) fn allocate(file: &File, from: u64, to: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(from).map_err(io::Error::other)?;
    let len = libc::off_t::try_from(to - from).map_err(io::Error::other)?;
    // SAFETY: fallocate with mode 0 (allocate and extend, zeros) on a descriptor we own.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(e);
        }
    }
    write_zeros(file, from, to)
}

/// Writes zeros over `from..to` of `file`, a chunk at a time.
pub(super) fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    const CHUNK: usize = 64 * 1024;
    static ZEROS: [u8; CHUNK] = [0; CHUNK];
    let mut at = from;
    while at < to {
        let n = (to - at).min(CHUNK as u64) as usize;
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}
