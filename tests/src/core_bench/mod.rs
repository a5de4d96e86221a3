//! Benchmark of the pure scheduling core (no daemons, no I/O): one scheduling pass over a large
//! synthetic cluster, and one decision on the same cluster.
//!
//! The cluster: 1,000 nodes with 8 GPUs each, a quarter each of NVSwitch boxes (H800),
//! two-island boxes (A100 SXM), NVLink-pair boxes (A100 PCIe) and PCIe-only boxes (A10); about
//! half of the GPUs busy with running jobs of every tier (some spanning two nodes), and 100,000
//! pending jobs: mixed tiers, 1/2/4/8 GPUs, some spanning nodes, some asking for a GPU type,
//! NVLink or InfiniBand. Everything is generated from a fixed seed, so every run schedules the
//! same cluster.
//!
//! A second scenario schedules the same cluster as a real queue looks with arrays and
//! dependencies, backfill on: most running jobs have a time limit (so that reservations are
//! computed from their ends), a fifth of the pending jobs are array tasks (one array of a tenth
//! of the queue, one of a twentieth waiting `afterok` on every task of it, and arrays of 50 with
//! a `%4` limit), a tenth have a dependency (that second array, plus jobs waiting on running or
//! pending jobs, some `singleton`), and most pending jobs have a time limit.

mod cluster;
mod queue;
#[cfg(test)]
mod tests;

use cluster::{account, shared, BenchCluster};
use queue::QueueCluster;
use std::collections::BTreeMap;
use std::time::Instant;

use ysched_common::config::default_tiers;
use ysched_common::time::Millis;
use ysched_common::{
    ArraySpec, ArrayTask, DepClause, DepKind, Dependency, Gpu, GpuLink, Job, JobId, JobSpec,
    JobState, Node, NodeAlloc, PcieRelation, TierConfig,
};
use ysched_schedd::core::testkit::{JobBuilder, RunBuilder};
use ysched_schedd::core::{
    queue_order, schedule, schedule_with, Backfill, FairShare, JobMap, Policy, Snapshot, Topologies,
};
use ysched_schedd::fair_share::{share_table, QueueView, UsageBook};

/// One measured figure: name, value, unit, target, whether higher is better.
pub type CoreFigure = (&'static str, f64, &'static str, f64, bool);

const FULL_PASS: &str = "full scheduling pass, 1,000 nodes x 8 GPUs, 100,000 pending";
const PER_JOB: &str = "full scheduling pass, average per pending job";
const ONE_DECISION: &str = "one incremental decision (1,000 nodes x 8 GPUs, 1 pending)";
const ONE_DECISION_COLD: &str = "the same, node topologies read anew (no cache)";
const FAIR_PASS: &str = "the full pass with fair share (50 accounts)";
const FAIR_COST: &str = "fair share's cost: its queue order, share of the pass";
const FAIR_INPUTS: &str = "its factors, from the book and running jobs";
const BACKFILL_PASS: &str = "core: pass, 100k pending, arrays+deps+backfill";
const BACKFILL_OFF_PASS: &str = "core: pass, 100k pending, arrays+deps, backfill off";
const BACKFILL_RESERVED: &str = "core: jobs given a reservation in that pass";

/// Backfill as schedd's defaults have it.
const BACKFILL_ON: Backfill = Backfill {
    enabled: true,
    reservations: 1,
};

/// Pending and running jobs are charged to this many accounts (`team00`..`team49`).
const N_ACCOUNTS: u64 = 50;

/// Some fixed point in time.
const NOW: Millis = 1_700_000_000_000;
const MINUTE: Millis = 60_000;
const HOUR: Millis = 60 * MINUTE;

pub fn run() -> Vec<CoreFigure> {
    run_with(1_000, 100_000, 3)
}

