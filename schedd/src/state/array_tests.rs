//! Arrays, names of jobs (`12`, `12_7`, `12_[1-3]`) and dependencies as pure events: an
//! array's submit, cancel, hold and release of its tasks, dependencies resolved at submit,
//! the end states kept for them, and `kill_invalid_depend`'s cancel.

use super::dependencies::EndedTargets;
use super::submission::NewJob;
use super::targets::plain_target;
use super::{AgentCommand, Records};
use crate::core::testkit::{alice, bob, JobBuilder, T0};
use crate::error::{ApiError, ApiResult};
use crate::store::Payload;
use std::collections::BTreeMap;
use std::sync::Arc;
use ysched_common::{
    ArraySpec, Caller, DepKind, DependencyRequest, Job, JobId, JobSpec, JobState, JobTarget,
};

const NOW: i64 = T0 + 1_000;

fn none_finished(_: JobId) -> ApiResult<Option<Job>> {
    Ok(None)
}

fn no_state(_: JobId) -> ApiResult<Option<JobState>> {
    Ok(None)
}

fn target(text: &str) -> JobTarget {
    JobTarget::parse(text).unwrap()
}

/// A spec for `--array indices` (held with `hold`).
fn array_spec(indices: &str, hold: bool) -> JobSpec {
    JobSpec {
        name: "sweep".into(),
        tier: "low".into(),
        account: "research".into(),
        workdir: "/home/alice".into(),
        cpus: 1,
        hold,
        array: Some(ArraySpec::parse(indices, 10_001).unwrap()),
        ..JobSpec::default()
    }
}

/// Submits `spec` as alice, commits it and takes its jobs into memory.
fn submit(rec: &mut Records, spec: JobSpec) -> Vec<Job> {
    let dir = |id: JobId| format!("/ckpt/{id}");
    let new = NewJob {
        owner: alice().owner,
        from_host: None,
        spec,
        payload: Payload {
            script: "#!/bin/sh\necho $YSCHED_ARRAY_TASK_ID\n".into(),
            env: Default::default(),
        },
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let fx = rec.submit(new, NOW);
    let jobs = fx.submitted.clone();
    rec.commit(fx);
    rec.insert_jobs(jobs.clone());
    jobs
}

#[test]
fn an_array_is_one_batch_of_jobs_with_consecutive_ids_and_one_payload() {
    let rec = Records::with_jobs(vec![]);
    let dir = |id: JobId| format!("/ckpt/{id}");
    let new = NewJob {
        owner: alice().owner,
        from_host: Some("login1".into()),
        spec: array_spec("0-99:4%16", false),
        payload: Payload {
            script: "s".into(),
            env: Default::default(),
        },
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let fx = rec.submit(new, NOW);
    let jobs = fx.submitted.clone();
    assert_eq!(jobs.len(), 25);
    for (i, job) in jobs.iter().enumerate() {
        assert_eq!(
            job.id,
            JobId(10 + i as u64),
            "consecutive ids from the next one"
        );
        let task = job.array.unwrap();
        assert_eq!((task.array_id, task.task), (JobId(10), 4 * i as u32));
        assert_eq!(job.checkpoint_dir, format!("/ckpt/{}", job.id), "its own");
        assert_eq!(job.state, JobState::Pending);
        assert!(Arc::ptr_eq(&job.spec, &jobs[0].spec), "one shared spec");
        assert!(Arc::ptr_eq(&job.owner, &jobs[0].owner), "one shared owner");
    }
    assert_eq!(jobs[3].display_id(), "10_12");
    let counts = crate::store::Batch::from(&fx).counts();
    assert_eq!(counts.jobs, 0, "one record of all tasks");
    assert_eq!(counts.arrays, 1);
    assert_eq!(
        counts.events, 1,
        "one submitted entry, under the array's id"
    );
    assert_eq!(counts.payloads, 1);
    assert_eq!(
        fx.payloads.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [JobId(10)],
        "under the array's id"
    );
    assert_eq!(counts.array_specs, 1);
    assert_eq!(counts.next_job_id, Some(35));
    assert_eq!(counts.audit, 0);
    assert_eq!(fx.changed.len(), 25);
    assert!(fx.wake);
    let mut rec = rec;
    rec.commit(fx);
    assert_eq!(rec.next_job_id, 35);

    // --hold holds every task.
    let held = submit(&mut rec, array_spec("1-3", true));
    assert_eq!(
        held.iter().map(|j| j.id.0).collect::<Vec<_>>(),
        [35, 36, 37]
    );
    assert!(held
        .iter()
        .all(|j| j.state == JobState::Held && j.reason == "JobHeldUser"));
    assert_eq!(rec.next_job_id, 38);
}

#[test]
fn a_plain_submit_is_still_one_job() {
    let mut rec = Records::with_jobs(vec![]);
    let mut spec = array_spec("0", false);
    spec.array = None;
    let jobs = submit(&mut rec, spec);
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].id, jobs[0].array), (JobId(10), None));
    assert_eq!(rec.next_job_id, 11);
}

