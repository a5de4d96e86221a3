//! Fencing: the node's supervisor stops a job on its own once the node's lease runs out (no
//! agent renews it here), and does nothing while the lease says "off", is missing or cannot
//! be understood.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};
use support::*;
use ysched_common::time::now_ms;
use ysched_noded::launch::lease::{boottime_ms, Lease};

/// One test per mode: `name::detected` and `name::process_groups`.
macro_rules! in_both_modes {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn detected() {
                super::$name(super::Mode::Detected, 0).await
            }
            #[tokio::test]
            async fn process_groups() {
                super::$name(super::Mode::ProcessGroups, 1).await
            }
        }
    };
}

fn lease_of(fx: &Fixture) -> std::path::PathBuf {
    fx.spool.path().join("lease")
}

in_both_modes!(the_supervisor_fences_its_job_when_the_lease_runs_out);
/// A job that saves a checkpoint on SIGTERM and exits (its background child dies of the
/// SIGTERM too), and one that ignores SIGTERM. The lease runs out 1.5 s after they start:
/// both get SIGTERM then, the second SIGKILL a grace (1 s) later; both are reported fenced.
async fn the_supervisor_fences_its_job_when_the_lease_runs_out(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    check_containment(&launcher, mode);
    let (saver_id, stubborn_id) = (3000 + 2 * offset, 3001 + 2 * offset);

    let mut saver = fx.job(
        saver_id,
        "#!/bin/sh\n\
         trap 'echo saved > \"$YS_CHECKPOINT_DIR/ck\"; echo got-term; exit 0' TERM\n\
         sh -c 'echo ready; exec sleep 100' &\n\
         wait\n",
    );
    saver.grace_secs = 1;
    saver.checkpoint_dir = fx
        .workdir()
        .join(format!("ck{saver_id}"))
        .to_string_lossy()
        .into_owned();
    let mut stubborn = fx.job(
        stubborn_id,
        "#!/bin/sh\n\
         trap 'echo got-term' TERM\n\
         echo ready\n\
         while :; do sleep 0.1; done\n",
    );
    stubborn.grace_secs = 1;

    let deadline_epoch_ms = now_ms() + 1500;
    Lease::Until(boottime_ms() + 1500)
        .write(&lease_of(&fx))
        .unwrap();
    launcher.launch(saver).unwrap();
    launcher.launch(stubborn).unwrap();
    for id in [saver_id, stubborn_id] {
        events.wait_for_start(id).await;
        fx.wait_for_output(&format!("ysched-{id}.out"), "ready")
            .await;
    }

    let saved = events.wait_for_end(saver_id).await.finished;
    let killed = events.wait_for_end(stubborn_id).await.finished;
    let now = now_ms();
    for finished in [&saved, &killed] {
        assert!(finished.fenced, "{finished:?}");
        assert!(
            !finished.stop_requested && !finished.timed_out,
            "{finished:?}"
        );
        assert!(
            finished.term_time_ms >= deadline_epoch_ms - 50
                && finished.term_time_ms <= deadline_epoch_ms + 1500,
            "SIGTERM at {} for a lease running out at {deadline_epoch_ms}",
            finished.term_time_ms
        );
        let out = fx.output(&format!("ysched-{}.out", finished.job_id));
        assert!(out.contains("got-term"), "its SIGTERM handler ran: {out:?}");
        // The node's supervisor logs for every job.
        let log = std::fs::read_to_string(fx.spool.path().join("supervisor.log")).unwrap();
        assert!(log.contains("fence: the node's lease ran out"), "{log}");
    }
    assert_eq!(saved.exit_code, Some(0), "{saved:?}");
    assert!(!saved.killed && saved.checkpoint_saved, "{saved:?}");
    assert_eq!(killed.signal, Some(libc::SIGKILL), "{killed:?}");
    assert!(killed.killed && !killed.checkpoint_saved, "{killed:?}");
    // Its SIGTERM, its grace, its SIGKILL, and a little slack.
    let grace_end = killed.term_time_ms + 1000;
    assert!(
        killed.end_time_ms >= grace_end - 50 && now <= grace_end + 3000,
        "killed at {}, reported by {now}, grace ending at {grace_end}",
        killed.end_time_ms
    );
    assert!(launcher.running_jobs().is_empty());
}

/// Nothing is fenced while the lease says "off", is missing, or is unreadable.
#[tokio::test]
async fn no_fence_without_a_deadline() {
    let off = Fixture::new();
    let absent = Fixture::new();
    let garbage = Fixture::new();
    Lease::Off.write(&lease_of(&off)).unwrap();
    std::fs::write(lease_of(&garbage), "soon\n").unwrap();
    let mut launched = Vec::new();
    for (fx, job_id) in [(&off, 3100), (&absent, 3101), (&garbage, 3102)] {
        let (launcher, events) = fx.launcher();
        let mut job = fx.job(job_id, "#!/bin/sh\nsleep 2.5\nexit 7\n");
        job.grace_secs = 1;
        launcher.launch(job).unwrap();
        launched.push((fx, job_id, launcher, events));
    }
    let started = Instant::now();
    for (fx, job_id, _launcher, events) in &mut launched {
        let finished = events.wait_for_end(*job_id).await.finished;
        assert_eq!(finished.exit_code, Some(7), "{finished:?}");
        assert!(
            !finished.fenced && finished.term_time_ms == 0,
            "{finished:?}"
        );
        let log = std::fs::read_to_string(fx.spool.path().join("supervisor.log")).unwrap();
        assert!(!log.contains("fence:"), "{log}");
        if *job_id == 3102 {
            assert_eq!(
                log.matches("cannot read the fence lease").count(),
                1,
                "said once: {log}"
            );
        }
    }
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(!Path::new(&lease_of(&absent)).exists());
}
