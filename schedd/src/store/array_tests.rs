//! Arrays in the store: one submit of N tasks is one write, the spec is stored once and
//! shared again after a reopen, and the payload is the array's.

use super::arrays::Shared;
use super::tests::reopen;
use super::*;
use crate::state::submission::NewJob;
use crate::state::Records;
use std::collections::BTreeMap;
use std::sync::Arc;
use ysched_common::{ArraySpec, Job, JobId, JobSpec, JobState, Owner};

fn owner() -> Owner {
    Owner {
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        groups: vec!["alice".into(), "ml".into()],
    }
}

fn spec(indices: &str) -> JobSpec {
    JobSpec {
        name: "sweep".into(),
        tier: "low".into(),
        account: "ml".into(),
        workdir: "/home/alice/sweep".into(),
        cpus: 4,
        gpus: 1,
        mem_mib: 16 * 1024,
        time_limit_secs: Some(3600),
        args: vec!["--lr".into(), "3e-4".into()],
        stdout_path: Some("/home/alice/sweep/out-%A_%a.txt".into()),
        array: Some(ArraySpec::parse(indices, 10_001).unwrap()),
        ..JobSpec::default()
    }
}

fn payload() -> Payload {
    Payload {
        script: format!(
            "#!/bin/bash\n{}",
            "python train.py --task $YSCHED_ARRAY_TASK_ID\n"
        ),
        env: (0..40)
            .map(|i| (format!("VAR_{i}"), "x".repeat(40)))
            .collect(),
    }
}

/// Submits `spec` on `rec` and writes it: returns the jobs and how long the submit took
/// from the state machine's event to the flush.
async fn submit(
    store: &Store,
    rec: &mut Records,
    spec: JobSpec,
) -> (Vec<Job>, std::time::Duration) {
    let began = std::time::Instant::now();
    let dir = |id: JobId| format!("/home/alice/.ysched/checkpoints/{id}");
    let new = NewJob {
        owner: owner(),
        from_host: None,
        spec,
        payload: payload(),
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let fx = rec.submit(new, 1_000);
    let jobs = fx.submitted.clone();
    store.apply(&fx).unwrap();
    store.flush().await.unwrap();
    rec.commit(fx);
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    rec.insert_jobs(jobs);
    let took = began.elapsed();
    (
        ids.iter().map(|id| Job::clone(&rec.jobs()[id])).collect(),
        took,
    )
}

#[tokio::test]
async fn an_array_is_written_once_and_recovered_with_its_spec_shared() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        5,
        Default::default(),
    );
    let submitted;
    {
        let store = Store::open(dir.path()).unwrap();
        let (jobs, _) = submit(&store, &mut rec, spec("0-99:3")).await;
        assert_eq!(jobs.len(), 34);
        let mut plain = spec("0");
        plain.array = None;
        submit(&store, &mut rec, plain).await;
        // A task changes later (it ran and completed): written as any job is.
        let mut done = jobs[1].clone();
        done.state = JobState::Completed;
        let mut b = Batch::default();
        b.put_job(&done);
        store.apply(b).unwrap();
        store.flush().await.unwrap();
        // The task is read back whole, with its array's spec.
        let read = store.job(JobId(6)).unwrap().unwrap();
        assert_eq!(read.state, JobState::Completed);
        assert_eq!(*read.spec, *jobs[0].spec);
        assert_eq!(read.array, jobs[1].array);
        assert_eq!(
            store.job_state(JobId(6)).unwrap(),
            Some(JobState::Completed)
        );
        // Stored once, under the array's id.
        assert_eq!(store.payload(JobId(5)).unwrap(), payload());
        assert_eq!(store.payload(JobId(6)).unwrap(), Payload::default());
        assert_eq!(store.array_specs.len(), 1);
        let listed = store.jobs_by_id([JobId(6), JobId(999), JobId(7)]).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(Arc::ptr_eq(&listed[0].spec, &listed[1].spec));
        // A task still as submitted is read from the array's record, as it was submitted.
        assert_eq!(store.job(JobId(7)).unwrap().unwrap(), jobs[2]);
        assert_eq!(store.job(JobId(38)).unwrap().unwrap(), jobs[33]);
        assert_eq!(store.job_state(JobId(8)).unwrap(), Some(JobState::Pending));
        assert_eq!(store.job(JobId(40)).unwrap(), None);
        // One submit event, shown in every task's history.
        let history = store.job_events(&jobs[3]).unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].kind, "submitted");
        assert!(
            history[0].detail.contains("array 5_[0-99:3] of 34 tasks"),
            "{history:?}"
        );
        assert!(store.events(JobId(8)).unwrap().is_empty());
        submitted = jobs;
    }
    let store = reopen(dir.path());
    let rec = store.recover().unwrap();
    assert_eq!(rec.next_job_id, 5 + 34 + 1);
    assert_eq!(rec.active_jobs.len(), 34, "33 tasks and the plain job");
    let tasks: Vec<&Job> = rec
        .active_jobs
        .values()
        .filter(|j| j.array.is_some())
        .collect();
    assert_eq!(tasks.len(), 33);
    assert_eq!(tasks[0].array.unwrap().array_id, JobId(5));
    assert_eq!(tasks[0].spec.array.as_ref().unwrap().count, 34);
    assert_eq!(tasks[2].checkpoint_dir, "/home/alice/.ysched/checkpoints/8");
    for t in &tasks {
        assert!(
            Arc::ptr_eq(&t.spec, &tasks[0].spec),
            "one spec after recovery"
        );
        assert!(
            Arc::ptr_eq(&t.owner, &tasks[0].owner),
            "one owner after recovery"
        );
        assert!(t.spec.script.is_empty() && t.spec.env.is_empty());
    }
    for job in submitted.iter().filter(|j| j.id != JobId(6)) {
        assert_eq!(rec.active_jobs[&job.id], *job, "as submitted");
    }
    let plain = &rec.active_jobs[&JobId(39)];
    assert!(plain.array.is_none() && plain.spec.array.is_none());
    assert_eq!(store.finished_jobs().unwrap().len(), 1);
}