/// Records with a plain job 1 and array 10 (tasks 0-4, ids 10-14), and array 15 (tasks 1,
/// 5, 9: ids 15-17).
fn with_arrays() -> Records {
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).build()]);
    submit(&mut rec, array_spec("0-4", false));
    submit(&mut rec, array_spec("1,5,9", false));
    rec
}

#[test]
fn names_resolve_to_jobs() {
    let rec = with_arrays();
    let ids = |text: &str| -> ApiResult<Vec<u64>> {
        Ok(rec
            .resolve(&target(text), &none_finished)?
            .ids
            .iter()
            .map(|j| j.0)
            .collect())
    };
    assert_eq!(ids("1").unwrap(), [1], "a plain job");
    assert_eq!(
        ids("10").unwrap(),
        [10, 11, 12, 13, 14],
        "an array: every task"
    );
    assert_eq!(ids("12").unwrap(), [12], "a task by its own job id");
    assert_eq!(ids("10_3").unwrap(), [13]);
    assert_eq!(ids("10_[1-3]").unwrap(), [11, 12, 13]);
    assert_eq!(
        ids("15_9").unwrap(),
        [17],
        "the place in the sorted task list"
    );
    assert_eq!(ids("15_[9,1]").unwrap(), [15, 17]);
    assert_eq!(
        ids("10_7").unwrap_err(),
        ApiError::NotFound("job 10_7 not found (array 10 has tasks 0-4)".into())
    );
    assert_eq!(
        ids("99").unwrap_err(),
        ApiError::NotFound("invalid job id 99: no such job".into())
    );
    assert_eq!(
        ids("99_1").unwrap_err(),
        ApiError::NotFound("job 99_1 not found".into())
    );
    assert!(
        matches!(ids("1_0").unwrap_err(), ApiError::NotFound(m) if m.contains("job 1 is not an array"))
    );
    assert!(
        matches!(ids("12_0").unwrap_err(), ApiError::NotFound(m) if m.contains("task 10_2 of array 10"))
    );
    // One job wanted: a whole array is refused, naming the syntax for one task.
    let whole = rec.resolve(&target("10"), &none_finished).unwrap();
    assert!(whole.is_whole_array());
    let err = whole.single("requeue").unwrap_err();
    assert!(
        matches!(&err, ApiError::Invalid(m) if m.contains("job 10 is an array of 5 tasks") && m.contains("10_<task>")),
        "{err:?}"
    );
    let one = rec.resolve(&target("10_2"), &none_finished).unwrap();
    assert_eq!(one.single("requeue"), Ok(JobId(12)));
    assert_eq!(
        rec.resolve(&target("1"), &none_finished)
            .unwrap()
            .single("show"),
        Ok(JobId(1))
    );
    // A finished job is found in the store: its array too.
    let mut gone = rec.clone();
    let head = std::sync::Arc::unwrap_or_clone(gone.jobs.remove(&JobId(10)).unwrap());
    let finished = |id: JobId| -> ApiResult<Option<Job>> {
        Ok((id == JobId(10)).then(|| {
            let mut j = head.clone();
            j.state = JobState::Completed;
            j
        }))
    };
    let r = gone.resolve(&target("10"), &finished).unwrap();
    assert_eq!(r.ids.len(), 5);
}

