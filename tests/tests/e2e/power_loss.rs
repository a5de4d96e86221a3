//! End-to-end tests of power loss: what a daemon acknowledged or reported is
//! still there after the power goes, for schedd's state and for a node's spool.
//!
//! The daemon runs with the power-loss shim (tests/powerloss, `LD_PRELOAD`), which records
//! what each fsync/fdatasync made durable; the "power loss" is a SIGKILL, then the directory is
//! rebuilt from those records alone (`ysched_tests::power_loss`): files as of their last sync,
//! directories as of theirs, everything else gone, as LazyFS does for Jepsen.

use nix::sys::signal::Signal::{SIGCONT, SIGKILL, SIGSTOP, SIGTERM};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ysched_tests::power_loss::PowerLoss;
use ysched_tests::*;

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A first start of schedd on an empty state directory, 200 `ysub --hold` from four clients
/// at once (group commit), one of them with a script large enough to be stored apart (a sled
/// blob), then the power goes: every acknowledged job is there after the restart, and a new
/// job gets a new id.
#[test]
fn schedd_keeps_every_acknowledged_submit_after_a_power_loss() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, "A100")]);
    c.stop_schedd(SIGTERM);
    let state = c.state_dir();
    // A first start: not even the store's files are durable yet.
    std::fs::remove_dir_all(&state).unwrap();
    let power = PowerLoss::new(&state, &c.dir.path().join("power-loss-record"));
    // Private, as schedd makes it (it refuses one others may read).
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    c.set_daemon_env("schedd", power.env());
    c.start_schedd();
    c.wait_nodes_up(1);

    let small = c.script("small.sh", "#!/bin/sh\ntrue\n");
    let mut text = String::from("#!/bin/sh\n");
    while text.len() < 300 * 1024 {
        text.push_str(&format!("# {}\n", "b".repeat(1000)));
    }
    let large = c.script("large.sh", &format!("{text}true\n"));
    let acked = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for client in 0..4 {
            let (c, acked, small, large) = (&c, &acked, &small, &large);
            s.spawn(move || {
                for i in 0..50 {
                    let script = if client == 0 && i == 25 { large } else { small };
                    let id = c.submit(&["--hold", script.to_str().unwrap()]);
                    acked.lock().unwrap().push(id);
                }
            });
        }
    });
    c.stop_schedd(SIGKILL);
    let cut = power.cut();

    c.set_daemon_env("schedd", Vec::new());
    c.start_schedd();
    c.wait_nodes_up(1);
    let acked: BTreeSet<u64> = acked.into_inner().unwrap().into_iter().collect();
    assert_eq!(acked.len(), 200);
    let listed: BTreeSet<u64> = c.jobs().iter().filter_map(|j| j["id"].as_u64()).collect();
    let lost: Vec<_> = acked.difference(&listed).collect();
    assert!(
        lost.is_empty(),
        "{} of 200 acknowledged submits lost to the power loss: {lost:?}\n\
         (the power loss took {} files/directories and rolled back {})\n{}",
        lost.len(),
        cut.gone.len(),
        cut.rolled_back.len(),
        c.logs()
    );
    let next = c.submit(&["--hold", small.to_str().unwrap()]);
    assert!(
        next > *acked.last().unwrap(),
        "job id {next} reused after the power loss (highest acknowledged {})",
        acked.last().unwrap()
    );
}

/// Jobs end on a node while schedd cannot acknowledge their reports (stopped), then the node
/// loses power: after the restart, each job's end is reported as it happened (exit 3), not
/// as lost, and nothing ran twice.
#[test]
fn a_node_reports_every_job_end_it_recorded_after_a_power_loss() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 4, "A100")]);
    c.stop_agent("n1", SIGTERM);
    // The supervisor the first agent started idles on for a few seconds: the restarted agent
    // would use it, without the shim, and its syncs would go unrecorded. Gone first.
    if let Some(supervisor) = crate::hardening::supervisor_pid(&c, "n1") {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), SIGKILL).unwrap();
        let start = Instant::now();
        // Gone or a zombie (its parent, the stopped agent, is gone: reaping is init's).
        let running = || {
            std::fs::read_to_string(format!("/proc/{supervisor}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            })
        };
        while running() {
            assert!(
                start.elapsed() < SECS(10),
                "the first supervisor did not go"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let spool = c.spool_dir("n1");
    let power = PowerLoss::new(&spool, &c.dir.path().join("power-loss-record"));
    c.set_daemon_env("n1", power.env());
    c.start_agent("n1");
    c.wait_nodes_up(1);

    let script = c.script(
        "wait_for_go.sh",
        "#!/bin/sh\necho $$ > pid-$YS_JOB_ID\nwhile [ ! -e go ]; do sleep 0.05; done\nexit 3\n",
    );
    let ids: Vec<u64> = (0..6)
        .map(|_| c.submit(&["-G", "0", script.to_str().unwrap()]))
        .collect();
    let pids: Vec<i32> = ids
        .iter()
        .map(|id| {
            c.wait_state(*id, "RUNNING", SECS(30));
            let text = c.read_job_file(*id, &format!("pid-{id}"), SECS(30));
            text.trim().parse().unwrap()
        })
        .collect();

    // schedd hears nothing from now on: every end stays unacknowledged on the node.
    let schedd = nix::unistd::Pid::from_raw(c.schedd_pid().unwrap() as i32);
    nix::sys::signal::kill(schedd, SIGSTOP).unwrap();
    std::fs::write(c.path("go"), "").unwrap();
    let start = Instant::now();
    while pids
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    {
        assert!(start.elapsed() < SECS(30), "the jobs did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The agent records each end as the job's last process goes, and reports it at once.
    std::thread::sleep(SECS(2));
    // The power goes for every process: the node's supervisor (which writes its journal)
    // too.
    if let Some(supervisor) = crate::hardening::supervisor_pid(&c, "n1") {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), SIGKILL).unwrap();
    }
    c.stop_agent("n1", SIGKILL);
    nix::sys::signal::kill(schedd, SIGCONT).ok();
    c.stop_schedd(SIGKILL);
    let cut = power.cut();

    c.set_daemon_env("n1", Vec::new());
    c.start_schedd();
    c.start_agent("n1");
    for id in &ids {
        let j = c.wait_state(*id, "FAILED", SECS(30));
        assert_eq!(
            (j["exit_code"].as_i64(), j["restart_count"].as_u64()),
            (Some(3), Some(0)),
            "job {id} after the node's power loss (the power loss took {} files/directories \
             and rolled back {}): {j}\n{}",
            cut.gone.len(),
            cut.rolled_back.len(),
            c.logs()
        );
    }
}
