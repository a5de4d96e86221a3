//! Property tests: random clusters and queues, invariants on every plan.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use ysched_common::time::Millis;
use ysched_common::{JobId, JobState, StopReason, StopRequest};

use super::demand::NodeDemand;
use super::fit::fit_on_node;
use super::node_view::Claim;
use super::order::pending_in_order;
use super::pass::{Decision, Pass};
use super::placement::find_placement;
use super::satisfiable::capacity_views;
use super::testkit::{Cluster, JobBuilder, NodeBuilder, A10, A100, H100, HOUR, MINUTE, T0};
use super::topo::Topologies;
use super::PendingReason;

pub(super) const NOW: Millis = T0 + 3 * HOUR;
const TIERS: [(&str, i64); 4] = [
    ("critical", 1_000_000),
    ("high", 10_000),
    ("medium", 1_000),
    ("low", 100),
];

#[derive(Debug, Clone)]
struct NodeGen {
    n_gpus: u32,
    /// 0: A100, 1: H100, 2: A10.
    model: u8,
    /// 0: no topology reported, 1: NVSwitch, 2: two NVLink islands, 3: NVLink pairs, 4: PCIe
    /// only.
    wiring: u8,
    cpus: u32,
    mem_mib: u64,
    /// 0: drained, 1: disconnected, otherwise schedulable.
    health: u8,
    ib: bool,
    /// Bit i set: GPU i is out of service (all set: the node is not schedulable).
    out_of_service: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Pending,
    Held,
    Running,
    /// Running, then asked to stop for some pending job.
    Preempting,
}

#[derive(Debug, Clone)]
struct JobGen {
    tier: usize,
    gpus_per_node: u32,
    cpus: u32,
    mem_mib: u64,
    /// 0: any model, 1: A100, 2: H100, 3: either.
    gpu_type: u8,
    nodes: u32,
    wants_ib: bool,
    /// `--interconnect nvlink`
    nvlink: bool,
    start: Start,
    submit_min: i64,
    ran_min: i64,
    checkpoint_min_ago: Option<i64>,
    /// Which pending job a PREEMPTING one is being evicted for.
    preemptor_idx: usize,
    /// Slurm's options: 0: `--nodelist`, 1: `--exclude` (of the nodes `node_mask` picks),
    /// 2: `--exclusive`, 3: `--begin` in the future, 4: begin in the past; else none.
    slurm_option: u8,
    node_mask: u8,
}

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (
        prop::sample::select(vec![0u32, 2, 4, 8, 8]),
        prop::sample::select(vec![0u8, 0, 1, 1, 2]),
        prop::sample::select(vec![0u8, 1, 1, 2, 2, 3, 3, 4]),
        prop::sample::select(vec![8u32, 16, 64]),
        prop::sample::select(vec![64_000u64, 512_000]),
        0u8..16,
        prop::bool::weighted(0.3),
        prop::sample::select(vec![0u64, 0, 0, 0, 0b1, 0b1000_0001, 0b1111_1111]),
    )
        .prop_map(
            |(n_gpus, model, wiring, cpus, mem_mib, health, ib, out_of_service)| NodeGen {
                n_gpus,
                model,
                wiring,
                cpus,
                mem_mib,
                health,
                ib,
                out_of_service,
            },
        )
}

