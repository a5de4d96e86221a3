//! End-to-end tests of the simulator: determinism, a scenario small enough to compute by
//! hand, and the agents' model of stops, checkpoints and time limits.

use crate::outcome::Decision;
use crate::policy::builtin;
use crate::workload::{factory, SimJob, SimNode, Workload, MIN, SEC, WEEK};
use crate::{compare, output, run_simulation};
use std::collections::BTreeMap;

fn nodes(n: u32, gpus: u32) -> Vec<SimNode> {
    (1..=n)
        .map(|i| SimNode {
            name: format!("n{i}"),
            gpus,
            model: "NVIDIA A100-SXM4-80GB".into(),
            nvlink: true,
            cpus: 64,
            mem_mib: 512 * 1024,
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn job(
    name: &str,
    tier: &str,
    submit_min: i64,
    gpus: u32,
    minutes: i64,
    interval_min: i64,
    write_secs: i64,
    grace: u32,
) -> SimJob {
    SimJob {
        gpus,
        checkpoint_interval_ms: interval_min * MIN,
        checkpoint_write_ms: write_secs * SEC,
        grace_secs: Some(grace),
        ..SimJob::new(name, submit_min * MIN, tier, minutes * MIN)
    }
}

/// 3 nodes of 4 GPUs, 6 jobs, one preemption (see `hand_computed_scenario`).
fn hand_workload() -> Workload {
    Workload {
        name: "hand".into(),
        nodes: nodes(3, 4),
        jobs: vec![
            // a: low, checkpoints every 10 min, writes one in 30 s: the cheapest victim at 15.
            job("a", "low", 0, 4, 60, 10, 30, 60),
            job("c", "medium", 0, 4, 30, 0, 0, 30),
            // b: low, never checkpoints, started at 1: 14 min of work to lose at 15.
            job("b", "low", 1, 4, 120, 0, 300, 60),
            job("d", "medium", 10, 4, 20, 0, 0, 30),
            job("e", "high", 15, 4, 30, 0, 0, 30),
            job("f", "low", 20, 4, 10, 0, 0, 30),
        ],
        window_ms: 120 * MIN,
        notes: Vec::new(),
        accounts: BTreeMap::new(),
    }
}

/// By hand, in minutes (ids: a=1, c=2, b=3, d=4, e=5, f=6):
/// - 0: c (medium) and a (low) start, c first in queue order; 1: b starts on the third node.
/// - 10: d (medium) waits: medium may not preempt. a writes its periodic checkpoint.
/// - 15: e (high) evicts a, the cheapest victim (5 min since its checkpoint, against b's 14;
///   c is medium, dearer than any low job). a writes its checkpoint in 30 s (grace 60 s):
///   saved, it exits at 15:30 and is requeued with 15 min of its 60 done.
/// - 15:30: e starts where a was (latency 30 s).
/// - 30: c ends; d starts (latency 20 min); a and f (low) wait.
/// - 45:30: e ends; a resumes (45 min left, until 90:30), ahead of f (submitted later).
/// - 50: d ends; f starts (latency 30 min), ends at 60. b ends at 121.
///
/// GPU-minutes in [0, 120): a 15.5 + 45, c 30, b 119, e 30, d 20, f 10, each times 4 GPUs:
/// 1078 of 1440.
#[test]
fn hand_computed_scenario() {
    let w = hand_workload();
    let policy = builtin("preempt", &BTreeMap::new()).unwrap();
    let (r, out) = run_simulation(&w, &policy);
    let at = |m: f64| (m * MIN as f64) as i64;
    let starts: Vec<(u64, u32, i64, String)> = out
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Start {
                at,
                job,
                restart,
                alloc,
            } => Some((*job, *restart, *at, alloc.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (2, 0, 0, "n1 gpus [0,1,2,3]".to_string()),
            (1, 0, 0, "n2 gpus [0,1,2,3]".to_string()),
            (3, 0, at(1.0), "n3 gpus [0,1,2,3]".to_string()),
            (5, 0, at(15.5), "n2 gpus [0,1,2,3]".to_string()),
            (4, 0, at(30.0), "n1 gpus [0,1,2,3]".to_string()),
            (1, 1, at(45.5), "n2 gpus [0,1,2,3]".to_string()),
            (6, 0, at(50.0), "n1 gpus [0,1,2,3]".to_string()),
        ]
    );
    let evictions: Vec<&Decision> = out
        .decisions
        .iter()
        .filter(|d| matches!(d, Decision::Evict { .. }))
        .collect();
    assert_eq!(
        evictions,
        [&Decision::Evict {
            at: at(15.0),
            victim: 1,
            preemptor: 5,
            node: "n2".into()
        }]
    );
    // Every job completed; a after one restart, having lost nothing.
    assert_eq!(r.completed, 6);
    assert_eq!(out.jobs[0].restarts, 1);
    assert_eq!(out.jobs[0].lost_gpu_ms, BTreeMap::from([(0, 0)]));
    assert_eq!(r.preemptions, 1);
    assert_eq!(r.checkpoints_saved, 1);
    assert_eq!(r.checkpoint_success, Some(1.0));
    assert_eq!(r.lost_gpu_hours, 0.0);
    // schedd's own estimate counts from the last checkpoint it heard of (10 min) to the end
    // of the run (15:30): 330 s on 4 GPUs.
    assert!((r.lost_gpu_hours_schedd_estimate - 1320.0 / 3600.0).abs() < 1e-9);
    assert_eq!(r.restarts, 1);
    assert!((r.restarts_per_week - (WEEK as f64 / (120 * MIN) as f64)).abs() < 1e-9);
    assert!(
        (r.utilization - 1078.0 / 1440.0).abs() < 1e-12,
        "{}",
        r.utilization
    );
    assert!((r.makespan_hours - 121.0 / 60.0).abs() < 1e-12);
    let tier = |name: &str| r.tiers.iter().find(|t| t.tier == name).unwrap();
    let names: Vec<&str> = r.tiers.iter().map(|t| t.tier.as_str()).collect();
    assert_eq!(names, ["high", "medium", "low"]);
    let (high, medium, low) = (tier("high"), tier("medium"), tier("low"));
    assert_eq!(
        (high.latency_mean_s, high.latency_p50_s, high.latency_p95_s),
        (Some(30.0), Some(30.0), Some(30.0))
    );
    assert_eq!(
        (
            medium.latency_mean_s,
            medium.latency_p50_s,
            medium.latency_p95_s
        ),
        (Some(600.0), Some(0.0), Some(1200.0))
    );
    assert_eq!(
        (low.latency_mean_s, low.latency_p50_s, low.latency_p95_s),
        (Some(600.0), Some(0.0), Some(1800.0))
    );
    assert_eq!((low.preempted, low.checkpoints_saved), (1, 1));
    assert_eq!(high.preempted + medium.preempted, 0);
    assert_eq!((low.restarts, high.restarts + medium.restarts), (1, 0));
    assert!((low.restarts_per_week - r.restarts_per_week).abs() < 1e-9);
}

/// The same scenario when a's checkpoint does not fit in its grace: it is killed at the end
/// of it and resumes from its periodic checkpoint (10 min): 5 min on 4 GPUs lost.
#[test]
fn a_victim_whose_checkpoint_does_not_fit_loses_the_work_since_its_last_one() {
    let mut w = hand_workload();
    w.jobs[0].checkpoint_write_ms = 90 * SEC; // grace 60 s
    let policy = builtin("preempt", &BTreeMap::new()).unwrap();
    let (r, out) = run_simulation(&w, &policy);
    assert_eq!(r.preemptions, 1);
    assert_eq!(r.checkpoint_success, Some(0.0));
    assert_eq!(out.jobs[0].lost_gpu_ms, BTreeMap::from([(0, 4 * 5 * MIN)]));
    assert!((r.lost_gpu_hours - 20.0 / 60.0).abs() < 1e-12);
    // Killed at 16:00, e starts then; a resumes at 46:00 with 50 min left.
    let a_restart = out.decisions.iter().find_map(|d| match d {
        Decision::Start {
            job: 1,
            restart: 1,
            at,
            ..
        } => Some(*at),
        _ => None,
    });
    assert_eq!(a_restart, Some(46 * MIN));
    let a_end = out
        .runs
        .iter()
        .filter(|run| run.job_id.0 == 1)
        .map(|run| run.end)
        .max();
    assert_eq!(a_end, Some(96 * MIN));
}

/// Without preemption, e waits for the first job to end (c at 30); a never restarts.
#[test]
fn tiers_without_preemption_make_the_high_job_wait() {
    let w = hand_workload();
    let (r, out) = run_simulation(&w, &builtin("tiers", &BTreeMap::new()).unwrap());
    assert_eq!(r.preemptions, 0);
    assert_eq!(r.checkpoint_success, None);
    assert_eq!(out.jobs[4].first_start, Some(30 * MIN));
    // fifo: d (medium, submitted at 10) goes before e (high, at 15), which starts when d
    // ends (50), before f.
    let (_, out) = run_simulation(&w, &builtin("fifo", &BTreeMap::new()).unwrap());
    assert_eq!(out.jobs[3].first_start, Some(30 * MIN));
    assert_eq!(out.jobs[4].first_start, Some(50 * MIN));
    assert_eq!(out.jobs[5].first_start, Some(60 * MIN));
}

#[test]
fn a_run_past_its_time_limit_ends_timeout_and_unknown_tiers_are_refused() {
    let mut w = hand_workload();
    w.jobs[2].time_limit_secs = Some(3600); // b needs 120 min
    w.jobs[5].tier = "bronze".into();
    let (r, out) = run_simulation(&w, &builtin("preempt", &BTreeMap::new()).unwrap());
    assert_eq!(out.jobs[2].final_state.as_deref(), Some("TIMEOUT"));
    // SIGTERM at 61 min, then its grace (60 s): its checkpoint takes 300 s.
    let b_end = out
        .runs
        .iter()
        .find(|run| run.job_id.0 == 3)
        .map(|run| run.end);
    assert_eq!(b_end, Some(62 * MIN));
    assert_eq!(r.refused, 1);
    assert!(out.jobs[5].refused.as_deref().unwrap().contains("bronze"));
    assert_eq!(r.other_ends.get("TIMEOUT"), Some(&1));
}

/// Two runs, identical output: tables, JSON and HTML, byte for byte.
#[test]
fn determinism() {
    let opts = factory::Options {
        nodes: 4,
        days: 2.0,
        seed: 11,
    };
    let policies: Vec<_> = crate::policy::BUILTIN
        .iter()
        .map(|p| builtin(p, &factory::accounts()).unwrap())
        .collect();
    let run = || {
        let w = factory::generate(&opts);
        let report = compare(&w, &policies, opts.seed, |_, _| {});
        (
            output::table(&report),
            output::json(&report),
            output::html(&report).unwrap(),
        )
    };
    let first = run();
    assert_eq!(first, run());
    // It did something worth comparing: preemptions under `preempt`, none under `tiers`.
    let w = factory::generate(&opts);
    let report = compare(&w, &policies, opts.seed, |_, _| {});
    let p = |name: &str| report.policies.iter().find(|r| r.policy == name).unwrap();
    assert_eq!(p("tiers").preemptions, 0);
    assert!(p("preempt").preemptions > 0);
    assert!(first.2.contains("<svg") && !first.2.contains("<script"));
}

#[test]
fn a_csv_trace_replays() {
    let text = "job_id,submit_time,tier,account,user,gpus,duration,checkpoint_interval,\
                checkpoint_write,grace\n\
                t1,2026-01-05T00:00:00Z,low,vision,ana,8,1h,10m,20s,60\n\
                t2,2026-01-05T00:30:00Z,high,nlp,bo,8,10m,,,\n";
    let w = crate::workload::csv::parse_jobs("t.csv", text, nodes(1, 8)).unwrap();
    let (r, out) = run_simulation(&w, &builtin("+backfill", &BTreeMap::new()).unwrap());
    assert_eq!(r.completed, 2);
    assert_eq!(r.preemptions, 1);
    assert_eq!(r.checkpoint_success, Some(1.0));
    // t2 waits for t1's checkpoint (20 s).
    assert_eq!(out.jobs[1].first_start, Some(30 * MIN + 20 * SEC));
    // A job without a tier is in the default one.
    let w = crate::workload::csv::parse_jobs(
        "t.csv",
        "submit_time,gpus,duration\n0,1,60\n",
        nodes(1, 8),
    )
    .unwrap();
    let (r2, _) = run_simulation(&w, &builtin("+backfill", &BTreeMap::new()).unwrap());
    assert_eq!(r2.tiers[0].tier, "medium");
    assert_eq!(r2.tiers.len(), 1);
    // The window ends at the last submit (30 min): only t1's team used GPUs in it.
    assert_eq!(r.teams.len(), 1);
    assert_eq!(
        (r.teams[0].account.as_str(), r.teams[0].share),
        ("vision", 1.0)
    );
}

#[test]
fn the_shipped_sample_trace_runs_on_its_cluster() {
    // docs/simulation.md's first example from a fresh clone: the sample in ysim/samples/.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples");
    let nodes = crate::workload::csv::read_cluster(&dir.join("nodes.csv")).unwrap();
    assert_eq!(nodes.len(), 6);
    let w = crate::workload::csv::read_jobs(&dir.join("week.csv"), nodes).unwrap();
    assert_eq!(w.jobs.len(), 240);
    let (r, _) = run_simulation(&w, &builtin("preempt", &BTreeMap::new()).unwrap());
    assert!(r.completed > 200, "{} of 240 completed", r.completed);
    assert!(
        r.preemptions > 0,
        "the sample has contention worth comparing"
    );
}

#[test]
fn a_missing_alibaba_trace_says_where_to_get_it() {
    let err = crate::workload::alibaba::read_nodes(std::path::Path::new("/nonexistent"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("github.com/alibaba/clusterdata"), "{err}");
    assert!(err.contains("ysim/samples/week.csv"), "{err}");
}

/// The hand-computed scenario with two teams: a, b and f of vision, c, d and e of nlp. Each
/// team's waits and preemptions are its jobs' own; the window (2 h) is shorter than a week,
/// so restarts are shown as totals, not extrapolated per week.
#[test]
fn teams_get_their_waits_and_preemptions_and_a_short_window_shows_restart_totals() {
    let mut w = hand_workload();
    for job in &mut w.jobs {
        job.account = if ["a", "b", "f"].contains(&job.name.as_str()) {
            "vision".into()
        } else {
            "nlp".into()
        };
    }
    let policy = builtin("preempt", &BTreeMap::new()).unwrap();
    let report = compare(&w, &[policy], 1, |_, _| {});
    let r = &report.policies[0];
    let team = |name: &str| r.team_results.iter().find(|t| t.account == name).unwrap();
    let names: Vec<&str> = r.team_results.iter().map(|t| t.account.as_str()).collect();
    assert_eq!(names, ["nlp", "vision"]);
    // vision: a and b at once, f after 30 min; a preempted once, saved, requeued.
    let v = team("vision");
    assert_eq!((v.jobs, v.started), (3, 3));
    assert_eq!(
        (v.latency_mean_s, v.latency_p50_s, v.latency_p95_s),
        (Some(600.0), Some(0.0), Some(1800.0))
    );
    assert_eq!((v.preempted, v.checkpoints_saved, v.restarts), (1, 1, 1));
    // nlp: c at once, e after 30 s, d after 20 min; never preempted.
    let n = team("nlp");
    assert_eq!(
        (n.latency_mean_s, n.latency_p50_s, n.latency_p95_s),
        (Some(410.0), Some(30.0), Some(1200.0))
    );
    assert_eq!((n.preempted, n.restarts), (0, 0));

    let text = output::table(&report);
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("policy")).unwrap();
    assert!(
        header.contains(" restarts ") && !header.contains("restarts/wk"),
        "{text}"
    );
    assert!(!text.contains("restarts/wk"), "{text}");
    assert!(
        text.contains("(100.0% saved, 0.0 GPU-h, 1 restarts)"),
        "{text}"
    );
    assert!(
        text.contains("start latency (first start - submit) by team"),
        "{text}"
    );
    let row = |name: &str, after: &str| {
        let at = text.find(after).unwrap();
        text[at..]
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("vision", "by team: mean"),
        "vision 3 10.0m / 0s / 30.0m"
    );
    assert_eq!(row("nlp", "by team: mean"), "nlp 3 6.8m / 30s / 20.0m");
    assert_eq!(
        row("vision", "preempted runs by team"),
        "vision 3 1 (1 saved, 1 restarts)"
    );
    let json: serde_json::Value = serde_json::from_str(&output::json(&report)).unwrap();
    assert_eq!(
        json["policies"][0]["team_results"][1]["latency_p95_s"],
        1800.0
    );
    assert_eq!(json["policies"][0]["team_results"][1]["preempted"], 1);
    let html = output::html(&report).unwrap();
    assert!(html.contains("Start latency by team") && html.contains("Preempted runs by team"));

    // A week or more: per week, as before.
    w.window_ms = 2 * WEEK;
    let report = compare(
        &w,
        &[builtin("preempt", &BTreeMap::new()).unwrap()],
        1,
        |_, _| {},
    );
    let text = output::table(&report);
    assert!(text.contains("restarts/wk"), "{text}");
}
