//! The history's index and retention: start-up reads only active jobs, an old store gets its
//! index built, history by end time, and expiry of plain jobs, arrays and usage records
//! without ever making an expired task pending again.

use super::tests::reopen;
use super::*;
use crate::state::submission::NewJob;
use crate::state::Records;
use std::collections::BTreeSet;
use ysched_common::{ArraySpec, Job, JobId, JobSpec, JobState, Owner, RunRecord};

fn owner() -> Owner {
    Owner {
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        groups: vec!["alice".into()],
    }
}

/// A job of alice's in `state`, ended at `end`.
fn job(id: u64, state: JobState, end: Option<i64>) -> Job {
    let mut job = super::tests::job(id, state);
    job.spec = std::sync::Arc::new(JobSpec::default());
    job.owner = std::sync::Arc::new(owner());
    job.tier_value = 100;
    job.end_time = end;
    job
}

fn payload() -> Payload {
    Payload {
        script: "#!/bin/sh\ntrue\n".into(),
        env: Default::default(),
    }
}

/// Plain job `id`: submitted at 1, ended at `end` (`None`: still pending), with an event
/// and a payload of its own.
fn write_plain(store: &Store, id: u64, end: Option<i64>) {
    let mut b = Batch::default();
    b.put_job(&job(id, JobState::Pending, None));
    b.put_payload(JobId(id), &payload());
    b.event(JobId(id), 1, "submitted", "");
    store.apply(b).unwrap();
    if let Some(end) = end {
        let mut b = Batch::default();
        b.put_job(&job(id, JobState::Completed, Some(end)));
        b.event(JobId(id), end, "completed", "");
        store.apply(b).unwrap();
    }
}

fn records() -> Records {
    Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    )
}

/// Submits an array of `indices` on `rec` and writes it.
fn submit_array(store: &Store, rec: &mut Records, indices: &str) -> Vec<Job> {
    let dir = |id: JobId| format!("/ckpt/{id}");
    let new = NewJob {
        owner: owner(),
        from_host: None,
        spec: JobSpec {
            name: "sweep".into(),
            tier: "low".into(),
            gpus: 1,
            array: Some(ArraySpec::parse(indices, 10_001).unwrap()),
            ..JobSpec::default()
        },
        payload: payload(),
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let fx = rec.submit(new, 1_000);
    let jobs = fx.submitted.clone();
    store.apply(&fx).unwrap();
    rec.commit(fx);
    rec.insert_jobs(jobs.clone());
    jobs
}

/// Task `task` written as ended at `end` (a record of its own, as after a run).
fn end_task(store: &Store, task: &Job, end: i64) {
    let mut ended = task.clone();
    ended.state = JobState::Completed;
    ended.start_time = Some(end - 10);
    ended.end_time = Some(end);
    let mut b = Batch::default();
    b.put_job(&ended);
    b.event(task.id, end, "completed", "");
    store.apply(b).unwrap();
}

fn ids(jobs: &[Job]) -> Vec<u64> {
    jobs.iter().map(|j| j.id.0).collect()
}

#[test]
fn start_up_reads_only_the_active_jobs() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        write_plain(&store, 1, Some(100));
        write_plain(&store, 2, None);
        write_plain(&store, 3, Some(300));
        let mut b = Batch::default();
        b.set_next_job_id(4);
        store.apply(b).unwrap();
        // A finished record start-up would choke on, were it read.
        store
            .jobs
            .insert(1u64.to_be_bytes(), &b"not json"[..])
            .unwrap();
    }
    let store = reopen(dir.path());
    let rec = store.recover().unwrap();
    assert_eq!(
        rec.active_jobs.keys().map(|id| id.0).collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(rec.next_job_id, 4);
}

#[test]
fn a_store_from_before_the_index_gets_it_built_once() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        write_plain(&store, 1, Some(100));
        write_plain(&store, 2, None);
        write_plain(&store, 3, Some(300));
        // As an older schedd left it: no index at all.
        store.index.clear().unwrap();
        store.meta.remove(history::INDEX_VERSION).unwrap();
    }
    let store = reopen(dir.path());
    assert!(store.meta.get(history::INDEX_VERSION).unwrap().is_some());
    let rec = store.recover().unwrap();
    assert_eq!(
        rec.active_jobs.keys().map(|id| id.0).collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(ids(&store.finished_between(0, 1_000).unwrap()), [1, 3]);
}