fn job_gen() -> impl Strategy<Value = JobGen> {
    (
        (
            0usize..4,
            prop::sample::select(vec![0u32, 1, 1, 2, 2, 4, 4, 8]),
            prop::sample::select(vec![0u32, 1, 4, 12]),
            prop::sample::select(vec![0u64, 0, 16_000, 100_000]),
            prop::sample::select(vec![0u8, 0, 0, 1, 2, 3]),
            prop::sample::select(vec![1u32, 1, 1, 1, 2, 3]),
            prop::bool::weighted(0.15),
        ),
        (
            prop::sample::select(vec![
                Start::Pending,
                Start::Pending,
                Start::Held,
                Start::Running,
                Start::Running,
                Start::Running,
                Start::Running,
                Start::Preempting,
            ]),
            0i64..5,
            0i64..180,
            prop::option::of(0i64..180),
            any::<usize>(),
            prop::bool::weighted(0.3),
        ),
    )
        .prop_map(
            |(
                (tier, gpus_per_node, cpus, mem_mib, gpu_type, nodes, wants_ib),
                (start, submit_min, ran_min, checkpoint_min_ago, preemptor_idx, nvlink),
            )| JobGen {
                // Drawn from bits `preemptor_idx` has to spare, so that the clusters generated
                // stay those of before (the preemption test counts what they exercise); most
                // jobs get none.
                slurm_option: (preemptor_idx >> 40) as u8 % 24,
                node_mask: (preemptor_idx >> 48) as u8,
                tier,
                gpus_per_node,
                cpus,
                mem_mib,
                gpu_type,
                nodes,
                wants_ib,
                nvlink,
                start,
                submit_min,
                ran_min,
                checkpoint_min_ago,
                preemptor_idx,
            },
        )
}

/// A cluster whose running jobs were packed by the core's own placement (so their allocations
/// never overlap and stay within capacity), with `low` sometimes protected by a min_runtime,
/// and some jobs with Slurm's placement options (`-w`, `-x`, `--exclusive`, `--begin`).
pub(super) fn cluster_gen() -> impl Strategy<Value = Cluster> {
    cluster_gen_with(true)
}

/// [`cluster_gen`], with Slurm's options or without (the clusters of before, whose share of
/// preemptions and NVLink placements a test counts).
fn cluster_gen_with(slurm_options: bool) -> impl Strategy<Value = Cluster> {
    (
        prop::collection::vec(node_gen(), 1..7),
        prop::collection::vec(job_gen(), 1..28),
        prop::sample::select(vec![0u64, 0, 3600]),
    )
        .prop_map(move |(nodes, mut jobs, low_min_runtime)| {
            if !slurm_options {
                for job in &mut jobs {
                    job.slurm_option = u8::MAX;
                }
            }
            build(&nodes, &jobs, low_min_runtime)
        })
}

