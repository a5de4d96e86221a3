//! Usage records: one test per way a run ends, as the events that end it produce them, then
//! `Records::account_runs` as the shell calls it before each write; and imports.

use super::agent_events::{Limits, Registration};
use super::lifecycle::PartEnd;
use super::usage::{import_runs, running_run, REQUEUED};
use super::{Effects, Records};
use crate::core::testkit::{alice, root, JobBuilder, NodeBuilder, RunBuilder, A100, T0};
use crate::error::{ApiError, ApiResult};
use std::collections::BTreeSet;
use ysched_common::{Job, JobId, JobState, RunRecord};

const NOW: i64 = T0 + 60_000;
const LIMITS: Limits = Limits {
    max_requeues: 20,
    max_launch_attempts: 3,
};

fn none_finished(_: JobId) -> ApiResult<Option<Job>> {
    Ok(None)
}

/// Runs `fx` through the reactor, as the shell does, and returns the runs it recorded
/// (written in the event's batch too).
fn runs(rec: &Records, fx: Effects) -> Vec<RunRecord> {
    let kept = super::reactor::testing::apply(&mut rec.clone(), fx, NOW);
    if !kept.runs.0.is_empty() {
        assert!(
            kept.journal.batches.iter().any(|b| !b.is_empty()),
            "runs are written in the event's batch"
        );
    }
    kept.runs.0
}

/// A job of 2 GPUs on n1, queued at `T0 - 3 s`, started at `T0`.
fn running(id: u64) -> JobBuilder {
    JobBuilder::new(id)
        .submitted(T0 - 5_000)
        .running_on("n1", &[0, 1])
}

fn with_queued_at(mut job: Job, at: i64) -> Job {
    job.queued_at = Some(at);
    job
}

fn end(job: u64) -> PartEnd {
    PartEnd {
        job_id: job,
        exit_code: Some(0),
        end_time_ms: T0 + 5_000,
        ..PartEnd::default()
    }
}

/// The one run `fx` records for job `id`.
fn one(rec: &Records, fx: Effects) -> RunRecord {
    let mut r = runs(rec, fx);
    assert_eq!(r.len(), 1, "{r:#?}");
    r.remove(0)
}

#[test]
fn a_completed_run_is_recorded_with_its_size_times_and_wait() {
    let job = with_queued_at(running(1).cpus(4).build(), T0 - 3_000);
    let rec = Records::with_jobs(vec![job]);
    let run = one(&rec, rec.job_finished("n1", &end(1), LIMITS, NOW));
    assert_eq!(
        run,
        RunBuilder::new(1, T0, T0 + 5_000)
            .gpus(2)
            .cpus(4)
            .queued(T0 - 3_000)
            .build()
    );
    assert_eq!(
        (run.gpu_secs(), run.cpu_secs(), run.wait_ms()),
        (10, 20, 3_000)
    );
    // Without `queued_at` (records from before it existed) the submit time stands in.
    let rec = Records::with_jobs(vec![running(2).build()]);
    let run = one(&rec, rec.job_finished("n1", &end(2), LIMITS, NOW));
    assert_eq!(run.queued_at, T0 - 5_000);
}

#[test]
fn failed_timed_out_and_out_of_memory_runs_are_recorded_as_they_ended() {
    let rec = Records::with_jobs(vec![
        running(1).build(),
        running(2).build(),
        running(3).build(),
    ]);
    let failed = PartEnd {
        exit_code: Some(3),
        ..end(1)
    };
    let timed_out = PartEnd {
        exit_code: None,
        signal: Some(9),
        timed_out: true,
        ..end(2)
    };
    let oom = PartEnd {
        exit_code: None,
        signal: Some(9),
        out_of_memory: true,
        ..end(3)
    };
    for (id, report, outcome) in [
        (1, failed, "FAILED"),
        (2, timed_out, "TIMEOUT"),
        (3, oom, "OUT_OF_MEMORY"),
    ] {
        let run = one(&rec, rec.job_finished("n1", &report, LIMITS, NOW));
        assert_eq!((run.job_id, run.outcome.as_str()), (JobId(id), outcome));
        assert_eq!(run.end, T0 + 5_000);
    }
}