#[test]
fn cancel_of_an_array_a_task_and_a_range() {
    let mut rec = with_arrays();
    // Task 10_1 runs.
    let mut running = Job::clone(&rec.jobs[&JobId(11)]);
    running.state = JobState::Running;
    running.alloc = JobBuilder::new(11).running_on("n1", &[0]).build().alloc;
    rec.jobs.insert(running.id, std::sync::Arc::new(running));

    // One task.
    let (fx, done) = rec
        .cancel_targets(&alice(), &[target("10_3")], "", &none_finished, NOW)
        .unwrap();
    assert_eq!(done, [(JobId(13), "10_3".to_string())]);
    assert_eq!(fx.jobs[0].state, JobState::Cancelled);

    // A range: queued ones end, the running one is stopped; one audit entry.
    let (fx, done) = rec
        .cancel_targets(&alice(), &[target("10_[0-2]")], "", &none_finished, NOW)
        .unwrap();
    let names: Vec<&str> = done.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["10_0", "10_1", "10_2"]);
    assert!(matches!(
        &fx.commands[..],
        [(node, AgentCommand::Stop { job_id: 11, .. })] if node == "n1"
    ));
    let audit = fx.audit.clone();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].job_id, Some(JobId(10)));
    assert_eq!(
        audit[0].detail,
        "3 tasks of array 10 (10_[0-2]): 2 while queued, 1 while running"
    );

    // The whole array, by its id (as `job_ids` or as a target): every unfinished task.
    let (fx, done) = rec
        .cancel_targets(&alice(), &[plain_target(10)], "", &none_finished, NOW)
        .unwrap();
    assert_eq!(done.len(), 5);
    assert_eq!(crate::store::Batch::from(&fx).counts().audit, 1);
    assert_eq!(crate::store::Batch::from(&fx).counts().events, 5);
    let (_, ids) = rec
        .cancel(&alice(), &[10], "", &none_finished, NOW)
        .unwrap();
    assert_eq!(ids, (10..15).map(JobId).collect::<Vec<_>>());
    let mut after = rec.clone();
    after.commit(fx);
    assert_eq!(
        after.jobs.keys().map(|j| j.0).collect::<Vec<_>>(),
        [1, 11, 15, 16, 17],
        "queued tasks gone, the running one stopping"
    );
    // Tasks that finished are passed over (the array's first task is found in the store);
    // an array all finished is refused.
    let head = Job::clone(&rec.jobs[&JobId(10)]);
    let finished = |id: JobId| -> ApiResult<Option<Job>> {
        Ok((id == JobId(10)).then(|| {
            let mut j = head.clone();
            j.state = JobState::Cancelled;
            j
        }))
    };
    let (_, done) = after
        .cancel_targets(&alice(), &[target("10")], "", &finished, NOW)
        .unwrap();
    assert_eq!(done, [(JobId(11), "10_1".to_string())]);
    after.jobs.remove(&JobId(11));
    let err = after
        .cancel_targets(&alice(), &[target("10")], "", &finished, NOW)
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("every task has finished")),
        "{err:?}"
    );
    // Names are checked first: one bad name cancels nothing; others' tasks are refused.
    assert!(matches!(
        rec.cancel_targets(&alice(), &[target("15"), target("10_9")], "", &none_finished, NOW),
        Err(ApiError::NotFound(m)) if m.contains("10_9")
    ));
    assert!(matches!(
        rec.cancel_targets(&bob(), &[target("15_5")], "", &none_finished, NOW),
        Err(ApiError::Denied(_))
    ));
    // A user's jobs: one audit entry per array, one per plain job.
    let (fx, done) = rec
        .cancel_targets(&alice(), &[], "alice", &none_finished, NOW)
        .unwrap();
    assert_eq!(done.len(), 9);
    assert_eq!(crate::store::Batch::from(&fx).counts().audit, 3);
}