/// Job `id` as task `task` of array `array_id` (a plain job's spec: its own).
fn task_of(id: u64, array_id: u64, task: u32) -> Job {
    let mut job = crate::core::testkit::JobBuilder::new(id).build();
    job.array = Some(ysched_common::ArrayTask {
        array_id: JobId(array_id),
        task,
    });
    job
}

#[test]
fn records_written_before_arrays_existed_read_as_they_were() {
    // A task record that carries its own spec (as any job record does) is taken as it is.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut job = task_of(3, 3, 0);
    Arc::make_mut(&mut job.spec).array = Some(ArraySpec::parse("0", 10).unwrap());
    let mut value = job.clone();
    Arc::make_mut(&mut value.spec).script.clear();
    store
        .jobs
        .insert(3u64.to_be_bytes(), serde_json::to_vec(&value).unwrap())
        .unwrap();
    let read = store.job(JobId(3)).unwrap().unwrap();
    assert_eq!(read.spec.name, "job3");
    // A slim task record without its array's spec is a corrupt store, named as such.
    let mut slim = value.clone();
    slim.spec = Arc::clone(spec_placeholder());
    store
        .jobs
        .insert(4u64.to_be_bytes(), serde_json::to_vec(&slim).unwrap())
        .unwrap();
    let err = store.job(JobId(4)).unwrap_err();
    assert!(err.to_string().contains("whose spec is missing"), "{err}");
}

/// A read that finds a task's record and then, its array having expired meanwhile (record
/// and spec gone in one transaction), not its spec: the task is gone, not an error (a `yq
/// --all` while an array leaves the history failed so). A spec missing under a record still
/// there stays an error.
#[test]
fn a_task_read_while_its_array_expires_is_gone_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // Task 1 of array 4, its record slim (its spec left to the array's).
    let mut job = task_of(5, 4, 1);
    job.spec = Arc::clone(spec_placeholder());
    let key = 5u64.to_be_bytes();
    store
        .jobs
        .insert(key, serde_json::to_vec(&job).unwrap())
        .unwrap();
    // The reader has the record; the spec was never there, or is gone now.
    let read: Job = decode(&key, &store.jobs.get(key).unwrap().unwrap()).unwrap();
    let err = store
        .complete_unless_expired(read.clone(), &mut Shared::default())
        .unwrap_err();
    assert!(err.to_string().contains("whose spec is missing"), "{err}");
    // The expiry takes the record too: the read finds the task gone.
    store.jobs.remove(key).unwrap();
    assert!(store
        .complete_unless_expired(read, &mut Shared::default())
        .unwrap()
        .is_none());
    assert!(store.job(JobId(5)).unwrap().is_none());
}