#[test]
fn a_run_cancelled_while_running_is_recorded_when_its_agent_reports_it_gone() {
    let mut rec = Records::with_jobs(vec![running(1).build(), JobBuilder::new(2).build()]);
    let (fx, _) = rec
        .cancel(&alice(), &[1, 2], "", &none_finished, NOW)
        .unwrap();
    // The running one is only asked to stop; the queued one never ran: no run either way.
    assert!(runs(&rec, fx.clone_for_test()).is_empty());
    rec.commit(fx);
    let gone = PartEnd {
        exit_code: None,
        signal: Some(15),
        ..end(1)
    };
    let run = one(&rec, rec.job_finished("n1", &gone, LIMITS, NOW));
    assert_eq!(run.outcome, "CANCELLED");
}

#[test]
fn a_preempted_run_requeued_records_the_preemptor_its_checkpoint_and_the_work_lost() {
    let victim = running(1).preempted_by(9).checkpointed(T0 + 1_000).build();
    let preemptor = JobBuilder::new(9)
        .critical()
        .account("nlp")
        .running_on("n2", &[0])
        .build();
    let mut rec = Records::with_jobs(vec![victim, preemptor]);
    let saved = PartEnd {
        checkpoint_saved: true,
        ..end(1)
    };
    let fx = rec.job_finished("n1", &saved, LIMITS, NOW);
    let run = one(&rec, fx.clone_for_test());
    assert_eq!(run.outcome, REQUEUED);
    assert_eq!(run.preempted_by, Some(JobId(9)));
    assert_eq!(run.preemptor_account.as_deref(), Some("nlp"));
    assert!(run.checkpoint_saved);
    // 2 GPUs x 4 s since the last checkpoint known before the end.
    assert_eq!(run.lost_gpu_secs, 8);
    rec.commit(fx);
    // Back in the queue: its wait begins at the run's end; its next run is restart 1.
    let job = &rec.jobs[&JobId(1)];
    assert_eq!(
        (job.state, job.queued_at, job.restart_count),
        (JobState::Pending, Some(T0 + 5_000), 1)
    );
    let mut again = Job::clone(job);
    again.state = JobState::Running;
    again.alloc = running(1).build().alloc;
    again.start_time = Some(T0 + 7_000);
    rec.jobs.insert(JobId(1), std::sync::Arc::new(again));
    let run = one(
        &rec,
        rec.job_finished(
            "n1",
            &PartEnd {
                end_time_ms: T0 + 9_000,
                restart_count: 1,
                ..end(1)
            },
            LIMITS,
            NOW,
        ),
    );
    assert_eq!(
        (
            run.restart_count,
            run.queued_at,
            run.start,
            run.outcome.as_str()
        ),
        (1, T0 + 5_000, T0 + 7_000, "COMPLETED")
    );
    assert_eq!(run.wait_ms(), 2_000);
}

#[test]
fn a_preempted_run_without_a_checkpoint_loses_all_its_work() {
    let rec = Records::with_jobs(vec![running(1).preempted_by(9).build()]);
    let killed = PartEnd {
        exit_code: None,
        signal: Some(9),
        killed: true,
        ..end(1)
    };
    let run = one(&rec, rec.job_finished("n1", &killed, LIMITS, NOW));
    assert_eq!(run.outcome, REQUEUED);
    assert!(!run.checkpoint_saved);
    assert_eq!(
        run.preemptor_account, None,
        "the preemptor is not known here"
    );
    assert_eq!(run.lost_gpu_secs, 10, "2 GPUs x 5 s since its start");
}

#[test]
fn a_preempted_run_not_requeued_ends_preempted() {
    let mut job = running(1).preempted_by(9).build();
    std::sync::Arc::make_mut(&mut job.spec).no_requeue = true;
    let rec = Records::with_jobs(vec![job]);
    let run = one(&rec, rec.job_finished("n1", &end(1), LIMITS, NOW));
    assert_eq!(run.outcome, "PREEMPTED");
    assert_eq!(run.preempted_by, Some(JobId(9)));
}

