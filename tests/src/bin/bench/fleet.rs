//! The `fleet` group: a thousand simulated agents against a real schedd, jobs run end to end.

use crate::figure::{percentile, Figure};
use crate::setup::{env_usize, held_spec, start_fleet, submit_all};
use std::time::{Duration, Instant};
use ysched_tests::*;

/// The fleet: `FLEET_NODES` (1,000) simulated 8-GPU agents in this process against a real
/// schedd; `FLEET_JOBS` (20,000) one-GPU jobs of zero duration submitted through the API by 64
/// clients, counted until every end is acknowledged; API latencies sampled meanwhile.
pub fn fleet(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use std::sync::atomic::Ordering;
    let (n_nodes, n_jobs) = (
        env_usize("FLEET_NODES", 1000),
        env_usize("FLEET_JOBS", 20_000),
    );
    let c = TestCluster::start_with_cluster_key(vec![]);
    let t = Instant::now();
    let stats = start_fleet(rt, &c, n_nodes, Duration::from_millis(0));
    let registered = t.elapsed().as_secs_f64();
    println!("  ({n_nodes} simulated agents registered in {registered:.1} s)");
    let work = c.work.to_string_lossy().into_owned();
    let t = Instant::now();
    let submit_ms = submit_all(rt, &c, n_jobs, move |_| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec.gpus = 1;
        spec
    });
    let mut submit_ms = submit_ms;
    while stats.finished.load(Ordering::Relaxed) < n_jobs as u64 {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "only {} of {n_jobs} jobs ended",
            stats.finished.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let throughput = n_jobs as f64 / t.elapsed().as_secs_f64();
    vec![
        Figure {
            name: "fleet: jobs submitted, run and ended per second",
            value: throughput,
            unit: "/s",
            target: 2000.0,
            higher_is_better: true,
        },
        Figure {
            name: "fleet: API submit latency while busy (p99)",
            value: percentile(&mut submit_ms, 0.99),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
    ]
}
