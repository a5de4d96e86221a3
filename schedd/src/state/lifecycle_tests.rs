//! One test per transition of a run's end.

use super::history::JobEventKind;
use super::lifecycle::{part_ended, part_lost, EndOutcome, LostOutcome, PartEnd};
use crate::core::testkit::{JobBuilder, T0};
use ysched_common::{JobId, JobState, StopReason, StopRequest};

const NOW: i64 = T0 + 60_000;

fn exit(job: u64, code: i32) -> PartEnd {
    PartEnd {
        job_id: job,
        exit_code: Some(code),
        end_time_ms: T0 + 5_000,
        ..PartEnd::default()
    }
}

fn cancelled_by(job: &mut ysched_common::Job, who: &str) {
    job.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: who.into() },
        at: T0,
        grace_secs: 30,
    }));
}

#[test]
fn exit_zero_completes_and_nonzero_fails_with_its_code() {
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    let out = part_ended(&mut job, "n1", &exit(1, 0), 20, NOW);
    assert!(out.finished && !out.ignored);
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(job.end_time, Some(T0 + 5_000));
    assert_eq!(out.events[0].1, JobEventKind::Exited);

    let mut job = JobBuilder::new(2).running_on("n1", &[0]).build();
    part_ended(&mut job, "n1", &exit(2, 3), 20, NOW);
    assert_eq!((job.state, job.exit_code), (JobState::Failed, Some(3)));
    assert_eq!(job.reason, "exit code 3");
}

#[test]
fn time_limit_launch_error_and_cancel_decide_the_state() {
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    let end = PartEnd {
        timed_out: true,
        signal: Some(15),
        ..exit(1, 0)
    };
    part_ended(
        &mut job,
        "n1",
        &PartEnd {
            exit_code: None,
            ..end
        },
        20,
        NOW,
    );
    assert_eq!(job.state, JobState::Timeout);

    let mut job = JobBuilder::new(2).running_on("n1", &[0]).build();
    let end = PartEnd {
        error: "no such user".into(),
        exit_code: None,
        ..exit(2, 0)
    };
    part_ended(&mut job, "n1", &end, 20, NOW);
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.reason, "launch failed: no such user");

    let mut job = JobBuilder::new(3).running_on("n1", &[0]).build();
    cancelled_by(&mut job, "bob");
    let end = PartEnd {
        exit_code: None,
        signal: Some(15),
        ..exit(3, 0)
    };
    part_ended(&mut job, "n1", &end, 20, NOW);
    assert_eq!(
        (job.state, job.reason.as_str()),
        (JobState::Cancelled, "cancelled by bob")
    );
}

#[test]
fn a_report_of_another_run_or_node_changes_nothing() {
    let job = JobBuilder::new(1).running_on("n1", &[0]).build();
    let mut other_run = job.clone();
    other_run.restart_count = 1;
    let before = other_run.clone();
    let out = part_ended(&mut other_run, "n1", &exit(1, 0), 20, NOW);
    assert_eq!(
        out,
        EndOutcome {
            ignored: true,
            ..EndOutcome::default()
        }
    );
    assert_eq!(other_run, before);
    let mut elsewhere = job.clone();
    assert!(part_ended(&mut elsewhere, "n2", &exit(1, 0), 20, NOW).ignored);
    assert_eq!(elsewhere, job);
}