#[test]
fn history_is_read_by_end_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in 1..=10 {
        write_plain(&store, id, (id % 3 != 0).then_some(id as i64 * 100));
    }
    // [300, 800): the jobs that ended at 400, 500, 700.
    assert_eq!(ids(&store.finished_between(300, 800).unwrap()), [4, 5, 7]);
    assert!(store.finished_between(800, 300).unwrap().is_empty());
    assert_eq!(store.finished_between(0, i64::MAX).unwrap().len(), 7);
}

#[test]
fn plain_jobs_past_the_cutoff_expire_with_their_events_and_payload() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in 1..=6 {
        write_plain(&store, id, (id != 6).then_some(id as i64 * 100));
    }
    // Job 2's end state is still needed by a dependency.
    let keep: BTreeSet<JobId> = [JobId(2)].into();
    let done = store.expire_finished(450, 1_000, &keep, None).unwrap();
    assert_eq!(done.jobs, 3, "{done:?}");
    for id in [1, 3, 4] {
        assert!(store.job(JobId(id)).unwrap().is_none(), "job {id}");
        assert!(store.events(JobId(id)).unwrap().is_empty(), "job {id}");
        assert_eq!(store.payload(JobId(id)).unwrap(), Payload::default());
    }
    for id in [2, 5, 6] {
        assert!(store.job(JobId(id)).unwrap().is_some(), "job {id}");
        assert!(!store.events(JobId(id)).unwrap().is_empty(), "job {id}");
    }
    assert_eq!(ids(&store.finished_between(0, i64::MAX).unwrap()), [2, 5]);
    // In small steps: at most `limit` entries looked at per call.
    let done = store
        .expire_finished(10_000, 1, &BTreeSet::new(), None)
        .unwrap();
    assert_eq!((done.jobs, done.examined), (1, 1));
    let done = store
        .expire_finished(10_000, 10, &BTreeSet::new(), None)
        .unwrap();
    assert_eq!(done.jobs, 1);
    assert_eq!(
        store
            .expire_finished(10_000, 10, &BTreeSet::new(), None)
            .unwrap()
            .examined,
        0
    );
    // The active job is untouched and still recovered.
    let rec = store.recover().unwrap();
    assert_eq!(
        rec.active_jobs.keys().map(|id| id.0).collect::<Vec<_>>(),
        [6]
    );
}

#[test]
fn an_array_expires_only_once_no_task_is_left_as_submitted() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = records();
    let tasks;
    {
        let store = Store::open(dir.path()).unwrap();
        tasks = submit_array(&store, &mut rec, "0-9");
        // Tasks 0-4 ran and ended long ago; 5-9 are still queued as submitted.
        for task in &tasks[..5] {
            end_task(&store, task, 100);
        }
        let done = store
            .expire_finished(1_000_000, 1_000, &BTreeSet::new(), None)
            .unwrap();
        assert_eq!(done.jobs, 0, "{done:?}");
        for task in &tasks[..5] {
            let read = store.job(task.id).unwrap().unwrap();
            assert_eq!(read.state, JobState::Completed, "task {}", task.id);
        }
    }
    // Still so after a restart: the queued tasks come back, the ended ones do not.
    let store = reopen(dir.path());
    let recovered = store.recover().unwrap();
    assert_eq!(
        recovered
            .active_jobs
            .keys()
            .map(|id| id.0)
            .collect::<Vec<_>>(),
        ids(&tasks[5..])
    );
    // The rest ends; everything goes, the array's record, spec, payload and events too.
    for task in &tasks[5..] {
        end_task(&store, task, 200);
    }
    let done = store
        .expire_finished(1_000_000, 1_000, &BTreeSet::new(), None)
        .unwrap();
    assert_eq!(done.jobs, 10, "{done:?}");
    let array_id = tasks[0].id;
    for task in &tasks {
        assert!(store.job(task.id).unwrap().is_none(), "task {}", task.id);
        assert!(store.job_state(task.id).unwrap().is_none());
        assert!(store.events(task.id).unwrap().is_empty());
    }
    assert!(store.arrays.is_empty() && store.array_specs.is_empty());
    assert_eq!(store.payload(array_id).unwrap(), Payload::default());
    assert!(store.recover().unwrap().active_jobs.is_empty());
    let store = {
        drop(store);
        reopen(dir.path())
    };
    assert!(store.recover().unwrap().active_jobs.is_empty());
    assert!(store.finished_between(0, i64::MAX).unwrap().is_empty());
}

