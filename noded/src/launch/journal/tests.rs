//! Tests of the journal: replay, torn tails, group commit, compaction, a full spool.

use super::*;
use crate::launch::spool::{FinishedRecord, JobRecord, StopState, EXIT_ERROR_MAX_BYTES};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

fn launched(job_id: u64) -> Entry {
    Entry::Launched(Box::new(JobRecord::unreadable(job_id)))
}

fn ended(job_id: u64, exit_code: i32) -> Entry {
    Entry::Ended(FinishedRecord {
        job_id,
        exit_code: Some(exit_code),
        end_time_ms: 1_000 + job_id as i64,
        ..Default::default()
    })
}

fn open(dir: &Path) -> (Journal, Replay) {
    Journal::open(dir, JournalOptions::default()).unwrap()
}

fn commit(journal: &Journal, entry: Entry) {
    journal.append(entry).wait().unwrap();
}

#[test]
fn records_replay_into_the_live_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, replay) = open(dir.path());
    assert_eq!(replay.live, Live::default());
    assert_eq!(replay.records, 0);
    let path = dir.path().join(JOURNAL_FILE);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        FILE_MODE
    );
    for id in 1..=3 {
        commit(&journal, launched(id));
    }
    commit(
        &journal,
        Entry::Started {
            job_id: 2,
            job_pid: 4242,
            start_time_ms: 77,
        },
    );
    let stop = StopState {
        stop_requested: true,
        term_time_ms: 88,
        ..Default::default()
    };
    commit(
        &journal,
        Entry::Stop {
            job_id: 2,
            stop: stop.clone(),
        },
    );
    commit(&journal, ended(1, 0));
    commit(&journal, ended(3, 1));
    commit(&journal, Entry::Acked { job_id: 3 });
    // A refused launch's end, recorded without its launch.
    commit(&journal, ended(9, 2));
    let expected = journal.with_live(Live::clone);
    drop(journal);

    let (journal, replay) = open(dir.path());
    assert_eq!(replay.live, expected);
    assert_eq!(replay.records, 9);
    assert!(!replay.torn_tail);
    let unended: Vec<u64> = replay.live.unended().map(|r| r.job.job_id).collect();
    assert_eq!(unended, [2]);
    let record = replay.live.jobs[&2].record.clone().unwrap();
    assert_eq!((record.job_pid, record.start_time_ms), (Some(4242), 77));
    assert_eq!(record.stop, stop);
    let ends: Vec<(u64, Option<i32>)> = replay
        .live
        .unacked_ends()
        .map(|f| (f.job_id, f.exit_code))
        .collect();
    assert_eq!(ends, [(1, Some(0)), (9, Some(2))]);
    assert_eq!(journal.with_live(Live::clone), expected);
}

#[test]
fn a_torn_tail_is_dropped_and_written_over() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = open(dir.path());
    commit(&journal, launched(1));
    commit(&journal, launched(2));
    drop(journal);
    // A third record cut by a power loss: its first bytes on disk after the others.
    let path = dir.path().join(JOURNAL_FILE);
    let bytes = std::fs::read(&path).unwrap();
    let end = frame::decode_all(&bytes).unwrap().end;
    let mut third = Vec::new();
    launched(3).encode(&mut third).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&third[..third.len() / 2], end as u64)
        .unwrap();
    drop(file);

    let (journal, replay) = open(dir.path());
    assert!(replay.torn_tail);
    assert_eq!(replay.records, 2);
    assert_eq!(replay.live.jobs.keys().copied().collect::<Vec<_>>(), [1, 2]);
    // The next record goes where the torn one began; nothing stale follows it.
    commit(&journal, ended(1, 5));
    drop(journal);
    let (_journal, replay) = open(dir.path());
    assert!(!replay.torn_tail);
    assert_eq!(replay.records, 3);
    assert_eq!(
        replay.live.jobs[&1].ended.as_ref().unwrap().exit_code,
        Some(5)
    );

    // A file created whose header never reached the disk reads as a new journal; a file of
    // another format is refused.
    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join(JOURNAL_FILE), b"").unwrap();
    let (_journal, replay) = open(empty.path());
    assert_eq!(replay.records, 0);
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join(JOURNAL_FILE), b"{\"jobs\": []}").unwrap();
    let err = Journal::open(other.path(), JournalOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a ysched journal"), "{err}");
}

