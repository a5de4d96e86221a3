//! The `power_loss` group: the suite's power-loss test at length, with schedd killed while
//! submits are in flight.

use crate::figure::Figure;
use crate::setup::{env_usize, held_spec, A100};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ysched_proto as pb;
use ysched_tests::power_loss::PowerLoss;
use ysched_tests::*;

/// `POWER_LOSS_ROUNDS` (10) rounds: 32 API clients submit held jobs as fast as they can, and
/// after 0.5–2 s (a different time each round) the power goes: schedd killed with SIGKILL, its
/// state directory cut back to what it synced (see `ysched_tests::power_loss`). schedd
/// restarts, and every submit acknowledged before the kill must be listed. The first round starts on an empty state
/// directory; the others go on from what the previous power loss left.
pub fn power_loss(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use nix::sys::signal::Signal::{SIGKILL, SIGTERM};
    let rounds = env_usize("POWER_LOSS_ROUNDS", 10);
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    c.stop_schedd(SIGTERM);
    std::fs::remove_dir_all(c.state_dir()).unwrap();
    let power = PowerLoss::new(&c.state_dir(), &c.dir.path().join("power-loss-record"));
    // Private, as schedd makes it (it refuses one others may read).
    std::fs::set_permissions(
        c.state_dir(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let work = c.work.display().to_string();
    let (mut acked_total, mut lost_total) = (0, 0);
    for round in 0..rounds {
        c.set_daemon_env("schedd", power.env());
        c.start_schedd();
        c.wait_nodes_up(1);
        let acked = Arc::new(Mutex::new(Vec::new()));
        let run_for = Duration::from_millis(500 + (round as u64 * 397) % 1500);
        rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..32 {
                let (sock, acked, work) = (c.socket(), acked.clone(), work.clone());
                tasks.push(tokio::spawn(async move {
                    let Ok(mut client) = ysub::client::connect(&sock).await else {
                        return;
                    };
                    // Until the power goes: the first refused or broken call ends it.
                    while let Ok(reply) = client
                        .submit(pb::SubmitRequest {
                            spec: Some(held_spec(&work)),
                        })
                        .await
                    {
                        acked.lock().unwrap().push(reply.into_inner().job_id);
                    }
                }));
            }
            tokio::time::sleep(run_for).await;
            // Taken before the kill: a reply that arrives after it is not counted.
            let before_kill: Vec<u64> = acked.lock().unwrap().clone();
            let pid = c.schedd_pid().unwrap() as i32;
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), SIGKILL).unwrap();
            for t in tasks {
                let _ = t.await;
            }
            *acked.lock().unwrap() = before_kill;
        });
        c.stop_schedd(SIGKILL);
        let cut = power.cut();
        c.set_daemon_env("schedd", Vec::new());
        c.start_schedd();
        c.wait_nodes_up(1);
        let listed: BTreeSet<u64> = c.jobs().iter().filter_map(|j| j["id"].as_u64()).collect();
        let acked = acked.lock().unwrap().clone();
        let lost = acked.iter().filter(|id| !listed.contains(id)).count();
        println!(
            "power loss {}/{rounds} after {} ms: {} acknowledged, {lost} lost ({} files gone, {} \
             rolled back by the cut)",
            round + 1,
            run_for.as_millis(),
            acked.len(),
            cut.gone.len(),
            cut.rolled_back.len()
        );
        acked_total += acked.len();
        lost_total += lost;
        c.stop_schedd(SIGTERM);
    }
    println!(
        "power loss: {acked_total} acknowledged submits in {rounds} rounds, {lost_total} lost"
    );
    vec![Figure {
        name: "acknowledged submits lost to power losses",
        value: lost_total as f64,
        unit: "",
        target: 0.0,
        higher_is_better: false,
    }]
}