#[test]
fn hold_and_release_of_a_range_apply_to_every_task_in_the_right_state() {
    let mut rec = with_arrays();
    let mut running = Job::clone(&rec.jobs[&JobId(12)]);
    running.state = JobState::Running;
    rec.jobs.insert(running.id, std::sync::Arc::new(running));
    let range = rec.resolve(&target("10_[1-3]"), &none_finished).unwrap();
    let fx = rec.hold_targets(&alice(), &range, true, NOW).unwrap();
    let held: Vec<u64> = fx.jobs.iter().map(|j| j.id.0).collect();
    assert_eq!(held, [11, 13], "the running task is passed over");
    assert!(fx.jobs.iter().all(|j| j.state == JobState::Held));
    let audit = fx.audit.clone();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].action, "hold");
    assert_eq!(audit[0].detail, "2 tasks of array 10 (10_[1,3])");
    rec.commit(fx);
    // Holding again is refused, naming why; releasing the whole array releases the held ones.
    let err = rec.hold_targets(&alice(), &range, true, NOW).err().unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("2 are already held")),
        "{err:?}"
    );
    let whole = rec.resolve(&target("10"), &none_finished).unwrap();
    let fx = rec.hold_targets(&alice(), &whole, false, NOW).unwrap();
    let released: Vec<u64> = fx.jobs.iter().map(|j| j.id.0).collect();
    assert_eq!(released, [11, 13]);
    assert!(fx
        .jobs
        .iter()
        .all(|j| j.state == JobState::Pending && j.queued_at == Some(NOW)));
    // None in either state: refused, naming it.
    let one = rec.resolve(&target("10_2"), &none_finished).unwrap();
    let err = rec.hold_targets(&alice(), &one, true, NOW).err().unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("no task of 10_2 is PENDING")),
        "{err:?}"
    );
    assert!(matches!(
        rec.hold_targets(&bob(), &whole, true, NOW),
        Err(ApiError::Denied(_))
    ));
    // A plain job: as before.
    let plain = rec.resolve(&target("1"), &none_finished).unwrap();
    let fx = rec.hold_targets(&alice(), &plain, true, NOW).unwrap();
    assert_eq!(fx.jobs[0].state, JobState::Held);
}

#[test]
fn a_user_releasing_an_array_an_administrator_holds_a_task_of_releases_nothing() {
    let mut rec = with_arrays();
    let whole = rec.resolve(&target("10"), &none_finished).unwrap();
    let fx = rec.hold_targets(&alice(), &whole, true, NOW).unwrap();
    rec.commit(fx);
    let task = rec.resolve(&target("10_3"), &none_finished).unwrap();
    let fx = rec
        .hold_targets(&crate::core::testkit::root(), &task, true, NOW)
        .unwrap();
    assert_eq!(fx.jobs[0].held_by, ysched_common::HeldBy::Admin);
    rec.commit(fx);
    // Four tasks are alice's to release, one is not: the whole request is refused.
    let err = rec
        .hold_targets(&alice(), &whole, false, NOW)
        .err()
        .unwrap();
    assert_eq!(
        err,
        ApiError::Denied(
            "job 10_3 is held by an administrator: only an administrator may release it".into()
        )
    );
    // Through update too.
    let update = super::update::JobUpdate {
        hold: Some(false),
        ..Default::default()
    };
    let err = rec
        .update_job(&alice(), &whole, &update, &none_finished, NOW)
        .err()
        .unwrap();
    assert!(matches!(err, ApiError::Denied(_)), "{err:?}");
    // Holding the array again leaves the administrator's hold as it is.
    let err = rec.hold_targets(&alice(), &whole, true, NOW).err().unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("5 are already held")),
        "{err:?}"
    );
    // The other tasks alone are hers to release.
    let others = rec.resolve(&target("10_[0-2]"), &none_finished).unwrap();
    let fx = rec.hold_targets(&alice(), &others, false, NOW).unwrap();
    assert_eq!(fx.jobs.len(), 3);
}