#[test]
fn a_preempted_victim_is_requeued_with_its_checkpoint_until_max_requeues() {
    let mut job = JobBuilder::new(1)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    let end = PartEnd {
        exit_code: Some(0),
        term_time_ms: T0 + 1_000,
        checkpoint_saved: true,
        ..exit(1, 0)
    };
    let out = part_ended(&mut job, "n1", &end, 2, NOW);
    assert!(!out.finished);
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.restart_count, 1);
    assert_eq!(job.last_checkpoint, Some(T0 + 5_000));
    assert!(job.alloc.is_empty() && job.stop.is_none() && !job.launched);
    let kinds: Vec<JobEventKind> = out.events.iter().map(|e| e.1).collect();
    assert_eq!(
        kinds,
        [
            JobEventKind::Exited,
            JobEventKind::Preemption,
            JobEventKind::Requeued
        ]
    );
    assert!(out.events[1].2.contains("checkpoint_saved=true"));

    // At the limit it ends PREEMPTED.
    let mut job = JobBuilder::new(2)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    job.restart_count = 2;
    let end = PartEnd {
        restart_count: 2,
        ..exit(2, 0)
    };
    let out = part_ended(&mut job, "n1", &end, 2, NOW);
    assert!(out.finished);
    assert_eq!(
        (job.state, job.reason.as_str()),
        (JobState::Preempted, "preempted by 9")
    );

    // --no-requeue ends it PREEMPTED at once.
    let mut job = JobBuilder::new(3)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    std::sync::Arc::make_mut(&mut job.spec).no_requeue = true;
    part_ended(&mut job, "n1", &exit(3, 0), 20, NOW);
    assert_eq!(job.state, JobState::Preempted);
}

#[test]
fn the_first_failing_part_stops_the_others_and_decides_the_end() {
    let mut job = JobBuilder::new(1)
        .nodes(3)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .running_on("n3", &[0])
        .build();
    job.parts.nodelist = vec!["n1".into(), "n2".into(), "n3".into()];
    // n2 fails: its GPUs are released at once, the others are stopped.
    let out = part_ended(&mut job, "n2", &exit(1, 7), 20, NOW);
    assert!(!out.finished);
    assert_eq!(out.stop_parts, ["n1", "n3"]);
    assert_eq!(out.stop_grace, job.grace_secs);
    assert_eq!(job.alloc.len(), 2);
    assert_eq!(job.state, JobState::Running);
    // n3 is killed by the stop: no second stop.
    let killed = PartEnd {
        exit_code: None,
        signal: Some(15),
        ..exit(1, 0)
    };
    let out = part_ended(&mut job, "n3", &killed, 20, NOW);
    assert!(out.stop_parts.is_empty() && !out.finished);
    // The last part ends: the job ends as the first failure said, with its whole allocation.
    let out = part_ended(&mut job, "n1", &killed, 20, NOW);
    assert!(out.finished);
    assert_eq!((job.state, job.exit_code), (JobState::Failed, Some(7)));
    assert_eq!(job.reason, "part on n2: exit code 7");
    let nodes: Vec<&str> = job.alloc.iter().map(|a| a.node.as_str()).collect();
    assert_eq!(nodes, ["n1", "n2", "n3"]);
}

#[test]
fn a_lost_part_is_cancelled_failed_node_fail_or_requeued() {
    // Being cancelled: CANCELLED, whatever became of the launch.
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    job.launched = false;
    cancelled_by(&mut job, "alice");
    let (out, ev) = part_lost(&mut job, "n1", 3, NOW);
    assert_eq!(out, LostOutcome::Ended);
    assert_eq!(
        (job.state, ev.1),
        (JobState::Cancelled, JobEventKind::Cancelled)
    );
    assert_eq!(job.end_time, Some(NOW));

    // Started (confirmed) and lost: NODE_FAIL.
    let mut job = JobBuilder::new(2).running_on("n1", &[0]).build();
    let (out, _) = part_lost(&mut job, "n1", 3, NOW);
    assert_eq!((out, job.state), (LostOutcome::Ended, JobState::NodeFail));

    // Never confirmed: back to the queue, counting attempts; FAILED at the limit.
    let mut job = JobBuilder::new(3).running_on("n1", &[0]).build();
    job.launched = false;
    let (out, ev) = part_lost(&mut job, "n1", 2, NOW);
    assert_eq!((out, job.state), (LostOutcome::Requeued, JobState::Pending));
    assert_eq!(job.launch_attempts, 1);
    assert!(ev.2.contains("attempt 1 of 2"), "{}", ev.2);
    assert!(job.alloc.is_empty());
    // Placed again, and lost again before starting.
    job.state = JobState::Running;
    job.alloc = JobBuilder::new(3).running_on("n2", &[0]).build().alloc;
    let (out, ev) = part_lost(&mut job, "n2", 2, NOW);
    assert_eq!((out, job.state), (LostOutcome::Ended, JobState::Failed));
    assert_eq!(ev.1, JobEventKind::LaunchFailed);
    assert!(job.reason.contains("(2 of 2 attempts"), "{}", job.reason);
    assert_eq!(job.id, JobId(3));
}

