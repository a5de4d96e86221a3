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
    queue_order, schedule, schedule_with, Backfill, FairShare, Policy, Snapshot, Topologies,
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
        let mut jobs = cluster.running.clone();
        jobs.insert(job.id, job.clone());
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

/// The generated cluster with arrays, dependencies and time limits (see the module doc), and
/// how the finished targets of dependencies ended.
struct QueueCluster {
    cluster: BenchCluster,
    ended: BTreeMap<JobId, JobState>,
}

impl QueueCluster {
    fn generate(n_nodes: usize, n_pending: usize) -> Self {
        let mut cluster = BenchCluster::generate(n_nodes, n_pending);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        // Most running jobs end by a limit, between 10 minutes and 12 hours from now; a few
        // are past it.
        for job in cluster.running.values_mut() {
            let started = job.start_time.unwrap_or(NOW);
            let left: Option<Millis> = rng.pick(&[
                (25, None),
                (5, Some(0)),
                (20, Some(10 * MINUTE)),
                (20, Some(HOUR)),
                (15, Some(4 * HOUR)),
                (15, Some(12 * HOUR)),
            ]);
            let jitter = rng.below(10 * MINUTE as u64) as Millis;
            spec_mut(job).time_limit_secs =
                left.map(|left| ((NOW - started + left + jitter) / 1000) as u64);
        }

        let n = cluster.pending.len();
        let (big, dependent, small) = (n / 10, n / 20, n / 20);
        let deps_alone = n / 20;
        let mut next = 0;
        // A big array; an array waiting for every task of it to complete; arrays of 50 with %4.
        let big_ids = make_array(&mut cluster.pending[next..next + big], 0, None);
        next += big;
        let after_big = Dependency {
            any: false,
            clauses: vec![DepClause {
                kind: DepKind::AfterOk,
                jobs: big_ids,
            }],
            singleton: false,
            text: format!("afterok:{}", cluster.pending[0].id),
        };
        make_array(
            &mut cluster.pending[next..next + dependent],
            0,
            Some(after_big),
        );
        next += dependent;
        for chunk in cluster.pending[next..next + small].chunks_mut(50) {
            // Small high jobs submitted long ago: near the head of the queue, where the limit
            // binds before room runs out.
            for job in chunk.iter_mut() {
                let spec = spec_mut(job);
                spec.tier = TIERS[1].0.to_string();
                (spec.gpus, spec.nodes, spec.cpus, spec.mem_mib) = (1, 1, 4, 16_000);
                spec.gpu_types.clear();
                spec.interconnect = None;
                spec.constraints.clear();
                job.tier_value = TIERS[1].1;
                job.submit_time = NOW - 72 * HOUR;
            }
            make_array(chunk, 4, None);
        }
        next += small;
        // Jobs waiting on running jobs and on pending ones (earlier in the queue), some
        // singletons among a few names.
        let running_ids: Vec<JobId> = cluster.running.keys().copied().collect();
        for i in next..next + deps_alone {
            let kind = rng.pick(&[
                (40, DepKind::AfterOk),
                (30, DepKind::AfterAny),
                (10, DepKind::AfterNotOk),
                (20, DepKind::After),
            ]);
            // A running job, one that ended (the first tenth of them end below), or a job
            // earlier in the queue.
            let n_running = running_ids.len() as u64;
            let target = match rng.below(4) {
                0 if n_running > 0 => running_ids[rng.below(n_running) as usize],
                1 if n_running >= 10 => running_ids[rng.below(n_running / 10) as usize],
                _ => cluster.pending[rng.below(i as u64) as usize].id,
            };
            let singleton = rng.below(10) == 0;
            let spec = spec_mut(&mut cluster.pending[i]);
            if singleton {
                spec.name = format!("sweep{}", i % 7);
            }
            spec.dependency = Some(Dependency {
                any: false,
                clauses: vec![DepClause {
                    kind,
                    jobs: vec![target],
                }],
                singleton,
                text: format!("{}:{target}", kind.as_str()),
            });
        }
        // Every other pending job: a limit, most of the time.
        for job in &mut cluster.pending[big + dependent + small..] {
            let limit: Option<u64> = rng.pick(&[
                (35, None),
                (10, Some(600)),
                (10, Some(1800)),
                (15, Some(3600)),
                (10, Some(2 * 3600)),
                (10, Some(4 * 3600)),
                (5, Some(12 * 3600)),
                (5, Some(24 * 3600)),
            ]);
            spec_mut(job).time_limit_secs = limit;
        }
        // Some targets have finished: of the first running jobs' ids, as if they had ended.
        let mut ended = BTreeMap::new();
        for (i, id) in running_ids.iter().take(running_ids.len() / 10).enumerate() {
            let state = if i % 3 == 0 {
                JobState::Failed
            } else {
                JobState::Completed
            };
            ended.insert(*id, state);
            cluster.running.remove(id);
        }
        cluster.jobs = cluster.running.clone();
        cluster
            .jobs
            .extend(cluster.pending.iter().map(|j| (j.id, j.clone())));
        QueueCluster { cluster, ended }
    }

    fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            jobs: &self.cluster.jobs,
            nodes: &self.cluster.nodes,
            ended: &self.ended,
        }
    }
}

fn spec_mut(job: &mut Job) -> &mut JobSpec {
    std::sync::Arc::make_mut(&mut job.spec)
}

/// Makes these consecutive pending jobs one array, sharing the first one's spec (with an hour's
/// limit and the dependency) and submit time; returns their ids.
fn make_array(jobs: &mut [Job], max_running: u32, dependency: Option<Dependency>) -> Vec<JobId> {
    let Some(first) = jobs.first() else {
        return Vec::new();
    };
    let (array_id, submit_time) = (first.id, first.submit_time);
    let count = jobs.len() as u32;
    let mut spec = (*first.spec).clone();
    spec.array = Some(ArraySpec::first_n(count, max_running));
    spec.time_limit_secs = Some(3600);
    spec.dependency = dependency;
    let spec = std::sync::Arc::new(spec);
    for (task, job) in jobs.iter_mut().enumerate() {
        job.spec = std::sync::Arc::clone(&spec);
        job.submit_time = submit_time;
        job.array = Some(ArrayTask {
            array_id,
            task: task as u32,
        });
    }
    jobs.iter().map(|j| j.id).collect()
}

/// No nodes at all.
static NO_NODES: BTreeMap<String, Node> = BTreeMap::new();