#[test]
fn a_requeue_on_request_is_recorded_when_the_run_is_gone() {
    let mut rec = Records::with_jobs(vec![running(1).build()]);
    let fx = rec
        .requeue(&alice(), JobId(1), &none_finished, NOW)
        .unwrap();
    assert!(runs(&rec, fx.clone_for_test()).is_empty(), "still running");
    rec.commit(fx);
    let fx = rec.job_finished("n1", &end(1), LIMITS, NOW);
    let run = one(&rec, fx.clone_for_test());
    assert_eq!((run.outcome.as_str(), run.preempted_by), (REQUEUED, None));
    assert_eq!(run.lost_gpu_secs, 0, "only preemptions count work lost");
    rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(1)].queued_at, Some(T0 + 5_000));
}

#[test]
fn runs_stopped_by_a_fence_are_recorded_requeued() {
    // The agent reports the fence's stop.
    let rec = Records::with_jobs(vec![running(1).build()]);
    let fenced = PartEnd {
        exit_code: None,
        signal: Some(15),
        fenced: true,
        ..end(1)
    };
    let run = one(&rec, rec.job_finished("n1", &fenced, LIMITS, NOW));
    assert_eq!((run.outcome.as_str(), run.end), (REQUEUED, T0 + 5_000));
    // schedd decides on a silent node once its fence has surely stopped the job: now.
    let mut rec = Records::with_jobs(vec![running(2).build()]);
    let node = rec.nodes.get_mut("n1").unwrap();
    node.fence_after_secs = 10;
    node.last_seen = T0;
    let silent = BTreeSet::from(["n1".to_string()]);
    let fx = rec.fail_silent(&silent, T0, LIMITS, NOW);
    let run = one(&rec, fx.clone_for_test());
    assert_eq!((run.outcome.as_str(), run.end), (REQUEUED, NOW));
    rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(2)].queued_at, Some(NOW));
}

fn registration(running: &[u64]) -> Registration {
    let node = NodeBuilder::dgx("n1", 8, A100).build();
    Registration {
        name: "n1".into(),
        address: "10.0.0.1".into(),
        cpus: node.cpus,
        mem_mib: node.mem_mib,
        gpus: node.gpus.to_vec(),
        running_jobs: running.to_vec(),
        ..Registration::default()
    }
}

#[test]
fn a_run_its_node_lost_is_recorded_node_fail_and_an_unconfirmed_launch_requeued() {
    let mut unconfirmed = running(2).build();
    unconfirmed.launched = false;
    let rec = Records::with_jobs(vec![running(1).build(), unconfirmed]);
    let (fx, _) = rec.register(&registration(&[]), LIMITS, NOW);
    let r = runs(&rec, fx);
    let got: Vec<(u64, &str, i64)> = r
        .iter()
        .map(|r| (r.job_id.0, r.outcome.as_str(), r.end))
        .collect();
    // The unconfirmed launch held its GPUs all the same: charged, back in the queue.
    assert_eq!(got, [(1, "NODE_FAIL", NOW), (2, REQUEUED, NOW)]);
    // A silent node that does not fence: NODE_FAIL.
    let rec = Records::with_jobs(vec![running(3).build()]);
    let silent = BTreeSet::from(["n1".to_string()]);
    let run = one(&rec, rec.fail_silent(&silent, T0, LIMITS, NOW));
    assert_eq!(run.outcome, "NODE_FAIL");
}

#[test]
fn a_multi_node_run_is_one_record_with_all_its_gpus_ending_with_its_last_part() {
    let job = JobBuilder::new(1)
        .submitted(T0 - 5_000)
        .running_on("n1", &[0, 1])
        .running_on("n2", &[0, 1, 2])
        .build();
    let mut rec = Records::with_jobs(vec![job]);
    let fx = rec.job_finished("n1", &end(1), LIMITS, NOW);
    assert!(
        runs(&rec, fx.clone_for_test()).is_empty(),
        "one part still runs"
    );
    rec.commit(fx);
    let last = PartEnd {
        end_time_ms: T0 + 8_000,
        ..end(1)
    };
    let run = one(&rec, rec.job_finished("n2", &last, LIMITS, NOW));
    assert_eq!(
        (run.gpus, run.cpus, run.end, run.outcome.as_str()),
        (5, 2, T0 + 8_000, "COMPLETED")
    );
    assert_eq!(run.gpu_secs(), 40);
}

