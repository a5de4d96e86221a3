//! The core benchmark's generated cluster: four node wirings, running and pending jobs, seeded.

use super::*;

/// The generated cluster.
pub(super) struct BenchCluster {
    pub(super) nodes: BTreeMap<String, Node>,
    /// Running and pending jobs together, as the snapshot has them.
    pub(super) jobs: JobMap,
    pub(super) running: BTreeMap<JobId, Job>,
    /// In id order.
    pub(super) pending: Vec<Job>,
    pub(super) tiers: BTreeMap<String, TierConfig>,
}

/// A small deterministic generator (xorshift64*): the bench must schedule the same cluster
/// every run, and needs no crate for that.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Picks by weight: `choices` are (weight, value).
    pub(super) fn pick<T: Copy>(&mut self, choices: &[(u64, T)]) -> T {
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
pub(super) enum Wiring {
    /// NVSwitch: all NVLinked; PCIe PXB within a half, SYS across.
    Dgx,
    /// NVLink islands 0-3 and 4-7; PXB within an island, SYS across.
    TwoIslands,
    /// NVLink bridges 0-1, 2-3, ...; PIX within a pair, NODE within a half, SYS across.
    Pairs,
    /// PCIe only: PIX within a pair, NODE within a half, SYS across.
    PcieOnly,
}

pub(super) const TIERS: [(&str, i64); 4] = [
    ("critical", 1_000_000),
    ("high", 10_000),
    ("medium", 1_000),
    ("low", 100),
];

impl BenchCluster {
    pub(super) fn generate(n_nodes: usize, n_pending: usize) -> Self {
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
        let jobs = shared(running.values().chain(&pending));
        BenchCluster {
            nodes,
            jobs,
            running,
            pending,
            tiers: default_tiers(),
        }
    }
}

pub(super) fn node(name: &str, model: &str, wiring: Wiring, ib: bool) -> Node {
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
        registered_at: 0,
        killing: Default::default(),
        fence_after_secs: 0,
        gpus_out_of_service: Default::default(),
        gpus_forgetting: Default::default(),
    }
}

pub(super) fn alloc(node: &str, gpus: &[u32]) -> NodeAlloc {
    NodeAlloc {
        node: node.to_string(),
        gpus: gpus.to_vec(),
        cpus: 8 * gpus.len() as u32,
        mem_mib: 32_000 * gpus.len() as u64,
    }
}

/// The `i`th account: `team07`.
pub(super) fn account(i: u64) -> String {
    format!("team{i:02}")
}

pub(super) fn job(id: u64, tier: usize, spec: JobSpec) -> Job {
    let (tier_name, tier_value) = TIERS[tier];
    JobBuilder::new(id)
        .request(spec)
        .tier(tier_name, tier_value)
        .account(&account(id % N_ACCOUNTS))
        .submitted(NOW - HOUR)
        .build()
}

pub(super) fn running_job(
    rng: &mut Rng,
    id: u64,
    tier: usize,
    nodes: u32,
    allocs: Vec<NodeAlloc>,
) -> Job {
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

pub(super) fn pending_job(rng: &mut Rng, id: u64) -> Job {
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

/// These jobs as a snapshot holds them: each behind its own `Arc`.
pub(super) fn shared<'j>(jobs: impl IntoIterator<Item = &'j Job>) -> JobMap {
    jobs.into_iter()
        .map(|j| (j.id, std::sync::Arc::new(j.clone())))
        .collect()
}
