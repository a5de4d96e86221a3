//! Backfill with reservations: unit scenarios, and properties on random clusters with time
//! limits.

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use ysched_common::{JobId, JobState};

use super::backfill::{end_if_started, expected_end, Reservation};
use super::node_view::Claim;
use super::order::pending_in_order;
use super::pass::{Decision, Pass};
use super::placement::find_placement;
use super::prop_tests::{check_plan, cluster_gen, NOW};
use super::satisfiable::capacity_views;
use super::testkit::{render, Cluster, JobBuilder as J, NodeBuilder as N, A100, HOUR, MINUTE, T0};
use super::topo::Topologies;
use super::{PendingReason, Plan};

/// n1 full for an hour, n2 half full for 30 minutes; a 4-GPU job at the head of the queue,
/// then three 1-GPU jobs: 10 minutes, 2 hours, no limit.
fn head_and_three_small() -> Cluster {
    Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, A100))
        .job(
            J::new(1)
                .gpus(4)
                .time_limit(3600)
                .running_on("n1", &[0, 1, 2, 3]),
        )
        .job(J::new(2).gpus(2).time_limit(1800).running_on("n2", &[0, 1]))
        .job(J::new(3).gpus(4).submitted(T0 - 10 * MINUTE))
        .job(J::new(4).gpus(1).time_limit(600))
        .job(J::new(5).gpus(1).time_limit(2 * 3600))
        .job(J::new(6).gpus(1))
}

#[test]
fn the_head_job_gets_a_reservation_that_only_short_jobs_may_use() {
    let cluster = head_and_three_small().backfill(1);
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n2[2]\n\
         wait 3 Resources\n\
         wait 5 Priority\n\
         wait 6 Priority\n\
         expect 3 at T0+30m on n2"
    );
    // Without backfill, first come first served where it fits: the 2-hour job takes the last
    // GPU of n2 and the head job waits for it too.
    let cluster = head_and_three_small();
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n2[2]\n\
         place 5 on n2[3]\n\
         wait 3 Resources\n\
         wait 6 Priority"
    );
}

#[test]
fn a_job_ending_exactly_at_the_reserved_start_may_use_it() {
    let mut cluster = head_and_three_small().backfill(1);
    Arc::make_mut(
        &mut std::sync::Arc::make_mut(cluster.jobs.get_mut(&JobId(5)).expect("job")).spec,
    )
    .time_limit_secs = Some(1800);
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n2[2]\n\
         place 5 on n2[3]\n\
         wait 3 Resources\n\
         wait 6 Priority\n\
         expect 3 at T0+30m on n2"
    );
}

#[test]
fn jobs_outside_the_reservation_are_not_held_up() {
    // n3 is free and too small for the head job: the long and unlimited jobs go there.
    let cluster = head_and_three_small()
        .node(N::new("n3").gpus(2, A100))
        .backfill(1);
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n2[2]\n\
         place 5 on n3[0]\n\
         place 6 on n3[1]\n\
         wait 3 Resources\n\
         expect 3 at T0+30m on n2"
    );
}

