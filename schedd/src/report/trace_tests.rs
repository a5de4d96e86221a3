//! The trace export's rows (`yctl report --export-trace`) on hand-made runs: work lost to a
//! preemption without a checkpoint is taken off the duration, a saved one is not, a TIMEOUT
//! needed its limit, jobs whose last run went back to the queue are left out, and array
//! tasks keep their display id.

use super::*;
use crate::core::testkit::RunBuilder;
use std::collections::BTreeMap;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord};

const S: Millis = 1000;
/// 2026-01-05T00:00:00Z.
const T0: Millis = 1_767_571_200_000;

/// Run `restart` of job `job`, queued at `queued`, from `start` to `end` (seconds after T0).
fn run(job: u64, restart: u32, gpus: u32, queued: i64, start: i64, end: i64) -> RunRecord {
    RunBuilder::new(job, T0 + start * S, T0 + end * S)
        .restart(restart)
        .account("vision")
        .user("ana", 1000)
        .gpus(gpus)
        .cpus(4)
        .queued(T0 + queued * S)
        .build()
}

/// `r` preempted by job 99 and requeued, having lost `lost_gpu_secs` unless `saved`.
fn preempted(mut r: RunRecord, saved: bool, lost_gpu_secs: u64) -> RunRecord {
    r.outcome = "REQUEUED".into();
    r.preempted_by = Some(JobId(99));
    r.preemptor_account = Some("nlp".into());
    r.checkpoint_saved = saved;
    r.lost_gpu_secs = lost_gpu_secs;
    r
}

fn ended(mut r: RunRecord, outcome: &str) -> RunRecord {
    r.outcome = outcome.into();
    r
}

fn spec(display_id: &str) -> TraceSpec {
    TraceSpec {
        display_id: display_id.into(),
        user: "ana".into(),
        account: "vision".into(),
        gpu_types: vec!["A100".into(), "H100".into()],
        nodes: 1,
        cpus: 2,
        mem_mib: 16_384,
        time_limit_secs: Some(3600),
        grace_secs: Some(60),
    }
}

fn row(t: &Trace, id: u64) -> &TraceRow {
    t.rows
        .iter()
        .find(|r| r.job_id == JobId(id))
        .unwrap_or_else(|| panic!("no row for job {id}: {t:#?}"))
}

#[test]
fn a_preemption_without_a_checkpoint_takes_the_lost_work_off_the_duration() {
    // Job 1 on 4 GPUs: ran 100 s, preempted having lost 80 GPU-s of work (20 s on 4 GPUs)
    // since its last checkpoint, requeued, then ran 50 s more to complete.
    let runs = [
        ended(run(1, 1, 4, 100, 110, 160), "COMPLETED"),
        preempted(run(1, 0, 4, 0, 0, 100), false, 80),
    ];
    let t = trace(&runs, &BTreeMap::new());
    assert_eq!(t.unfinished, 0);
    let r = row(&t, 1);
    assert_eq!(r.duration_ms, (100 - 20 + 50) * S);
    assert_eq!(
        r.submit_ms, T0,
        "queued_at of restart 0, not of the requeue"
    );
    assert_eq!((r.outcome.as_str(), r.restarts), ("COMPLETED", 1));
    assert_eq!(
        (r.gpus, r.tier.as_str(), r.account.as_str()),
        (4, "low", "vision")
    );
    assert_eq!(r.display_id, "1", "no record: the number");
    assert_eq!(r.spec, None);
    assert_eq!(r.run_cpus, 4);
}

#[test]
fn a_preemption_that_saved_its_checkpoint_loses_nothing() {
    let runs = [
        preempted(run(2, 0, 2, 0, 10, 100), true, 180),
        ended(run(2, 1, 2, 100, 120, 150), "COMPLETED"),
    ];
    let t = trace(&runs, &BTreeMap::new());
    assert_eq!(row(&t, 2).duration_ms, (90 + 30) * S);
}

#[test]
fn the_lost_work_never_makes_a_run_count_below_zero() {
    let runs = [
        preempted(run(3, 0, 1, 0, 0, 10), false, 500),
        ended(run(3, 1, 1, 10, 10, 15), "COMPLETED"),
    ];
    let t = trace(&runs, &BTreeMap::new());
    assert_eq!(row(&t, 3).duration_ms, 5 * S);
}

#[test]
fn a_timeout_needed_its_time_limit() {
    // Stopped at its one-hour limit (the run is a little longer: the grace after SIGTERM).
    let runs = [ended(run(4, 0, 8, 0, 5, 3605 + 2), "TIMEOUT")];
    let specs = BTreeMap::from([(JobId(4), spec("4"))]);
    let t = trace(&runs, &specs);
    let r = row(&t, 4);
    assert_eq!(r.duration_ms, 3600 * S);
    assert_eq!(r.outcome, "TIMEOUT");
    assert_eq!(r.spec.as_ref().unwrap().time_limit_secs, Some(3600));
    // Without its spec the limit is unknown: what it ran.
    let t = trace(&runs, &BTreeMap::new());
    assert_eq!(row(&t, 4).duration_ms, 3602 * S);
    // Nor is a record of another user's job (imported runs with a reused id) its spec.
    let other = TraceSpec {
        user: "bo".into(),
        ..spec("4")
    };
    let t = trace(&runs, &BTreeMap::from([(JobId(4), other)]));
    assert_eq!(row(&t, 4).spec, None);
    assert_eq!(row(&t, 4).duration_ms, 3602 * S);
}