#[test]
fn an_array_whose_tasks_ended_partly_expired_never_brings_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = records();
    let store = Store::open(dir.path()).unwrap();
    let tasks = submit_array(&store, &mut rec, "0-3");
    // Every task ran: 0 and 1 ended long ago, 2 and 3 recently.
    for task in &tasks[..2] {
        end_task(&store, task, 100);
    }
    for task in &tasks[2..] {
        end_task(&store, task, 5_000);
    }
    let done = store
        .expire_finished(1_000, 1_000, &BTreeSet::new(), None)
        .unwrap();
    assert_eq!(done.jobs, 2, "{done:?}");
    // The expired tasks are gone, not made again from the array's record as submitted.
    for task in &tasks[..2] {
        assert!(store.job(task.id).unwrap().is_none(), "task {}", task.id);
    }
    for task in &tasks[2..] {
        assert_eq!(
            store.job(task.id).unwrap().unwrap().state,
            JobState::Completed
        );
    }
    assert!(store.recover().unwrap().active_jobs.is_empty());
    // The array's submit event (under its first task's id) stays while tasks are left.
    let kinds: Vec<String> = store
        .job_events(&store.job(tasks[2].id).unwrap().unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["submitted", "completed"]);
    assert_eq!(store.arrays.len(), 1);
    store
        .expire_finished(10_000, 1_000, &BTreeSet::new(), None)
        .unwrap();
    assert!(store.arrays.is_empty());
    assert!(store.events.is_empty());
}

#[test]
fn usage_records_expire_by_their_own_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut b = Batch::default();
    for (job, end) in [(1, 100), (2, 200), (3, 300)] {
        b.put_run(&RunRecord {
            job_id: JobId(job),
            restart_count: 0,
            account: "ml".into(),
            user: "alice".into(),
            uid: 1000,
            tier: "low".into(),
            gpus: 1,
            cpus: 1,
            queued_at: end - 60,
            start: end - 50,
            end,
            outcome: "COMPLETED".into(),
            preempted_by: None,
            preemptor_account: None,
            checkpoint_saved: false,
            lost_gpu_secs: 0,
        });
    }
    store.apply(b).unwrap();
    assert_eq!(store.expire_usage(250, 1).unwrap(), 1);
    assert_eq!(store.expire_usage(250, 10).unwrap(), 1);
    assert_eq!(store.expire_usage(250, 10).unwrap(), 0);
    let left: Vec<u64> = store
        .runs_between(0, i64::MAX)
        .unwrap()
        .iter()
        .map(|r| r.job_id.0)
        .collect();
    assert_eq!(left, [3]);
}

#[tokio::test]
async fn an_array_cancelled_while_queued_expires_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = records();
    let store = Store::open(dir.path()).unwrap();
    let tasks = submit_array(&store, &mut rec, "0-39");
    // Cancelled while queued: the tasks are kept in the array's record, not one by one.
    let caller = ysched_common::Caller::local(owner());
    let target = ysched_common::JobTarget::parse(&tasks[0].id.to_string()).unwrap();
    let (fx, _) = rec
        .cancel_targets(
            &caller,
            &[target],
            "",
            &|id| store.job(id).map_err(crate::error::ApiError::from),
            5_000,
        )
        .unwrap();
    store.apply(&fx).unwrap();
    rec.commit(fx);
    assert!(store.jobs.is_empty(), "kept in the array's record");
    assert_eq!(
        ids(&store.finished_between(5_000, 5_001).unwrap()),
        ids(&tasks),
        "found by their end"
    );
    assert_eq!(
        store.index.scan_prefix([b'e']).count(),
        1,
        "one key for the run of tasks that ended together"
    );
    // Not yet past the cutoff: nothing goes.
    assert_eq!(
        store
            .expire_finished(5_000, 1_000, &BTreeSet::new(), None)
            .unwrap()
            .jobs,
        0
    );
    assert_eq!(store.arrays.len(), 1);
    // Past it: the run's one key takes its 40 tasks, and the record goes with them.
    let done = store
        .expire_finished(6_000, 30, &BTreeSet::new(), None)
        .unwrap();
    assert_eq!((done.jobs, done.examined), (40, 1));
    assert!(store.arrays.is_empty() && store.array_specs.is_empty() && store.events.is_empty());
    for task in &tasks {
        assert!(store.job(task.id).unwrap().is_none(), "task {}", task.id);
    }
    assert!(store.recover().unwrap().active_jobs.is_empty());
}

