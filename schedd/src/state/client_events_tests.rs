//! Cancel, hold and drain as pure events: what they change, and that a refusal changes nothing.

use super::{AgentCommand, Records};
use crate::core::testkit::{alice, bob, root, JobBuilder, T0};
use crate::error::{ApiError, ApiResult};
use ysched_common::{Caller, Job, JobId, JobState, StopReason};

const NOW: i64 = T0 + 1_000;

fn none_finished(_: JobId) -> ApiResult<Option<Job>> {
    Ok(None)
}

#[test]
fn cancel_ends_queued_jobs_and_stops_running_ones_with_their_grace() {
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).build(),
        JobBuilder::new(2).running_on("n1", &[0]).grace(45).build(),
    ]);
    let (fx, done) = rec
        .cancel(&alice(), &[1, 2], "", &none_finished, NOW)
        .unwrap();
    assert_eq!(done, [JobId(1), JobId(2)]);
    assert_eq!(fx.changed, [JobId(1), JobId(2)]);
    assert!(fx.wake);
    assert_eq!(fx.jobs[0].state, JobState::Cancelled);
    assert_eq!(fx.jobs[0].end_time, Some(NOW));
    let running = &fx.jobs[1];
    assert_eq!(
        running.state,
        JobState::Running,
        "ends when its agent reports it gone"
    );
    let stop = running.stop.as_ref().unwrap();
    assert!(matches!(&stop.reason, StopReason::Cancel { by } if by == "alice"));
    assert_eq!(stop.grace_secs, 45);
    assert!(matches!(
        &fx.commands[..],
        [(node, AgentCommand::Stop { job_id: 2, grace_secs: 45, .. })] if node == "n1"
    ));
    // Committed: the queued job leaves memory, the running one stays until its end.
    let mut rec = rec;
    let committed = rec.commit(fx);
    assert_eq!(committed.commands.len(), 1);
    assert!(!rec.jobs.contains_key(&JobId(1)));
    assert!(rec.jobs[&JobId(2)].stop.is_some());
    // A second cancel of the running job is no new stop.
    let (fx, done) = rec.cancel(&alice(), &[2], "", &none_finished, NOW).unwrap();
    assert_eq!(done, [JobId(2)]);
    assert!(fx.commands.is_empty() && fx.jobs.is_empty());
}

#[test]
fn a_refused_cancel_names_the_problem_and_has_no_effects() {
    let rec = Records::with_jobs(vec![JobBuilder::new(1).build(), JobBuilder::new(2).build()]);
    let err = rec
        .cancel(&bob(), &[1], "", &none_finished, NOW)
        .err()
        .unwrap();
    assert!(matches!(err, ApiError::Denied(m) if m.contains("belongs to alice")));
    // One unknown id among good ones cancels nothing.
    let err = rec
        .cancel(&alice(), &[1, 77], "", &none_finished, NOW)
        .err()
        .unwrap();
    assert_eq!(
        err,
        ApiError::NotFound("invalid job id 77: no such job".into())
    );
    let finished = |id: JobId| -> ApiResult<Option<Job>> {
        let mut j = JobBuilder::new(id.0).build();
        j.state = JobState::Completed;
        Ok(Some(j))
    };
    let err = rec
        .cancel(&alice(), &[5], "", &finished, NOW)
        .err()
        .unwrap();
    assert!(matches!(err, ApiError::Conflict(m) if m.contains("already finished")));
    assert!(rec
        .cancel(&bob(), &[], "alice", &none_finished, NOW)
        .is_err());
    // Root may cancel by user.
    let (_, done) = rec
        .cancel(&root(), &[], "alice", &none_finished, NOW)
        .unwrap();
    assert_eq!(done, [JobId(1), JobId(2)]);
}

