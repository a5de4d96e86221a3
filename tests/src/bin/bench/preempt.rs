//! The `preempt` group: preemption latencies on one node held by a low-tier job.

use crate::figure::{median, Figure};
use crate::setup::{real_cluster, A100};
use std::time::Duration;
use ysched_tests::*;

fn read_ns(p: &std::path::Path) -> u128 {
    wait_until(Duration::from_secs(30), &p.display().to_string(), || {
        p.exists()
    });
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Preemption latencies on one 4-GPU node held by one low-tier 4-GPU job.
pub fn preemption() -> Vec<Figure> {
    let c = real_cluster(vec![FakeNode::uniform("n1", 4, A100)]);
    let stamp = |name: &str| c.work.join(name);
    let write_stamp =
        |path: &std::path::Path| format!("date +%s%N > {0}.tmp && mv {0}.tmp {0}", path.display());
    let (mut to_sigterm, mut to_start, mut stubborn) = (Vec::new(), Vec::new(), Vec::new());
    let grace = 2u64;
    for round in 0..6 {
        let ignores_term = round % 2 == 1;
        let term = stamp(&format!("term-{round}"));
        let exit = stamp(&format!("exit-{round}"));
        let started = stamp(&format!("victim-up-{round}"));
        let victim = if ignores_term {
            format!(
                "#!/bin/sh\ntrap '' TERM\n{}\nwhile true; do sleep 1; done\n",
                write_stamp(&started)
            )
        } else {
            format!(
                "#!/bin/sh\ntrap '{}; {}; exit 0' TERM\n{}\nwhile true; do sleep 1; done\n",
                write_stamp(&term),
                write_stamp(&exit),
                write_stamp(&started)
            )
        };
        let script = c.script(&format!("victim-{round}.sh"), &victim);
        let vid = c.submit(&[
            "-p",
            "low",
            "-G",
            "4",
            "--no-requeue",
            "--grace",
            &grace.to_string(),
            script.to_str().unwrap(),
        ]);
        read_ns(&started);
        let pre = stamp(&format!("preemptor-{round}"));
        let t0 = now_ns();
        let pid = c.submit(&["-p", "critical", "-G", "4", "--wrap", &write_stamp(&pre)]);
        let pre_ns = read_ns(&pre);
        if ignores_term {
            stubborn.push((pre_ns - t0) as f64 / 1e6);
        } else {
            to_sigterm.push((read_ns(&term) - t0) as f64 / 1e6);
            to_start.push((pre_ns as i128 - read_ns(&exit) as i128) as f64 / 1e6);
        }
        c.wait_state(pid, "COMPLETED", Duration::from_secs(30));
        c.wait_state(vid, "PREEMPTED", Duration::from_secs(30));
    }
    vec![
        Figure {
            name: "critical submit -> victim sees SIGTERM (median)",
            value: median(&mut to_sigterm),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
        Figure {
            name: "victim exit -> preemptor start (median)",
            value: median(&mut to_start),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "stubborn victim: submit -> start minus grace (2 s)",
            value: median(&mut stubborn) - (grace * 1000) as f64,
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
    ]
}