#[test]
fn entries_kept_at_the_front_do_not_hold_up_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in 1..=4 {
        write_plain(&store, id, Some(id as i64 * 100));
    }
    let keep: BTreeSet<JobId> = [JobId(1), JobId(2)].into();
    let first = store.expire_finished(10_000, 2, &keep, None).unwrap();
    assert_eq!((first.jobs, first.examined), (0, 2));
    let next = store
        .expire_finished(10_000, 2, &keep, first.resume.as_deref())
        .unwrap();
    assert_eq!((next.jobs, next.examined), (2, 2));
    let last = store
        .expire_finished(10_000, 2, &keep, next.resume.as_deref())
        .unwrap();
    assert_eq!(last.examined, 0);
    assert_eq!(ids(&store.finished_between(0, i64::MAX).unwrap()), [1, 2]);
}

/// A job's entry in a listing by end time, as bytes, whichever way the store gave it.
fn listing_of(finished: &Finished) -> Vec<u8> {
    match finished {
        Finished::Entry(e) => e.listing().to_vec(),
        Finished::Record(job) => ysched_common::convert::job_listing_bytes(job),
    }
}

#[test]
fn a_finished_job_is_listed_from_its_index_entry_without_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in 1..=3 {
        write_plain(&store, id, Some(100 * id as i64));
    }
    write_plain(&store, 4, None);
    let ended = job(2, JobState::Completed, Some(200));
    // A record that would not decode, were it read.
    store
        .jobs
        .insert(2u64.to_be_bytes(), &b"not json"[..])
        .unwrap();
    let listed = store
        .finished_listed_between(150, i64::MAX, JobId(0))
        .unwrap();
    assert_eq!(listed.iter().map(|f| f.id().0).collect::<Vec<_>>(), [2, 3]);
    let Finished::Entry(entry) = &listed[0] else {
        panic!("job 2 read from its record: {:?}", listed[0]);
    };
    assert_eq!(
        (entry.state, entry.uid, entry.user(), entry.account()),
        (JobState::Completed, 1000, "alice", "")
    );
    assert_eq!(entry.submit_time, 1);
    assert_eq!(
        &entry.listing()[..],
        ysched_common::convert::job_listing_bytes(&ended)
    );
    // Pages: only ids after the one given.
    let after = store
        .finished_listed_between(0, i64::MAX, JobId(2))
        .unwrap();
    assert_eq!(after.iter().map(|f| f.id().0).collect::<Vec<_>>(), [3]);
    assert!(store
        .finished_listed_between(500, 100, JobId(0))
        .unwrap()
        .is_empty());
}

#[test]
fn keys_written_before_values_were_are_listed_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in 1..=3 {
        write_plain(&store, id, Some(100 * id as i64));
    }
    // As an earlier version wrote them: the same keys, no values.
    let keys: Vec<_> = store.index.scan_prefix([b'e']).keys().collect();
    for key in keys {
        store.index.insert(key.unwrap(), &[][..]).unwrap();
    }
    let listed = store
        .finished_listed_between(0, i64::MAX, JobId(0))
        .unwrap();
    assert_eq!(listed.len(), 3);
    for (finished, id) in listed.iter().zip(1u64..) {
        let Finished::Record(job) = finished else {
            panic!("job {id} has no entry to read: {finished:?}");
        };
        assert_eq!(**job, store.job(JobId(id)).unwrap().unwrap());
    }
    // Expiry reads them as before.
    let done = store
        .expire_finished(250, 100, &BTreeSet::new(), None)
        .unwrap();
    assert_eq!(done.jobs, 2);
    assert_eq!(ids(&store.finished_between(0, i64::MAX).unwrap()), [3]);
}