#[test]
fn hold_and_release_move_between_pending_and_held_only() {
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).build(),
        JobBuilder::new(2).running_on("n1", &[0]).build(),
    ]);
    let fx = rec.hold(&alice(), JobId(1), true, NOW).unwrap();
    assert_eq!(fx.jobs[0].state, JobState::Held);
    let mut held = rec.clone();
    held.commit(fx);
    // Holding a held job again, or releasing a pending one, is an error naming it.
    assert_eq!(
        held.hold(&alice(), JobId(1), true, NOW).err(),
        Some(ApiError::Conflict("job 1 is already held".into()))
    );
    assert_eq!(
        rec.hold(&alice(), JobId(1), false, NOW).err(),
        Some(ApiError::Conflict("job 1 is not held".into()))
    );
    let fx = held.hold(&alice(), JobId(1), false, NOW).unwrap();
    assert_eq!(fx.jobs[0].state, JobState::Pending);
    let err = rec.hold(&alice(), JobId(2), true, NOW).err().unwrap();
    assert!(matches!(err, ApiError::Conflict(m) if m.contains("only PENDING jobs")));
    assert!(matches!(
        rec.hold(&bob(), JobId(1), true, NOW),
        Err(ApiError::Denied(_))
    ));
}

#[test]
fn drain_is_for_root_with_a_printable_reason() {
    let rec = Records::with_jobs(vec![]);
    let fx = rec
        .drain(&root(), "n1", Some("bad fan".into()), NOW)
        .unwrap();
    assert_eq!(fx.nodes[0].drain_reason.as_deref(), Some("bad fan"));
    assert!(matches!(
        rec.drain(&alice(), "n1", Some("x".into()), NOW),
        Err(ApiError::Denied(_))
    ));
    assert!(matches!(
        rec.drain(&root(), "n1", Some("x\x1b[2J".into()), NOW),
        Err(ApiError::Invalid(m)) if m.contains("control character")
    ));
    assert!(matches!(
        rec.drain(&root(), "n9", None, NOW),
        Err(ApiError::NotFound(_))
    ));
}

#[test]
fn requeue_stops_a_running_job_with_its_grace_and_records_who_asked() {
    let rec = Records::with_jobs(vec![JobBuilder::new(1)
        .running_on("n1", &[0])
        .grace(45)
        .build()]);
    let fx = rec
        .requeue(&alice(), JobId(1), &none_finished, NOW)
        .unwrap();
    assert_eq!(fx.changed, [JobId(1)]);
    let job = &fx.jobs[0];
    assert_eq!(
        job.state,
        JobState::Running,
        "requeued when its agent reports it gone"
    );
    let stop = job.stop.as_ref().unwrap();
    assert!(matches!(&stop.reason, StopReason::Requeue { by } if by == "alice"));
    assert_eq!((stop.grace_secs, stop.at), (45, NOW));
    assert_eq!(job.reason, "requeueing (by alice)");
    assert!(matches!(
        &fx.commands[..],
        [(node, AgentCommand::Stop { job_id: 1, grace_secs: 45, reason })]
            if node == "n1" && reason == "requeue"
    ));
    assert!(
        !fx.writes_nothing(),
        "the job, its history and the audit entry"
    );
    // Root may requeue anyone's job; asking again while it stops does nothing.
    assert!(rec.requeue(&root(), JobId(1), &none_finished, NOW).is_ok());
    let mut rec = rec;
    rec.commit(fx);
    let again = rec
        .requeue(&alice(), JobId(1), &none_finished, NOW)
        .unwrap();
    assert!(again.writes_nothing() && again.jobs.is_empty() && again.commands.is_empty());
}

