//! Keeping the state disk usable: the ballast, space only schedd gives back so that it can
//! always open its store, and the audit log's retention.
//!
//! **The ballast.** sled writes when it opens a store (it clears the rest of the log's last
//! segment, up to half a MiB), so on a file system with no space left at all `schedd` could
//! not start. `schedd` keeps the file `ballast` ([`BALLAST_BYTES`]) in `state_dir`; when the
//! store cannot be opened for want of space, it deletes it (logged as an error) and opens
//! the store in the space that frees. The ballast comes back by itself once the file system
//! has room for it again ([`Store::keep_ballast`]).
//!
//! **Audit retention.** Entries older than `scheduler.audit_keep_days` are removed, and the
//! oldest ones while the log holds more than `scheduler.audit_max_mib` ([`Store::expire_audit`],
//! in small batches, never under the state lock). Each entry's detail is bounded
//! ([`AUDIT_DETAIL_MAX_BYTES`]).

use super::{Result, Room, Store};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use ysched_common::parse::format_size;
use ysched_common::AuditRecord;

/// The ballast's file name in `state_dir`.
pub const BALLAST_FILE: &str = "ballast";
/// The ballast's size: room for sled to open its store (it needs up to one log segment, half
/// a MiB) many times over, and for the agents' first reports.
pub const BALLAST_BYTES: u64 = 8 * 1024 * 1024;

/// The most bytes of an audit entry's detail that are kept: a refusal quoting a user's input
/// (an account name of megabytes) is cut, with a note of how much was left out.
pub const AUDIT_DETAIL_MAX_BYTES: usize = 1024;

/// `text` cut to at most `max` bytes (at a character boundary), with a note of how many
/// bytes were left out.
pub fn bounded_detail(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} more bytes not kept)",
        &text[..end],
        text.len() - end
    )
    .into()
}

/// Whether sled failed for want of space (or quota).
fn no_space(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
}

/// Free space sled may need to open a store: it clears the rest of the log's last segment
/// (half a MiB) and writes a snapshot of its page table.
const OPEN_ROOM: u64 = 4 * 1024 * 1024;

/// Opens sled in `dir/db` (`open`). With less than [`OPEN_ROOM`] free, the ballast is deleted
/// first (logged as an error). When opening fails for want of space, or because of a
/// snapshot sled left half written (`snap.*.generating`: a snapshot write failed, as on a
/// full disk; sled 0.34 takes it for its newest snapshot and calls the store corrupt), the
/// half-written snapshots and the ballast are deleted and the store opened once more.
pub(super) fn open_db(
    dir: &Path,
    open: impl Fn() -> sled::Result<sled::Db>,
) -> sled::Result<sled::Db> {
    let free = free_space(dir);
    if free.is_some_and(|free| free < OPEN_ROOM) {
        release_ballast(
            dir,
            &format!("only {} free", format_size(free.unwrap_or(0))),
        );
    }
    match open() {
        Err(e) if no_space(&e) || matches!(e, sled::Error::Corruption { .. }) => {
            let removed = remove_partial_snapshots(&dir.join("db"));
            let released = no_space(&e) && release_ballast(dir, &e.to_string());
            if removed || released {
                open()
            } else {
                Err(e)
            }
        }
        result => result,
    }
}

/// Deletes the ballast; `true` if there was one.
fn release_ballast(dir: &Path, why: &str) -> bool {
    let ballast = dir.join(BALLAST_FILE);
    if std::fs::remove_file(&ballast).is_err() {
        return false;
    }
    tracing::error!(
        "the state disk is full ({why}): released the {} MiB ballast {} to open the store; \
         requests that write are refused until space is freed (the ballast comes back by \
         itself then)",
        BALLAST_BYTES >> 20,
        ballast.display()
    );
    true
}

/// Deletes the snapshots sled did not finish writing; `true` if there were some.
fn remove_partial_snapshots(db: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(db) else {
        return false;
    };
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    removed = true;
                    tracing::warn!(
                        "removed {}, a snapshot sled did not finish writing",
                        entry.path().display()
                    )
                }
                Err(e) => tracing::warn!("cannot remove {}: {e}", entry.path().display()),
            }
        }
    }
    removed
}

