//! `yctl update` as a pure event: what it changes of a queued job or an array's queued
//! tasks, what it refuses (and that a refusal has no effects), and dependency cycles.

use super::targets::Resolved;
use super::update::{JobUpdate, TierChange};
use super::{JobEventKind, Records};
use crate::core::testkit::{alice, bob, root, JobBuilder, T0};
use crate::error::{ApiError, ApiResult};
use std::sync::Arc;
use ysched_common::{DepKind, DependencyRequest, Job, JobId, JobState, JobTarget};

const NOW: i64 = T0 + 1_000;

fn none_finished(_: JobId) -> ApiResult<Option<Job>> {
    Ok(None)
}

fn named(rec: &Records, text: &str) -> Resolved {
    rec.resolve(&JobTarget::parse(text).unwrap(), &none_finished)
        .unwrap()
}

fn high() -> TierChange {
    TierChange {
        name: "high".into(),
        value: 10_000,
        max_gpus_per_account: 0,
        max_gpus_per_user: 0,
    }
}

/// `afterok`-style dependency `text` resolved among `rec`'s jobs.
fn dependency(rec: &Records, text: &str) -> JobUpdate {
    let request = DependencyRequest::parse(text).unwrap();
    let resolved = rec
        .resolve_dependency(&request, &none_finished, &|_| Ok(None))
        .unwrap();
    JobUpdate {
        dependency: Some(Some(resolved)),
        ..JobUpdate::default()
    }
}

#[test]
fn a_pending_job_changes_with_history_audit_and_a_pass() {
    let rec = Records::with_jobs(vec![JobBuilder::new(1).time_limit(7200).build()]);
    let update = JobUpdate {
        tier: Some(high()),
        time_limit_secs: Some(Some(3600)),
        name: Some("renamed".into()),
        ..JobUpdate::default()
    };
    let (fx, changed) = rec
        .update_job(&alice(), &named(&rec, "1"), &update, &none_finished, NOW)
        .unwrap();
    assert_eq!(
        changed,
        [
            "tier high (was low)",
            "time limit 1:00:00 (was 2:00:00)",
            "name renamed (was job1)"
        ]
    );
    assert!(fx.wake, "a scheduling pass follows");
    let job = &fx.jobs[0];
    assert_eq!(job.spec.tier, "high");
    assert_eq!(job.tier_value, 10_000);
    assert_eq!(job.spec.time_limit_secs, Some(3600));
    assert_eq!(job.spec.name, "renamed");
    assert_eq!(fx.events.len(), 1);
    assert_eq!(fx.events[0].kind, JobEventKind::Updated);
    assert_eq!(
        fx.events[0].detail,
        "by alice: tier high (was low), time limit 1:00:00 (was 2:00:00), name renamed (was job1)"
    );
    assert_eq!(fx.audit.len(), 1);
    assert_eq!(fx.audit[0].action, "update");
    // Committed: the per-tier counts follow the job.
    let mut rec = rec;
    rec.commit(fx);
    assert_eq!(rec.kept_active_counts(), &rec.recount_active());
    assert_eq!(rec.active_jobs_of(1000).per_tier.get("high"), Some(&1));
    // Nothing left to change: no effects, nothing changed.
    let (fx, changed) = rec
        .update_job(&alice(), &named(&rec, "1"), &update, &none_finished, NOW)
        .unwrap();
    assert!(changed.is_empty() && fx.writes_nothing());
}

