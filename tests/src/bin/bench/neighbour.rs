//! The `neighbour` group: one user floods schedd while another submits and lists.

use crate::figure::Figure;
use crate::setup::{env_usize, real_cluster, A100};
use ysched_tests::*;

/// One user floods schedd (see `ysched_tests::neighbour`) for `BENCH_NEIGHBOUR_SECS` (default
/// 30) while another submits and lists: the other's p99 latencies and their running job.
pub fn noisy_neighbour() -> Vec<Figure> {
    let secs = env_usize("BENCH_NEIGHBOUR_SECS", 30) as f64;
    let c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    let o = neighbour::run(&c, secs);
    for line in &o.attacker_reports {
        println!("  (attacker {line})");
    }
    println!(
        "  (neighbour quiet: yq --me p50 {:.1} ms p99 {:.1} ms, ysub p50 {:.1} ms p99 {:.1} ms)",
        o.quiet.yq.percentile(0.5),
        o.quiet.yq.percentile(0.99),
        o.quiet.ysub.percentile(0.5),
        o.quiet.ysub.percentile(0.99)
    );
    println!(
        "  (neighbour flooded: {} yq, {} ysub; yq p50 {:.1} ms max {:.1} ms, ysub p50 {:.1} ms max {:.1} ms)",
        o.flooded.yq.0.len(),
        o.flooded.ysub.0.len(),
        o.flooded.yq.percentile(0.5),
        o.flooded.yq.percentile(1.0),
        o.flooded.ysub.percentile(0.5),
        o.flooded.ysub.percentile(1.0)
    );
    for f in o.flooded.failures.iter().take(5) {
        println!("  (neighbour request failed: {f})");
    }
    println!(
        "  (neighbour's job: {}; schedd alive: {}, RSS {:.0} MiB)",
        o.job_detail, o.schedd_alive, o.schedd_rss_mib
    );
    let yes = |b: bool| if b { 1.0 } else { 0.0 };
    vec![
        Figure {
            name: "flooded: neighbour yq --me p99",
            value: o.flooded.yq.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "flooded: neighbour ysub p99",
            value: o.flooded.ysub.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "flooded: neighbour requests failed",
            value: o.flooded.failures.len() as f64,
            unit: "",
            target: 0.0,
            higher_is_better: false,
        },
        Figure {
            name: "flooded: neighbour's running job untouched (1 = yes)",
            value: yes(o.job_untouched && o.schedd_alive),
            unit: "",
            target: 1.0,
            higher_is_better: true,
        },
    ]
}