#[test]
fn an_end_reported_again_records_nothing_and_agent_times_are_kept_sane() {
    let mut rec = Records::with_jobs(vec![running(1).build()]);
    let fx = rec.job_finished("n1", &end(1), LIMITS, NOW);
    rec.commit(fx);
    assert!(runs(&rec, rec.job_finished("n1", &end(1), LIMITS, NOW)).is_empty());
    // An agent's clock far off: charged between the start and schedd's now.
    let rec = Records::with_jobs(vec![running(2).build(), running(3).build()]);
    let past = PartEnd {
        end_time_ms: 1,
        ..end(2)
    };
    let future = PartEnd {
        end_time_ms: i64::MAX,
        ..end(3)
    };
    assert_eq!(
        one(&rec, rec.job_finished("n1", &past, LIMITS, NOW)).end,
        T0
    );
    assert_eq!(
        one(&rec, rec.job_finished("n1", &future, LIMITS, NOW)).end,
        NOW
    );
}

#[test]
fn release_from_hold_starts_the_wait() {
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).held().build()]);
    let fx = rec.hold(&alice(), JobId(1), false, NOW).unwrap();
    rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(1)].queued_at, Some(NOW));
    let fx = rec.hold(&alice(), JobId(1), true, NOW + 1).unwrap();
    rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(1)].queued_at, None);
}

#[test]
fn a_running_job_is_charged_so_far() {
    let job = running(1).build();
    let run = running_run(&job, T0 + 2_500).unwrap();
    assert_eq!(
        (run.outcome.as_str(), run.end, run.gpus),
        ("RUNNING", T0 + 2_500, 2)
    );
    assert!(running_run(&JobBuilder::new(2).build(), NOW).is_none());
}

fn imported(job: u64, end: i64) -> RunRecord {
    RunBuilder::new(job, end - 3_600_000, end)
        .account("vision")
        .user("bob", 1001)
        .tier("high")
        .gpus(8)
        .cpus(32)
        .queued(end - 7_200_000)
        .build()
}

#[test]
fn imports_are_for_administrators_checked_and_recorded_once() {
    let known = |r: &RunRecord| Ok::<_, ApiError>(r.job_id == JobId(3));
    let runs = vec![
        imported(1, T0),
        imported(2, T0),
        imported(1, T0),
        imported(3, T0),
    ];
    let e = import_runs(&alice(), runs.clone(), &known, NOW)
        .err()
        .unwrap();
    assert!(matches!(e, ApiError::Denied(m) if m.contains("only administrators")));
    let (fx, n) = import_runs(&root(), runs, &known, NOW).unwrap();
    assert_eq!(n, 2, "one repeated, one recorded already");
    assert_eq!(
        fx.runs.iter().map(|r| r.job_id.0).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(!fx.writes_nothing());
    for (bad, what) in [
        (
            RunRecord {
                account: String::new(),
                ..imported(1, T0)
            },
            "account is empty",
        ),
        (
            RunRecord {
                outcome: "DONE".into(),
                ..imported(1, T0)
            },
            "outcome \"DONE\"",
        ),
        (
            RunRecord {
                outcome: "RUNNING".into(),
                ..imported(1, T0)
            },
            "outcome \"RUNNING\"",
        ),
        (
            RunRecord {
                start: T0 + 1,
                end: T0,
                ..imported(1, T0)
            },
            "not before it",
        ),
        (imported(1, NOW + 3_600_000), "ends in the future"),
        (
            RunRecord {
                queued_at: T0,
                ..imported(1, T0)
            },
            "queued_at",
        ),
        (
            RunRecord {
                user: "a\nb".into(),
                ..imported(1, T0)
            },
            "control character",
        ),
        (
            RunRecord {
                tier: "t".repeat(257),
                ..imported(1, T0)
            },
            "longer than 256 bytes",
        ),
    ] {
        let e = import_runs(&root(), vec![imported(5, T0), bad], &known, NOW)
            .err()
            .unwrap();
        assert!(
            matches!(&e, ApiError::Invalid(m) if m.contains(what) && m.contains("job 1")),
            "{what}: {e:?}"
        );
    }
}

impl Effects {
    /// A copy of what tests look at (effects are not `Clone`: the batch is write-only).
    fn clone_for_test(&self) -> Effects {
        Effects {
            jobs: self.jobs.clone(),
            run_ends: self.run_ends.clone(),
            runs: self.runs.clone(),
            ..Effects::default()
        }
    }
}
