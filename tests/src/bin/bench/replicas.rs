//! The `replicas` group: what three schedd replicas cost and what a failover
//! looks like to a client. The gap a submitting client sees when the leader is killed
//! (`SIGKILL`), over `REPLICAS_ROUNDS` (10) rounds; and `ysub`'s latency and sequential
//! rate with three replicas against one schedd, measured alternately on the same machine.

use crate::figure::{percentile, Figure};
use crate::setup::env_usize;
use nix::sys::signal::Signal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ysched_tests::*;

/// Submits in one batch of the latency comparison, per setup and round.
const SUBMITS_PER_BATCH: usize = 50;
/// Batches per setup, alternating between one schedd and three replicas.
const BATCHES: usize = 4;

pub fn replicas() -> Vec<Figure> {
    let rounds = env_usize("REPLICAS_ROUNDS", 10);
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", 2, "A100"));
    let (mut leader, _) = r.leader(Duration::from_secs(30));
    wait_until(Duration::from_secs(30), "the agent registers", || {
        let out = r.run(leader, "yctl", &["nodes", "--json"]);
        out.status.success() && stdout(&out).contains("\"n1\"")
    });

    // ysub's latency, one schedd against three replicas, batch by batch in turn so that
    // both see the same machine, before the failovers (whose clients leave the replicas
    // hundreds of jobs more than the single schedd holds).
    let single = TestCluster::start(vec![FakeNode::uniform("n1", 2, "A100")]);
    let args = ["--parsable", "--hold", "--wrap", "true"];
    let (mut one, mut three) = (Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        for _ in 0..SUBMITS_PER_BATCH {
            let t = Instant::now();
            let out = single.run("ysub", &args);
            assert!(out.status.success(), "{}", stderr(&out));
            one.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        for _ in 0..SUBMITS_PER_BATCH {
            let t = Instant::now();
            let out = r.run(leader, "ysub", &args);
            assert!(out.status.success(), "{}", stderr(&out));
            three.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let mut gaps = Vec::new();
    for round in 0..rounds {
        let gap = failover_gap(&mut r, leader);
        println!("  (failover round {round}: clients saw a gap of {gap:.2} s)");
        gaps.push(gap);
        let killed = leader;
        r.start_replica(killed);
        leader = r.leader(Duration::from_secs(30)).0;
        wait_until(
            Duration::from_secs(60),
            "the killed replica caught up",
            || {
                r.cluster(leader).is_some_and(|rows| {
                    rows.iter()
                        .all(|x| x["role"] != "unreachable" && x["lag"] == 0)
                })
            },
        );
    }

    let rate = |ms: &[f64]| 1000.0 * ms.len() as f64 / ms.iter().sum::<f64>();
    let (rate_one, rate_three) = (rate(&one), rate(&three));
    println!(
        "  (ysub, {} sequential submits each: one schedd p50 {:.1} ms p99 {:.1} ms, {rate_one:.1}/s; \
         three replicas p50 {:.1} ms p99 {:.1} ms, {rate_three:.1}/s)",
        one.len(),
        percentile(&mut one, 0.5),
        percentile(&mut one, 0.99),
        percentile(&mut three, 0.5),
        percentile(&mut three, 0.99),
    );
    vec![
        Figure {
            name: "replicas: failover gap a client sees, p50",
            value: percentile(&mut gaps, 0.5),
            unit: "s",
            target: 3.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: failover gap a client sees, p99",
            value: percentile(&mut gaps, 0.99),
            unit: "s",
            target: 5.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: ysub latency, 1 schedd, p50",
            value: percentile(&mut one, 0.5),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: ysub latency, 3 replicas, p50",
            value: percentile(&mut three, 0.5),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: ysub latency, 3 replicas, p99",
            value: percentile(&mut three, 0.99),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: ysub p50, 3 replicas / 1 schedd",
            value: percentile(&mut three, 0.5) / percentile(&mut one, 0.5),
            unit: "x",
            target: 2.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: ysub p99, 3 replicas / 1 schedd",
            value: percentile(&mut three, 0.99) / percentile(&mut one, 0.99),
            unit: "x",
            target: 2.0,
            higher_is_better: false,
        },
        Figure {
            name: "replicas: sequential ysub, 1 schedd",
            value: rate_one,
            unit: "/s",
            target: 20.0,
            higher_is_better: true,
        },
        Figure {
            name: "replicas: sequential ysub, 3 replicas",
            value: rate_three,
            unit: "/s",
            target: 20.0,
            higher_is_better: true,
        },
    ]
}

/// Kills `leader` while a client submits on the other replicas' sockets (followers forward)
/// and returns the longest time between two of its acknowledged submits, in seconds.
fn failover_gap(r: &mut Replicas, leader: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (clients, stop) = (r.clients(), stop.clone());
        let others: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let n = others[i % others.len()];
                let out = clients.run_within(
                    n,
                    Duration::from_secs(10),
                    "ysub",
                    &["--parsable", "--hold", "--wrap", "true"],
                );
                if out.status.success() {
                    acked.push(Instant::now());
                } else {
                    // Its replica may be the one elected and still loading: try the other.
                    i += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            acked
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let killed = Instant::now();
    r.kill(leader, Signal::SIGKILL);
    let new = r.leader(Duration::from_secs(30)).0;
    assert_ne!(new, leader);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let acked = client.join().expect("client thread");
    assert!(
        acked.iter().any(|at| *at > killed),
        "no submit acknowledged after the kill\n{}",
        r.logs()
    );
    acked
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .fold(0.0, f64::max)
}