/// The benchmark on `n_nodes` nodes with `n_pending` pending jobs; the full pass is timed
/// `passes` times (the median counts).
pub fn run_with(n_nodes: usize, n_pending: usize, passes: usize) -> Vec<CoreFigure> {
    let cluster = BenchCluster::generate(n_nodes, n_pending);
    let policy = Policy::new(&cluster.tiers);
    // Every account a different factor, spread over 0..1 as fair share would leave them.
    let factors =
        FairShare::new((0..N_ACCOUNTS).map(|i| (account(i), 0.5f64.powf(i as f64 / 10.0))));
    let fair_policy = Policy {
        tiers: &cluster.tiers,
        fair_share: &factors,
        backfill: ysched_schedd::core::Backfill::OFF,
    };
    // For the cost: every account listed, all with one factor, so that every job's account
    // is looked up, yet the order is the same as without fair share.
    let even = FairShare::new((0..N_ACCOUNTS).map(|i| (account(i), 0.5)));

    let snap = Snapshot::new(&cluster.jobs, &cluster.nodes);
    // As schedd runs it: node topologies kept between passes.
    let mut kept = Topologies::default();
    // Passes without and with fair share take turns, so that drift of the machine's speed
    // weighs on both alike.
    let (mut full_ms, mut fair_ms) = (Vec::new(), Vec::new());
    for _ in 0..passes.max(1) {
        for (policy, times) in [(&policy, &mut full_ms), (&fair_policy, &mut fair_ms)] {
            let start = Instant::now();
            let plan = schedule_with(&snap, policy, NOW, &mut kept);
            times.push(start.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(plan);
        }
    }
    let full_ms = median(&mut full_ms);
    let fair_ms = median(&mut fair_ms);
    // Fair share's cost is in the queue's order alone (the pass decides alike whatever the
    // order), a small difference of two long timings: timed on its own, fastest of several
    // runs in turns, as a share of the full pass.
    let (mut plain_order, mut fair_order) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        for (fair_share, times) in [
            (FairShare::none(), &mut plain_order),
            (&even, &mut fair_order),
        ] {
            let start = Instant::now();
            std::hint::black_box(queue_order(&cluster.jobs, fair_share));
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let fastest = |times: &[f64]| times.iter().copied().fold(f64::INFINITY, f64::min);
    let cost = (fastest(&fair_order) - fastest(&plain_order)) / full_ms.max(1e-9) * 100.0;

    // One decision: the same loaded cluster with exactly one pending job, for several different
    // jobs of the queue, each alone; each is scheduled once untimed (so that the allocator has
    // settled after the big pass), then timed a few times.
    let (mut one_ms, mut one_cold_ms) = (Vec::new(), Vec::new());
    for job in cluster.pending.iter().take(15) {
        let jobs = shared(cluster.running.values().chain([job]));
        let snap = Snapshot::new(&jobs, &cluster.nodes);
        std::hint::black_box(schedule_with(&snap, &policy, NOW, &mut kept));
        for _ in 0..3 {
            let start = Instant::now();
            let plan = schedule_with(&snap, &policy, NOW, &mut kept);
            one_ms.push(start.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(plan);
            // Without the cache: every node's topology read again.
            let start = Instant::now();
            let plan = schedule(&snap, &policy, NOW);
            one_cold_ms.push(start.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(plan);
        }
    }
    let one_ms = median(&mut one_ms);
    let one_cold_ms = median(&mut one_cold_ms);

    // What schedd does around the core for fair share in each pass: the share table from the
    // book and every running job, the factors, and each pending job's place.
    let mut book = UsageBook::new(7 * 24 * HOUR, NOW);
    for (i, job) in cluster.running.values().enumerate() {
        let run = RunBuilder::new(job.id.0, NOW - 47 * HOUR, NOW - (i as i64 % 40) * HOUR)
            .account(&job.spec.account)
            .user(&job.owner.user, job.owner.uid)
            .tier(&job.spec.tier)
            .gpus(job.spec.gpus)
            .queued(NOW - 48 * HOUR);
        book.add_run(&run.build());
    }
    let accounts = BTreeMap::new();
    let mut inputs_ms: Vec<f64> = (0..passes.max(1))
        .map(|_| {
            let start = Instant::now();
            let table = share_table(&book, &accounts, &cluster.jobs, NOW);
            let factors = table.factors();
            let mut ms = start.elapsed().as_secs_f64() * 1e3;
            // The queue comes from the pass itself: not timed.
            let policy = Policy {
                tiers: &cluster.tiers,
                fair_share: &factors,
                backfill: ysched_schedd::core::Backfill::OFF,
            };
            let queue = pending_queue(&cluster.jobs, &policy);
            let start = Instant::now();
            // The places are sorted at `yq`'s first question, not here.
            let view = QueueView::new(table, factors.clone(), queue);
            ms += start.elapsed().as_secs_f64() * 1e3;
            std::hint::black_box(view);
            ms
        })
        .collect();
    let inputs_ms = median(&mut inputs_ms);

    // Arrays, dependencies and backfill: the same nodes and queue shapes, with limits.
    let queue = QueueCluster::generate(n_nodes, n_pending);
    let snap = queue.snapshot();
    let (mut on_ms, mut off_ms, mut reserved) = (Vec::new(), Vec::new(), 0);
    for _ in 0..passes.max(1) {
        for (backfill, times) in [(BACKFILL_ON, &mut on_ms), (Backfill::OFF, &mut off_ms)] {
            let policy = Policy {
                backfill,
                ..Policy::new(&queue.cluster.tiers)
            };
            let start = Instant::now();
            let plan = schedule_with(&snap, &policy, NOW, &mut kept);
            times.push(start.elapsed().as_secs_f64() * 1e3);
            if backfill.enabled {
                reserved = plan.expected_starts.len();
            }
            std::hint::black_box(plan);
        }
    }
    let on_ms = median(&mut on_ms);
    let off_ms = median(&mut off_ms);

    vec![
        (FULL_PASS, full_ms, "ms", 1000.0, false),
        (
            PER_JOB,
            full_ms * 1e3 / n_pending.max(1) as f64,
            "us",
            10.0,
            false,
        ),
        (ONE_DECISION, one_ms, "ms", 1.0, false),
        (ONE_DECISION_COLD, one_cold_ms, "ms", 1.0, false),
        (FAIR_PASS, fair_ms, "ms", 1000.0, false),
        (FAIR_COST, cost, "%", 10.0, false),
        (FAIR_INPUTS, inputs_ms, "ms", 100.0, false),
        (BACKFILL_PASS, on_ms, "ms", 1000.0, false),
        (BACKFILL_OFF_PASS, off_ms, "ms", 1000.0, false),
        // Low and medium may not preempt: one reservation each, at least.
        (BACKFILL_RESERVED, reserved as f64, "", 2.0, true),
    ]
}

/// No nodes at all.
static NO_NODES: BTreeMap<String, Node> = BTreeMap::new();

/// The pending jobs in the pass's order, as `schedule_with_queue` hands them to schedd, found
/// cheaply: without nodes the pass decides nothing but walks the same queue.
fn pending_queue(jobs: &JobMap, policy: &Policy<'_>) -> Vec<(JobId, i64)> {
    let empty = Snapshot::new(jobs, &NO_NODES);
    ysched_schedd::core::schedule_with_queue(&empty, policy, NOW, &mut Topologies::default()).1
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