#[test]
fn jobs_still_running_or_requeued_at_the_windows_end_are_left_out() {
    let runs = [
        // Preempted and requeued; its next run had not ended in the window.
        preempted(run(5, 0, 1, 0, 0, 50), true, 0),
        // Requeued twice, then completed: in.
        preempted(run(6, 0, 1, 0, 0, 20), false, 10),
        preempted(run(6, 1, 1, 20, 20, 40), true, 0),
        ended(run(6, 2, 1, 40, 40, 60), "COMPLETED"),
        // Requeued by `yctl requeue` (no preemptor) and not ended again: out.
        ended(run(7, 0, 1, 0, 0, 30), "REQUEUED"),
        // Failed and cancelled ones ended: in.
        ended(run(8, 0, 1, 5, 6, 7), "FAILED"),
        ended(run(9, 0, 1, 3, 6, 7), "CANCELLED"),
    ];
    let t = trace(&runs, &BTreeMap::new());
    let ids: Vec<u64> = t.rows.iter().map(|r| r.job_id.0).collect();
    // By submit time, then id.
    assert_eq!(ids, [6, 9, 8]);
    assert_eq!(t.unfinished, 2);
    assert_eq!(row(&t, 6).duration_ms, (20 - 10 + 20 + 20) * S);
    assert_eq!(row(&t, 6).restarts, 2);
    let mut b = TraceBuilder::new();
    for r in &runs {
        b.add(r);
    }
    assert_eq!(b.ended_jobs(), [JobId(6), JobId(8), JobId(9)]);
}

#[test]
fn without_its_first_run_the_earliest_known_run_gives_the_submit_time() {
    // Restart 0 ended before the window: only restarts 1 and 2 were scanned.
    let runs = [
        ended(run(10, 2, 1, 300, 310, 400), "COMPLETED"),
        preempted(run(10, 1, 1, 200, 210, 250), true, 0),
    ];
    let t = trace(&runs, &BTreeMap::new());
    let r = row(&t, 10);
    assert_eq!(r.submit_ms, T0 + 200 * S);
    assert_eq!(r.duration_ms, (40 + 90) * S);
}

#[test]
fn array_tasks_keep_their_display_id_and_every_row_its_spec() {
    let runs = [
        ended(run(20, 0, 1, 0, 1, 11), "COMPLETED"),
        ended(run(21, 0, 1, 0, 2, 12), "COMPLETED"),
        ended(run(30, 0, 1, 0, 3, 13), "COMPLETED"),
    ];
    let specs = BTreeMap::from([
        (JobId(20), spec("20_0")),
        (JobId(21), spec("20_7")),
        (JobId(30), spec("30")),
    ]);
    let t = trace(&runs, &specs);
    let ids: Vec<&str> = t.rows.iter().map(|r| r.display_id.as_str()).collect();
    assert_eq!(ids, ["20_0", "20_7", "30"]);
    assert_eq!(row(&t, 21).spec.as_ref().unwrap().mem_mib, 16_384);
    assert_eq!(row(&t, 21).duration_ms, 10 * S);
}

#[test]
fn a_spec_from_a_job_record() {
    use ysched_common::array::ArrayTask;
    let mut job: ysched_common::Job = serde_json::from_value(serde_json::json!({
        "id": 21, "spec": ysched_common::JobSpec {
            gpus: 4, nodes: 2, cpus: 0, mem_mib: 0, time_limit_secs: Some(0),
            grace_secs: None, gpu_types: vec!["H100".into()], account: "vision".into(),
            ..Default::default()
        },
        "owner": {"uid": 1, "gid": 1, "user": "ana", "groups": []},
        "tier_value": 1, "state": "COMPLETED", "reason": "", "alloc": [],
        "restart_count": 0, "exit_code": 0, "signal": null, "submit_time": 0,
        "start_time": null, "end_time": null, "launched": true, "grace_secs": 30,
        "checkpoint_dir": "", "stop": null, "last_checkpoint": null
    }))
    .unwrap();
    job.array = Some(ArrayTask {
        array_id: JobId(20),
        task: 7,
    });
    let s = TraceSpec::of(&job);
    assert_eq!(s.display_id, "20_7");
    assert_eq!((s.nodes, s.cpus, s.mem_mib), (2, 1, 0));
    assert_eq!(s.time_limit_secs, None, "0: no limit");
    assert_eq!(
        s.grace_secs, None,
        "the tier's default, not the resolved grace"
    );
    assert_eq!(s.gpu_types, ["H100"]);
    assert_eq!((s.user.as_str(), s.account.as_str()), ("ana", "vision"));
}
