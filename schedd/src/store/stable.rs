//! What sled's flush leaves out: making flushed writes survive a power loss, not only a crash.
//!
//! sled 0.34's flush writes its log with `sync_file_range`, which reaches the disk but neither
//! flushes the device's write cache nor commits the file's new size, so after a power loss
//! the log can end before writes that were flushed. Values too large for a log page go to
//! files of their own (`db/blobs/<lsn>`), written without any sync, and no directory is ever
//! fsynced: on a first start the store's very files can vanish. Only sled's background
//! flusher fsyncs the log, every 500 ms. Measured with a power-loss simulator
//! (tests/tests/e2e/power_loss.rs): 200 acknowledged submits of 200 gone after a first start.
//!
//! [`Stability::settle`] closes that gap after each flush: `fdatasync` of the log, `fsync` of
//! the blob files not synced yet, and of `blobs/` and `db/` when their entries changed
//! (blobs, snapshots renamed into place). The flush loop calls it once per flush, on a
//! blocking thread, so every write acknowledged after that flush shares it (group commit): its
//! cost per write falls as the rate rises.
//!
//! A directory's entries are looked at only when its mtime moved. The kernel stamps mtimes
//! with a coarse clock, so two changes in one tick can share a stamp: a stamp is trusted as
//! "seen" only once it is a second old, and until then the directory is synced on every
//! settle.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use ysched_common::durable::sync_dir;

/// How old a directory's mtime must be before it is trusted to show every change.
const STAMP_SETTLED: Duration = Duration::from_secs(1);

pub(super) struct Stability {
    /// sled's directory (`<state_dir>/db`).
    db_dir: PathBuf,
    /// sled's log file, open for `fdatasync`.
    log: File,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    db_dir_stamp: Option<SystemTime>,
    blobs_stamp: Option<SystemTime>,
    synced_blobs: HashSet<OsString>,
}

impl Stability {
    /// Makes everything sled created so far durable (the log, its configuration, blob files,
    /// `db/`, the state directory and its entry in its parent), for the store at `state_dir`.
    pub fn open(state_dir: &Path) -> io::Result<Stability> {
        let db_dir = state_dir.join("db");
        let log = File::open(db_dir.join("db"))?;
        log.sync_all()?;
        if let Ok(conf) = File::open(db_dir.join("conf")) {
            conf.sync_all()?;
        }
        let stability = Stability {
            db_dir,
            log,
            seen: Mutex::new(Seen::default()),
        };
        stability.settle()?;
        sync_dir(state_dir)?;
        ysched_common::durable::sync_parent(state_dir)?;
        Ok(stability)
    }

    /// Makes every write flushed so far survive a power loss (see the module docs).
    pub fn settle(&self) -> io::Result<()> {
        self.log.sync_data()?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let blobs = self.db_dir.join("blobs");
        if let Some(stamp) = changed(&blobs, seen.blobs_stamp)? {
            let mut present = HashSet::new();
            for entry in std::fs::read_dir(&blobs)? {
                let name = entry?.file_name();
                if !seen.synced_blobs.contains(&name) {
                    match File::open(blobs.join(&name)) {
                        Ok(blob) => blob.sync_all()?,
                        // Collected meanwhile: nothing to keep.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    }
                }
                present.insert(name);
            }
            sync_dir(&blobs)?;
            seen.synced_blobs = present;
            seen.blobs_stamp = settled(stamp);
        }
        if let Some(stamp) = changed(&self.db_dir, seen.db_dir_stamp)? {
            sync_dir(&self.db_dir)?;
            seen.db_dir_stamp = settled(stamp);
        }
        Ok(())
    }
}

/// The directory's mtime if it differs from `seen` (or `dir` is missing: `None`).
fn changed(dir: &Path, seen: Option<SystemTime>) -> io::Result<Option<SystemTime>> {
    match std::fs::metadata(dir) {
        Ok(meta) => {
            let stamp = meta.modified()?;
            Ok((Some(stamp) != seen).then_some(stamp))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `stamp`, once it is old enough to be trusted (see the module docs).
fn settled(stamp: SystemTime) -> Option<SystemTime> {
    let age = SystemTime::now().duration_since(stamp).unwrap_or_default();
    (age >= STAMP_SETTLED).then_some(stamp)
}