#[test]
fn dependencies_resolve_at_submit() {
    let rec = with_arrays();
    let request = |text: &str| DependencyRequest::parse(text).unwrap();
    let (dep, states) = rec
        .resolve_dependency(
            &request("afterok:10:1,afterany:15_5"),
            &none_finished,
            &no_state,
        )
        .unwrap();
    assert_eq!(dep.clauses.len(), 2);
    assert_eq!(dep.clauses[0].kind, DepKind::AfterOk);
    assert_eq!(
        dep.clauses[0].jobs.iter().map(|j| j.0).collect::<Vec<_>>(),
        [1, 10, 11, 12, 13, 14],
        "an array's id: all its tasks"
    );
    assert_eq!(dep.clauses[1].jobs, [JobId(16)]);
    assert_eq!(dep.text, "afterok:10:1,afterany:15_5");
    assert!(states.iter().all(|(_, s)| s.is_none()), "all live");
    assert_eq!(states.len(), 7);
    let err = rec
        .resolve_dependency(&request("afterok:999"), &none_finished, &no_state)
        .unwrap_err();
    assert_eq!(
        err,
        ApiError::Invalid("--dependency 'afterok:999': dependency on unknown job 999".into())
    );
    let err = rec
        .resolve_dependency(&request("afterok:10_8"), &none_finished, &no_state)
        .unwrap_err();
    assert!(
        matches!(&err, ApiError::Invalid(m) if m.contains("unknown job 10_8 (array 10 has tasks 0-4)")),
        "{err:?}"
    );
    // A finished target is known, with how it ended.
    let finished = |id: JobId| -> ApiResult<Option<Job>> {
        Ok((id == JobId(7)).then(|| {
            let mut j = JobBuilder::new(7).user("bob").build();
            j.state = JobState::Failed;
            j
        }))
    };
    let state_of = |id: JobId| -> ApiResult<Option<JobState>> {
        Ok((id == JobId(7)).then_some(JobState::Failed))
    };
    let (dep, states) = rec
        .resolve_dependency(&request("afternotok:7"), &finished, &state_of)
        .unwrap();
    assert_eq!(dep.clauses[0].jobs, [JobId(7)]);
    assert_eq!(states, [(JobId(7), Some(JobState::Failed))]);
    let (dep, states) = rec
        .resolve_dependency(&request("singleton"), &none_finished, &no_state)
        .unwrap();
    assert!(dep.singleton && dep.clauses.is_empty() && states.is_empty());
}

