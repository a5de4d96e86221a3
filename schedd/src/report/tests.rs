//! The report's aggregation on hand-made runs: clipping to the window, counts, waits,
//! preemptions, days, groups, and what a user sees when reports are not public.

use super::*;
use crate::core::testkit::RunBuilder;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord};

const H: Millis = 3_600_000;
/// 2026-01-05T00:00:00Z, a Monday.
const MON: Millis = 1_767_571_200_000;

fn run(job: u64, account: &str, tier: &str, gpus: u32, start: Millis, end: Millis) -> RunRecord {
    RunBuilder::new(job, start, end)
        .account(account)
        .user(&format!("{account}-user"), 1000)
        .tier(tier)
        .gpus(gpus)
        .cpus(2 * gpus)
        .build()
}

fn params(by: GroupBy) -> Params {
    Params {
        from: MON,
        to: MON + 7 * DAY_MS,
        now: MON + 10 * DAY_MS,
        by,
        nodes: vec![NodeCapacity {
            gpus: 16,
            registered_at: 0,
        }],
        tier_order: ["critical", "high", "medium", "low"]
            .map(String::from)
            .to_vec(),
        all_accounts: true,
    }
}

fn group<'r>(r: &'r Report, name: &str) -> &'r Group {
    r.groups
        .iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no group {name}: {r:#?}"))
}

#[test]
fn gpu_time_is_clipped_to_the_window_and_counts_are_of_runs_ending_in_it() {
    let runs = [
        // Inside: 8 GPUs x 2 h.
        run(1, "vision", "high", 8, MON + H, MON + 3 * H),
        // A three-day job from before the window: only its time inside counts (1 day).
        run(2, "vision", "low", 4, MON - 2 * DAY_MS, MON + DAY_MS),
        // Ends after the window: its first hour counts, the run does not (it did not end).
        run(
            3,
            "nlp",
            "high",
            2,
            MON + 7 * DAY_MS - H,
            MON + 7 * DAY_MS + H,
        ),
        // Entirely after the window.
        run(4, "nlp", "high", 2, MON + 8 * DAY_MS, MON + 8 * DAY_MS + H),
    ];
    let r = build(params(GroupBy::Account), &runs, &[], |_| true);
    let v = group(&r, "vision");
    assert_eq!(v.gpu_ms, (8 * 2 * H + 4 * 24 * H) as u64);
    assert_eq!(v.cpu_ms, 2 * v.gpu_ms);
    assert_eq!((v.jobs, v.runs), (2, 2));
    let n = group(&r, "nlp");
    assert_eq!((n.gpu_ms, n.jobs, n.runs), ((2 * H) as u64, 1, 0));
    assert_eq!(r.groups[0].name, "vision", "most GPU time first");
    assert_eq!(r.cluster.used_gpu_ms, v.gpu_ms + n.gpu_ms);
    assert_eq!(r.cluster.capacity_gpu_ms, (16 * 7 * 24 * H) as u64);
    assert_eq!((r.cluster.jobs, r.cluster.runs), (3, 2));
    assert_eq!(
        v.outcomes,
        [("COMPLETED".to_string(), 2)],
        "outcomes of runs that ended in the window"
    );
}