fn build(nodes: &[NodeGen], jobs: &[JobGen], low_min_runtime: u64) -> Cluster {
    let mut cluster = Cluster::new();
    cluster
        .tiers
        .get_mut("low")
        .expect("default tiers have low")
        .min_runtime = low_min_runtime;
    for (i, gen) in nodes.iter().enumerate() {
        let name = format!("n{i}");
        let model = [A100, H100, A10][usize::from(gen.model)];
        let mut node = match gen.wiring {
            1 => NodeBuilder::dgx(&name, gen.n_gpus, model),
            2 => NodeBuilder::two_islands(&name, gen.n_gpus, model),
            3 => NodeBuilder::nvlink_pairs(&name, gen.n_gpus, model),
            4 => NodeBuilder::no_nvlink(&name, gen.n_gpus, model),
            _ => NodeBuilder::new(&name).gpus(gen.n_gpus, model),
        }
        .cpus(gen.cpus)
        .mem(gen.mem_mib);
        node = match gen.health {
            0 => node.drained("maintenance"),
            1 => node.disconnected(),
            _ => node,
        };
        if gen.ib {
            node = node.feature("ib");
        }
        for index in (0..gen.n_gpus).filter(|i| gen.out_of_service >> i & 1 == 1) {
            node = node.gpu_out_of_service(index, "XID 79: GPU has fallen off the bus");
        }
        cluster = cluster.node(node);
    }

    let pending_ids: Vec<JobId> = (1..)
        .zip(jobs)
        .filter(|(_, gen)| gen.start == Start::Pending)
        .map(|(id, _)| JobId(id))
        .collect();
    let node_map = cluster.nodes.clone();
    let mut views = capacity_views(&node_map, &mut Topologies::default());
    for (id, gen) in (1..).zip(jobs) {
        let (tier, value) = TIERS[gen.tier];
        let mut builder = JobBuilder::new(id)
            .tier(tier, value)
            .gpus(gen.gpus_per_node * gen.nodes)
            .cpus(gen.cpus)
            .mem(gen.mem_mib)
            .nodes(gen.nodes)
            .submitted(T0 + gen.submit_min * MINUTE);
        if gen.gpu_type & 1 != 0 {
            builder = builder.gpu_type("A100");
        }
        if gen.gpu_type & 2 != 0 {
            builder = builder.gpu_type("H100");
        }
        if gen.wants_ib {
            builder = builder.constraint("ib");
        }
        if gen.nvlink {
            builder = builder.nvlink();
        }
        if gen.start == Start::Held {
            builder = builder.held();
        }
        let picked: Vec<&str> = node_map
            .keys()
            .enumerate()
            .filter(|(i, _)| gen.node_mask >> (i % 8) & 1 == 1)
            .map(|(_, name)| name.as_str())
            .collect();
        match gen.slurm_option {
            0 if !picked.is_empty() => {
                builder = builder
                    .nodelist(&picked)
                    .gpus(gen.gpus_per_node * picked.len() as u32);
            }
            1 => builder = builder.exclude(&picked),
            2 => builder = builder.exclusive(),
            3 => builder = builder.begin(NOW + MINUTE),
            4 => builder = builder.begin(NOW - MINUTE),
            _ => {}
        }
        let mut job = builder.build();
        if matches!(gen.start, Start::Running | Start::Preempting) {
            // Jobs that find no room stay pending.
            if let Some(allocs) = find_placement(&views, &job.spec) {
                for alloc in &allocs {
                    let view = views
                        .get_mut(alloc.node.as_str())
                        .expect("placed on a known node");
                    view.add_alloc(job.id, Claim::Running, alloc, None, job.spec.exclusive);
                }
                job.alloc = allocs;
                job.state = JobState::Running;
                let start = NOW - gen.ran_min * MINUTE;
                job.start_time = Some(start);
                job.last_checkpoint = gen
                    .checkpoint_min_ago
                    .map(|ago| (NOW - ago * MINUTE).max(start));
                if gen.start == Start::Preempting && !pending_ids.is_empty() {
                    job.state = JobState::Preempting;
                    job.stop = Some(Box::new(StopRequest {
                        reason: StopReason::Preempt {
                            by: pending_ids[gen.preemptor_idx % pending_ids.len()],
                        },
                        at: NOW - MINUTE,
                        grace_secs: job.grace_secs,
                    }));
                }
            }
        }
        cluster.jobs.insert(job.id, std::sync::Arc::new(job));
    }
    cluster
}