#[test]
fn only_a_pending_job_of_ones_own_and_a_limit_only_lowered() {
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).time_limit(3600).build(),
        JobBuilder::new(2).running_on("n1", &[0]).build(),
        JobBuilder::new(3).build(),
    ]);
    let raise = JobUpdate {
        time_limit_secs: Some(Some(7200)),
        ..JobUpdate::default()
    };
    let err = rec
        .update_job(&alice(), &named(&rec, "1"), &raise, &none_finished, NOW)
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Denied(m) if m.contains("job 1's time limit is 1:00:00: only an administrator may raise it (to 2:00:00)")),
        "{err:?}"
    );
    let unlimited = JobUpdate {
        time_limit_secs: Some(None),
        ..JobUpdate::default()
    };
    assert!(rec
        .update_job(&alice(), &named(&rec, "1"), &unlimited, &none_finished, NOW)
        .is_err());
    // An administrator may raise it; anyone may set one on a job without one.
    assert!(rec
        .update_job(&root(), &named(&rec, "1"), &raise, &none_finished, NOW)
        .is_ok());
    assert!(rec
        .update_job(&alice(), &named(&rec, "3"), &raise, &none_finished, NOW)
        .is_ok());
    let rename = JobUpdate {
        name: Some("x".into()),
        ..JobUpdate::default()
    };
    assert_eq!(
        rec.update_job(&alice(), &named(&rec, "2"), &rename, &none_finished, NOW)
            .err(),
        Some(ApiError::Conflict(
            "job 2 is RUNNING: only a pending job can be updated".into()
        ))
    );
    assert!(matches!(
        rec.update_job(&bob(), &named(&rec, "1"), &rename, &none_finished, NOW),
        Err(ApiError::Denied(m)) if m.contains("belongs to alice")
    ));
    let finished = |id: JobId| -> ApiResult<Option<Job>> {
        let mut j = JobBuilder::new(id.0).build();
        j.state = JobState::Completed;
        Ok(Some(j))
    };
    let err = rec
        .update_job(
            &alice(),
            &Resolved {
                target: JobTarget::parse("9").unwrap(),
                ids: vec![JobId(9)],
                array: None,
            },
            &rename,
            &finished,
            NOW,
        )
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("already finished (COMPLETED)")),
        "{err:?}"
    );
}

#[test]
fn a_tier_quota_the_job_exceeds_is_refused() {
    let rec = Records::with_jobs(vec![JobBuilder::new(1).gpus(8).build()]);
    let update = JobUpdate {
        tier: Some(TierChange {
            max_gpus_per_user: 4,
            ..high()
        }),
        ..JobUpdate::default()
    };
    let err = rec
        .update_job(&alice(), &named(&rec, "1"), &update, &none_finished, NOW)
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Invalid(m) if m.contains("tiers.high.max_gpus_per_user")),
        "{err:?}"
    );
}

#[test]
fn an_exclusive_job_is_not_moved_to_a_tier_whose_quota_is_smaller_than_every_node() {
    // It asks for one GPU but would hold a whole 8-GPU node.
    let rec = Records::with_jobs(vec![JobBuilder::new(1).gpus(1).exclusive().build()]);
    let update = JobUpdate {
        tier: Some(TierChange {
            max_gpus_per_user: 4,
            ..high()
        }),
        ..JobUpdate::default()
    };
    let err = rec
        .update_job(&alice(), &named(&rec, "1"), &update, &none_finished, NOW)
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Invalid(m) if m.starts_with("job 1: the job takes whole nodes \
            (--exclusive) and would hold at least 8 GPUs")
            && m.contains("(4, tiers.high.max_gpus_per_user)")),
        "{err:?}"
    );
    // A quota as large as a node lets it move.
    let update = JobUpdate {
        tier: Some(TierChange {
            max_gpus_per_user: 8,
            ..high()
        }),
        ..JobUpdate::default()
    };
    assert!(rec
        .update_job(&alice(), &named(&rec, "1"), &update, &none_finished, NOW)
        .is_ok());
}

#[test]
fn hold_and_release_through_update_name_a_change_that_is_none() {
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).build(),
        JobBuilder::new(2).held().build(),
    ]);
    let hold = |on| JobUpdate {
        hold: Some(on),
        ..JobUpdate::default()
    };
    let (fx, changed) = rec
        .update_job(
            &alice(),
            &named(&rec, "1"),
            &hold(true),
            &none_finished,
            NOW,
        )
        .unwrap();
    assert_eq!(changed, ["held"]);
    assert_eq!(fx.jobs[0].state, JobState::Held);
    let (fx, _) = rec
        .update_job(
            &alice(),
            &named(&rec, "2"),
            &hold(false),
            &none_finished,
            NOW,
        )
        .unwrap();
    assert_eq!(fx.jobs[0].state, JobState::Pending);
    assert_eq!(fx.jobs[0].queued_at, Some(NOW));
    assert_eq!(
        rec.update_job(
            &alice(),
            &named(&rec, "2"),
            &hold(true),
            &none_finished,
            NOW
        )
        .err(),
        Some(ApiError::Conflict("job 2 is already held".into()))
    );
    assert_eq!(
        rec.update_job(
            &alice(),
            &named(&rec, "1"),
            &hold(false),
            &none_finished,
            NOW
        )
        .err(),
        Some(ApiError::Conflict("job 1 is not held".into()))
    );
}