#[test]
fn each_tier_that_may_not_preempt_gets_its_reservations() {
    // Critical jobs, not preemptible, hold both nodes: n1 for an hour, n2 for two.
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, A100))
        .job(
            J::new(1)
                .critical()
                .gpus(4)
                .time_limit(3600)
                .running_on("n1", &[0, 1, 2, 3]),
        )
        .job(
            J::new(2)
                .critical()
                .gpus(4)
                .time_limit(7200)
                .running_on("n2", &[0, 1, 2, 3]),
        )
        .job(J::new(10).medium().gpus(4))
        .job(J::new(11).low().gpus(4))
        .job(J::new(12).low().gpus(4))
        // High may preempt: it gets in by eviction, not by reservation.
        .job(J::new(13).high().gpus(4))
        .backfill(1);
    // The medium job takes n1 at 1 h; the low one cannot share it and takes n2 at 2 h; the
    // second low job is past its tier's one reservation.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "wait 10 Priority\n\
         wait 11 Priority\n\
         wait 12 Priority\n\
         wait 13 Resources\n\
         expect 10 at T0+60m on n1\n\
         expect 11 at T0+120m on n2"
    );
    // Two reservations per tier: the second low job would need n1 or n2 after the others,
    // which are theirs for good.
    let plan = cluster.clone().backfill(2).schedule(T0);
    assert_eq!(plan.expected_starts.len(), 2);
    // With n3 free in an hour and a half, it gets that.
    let cluster = cluster
        .node(N::new("n3").gpus(4, A100))
        .job(
            J::new(3)
                .critical()
                .gpus(4)
                .time_limit(5400)
                .running_on("n3", &[0, 1, 2, 3]),
        )
        .backfill(2);
    let plan = cluster.schedule(T0);
    let starts: Vec<(u64, i64, String)> = plan
        .expected_starts
        .iter()
        .map(|(id, s)| (id.0, (s.at - T0) / MINUTE, s.nodes.join("+")))
        .collect();
    assert_eq!(
        starts,
        [
            (10, 60, "n1".to_string()),
            (11, 90, "n3".to_string()),
            (12, 120, "n2".to_string())
        ]
    );
}

#[test]
fn jobs_that_never_end_block_every_reservation() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .job(J::new(1).gpus(2).running_on("n1", &[0, 1]))
        .job(J::new(2).gpus(4))
        .job(J::new(3).gpus(2))
        .backfill(1);
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[2,3]\n\
         wait 2 Resources"
    );
}

#[test]
fn expected_ends_follow_limits_and_stop_requests() {
    let now = T0 + 2 * HOUR;
    // Past its limit: about to be stopped.
    let late = J::new(1).time_limit(3600).running_on("n1", &[0]).build();
    assert_eq!(expected_end(&late, now), Some(now));
    let running = J::new(1)
        .time_limit(3 * 3600)
        .running_on("n1", &[0])
        .build();
    assert_eq!(expected_end(&running, now), Some(T0 + 3 * HOUR));
    let unlimited = J::new(1).running_on("n1", &[0]).build();
    assert_eq!(expected_end(&unlimited, now), None);
    // Stopping: at the end of its grace, unless its limit comes first.
    let stopping = J::new(1)
        .grace(60)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    assert_eq!(expected_end(&stopping, T0), Some(T0 + MINUTE));
    let stopping = J::new(1)
        .grace(600)
        .time_limit(120)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    assert_eq!(expected_end(&stopping, T0), Some(T0 + 2 * MINUTE));
    let pending = J::new(2).time_limit(90).build();
    assert_eq!(end_if_started(&pending.spec, now), Some(now + 90_000));
    assert_eq!(end_if_started(&J::new(3).build().spec, now), None);
}

#[test]
fn a_job_past_its_limit_frees_its_room_now() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .job(
            J::new(1)
                .gpus(4)
                .time_limit(3600)
                .running_on("n1", &[0, 1, 2, 3])
                .started(T0 - 2 * HOUR),
        )
        .job(J::new(2).gpus(4))
        .backfill(1);
    assert_eq!(
        render(&cluster.schedule(T0)),
        "wait 2 Resources\n\
         expect 2 at T0+0m on n1"
    );
}

