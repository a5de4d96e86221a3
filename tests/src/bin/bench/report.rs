//! The `report` group: `yctl report` over a million recorded runs.

use crate::figure::{median, Figure};
use crate::setup::{env_usize, A100};
use std::time::{Duration, Instant};
use ysched_tests::*;

/// `yctl report` over `REPORT_RUNS` (default 1,000,000) recorded runs of the last seven
/// days: written straight into the stopped schedd's store (as the events that end runs write
/// them), then the report timed as a user runs it, whole CLI process included.
pub fn report() -> Vec<Figure> {
    use ysched_common::{JobId, RunRecord};
    let n_runs = env_usize("REPORT_RUNS", 1_000_000);
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ]);
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let t = Instant::now();
    {
        let store =
            ysched_schedd::store::Store::open(&c.dir.path().join("state")).expect("open the store");
        let now = ysched_common::time::now_ms();
        let week: i64 = 7 * 86_400_000;
        let tiers = ["critical", "high", "medium", "low"];
        // A fixed pseudo-random sequence (64-bit LCG): the same runs every time.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        let mut batch = ysched_schedd::store::Batch::default();
        for i in 0..n_runs as u64 {
            let end = now - 1 - next(week as u64) as i64;
            let start = end - 60_000 - next(6 * 3_600_000) as i64;
            let preempted = next(20) == 0;
            let account = next(50);
            batch.put_run(&RunRecord {
                job_id: JobId(i + 1),
                restart_count: next(2) as u32,
                account: format!("team{account:02}"),
                user: format!("user{:03}", account * 10 + next(10)),
                uid: 10_000 + account as u32,
                tier: tiers[next(4) as usize].to_string(),
                gpus: 1 + next(8) as u32,
                cpus: 8,
                queued_at: start - next(3_600_000) as i64,
                start,
                end,
                outcome: if preempted { "REQUEUED" } else { "COMPLETED" }.to_string(),
                preempted_by: preempted.then(|| JobId(n_runs as u64 + 1 + next(1000))),
                preemptor_account: preempted.then(|| format!("team{:02}", next(50))),
                checkpoint_saved: preempted && next(2) == 0,
                lost_gpu_secs: if preempted { next(3600) } else { 0 },
            });
            if (i + 1) % 50_000 == 0 {
                store.apply(std::mem::take(&mut batch)).expect("write runs");
            }
        }
        store.apply(batch).expect("write runs");
        rt_flush(&store);
        assert_eq!(store.run_count(), n_runs, "every run recorded once");
    }
    println!(
        "  ({n_runs} runs written to the store in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    // sled's flusher may hold the lock a moment after the store is dropped.
    std::thread::sleep(Duration::from_secs(2));
    c.start_schedd();
    c.wait_nodes_up(2);
    let mut took = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let out = c.run("yctl", &["report", "--since", "7d", "--json"]);
        took.push(t.elapsed().as_secs_f64());
        assert!(out.status.success(), "yctl report: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["cluster"]["runs"].as_u64().unwrap() > 0);
    }
    let html = c.work.join("report.html");
    let t = Instant::now();
    let out = c.run(
        "yctl",
        &["report", "--since", "7d", "--html", html.to_str().unwrap()],
    );
    assert!(out.status.success(), "yctl report --html: {}", stderr(&out));
    println!(
        "  (yctl report: {:.2} / {:.2} / {:.2} s; --html {:.2} s, {} KiB)",
        took[0],
        took[1],
        took[2],
        t.elapsed().as_secs_f64(),
        std::fs::metadata(&html)
            .map(|m| m.len() / 1024)
            .unwrap_or(0)
    );
    vec![Figure {
        name: "yctl report, 1,000,000 recorded runs (median)",
        value: median(&mut took),
        unit: "s",
        target: 2.0,
        higher_is_better: false,
    }]
}

/// Flushes `store` from this synchronous code.
fn rt_flush(store: &ysched_schedd::store::Store) {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.flush())
        .expect("flush");
}
