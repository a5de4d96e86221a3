//! Fair share over a long run, pure: the core, the usage book and a tiny simulated cluster on
//! a fake clock. Accounts submit identical streams of jobs into one tier and always keep some
//! queued, so the cluster is never idle and every free GPU goes to whoever fair share says;
//! at the end, their GPU-hours must follow their shares.

use std::collections::BTreeMap;

use ysched_common::config::AccountConfig;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord};

use super::{share_table, UsageBook};
use crate::core::testkit::{Cluster, JobBuilder, NodeBuilder, A100, HOUR, MINUTE, T0};
use crate::core::Policy;

/// Each account keeps this many jobs queued.
const QUEUED: usize = 8;
/// The simulated clock's tick: a pass, then ends and submits.
const TICK: Millis = 10 * MINUTE;

/// The stream every account submits, job after job: (GPUs, run time in ticks). Sizes that
/// always fit somewhere soon (at most half a node), so no job starves behind fragmentation.
const STREAM: [(u32, i64); 7] = [(1, 3), (2, 6), (1, 12), (4, 9), (2, 4), (1, 18), (2, 7)];

/// One submitter: account, its shares, and the tier (name, value) it submits to.
type Submitter<'a> = (&'a str, u32, &'a str, i64);

/// What the run gave each account: GPU-hours of ended runs.
type GpuHours = BTreeMap<String, f64>;

/// `submitters` send identical streams to a cluster of four 8-GPU nodes for `days`, with fair
/// share of half-life `half_life`. Every tick: ended jobs go into the book, queues are topped
/// up, and one pass runs with the factors of the moment.
fn simulate(submitters: &[Submitter<'_>], days: i64, half_life: Millis) -> GpuHours {
    let config: BTreeMap<String, AccountConfig> = submitters
        .iter()
        .map(|(name, shares, _, _)| {
            let config = AccountConfig {
                shares: *shares,
                ..AccountConfig::default()
            };
            (name.to_string(), config)
        })
        .collect();
    let mut cluster = Cluster::new();
    for i in 1..=4 {
        cluster = cluster.node(NodeBuilder::new(&format!("n{i}")).gpus(8, A100));
    }
    let mut book = UsageBook::new(half_life, T0);
    // Per account: how far into the stream it is.
    let mut next_in_stream: BTreeMap<&str, usize> = BTreeMap::new();
    // Each job's run time, and a running job's end.
    let mut run_time: BTreeMap<JobId, Millis> = BTreeMap::new();
    let mut ends: BTreeMap<JobId, Millis> = BTreeMap::new();
    let mut next_id = 1;
    let mut gpu_hours = GpuHours::new();
    let mut now = T0;
    while now < T0 + days * 24 * HOUR {
        // Ends: the run goes into the book, the job leaves.
        let ended: Vec<(JobId, Millis)> = ends
            .iter()
            .filter(|(_, end)| **end <= now)
            .map(|(id, end)| (*id, *end))
            .collect();
        for (id, end) in ended {
            ends.remove(&id);
            let job = &cluster.jobs[&id];
            let run = RunRecord {
                job_id: id,
                restart_count: 0,
                account: job.spec.account.clone(),
                user: job.owner.user.clone(),
                uid: job.owner.uid,
                tier: job.spec.tier.clone(),
                gpus: job.spec.gpus,
                cpus: 1,
                queued_at: job.submit_time,
                start: job.start_time.expect("it ran"),
                end,
                outcome: "COMPLETED".into(),
                preempted_by: None,
                preemptor_account: None,
                checkpoint_saved: false,
                lost_gpu_secs: 0,
            };
            *gpu_hours.entry(run.account.clone()).or_default() += run.gpu_secs() as f64 / 3600.0;
            book.add_run(&run);
            cluster.exit(id.0);
        }
        // Submits: every account tops its queue up from its own copy of the stream.
        for (account, _, tier, value) in submitters {
            let queued = cluster
                .jobs
                .values()
                .filter(|j| j.spec.account == *account && !j.state.holds_resources())
                .count();
            for _ in queued..QUEUED {
                let at = next_in_stream.entry(account).or_default();
                let (gpus, ticks) = STREAM[*at % STREAM.len()];
                *at += 1;
                let job = JobBuilder::new(next_id)
                    .tier(tier, *value)
                    .account(account)
                    .gpus(gpus)
                    .submitted(now);
                cluster = cluster.job(job);
                run_time.insert(JobId(next_id), ticks * TICK);
                next_id += 1;
            }
        }
        // The pass, ordered by the factors of the moment; what it places starts now.
        let table = share_table(&book, &config, &cluster.jobs, now);
        cluster.fair_share = table.factors();
        let plan = cluster.schedule(now);
        let again = Policy {
            tiers: &cluster.tiers,
            fair_share: &table.factors(),
            backfill: crate::core::Backfill::OFF,
        };
        assert_eq!(
            plan,
            crate::core::schedule(&cluster.snapshot(), &again, now),
            "same snapshot and factors, same plan"
        );
        assert!(plan.evictions.is_empty(), "these tiers do not preempt");
        cluster.apply(&plan, now);
        for placement in &plan.placements {
            ends.insert(placement.job, now + run_time[&placement.job]);
        }
        now += TICK;
    }
    gpu_hours
}

/// Four 8-GPU nodes for `days`.
fn capacity(days: i64) -> f64 {
    32.0 * 24.0 * days as f64
}

#[test]
fn equal_shares_get_equal_gpu_hours() {
    let days = 20;
    let hours = simulate(
        &[("ml", 1, "low", 100), ("vision", 1, "low", 100)],
        days,
        24 * HOUR,
    );
    let (ml, vision) = (hours["ml"], hours["vision"]);
    // Always busy.
    assert!(ml + vision > 0.97 * capacity(days), "{hours:?}");
    assert!(
        (ml - vision).abs() / (ml + vision) < 0.03,
        "ml {ml:.0} vs vision {vision:.0} GPU-hours"
    );
}

#[test]
fn shares_two_to_one_get_gpu_hours_two_to_one() {
    let days = 20;
    let hours = simulate(
        &[("ml", 2, "low", 100), ("vision", 1, "low", 100)],
        days,
        24 * HOUR,
    );
    let (ml, vision) = (hours["ml"], hours["vision"]);
    assert!(ml + vision > 0.97 * capacity(days), "{hours:?}");
    let ratio = ml / vision;
    assert!(
        (1.9..=2.1).contains(&ratio),
        "ml {ml:.0} vs vision {vision:.0} GPU-hours"
    );
}

#[test]
fn fair_share_never_lets_a_lower_tier_pass() {
    // `ml` in medium soon has far more usage than `vision` in low, and still goes first: the
    // low jobs get only what medium leaves (nothing: its queue is never empty).
    let days = 5;
    let hours = simulate(
        &[("ml", 1, "medium", 1_000), ("vision", 1, "low", 100)],
        days,
        24 * HOUR,
    );
    let vision = hours.get("vision").copied().unwrap_or(0.0);
    assert!(vision < 0.01 * capacity(days), "{hours:?}");
}