/// Free space on the file system holding `dir` (bytes), if it can be told.
fn free_space(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

impl Store {
    /// Creates the ballast (see the module docs) if it is missing and the file system has
    /// room for it beside the reserve (`scheduler.state_reserve_mib`) and as much again.
    /// `Ok(true)` when it was created now.
    pub fn keep_ballast(&self) -> io::Result<bool> {
        let path = self.dir.join(BALLAST_FILE);
        if path.exists() {
            return Ok(false);
        }
        let free = self.free_bytes().map_err(io::Error::other)?;
        if free < self.reserve_bytes.saturating_add(2 * BALLAST_BYTES) {
            return Ok(false);
        }
        let tmp = self.dir.join(format!("{BALLAST_FILE}.tmp"));
        let made = (|| {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            allocate(&file, BALLAST_BYTES)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        made.map(|()| true)
    }

    /// Bytes the audit log holds (its keys and values), as counted at open and kept since.
    pub fn audit_bytes(&self) -> u64 {
        self.audit_bytes.load(Ordering::Relaxed)
    }

    /// Removes up to `limit` of the oldest audit entries that are older than `cutoff_ms`
    /// (0: none is too old) or that take the log over `max_bytes` (0: no limit). Returns how
    /// many it removed: 0 when nothing is left to remove. One small write, outside the
    /// state lock (the audit log is append-only and no record refers to it); the cluster's
    /// share of the reserve may be used, since it frees space.
    pub fn expire_audit(&self, cutoff_ms: i64, max_bytes: u64, limit: usize) -> Result<usize> {
        let (removed, batch) = self.plan_audit_expiry(cutoff_ms, max_bytes, limit)?;
        self.apply(batch)?;
        Ok(removed)
    }

    /// What [`Store::expire_audit`] removes, as a batch (the oldest entries, by number: see
    /// `batch::Removals`), without removing it: the leader of replicas proposes it.
    pub fn plan_audit_expiry(
        &self,
        cutoff_ms: i64,
        max_bytes: u64,
        limit: usize,
    ) -> Result<(usize, super::Batch)> {
        let total = self.audit_bytes();
        let (mut removed, mut freed) = (0usize, 0u64);
        for kv in self.audit.iter() {
            if removed >= limit {
                break;
            }
            let (key, value) = kv?;
            let over = max_bytes > 0 && total.saturating_sub(freed) > max_bytes;
            let old = cutoff_ms > 0
                && serde_json::from_slice::<AuditRecord>(&value)
                    .map_or(true, |record| record.time < cutoff_ms);
            if !over && !old {
                break;
            }
            freed += (key.len() + value.len()) as u64;
            removed += 1;
        }
        let mut batch = super::Batch::default();
        if removed > 0 {
            self.check_room(16 * removed as u64, Room::Cluster)?;
            batch.removals.oldest_audit = removed;
        }
        Ok((removed, batch))
    }

    /// Counts the audit log's bytes (at open).
    pub(super) fn count_audit_bytes(audit: &sled::Tree) -> Result<u64> {
        let mut bytes = 0u64;
        for kv in audit.iter() {
            let (key, value) = kv?;
            bytes += (key.len() + value.len()) as u64;
        }
        Ok(bytes)
    }
}

/// Gives `file` `len` bytes of real disk blocks: `fallocate`, or zeros where the file system
/// does not support it.
fn allocate(file: &std::fs::File, len: u64) -> io::Result<()> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let size = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: fallocate on a descriptor we own, with plain integers.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(error);
    }
    let block = vec![0u8; 1 << 20];
    let mut left = len;
    let mut writer = file;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        writer.write_all(&block[..n])?;
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_cut_at_a_character_boundary_with_a_note() {
        assert_eq!(bounded_detail("short", 10), "short");
        let cut = bounded_detail("ééééé", 3);
        assert_eq!(cut, "é… (8 more bytes not kept)");
        let long = "a".repeat(4 << 20);
        assert!(bounded_detail(&long, AUDIT_DETAIL_MAX_BYTES).len() < AUDIT_DETAIL_MAX_BYTES + 40);
    }

    fn entry(time: i64, detail: String) -> AuditRecord {
        AuditRecord {
            time,
            user: "alice".into(),
            uid: 1000,
            action: "submit_refused".into(),
            job_id: None,
            detail,
            host: None,
        }
    }

    #[test]
    fn audit_entries_are_bounded_and_expire_by_age_then_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.audit_bytes(), 0);
        let mut batch = super::super::Batch::default();
        // A refusal quoting 4 MiB of input is kept as about a KiB.
        batch.audit(&entry(1, "x".repeat(4 << 20)));
        for time in 2..=10 {
            batch.audit(&entry(time, format!("entry {time}")));
        }
        assert!(batch.bytes() < 4096, "{}", batch.bytes());
        store.apply(batch).unwrap();
        let newest_first = store.audit_log(0).unwrap();
        assert_eq!(newest_first.len(), 10);
        let first = &newest_first[9];
        assert!(
            first.detail.len() <= AUDIT_DETAIL_MAX_BYTES + 40,
            "{}",
            first.detail.len()
        );
        assert!(
            first.detail.ends_with("(4193280 more bytes not kept)"),
            "{}",
            &first.detail[1000..]
        );
        let total = store.audit_bytes();
        assert!(total > 1024 && total < 4096, "{total}");

        // By age: entries before time 5, two per call.
        assert_eq!(store.expire_audit(5, 0, 2).unwrap(), 2);
        assert_eq!(store.expire_audit(5, 0, 2).unwrap(), 2);
        assert_eq!(store.expire_audit(5, 0, 2).unwrap(), 0);
        let times = |s: &Store| -> Vec<i64> {
            s.audit_log(0)
                .unwrap()
                .iter()
                .rev()
                .map(|r| r.time)
                .collect()
        };
        assert_eq!(times(&store), [5, 6, 7, 8, 9, 10]);
        assert!(store.audit_bytes() < total - 1024);
        // By size: the oldest go until the rest fits.
        let one = store.audit_bytes() / 6;
        assert_eq!(store.expire_audit(0, 3 * one + one / 2, 100).unwrap(), 3);
        assert_eq!(times(&store), [8, 9, 10]);
        assert_eq!(
            store.expire_audit(0, 0, 100).unwrap(),
            0,
            "no limit: nothing goes"
        );

        // What the log holds is counted again when the store is opened again.
        let left = store.audit_bytes();
        drop(store);
        let store = loop {
            match Store::open(dir.path()) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        assert_eq!(store.audit_bytes(), left);
    }

    #[test]
    fn a_snapshot_sled_did_not_finish_does_not_keep_the_store_from_opening() {
        let dir = tempfile::tempdir().unwrap();
        let reopen = || crate::store::tests::reopen(dir.path());
        let store = Store::open(dir.path()).unwrap();
        let mut batch = super::super::Batch::default();
        batch.set_next_job_id(42);
        store.apply(batch).unwrap();
        drop(store);
        // What a snapshot write that failed for want of space leaves (sled 0.34 reads it as
        // its newest snapshot and calls the store corrupt).
        let partial = dir.path().join("db/snap.FFFFFFFFFFFFFFFF.generating");
        std::fs::write(&partial, b"").unwrap();
        let store = reopen();
        assert!(!partial.exists());
        assert_eq!(store.recover().unwrap().next_job_id, 42);
    }

    #[test]
    fn the_ballast_is_made_once_where_there_is_room() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store.keep_ballast().unwrap());
        let ballast = dir.path().join(BALLAST_FILE);
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&ballast).unwrap();
        assert_eq!(meta.len(), BALLAST_BYTES);
        assert!(
            meta.blocks() * 512 >= BALLAST_BYTES,
            "allocated, not sparse"
        );
        assert!(!store.keep_ballast().unwrap());
    }
}