#[test]
fn a_batch_shares_one_sync_and_unsynced_records_need_none() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = open(dir.path());
    let receipts = journal.append_all((1..=100).map(launched));
    for receipt in receipts {
        receipt.wait().unwrap();
    }
    let stats = journal.stats();
    assert_eq!((stats.writes, stats.syncs, stats.records), (1, 1, 100));

    // Starts, stop progress and acknowledgements are written, not synced.
    let receipts = journal.append_all([
        Entry::Started {
            job_id: 1,
            job_pid: 10,
            start_time_ms: 1,
        },
        Entry::Stop {
            job_id: 1,
            stop: StopState::default(),
        },
        Entry::Acked { job_id: 2 },
    ]);
    for receipt in receipts {
        receipt.wait().unwrap();
    }
    let stats = journal.stats();
    assert_eq!((stats.writes, stats.syncs, stats.records), (2, 1, 103));

    // Writers on many threads at once: every record committed, in fewer syncs than records
    // whenever they overlap (not asserted: it depends on the scheduler), never more.
    let journal = Arc::new(journal);
    let threads: Vec<_> = (1000..1032)
        .map(|id| {
            let journal = journal.clone();
            std::thread::spawn(move || journal.append(ended(id, 0)).wait())
        })
        .collect();
    for thread in threads {
        thread.join().unwrap().unwrap();
    }
    let stats = journal.stats();
    assert_eq!(stats.records, 135);
    assert!(stats.syncs - 1 <= 32, "{stats:?}");
    let ends = journal.with_live(|live| live.unacked_ends().count());
    assert_eq!(ends, 32);
}

#[tokio::test]
async fn receipts_resolve_on_async_threads_too() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = open(dir.path());
    journal.append(launched(5)).committed().await.unwrap();
    drop(journal);
    let (_journal, replay) = open(dir.path());
    assert!(replay.live.jobs.contains_key(&5));
}

#[test]
fn compaction_keeps_only_what_is_live() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        compact_after_bytes: 64 * 1024,
    };
    let (journal, _) = Journal::open(dir.path(), options.clone()).unwrap();
    // 1,000 jobs launched, ended and acknowledged; every tenth stays unacknowledged and
    // every hundredth stays running.
    for id in 1..=1000u64 {
        let mut entries = vec![launched(id)];
        if id % 100 != 0 {
            entries.push(ended(id, 0));
            if id % 10 != 0 {
                entries.push(Entry::Acked { job_id: id });
            }
        }
        for receipt in journal.append_all(entries) {
            receipt.wait().unwrap();
        }
    }
    let expected = journal.with_live(Live::clone);
    let stats = journal.stats();
    assert!(stats.compactions > 0, "{stats:?}");
    drop(journal);
    assert!(!dir.path().join(COMPACTING_FILE).exists());
    let records = {
        let bytes = std::fs::read(dir.path().join(JOURNAL_FILE)).unwrap();
        frame::decode_all(&bytes).unwrap().payloads.len()
    };
    // 100 jobs live: 10 running, 90 ended; what follows the last compaction besides.
    assert!(records < 600, "{records} records after compaction");
    let (_journal, replay) = Journal::open(dir.path(), options).unwrap();
    assert_eq!(replay.live, expected);
    assert_eq!(replay.live.jobs.len(), 100);
    assert_eq!(replay.live.unended().count(), 10);
}

struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_spool_refuses_launches_and_keeps_every_end() {
    let dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "cannot mount a tmpfs (the suite runs as root)"
    );
    let _mounted = Mounted(dir.path().to_path_buf());
    let (journal, _) = open(dir.path());
    for id in 1..=20 {
        commit(&journal, launched(id));
    }
    // The file system filled to the last byte by someone else.
    let mut filler = File::create(dir.path().join("filler")).unwrap();
    while filler.write_all(&[0x55; 4096]).is_ok() {}
    assert!(std::fs::write(dir.path().join("probe"), b"x").is_err());

    // Launches go on into the room allocated ahead, as long as it holds every launched job's
    // end too; then one is refused as a full spool.
    let mut launched_ids: Vec<u64> = (1..=20).collect();
    let refused = loop {
        let id = launched_ids.len() as u64 + 1;
        assert!(id < 200, "launches never refused on a full spool");
        match journal.append(launched(id)).wait() {
            Ok(()) => launched_ids.push(id),
            Err(e) => break (id, e),
        }
    };
    assert_eq!(refused.1.kind, io::ErrorKind::StorageFull, "{refused:?}");
    // Every launched job's end fits, with its longest error and its stop progress.
    for &id in &launched_ids {
        commit(
            &journal,
            Entry::Stop {
                job_id: id,
                stop: StopState {
                    stop_requested: true,
                    ..Default::default()
                },
            },
        );
        commit(
            &journal,
            Entry::Ended(FinishedRecord {
                job_id: id,
                error: "\u{1}".repeat(100_000),
                ..Default::default()
            }),
        );
    }
    drop(journal);
    let (_journal, replay) = open(dir.path());
    assert_eq!(replay.live.unacked_ends().count(), launched_ids.len());
    assert!(!replay.live.jobs.contains_key(&refused.0));
    let error = &replay.live.jobs[&7].ended.as_ref().unwrap().error;
    assert_eq!(error.len(), EXIT_ERROR_MAX_BYTES + '…'.len_utf8());
}

/// The unwritten extents of `file` (`FS_IOC_FIEMAP`), or `None` where the file system cannot
/// tell (tmpfs, for one).
fn unwritten_extents(file: &File) -> Option<usize> {
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_FLAG_SYNC: u32 = 1;
    const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
    const EXTENTS: usize = 64;
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Extent {
        logical: u64,
        physical: u64,
        length: u64,
        reserved64: [u64; 2],
        flags: u32,
        reserved: [u32; 3],
    }
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped_extents: u32,
        extent_count: u32,
        reserved: u32,
        extents: [Extent; EXTENTS],
    }
    let mut map = Fiemap {
        start: 0,
        length: u64::MAX,
        flags: FIEMAP_FLAG_SYNC,
        mapped_extents: 0,
        extent_count: EXTENTS as u32,
        reserved: 0,
        extents: [Extent::default(); EXTENTS],
    };
    // SAFETY: FS_IOC_FIEMAP with a live, correctly laid out buffer of `EXTENTS` extents.
    let ret = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut map) };
    if ret != 0 {
        return None;
    }
    let mapped = (map.mapped_extents as usize).min(EXTENTS);
    Some(
        map.extents[..mapped]
            .iter()
            .filter(|e| e.flags & FIEMAP_EXTENT_UNWRITTEN != 0)
            .count(),
    )
}

/// Records go into blocks written before (zeros), so that a record's `fdatasync` has none
/// of the file's metadata to write: no unwritten extent after the journal grows, nor after
/// opening a journal an older noded left with unwritten room.
#[test]
fn records_land_in_written_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    {
        let (journal, _) = open(dir.path());
        // Enough launches to grow the file past its first allocation step.
        for id in 1..=80 {
            commit(&journal, launched(id));
        }
        let file = File::open(&path).unwrap();
        assert!(file.metadata().unwrap().len() > ALLOCATION_STEP);
        let Some(unwritten) = unwritten_extents(&file) else {
            eprintln!("this file system has no FIEMAP: nothing to check here");
            return;
        };
        assert_eq!(unwritten, 0, "unwritten extents in the journal");
    }
    // An older noded's journal: unwritten room past its records.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = file.metadata().unwrap().len() as libc::off_t;
    let extra = ALLOCATION_STEP as libc::off_t;
    // SAFETY: fallocate with mode 0 on a descriptor we own.
    assert_eq!(
        unsafe { libc::fallocate(file.as_raw_fd(), 0, len, extra) },
        0
    );
    drop(file);
    assert!(unwritten_extents(&File::open(&path).unwrap()).unwrap() > 0);
    let (journal, replay) = open(dir.path());
    assert_eq!(replay.live.unended_count(), 80);
    assert_eq!(unwritten_extents(&File::open(&path).unwrap()), Some(0));
    commit(&journal, ended(1, 0));
    assert_eq!(unwritten_extents(&File::open(&path).unwrap()), Some(0));
}