/// The pending jobs in the pass's order, as `schedule_with_queue` hands them to schedd, found
/// cheaply: without nodes the pass decides nothing but walks the same queue.
fn pending_queue(jobs: &BTreeMap<JobId, Job>, policy: &Policy<'_>) -> Vec<(JobId, i64)> {
    let empty = Snapshot::new(jobs, &NO_NODES);
    ysched_schedd::core::schedule_with_queue(&empty, policy, NOW, &mut Topologies::default()).1
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The generated cluster.
struct BenchCluster {
    nodes: BTreeMap<String, Node>,
    /// Running and pending jobs together, as the snapshot has them.
    jobs: BTreeMap<JobId, Job>,
    running: BTreeMap<JobId, Job>,
    /// In id order.
    pending: Vec<Job>,
    tiers: BTreeMap<String, TierConfig>,
}

/// A small deterministic generator (xorshift64*): the bench must schedule the same cluster
/// every run, and needs no crate for that.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Picks by weight: `choices` are (weight, value).
    fn pick<T: Copy>(&mut self, choices: &[(u64, T)]) -> T {
        let total: u64 = choices.iter().map(|(w, _)| w).sum();
        let mut at = self.below(total);
        for (weight, value) in choices {
            if at < *weight {
                return *value;
            }
            at -= weight;
        }
        choices[choices.len() - 1].1
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wiring {
    /// NVSwitch: all NVLinked; PCIe PXB within a half, SYS across.
    Dgx,
    /// NVLink islands 0-3 and 4-7; PXB within an island, SYS across.
    TwoIslands,
    /// NVLink bridges 0-1, 2-3, ...; PIX within a pair, NODE within a half, SYS across.
    Pairs,
    /// PCIe only: PIX within a pair, NODE within a half, SYS across.
    PcieOnly,
}

const TIERS: [(&str, i64); 4] = [
    ("critical", 1_000_000),
    ("high", 10_000),
    ("medium", 1_000),
    ("low", 100),
];

impl BenchCluster {
    fn generate(n_nodes: usize, n_pending: usize) -> Self {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut nodes = BTreeMap::new();
        let mut names = Vec::new();
        for i in 0..n_nodes {
            let (wiring, model, ib) = match i % 4 {
                0 => (Wiring::Dgx, "NVIDIA H800 80GB HBM3", true),
                1 => (Wiring::TwoIslands, "NVIDIA A100-SXM4-80GB", true),
                2 => (Wiring::Pairs, "NVIDIA A100-PCIE-40GB", false),
                _ => (Wiring::PcieOnly, "NVIDIA A10", false),
            };
            let name = format!("node{i:04}");
            nodes.insert(name.clone(), node(&name, model, wiring, ib));
            names.push(name);
        }

        // About half of every node busy, in a few patterns; every 25th pair of nodes of one
        // kind shares a job spanning both.
        let patterns: [&[&[u32]]; 5] = [
            &[&[0, 1, 2, 3]],
            &[&[0, 1], &[4, 5]],
            &[&[0], &[2], &[4, 5]],
            &[&[1], &[3], &[5], &[7]],
            &[&[4, 5, 6, 7]],
        ];
        let mut running = BTreeMap::new();
        let mut next_id = 1u64;
        let mut i = 0;
        while i < n_nodes {
            let tier = rng.pick(&[(5, 0), (25, 1), (30, 2), (40, 3)]);
            if i % 100 == 0 && i + 4 < n_nodes {
                // nodes i and i + 4 have the same kind.
                let allocs = [&names[i], &names[i + 4]]
                    .map(|node| alloc(node, &[0, 1, 2, 3]))
                    .to_vec();
                let job = running_job(&mut rng, next_id, tier, 2, allocs);
                running.insert(job.id, job);
                next_id += 1;
            } else if i % 100 != 4 {
                for gpus in patterns[rng.below(patterns.len() as u64) as usize] {
                    let tier = rng.pick(&[(5, 0), (25, 1), (30, 2), (40, 3)]);
                    let job = running_job(&mut rng, next_id, tier, 1, vec![alloc(&names[i], gpus)]);
                    running.insert(job.id, job);
                    next_id += 1;
                }
            }
            i += 1;
        }

        let mut pending = Vec::with_capacity(n_pending);
        for _ in 0..n_pending {
            pending.push(pending_job(&mut rng, next_id));
            next_id += 1;
        }
        let mut jobs = running.clone();
        jobs.extend(pending.iter().map(|j| (j.id, j.clone())));
        BenchCluster {
            nodes,
            jobs,
            running,
            pending,
            tiers: default_tiers(),
        }
    }
}

fn node(name: &str, model: &str, wiring: Wiring, ib: bool) -> Node {
    let n = 8u32;
    let half = |a: u32| a < n / 2;
    let nvlinked = |a: u32, b: u32| match wiring {
        Wiring::Dgx => true,
        Wiring::TwoIslands => half(a) == half(b),
        Wiring::Pairs => a / 2 == b / 2,
        Wiring::PcieOnly => false,
    };
    let pcie = |a: u32, b: u32| match wiring {
        Wiring::Dgx | Wiring::TwoIslands if half(a) == half(b) => PcieRelation::Pxb,
        Wiring::Dgx | Wiring::TwoIslands => PcieRelation::Sys,
        _ if a / 2 == b / 2 => PcieRelation::Pix,
        _ if half(a) == half(b) => PcieRelation::Node,
        _ => PcieRelation::Sys,
    };
    let gpus: Vec<Gpu> = (0..n)
        .map(|a| Gpu {
            index: a,
            uuid: format!("GPU-{name}-{a}"),
            model: model.to_string(),
            memory_mib: 81_920,
            pci_bus_id: format!("0000:{:02x}:00.0", 0x10 + a),
            numa_node: Some(i32::from(!half(a))),
            nvlink: (0..n).filter(|&b| b != a && nvlinked(a, b)).collect(),
            links: (0..n)
                .filter(|&b| b != a)
                .map(|b| GpuLink {
                    peer: b,
                    pcie: pcie(a, b),
                    nvlinks: if nvlinked(a, b) { 12 } else { 0 },
                })
                .collect(),
        })
        .collect();
    Node {
        name: name.to_string(),
        address: format!("{name}:7118"),
        cpus: 128,
        mem_mib: 1_024_000,
        gpus: std::sync::Arc::new(gpus),
        features: if ib {
            vec!["ib".to_string()]
        } else {
            Vec::new()
        },
        drain_reason: None,
        drained_by_node: false,
        connected: true,
        last_seen: NOW,
        killing: Default::default(),
        fence_after_secs: 0,
        gpus_out_of_service: Default::default(),
        gpus_forgetting: Default::default(),
    }
}

fn alloc(node: &str, gpus: &[u32]) -> NodeAlloc {
    NodeAlloc {
        node: node.to_string(),
        gpus: gpus.to_vec(),
        cpus: 8 * gpus.len() as u32,
        mem_mib: 32_000 * gpus.len() as u64,
    }
}

/// The `i`th account: `team07`.
fn account(i: u64) -> String {
    format!("team{i:02}")
}

fn job(id: u64, tier: usize, spec: JobSpec) -> Job {
    let (tier_name, tier_value) = TIERS[tier];
    JobBuilder::new(id)
        .request(spec)
        .tier(tier_name, tier_value)
        .account(&account(id % N_ACCOUNTS))
        .submitted(NOW - HOUR)
        .build()
}

fn running_job(rng: &mut Rng, id: u64, tier: usize, nodes: u32, allocs: Vec<NodeAlloc>) -> Job {
    let per_node = allocs[0].gpus.len() as u32;
    let mut job = job(
        id,
        tier,
        JobSpec {
            gpus: per_node * nodes,
            nodes,
            cpus: allocs[0].cpus,
            mem_mib: allocs[0].mem_mib,
            ..JobSpec::default()
        },
    );
    let started = NOW - 10 * MINUTE - rng.below(10 * HOUR as u64) as Millis;
    job.state = JobState::Running;
    job.launched = true;
    job.alloc = allocs;
    job.submit_time = started - MINUTE;
    job.start_time = Some(started);
    if rng.below(2) == 0 {
        job.last_checkpoint = Some(started.max(NOW - rng.below(HOUR as u64) as Millis));
    }
    job
}

fn pending_job(rng: &mut Rng, id: u64) -> Job {
    let tier = rng.pick(&[(1, 0), (14, 1), (35, 2), (50, 3)]);
    let per_node: u32 = rng.pick(&[(40, 1), (30, 2), (20, 4), (10, 8)]);
    let nodes: u32 = if per_node >= 4 && rng.below(100) < 8 {
        2
    } else {
        1
    };
    let gpu_types: &[&str] = rng.pick(&[
        (55, &[][..]),
        (15, &["A100"][..]),
        (12, &["H800"][..]),
        (8, &["A10"][..]),
        (10, &["A100", "H800"][..]),
    ]);
    let nvlink = per_node >= 2 && rng.below(100) < 15;
    let ib = rng.below(100) < 3;
    let mut job = job(
        id,
        tier,
        JobSpec {
            gpus: per_node * nodes,
            nodes,
            gpu_types: gpu_types.iter().map(|t| t.to_string()).collect(),
            cpus: 4 * per_node,
            mem_mib: 16_000 * u64::from(per_node),
            interconnect: nvlink.then(|| "nvlink".to_string()),
            constraints: if ib {
                vec!["ib".to_string()]
            } else {
                Vec::new()
            },
            ..JobSpec::default()
        },
    );
    job.submit_time = NOW - rng.below(72 * HOUR as u64) as Millis;
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_schedd::core::{PendingReason, Plan};

    /// Placements, evictions, unsatisfiable and preempting jobs.
    fn summary(plan: &Plan) -> (usize, usize, usize, usize) {
        let count = |is: fn(&PendingReason) -> bool| {
            plan.pending_reasons.values().filter(|r| is(r)).count()
        };
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
}