/// Invariants of the plan as the server sees it.
pub(super) fn check_plan(cluster: &Cluster) -> Result<(), TestCaseError> {
    let plan = cluster.schedule(NOW);
    prop_assert_eq!(&plan, &cluster.schedule(NOW), "same input, same plan");
    let (snap, policy) = (cluster.snapshot(), cluster.policy());
    let mut unmemoized = Pass::new(&snap, &policy, NOW, &mut Topologies::default()).without_memo();
    for job in pending_in_order(&cluster.jobs, policy.fair_share) {
        unmemoized.step(job);
    }
    prop_assert_eq!(
        &plan,
        &unmemoized.into_plan(),
        "the pass's memo changes nothing"
    );

    let placed: BTreeSet<JobId> = plan.placements.iter().map(|p| p.job).collect();
    prop_assert_eq!(placed.len(), plan.placements.len(), "a job placed twice");
    for job in cluster.jobs.values() {
        let pending = job.state == JobState::Pending;
        let decided =
            placed.contains(&job.id) as u8 + plan.pending_reasons.contains_key(&job.id) as u8;
        prop_assert_eq!(
            decided,
            pending as u8,
            "job {}: placed or reason, exactly one",
            job.id
        );
    }

    // No GPU given twice, within capacity, only where allowed.
    let mut gpus_taken = BTreeSet::new();
    let mut cpus_used: BTreeMap<&str, u64> = BTreeMap::new();
    let mut mem_used: BTreeMap<&str, u64> = BTreeMap::new();
    let holders = cluster
        .jobs
        .values()
        .filter(|j| j.state.holds_resources())
        .map(|j| (j.id, &j.alloc));
    let placements = plan.placements.iter().map(|p| (p.job, &p.alloc));
    for (job, allocs) in holders.chain(placements) {
        for alloc in allocs {
            for gpu in &alloc.gpus {
                prop_assert!(
                    gpus_taken.insert((alloc.node.as_str(), *gpu)),
                    "GPU {}:{} given twice (job {})",
                    alloc.node,
                    gpu,
                    job
                );
            }
            *cpus_used.entry(&alloc.node).or_default() += u64::from(alloc.cpus);
            *mem_used.entry(&alloc.node).or_default() += alloc.mem_mib;
        }
    }
    for (name, node) in &cluster.nodes {
        prop_assert!(cpus_used.get(name.as_str()).copied().unwrap_or(0) <= u64::from(node.cpus));
        prop_assert!(mem_used.get(name.as_str()).copied().unwrap_or(0) <= node.mem_mib);
    }
    // `--exclusive`: a node a job holds whole holds no other job.
    let mut on_node: BTreeMap<&str, Vec<JobId>> = BTreeMap::new();
    let holders = cluster
        .jobs
        .values()
        .filter(|j| j.state.holds_resources())
        .map(|j| (j.id, &j.alloc));
    let placements = plan.placements.iter().map(|p| (p.job, &p.alloc));
    for (job, allocs) in holders.chain(placements) {
        for alloc in allocs {
            on_node.entry(&alloc.node).or_default().push(job);
        }
    }
    for (node, jobs) in &on_node {
        let whole = jobs.iter().find(|id| cluster.jobs[*id].spec.exclusive);
        prop_assert!(
            whole.is_none() || jobs.len() == 1,
            "node {} held whole by {:?} shared with {:?}",
            node,
            whole,
            jobs
        );
    }
    for placement in &plan.placements {
        let job = &cluster.jobs[&placement.job];
        let demand = NodeDemand::of(&job.spec);
        let nodes: BTreeSet<&str> = placement.alloc.iter().map(|a| a.node.as_str()).collect();
        prop_assert_eq!(nodes.len() as u32, job.spec.nodes.max(1), "distinct nodes");
        let mut models = BTreeSet::new();
        for alloc in &placement.alloc {
            let node = &cluster.nodes[&alloc.node];
            prop_assert!(
                node.is_schedulable(),
                "placed on unschedulable {}",
                node.name
            );
            prop_assert!(
                demand.allows(&alloc.node),
                "job {} on {}",
                job.id,
                alloc.node
            );
            if job.spec.exclusive {
                // Every GPU in service, every CPU, all the memory.
                let in_service = node.gpus.len() - node.unusable_gpus().count();
                prop_assert_eq!(alloc.gpus.len(), in_service);
                prop_assert_eq!(alloc.cpus, node.cpus);
                prop_assert_eq!(alloc.mem_mib, node.mem_mib);
            } else {
                prop_assert_eq!(alloc.gpus.len() as u32, demand.gpus);
            }
            for index in &alloc.gpus {
                prop_assert!(
                    !node.gpu_out_of_service(*index),
                    "job {} placed on GPU {} of {}, which is out of service",
                    job.id,
                    index,
                    node.name
                );
                let gpu = node.gpus.iter().find(|g| g.index == *index);
                // A job taking the node whole gets its GPUs of every model.
                prop_assert!(gpu.is_some_and(|g| job.spec.exclusive || demand.gpu_kind.accepts(g)));
                models.extend(gpu.map(|g| g.model.as_str()));
            }
        }
        if job.spec.nodes > 1 && !job.spec.exclusive {
            prop_assert!(models.len() <= 1, "gang {} mixes models", job.id);
        }
        prop_assert!(
            job.spec
                .begin_unix_secs
                .is_none_or(|b| super::pass::begin_ms(b) <= NOW),
            "job {} placed before its begin time",
            job.id
        );
        // A job taking whole nodes gets every GPU, linked or not (it was checked for its -G).
        if job.spec.interconnect.is_some() && !job.spec.exclusive {
            for alloc in &placement.alloc {
                prop_assert!(
                    fully_nvlinked(&cluster.nodes[&alloc.node], &alloc.gpus),
                    "job {} wants NVLink, got {}{:?}",
                    job.id,
                    alloc.node,
                    alloc.gpus
                );
            }
        }
    }

    // Evictions: only strictly lower, preemptible, old enough, never critical; for a preemptor
    // of a tier that may preempt and has no eviction in flight.
    let in_flight: BTreeSet<JobId> = cluster
        .jobs
        .values()
        .filter_map(|j| match j.stop.as_deref() {
            Some(StopRequest {
                reason: StopReason::Preempt { by },
                ..
            }) if j.state == JobState::Preempting => Some(*by),
            _ => None,
        })
        .collect();
    let mut victims = BTreeSet::new();
    for eviction in &plan.evictions {
        prop_assert!(victims.insert(eviction.victim), "victim evicted twice");
        let victim = &cluster.jobs[&eviction.victim];
        let preemptor = &cluster.jobs[&eviction.preemptor];
        let victim_tier = &cluster.tiers[&victim.spec.tier];
        prop_assert_eq!(victim.state, JobState::Running);
        prop_assert!(victim_tier.preemptible);
        prop_assert_ne!(victim.spec.tier.as_str(), "critical");
        prop_assert!(victim.tier_value < preemptor.tier_value);
        prop_assert!(victim
            .start_time
            .is_some_and(|s| NOW - s >= victim_tier.min_runtime as i64 * 1000));
        prop_assert!(victim.alloc.iter().any(|a| a.node == eviction.node));
        prop_assert!(
            NodeDemand::of(&preemptor.spec).allows(&eviction.node),
            "job {} evicts on {}, which it may not use",
            preemptor.id,
            eviction.node
        );
        prop_assert_eq!(eviction.grace_secs, victim.grace_secs);
        prop_assert_eq!(preemptor.state, JobState::Pending);
        prop_assert!(cluster.tiers[&preemptor.spec.tier].may_preempt);
        prop_assert!(!in_flight.contains(&preemptor.id));
        prop_assert!(!placed.contains(&preemptor.id));
        let reason = &plan.pending_reasons[&preemptor.id];
        let (victims, nodes) = match reason {
            PendingReason::Preempting { victims, nodes } => (&victims[..], &nodes[..]),
            _ => (&[][..], &[][..]),
        };
        prop_assert!(
            victims.contains(&eviction.victim) && nodes.contains(&eviction.node),
            "reason {:?}",
            reason
        );
    }
    Ok(())
}