#[test]
fn a_reservation_for_an_nvlink_job_takes_a_whole_nvlink_domain() {
    // Two NVLink islands of 8: half of each is busy, one half for 30 minutes, the other
    // for two hours. 8 free GPUs, but no 8 NVLinked ones until the first island frees up.
    let cluster = Cluster::new()
        .node(N::two_islands("n1", 16, A100))
        .job(
            J::new(1)
                .gpus(4)
                .time_limit(1800)
                .running_on("n1", &[0, 1, 2, 3]),
        )
        .job(
            J::new(2)
                .gpus(4)
                .time_limit(7200)
                .running_on("n1", &[8, 9, 10, 11]),
        )
        .job(J::new(3).gpus(8).nvlink().submitted(T0 - MINUTE))
        .job(J::new(4).gpus(4))
        .job(J::new(5).gpus(4))
        .job(J::new(6).gpus(4).time_limit(1200))
        .backfill(1);
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n1[12,13,14,15]\n\
         place 6 on n1[4,5,6,7]\n\
         wait 3 Resources\n\
         wait 5 Priority\n\
         expect 3 at T0+30m on n1"
    );
    let (snap, policy) = (cluster.snapshot(), cluster.policy());
    let mut pass = Pass::new(&snap, &policy, T0, &mut Topologies::default());
    for job in pending_in_order(&cluster.jobs, policy.fair_share) {
        pass.step(job);
    }
    let reserved: Vec<(u64, Vec<u32>)> = pass
        .reservations()
        .iter()
        .map(|(id, r)| (id.0, r.allocs[0].gpus.clone()))
        .collect();
    assert_eq!(reserved, [(3, (0..8).collect::<Vec<u32>>())]);
    // Without backfill the 4-GPU jobs take both free halves, and the NVLink job waits for
    // the two-hour job.
    let mut off = cluster.clone();
    off.backfill = super::Backfill::OFF;
    assert_eq!(
        render(&off.schedule(T0)),
        "place 4 on n1[4,5,6,7]\n\
         place 5 on n1[12,13,14,15]\n\
         wait 3 Resources\n\
         wait 6 Priority"
    );
}

#[test]
fn a_gang_reserves_on_every_node_it_needs() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, A100))
        .node(N::new("n3").gpus(4, A100))
        .job(
            J::new(1)
                .gpus(4)
                .time_limit(3600)
                .running_on("n1", &[0, 1, 2, 3]),
        )
        .job(
            J::new(2)
                .gpus(4)
                .time_limit(1800)
                .running_on("n2", &[0, 1, 2, 3]),
        )
        .job(J::new(3).gpus(2).running_on("n3", &[0, 1]))
        .job(J::new(4).gpus(8).nodes(2).submitted(T0 - MINUTE))
        .job(J::new(5).gpus(2).time_limit(4000))
        .backfill(1);
    // n3 never frees up; n2 in 30 minutes, n1 in an hour.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 5 on n3[2,3]\n\
         wait 4 Resources\n\
         expect 4 at T0+60m on n1+n2"
    );
}

#[test]
fn preemption_reservations_are_kept_whole_in_the_future() {
    // A critical job evicts the low job on n1 (its targets are promised for good), so the
    // medium job at the head of its tier expects n2, where a job ends in three hours, even
    // though n1's victim would end sooner.
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, A100))
        .job(
            J::new(1)
                .low()
                .gpus(4)
                .time_limit(5400)
                .running_on("n1", &[0, 1, 2, 3]),
        )
        .job(
            J::new(2)
                .critical()
                .gpus(4)
                .time_limit(3 * 3600)
                .running_on("n2", &[0, 1, 2, 3]),
        )
        .job(J::new(3).critical().gpus(4))
        .job(J::new(4).medium().gpus(4))
        .backfill(1);
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 1 for 3 on n1 grace 30\n\
         wait 3 Preempting 1 on n1\n\
         wait 4 Priority\n\
         expect 4 at T0+180m on n2"
    );
}

