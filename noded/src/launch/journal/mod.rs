//! The node's journal, `<spool>/journal`: every launch, start, stop and end of this node's
//! jobs in one append-only file, group-committed, instead of a directory of files per job.
//!
//! Why one file: a job used to cost six files (`state.json`, `pid`, `group`, `stopping`,
//! `exit.json`, `finished.json`), each written to a temporary file, fsynced and renamed, and
//! the renames were never made durable (no directory fsync). A journal costs one `write` per
//! batch of records and one `fdatasync` per batch that needs one, whatever the batch's size,
//! so the cost per job falls as the rate rises (group commit).
//!
//! What is synced, and why: a [`Entry::Launched`] record is synced before the launch goes
//! ahead (after a power loss the node must know what it had started, to report it lost) and an
//! [`Entry::Ended`] record before the end is reported to schedd (schedd forgets nothing it was
//! told, so the node must not either). The rest rides along unsynced, written with the next
//! batch: a job's pid and start time, its stop progress (meaningless once a power loss has
//! ended every process), and schedd's acknowledgements (one lost to a power loss means an end
//! reported again, which schedd takes as the same end: it matches `restart_count` and ignores
//! a report of a run it has closed).
//!
//! The batching: [`Journal::append`] queues a record and returns a [`Receipt`]; one committer
//! thread (never a tokio worker: `fdatasync` blocks for a disk's flush) takes everything
//! queued, writes it with one `pwrite`, syncs once if anything in it needs it, and then
//! resolves the receipts. Records queued while a sync runs form the next batch.
//!
//! A full spool: the file is allocated ahead of its last record (`fallocate`, then zeros
//! written over it, so that a record's sync has no metadata to write: see
//! [`committer::allocate`]), by [`END_RESERVE_BYTES`] for every job whose end is not recorded
//! yet plus some slack, and a launch is refused when that reserve cannot be extended (the
//! node's fault: spool full). So a running job's end always has allocated room, and is
//! written with no free block left on the file system (as the blank `exit.json` made before
//! each job did). A launch, the one record that grows the reserve, fails first.
//!
//! Compaction: past [`JournalOptions::compact_after_bytes`] (and twice the size of what is
//! live), the live records are rewritten to `journal.new`, synced, renamed over `journal`, and
//! the directory synced, so that the rename survives a power loss. Done by the committer
//! between batches, so no record is lost or reordered. On a full spool it fails, and the
//! journal goes on growing into its reserve.
//!
//! Replay ([`Journal::open`]): the records are folded into the [`Live`] jobs; reading stops
//! at a torn tail (see [`frame`]), which is then zeroed so that no stale bytes follow the next
//! record. The journal holds the jobs' environments: mode 0600, root only.

mod committer;
mod frame;
mod live;
#[cfg(test)]
mod tests;

pub use live::{Entry, JobState, Live};

use super::spool::FILE_MODE;
use committer::{write_zeros, Committer};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

/// The largest record (and so the largest launch the supervisor takes).
pub const MAX_RECORD_BYTES: usize = frame::MAX_PAYLOAD;
/// The journal's file name, in the spool's root.
pub const JOURNAL_FILE: &str = "journal";
/// Where compaction writes the new journal before renaming it over the old one.
const COMPACTING_FILE: &str = "journal.new";
/// Room kept allocated for the end of each job whose end is not recorded yet: its
/// [`Entry::Ended`] (its error cut to
/// [`EXIT_ERROR_MAX_BYTES`](super::spool::EXIT_ERROR_MAX_BYTES), escaped) and its stop
/// progress, many times over.
pub const END_RESERVE_BYTES: u64 = 16 * 1024;
/// Allocated beyond the reserve, so that small records need no allocation each.
const SLACK_BYTES: u64 = 256 * 1024;
/// The file grows in steps of this much.
const ALLOCATION_STEP: u64 = 1024 * 1024;

/// What [`Journal::open`] found.
#[derive(Debug, Default)]
pub struct Replay {
    pub live: Live,
    /// Whole records read.
    pub records: usize,
    /// A torn record followed the last whole one (a crash or power loss mid-write); it was
    /// dropped.
    pub torn_tail: bool,
}