/// Every two of these GPUs of `node` are NVLinked.
fn fully_nvlinked(node: &ysched_common::Node, gpus: &[u32]) -> bool {
    gpus.iter().all(|a| {
        let gpu = node.gpus.iter().find(|g| g.index == *a);
        gpus.iter()
            .all(|b| a == b || gpu.is_some_and(|g| g.has_nvlink_to(*b)))
    })
}

/// Invariants of each decision against the exact node views it was made on.
fn check_decisions(cluster: &Cluster) -> Result<(), TestCaseError> {
    let (snap, policy) = (cluster.snapshot(), cluster.policy());
    let mut pass = Pass::new(&snap, &policy, NOW, &mut Topologies::default());
    for job in pending_in_order(&cluster.jobs, policy.fair_share) {
        let before = pass.views().clone();
        let demand = NodeDemand::of(&job.spec);
        match pass.step(job) {
            Decision::Placed(allocs) => {
                // Never into room placed or reserved earlier in the pass.
                for alloc in &allocs {
                    let view = &before[alloc.node.as_str()];
                    let free = view.free_gpu_indices();
                    prop_assert!(alloc.gpus.iter().all(|g| free.contains(g)));
                    prop_assert!(alloc.cpus <= view.free_cpus());
                    prop_assert!(alloc.mem_mib <= view.free_mem_mib());
                }
            }
            Decision::Preempting(preemption) => {
                prop_assert!(find_placement(&before, &job.spec).is_none());
                let victims: BTreeSet<JobId> =
                    preemption.victims.iter().map(|(id, _)| *id).collect();
                prop_assert!(!victims.is_empty());
                prop_assert_eq!(preemption.targets.len() as u32, job.spec.nodes.max(1));
                let targets: Vec<_> = preemption
                    .targets
                    .iter()
                    .zip(&preemption.worst_paths)
                    .map(|(target, worst)| {
                        (target, &before[target.node.as_str()], demand.within(*worst))
                    })
                    .collect();
                // Once the victims are gone, the job fits on every target, in free GPUs.
                for (target, view, demand) in &targets {
                    let freed = view.without(&victims);
                    prop_assert!(fit_on_node(&freed, demand).is_ok());
                    let free = freed.free_gpu_indices();
                    prop_assert!(target.gpus.iter().all(|g| free.contains(g)));
                    if !job.spec.exclusive {
                        prop_assert_eq!(target.gpus.len() as u32, demand.gpus);
                    }
                }
                for (victim, node) in &preemption.victims {
                    prop_assert!(targets.iter().any(|(t, _, _)| t.node == *node));
                    prop_assert!(cluster.jobs[victim].alloc.iter().any(|a| a.node == *node));
                }
                // Minimal: sparing any single victim, the job no longer fits on some target (as
                // well connected as the eviction promised).
                for spared in &victims {
                    let mut fewer = victims.clone();
                    fewer.remove(spared);
                    prop_assert!(
                        targets.iter().any(|(_, view, demand)| fit_on_node(
                            &view.without(&fewer),
                            demand
                        )
                        .is_err()),
                        "job {} fits on {:?} without evicting {}",
                        job.id,
                        preemption.targets,
                        spared
                    );
                }
            }
            Decision::AwaitingEviction { .. }
            | Decision::Waiting(_)
            | Decision::Reserved(..)
            | Decision::Dependency(_)
            | Decision::OverLimit(_)
            | Decision::NodesUnavailable
            | Decision::Unsatisfiable(_) => {}
        }
    }
    prop_assert_eq!(pass.into_plan(), cluster.schedule(NOW));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn plans_keep_their_invariants(cluster in cluster_gen()) {
        check_plan(&cluster)?;
    }

    #[test]
    fn decisions_are_minimal_and_respect_earlier_ones(cluster in cluster_gen()) {
        check_decisions(&cluster)?;
    }

    /// The topology cache a caller keeps between passes changes no plan, whatever passes it
    /// served before: here clusters whose nodes share names but not inventories, and the same
    /// inventories (the same lists) under new names.
    #[test]
    fn a_kept_topology_cache_changes_no_plan(
        clusters in proptest::collection::vec(cluster_gen(), 2..5)
    ) {
        let mut kept = Topologies::default();
        let mut renamed = Cluster::new();
        for cluster in &clusters {
            let (snap, policy) = (cluster.snapshot(), cluster.policy());
            let plan = crate::core::schedule_with(&snap, &policy, NOW, &mut kept);
            prop_assert_eq!(&plan, &cluster.schedule(NOW));
            // The submit-time check's short cut gives the full check's answer.
            for job in cluster.jobs.values() {
                let full = crate::core::satisfiable::satisfiable_on(
                    &crate::core::satisfiable::capacity_views(&cluster.nodes, &mut Topologies::default()),
                    &job.spec,
                );
                let quick = crate::core::check_satisfiable_with(&job.spec, &cluster.nodes, &mut kept);
                prop_assert_eq!(quick, full);
            }
            // The same GPU lists (one address each) under other names.
            renamed.nodes = cluster
                .nodes
                .values()
                .map(|n| {
                    let mut n = n.clone();
                    n.name = format!("x{}", n.name);
                    (n.name.clone(), n)
                })
                .collect();
            let plan = crate::core::schedule_with(&renamed.snapshot(), &policy, NOW, &mut kept);
            prop_assert_eq!(plan, renamed.schedule(NOW));
        }
    }

    /// A pass that keeps only the reasons that changed (schedd's) makes a full pass's plan,
    /// less the reasons the jobs hold already: here each job holds the reason a full pass
    /// gives it, or none, or another one.
    #[test]
    fn a_pass_of_changed_reasons_leaves_out_only_the_unchanged_ones(
        cluster in cluster_gen(),
        held in proptest::collection::vec(0u8..3, 1..32),
    ) {
        let full = cluster.schedule(NOW);
        let mut cluster = cluster;
        for (i, (id, reason)) in full.pending_reasons.iter().enumerate() {
            let job = std::sync::Arc::make_mut(cluster.jobs.get_mut(id).unwrap());
            job.reason = match held[i % held.len()] {
                0 => reason.to_string(),
                1 => String::new(),
                _ => PendingReason::Priority.to_string(),
            };
        }
        let mut expected = cluster.schedule(NOW);
        prop_assert_eq!(&expected.placements, &full.placements);
        expected
            .pending_reasons
            .retain(|id, reason| !reason.is_text_of(&cluster.jobs[id].reason));
        let (snap, policy) = (cluster.snapshot(), cluster.policy());
        let changed =
            crate::core::schedule_changes(&snap, &policy, NOW, &mut Topologies::default());
        prop_assert_eq!(&changed, &expected);
        let never: Vec<JobId> = full
            .pending_reasons
            .iter()
            .filter(|(_, r)| **r == PendingReason::DependencyNeverSatisfied)
            .map(|(id, _)| *id)
            .collect();
        let mut listed = changed.never_satisfied.clone();
        listed.sort();
        prop_assert_eq!(listed, never);
    }
}