#[test]
fn a_dependency_that_makes_a_job_wait_for_itself_is_refused() {
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).build(),
        JobBuilder::new(2).depends(DepKind::AfterOk, &[1]).build(),
        JobBuilder::new(3).depends(DepKind::AfterAny, &[2]).build(),
        JobBuilder::new(4).build(),
    ]);
    let err = rec
        .update_job(
            &alice(),
            &named(&rec, "1"),
            &dependency(&rec, "afterok:3"),
            &none_finished,
            NOW,
        )
        .err()
        .unwrap();
    assert_eq!(
        err,
        ApiError::Invalid(
            "--dependency 'afterok:3': job 1 would wait for itself (through job 3)".into()
        )
    );
    let err = rec
        .update_job(
            &alice(),
            &named(&rec, "1"),
            &dependency(&rec, "afterok:1"),
            &none_finished,
            NOW,
        )
        .err()
        .unwrap();
    assert!(matches!(&err, ApiError::Invalid(m) if m.contains("job 1 would wait for itself")));
    // No cycle: the dependency changes, its targets are named for the core.
    let (fx, changed) = rec
        .update_job(
            &alice(),
            &named(&rec, "1"),
            &dependency(&rec, "afterok:4"),
            &none_finished,
            NOW,
        )
        .unwrap();
    assert_eq!(changed, ["dependency afterok:4 (was none)"]);
    let dep = fx.jobs[0].spec.dependency.as_ref().unwrap();
    assert_eq!(dep.targets().collect::<Vec<_>>(), [JobId(4)]);
    assert_eq!(fx.dependency_targets, [(JobId(4), None)]);
    // And is cleared.
    let clear = JobUpdate {
        dependency: Some(None),
        ..JobUpdate::default()
    };
    let (fx, changed) = rec
        .update_job(&alice(), &named(&rec, "3"), &clear, &none_finished, NOW)
        .unwrap();
    assert_eq!(changed, ["dependency none (was afterany:2)"]);
    assert!(fx.jobs[0].spec.dependency.is_none());
}

#[test]
fn an_array_changes_its_queued_tasks_which_keep_sharing_one_spec() {
    let spec = Arc::new(
        // Tasks 0 to 2 (`first_n(2 + 1)`).
        JobBuilder::new(10)
            .array(10, 2, 0)
            .time_limit(600)
            .build()
            .spec
            .as_ref()
            .clone(),
    );
    let task = |id: u64, index: u32| {
        let mut job = JobBuilder::new(id).array(10, index, 0).build();
        job.spec = Arc::clone(&spec);
        job
    };
    let mut running = task(11, 1);
    running.state = JobState::Running;
    let rec = Records::with_jobs(vec![task(10, 0), running, task(12, 2)]);
    let update = JobUpdate {
        time_limit_secs: Some(Some(300)),
        ..JobUpdate::default()
    };
    let (fx, changed) = rec
        .update_job(&alice(), &named(&rec, "10"), &update, &none_finished, NOW)
        .unwrap();
    assert_eq!(changed, ["time limit 5:00 (was 10:00)"]);
    let ids: Vec<u64> = fx.jobs.iter().map(|j| j.id.0).collect();
    assert_eq!(ids, [10, 12], "the running task is passed over");
    assert!(Arc::ptr_eq(&fx.jobs[0].spec, &fx.jobs[1].spec));
    assert_eq!(fx.audit.len(), 1);
    assert_eq!(
        fx.audit[0].detail,
        "2 tasks of array 10 (10_[0,2]): time limit 5:00 (was 10:00)"
    );
    // An array none of whose tasks is queued: refused.
    let mut all_running = rec.clone();
    all_running.commit(fx);
    let mut one = Job::clone(&all_running.jobs()[&JobId(11)]);
    one.state = JobState::Running;
    let rec = Records::with_jobs(vec![one]);
    let err = rec
        .update_job(&alice(), &named(&rec, "11"), &update, &none_finished, NOW)
        .err()
        .unwrap();
    assert!(
        matches!(&err, ApiError::Conflict(m) if m.contains("RUNNING")),
        "{err:?}"
    );
}