fn requeue_asked_by(job: &mut ysched_common::Job, who: &str) {
    job.stop = Some(Box::new(StopRequest {
        reason: StopReason::Requeue { by: who.into() },
        at: T0,
        grace_secs: 30,
    }));
}

fn oom(job: u64) -> PartEnd {
    PartEnd {
        exit_code: None,
        signal: Some(9),
        out_of_memory: true,
        ..exit(job, 0)
    }
}

#[test]
fn a_part_killed_for_its_memory_limit_ends_out_of_memory_naming_limit_and_node() {
    let mut job = JobBuilder::new(1).mem(100).running_on("n1", &[0]).build();
    let out = part_ended(&mut job, "n1", &oom(1), 20, NOW);
    assert!(out.finished);
    assert_eq!(job.state, JobState::OutOfMemory);
    assert_eq!(
        job.reason,
        "out of memory: the job exceeded its memory limit (--mem 100M) on n1"
    );
    assert_eq!((job.exit_code, job.signal), (None, Some(9)));
    assert!(
        out.events[0].2.contains("out of memory"),
        "{:?}",
        out.events
    );

    // The main process may survive a worker's OOM kill and exit 0: still OUT_OF_MEMORY.
    let mut job = JobBuilder::new(2).mem(4096).running_on("n1", &[0]).build();
    let end = PartEnd {
        out_of_memory: true,
        ..exit(2, 0)
    };
    part_ended(&mut job, "n1", &end, 20, NOW);
    assert_eq!(job.state, JobState::OutOfMemory);
    assert!(job.reason.contains("(--mem 4G) on n1"), "{}", job.reason);

    // Without --mem (a node-wide limit hit): said without a limit.
    let mut job = JobBuilder::new(3).running_on("n1", &[0]).build();
    part_ended(&mut job, "n1", &oom(3), 20, NOW);
    assert_eq!(
        (job.state, job.reason.as_str()),
        (
            JobState::OutOfMemory,
            "out of memory: the job ran out of memory on n1"
        )
    );

    // Out of memory beats a time limit reached meanwhile.
    let mut job = JobBuilder::new(4).mem(100).running_on("n1", &[0]).build();
    let end = PartEnd {
        timed_out: true,
        ..oom(4)
    };
    part_ended(&mut job, "n1", &end, 20, NOW);
    assert_eq!(job.state, JobState::OutOfMemory);
}

#[test]
fn out_of_memory_while_being_cancelled_or_preempted_is_not_what_ends_the_job() {
    let mut job = JobBuilder::new(1).mem(100).running_on("n1", &[0]).build();
    cancelled_by(&mut job, "bob");
    part_ended(&mut job, "n1", &oom(1), 20, NOW);
    assert_eq!(
        (job.state, job.reason.as_str()),
        (JobState::Cancelled, "cancelled by bob")
    );

    let mut job = JobBuilder::new(2)
        .mem(100)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    let out = part_ended(&mut job, "n1", &oom(2), 20, NOW);
    assert!(!out.finished);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));

    let mut job = JobBuilder::new(3).mem(100).running_on("n1", &[0]).build();
    requeue_asked_by(&mut job, "alice");
    part_ended(&mut job, "n1", &oom(3), 20, NOW);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
}