#[test]
fn capacity_counts_each_node_from_its_first_registration() {
    // A week's window; one node of 8 GPUs there all along (registered before the window, or
    // not known), one of 4 that joined two days before the window's end, one of 2 after it.
    let mut p = params(GroupBy::Account);
    let end = p.to;
    p.nodes = vec![
        NodeCapacity {
            gpus: 8,
            registered_at: MON - 30 * DAY_MS,
        },
        NodeCapacity {
            gpus: 4,
            registered_at: end - 2 * DAY_MS - 6 * H,
        },
        NodeCapacity {
            gpus: 2,
            registered_at: end + H,
        },
    ];
    let r = build(p.clone(), &[], &[], |_| true);
    assert_eq!(r.cluster.gpus, 14, "the GPUs of the nodes known now");
    assert_eq!(
        r.cluster.capacity_gpu_ms,
        (8 * 7 * 24 * H + 4 * (2 * 24 + 6) * H) as u64
    );
    // Per day: the young node's first day counts its 18 hours, then whole days.
    let caps: Vec<u64> = r.days.iter().map(|d| d.capacity_gpu_ms).collect();
    let day = (8 * 24 * H) as u64;
    assert_eq!(
        caps,
        [
            day,
            day,
            day,
            day,
            day + (4 * 6 * H) as u64,
            day + (4 * 24 * H) as u64,
            day + (4 * 24 * H) as u64
        ]
    );
    // A cluster whose every node joined two days ago: two days of capacity, not seven.
    p.nodes = vec![NodeCapacity {
        gpus: 16,
        registered_at: end - 2 * DAY_MS,
    }];
    let r = build(p, &[], &[], |_| true);
    assert_eq!(r.cluster.capacity_gpu_ms, (16 * 2 * 24 * H) as u64);
    assert_eq!(r.days[0].capacity_gpu_ms, 0);
}

#[test]
fn running_jobs_are_charged_up_to_now() {
    let mut p = params(GroupBy::Account);
    p.now = MON + 2 * DAY_MS;
    let going = RunRecord {
        outcome: "RUNNING".into(),
        ..run(1, "vision", "high", 8, MON - DAY_MS, p.now)
    };
    let r = build(p, &[], &[going], |_| true);
    let v = group(&r, "vision");
    assert_eq!(v.gpu_ms, (8 * 2 * 24 * H) as u64);
    assert_eq!((v.running, v.runs, v.jobs), (1, 0, 1));
    // The capacity stops at now too.
    assert_eq!(r.cluster.capacity_gpu_ms, (16 * 2 * 24 * H) as u64);
    assert_eq!(r.cluster.running, 1);
    assert_eq!(r.days.len(), 2, "days up to now");
}

#[test]
fn waits_are_per_tier_by_nearest_rank_for_runs_that_started_in_the_window() {
    let mut runs = Vec::new();
    for i in 0..20u64 {
        let mut r = run(i + 1, "vision", "high", 1, MON + H, MON + 2 * H);
        r.queued_at = r.start - (i as i64 + 1) * 1_000;
        runs.push(r);
    }
    let mut critical = run(100, "nlp", "critical", 1, MON + H, MON + 2 * H);
    critical.queued_at = critical.start - 500;
    runs.push(critical);
    // Started before the window: its wait is not this window's.
    let mut old = run(101, "nlp", "critical", 1, MON - H, MON + H);
    old.queued_at = old.start - 99_000;
    runs.push(old);
    let r = build(params(GroupBy::Account), &runs, &[], |_| true);
    let high = &group(&r, "vision").waits;
    assert_eq!(
        high,
        &[Waits {
            tier: "high".into(),
            starts: 20,
            p50_ms: 10_000,
            p95_ms: 19_000,
            max_ms: 20_000
        }]
    );
    let lat = &r.cluster.start_latency;
    assert_eq!(
        lat.iter()
            .map(|w| (w.tier.as_str(), w.starts, w.p95_ms))
            .collect::<Vec<_>>(),
        [("critical", 1, 500), ("high", 20, 19_000)],
        "highest tier first"
    );
}

