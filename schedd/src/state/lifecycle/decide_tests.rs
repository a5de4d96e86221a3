//! The final-state decision table, row by row: which fact wins over which.

use super::decide::{decide, Decision, DecisiveEnd, Fate, RunEnd};
use ysched_common::{JobId, JobState, StopReason};

fn exited(code: i32) -> DecisiveEnd {
    DecisiveEnd {
        exit_code: Some(code),
        how: format!("exit code {code}"),
        ..DecisiveEnd::default()
    }
}

fn run_end<'a>(stop: Option<&'a StopReason>, decisive: DecisiveEnd) -> RunEnd<'a> {
    RunEnd {
        node: "n1",
        fence_decides: false,
        stop,
        decisive,
        checkpoint_saved: true,
        requeue_refusal: None,
        mem_mib: 0,
    }
}

fn refused(mut end: RunEnd<'_>) -> RunEnd<'_> {
    end.requeue_refusal = Some("the job was submitted with --no-requeue".into());
    end
}

fn requeued(why: &str) -> Decision {
    Decision {
        fate: Fate::Requeue { why: why.into() },
        keeps_checkpoint: true,
    }
}

fn final_state(state: JobState, reason: &str, keeps_checkpoint: bool) -> Decision {
    Decision {
        fate: Fate::Final {
            state,
            reason: reason.into(),
        },
        keeps_checkpoint,
    }
}

#[test]
fn a_run_stopped_by_someone_else_is_requeued_when_it_may_be() {
    let fenced = RunEnd {
        fence_decides: true,
        ..run_end(None, exited(137))
    };
    assert_eq!(
        decide(&fenced),
        requeued(": node n1 lost contact with schedd and its fence stopped the job")
    );
    assert_eq!(
        decide(&refused(fenced)),
        final_state(
            JobState::NodeFail,
            "node n1 lost contact with schedd and its fence stopped the job",
            true
        )
    );
    // A requeue asked for is not the scheduler's: refused or not, it is requeued.
    let asked = StopReason::Requeue { by: "alice".into() };
    let expected = requeued(" as requested by alice (checkpoint_saved=true)");
    assert_eq!(decide(&run_end(Some(&asked), exited(0))), expected);
    assert_eq!(decide(&refused(run_end(Some(&asked), exited(0)))), expected);
    let gpu = StopReason::GpuFailed {
        node: "n1".into(),
        gpu: 3,
        fault: "XID 79".into(),
    };
    assert_eq!(
        decide(&run_end(Some(&gpu), exited(0))),
        requeued(": GPU 3 of n1 failed: XID 79")
    );
    assert_eq!(
        decide(&refused(run_end(Some(&gpu), exited(0)))),
        final_state(
            JobState::NodeFail,
            "GPU 3 of n1 failed: XID 79 (not requeued: the job was submitted with --no-requeue)",
            true
        )
    );
    let preempt = StopReason::Preempt { by: JobId(7) };
    assert_eq!(
        decide(&run_end(Some(&preempt), exited(143))),
        requeued(" after preemption by 7")
    );
    assert_eq!(
        decide(&refused(run_end(Some(&preempt), exited(143)))),
        final_state(JobState::Preempted, "preempted by 7", true)
    );
}

#[test]
fn a_run_that_ended_on_its_own_or_was_cancelled_ends_as_its_decisive_part_says() {
    let cancel = StopReason::Cancel { by: "bob".into() };
    let oom = DecisiveEnd {
        oom_on: Some("n2".into()),
        ..exited(137)
    };
    let timed_out = DecisiveEnd {
        timed_out: true,
        ..exited(143)
    };
    let launch = DecisiveEnd {
        error: "no such user".into(),
        exit_code: None,
        ..DecisiveEnd::default()
    };
    let fenced = DecisiveEnd {
        fenced: true,
        how: "node n2 lost contact with schedd and its fence stopped the job".into(),
        ..exited(137)
    };
    let with_mem = |end| RunEnd {
        mem_mib: 4096,
        ..run_end(None, end)
    };
    let rows: Vec<(RunEnd<'_>, JobState, &str)> = vec![
        (
            run_end(None, launch.clone()),
            JobState::Failed,
            "launch failed: no such user",
        ),
        // A cancel is final: a job cancelled before its launch failed ends CANCELLED, as
        // the user guide promises, its reason keeping the launch's failure.
        (
            run_end(Some(&cancel), launch.clone()),
            JobState::Cancelled,
            "cancelled by bob (its launch failed: no such user)",
        ),
        (
            run_end(None, oom.clone()),
            JobState::OutOfMemory,
            "out of memory: the job ran out of memory on n2",
        ),
        (
            with_mem(oom.clone()),
            JobState::OutOfMemory,
            "out of memory: the job exceeded its memory limit (--mem 4G) on n2",
        ),
        // A cancel wins over the OOM killer (the cancel's SIGKILL), not over the time limit.
        (
            run_end(Some(&cancel), oom),
            JobState::Cancelled,
            "cancelled by bob",
        ),
        (
            run_end(Some(&cancel), timed_out),
            JobState::Timeout,
            "time limit reached",
        ),
        (
            run_end(Some(&cancel), exited(0)),
            JobState::Cancelled,
            "cancelled by bob",
        ),
        (
            run_end(None, fenced),
            JobState::NodeFail,
            "node n2 lost contact with schedd and its fence stopped the job",
        ),
        (run_end(None, exited(0)), JobState::Completed, ""),
        (run_end(None, exited(3)), JobState::Failed, "exit code 3"),
        (
            run_end(Some(&StopReason::NodeDrain), exited(0)),
            JobState::Completed,
            "",
        ),
    ];
    for (end, state, reason) in rows {
        // A checkpoint counts only for a run someone else stopped (and gave its grace).
        assert_eq!(
            decide(&end),
            final_state(state, reason, false),
            "{:?}",
            end.decisive
        );
    }
}
