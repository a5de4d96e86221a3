//! The `fuzz` group: the fuzz client at length, and another client's latency meanwhile.

use crate::figure::{percentile, Figure};
use crate::setup::{env_usize, real_cluster, A100};
use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

/// The fuzz test at length: `BENCH_FUZZ_SECS` (default 60) of arbitrary requests to every
/// client RPC from `nobody` (`fuzz-client`, seed `BENCH_FUZZ_SEED`) against a schedd limited to
/// 1 GiB of address space, while another client's listing is timed every 50 ms.
pub fn fuzz(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let secs = env_usize("BENCH_FUZZ_SECS", 60);
    let seed = env_usize("BENCH_FUZZ_SEED", 1);
    let mut c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    c.restart_schedd_with_memory_limit(1 << 30);
    let socket = c.socket().display().to_string();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let (done, socket) = (done.clone(), c.socket());
        rt.spawn(async move {
            let mut client = ysub::client::connect(&socket).await.unwrap();
            let mut answers = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                let answered = client.list_jobs(pb::ListJobsRequest::default()).await;
                answers.push(if answered.is_ok() {
                    t.elapsed().as_secs_f64() * 1e3
                } else {
                    f64::INFINITY
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        })
    };
    let fuzzer = c.spawn_as(
        65534,
        65534,
        "fuzz-client",
        &[
            "--socket",
            &socket,
            "--seconds",
            &secs.to_string(),
            "--seed",
            &seed.to_string(),
        ],
    );
    let out = fuzzer.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers = rt.block_on(probe).unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let alive = c.schedd_alive();
    println!(
        "  (fuzz, {secs} s, seed {seed}: {} requests, schedd {}; another client's answers p99 \
         {:.0} ms)",
        stats["requests"],
        if alive { "alive" } else { "DEAD" },
        percentile(&mut answers.clone(), 0.99)
    );
    vec![Figure {
        name: "another client's slowest answer while fuzzed",
        value: if alive {
            answers.iter().cloned().fold(0.0, f64::max)
        } else {
            f64::INFINITY
        },
        unit: "ms",
        target: 1000.0,
        higher_is_better: false,
    }]
}