#[test]
fn explain_lets_a_short_job_into_reserved_room() {
    let cluster = head_and_three_small().backfill(1);
    let why = |id: u64| -> Vec<String> {
        cluster
            .explain(id, T0)
            .into_iter()
            .map(|(node, why)| format!("{node}: {why}"))
            .collect()
    };
    assert_eq!(why(4), ["n1: needs 1 GPU, 0 free", "n2: fits"]);
    assert_eq!(
        why(5),
        [
            "n1: needs 1 GPU, 0 free",
            "n2: needs 1 GPU, 0 free (taken by jobs ahead: 3,4)"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Time limits of pending jobs: none, 10 minutes to 6 hours.
const LIMITS: [Option<u64>; 6] = [
    None,
    Some(600),
    Some(1800),
    Some(3600),
    Some(3 * 3600),
    Some(6 * 3600),
];

/// How long running jobs have left by their limits: none; past it (they end now); 20 minutes
/// to 4 hours.
const LEFT: [Option<u64>; 6] = [
    None,
    Some(0),
    Some(1200),
    Some(3600),
    Some(2 * 3600),
    Some(4 * 3600),
];

/// Random clusters (see `prop_tests`) whose jobs, running and pending, have random time limits,
/// with backfill on.
fn limited_cluster_gen() -> impl Strategy<Value = Cluster> {
    (
        cluster_gen(),
        prop::collection::vec(prop::sample::select(LIMITS.to_vec()), 28),
        prop::collection::vec(prop::sample::select(LEFT.to_vec()), 28),
        1u32..3,
    )
        .prop_map(|(cluster, limits, left, reservations)| {
            with_limits(cluster, &limits, &left).backfill(reservations)
        })
}

/// Pending jobs get `limits`, running ones the limit that leaves them `left` (by position).
fn with_limits(mut cluster: Cluster, limits: &[Option<u64>], left: &[Option<u64>]) -> Cluster {
    for ((job, limit), left) in cluster
        .jobs
        .values_mut()
        .map(Arc::make_mut)
        .zip(limits)
        .zip(left)
    {
        let limit = match job.start_time {
            Some(start) if job.state.holds_resources() => {
                left.map(|left| ((NOW - start) / 1000) as u64 + left)
            }
            _ => *limit,
        };
        Arc::make_mut(&mut job.spec).time_limit_secs = limit;
    }
    cluster
}

/// One job of [`busy_cluster_gen`].
#[derive(Debug, Clone)]
struct BusyJob {
    /// 0, 1: low; 2: medium; 3: high.
    tier: u8,
    gpus_per_node: u32,
    nodes: u32,
    nvlink: bool,
    running: bool,
    ran_min: i64,
    left: Option<u64>,
    limit: Option<u64>,
    submit_min: i64,
}

fn busy_job_gen() -> impl Strategy<Value = BusyJob> {
    (
        0u8..4,
        prop::sample::select(vec![1u32, 1, 2, 4, 4, 8]),
        prop::sample::select(vec![1u32, 1, 1, 1, 1, 2]),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.3),
        0i64..180,
        // Fewer past their limit than `LEFT` has.
        prop::sample::select(LEFT[2..].iter().chain(&LEFT).copied().collect::<Vec<_>>()),
        // Shorter than `LIMITS`: more jobs that fit before a reservation starts.
        prop::sample::select(vec![
            None,
            Some(300),
            Some(600),
            Some(600),
            Some(1800),
            Some(3600),
            Some(3 * 3600),
        ]),
        0i64..30,
    )
        .prop_map(
            |(tier, gpus_per_node, nodes, nvlink, running, ran_min, left, limit, submit_min)| {
                BusyJob {
                    tier,
                    gpus_per_node,
                    nodes,
                    nvlink,
                    running,
                    ran_min,
                    left,
                    limit,
                    submit_min,
                }
            },
        )
}

/// When a job was submitted, in minutes after `T0`: jobs of 4 GPUs or more in the first ten.
fn big_first(gen: &BusyJob) -> i64 {
    if gen.gpus_per_node * gen.nodes >= 4 {
        gen.submit_min % 10
    } else {
        10 + gen.submit_min % 20
    }
}

/// Clusters made for backfill: a few nodes of 4 or 8 GPUs of one model (plain, NVSwitch or two
/// NVLink islands), about half of the jobs running (packed by the core's own placement) with
/// time left by their limits, the others pending with limits, mostly in tiers that may not
/// preempt. Most pending jobs could run somewhere, so reservations bind.
pub(super) fn busy_cluster_gen() -> impl Strategy<Value = Cluster> {
    (
        prop::collection::vec((prop::bool::ANY, 0u8..3), 1..5),
        prop::collection::vec(busy_job_gen(), 4..40),
        1u32..3,
    )
        .prop_map(|(nodes, jobs, reservations)| {
            let mut cluster = Cluster::new().backfill(reservations);
            for (i, (eight, wiring)) in nodes.into_iter().enumerate() {
                let (name, n) = (format!("n{i}"), if eight { 8 } else { 4 });
                cluster = cluster.node(match wiring {
                    0 => N::new(&name).gpus(n, A100),
                    1 => N::dgx(&name, n, A100),
                    _ => N::two_islands(&name, n, A100),
                });
            }
            let node_map = cluster.nodes.clone();
            let mut views = capacity_views(&node_map, &mut Topologies::default());
            for (id, gen) in (1..).zip(&jobs) {
                let (tier, value) = [
                    ("low", 100),
                    ("low", 100),
                    ("medium", 1_000),
                    ("high", 10_000),
                ][usize::from(gen.tier)];
                let mut builder = J::new(id)
                    .tier(tier, value)
                    .gpus(gen.gpus_per_node * gen.nodes)
                    .nodes(gen.nodes)
                    // Big jobs first inside a tier: they are the ones that wait and reserve,
                    // small ones come after and may backfill.
                    .submitted(T0 + big_first(gen) * MINUTE);
                if gen.nvlink {
                    builder = builder.nvlink();
                }
                let mut job = builder.build();
                // Spread over the nodes (by id) rather than packed: partly busy nodes are
                // where reserved room is free now.
                let placed = gen
                    .running
                    .then(|| {
                        let nth = (id as usize) % views.len();
                        let one: super::node_view::Views<'_> = views
                            .iter()
                            .skip(nth)
                            .take(1)
                            .map(|(n, v)| (*n, v.clone()))
                            .collect();
                        find_placement(&one, &job.spec)
                            .or_else(|| find_placement(&views, &job.spec))
                    })
                    .flatten();
                if let Some(allocs) = placed {
                    for alloc in &allocs {
                        let view = views.get_mut(alloc.node.as_str()).expect("known node");
                        view.add_alloc(job.id, Claim::Running, alloc, None, job.spec.exclusive);
                    }
                    job.alloc = allocs;
                    job.state = JobState::Running;
                    job.launched = true;
                    job.start_time = Some(NOW - gen.ran_min * MINUTE);
                    Arc::make_mut(&mut job.spec).time_limit_secs =
                        gen.left.map(|left| (gen.ran_min * 60) as u64 + left);
                } else {
                    Arc::make_mut(&mut job.spec).time_limit_secs = gen.limit;
                }
                cluster.jobs.insert(job.id, std::sync::Arc::new(job));
            }
            cluster
        })
}

/// No tier may preempt and no eviction is in flight: the plan is placements and
/// reservations only.
fn without_preemption(mut cluster: Cluster) -> Cluster {
    for tier in cluster.tiers.values_mut() {
        tier.may_preempt = false;
    }
    for job in cluster.jobs.values_mut().map(std::sync::Arc::make_mut) {
        if job.state == JobState::Preempting {
            job.state = JobState::Running;
            job.stop = None;
        }
    }
    cluster
}

/// The pass's plan and its reservations in queue order; checks each placement against the
/// room its job could use.
fn pass_with_reservations(
    cluster: &Cluster,
) -> Result<(Plan, Vec<(JobId, Reservation)>), TestCaseError> {
    let (snap, policy) = (cluster.snapshot(), cluster.policy());
    let mut pass = Pass::new(&snap, &policy, NOW, &mut Topologies::default());
    for job in pending_in_order(&cluster.jobs, policy.fair_share) {
        let before = pass.views().clone();
        let ends_by = pass.ends_by(job);
        if let Decision::Placed(allocs) = pass.step(job) {
            // Only into room that is free, or reserved from the job's end on.
            for alloc in &allocs {
                let view = &before[alloc.node.as_str()];
                let (gpus, cpus, mem) = view.free_for(ends_by);
                let mask = view.topology().mask_of(&alloc.gpus);
                prop_assert_eq!(mask & !gpus, 0, "job {} took reserved GPUs", job.id);
                prop_assert!(alloc.cpus <= cpus && alloc.mem_mib <= mem);
            }
        }
    }
    let reservations = pass.reservations().to_vec();
    Ok((pass.into_plan(), reservations))
}

/// Every reservation is a promise the plan keeps: at its start, its allocation is free of the
/// running jobs and of the plan's placements that are still running then (by their limits),
/// and of every other reservation.
fn check_reservations_hold(cluster: &Cluster) -> Result<(), TestCaseError> {
    let (plan, reservations) = pass_with_reservations(cluster)?;
    prop_assert_eq!(&plan, &cluster.schedule(NOW));
    // Besides reservations, only jobs waiting for their `--begin` are expected (then).
    let reserved_starts = plan
        .expected_starts
        .keys()
        .filter(|id| plan.pending_reasons[*id] != PendingReason::BeginTime)
        .count();
    prop_assert_eq!(reserved_starts, reservations.len());
    for (i, (id, reservation)) in reservations.iter().enumerate() {
        let job = &cluster.jobs[id];
        let start = &plan.expected_starts[id];
        prop_assert_eq!(start.at, reservation.at);
        prop_assert!(reservation.at >= NOW);
        let nodes: Vec<&str> = reservation.allocs.iter().map(|a| a.node.as_str()).collect();
        prop_assert_eq!(
            start.nodes.iter().map(String::as_str).collect::<Vec<_>>(),
            nodes
        );
        prop_assert!(!cluster.tiers[&job.spec.tier].may_preempt);
        let reason = &plan.pending_reasons[id];
        prop_assert!(
            matches!(reason, PendingReason::Resources | PendingReason::Priority),
            "{}",
            reason
        );
        prop_assert_eq!(reservation.allocs.len() as u32, job.spec.nodes.max(1));

        let alive = |end: Option<i64>| end.is_none_or(|end| end > reservation.at);
        for alloc in &reservation.allocs {
            let node = &cluster.nodes[&alloc.node];
            let mut gpus: BTreeSet<u32> = BTreeSet::new();
            let (mut cpus, mut mem) = (u64::from(alloc.cpus), alloc.mem_mib);
            let mut hold = |allocs: &[ysched_common::NodeAlloc], count_cpus: bool| {
                for a in allocs.iter().filter(|a| a.node == alloc.node) {
                    gpus.extend(&a.gpus);
                    if count_cpus {
                        cpus += u64::from(a.cpus);
                        mem += a.mem_mib;
                    }
                }
            };
            for running in cluster.jobs.values().filter(|j| j.state.holds_resources()) {
                if alive(expected_end(running, NOW)) {
                    hold(&running.alloc, true);
                }
            }
            for placement in &plan.placements {
                let placed = &cluster.jobs[&placement.job];
                if alive(end_if_started(&placed.spec, NOW)) {
                    hold(&placement.alloc, true);
                }
            }
            for (k, (_, other)) in reservations.iter().enumerate() {
                // Another reservation's room may be lent to short jobs until it starts.
                if k != i {
                    hold(&other.allocs, other.at <= reservation.at);
                }
            }
            for gpu in &alloc.gpus {
                prop_assert!(
                    !gpus.contains(gpu),
                    "job {} reserved {}:{} at {}, taken then",
                    id,
                    alloc.node,
                    gpu,
                    reservation.at
                );
            }
            prop_assert!(cpus <= u64::from(node.cpus), "CPUs of {} over", alloc.node);
            prop_assert!(mem <= node.mem_mib, "memory of {} over", alloc.node);
        }
    }
    Ok(())
}

/// The literal promise: start every placement of the plan (at `now`, with its limit) and
/// schedule again at the same `now`. A reserved job starts no later than it was told, unless a
/// reservation ahead of it came out differently (a tie between nodes may break another way
/// once more nodes are busy).
fn check_rerun_keeps_reservations(cluster: &Cluster) -> Result<(), TestCaseError> {
    let (plan, reservations) = pass_with_reservations(cluster)?;
    let mut rerun = cluster.clone();
    for placement in &plan.placements {
        let job = std::sync::Arc::make_mut(rerun.jobs.get_mut(&placement.job).expect("placed job"));
        job.state = JobState::Running;
        job.launched = true;
        job.alloc = placement.alloc.clone();
        job.start_time = Some(NOW);
    }
    let (again, kept) = pass_with_reservations(&rerun)?;
    let placed: BTreeSet<JobId> = again.placements.iter().map(|p| p.job).collect();
    for (i, (id, reservation)) in reservations.iter().enumerate() {
        if kept.get(..i) != Some(&reservations[..i]) {
            break;
        }
        let now_expected = kept.get(i).filter(|(job, _)| job == id).map(|(_, r)| r.at);
        prop_assert!(
            placed.contains(id) || now_expected.is_some_and(|at| at <= reservation.at),
            "job {} was expected at {}, now at {:?}",
            id,
            reservation.at,
            now_expected
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Same input, same plan; the memo changes nothing; no GPU given twice; evictions as
    /// before; every reservation holds at its start.
    #[test]
    fn backfill_plans_keep_their_invariants(cluster in limited_cluster_gen()) {
        check_plan(&cluster)?;
        check_reservations_hold(&cluster)?;
    }

    /// The same on clusters where most jobs could run and reservations bind.
    #[test]
    fn busy_backfill_plans_keep_their_invariants(cluster in busy_cluster_gen()) {
        check_plan(&cluster)?;
        check_reservations_hold(&cluster)?;
    }

    /// A backfilled job never delays a reserved one.
    #[test]
    fn backfilled_jobs_never_delay_a_reservation(
        cluster in prop_oneof![busy_cluster_gen(), limited_cluster_gen()]
            .prop_map(without_preemption)
    ) {
        check_plan(&cluster)?;
        check_reservations_hold(&cluster)?;
        check_rerun_keeps_reservations(&cluster)?;
    }

    /// With backfill off, time limits change nothing: the plan is the one of before.
    #[test]
    fn without_backfill_limits_change_nothing(
        cluster in cluster_gen(),
        limits in prop::collection::vec(prop::sample::select(LIMITS.to_vec()), 28),
        left in prop::collection::vec(prop::sample::select(LEFT.to_vec()), 28),
    ) {
        let limited = with_limits(cluster.clone(), &limits, &left);
        let plan = limited.schedule(NOW);
        // No reservation: only the jobs waiting for their `--begin` are expected (then).
        prop_assert!(plan
            .expected_starts
            .keys()
            .all(|id| plan.pending_reasons[id] == PendingReason::BeginTime));
        prop_assert_eq!(plan, cluster.schedule(NOW));
    }
}

/// Guards the generator: the properties above mean little if random clusters rarely reserve,
/// or rarely let a job into reserved room.
#[test]
fn generated_clusters_exercise_backfill() {
    let mut runner = TestRunner::deterministic();
    let strategy = busy_cluster_gen();
    let (mut reserving, mut backfilled, mut held_back) = (0, 0, 0);
    for _ in 0..128 {
        let cluster = strategy
            .new_tree(&mut runner)
            .expect("strategy generates")
            .current();
        let (snap, policy) = (cluster.snapshot(), cluster.policy());
        let mut pass = Pass::new(&snap, &policy, NOW, &mut Topologies::default());
        let mut crossed = false;
        for job in pending_in_order(&cluster.jobs, policy.fair_share) {
            let before = pass.views().clone();
            if let Decision::Placed(allocs) = pass.step(job) {
                crossed |= allocs.iter().any(|a| {
                    let view = &before[a.node.as_str()];
                    view.topology().mask_of(&a.gpus) & !view.free_gpus() != 0
                });
            }
        }
        let plan = pass.into_plan();
        reserving += usize::from(!plan.expected_starts.is_empty());
        backfilled += usize::from(crossed);
        // Reservations change who starts: some job placed without backfill is not.
        let mut off = cluster.clone();
        off.backfill = super::Backfill::OFF;
        let placed: BTreeSet<JobId> = plan.placements.iter().map(|p| p.job).collect();
        held_back += usize::from(
            off.schedule(NOW)
                .placements
                .iter()
                .any(|p| !placed.contains(&p.job)),
        );
    }
    assert!(reserving >= 64, "only {reserving}/128 plans reserve");
    assert!(
        backfilled >= 8,
        "only {backfilled}/128 plans backfill into reserved room"
    );
    assert!(
        held_back >= 3,
        "only {held_back}/128 plans keep room for a reservation"
    );
}