/// A record could not be written (or synced): the message, and whether the spool is full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CommitError {
    pub message: String,
    pub kind: io::ErrorKind,
}

impl CommitError {
    fn from_io(error: &io::Error) -> CommitError {
        CommitError {
            message: format!("cannot write the journal: {error}"),
            kind: error.kind(),
        }
    }

    /// Back to an `io::Error` of the same kind (for the spool's health, see
    /// [`super::Launcher::check_health`]).
    pub fn to_io(&self) -> io::Error {
        io::Error::new(self.kind, self.message.clone())
    }
}

/// Resolves once the record it was given for is written, and synced if it needs it.
#[must_use = "a record is durable only once its receipt resolves"]
pub struct Receipt(oneshot::Receiver<Result<(), CommitError>>);

impl Receipt {
    /// Waits (async) for the record's commit.
    pub async fn committed(self) -> Result<(), CommitError> {
        self.0.await.unwrap_or_else(|_| Err(closed()))
    }

    /// Waits (blocking: not on an async thread) for the record's commit.
    pub fn wait(self) -> Result<(), CommitError> {
        self.0.blocking_recv().unwrap_or_else(|_| Err(closed()))
    }

    /// The commit's result if it is known yet (for a poll loop woken by
    /// [`Journal::set_wake`]).
    pub fn try_take(&mut self) -> Option<Result<(), CommitError>> {
        match self.0.try_recv() {
            Ok(result) => Some(result),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(closed())),
        }
    }
}

fn closed() -> CommitError {
    CommitError {
        message: "the journal was closed before the record was written".into(),
        kind: io::ErrorKind::BrokenPipe,
    }
}

#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// Compact once the file's records exceed this many bytes (and twice what is live).
    pub compact_after_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            compact_after_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Counts of what the committer did, for tests and measurements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Batches written (one `pwrite` each).
    pub writes: u64,
    /// `fdatasync`s of batches.
    pub syncs: u64,
    /// Records written.
    pub records: u64,
    pub compactions: u64,
}

/// The journal's writer (see the module docs). Dropping it writes what is queued and stops
/// the committer.
pub struct Journal {
    shared: Arc<Shared>,
    committer: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Written one byte after each batch's receipts are resolved (see [`Journal::set_wake`]).
    on_commit: Mutex<Option<File>>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    closed: bool,
    /// What the committed records say.
    live: Live,
    stats: JournalStats,
}

struct Pending {
    entry: Entry,
    done: oneshot::Sender<Result<(), CommitError>>,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Journal {
    /// Opens (creating) the journal in the spool root `dir`, replays it, and starts its
    /// committer thread. An error when the file is not a journal of this version, or cannot
    /// be read or prepared.
    pub fn open(dir: &Path, options: JournalOptions) -> io::Result<(Journal, Replay)> {
        let path = dir.join(JOURNAL_FILE);
        // A compaction interrupted before its rename: the old journal still holds everything.
        match std::fs::remove_file(dir.join(COMPACTING_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let (file, replay, end) = match std::fs::read(&path) {
            // Created but its header never reached the disk (a power loss right after): as new.
            Ok(bytes) if bytes.iter().all(|&b| b == 0) => {
                let file = open_rw(&path, false)?;
                file.set_len(0)?;
                file.write_all_at(frame::MAGIC, 0)?;
                file.sync_data()?;
                (file, Replay::default(), frame::MAGIC.len() as u64)
            }
            Ok(bytes) => {
                let decoded = frame::decode_all(&bytes)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
                let mut replay = Replay {
                    torn_tail: decoded.torn,
                    records: decoded.payloads.len(),
                    ..Default::default()
                };
                for payload in &decoded.payloads {
                    match serde_json::from_slice::<Entry>(payload) {
                        Ok(entry) => replay.live.apply(&entry),
                        // Checksummed yet unreadable: written by a newer noded. Skipped, said.
                        Err(e) => tracing::error!("{}: a record skipped: {e}", path.display()),
                    }
                }
                // A torn record, and anything after it, is written over with zeros below.
                (open_rw(&path, false)?, replay, decoded.end as u64)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let file = open_rw(&path, true)?;
                file.write_all_at(frame::MAGIC, 0)?;
                file.sync_data()?;
                sync_dir(dir)?;
                (file, Replay::default(), frame::MAGIC.len() as u64)
            }
            Err(e) => return Err(e),
        };
        let allocated = file.metadata()?.len();
        // Zeros over everything past the records: over a torn record, so that the next one
        // is never followed by stale bytes that might read as a record; and over the room a
        // journal of an older noded left unwritten (see `allocate`).
        if allocated > end {
            write_zeros(&file, end, allocated)?;
            file.sync_data()?;
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                live: replay.live.clone(),
                ..Default::default()
            }),
            wake: Condvar::new(),
            on_commit: Mutex::new(None),
        });
        let committer = Committer {
            shared: shared.clone(),
            dir: dir.to_path_buf(),
            path,
            file,
            end,
            allocated,
            compact_at: options.compact_after_bytes.max(end.saturating_mul(2)),
            options,
        };
        let committer = std::thread::Builder::new()
            .name("journal".into())
            .spawn(move || committer.run())?;
        Ok((
            Journal {
                shared,
                committer: Some(committer),
            },
            replay,
        ))
    }

