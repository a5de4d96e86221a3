//! The store: a round trip of every kind of record through a reopen, and usage records
//! scanned by their end.

use super::*;
use ysched_common::{AuditRecord, Job, JobId, JobSpec, JobState, Owner, RunRecord};

/// Opens the store in `dir` again once the last handle is dropped (sled's flusher may still
/// hold its lock briefly after drop: the opening waits for it).
pub(crate) fn reopen(dir: &std::path::Path) -> Store {
    Store::open(dir).unwrap()
}

/// A plain job in `state` (tests of other modules that write the store use it too).
pub(crate) fn job(id: u64, state: JobState) -> Job {
    Job {
        id: JobId(id),
        spec: std::sync::Arc::new(JobSpec {
            script: "#!/bin/sh\ntrue\n".into(),
            ..Default::default()
        }),
        owner: std::sync::Arc::new(Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec![],
        }),
        tier_value: 1000,
        state,
        reason: String::new(),
        held_by: Default::default(),
        alloc: vec![],
        restart_count: 0,
        exit_code: None,
        signal: None,
        submit_time: 1,
        start_time: None,
        end_time: None,
        launched: false,
        grace_secs: 30,
        checkpoint_dir: String::new(),
        stop: None,
        last_checkpoint: None,
        parts: Default::default(),
        launch_attempts: 0,
        queued_at: None,
        run_ms_before: 0,
        array: None,
    }
}

#[tokio::test]
async fn roundtrip_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let mut b = Batch::default();
        b.put_job(&job(1, JobState::Pending));
        b.put_payload(
            JobId(1),
            &Payload {
                script: "s".into(),
                env: Default::default(),
            },
        );
        b.put_job(&job(2, JobState::Completed));
        b.event(JobId(1), 5, "submitted", "x");
        b.event(JobId(1), 6, "started", "y");
        b.set_next_job_id(3);
        for action in ["first", "second"] {
            b.audit(&AuditRecord {
                time: 1,
                user: "root".into(),
                uid: 0,
                action: action.into(),
                job_id: None,
                detail: String::new(),
                host: None,
            });
        }
        store.apply(b).unwrap();
        let log = store.audit_log(0).unwrap();
        assert_eq!(
            log.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
            ["second", "first"]
        );
        assert_eq!(store.audit_log(1).unwrap().len(), 1);
        // Paged: one record when the next would pass the bytes asked for, then the rest.
        let (page, next) = store.audit_page(None, 0, 1).unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].action, "second");
        let (page, last) = store.audit_page(next, 0, 1 << 20).unwrap();
        assert_eq!(
            page.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
            ["first"]
        );
        assert_eq!(last, None);
        let (page, next) = store.audit_page(None, 1, 1 << 20).unwrap();
        assert_eq!((page.len(), next.is_some()), (1, true));
        let mut b = Batch::default();
        b.event(JobId(1), 7, "ended", "z");
        store.apply(b).unwrap();
        store.flush().await.unwrap();
        let ev = store.events(JobId(1)).unwrap();
        assert_eq!(ev.iter().map(|e| e.time).collect::<Vec<_>>(), [5, 6, 7]);
        assert_eq!(store.payload(JobId(1)).unwrap().script, "s");
        assert!(store.job(JobId(1)).unwrap().unwrap().spec.script.is_empty());
    }
    let store = reopen(dir.path());
    let rec = store.recover().unwrap();
    assert_eq!(rec.next_job_id, 3);
    assert_eq!(
        rec.active_jobs.keys().copied().collect::<Vec<_>>(),
        [JobId(1)]
    );
    assert_eq!(store.finished_jobs().unwrap().len(), 1);
}

fn run(job: u64, end: i64) -> RunRecord {
    RunRecord {
        job_id: JobId(job),
        restart_count: 0,
        account: "vision".into(),
        user: "alice".into(),
        uid: 1000,
        tier: "high".into(),
        gpus: 2,
        cpus: 4,
        queued_at: end - 20,
        start: end - 10,
        end,
        outcome: "COMPLETED".into(),
        preempted_by: None,
        preemptor_account: None,
        checkpoint_saved: false,
        lost_gpu_secs: 0,
    }
}

#[tokio::test]
async fn runs_are_scanned_by_end_written_once_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let mut b = Batch::default();
        for (job, end) in [(3, 300), (1, 100), (2, 200), (4, 400)] {
            b.put_run(&run(job, end));
        }
        b.put_job(&job(1, JobState::Completed));
        store.apply(b).unwrap();
        // The same run written again (an event applied twice) replaces itself.
        let mut b = Batch::default();
        b.put_run(&run(2, 200));
        assert!(!b.is_empty());
        store.apply(b).unwrap();
        store.flush().await.unwrap();
        assert_eq!(store.run_count(), 4);
        let ends = |from, to| {
            store
                .runs_between(from, to)
                .unwrap()
                .iter()
                .map(|r| r.end)
                .collect::<Vec<_>>()
        };
        assert_eq!(ends(100, 400), [100, 200, 300], "[from, to)");
        assert_eq!(ends(101, i64::MAX), [200, 300, 400]);
        assert_eq!(ends(400, 100), Vec::<i64>::new());
        assert!(store.has_run(&run(3, 300)).unwrap());
        assert!(!store.has_run(&run(3, 301)).unwrap());
    }
    let store = loop {
        match Store::open(dir.path()) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    assert_eq!(store.runs_between(0, i64::MAX).unwrap()[0], run(1, 100));
    assert_eq!(store.run_count(), 4);
}