/// The target: a 10,000-task array submitted in under 100 ms (state machine, one write and
/// its flush). Printed; asserted loosely (debug builds and busy machines are slower).
#[tokio::test]
async fn ten_thousand_tasks_are_one_quick_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    );
    // Warm up sled (first write creates its files).
    let mut warm = spec("0");
    warm.array = None;
    submit(&store, &mut rec, warm).await;
    let (jobs, took) = submit(&store, &mut rec, spec("0-9999")).await;
    assert_eq!(jobs.len(), 10_000);
    assert_eq!(rec.next_job_id(), 10_002);
    let on_disk = store.db.size_on_disk().unwrap_or(0);
    println!(
        "10,000-task array: submitted in {took:?} (state machine + one write + flush), \
         store {on_disk} bytes"
    );
    let began = std::time::Instant::now();
    let recovered = store.recover().unwrap();
    println!(
        "recovered {} jobs in {:?}",
        recovered.active_jobs.len(),
        began.elapsed()
    );
    assert_eq!(recovered.active_jobs.len(), 10_001);
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn the_end_states_dependencies_need_are_rebuilt_from_the_store() {
    use crate::state::dependencies::EndedTargets;
    use ysched_common::{DepClause, DepKind, Dependency};
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let mut rec = Records::new(
            Default::default(),
            Default::default(),
            1,
            Default::default(),
        );
        // Array 1 (tasks 1-3), then array 4 depending on all of array 1's tasks.
        let (targets, _) = submit(&store, &mut rec, spec("0-2")).await;
        let mut dependent = spec("0-1");
        dependent.dependency = Some(Dependency {
            clauses: vec![DepClause {
                kind: DepKind::AfterOk,
                jobs: targets.iter().map(|j| j.id).collect(),
            }],
            text: "afterok:1".into(),
            ..Dependency::default()
        });
        submit(&store, &mut rec, dependent).await;
        // Task 1_0 completed, 1_1 failed; 1_2 still queued.
        let mut b = Batch::default();
        for (job, state) in [
            (&targets[0], JobState::Completed),
            (&targets[1], JobState::Failed),
        ] {
            let mut done = job.clone();
            done.state = state;
            b.put_job(&done);
        }
        store.apply(b).unwrap();
        store.flush().await.unwrap();
    }
    let store = reopen(dir.path());
    let rec = store.recover().unwrap();
    assert_eq!(
        rec.active_jobs.len(),
        3,
        "1_2 and the dependent array's two tasks"
    );
    let dependents: Vec<&Job> = rec.active_jobs.values().filter(|j| j.id.0 >= 4).collect();
    assert!(Arc::ptr_eq(&dependents[0].spec, &dependents[1].spec));
    let ended = EndedTargets::rebuild(&rec.active_jobs, |id| store.job_state(id)).unwrap();
    assert_eq!(
        *ended.ended(),
        BTreeMap::from([
            (JobId(1), JobState::Completed),
            (JobId(2), JobState::Failed)
        ])
    );
    assert!(ended.is_named(JobId(3)));
}

/// The ids of the jobs with a record of their own in `jobs`.
fn own_records(store: &Store) -> Vec<u64> {
    store
        .jobs
        .iter()
        .keys()
        .map(|k| u64::from_be_bytes(k.unwrap().as_ref().try_into().unwrap()))
        .collect()
}

/// Cancels `targets` on `rec` as alice and writes it; returns how long it took.
async fn cancel(
    store: &Store,
    rec: &mut Records,
    targets: &[&str],
    now: i64,
) -> std::time::Duration {
    let began = std::time::Instant::now();
    let caller = ysched_common::Caller::local(owner());
    let targets: Vec<ysched_common::JobTarget> = targets
        .iter()
        .map(|t| ysched_common::JobTarget::parse(t).unwrap())
        .collect();
    let (fx, _) = rec
        .cancel_targets(
            &caller,
            &targets,
            "",
            &|id| store.job(id).map_err(crate::error::ApiError::from),
            now,
        )
        .unwrap();
    store.apply(&fx).unwrap();
    store.flush().await.unwrap();
    rec.commit(fx);
    began.elapsed()
}