/// Fair share and quotas on a random cluster: accounts `a0`..`a2` (by job id) with random
/// factors, random per-account and per-user quotas on `high` and `low`.
fn with_fair_share(mut cluster: Cluster, factors: &[f64], quotas: &[u32]) -> Cluster {
    for job in cluster.jobs.values_mut().map(std::sync::Arc::make_mut) {
        let spec = std::sync::Arc::make_mut(&mut job.spec);
        spec.account = format!("a{}", job.id.0 % 3);
    }
    let names = ["a0", "a1", "a2"];
    cluster.fair_share = crate::core::FairShare::new(
        names
            .iter()
            .zip(factors)
            .map(|(name, f)| (name.to_string(), *f)),
    );
    for (tier, quota) in ["high", "low"].iter().zip(quotas.chunks(2)) {
        let tier = cluster.tiers.get_mut(*tier).expect("default tier");
        tier.max_gpus_per_account = quota[0];
        tier.max_gpus_per_user = quota[1];
    }
    cluster
}

/// GPUs per (tier, account) that running jobs hold and that the plan adds (placements and
/// preemptors, which will hold theirs). An `--exclusive` job holds every GPU of its nodes (a
/// preemptor's: of those it evicts on, at least).
fn held_after(cluster: &Cluster, plan: &crate::core::Plan) -> BTreeMap<(String, String), u32> {
    let mut held = BTreeMap::new();
    let whole = |nodes: &mut dyn Iterator<Item = &str>| -> u32 {
        nodes.map(|n| cluster.nodes[n].gpus.len() as u32).sum()
    };
    let mut add = |id: &JobId, gpus: u32| {
        let job = &cluster.jobs[id];
        let key = (job.spec.tier.clone(), job.spec.account.clone());
        *held.entry(key).or_default() += gpus;
    };
    let holds = |id: &JobId, allocs: &[ysched_common::NodeAlloc]| {
        if cluster.jobs[id].spec.exclusive {
            whole(&mut allocs.iter().map(|a| a.node.as_str()))
        } else {
            allocs.iter().map(|a| a.gpus.len() as u32).sum()
        }
    };
    for job in cluster.jobs.values().filter(|j| j.state.holds_resources()) {
        add(&job.id, holds(&job.id, &job.alloc));
    }
    for placement in &plan.placements {
        add(&placement.job, holds(&placement.job, &placement.alloc));
    }
    for (id, reason) in &plan.pending_reasons {
        if let PendingReason::Preempting { nodes, .. } = reason {
            let job = &cluster.jobs[id];
            let gpus = if job.spec.exclusive {
                whole(&mut nodes.iter().map(String::as_str)).max(job.spec.gpus)
            } else {
                job.spec.gpus
            };
            add(id, gpus);
        }
    }
    held
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Fair share reorders jobs inside a tier only; quotas are never exceeded by what a plan
    /// adds; the plan's other invariants hold; same input, same plan.
    #[test]
    fn fair_share_and_quotas_keep_the_invariants(
        cluster in cluster_gen(),
        factors in proptest::collection::vec(0.0f64..=1.0, 3),
        quotas in proptest::collection::vec(prop_oneof![Just(0u32), 1u32..12], 4),
    ) {
        let cluster = with_fair_share(cluster, &factors, &quotas);
        check_plan(&cluster)?;
        let queue = pending_in_order(&cluster.jobs, &cluster.fair_share);
        for pair in queue.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            prop_assert!(a.tier_value >= b.tier_value, "tiers dominate");
            if a.tier_value == b.tier_value {
                let (fa, fb) = (
                    cluster.fair_share.factor(&a.spec.account),
                    cluster.fair_share.factor(&b.spec.account),
                );
                prop_assert!(fa >= fb);
                prop_assert!(fa > fb || (a.submit_time, a.id) < (b.submit_time, b.id));
            }
        }
        let plan = cluster.schedule(NOW);
        let before = held_after(&cluster, &crate::core::Plan::default());
        for ((tier, account), gpus) in held_after(&cluster, &plan) {
            let max = cluster.tiers[&tier].max_gpus_per_account;
            let was = before.get(&(tier.clone(), account.clone())).copied().unwrap_or(0);
            prop_assert!(
                max == 0 || gpus <= max.max(was),
                "{} holds {} GPUs at {} (quota {})", account, gpus, tier, max
            );
        }
        for (id, reason) in &plan.pending_reasons {
            if reason == "AccountLimit" || reason == "UserLimit" {
                prop_assert!(!plan.evictions.iter().any(|e| e.preemptor == *id));
            }
        }
    }
}