    /// Queues `entry` for the next batch; the receipt resolves once it is written (and
    /// synced, if [`Entry::needs_sync`]). Records are written in the order they are
    /// appended.
    pub fn append(&self, entry: Entry) -> Receipt {
        let (done, receipt) = oneshot::channel();
        let mut queue = self.shared.queue();
        if queue.closed {
            let _ = done.send(Err(closed()));
        } else {
            queue.pending.push(Pending { entry, done });
            self.shared.wake.notify_one();
        }
        Receipt(receipt)
    }

    /// Queues `entries` as one batch (see [`Journal::append`]): one write and at most one
    /// sync for all of them.
    pub fn append_all(&self, entries: impl IntoIterator<Item = Entry>) -> Vec<Receipt> {
        let mut queue = self.shared.queue();
        let receipts = entries
            .into_iter()
            .map(|entry| {
                let (done, receipt) = oneshot::channel();
                if queue.closed {
                    let _ = done.send(Err(closed()));
                } else {
                    queue.pending.push(Pending { entry, done });
                }
                Receipt(receipt)
            })
            .collect();
        self.shared.wake.notify_one();
        receipts
    }

    /// Runs `f` on what the committed records say.
    pub fn with_live<T>(&self, f: impl FnOnce(&Live) -> T) -> T {
        f(&self.shared.queue().live)
    }

    pub fn stats(&self) -> JournalStats {
        self.shared.queue().stats
    }

    /// After each batch, a byte is written to `pipe` (non-blocking: a full pipe already
    /// wakes its reader), so that a poll loop learns that receipts may be resolved.
    pub fn set_wake(&self, pipe: File) {
        *self
            .shared
            .on_commit
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(pipe);
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shared.queue().closed = true;
        self.shared.wake.notify_one();
        if let Some(committer) = self.committer.take() {
            let _ = committer.join();
        }
    }
}

/// Opens the journal (or a compaction's new file) for reading and writing, mode 0600.
fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(FILE_MODE)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    // Exactly 0600 whatever the umask or an older file had: it holds jobs' environments.
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// What the journal in the spool root `dir` says now, read without writing anything (its
/// writer may be running): for tests and diagnostics. A torn tail ends it, as in a replay.
pub fn read_live(dir: &Path) -> io::Result<Live> {
    let path = dir.join(JOURNAL_FILE);
    let bytes = std::fs::read(&path)?;
    let mut live = Live::default();
    if bytes.iter().all(|&b| b == 0) {
        return Ok(live);
    }
    let decoded = frame::decode_all(&bytes)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    for payload in &decoded.payloads {
        if let Ok(entry) = serde_json::from_slice::<Entry>(payload) {
            live.apply(&entry);
        }
    }
    Ok(live)
}

/// Makes a rename or a new file in `dir` survive a power loss.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
