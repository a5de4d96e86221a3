//! The `loaded` group: what users wait for on a full cluster with a deep queue.

use crate::figure::{percentile, Figure};
use crate::setup::{env_usize, held_spec, start_fleet, submit_all};
use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

/// A loaded cluster: `FLEET_NODES` (1,000) simulated 8-GPU agents kept full by
/// one-GPU jobs that end and are replaced (20–120 s each), and `LOADED_PENDING` (100,000)
/// pending jobs of two tiers and several shapes behind them, so that every job end starts a
/// pass over the whole queue. Measured meanwhile: what users wait for.
pub fn loaded(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use std::sync::atomic::Ordering;
    let (n_nodes, n_pending) = (
        env_usize("FLEET_NODES", 1000),
        env_usize("LOADED_PENDING", 100_000),
    );
    let c = TestCluster::start_with_cluster_key(vec![]);
    let stats = start_fleet(rt, &c, n_nodes, Duration::from_secs(60));
    let work = c.work.to_string_lossy().into_owned();
    let job = move |tier: &str, gpus: u32, nodes: u32, duration_ms: usize| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec.tier = tier.into();
        spec.gpus = gpus;
        spec.nodes = nodes;
        spec.env
            .insert("YS_SIM_DURATION_MS".into(), duration_ms.to_string());
        spec
    };
    let t = Instant::now();
    let fill = n_nodes * 8;
    let filler = job.clone();
    submit_all(rt, &c, fill, move |i| {
        filler("low", 1, 1, 20_000 + (i * 7919) % 100_000)
    });
    wait_until(Duration::from_secs(600), "the cluster fills", || {
        stats.started.load(Ordering::Relaxed) >= fill as u64
    });
    println!(
        "  ({n_nodes} nodes full with {fill} jobs in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let queued = job.clone();
    submit_all(rt, &c, n_pending, move |i| {
        let (gpus, nodes) = match i % 50 {
            0 => (16, 2),
            k if k % 7 == 0 => (8, 1),
            k if k % 3 == 0 => (4, 1),
            k if k % 2 == 0 => (2, 1),
            _ => (1, 1),
        };
        queued(
            if i % 3 == 0 { "medium" } else { "low" },
            gpus,
            nodes,
            30_000,
        )
    });
    println!(
        "  ({n_pending} jobs queued behind them in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    // Another user's few jobs, for `yq -u`.
    for _ in 0..5 {
        let out = c.run_as(
            65534,
            65534,
            "ysub",
            &["--hold", "--wrap", "true", "-D", "/tmp"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let submit_ms = rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        let mut lat = Vec::new();
        for _ in 0..200 {
            let spec = job("medium", 1, 1, 30_000);
            let t = Instant::now();
            client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lat
    });
    let timed = |args: &[&str]| {
        let t = Instant::now();
        let out = c.run("yq", args);
        assert!(out.status.success(), "{}", stderr(&out));
        t.elapsed().as_secs_f64() * 1e3
    };
    let mut yq_ms: Vec<f64> = (0..30).map(|_| timed(&["-u", "nobody"])).collect();
    // The job at the end of the queue: explaining it replays the whole queue ahead of it.
    let last = c.submit(&["--hold", "--wrap", "true"]);
    let hold_release = c.run("yctl", &["release", &last.to_string()]);
    assert!(hold_release.status.success(), "{}", stderr(&hold_release));
    let mut show_ms: Vec<f64> = (0..30)
        .map(|_| {
            let t = Instant::now();
            let out = c.run("yctl", &["show", "job", &last.to_string()]);
            assert!(out.status.success(), "{}", stderr(&out));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let rss = rss_mib(c.schedd_pid().unwrap());
    println!(
        "  (meanwhile {} jobs ended; submit p50 {:.1} ms; yq -u p50 {:.1} ms; show job p50 {:.1} ms)",
        stats.finished.load(Ordering::Relaxed),
        percentile(&mut submit_ms.clone(), 0.5),
        percentile(&mut yq_ms.clone(), 0.5),
        percentile(&mut show_ms.clone(), 0.5),
    );
    let mut submit_ms = submit_ms;
    vec![
        Figure {
            name: "loaded: one API submit (p99)",
            value: percentile(&mut submit_ms, 0.99),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
        Figure {
            name: "loaded: `yq -u USER` (p99)",
            value: percentile(&mut yq_ms, 0.99),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "loaded: `yctl show job`, last in queue (p99)",
            value: percentile(&mut show_ms, 0.99),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "loaded: schedd RSS",
            value: rss,
            unit: "MiB",
            target: 300.0,
            higher_is_better: false,
        },
    ]
}