#[test]
fn preemptions_suffered_caused_checkpoints_and_work_lost() {
    let preemptor = run(10, "nlp", "critical", 4, MON + 2 * H, MON + 3 * H);
    let mut saved = run(1, "vision", "low", 4, MON + H, MON + 2 * H);
    saved.outcome = "REQUEUED".into();
    saved.preempted_by = Some(JobId(10));
    saved.preemptor_account = Some("nlp".into());
    saved.checkpoint_saved = true;
    saved.lost_gpu_secs = 400;
    let mut lost = saved.clone();
    lost.job_id = JobId(2);
    lost.checkpoint_saved = false;
    lost.lost_gpu_secs = 1_000;
    lost.outcome = "PREEMPTED".into();
    // Preempted by a job not in the window's runs: by account, its record names the account.
    let mut other = saved.clone();
    other.job_id = JobId(3);
    other.preempted_by = Some(JobId(77));
    other.preemptor_account = Some("infra".into());
    let runs = [saved, lost, other, preemptor];
    let r = build(params(GroupBy::Account), &runs, &[], |_| true);
    let v = group(&r, "vision");
    assert_eq!(
        (
            v.preemptions_suffered,
            v.checkpoints_saved,
            v.lost_gpu_ms,
            v.restarts
        ),
        (3, 2, 1_000_000, 2)
    );
    assert_eq!(group(&r, "nlp").preemptions_caused, 2);
    assert_eq!(group(&r, "infra").preemptions_caused, 1);
    assert_eq!(
        (
            r.cluster.preemptions,
            r.cluster.checkpoints_saved,
            r.cluster.lost_gpu_ms
        ),
        (3, 2, 1_000_000)
    );
    // By user and by tier the preemptor's own run tells its group.
    let r = build(params(GroupBy::Tier), &runs, &[], |_| true);
    assert_eq!(group(&r, "critical").preemptions_caused, 2);
    assert_eq!(group(&r, "low").preemptions_suffered, 3);
    let r = build(params(GroupBy::User), &runs, &[], |_| true);
    assert_eq!(group(&r, "nlp-user").preemptions_caused, 2);
}

#[test]
fn days_split_gpu_time_and_capacity_per_utc_day_and_group() {
    let mut p = params(GroupBy::Account);
    p.from = MON + 12 * H; // the first day is half in the window
    p.to = MON + 2 * DAY_MS;
    let runs = [
        run(1, "vision", "high", 2, MON + 20 * H, MON + 28 * H),
        run(2, "nlp", "high", 1, MON + DAY_MS + H, MON + DAY_MS + 2 * H),
    ];
    let r = build(p, &runs, &[], |_| true);
    assert_eq!(r.days.len(), 2);
    let (d0, d1) = (&r.days[0], &r.days[1]);
    assert_eq!((d0.start_ms, d1.start_ms), (MON, MON + DAY_MS));
    assert_eq!(d0.capacity_gpu_ms, (16 * 12 * H) as u64);
    assert_eq!(d1.capacity_gpu_ms, (16 * 24 * H) as u64);
    assert_eq!(d0.used_gpu_ms, (2 * 4 * H) as u64);
    assert_eq!(d1.used_gpu_ms, (2 * 4 * H + H) as u64);
    assert_eq!(d0.groups, [("vision".to_string(), (2 * 4 * H) as u64)]);
    assert_eq!(
        d1.groups,
        [
            ("vision".to_string(), (2 * 4 * H) as u64),
            ("nlp".to_string(), H as u64)
        ],
        "in the order of the groups"
    );
}

#[test]
fn a_private_report_shows_only_the_callers_accounts_and_the_whole_cluster() {
    let mut p = params(GroupBy::Account);
    p.all_accounts = false;
    let runs = [
        run(1, "vision", "high", 8, MON + H, MON + 3 * H),
        run(2, "nlp", "high", 2, MON + H, MON + 2 * H),
    ];
    let mut asked = Vec::new();
    let r = build(p.clone(), &runs, &[], |a: &str| {
        asked.push(a.to_string());
        a == "nlp"
    });
    assert_eq!(asked, ["vision", "nlp"], "asked once per account");
    assert_eq!(
        r.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["nlp"]
    );
    assert_eq!(r.cluster.used_gpu_ms, (8 * 2 * H + 2 * H) as u64);
    assert!(r
        .days
        .iter()
        .all(|d| d.groups.iter().all(|(n, _)| n == "nlp")));
    p.by = GroupBy::User;
    let r = build(p, &runs, &[], |a: &str| a == "nlp");
    assert_eq!(
        r.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["nlp-user"]
    );
}

#[test]
fn group_by_parses_its_names() {
    assert_eq!(GroupBy::parse(""), Ok(GroupBy::Account));
    assert_eq!(GroupBy::parse("User"), Ok(GroupBy::User));
    assert_eq!(GroupBy::parse("tier"), Ok(GroupBy::Tier));
    assert!(GroupBy::parse("node")
        .unwrap_err()
        .contains("account, user or tier"));
}