#[test]
fn an_out_of_memory_part_of_a_multi_node_run_fails_it_like_any_part_failure() {
    let mut job = JobBuilder::new(1)
        .nodes(2)
        .mem(100)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    job.parts.nodelist = vec!["n1".into(), "n2".into()];
    // Out of memory on n2 even though its exit status was 0: a failure, the others stopped.
    let end = PartEnd {
        out_of_memory: true,
        ..exit(1, 0)
    };
    let out = part_ended(&mut job, "n2", &end, 20, NOW);
    assert_eq!(out.stop_parts, ["n1"]);
    assert!(!out.finished);
    let killed = PartEnd {
        exit_code: None,
        signal: Some(15),
        ..exit(1, 0)
    };
    let out = part_ended(&mut job, "n1", &killed, 20, NOW);
    assert!(out.finished);
    assert_eq!(job.state, JobState::OutOfMemory);
    assert_eq!(
        job.reason,
        "out of memory: the job exceeded its memory limit (--mem 100M) on n2"
    );

    // A part that fails otherwise first decides: the later OOM of another part does not.
    let mut job = JobBuilder::new(2)
        .nodes(2)
        .mem(100)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    job.parts.nodelist = vec!["n1".into(), "n2".into()];
    part_ended(&mut job, "n1", &exit(2, 3), 20, NOW);
    part_ended(&mut job, "n2", &oom(2), 20, NOW);
    assert_eq!((job.state, job.exit_code), (JobState::Failed, Some(3)));
}

#[test]
fn a_requested_requeue_goes_back_to_the_queue_whatever_the_end_and_past_max_requeues() {
    let mut job = JobBuilder::new(1)
        .running_on("n1", &[0])
        .submitted(T0 - 1_000)
        .started(T0)
        .build();
    job.restart_count = 5;
    job.run_ms_before = 1_000;
    requeue_asked_by(&mut job, "alice");
    let end = PartEnd {
        exit_code: None,
        signal: Some(15),
        timed_out: true,
        checkpoint_saved: true,
        restart_count: 5,
        ..exit(1, 0)
    };
    // max_requeues 2 bounds the scheduler's requeues, not the owner's.
    let out = part_ended(&mut job, "n1", &end, 2, NOW);
    assert!(!out.finished && !out.ignored);
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.restart_count, 6);
    assert_eq!(
        job.run_ms_before, 6_000,
        "this run's 5 s are added to the earlier runs' (yq's TIME)"
    );
    assert_eq!(job.submit_time, T0 - 1_000, "keeps its place in the queue");
    assert_eq!(job.last_checkpoint, Some(T0 + 5_000));
    assert!(job.alloc.is_empty() && job.stop.is_none() && !job.launched);
    assert_eq!(job.reason, "");
    assert!(job.end_time.is_none());
    let kinds: Vec<JobEventKind> = out.events.iter().map(|e| e.1).collect();
    assert_eq!(kinds, [JobEventKind::Exited, JobEventKind::Requeued]);
    assert_eq!(
        out.events[1].2,
        "restart 6 as requested by alice (checkpoint_saved=true)"
    );

    // A multi-node run is requeued once its last part is gone, each part's GPUs released on
    // its own report.
    let mut job = JobBuilder::new(2)
        .nodes(2)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    job.parts.nodelist = vec!["n1".into(), "n2".into()];
    requeue_asked_by(&mut job, "alice");
    let out = part_ended(&mut job, "n2", &exit(2, 0), 20, NOW);
    assert!(out.stop_parts.is_empty(), "already being stopped");
    assert_eq!((job.state, job.alloc.len()), (JobState::Running, 1));
    part_ended(&mut job, "n1", &exit(2, 1), 20, NOW);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert!(job.alloc.is_empty() && job.parts.ended.is_empty());
}

fn fenced(job: u64) -> PartEnd {
    PartEnd {
        exit_code: None,
        signal: Some(9),
        killed: true,
        fenced: true,
        ..exit(job, 0)
    }
}

#[test]
fn a_part_stopped_by_its_node_s_fence_is_requeued_while_the_job_may_be() {
    let mut job = JobBuilder::new(1)
        .running_on("n1", &[0])
        .submitted(T0 - 1_000)
        .build();
    let out = part_ended(&mut job, "n1", &fenced(1), 20, NOW);
    assert!(!out.finished && !out.ignored);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert_eq!(job.submit_time, T0 - 1_000, "keeps its place in the queue");
    assert!(job.alloc.is_empty() && job.stop.is_none() && !job.launched);
    let kinds: Vec<JobEventKind> = out.events.iter().map(|e| e.1).collect();
    assert_eq!(kinds, [JobEventKind::Exited, JobEventKind::Requeued]);
    assert_eq!(
        out.events[0].2,
        "on n1: killed by signal 9, SIGKILL after grace, stopped by the node's fence"
    );
    assert_eq!(
        out.events[1].2,
        "restart 1: node n1 lost contact with schedd and its fence stopped the job"
    );
    // The same report again (resent after a reconnect) is about the old run: ignored.
    assert!(part_ended(&mut job, "n1", &fenced(1), 20, NOW).ignored);
}