/// Guards the generator: the properties above mean little if random clusters rarely evict, or
/// rarely exercise gangs and NVLink.
#[test]
fn generated_clusters_exercise_preemption() {
    let mut runner = TestRunner::deterministic();
    let strategy = cluster_gen_with(false);
    let (mut with_evictions, mut with_placements, mut with_in_flight) = (0, 0, 0);
    let (mut gang_evictions, mut nvlink_placements, mut nvlink_evictions) = (0, 0, 0);
    for _ in 0..128 {
        let cluster = strategy
            .new_tree(&mut runner)
            .expect("strategy generates")
            .current();
        let plan = cluster.schedule(NOW);
        let job = |id: &JobId| &cluster.jobs[id];
        gang_evictions += usize::from(
            plan.evictions
                .iter()
                .any(|e| job(&e.preemptor).spec.nodes > 1),
        );
        nvlink_evictions += usize::from(
            plan.evictions
                .iter()
                .any(|e| job(&e.preemptor).spec.interconnect.is_some()),
        );
        nvlink_placements += usize::from(plan.placements.iter().any(|p| {
            job(&p.job).spec.interconnect.is_some() && p.alloc.iter().any(|a| a.gpus.len() > 1)
        }));
        with_evictions += usize::from(!plan.evictions.is_empty());
        with_placements += usize::from(!plan.placements.is_empty());
        with_in_flight += usize::from(
            plan.pending_reasons
                .values()
                .any(|r| matches!(r, PendingReason::Preempting { .. }))
                && plan.evictions.is_empty(),
        );
    }
    assert!(
        with_evictions >= 24,
        "only {with_evictions}/128 plans evict"
    );
    assert!(
        with_placements >= 32,
        "only {with_placements}/128 plans place"
    );
    assert!(
        with_in_flight >= 2,
        "only {with_in_flight}/128 plans await an eviction"
    );
    assert!(
        gang_evictions >= 4,
        "only {gang_evictions}/128 plans evict for a gang"
    );
    assert!(
        nvlink_evictions >= 4,
        "only {nvlink_evictions}/128 plans evict for an NVLink job"
    );
    assert!(
        nvlink_placements >= 8,
        "only {nvlink_placements}/128 plans place a multi-GPU NVLink job"
    );
}