#[test]
fn array_tasks_ended_as_submitted_are_listed_as_their_array_makes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = records();
    let store = Store::open(dir.path()).unwrap();
    let tasks = submit_array(&store, &mut rec, "0-39");
    // One task ran and ended first: a record and an entry of its own.
    let mut ran = tasks[3].clone();
    ran.state = JobState::Completed;
    ran.start_time = Some(3_990);
    ran.end_time = Some(4_000);
    let mut fx = crate::state::Effects::default();
    fx.jobs.push(ran.clone());
    store.apply(&fx).unwrap();
    rec.commit(fx);
    let caller = ysched_common::Caller::local(owner());
    let target = ysched_common::JobTarget::parse(&tasks[0].id.to_string()).unwrap();
    let (fx, _) = rec
        .cancel_targets(
            &caller,
            &[target],
            "",
            &|id| store.job(id).map_err(crate::error::ApiError::from),
            5_000,
        )
        .unwrap();
    store.apply(&fx).unwrap();
    rec.commit(fx);
    // 39 tasks kept in the record: two runs of keys (around the task that ran), and its own.
    assert_eq!(store.index.scan_prefix([b'e']).count(), 3);
    let listed = store
        .finished_listed_between(0, i64::MAX, JobId(0))
        .unwrap();
    assert_eq!(
        listed.iter().map(|f| f.id()).collect::<Vec<_>>(),
        tasks.iter().map(|t| t.id).collect::<Vec<_>>()
    );
    for finished in &listed {
        let job = store.job(finished.id()).unwrap().unwrap();
        assert!(job.state.is_terminal());
        assert_eq!(
            listing_of(finished),
            ysched_common::convert::job_listing_bytes(&job),
            "task {}",
            job.id
        );
        assert_eq!(
            matches!(finished, Finished::Entry(_)),
            job.id == ran.id,
            "only the task that ran has an entry of its own"
        );
    }
    let after = store
        .finished_listed_between(0, i64::MAX, tasks[9].id)
        .unwrap();
    assert_eq!(after.len(), 30);
    assert_eq!(after[0].id(), tasks[10].id);
    // Within a window: the cancelled ones only.
    assert_eq!(
        store
            .finished_listed_between(4_500, i64::MAX, JobId(0))
            .unwrap()
            .len(),
        39
    );
}

#[test]
fn finished_jobs_are_read_a_page_at_a_time_in_id_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = records();
    let store = Store::open(dir.path()).unwrap();
    // Ids 1..=20, cancelled while queued: kept in the array's record.
    let tasks = submit_array(&store, &mut rec, "0-19");
    let caller = ysched_common::Caller::local(owner());
    let target = ysched_common::JobTarget::parse(&tasks[0].id.to_string()).unwrap();
    let (fx, _) = rec
        .cancel_targets(
            &caller,
            &[target],
            "",
            &|id| store.job(id).map_err(crate::error::ApiError::from),
            5_000,
        )
        .unwrap();
    store.apply(&fx).unwrap();
    rec.commit(fx);
    write_plain(&store, 21, Some(100));
    write_plain(&store, 22, None);
    write_plain(&store, 23, Some(300));
    let mut all = Vec::new();
    let mut after = JobId(0);
    let mut pages = 0;
    loop {
        let (page, bound) = store.finished_jobs_after(after, 6, |_| true).unwrap();
        pages += 1;
        assert!(page.len() <= 6);
        all.extend(ids(&page));
        match bound {
            Some(b) => after = b,
            None => break,
        }
    }
    let expected: Vec<u64> = (1..=21).chain([23]).collect();
    assert_eq!(all, expected, "every finished job once, in id order");
    assert_eq!(pages, 4);
    assert_eq!(ids(&store.finished_jobs().unwrap()), expected);
    // What `want` leaves out is not counted in a page.
    let (page, _) = store
        .finished_jobs_after(JobId(0), 2, |j| j.id.0 % 2 == 1)
        .unwrap();
    assert_eq!(ids(&page), [1, 3]);
    // From the middle of the array on.
    let (page, _) = store.finished_jobs_after(JobId(18), 3, |_| true).unwrap();
    assert_eq!(ids(&page), [19, 20, 21]);
}