#[test]
fn a_fenced_part_ends_node_fail_when_the_job_may_not_be_requeued() {
    let node_fail = (
        JobState::NodeFail,
        "node n1 lost contact with schedd and its fence stopped the job",
    );
    // --no-requeue.
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    std::sync::Arc::make_mut(&mut job.spec).no_requeue = true;
    let out = part_ended(&mut job, "n1", &fenced(1), 20, NOW);
    assert!(out.finished);
    assert_eq!((job.state, job.reason.as_str()), node_fail);
    assert_eq!(job.end_time, Some(T0 + 5_000));
    // Requeued max_requeues times already.
    let mut job = JobBuilder::new(2).running_on("n1", &[0]).build();
    job.restart_count = 2;
    let end = PartEnd {
        restart_count: 2,
        ..fenced(2)
    };
    assert!(part_ended(&mut job, "n1", &end, 2, NOW).finished);
    assert_eq!((job.state, job.reason.as_str()), node_fail);
    assert_eq!(job.restart_count, 2);
}

#[test]
fn a_fence_does_not_override_a_cancel_a_preemption_or_a_requested_requeue() {
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    cancelled_by(&mut job, "bob");
    part_ended(&mut job, "n1", &fenced(1), 20, NOW);
    assert_eq!(
        (job.state, job.reason.as_str()),
        (JobState::Cancelled, "cancelled by bob")
    );

    let mut job = JobBuilder::new(2)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    let out = part_ended(&mut job, "n1", &fenced(2), 20, NOW);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert!(out.events[2].2.contains("after preemption by 9"));
    // A preemption at its limit ends PREEMPTED, not NODE_FAIL.
    let mut job = JobBuilder::new(3)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    std::sync::Arc::make_mut(&mut job.spec).no_requeue = true;
    part_ended(&mut job, "n1", &fenced(3), 20, NOW);
    assert_eq!(job.state, JobState::Preempted);

    let mut job = JobBuilder::new(4).running_on("n1", &[0]).build();
    requeue_asked_by(&mut job, "alice");
    let out = part_ended(&mut job, "n1", &fenced(4), 20, NOW);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert!(out.events[1].2.contains("as requested by alice"));
}

fn gang(id: u64) -> ysched_common::Job {
    let mut job = JobBuilder::new(id)
        .nodes(2)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    job.parts.nodelist = vec!["n1".into(), "n2".into()];
    job
}

#[test]
fn a_fenced_part_of_a_multi_node_run_stops_the_others_then_requeues_it() {
    let mut job = gang(1);
    let out = part_ended(&mut job, "n1", &fenced(1), 20, NOW);
    assert!(!out.finished);
    assert_eq!(out.stop_parts, ["n2"]);
    assert_eq!(out.stop_grace, job.grace_secs);
    assert_eq!(job.alloc.len(), 1, "n1's GPUs are free");
    let stop = job.stop.as_ref().unwrap();
    assert!(
        matches!(&stop.reason, StopReason::Requeue { by } if by == "schedd (node n1 fenced)"),
        "{stop:?}"
    );
    assert_eq!(
        job.reason,
        "requeueing: node n1 lost contact with schedd and its fence stopped the job there; \
         stopping the other parts"
    );
    // The other part ends, however: requeued.
    let out = part_ended(&mut job, "n2", &exit(1, 143), 20, NOW);
    assert!(!out.finished);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert!(job.alloc.is_empty() && job.parts.ended.is_empty());
    assert_eq!(
        out.events[1].2,
        "restart 1 as requested by schedd (node n1 fenced) (checkpoint_saved=false)"
    );
}