#[tokio::test]
async fn tasks_cancelled_while_queued_are_kept_in_their_array_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    );
    let tasks;
    {
        let store = Store::open(dir.path()).unwrap();
        let (submitted, _) = submit(&store, &mut rec, spec("0-39")).await;
        tasks = submitted;
        // Task 1_2 changed once (held): it has a record of its own from then on.
        let mut held = tasks[2].clone();
        held.state = JobState::Held;
        let mut b = Batch::default();
        b.put_job(&held);
        store.apply(b).unwrap();
        rec.insert_job(held);

        // Two cancels: tasks 0-19 at 5,000, then the rest at 6,000.
        cancel(&store, &mut rec, &["1_[0-19]"], 5_000).await;
        cancel(&store, &mut rec, &["1"], 6_000).await;
        assert!(rec.jobs().is_empty());
        // Only the task that had changed before has a record; no task has events of its own.
        assert_eq!(own_records(&store), [3]);
        let kinds = |id| -> Vec<String> {
            let events = store.events(JobId(id)).unwrap();
            events.into_iter().map(|e| e.kind).collect()
        };
        assert_eq!(kinds(1), ["submitted"], "the array's submit only");
        for id in (2..=40).filter(|&id| id != 3) {
            assert!(kinds(id).is_empty(), "job {id}");
        }
    }
    let store = reopen(dir.path());
    assert!(store.recover().unwrap().active_jobs.is_empty());
    for (i, task) in tasks.iter().enumerate() {
        let read = store.job(task.id).unwrap().unwrap();
        let at = if i < 20 { 5_000 } else { 6_000 };
        let mut expected = task.clone();
        expected.state = JobState::Cancelled;
        expected.reason = "cancelled by alice".into();
        expected.end_time = Some(at);
        if i == 2 {
            assert_eq!(read.state, JobState::Cancelled);
            assert_eq!(read.end_time, Some(at));
        } else {
            assert_eq!(read, expected, "task {i}");
        }
        assert_eq!(store.job_state(task.id).unwrap(), Some(JobState::Cancelled));
        let history = store.job_events(&read).unwrap();
        let kinds: Vec<&str> = history.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["submitted", "cancelled"], "task {i}: {history:?}");
        assert_eq!(history[1].time, at);
        assert_eq!(history[1].detail, "by alice while queued");
    }
    let finished = store.finished_jobs().unwrap();
    let ids: Vec<u64> = finished.iter().map(|j| j.id.0).collect();
    assert_eq!(ids, (1..=40).collect::<Vec<_>>());
    assert!(finished.iter().all(|j| j.state == JobState::Cancelled));
    assert!(Arc::ptr_eq(&finished[0].spec, &finished[39].spec));
}

/// Cancelling a queued 10,000-task array is a write of its record, not 20,000 inserts.
/// Printed; asserted loosely (debug builds and busy machines are slower).
#[tokio::test]
async fn cancelling_ten_thousand_queued_tasks_is_one_quick_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    );
    let (jobs, _) = submit(&store, &mut rec, spec("0-9999")).await;
    let took = cancel(&store, &mut rec, &["1"], 9_000).await;
    println!("10,000 queued tasks cancelled in {took:?} (state machine + one write + flush)");
    assert!(rec.jobs().is_empty());
    assert_eq!(store.jobs.len(), 0);
    assert_eq!(store.events.len(), 1, "the array's submit only");
    assert_eq!(
        store.job_state(jobs[9_999].id).unwrap(),
        Some(JobState::Cancelled)
    );
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn a_task_written_earlier_in_the_same_batch_keeps_a_record_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    );
    let (tasks, _) = submit(&store, &mut rec, spec("0-19")).await;
    let mut b = Batch::default();
    let mut held = tasks[1].clone();
    held.state = JobState::Held;
    b.put_job(&held);
    for task in &tasks[..19] {
        let mut cancelled = task.clone();
        cancelled.state = JobState::Cancelled;
        cancelled.end_time = Some(7_000);
        b.put_job(&cancelled);
    }
    // A task that differs from its array's record in more than its end is not compacted.
    let mut other = tasks[19].clone();
    other.state = JobState::Cancelled;
    other.grace_secs = 1;
    b.put_job(&other);
    store.apply(b).unwrap();
    assert_eq!(
        own_records(&store),
        [2, 20],
        "the task held first, and the one that differs"
    );
    for task in &tasks {
        let read = store.job(task.id).unwrap().unwrap();
        assert_eq!(read.state, JobState::Cancelled, "{}", task.id);
    }
    assert_eq!(store.job(JobId(20)).unwrap().unwrap().grace_secs, 1);
    assert_eq!(store.job(JobId(1)).unwrap().unwrap().end_time, Some(7_000));
    assert_eq!(store.finished_jobs().unwrap().len(), 20);
}

#[tokio::test]
async fn tasks_cancelled_one_by_one_are_written_as_any_job() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    );
    submit(&store, &mut rec, spec("0-39")).await;
    for (i, target) in ["1_3", "1_[5-7]", "1_9"].iter().enumerate() {
        cancel(&store, &mut rec, &[target], 1_000 * i as i64).await;
    }
    // Too few ending alike to be worth keeping in the array's record, which stays small.
    assert_eq!(own_records(&store), [4, 6, 7, 8, 10]);
    // And a task taken for the record but written again in the same batch keeps that record.
    let mut b = Batch::default();
    let mut tasks: Vec<Job> = (11..=40)
        .map(|id| Job::clone(&rec.jobs()[&JobId(id)]))
        .collect();
    for task in &mut tasks {
        task.state = JobState::Cancelled;
        b.put_job(task);
    }
    tasks[0].reason = "written again".into();
    b.put_job(&tasks[0]);
    store.apply(b).unwrap();
    assert_eq!(own_records(&store), [4, 6, 7, 8, 10, 11]);
    assert_eq!(
        store.job(JobId(11)).unwrap().unwrap().reason,
        "written again"
    );
    assert_eq!(
        store.job_state(JobId(40)).unwrap(),
        Some(JobState::Cancelled)
    );
}