#[test]
fn a_job_ended_twice_is_listed_once_as_of_its_later_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    write_plain(&store, 1, Some(100));
    write_plain(&store, 2, Some(150));
    // Job 1 written again with a later end (schedd does not do this; an earlier version's
    // store might hold both keys).
    let mut b = Batch::default();
    b.put_job(&job(1, JobState::Failed, Some(200)));
    store.apply(b).unwrap();
    let listed = store
        .finished_listed_between(0, i64::MAX, JobId(0))
        .unwrap();
    let states: Vec<(u64, JobState)> = listed
        .iter()
        .map(|f| match f {
            Finished::Entry(e) => (e.id.0, e.state),
            Finished::Record(j) => (j.id.0, j.state),
        })
        .collect();
    assert_eq!(states, [(1, JobState::Failed), (2, JobState::Completed)]);
}

#[test]
fn a_page_by_end_time_holds_its_first_ids_whatever_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = records();
    let store = Store::open(dir.path()).unwrap();
    // Ten tasks cancelled while queued...
    let tasks = submit_array(&store, &mut rec, "0-9");
    let caller = ysched_common::Caller::local(owner());
    let target = ysched_common::JobTarget::parse(&tasks[0].id.to_string()).unwrap();
    let (fx, _) = rec
        .cancel_targets(
            &caller,
            &[target],
            "",
            &|id| store.job(id).map_err(crate::error::ApiError::from),
            5_000,
        )
        .unwrap();
    store.apply(&fx).unwrap();
    rec.commit(fx);
    // ...and ten plain jobs, the later ids ending first: keys come in another order than ids.
    let first_plain = tasks[9].id.0 + 1;
    for k in 0..10 {
        write_plain(&store, first_plain + k, Some(9_000 - 100 * k as i64));
    }
    let every: Vec<u64> = (tasks[0].id.0..first_plain + 10).collect();
    let whole = store
        .finished_listed_between(0, i64::MAX, JobId(0))
        .unwrap();
    let longest = whole.iter().map(|f| listing_of(f).len()).max().unwrap();
    for room in [
        PageRoom {
            jobs: 4,
            bytes: usize::MAX,
        },
        // Two or three entries a page.
        PageRoom {
            jobs: usize::MAX,
            bytes: 3 * longest - 1,
        },
        PageRoom { jobs: 1, bytes: 0 },
    ] {
        let (mut listed, mut after, mut pages) = (Vec::new(), JobId(0), 0);
        loop {
            let (page, bound) = store
                .finished_listed_page(0, i64::MAX, after, room, |_| true)
                .unwrap();
            pages += 1;
            assert!(!page.is_empty() && page.len() <= room.jobs, "{room:?}");
            let bytes: usize = page.iter().map(|f| listing_of(f).len()).sum();
            assert!(bytes <= room.bytes || page.len() == 1, "{room:?}: {bytes}");
            listed.extend(page.iter().map(|f| f.id().0));
            match bound {
                Some(bound) => {
                    assert_eq!(Some(bound.0), listed.last().copied(), "{room:?}");
                    after = bound;
                }
                None => break,
            }
        }
        assert_eq!(listed, every, "{room:?}: each job once, in id order");
        assert!(pages > 3, "{room:?}: {pages} pages");
    }
    // What `selects` leaves out is not in the page and takes no room: the even plain jobs.
    let (page, bound) = store
        .finished_listed_page(
            0,
            i64::MAX,
            tasks[9].id,
            PageRoom {
                jobs: 3,
                bytes: usize::MAX,
            },
            |entry| entry.id.0 % 2 == 0,
        )
        .unwrap();
    let even: Vec<u64> = (first_plain..first_plain + 10)
        .filter(|id| id % 2 == 0)
        .take(3)
        .collect();
    assert_eq!(page.iter().map(|f| f.id().0).collect::<Vec<_>>(), even);
    assert_eq!(bound, Some(JobId(even[2])));
}