/// A store whose state a snapshot replaced keeps each job's events in order: its own next
/// events sort after those the snapshot brought, made from another store's (larger) ids,
/// and still after a reopen.
#[tokio::test]
async fn events_after_a_snapshot_install_sort_after_the_snapshot_s() {
    let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = Store::open(from.path()).unwrap();
    // The leader has generated many more ids than the new replica will have.
    for _ in 0..10_000 {
        leader.db.generate_id().unwrap();
    }
    let mut b = Batch::default();
    b.put_job(&job(1, JobState::Pending));
    b.event(JobId(1), 5, "submitted", "");
    leader.apply(b).unwrap();
    let mut snapshot = std::io::Cursor::new(Vec::new());
    leader.export_state_to(&mut snapshot).unwrap();

    {
        let replica = Store::open(to.path()).unwrap();
        replica.import_state_from(&mut snapshot).unwrap();
        let mut b = Batch::default();
        b.event(JobId(1), 6, "held", "");
        replica.apply(b).unwrap();
        replica.flush().await.unwrap();
    }
    let replica = reopen(to.path());
    let mut b = Batch::default();
    b.event(JobId(1), 7, "released", "");
    replica.apply(b).unwrap();
    let times: Vec<i64> = replica
        .events(JobId(1))
        .unwrap()
        .iter()
        .map(|e| e.time)
        .collect();
    assert_eq!(times, [5, 6, 7]);
}

/// The batches of a group are applied as if one by one: a key written twice ends with the
/// later value, a job's events keep their order, the id counter ends with the last, and a
/// batch that cannot share a transaction (a removal) still lands between its neighbours.
#[tokio::test]
async fn a_group_of_batches_lands_as_if_applied_one_by_one() {
    let group = || {
        let mut submit = Batch::default();
        submit.put_job(&job(1, JobState::Pending));
        submit.event(JobId(1), 5, "submitted", "");
        submit.set_next_job_id(2);
        let mut start = Batch::default();
        start.put_job(&job(1, JobState::Running));
        start.event(JobId(1), 6, "started", "");
        start.put_job(&job(2, JobState::Pending));
        start.event(JobId(2), 6, "submitted", "");
        start.set_next_job_id(3);
        let mut removal = Batch::default();
        removal.removals.jobs.push(JobId(2));
        removal.removals.events_of.push(JobId(2));
        let mut last = Batch::default();
        last.put_job(&job(3, JobState::Pending));
        last.event(JobId(1), 7, "requeued", "");
        last.set_next_job_id(4);
        vec![submit, start, removal, last]
    };
    assert_eq!(
        group().iter().map(Batch::mergeable).collect::<Vec<_>>(),
        [true, true, false, true]
    );
    let grouped = tempfile::tempdir().unwrap();
    let alone = tempfile::tempdir().unwrap();
    {
        let store = Store::open(grouped.path()).unwrap();
        store.apply_group(group()).unwrap();
        store.flush().await.unwrap();
        let store = Store::open(alone.path()).unwrap();
        for batch in group() {
            store.apply(batch).unwrap();
        }
        store.flush().await.unwrap();
    }
    let seen = |dir: &std::path::Path| {
        let store = reopen(dir);
        let rec = store.recover().unwrap();
        let jobs: Vec<(JobId, JobState)> = [1, 2, 3]
            .into_iter()
            .filter_map(|id| store.job(JobId(id)).unwrap())
            .map(|job| (job.id, job.state))
            .collect();
        let events: Vec<i64> = store
            .events(JobId(1))
            .unwrap()
            .iter()
            .map(|e| e.time)
            .collect();
        (
            jobs,
            events,
            store.events(JobId(2)).unwrap().len(),
            rec.next_job_id,
        )
    };
    let expected = (
        vec![(JobId(1), JobState::Running), (JobId(3), JobState::Pending)],
        vec![5, 6, 7],
        0,
        4,
    );
    assert_eq!(seen(grouped.path()), expected);
    assert_eq!(seen(alone.path()), expected);
}

/// A replica's snapshots are the whole state: their directory is 0700 and their files 0600,
/// whatever the umask or a file an older schedd left.
#[test]
fn snapshot_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let snapshots = store.snapshot_dir().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&snapshots), 0o700);
    let fresh = snapshots.join("1-2-1.snap");
    drop(crate::store::create_snapshot_file(&fresh).unwrap());
    assert_eq!(mode(&fresh), 0o600);
    let older = snapshots.join("building-1");
    std::fs::write(&older, b"old").unwrap();
    std::fs::set_permissions(&older, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(crate::store::create_snapshot_file(&older).unwrap());
    assert_eq!(mode(&older), 0o600);
    assert_eq!(std::fs::read(&older).unwrap(), b"", "truncated");
}