#[test]
fn a_refused_requeue_names_the_problem_and_has_no_effects() {
    let mut no_requeue = JobBuilder::new(4).running_on("n2", &[0]).build();
    std::sync::Arc::make_mut(&mut no_requeue.spec).no_requeue = true;
    let mut cancelling = JobBuilder::new(5).running_on("n2", &[1]).build();
    cancelling.stop = Some(Box::new(ysched_common::StopRequest {
        reason: StopReason::Cancel { by: "alice".into() },
        at: T0,
        grace_secs: 30,
    }));
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).build(),
        JobBuilder::new(2).held().build(),
        JobBuilder::new(3)
            .running_on("n1", &[0])
            .preempted_by(9)
            .build(),
        no_requeue,
        cancelling,
        JobBuilder::new(6).running_on("n1", &[1]).build(),
    ]);
    let refused = |who: &Caller, id: u64| {
        rec.requeue(who, JobId(id), &none_finished, NOW)
            .err()
            .expect("refused")
    };
    assert_eq!(
        refused(&alice(), 1),
        ApiError::Conflict("job 1 is PENDING: only a RUNNING job can be requeued".into())
    );
    assert_eq!(
        refused(&alice(), 2),
        ApiError::Conflict("job 2 is HELD: only a RUNNING job can be requeued".into())
    );
    assert!(
        matches!(refused(&alice(), 3), ApiError::Conflict(m) if m.contains("being preempted (by job 9)"))
    );
    // As with sbatch --no-requeue: never, not even by root.
    assert_eq!(
        refused(&root(), 4),
        ApiError::Conflict("job 4 was submitted with --no-requeue: it is never requeued".into())
    );
    assert!(matches!(refused(&alice(), 5), ApiError::Conflict(m) if m.contains("being cancelled")));
    assert!(matches!(refused(&bob(), 6), ApiError::Denied(m) if m.contains("belongs to alice")));
    assert_eq!(
        refused(&alice(), 77),
        ApiError::NotFound("invalid job id 77: no such job".into())
    );
    let finished = |id: JobId| -> ApiResult<Option<Job>> {
        let mut j = JobBuilder::new(id.0).build();
        j.state = JobState::OutOfMemory;
        Ok(Some(j))
    };
    let err = rec
        .requeue(&alice(), JobId(8), &finished, NOW)
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("already finished (OUT_OF_MEMORY)")),
        "{err:?}"
    );
}

#[test]
fn jobs_whose_run_ended_badly_stay_listed_for_min_job_age() {
    use super::{MAX_RECENTLY_ENDED, MIN_JOB_AGE_MS};
    let ended = |id: u64, state: JobState, started: bool, at: i64| {
        let mut job = JobBuilder::new(id).build();
        job.state = state;
        job.end_time = Some(at);
        job.start_time = started.then_some(at - 1_000);
        job
    };
    let mut rec = Records::with_jobs(vec![]);
    rec.commit(super::Effects {
        jobs: vec![
            ended(1, JobState::Failed, true, NOW),
            ended(2, JobState::Completed, true, NOW),
            ended(3, JobState::Cancelled, false, NOW),
            ended(4, JobState::Cancelled, true, NOW),
            ended(5, JobState::Timeout, true, NOW),
        ],
        ..super::Effects::default()
    });
    let ids = |rec: &Records, now: i64| -> Vec<u64> {
        rec.recently_ended(now).iter().map(|j| j.id.0).collect()
    };
    // Not a completed job, nor one cancelled while queued.
    assert_eq!(ids(&rec, NOW), [1, 4, 5]);
    assert_eq!(ids(&rec, NOW + MIN_JOB_AGE_MS), [1, 4, 5]);
    assert!(ids(&rec, NOW + MIN_JOB_AGE_MS + 1).is_empty());
    // Bounded: the oldest go first.
    rec.commit(super::Effects {
        jobs: (0..MAX_RECENTLY_ENDED as u64 + 5)
            .map(|i| ended(100 + i, JobState::Failed, true, NOW + 1))
            .collect(),
        ..super::Effects::default()
    });
    let kept = ids(&rec, NOW + 1);
    assert_eq!(kept.len(), MAX_RECENTLY_ENDED);
    assert_eq!(kept[0], 105);
}