#[test]
fn a_fenced_part_of_a_multi_node_run_that_may_not_be_requeued_ends_it_node_fail() {
    let mut job = gang(1);
    std::sync::Arc::make_mut(&mut job.spec).no_requeue = true;
    let out = part_ended(&mut job, "n2", &fenced(1), 20, NOW);
    assert_eq!(out.stop_parts, ["n1"]);
    assert!(job.stop.is_none());
    let out = part_ended(&mut job, "n1", &exit(1, 143), 20, NOW);
    assert!(out.finished);
    assert_eq!(
        (job.state, job.reason.as_str()),
        (
            JobState::NodeFail,
            "node n2 lost contact with schedd and its fence stopped the job"
        )
    );
    let nodes: Vec<&str> = job.alloc.iter().map(|a| a.node.as_str()).collect();
    assert_eq!(nodes, ["n1", "n2"]);

    // A part that failed first decides: the fence of the other does not.
    let mut job = gang(2);
    part_ended(&mut job, "n1", &exit(2, 3), 20, NOW);
    let out = part_ended(&mut job, "n2", &fenced(2), 20, NOW);
    assert!(out.finished);
    assert_eq!((job.state, job.exit_code), (JobState::Failed, Some(3)));

    // The last part fenced after the other completed: decided like a single part.
    let mut job = gang(3);
    part_ended(&mut job, "n1", &exit(3, 0), 20, NOW);
    part_ended(&mut job, "n2", &fenced(3), 20, NOW);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
}

#[test]
fn a_gpu_failure_stops_the_run_and_its_end_requeues_it_or_ends_it_node_fail() {
    use super::lifecycle::gpu_failed;
    const FAULT: &str = "XID 79: GPU has fallen off the bus";
    let mut job = JobBuilder::new(1)
        .grace(45)
        .running_on("n1", &[0, 1])
        .build();
    let ((at, kind, detail), nodes, grace) = gpu_failed(&mut job, "n1", 1, FAULT, 20, NOW).unwrap();
    assert_eq!((at, kind, grace), (NOW, JobEventKind::GpuFailed, 45));
    assert_eq!(nodes, ["n1"]);
    assert!(detail.ends_with("requeued once it has stopped"), "{detail}");
    assert_eq!(job.reason, format!("stopping: GPU 1 of n1 failed: {FAULT}"));
    // Asked again (the next report): it is being stopped already.
    assert!(gpu_failed(&mut job, "n1", 1, FAULT, 20, NOW).is_none());
    // Killed after its grace, or a nonzero exit: the failure decides, not the exit.
    let end = PartEnd {
        signal: Some(9),
        killed: true,
        checkpoint_saved: true,
        ..exit(1, 137)
    };
    let out = part_ended(&mut job, "n1", &end, 20, NOW);
    assert!(!out.finished);
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert_eq!(job.last_checkpoint, Some(T0 + 5_000));
    assert_eq!(
        out.events.last().unwrap().2,
        format!("restart 1: GPU 1 of n1 failed: {FAULT}")
    );

    // Past max_requeues: NODE_FAIL, saying why it was not requeued.
    let mut job = JobBuilder::new(2).running_on("n1", &[0]).build();
    job.restart_count = 3;
    let (event, _, _) = gpu_failed(&mut job, "n1", 0, FAULT, 3, NOW).unwrap();
    assert!(
        event.2.contains("it ends NODE_FAIL once stopped"),
        "{}",
        event.2
    );
    let end = PartEnd {
        restart_count: 3,
        ..exit(2, 0)
    };
    let out = part_ended(&mut job, "n1", &end, 3, NOW);
    assert!(out.finished);
    assert_eq!(job.state, JobState::NodeFail);
    assert_eq!(
        job.reason,
        format!(
            "GPU 0 of n1 failed: {FAULT} (not requeued: it was requeued 3 times already \
             (scheduler.max_requeues = 3))"
        )
    );

    // A job being cancelled is cancelled, GPU or not.
    let mut job = JobBuilder::new(3).running_on("n1", &[0]).build();
    cancelled_by(&mut job, "bob");
    assert!(gpu_failed(&mut job, "n1", 0, FAULT, 20, NOW).is_none());
    part_ended(&mut job, "n1", &exit(3, 143), 20, NOW);
    assert_eq!(job.state, JobState::Cancelled);
}