/// Submits a job depending (afterok) on `on`, as the shell does: resolved, observed, and
/// settled once in memory.
fn submit_dependent(
    rec: &mut Records,
    deps: &mut EndedTargets,
    on: &str,
    finished: &dyn Fn(JobId) -> ApiResult<Option<Job>>,
    state_of: &dyn Fn(JobId) -> ApiResult<Option<JobState>>,
) -> Vec<Job> {
    let request = DependencyRequest::parse(&format!("afterok:{on}")).unwrap();
    let (dep, states) = rec
        .resolve_dependency(&request, finished, state_of)
        .unwrap();
    let mut spec = array_spec("0-2", false);
    spec.dependency = Some(dep);
    let dir = |id: JobId| format!("/ckpt/{id}");
    let new = NewJob {
        owner: alice().owner,
        from_host: None,
        spec,
        payload: Payload::default(),
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let mut fx = rec.submit(new, NOW);
    let jobs = fx.submitted.clone();
    fx.dependency_targets = states;
    deps.observe(&fx, Some(jobs[0].id));
    rec.commit(fx);
    rec.insert_jobs(jobs.clone());
    deps.settled(jobs[0].id);
    jobs
}

/// Ends `id` in `state` as an event would, telling `deps` first.
fn end(rec: &mut Records, deps: &mut EndedTargets, id: u64, state: JobState) {
    let mut job = Job::clone(&rec.jobs[&JobId(id)]);
    job.state = state;
    let mut fx = super::Effects::default();
    fx.put_job(job);
    deps.observe(&fx, None);
    rec.commit(fx);
}

#[test]
fn the_end_states_of_named_jobs_are_kept_while_named() {
    let mut rec = with_arrays();
    let mut deps = EndedTargets::default();
    // Job 1 ended before: its state comes with the submit.
    let head = std::sync::Arc::unwrap_or_clone(rec.jobs.remove(&JobId(1)).unwrap());
    let finished = move |id: JobId| -> ApiResult<Option<Job>> {
        Ok((id == JobId(1)).then(|| {
            let mut j = head.clone();
            j.state = JobState::Completed;
            j
        }))
    };
    let state_of = |id: JobId| -> ApiResult<Option<JobState>> {
        Ok((id == JobId(1)).then_some(JobState::Completed))
    };
    let dependents = submit_dependent(&mut rec, &mut deps, "1:10_2", &finished, &state_of);
    assert_eq!(dependents.len(), 3);
    assert_eq!(
        *deps.ended(),
        BTreeMap::from([(JobId(1), JobState::Completed)])
    );
    // A named job that ends is recorded; one nobody names is not.
    end(&mut rec, &mut deps, 12, JobState::Failed);
    end(&mut rec, &mut deps, 13, JobState::Completed);
    assert_eq!(
        *deps.ended(),
        BTreeMap::from([
            (JobId(1), JobState::Completed),
            (JobId(12), JobState::Failed)
        ])
    );
    assert!(!deps.garbage_due());
    // A pass holds the map: later changes copy it, the pass's stays as it was.
    let held_by_pass = deps.ended();
    // The dependents end (a 3-task array sharing one spec): collected, nothing is named.
    for id in [18, 19, 20] {
        end(&mut rec, &mut deps, id, JobState::Cancelled);
    }
    assert!(deps.garbage_due());
    deps.collect_garbage(&rec.jobs);
    assert!(deps.is_empty() && !deps.garbage_due());
    assert!(!deps.is_named(JobId(1)));
    assert_eq!(held_by_pass.len(), 2);
    // A job ending after the collection is not recorded any more.
    end(&mut rec, &mut deps, 14, JobState::Failed);
    assert!(deps.is_empty());
}

#[test]
fn a_submit_in_flight_keeps_its_targets_through_a_collection() {
    let mut rec = with_arrays();
    let mut deps = EndedTargets::default();
    let request = DependencyRequest::parse("afterok:1").unwrap();
    let (dep, states) = rec
        .resolve_dependency(&request, &none_finished, &no_state)
        .unwrap();
    let mut spec = array_spec("0", false);
    spec.array = None;
    spec.dependency = Some(dep);
    let dir = |id: JobId| format!("/ckpt/{id}");
    let new = NewJob {
        owner: alice().owner,
        from_host: None,
        spec,
        payload: Payload::default(),
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let mut fx = rec.submit(new, NOW);
    let jobs = fx.submitted.clone();
    fx.dependency_targets = states;
    deps.observe(&fx, Some(jobs[0].id));
    rec.commit(fx);
    // Written, not yet in memory (the flush is under way): a collection keeps job 1 named.
    deps.collect_garbage(&rec.jobs);
    end(&mut rec, &mut deps, 1, JobState::Failed);
    assert_eq!(deps.ended().get(&JobId(1)), Some(&JobState::Failed));
    rec.insert_jobs(jobs.clone());
    deps.settled(jobs[0].id);
    deps.collect_garbage(&rec.jobs);
    assert_eq!(
        deps.ended().get(&JobId(1)),
        Some(&JobState::Failed),
        "still named"
    );
}

#[test]
fn the_end_states_are_rebuilt_at_start() {
    let mut rec = with_arrays();
    let mut deps = EndedTargets::default();
    submit_dependent(&mut rec, &mut deps, "10", &none_finished, &no_state);
    end(&mut rec, &mut deps, 10, JobState::Completed);
    end(&mut rec, &mut deps, 11, JobState::Failed);
    let store: BTreeMap<JobId, JobState> = [
        (JobId(10), JobState::Completed),
        (JobId(11), JobState::Failed),
    ]
    .into();
    let rebuilt =
        EndedTargets::rebuild(&rec.jobs, |id| Ok::<_, ApiError>(store.get(&id).copied())).unwrap();
    assert_eq!(*rebuilt.ended(), *deps.ended());
    assert_eq!(rebuilt.len(), 2);
    assert!(rebuilt.is_named(JobId(14)) && !rebuilt.is_named(JobId(15)));
}

#[test]
fn kill_invalid_depend_cancels_pending_jobs_as_schedd() {
    let mut rec = with_arrays();
    let mut deps = EndedTargets::default();
    let dependents = submit_dependent(&mut rec, &mut deps, "1", &none_finished, &no_state);
    let mut plain = JobBuilder::new(30).build();
    Arc::make_mut(&mut plain.spec).dependency = dependents[0].spec.dependency.clone();
    rec.jobs.insert(plain.id, std::sync::Arc::new(plain));
    let held = dependents[2].id;
    Arc::make_mut(rec.jobs.get_mut(&held).unwrap()).state = JobState::Held;
    // Job 1 fails: afterok can never be met.
    end(&mut rec, &mut deps, 1, JobState::Failed);
    let ids: Vec<JobId> = dependents
        .iter()
        .map(|j| j.id)
        .chain([JobId(30), JobId(10)])
        .collect();
    let fx = rec.cancel_never_satisfied(&ids, NOW);
    let cancelled: Vec<u64> = fx.jobs.iter().map(|j| j.id.0).collect();
    assert_eq!(
        cancelled,
        [18, 19, 30],
        "pending jobs with a dependency: not the held one, not one without"
    );
    assert!(fx.jobs.iter().all(|j| j.state == JobState::Cancelled
        && j.reason == "DependencyNeverSatisfied"
        && j.end_time == Some(NOW)));
    let audit = fx.audit.clone();
    assert_eq!(
        audit.len(),
        2,
        "one per plain job, one per array: {audit:?}"
    );
    assert!(audit
        .iter()
        .all(|a| a.user == "schedd" && a.action == "cancel"));
    assert!(audit.iter().any(
        |a| a.job_id == Some(JobId(18)) && a.detail.contains("2 tasks of array 18 (18_[0-1])")
    ));
    assert!(fx.wake);
    rec.commit(fx);
    assert!(!rec.jobs.contains_key(&JobId(18)));
    assert_eq!(rec.jobs[&held].state, JobState::Held);
    // Nothing to do: no effects.
    let fx = rec.cancel_never_satisfied(&[JobId(10)], NOW);
    assert!(fx.writes_nothing() && !fx.wake);
}

#[test]
fn array_tasks_are_launched_with_the_arrays_payload() {
    use crate::core::{Placement, Plan};
    let rec = with_arrays();
    let asked = std::cell::RefCell::new(Vec::new());
    let payload = |id: JobId| {
        asked.borrow_mut().push(id);
        Some(Arc::new(Payload::default()))
    };
    let alloc = |gpu: u32| JobBuilder::new(0).running_on("n1", &[gpu]).build().alloc;
    let plan = Plan {
        placements: vec![
            Placement {
                job: JobId(11),
                alloc: alloc(0),
            },
            Placement {
                job: JobId(13),
                alloc: alloc(1),
            },
            Placement {
                job: JobId(1),
                alloc: alloc(2),
            },
        ],
        ..Plan::default()
    };
    let fx = rec.apply_plan(&plan, &payload, NOW);
    assert_eq!(fx.commands.len(), 3);
    assert_eq!(
        *asked.borrow(),
        [JobId(10), JobId(1)],
        "once per array, under its id"
    );
}

#[test]
fn huge_ranges_cost_what_the_array_has() {
    let rec = with_arrays();
    let started = std::time::Instant::now();
    // `yq -j 1_[0-4294967294]`: the first task the array lacks, found without expanding.
    assert_eq!(
        rec.resolve(&target("10_[0-4294967294]"), &none_finished)
            .unwrap_err(),
        ApiError::NotFound("job 10_5 not found (array 10 has tasks 0-4)".into())
    );
    assert_eq!(
        rec.resolve(&target("15_[0-4294967294:4]"), &none_finished)
            .unwrap_err(),
        ApiError::NotFound("job 15_0 not found (array 15 has tasks 1,5,9)".into())
    );
    assert_eq!(
        rec.resolve(&target("15_[1-4294967293:4]"), &none_finished)
            .unwrap_err(),
        ApiError::NotFound("job 15_13 not found (array 15 has tasks 1,5,9)".into())
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Overlapping ranges name each task once, in order.
    let ids: Vec<u64> = rec
        .resolve(&target("10_[0-4,1-3,2,0-4:2]"), &none_finished)
        .unwrap()
        .ids
        .iter()
        .map(|j| j.0)
        .collect();
    assert_eq!(ids, [10, 11, 12, 13, 14]);
}

#[test]
fn a_request_naming_one_array_many_times_resolves_it_once() {
    let mut rec = Records::with_jobs(vec![]);
    submit(&mut rec, array_spec("0-9999", true));
    // `yq -j 10_[0-9999],10_[0-9999],…`: 1,000 names of one array are one name.
    let names = vec![target("10_[0-9999]"); 1000];
    let started = std::time::Instant::now();
    let resolved = rec.resolve_all(&names, &none_finished).unwrap();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].ids.len(), 10_000);
    // Shifted ranges overlap: still each task once.
    let shifted: Vec<JobTarget> = (0..1000)
        .map(|i| target(&format!("10_[{i}-9999,0-{i}]")))
        .collect();
    let resolved = rec.resolve_all(&shifted, &none_finished).unwrap();
    assert_eq!(resolved[0].ids.len(), 10_000);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_request_names_at_most_its_limit_of_jobs() {
    let mut rec = Records::with_jobs(vec![]);
    submit(&mut rec, array_spec("0-99", true));
    submit(&mut rec, array_spec("0-99", true));
    rec.limits.jobs_named = 150;
    assert!(rec.resolve_all(&[target("10")], &none_finished).is_ok());
    let err = rec
        .resolve_all(&[target("10"), target("110")], &none_finished)
        .unwrap_err();
    assert_eq!(
        err,
        ApiError::Invalid(
            "jobs one request names (an array counts its tasks): 200; the limit is 150 \
             (fixed, or scheduler.max_array_size if larger)"
                .into()
        )
    );
    let refused = rec.cancel_targets(
        &alice(),
        &[target("10"), target("110")],
        "",
        &none_finished,
        NOW,
    );
    assert!(matches!(refused, Err(ApiError::Invalid(_))));
    // A dependency stands for at most its own limit of jobs.
    rec.limits.dependency_jobs = 100;
    let request = DependencyRequest::parse("afterok:10").unwrap();
    assert!(rec
        .resolve_dependency(&request, &none_finished, &no_state)
        .is_ok());
    let request = DependencyRequest::parse("afterok:10:110_5").unwrap();
    let err = rec
        .resolve_dependency(&request, &none_finished, &no_state)
        .unwrap_err();
    assert!(
        matches!(&err, ApiError::Invalid(m) if m.ends_with("jobs a --dependency stands for (an array counts its tasks): 101; the limit is 100 (scheduler.max_array_size)")),
        "{err:?}"
    );
}

#[test]
fn active_jobs_per_user_are_limited_and_counted_through_every_event() {
    let mut rec = Records::with_jobs(vec![]);
    rec.limits.jobs_per_user = 30;
    rec.limits
        .jobs_per_user_in_tier
        .insert("low".to_string(), 25);
    let check =
        |rec: &Records, who: &Caller, tier: &str, n: u64| rec.check_jobs_per_user(who, tier, n);
    assert!(check(&rec, &alice(), "low", 25).is_ok());
    assert_eq!(
        check(&rec, &alice(), "low", 26).unwrap_err(),
        ApiError::Invalid(
            "user alice has 0 active jobs in tier 'low'; this array of 26 would exceed \
             tiers.low.max_jobs_per_user = 25"
                .into()
        )
    );
    submit(&mut rec, array_spec("0-19", true));
    assert_eq!(rec.active_jobs_of(1000).total, 20);
    assert_eq!(
        check(&rec, &alice(), "medium", 11).unwrap_err(),
        ApiError::Invalid(
            "user alice has 20 active jobs; this array of 11 would exceed \
             scheduler.max_jobs_per_user = 30"
                .into()
        )
    );
    assert!(check(&rec, &alice(), "medium", 10).is_ok());
    assert!(check(&rec, &bob(), "low", 25).is_ok(), "per user");
    let root = crate::core::testkit::root();
    assert!(
        check(&rec, &root, "low", 1_000).is_ok(),
        "administrators are not limited"
    );
    // Jobs leave the count when they end: a cancel of five tasks.
    let (fx, _) = rec
        .cancel_targets(&alice(), &[target("10_[0-4]")], "", &none_finished, NOW)
        .unwrap();
    rec.commit(fx);
    assert_eq!(rec.active_jobs_of(1000).total, 15);
    assert_eq!(rec.kept_active_counts(), &rec.recount_active());
    // A submit not yet durable counts already, and is counted out if it fails.
    let fx = rec.submit(
        NewJob {
            owner: alice().owner,
            from_host: None,
            spec: array_spec("0-9", true),
            payload: Payload::default(),
            grace_secs: 30,
            tier_value: 100,
            checkpoint_dir: &|id: JobId| format!("/ckpt/{id}"),
        },
        NOW,
    );
    let jobs = fx.submitted.clone();
    rec.commit(fx);
    rec.reserve_active(&jobs);
    assert_eq!(rec.active_jobs_of(1000).total, 25);
    assert!(check(&rec, &alice(), "low", 1).is_err(), "the tier is full");
    rec.release_reserved(&jobs);
    assert_eq!(rec.active_jobs_of(1000).total, 15);
    rec.reserve_active(&jobs);
    rec.insert_reserved_jobs(jobs);
    assert_eq!(rec.active_jobs_of(1000).total, 25);
    assert_eq!(rec.kept_active_counts(), &rec.recount_active());
}
