//! The simulator and a real cluster agree: a small scripted workload runs on the real daemons
//! (fake GPUs, real processes, `sleep` for seconds) and in `ysim` with the same config, and
//! both give the same placements, the same victims and the same order of starts.
//!
//! The jobs ignore SIGTERM (`trap '' TERM`, which `sleep` inherits), so a victim is killed at
//! the end of its grace and restarts from scratch: in `ysim` terms, a checkpoint that never
//! fits in the grace and no periodic checkpoint. Events are seconds apart, so the real
//! cluster's milliseconds of latency cannot reorder them.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use ysched_common::Config;
use ysched_tests::*;
use ysim::workload::{SimJob, SimNode, Workload, SEC};
use ysim::{Decision, PolicySpec};

const A100: &str = "NVIDIA A100-SXM4-80GB";

/// (name, tier, submit offset in seconds, GPUs, seconds of work)
const JOBS: [(&str, &str, u64, u32, u64); 5] = [
    ("a", "low", 0, 4, 14),
    ("b", "low", 2, 4, 8),
    ("c", "medium", 3, 2, 4),
    ("d", "low", 4, 2, 5),
    // evicts b, the cheaper victim (3 s of work on 4 GPUs against a's 5 s), at 5; b is
    // killed at 6 (grace 1 s) and h starts in its place. At 11 h ends: c and d start there
    // (b, first in the queue, needs 4 GPUs). At 14 a ends and b starts again.
    ("h", "high", 5, 4, 5),
];
const GRACE: u32 = 1;

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What both sides are compared on.
#[derive(Debug, PartialEq)]
struct Observed {
    /// Per job id, the allocation of each run, in order (`n1 gpus [0,1,2,3]`).
    placements: BTreeMap<u64, Vec<String>>,
    /// (victim, preemptor), in order.
    victims: Vec<(u64, u64)>,
    /// (job id, run), in start order (ties, placed by the same pass, by id).
    starts: Vec<(u64, usize)>,
}

/// Run starts as (offset from the first submit in ms, job id, allocation), sorted.
fn observe(starts: Vec<(i64, u64, String)>, victims: Vec<(u64, u64)>) -> (Observed, Vec<i64>) {
    let mut starts = starts;
    starts.sort();
    let mut placements: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut order = Vec::new();
    let mut times = Vec::new();
    for (at, job, alloc) in starts {
        let runs = placements.entry(job).or_default();
        order.push((job, runs.len()));
        runs.push(alloc);
        times.push(at);
    }
    (
        Observed {
            placements,
            victims,
            starts: order,
        },
        times,
    )
}

fn real_cluster() -> (Observed, Vec<i64>, Config) {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 4, A100),
        FakeNode::uniform("n2", 4, A100),
    ]);
    let config = Config::load_from(&c.conf).expect("the test cluster's config");
    let t0 = Instant::now();
    let t0_ms = epoch_ms();
    let mut ids = Vec::new();
    for (_, tier, at, gpus, secs) in JOBS {
        let due = Duration::from_secs(at);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
        let gpus = gpus.to_string();
        let grace = GRACE.to_string();
        let wrap = format!("trap '' TERM; sleep {secs}");
        ids.push(c.submit(&["-p", tier, "-G", &gpus, "--grace", &grace, "--wrap", &wrap]));
    }
    for id in &ids {
        c.wait_state(*id, "COMPLETED", Duration::from_secs(60));
    }
    let mut starts = Vec::new();
    let mut victims = Vec::new();
    for id in &ids {
        let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        for e in v["events"].as_array().unwrap() {
            let detail = e["detail"].as_str().unwrap_or_default();
            let time = ysim::workload::csv::parse_instant(e["time"].as_str().unwrap()).unwrap();
            match e["kind"].as_str().unwrap_or_default() {
                "scheduled" => {
                    let alloc = detail.strip_prefix("on ").unwrap_or(detail).to_string();
                    starts.push((time - t0_ms, *id, alloc));
                }
                "preempting" => {
                    // "for job 5 on n2: SIGTERM, SIGKILL after 1s"
                    let preemptor = detail
                        .strip_prefix("for job ")
                        .and_then(|s| s.split_whitespace().next())
                        .and_then(|s| s.parse().ok())
                        .unwrap_or_else(|| panic!("preempting event: {detail}"));
                    victims.push((*id, preemptor));
                }
                _ => {}
            }
        }
    }
    // Event times have whole seconds; starts are seconds apart but for those of one pass,
    // which have one time: ordered by id, as the simulation's.
    let (observed, times) = observe(starts, victims);
    (observed, times, config)
}

fn simulated(config: Config) -> (Observed, Vec<i64>) {
    let user = "root";
    let nodes = ["n1", "n2"]
        .map(|name| SimNode {
            name: name.into(),
            gpus: 4,
            model: A100.into(),
            nvlink: true,
            cpus: 64,
            mem_mib: 512 * 1024,
        })
        .to_vec();
    let jobs = JOBS
        .iter()
        .map(|&(name, tier, at, gpus, secs)| SimJob {
            user: user.into(),
            account: user.into(),
            gpus,
            grace_secs: Some(GRACE),
            // Never saved within the grace: killed at its end, as `trap '' TERM` is.
            checkpoint_write_ms: 3600 * SEC,
            ..SimJob::new(name, at as i64 * SEC, tier, secs as i64 * SEC)
        })
        .collect();
    let workload = Workload {
        name: "agreement".into(),
        nodes,
        jobs,
        window_ms: 30 * SEC,
        notes: Vec::new(),
        accounts: BTreeMap::new(),
    };
    let policy = PolicySpec {
        name: "test-cluster".into(),
        config,
        fair_share: true,
    };
    let (_, out) = ysim::run_simulation(&workload, &policy);
    let mut starts = Vec::new();
    let mut victims = Vec::new();
    for d in &out.decisions {
        match d {
            Decision::Start { at, job, alloc, .. } => starts.push((*at, *job, alloc.clone())),
            Decision::Evict {
                victim, preemptor, ..
            } => victims.push((*victim, *preemptor)),
        }
    }
    observe(starts, victims)
}

#[test]
fn the_simulator_and_a_real_cluster_agree_on_placements_victims_and_start_order() {
    let (real, real_times, config) = real_cluster();
    let (sim, sim_times) = simulated(config);
    assert_eq!(real, sim, "real cluster (left) and ysim (right) disagree");
    // Not a vacuous agreement: b (id 2) was evicted by h (id 5) and ran twice.
    assert_eq!(sim.victims, [(2, 5)]);
    let all = "gpus [0,1,2,3]";
    let expected: BTreeMap<u64, Vec<String>> = [
        (1, vec![format!("n1 {all}")]),
        (2, vec![format!("n2 {all}"), format!("n1 {all}")]),
        (3, vec!["n2 gpus [0,1]".to_string()]),
        (4, vec!["n2 gpus [2,3]".to_string()]),
        (5, vec![format!("n2 {all}")]),
    ]
    .into();
    assert_eq!(sim.placements, expected);
    assert_eq!(sim.starts, [(1, 0), (2, 0), (5, 0), (3, 0), (4, 0), (2, 1)]);
    // And the virtual clock kept time with the real one: each start within 3 s.
    for (i, (r, s)) in real_times.iter().zip(&sim_times).enumerate() {
        assert!(
            (r - s).abs() <= 3000,
            "start {i} ({:?}): real at {r} ms, simulated at {s} ms",
            sim.starts[i]
        );
    }
}
