//! Tests of the core benchmark on small clusters: its figures, and the paths its scenarios reach.

use super::*;
use ysched_schedd::core::{PendingReason, Plan};

/// Placements, evictions, unsatisfiable and preempting jobs.
fn summary(plan: &Plan) -> (usize, usize, usize, usize) {
    let count =
        |is: fn(&PendingReason) -> bool| plan.pending_reasons.values().filter(|r| is(r)).count();
    (
        plan.placements.len(),
        plan.evictions.len(),
        count(|r| matches!(r, PendingReason::Unsatisfiable(_))),
        count(|r| matches!(r, PendingReason::Preempting { .. })),
    )
}

#[test]
fn small_bench_reports_its_figures() {
    let figures = run_with(40, 2_000, 1);
    let names: Vec<&str> = figures.iter().map(|f| f.0).collect();
    assert_eq!(
        names,
        [
            FULL_PASS,
            PER_JOB,
            ONE_DECISION,
            ONE_DECISION_COLD,
            FAIR_PASS,
            FAIR_COST,
            FAIR_INPUTS,
            BACKFILL_PASS,
            BACKFILL_OFF_PASS,
            BACKFILL_RESERVED,
        ]
    );
    for (name, value, _, target, higher_is_better) in figures {
        // The cost is a difference of two timings: it may come out below zero.
        assert!(
            value.is_finite() && (value >= 0.0 || name == FAIR_COST),
            "{name}: {value}"
        );
        assert!(
            target > 0.0 && higher_is_better == (name == BACKFILL_RESERVED),
            "{name}"
        );
    }
}

/// The queue scenario has what it says: arrays sharing one spec, dependencies met and not,
/// limits, and a pass that reserves and holds jobs back for each reason.
#[test]
fn queue_scenario_exercises_arrays_dependencies_and_backfill() {
    let queue = QueueCluster::generate(40, 2_000);
    let jobs = &queue.cluster.jobs;
    let tasks = jobs.values().filter(|j| j.array.is_some()).count();
    assert_eq!(tasks, 400, "a fifth of the queue");
    let with_deps = jobs
        .values()
        .filter(|j| j.spec.dependency.is_some())
        .count();
    assert_eq!(with_deps, 200, "a tenth of the queue");
    let big = jobs
        .values()
        .find(|j| j.spec.array.is_some())
        .expect("an array");
    let shared = jobs
        .values()
        .filter(|j| std::sync::Arc::ptr_eq(&j.spec, &big.spec))
        .count();
    assert_eq!(shared, 200);
    let limited = jobs
        .values()
        .filter(|j| j.spec.time_limit_secs.is_some())
        .count();
    assert!(
        limited * 2 > jobs.len(),
        "{limited} of {} limited",
        jobs.len()
    );

    let snap = queue.snapshot();
    let tiers = &queue.cluster.tiers;
    let on = schedule(
        &snap,
        &Policy {
            backfill: BACKFILL_ON,
            ..Policy::new(tiers)
        },
        NOW,
    );
    let off = schedule(&snap, &Policy::new(tiers), NOW);
    let count = |plan: &Plan, reason: &str| {
        plan.pending_reasons
            .values()
            .filter(|r| *r == reason)
            .count()
    };
    assert!(on.expected_starts.len() >= 2, "{:?}", on.expected_starts);
    for reason in [
        "Dependency",
        "DependencyNeverSatisfied",
        "JobArrayTaskLimit",
    ] {
        assert!(count(&on, reason) >= 5, "{reason}: {}", count(&on, reason));
        assert_eq!(count(&on, reason), count(&off, reason), "{reason}");
    }
    // Reserved jobs wait as they would without backfill.
    for id in on.expected_starts.keys() {
        assert_eq!(on.pending_reasons.get(id), off.pending_reasons.get(id));
    }
    assert_eq!(
        on,
        schedule(
            &snap,
            &Policy {
                backfill: BACKFILL_ON,
                ..Policy::new(tiers)
            },
            NOW
        )
    );
}

/// The cost figure compares like with like: one factor for all changes no decision;
/// spread factors do change them, deterministically.
#[test]
fn even_factors_change_no_plan() {
    let cluster = BenchCluster::generate(40, 2_000);
    let snap = Snapshot::new(&cluster.jobs, &cluster.nodes);
    let plain = schedule(&snap, &Policy::new(&cluster.tiers), NOW);
    let even = FairShare::new((0..N_ACCOUNTS).map(|i| (account(i), 0.5)));
    let policy = Policy {
        tiers: &cluster.tiers,
        fair_share: &even,
        backfill: ysched_schedd::core::Backfill::OFF,
    };
    assert_eq!(schedule(&snap, &policy, NOW), plain);
    let spread = FairShare::new((0..N_ACCOUNTS).map(|i| (account(i), 1.0 / (1 + i) as f64)));
    let policy = Policy {
        tiers: &cluster.tiers,
        fair_share: &spread,
        backfill: ysched_schedd::core::Backfill::OFF,
    };
    let fair = schedule(&snap, &policy, NOW);
    assert_ne!(fair, plain);
    assert_eq!(fair, schedule(&snap, &policy, NOW));
}

#[test]
fn generated_cluster_exercises_every_path() {
    let cluster = BenchCluster::generate(40, 2_000);
    let busy: usize = cluster
        .running
        .values()
        .flat_map(|j| &j.alloc)
        .map(|a| a.gpus.len())
        .sum();
    assert!((100..=220).contains(&busy), "{busy} of 320 GPUs busy");
    let policy = Policy::new(&cluster.tiers);
    let snap = Snapshot::new(&cluster.jobs, &cluster.nodes);
    let plan = schedule(&snap, &policy, NOW);
    let (placed, evicted, unsatisfiable, preempting) = summary(&plan);
    assert!(placed >= 20, "{placed} placed");
    assert!(evicted >= 5, "{evicted} evicted");
    assert!(preempting >= 5, "{preempting} preempting");
    assert!(unsatisfiable >= 10, "{unsatisfiable} unsatisfiable");
    let spans = |id: &JobId| cluster.jobs[id].spec.nodes > 1;
    assert!(
        plan.placements.iter().any(|p| spans(&p.job))
            || plan.evictions.iter().any(|e| spans(&e.preemptor)),
        "a job spanning nodes is placed or preempts"
    );
    assert_eq!(plan, schedule(&snap, &policy, NOW), "deterministic");
}
