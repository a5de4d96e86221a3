//! The `neighbour` group: one user floods schedd while another submits and lists; then four
//! users flood it with listings of a long history, never read and read.

use crate::figure::Figure;
use crate::setup::{env_usize, real_cluster, A100};
use ysched_tests::*;

/// One user floods schedd (see `ysched_tests::neighbour`) for `BENCH_NEIGHBOUR_SECS` (default
/// 30) while another submits and lists: the other's p99 latencies and their running job. Then
/// [`slow_readers`]'s floods.
pub fn noisy_neighbour() -> Vec<Figure> {
    let mut figures = one_user_floods();
    figures.extend(slow_readers());
    figures
}

fn one_user_floods() -> Vec<Figure> {
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

/// Four users flood a schedd with `BENCH_NEIGHBOUR_HISTORY` (default 100,000) finished jobs
/// with listings of the whole history (see `ysched_tests::slow_readers`), never read, then
/// read, for `BENCH_NEIGHBOUR_SECS` each: schedd's memory and the neighbour's p99 latencies.
fn slow_readers() -> Vec<Figure> {
    let secs = env_usize("BENCH_NEIGHBOUR_SECS", 30) as f64;
    let history = env_usize("BENCH_NEIGHBOUR_HISTORY", 100_000) as u64;
    let mut c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    let o = slow_readers::run(&mut c, history, secs);
    for line in &o.attacker_reports {
        println!("  (attacker {line})");
    }
    let show = |what: &str, seen: &neighbour::Seen| {
        println!(
            "  (neighbour {what}: {} yq, {} ysub; yq p50 {:.1} ms p99 {:.1} ms max {:.1} ms, \
             ysub p50 {:.1} ms p99 {:.1} ms max {:.1} ms)",
            seen.yq.0.len(),
            seen.ysub.0.len(),
            seen.yq.percentile(0.5),
            seen.yq.percentile(0.99),
            seen.yq.percentile(1.0),
            seen.ysub.percentile(0.5),
            seen.ysub.percentile(0.99),
            seen.ysub.percentile(1.0)
        );
        for f in seen.failures.iter().take(5) {
            println!("  (neighbour request failed: {f})");
        }
    };
    show("quiet, with the history", &o.quiet);
    show("under slow readers", &o.unread);
    show("under history floods", &o.floods);
    println!(
        "  (schedd's RSS at most {:.0} MiB under slow readers, {:.0} MiB under history \
         floods; its CPU {:.2} and {:.2} cores; alive at the end: {})",
        o.unread_rss_mib, o.floods_rss_mib, o.unread_cpu_share, o.floods_cpu_share, o.schedd_alive
    );
    let failed = (o.unread.failures.len() + o.floods.failures.len()) as f64;
    vec![
        Figure {
            name: "slow readers: schedd RSS, 4 users x 64 connections x 16 unread listings",
            value: o.unread_rss_mib,
            unit: "MiB",
            target: 512.0,
            higher_is_better: false,
        },
        Figure {
            name: "slow readers: neighbour yq --me p99",
            value: o.unread.yq.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "slow readers: neighbour ysub p99",
            value: o.unread.ysub.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "history floods (4 users): neighbour yq --me p99",
            value: o.floods.yq.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "history floods (4 users): neighbour ysub p99",
            value: o.floods.ysub.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "slow readers and history floods: neighbour requests failed",
            value: failed,
            unit: "",
            target: 0.0,
            higher_is_better: false,
        },
    ]
}
