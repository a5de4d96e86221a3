//! GPU topology inside one node: how its GPUs reach each other, and which free GPUs a job gets.
//!
//! [`Topology::best_set`] is the only place that decides which GPUs of a node a job gets; its
//! ranking is [`GpuSetRank`]. Placement, preemption, satisfiability and `explain` all reach it
//! through `fit::fit_on_node`.
//!
//! GPUs are handled as bit masks over *positions*: position `p` is the node's `p`-th GPU in index
//! order. A [`Topology`] depends only on what the agent reported (indices, models, NVLink and
//! PCIe paths), so nodes built alike share one, and with it the memo of its choices.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use ysched_common::{Gpu, Node, PcieRelation};

/// The most GPUs of one node the scheduler hands out: one bit each in a `u64`. GPUs past the
/// 64th (by index) are neither counted nor given out; no machine built today comes near this.
pub(crate) const MAX_GPUS: usize = 64;

/// Up to this many candidate sets, [`Topology::best_set`] ranks every set; beyond, it grows sets
/// greedily. `C(10, 5) = 252`: a node with 10 free GPUs is still searched exhaustively for any
/// job size, a 16-GPU node for jobs of 1 or 2 GPUs.
const ENUMERATION_LIMIT: u64 = 256;

/// How two GPUs of a node reach each other, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Path {
    /// NVLink, directly or through an NVSwitch.
    NvLink,
    /// PCIe only, with this relation.
    Pcie(PcieRelation),
}

impl Path {
    /// No restriction: every pair of GPUs of a node is at least `SYS`.
    pub(crate) const ANY: Path = Path::Pcie(PcieRelation::Sys);

    /// 0 for NVLink, then 1 (`PIX`) to 5 (`SYS`): the same order.
    fn rank(self) -> u8 {
        match self {
            Path::NvLink => 0,
            Path::Pcie(PcieRelation::Pix) => 1,
            Path::Pcie(PcieRelation::Pxb) => 2,
            Path::Pcie(PcieRelation::Phb) => 3,
            Path::Pcie(PcieRelation::Node) => 4,
            Path::Pcie(PcieRelation::Sys) => 5,
        }
    }

    fn from_rank(rank: u8) -> Path {
        match rank {
            0 => Path::NvLink,
            1 => Path::Pcie(PcieRelation::Pix),
            2 => Path::Pcie(PcieRelation::Pxb),
            3 => Path::Pcie(PcieRelation::Phb),
            4 => Path::Pcie(PcieRelation::Node),
            _ => Path::Pcie(PcieRelation::Sys),
        }
    }
}

/// "NVLink", or "PXB or better".
impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::NvLink => f.write_str("NVLink"),
            Path::Pcie(relation) => write!(f, "{} or better", relation.as_str()),
        }
    }
}

/// How well a set of GPUs on one node is connected; the smaller, the better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Connectivity {
    /// The worst path between two GPUs of the set: `NvLink` exactly when every pair is NVLinked
    /// (a set of one GPU, or none, counts as fully NVLinked). A PCIe relation only matters
    /// between GPUs without NVLink.
    pub(crate) worst: Path,
    /// The paths of all pairs summed by rank (NVLink 0, `PIX` 1 ... `SYS` 5): among sets with
    /// the same worst path, the one whose pairs are tighter on the whole.
    pub(crate) sum: u32,
}

impl Connectivity {
    /// A single GPU, or none.
    pub(crate) const BEST: Connectivity = Connectivity {
        worst: Path::NvLink,
        sum: 0,
    };
}

/// Levels at which GPUs of a node group together, tightest first: NVLink islands, then GPUs
/// linked by `PIX` or better, `PXB`, `PHB`, and `NODE` (one NUMA node). NVLink counts as better
/// than any PCIe relation, so an NVSwitch box is one group at every level.
///
/// Tight groups go first because they are the scarce ones: a small job that breaks an NVLink
/// pair or island costs later multi-GPU jobs their best connection, while a socket with a hole
/// still offers PCIe sets. (Packing by socket first would fill a half-used socket by breaking
/// an intact pair there rather than take a GPU whose partner is already busy.)
const LEVELS: [Path; 5] = [
    Path::NvLink,
    Path::Pcie(PcieRelation::Pix),
    Path::Pcie(PcieRelation::Pxb),
    Path::Pcie(PcieRelation::Phb),
    Path::Pcie(PcieRelation::Node),
];
const N_LEVELS: usize = LEVELS.len();

/// The ranking of candidate GPU sets on one node: the smallest wins. Compared field by field,
/// in declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GpuSetRank {
    /// Topology first: a fully NVLinked set if there is one, else the set whose worst PCIe
    /// relation is best, then the tightest in sum.
    pub(crate) conn: Connectivity,
    /// Then fragmentation-aware best fit: what stays free afterwards, per grouping level from
    /// the tightest to the loosest ([`LEVELS`]), as the sum over the level's groups of the
    /// square of each group's free GPUs, larger first. Taking `k` GPUs out of a group with `c` free
    /// lowers that sum by `k(2c - k)`, least when `c` is smallest: jobs are packed into the
    /// fullest group that holds them, and the large groups stay whole for large jobs later.
    leftover: Reverse<[u32; N_LEVELS]>,
    /// Finally the lowest GPU indices: the position mask with its bits reversed, larger first.
    /// Of two sets, the one holding the lowest GPU where they differ ends up with the higher
    /// reversed bit, so this is the lexicographic order of the sorted index lists.
    lowest_indices: Reverse<u64>,
}

/// A set of GPUs on one node, as a position mask, with its rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    pub(crate) gpus: u64,
    pub(crate) rank: GpuSetRank,
}

/// The memo key of [`Topology::best_set`]: free positions, accepted positions, how many, and
/// the worst path allowed.
type ChoiceKey = (u64, u64, u32, Path);

/// What the scheduler knows of one node's GPUs, and the memo of GPU choices on it.
#[derive(Debug)]
pub(crate) struct Topology {
    /// The GPU index at each position (ascending).
    indices: Vec<u32>,
    /// Each model on the node, by name, with the positions of its GPUs.
    models: Vec<(String, u64)>,
    /// The path between positions `i` and `j`, at `i * n + j`.
    paths: Vec<Path>,
    /// Per level of [`LEVELS`], its groups as position masks; empty where the level is a single
    /// group (it then ranks every set alike, so it is not computed).
    groups: [Vec<u64>; N_LEVELS],
    /// Every answer of `best_set` so far. A pure function of its key, so sharing this between
    /// nodes and jobs never changes a result, only its cost.
    /// Kept across passes with the topology (see [`Topologies`]); a mutex only so that the
    /// cache can move to the scheduling thread: one pass uses it at a time.
    memo: Mutex<BTreeMap<ChoiceKey, Option<Choice>>>,
}

/// Past this many remembered choices a topology forgets them all: a bound on memory for
/// nodes with many GPUs, where the keys are many. An 8-GPU node has far fewer.
const MEMO_LIMIT: usize = 1 << 16;

impl Topology {
    /// The topology of these GPUs (by index), with `paths` between them by position.
    fn new(indices: Vec<u32>, gpus: &[&Gpu], paths: Vec<Path>) -> Topology {
        let n = indices.len();
        let mut models: Vec<(String, u64)> = Vec::new();
        for (pos, gpu) in gpus.iter().enumerate() {
            match models.iter_mut().find(|(m, _)| *m == gpu.model) {
                Some((_, mask)) => *mask |= 1 << pos,
                None => models.push((gpu.model.clone(), 1 << pos)),
            }
        }
        models.sort();
        let groups = LEVELS.map(|level| {
            let groups = components(n, |i, j| paths[i * n + j] <= level);
            if groups.len() <= 1 {
                Vec::new()
            } else {
                groups
            }
        });
        Topology {
            indices,
            models,
            paths,
            groups,
            memo: Mutex::new(BTreeMap::new()),
        }
    }

    /// Every position.
    pub(crate) fn all(&self) -> u64 {
        mask_below(self.indices.len())
    }

    /// The models of the node with their positions, by name.
    pub(crate) fn models(&self) -> &[(String, u64)] {
        &self.models
    }

    /// The positions of these GPU indices; indices the node does not have are left out.
    pub(crate) fn mask_of(&self, indices: &[u32]) -> u64 {
        let position = |index: &u32| match self.indices.get(*index as usize) {
            // Indices are nearly always 0..n: then an index is its own position.
            Some(at) if at == index => Some(*index as usize),
            _ => self.indices.binary_search(index).ok(),
        };
        indices
            .iter()
            .filter_map(position)
            .fold(0, |mask, pos| mask | 1 << pos)
    }

    /// The GPU indices at these positions, ascending.
    pub(crate) fn indices_of(&self, mask: u64) -> Vec<u32> {
        bits(mask).map(|pos| self.indices[pos]).collect()
    }

    fn path(&self, i: usize, j: usize) -> Path {
        self.paths[i * self.indices.len() + j]
    }

    /// **The GPU choice.** The best `k` GPUs among the `free` ones that are `accepted`, under
    /// [`GpuSetRank`], where no two chosen GPUs are linked worse than `worst`; `None` when no
    /// such set exists.
    ///
    /// Every candidate set is ranked when there are at most [`ENUMERATION_LIMIT`] of them.
    /// Beyond that (more than 10 free GPUs), each free GPU seeds a set that grows one GPU at a
    /// time, always by the GPU whose worst and then summed path to the set so far is best
    /// (lowest index on ties); the best-ranked grown set wins. That greedy only returns sets
    /// that obey `worst`, and finds one whenever the GPUs linked that well form cliques (an
    /// NVSwitch fabric, NVLink islands, PCIe trees), which is how large machines are built;
    /// on an unusual partial mesh it may miss the optimum, or a set that exists.
    ///
    /// Whatever it ranks, it chooses *among* the free accepted GPUs, and with enumeration a
    /// superset of free GPUs can only offer more sets: a fit never turns into a misfit when
    /// more is free, which is what keeps preemption's victim sets minimal.
    pub(crate) fn best_set(&self, free: u64, accepted: u64, k: u32, worst: Path) -> Option<Choice> {
        let free = free & self.all();
        let key = (free, accepted & free, k, worst);
        // A poisoned memo still holds only answers that were true.
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = memo.get(&key) {
            return *known;
        }
        let choice = self.choose(free, accepted & free, k, worst);
        if memo.len() >= MEMO_LIMIT {
            memo.clear();
        }
        memo.insert(key, choice);
        choice
    }

    /// The largest number of `accepted` GPUs among `free` that `best_set` can give with no two
    /// linked worse than `worst`.
    pub(crate) fn most_connected(&self, free: u64, accepted: u64, worst: Path) -> u32 {
        let n_candidates = (free & accepted & self.all()).count_ones();
        (1..=n_candidates)
            .rev()
            .find(|&k| self.best_set(free, accepted, k, worst).is_some())
            .unwrap_or(0)
    }

    fn choose(&self, free: u64, candidates: u64, k: u32, worst: Path) -> Option<Choice> {
        let m = candidates.count_ones();
        if m < k {
            return None;
        }
        if k == 0 {
            return Some(self.ranked(free, 0, Connectivity::BEST));
        }
        let positions: Vec<usize> = bits(candidates).collect();
        let mut best: Option<Choice> = None;
        let mut consider = |set: u64, conn: Connectivity| {
            if conn.worst > worst || best.is_some_and(|b| b.rank.conn < conn) {
                return;
            }
            let choice = self.ranked(free, set, conn);
            match best {
                Some(b) if b.rank <= choice.rank => {}
                _ => best = Some(choice),
            }
        };
        if binomial(m, k) <= ENUMERATION_LIMIT {
            // Every k-subset of the candidates, as index combinations in lexicographic order.
            let k = k as usize;
            let mut combo: Vec<usize> = (0..k).collect();
            loop {
                let set = combo.iter().fold(0u64, |s, &c| s | 1 << positions[c]);
                consider(set, self.connectivity(set));
                // Advance to the next combination, or stop after the last.
                let Some(i) = (0..k).rev().find(|&i| combo[i] < positions.len() - k + i) else {
                    break;
                };
                combo[i] += 1;
                for j in i + 1..k {
                    combo[j] = combo[j - 1] + 1;
                }
            }
        } else {
            for &seed in &positions {
                if let Some(set) = self.grow(seed, candidates, k, worst) {
                    consider(set, self.connectivity(set));
                }
            }
        }
        best
    }

    /// Greedy: from `seed`, add the candidate whose (worst, summed) path to the set so far is
    /// best, lowest position on ties, until `k` GPUs; `None` if it runs out of candidates that
    /// keep every pair within `worst`.
    fn grow(&self, seed: usize, candidates: u64, k: u32, worst: Path) -> Option<u64> {
        let mut set = 1u64 << seed;
        for _ in 1..k {
            let next = bits(candidates & !set)
                .filter_map(|c| {
                    let to_set = bits(set).map(|s| self.path(c, s));
                    let worst_to_set = to_set.clone().max().unwrap_or(Path::NvLink);
                    let sum: u32 = to_set.map(|p| u32::from(p.rank())).sum();
                    (worst_to_set <= worst).then_some((worst_to_set, sum, c))
                })
                .min()?;
            set |= 1 << next.2;
        }
        Some(set)
    }

    fn connectivity(&self, set: u64) -> Connectivity {
        let mut conn = Connectivity::BEST;
        for i in bits(set) {
            for j in bits(set & !mask_below(i + 1)) {
                let path = self.path(i, j);
                conn.worst = conn.worst.max(path);
                conn.sum += u32::from(path.rank());
            }
        }
        conn
    }

    fn ranked(&self, free: u64, set: u64, conn: Connectivity) -> Choice {
        let left = free & !set;
        let leftover = std::array::from_fn(|level| {
            self.groups[level]
                .iter()
                .map(|group| (left & group).count_ones().pow(2))
                .sum()
        });
        Choice {
            gpus: set,
            rank: GpuSetRank {
                conn,
                leftover: Reverse(leftover),
                lowest_indices: Reverse(set.reverse_bits()),
            },
        }
    }
}

/// The topologies of nodes, kept between passes: shares one [`Topology`] between nodes built
/// alike (so that they share its memo too), and remembers each node's, so that a pass does
/// not read every node's GPU lists again.
///
/// Every pass meets every node, so this is on the path of even a one-job pass. Entries are
/// found by the address of the node's GPU list (`Node::gpus`: shared by every copy of the
/// node, replaced on registration, never changed in place), which the entry holds, so the
/// address cannot be reused while the entry lives: the same address means the same topology,
/// and the lookup compares numbers, not names. A new list is read once and compared as byte
/// slices with the layouts known.
/// What it returns depends only on the node's inventory, so a cache kept by the caller
/// changes what a pass costs, never what it decides.
#[derive(Debug, Default)]
pub struct Topologies {
    /// By the address of a node's GPU list: that list, and its topology.
    by_list: BTreeMap<usize, (Arc<Vec<Gpu>>, Arc<Topology>)>,
    /// Layouts met so far, by GPU count and the first 16 bytes of the first GPU's model.
    known: BTreeMap<(usize, u128), Vec<Layout>>,
    /// The node at hand: the path between every two of its GPUs as [`Path::rank`].
    paths: Vec<u8>,
}

/// What makes two nodes' topologies the same: GPU indices, models and paths, by position.
#[derive(Debug)]
struct Layout {
    indices: Vec<u32>,
    models: Vec<String>,
    paths: Vec<u8>,
    topo: Arc<Topology>,
}

impl Topologies {
    pub(crate) fn of(&mut self, node: &Node) -> Arc<Topology> {
        let address = Arc::as_ptr(&node.gpus) as usize;
        if let Some((_, topo)) = self.by_list.get(&address) {
            return Arc::clone(topo);
        }
        let topo = self.read_topology(node);
        self.by_list
            .insert(address, (Arc::clone(&node.gpus), Arc::clone(&topo)));
        topo
    }

    /// Forgets the lists of nodes that re-registered since (they are no node's any more),
    /// once there are many of them.
    pub(crate) fn forget_replaced(&mut self, nodes: &BTreeMap<String, Node>) {
        if self.by_list.len() <= nodes.len() + 64 {
            return;
        }
        let live: std::collections::BTreeSet<usize> = nodes
            .values()
            .map(|n| Arc::as_ptr(&n.gpus) as usize)
            .collect();
        self.by_list.retain(|address, _| live.contains(address));
    }

    fn read_topology(&mut self, node: &Node) -> Arc<Topology> {
        let gpus = self.read(node);
        let first_model = gpus.first().map_or("", |g| g.model.as_str());
        let key = (gpus.len(), prefix(first_model));
        let layouts = self.known.entry(key).or_default();
        let same = |layout: &&Layout| {
            layout.paths == self.paths
                && layout.indices.iter().eq(gpus.iter().map(|g| &g.index))
                && layout
                    .models
                    .iter()
                    .zip(&gpus)
                    .all(|(m, g)| same_text(m, &g.model))
        };
        if let Some(layout) = layouts.iter().find(same) {
            return Arc::clone(&layout.topo);
        }
        let layout = Layout {
            indices: gpus.iter().map(|g| g.index).collect(),
            models: gpus.iter().map(|g| g.model.clone()).collect(),
            paths: self.paths.clone(),
            topo: Arc::new(Topology::new(
                gpus.iter().map(|g| g.index).collect(),
                &gpus,
                self.paths
                    .iter()
                    .map(|&rank| Path::from_rank(rank))
                    .collect(),
            )),
        };
        let topo = Arc::clone(&layout.topo);
        layouts.push(layout);
        topo
    }

    /// Fills `gpus` with the node's first [`MAX_GPUS`] GPUs by index (a repeated index counts
    /// once) and `paths` with the path between every two.
    fn read<'n>(&mut self, node: &'n Node) -> Vec<&'n Gpu> {
        let mut gpus: Vec<&Gpu> = node.gpus.iter().take(MAX_GPUS).collect();
        // Agents list GPUs by index; sort only when they did not.
        if node.gpus.len() > MAX_GPUS || !gpus.windows(2).all(|w| w[0].index < w[1].index) {
            gpus = node.gpus.iter().collect();
            gpus.sort_by_key(|g| g.index);
            gpus.dedup_by_key(|g| g.index);
            gpus.truncate(MAX_GPUS);
        }
        let n = gpus.len();
        // Indices are nearly always 0..n: then an index is its own position.
        // (Sorted and distinct, so the last index is n - 1 exactly when they are 0..n.)
        let dense = n == 0 || gpus[n - 1].index as usize + 1 == n;
        let position = |index: u32| {
            if dense {
                Some(index as usize).filter(|&pos| pos < n)
            } else {
                gpus.binary_search_by_key(&index, |g| g.index).ok()
            }
        };
        // Unknown pairs are SYS (as `Gpu::pcie_to` says); a GPU reaches itself best.
        self.paths.clear();
        self.paths.resize(n * n, Path::ANY.rank());
        for i in 0..n {
            self.paths[i * n + i] = Path::NvLink.rank();
        }
        for (i, gpu) in gpus.iter().enumerate() {
            for link in &gpu.links {
                if let Some(j) = position(link.peer).filter(|&j| j != i) {
                    // Agents report both directions; where one is missing or differs, the
                    // better one stands for both.
                    let rank = Path::Pcie(link.pcie).rank();
                    self.paths[i * n + j] = self.paths[i * n + j].min(rank);
                    self.paths[j * n + i] = self.paths[j * n + i].min(rank);
                }
            }
            for &peer in &gpu.nvlink {
                if let Some(j) = position(peer) {
                    self.paths[i * n + j] = Path::NvLink.rank();
                    self.paths[j * n + i] = Path::NvLink.rank();
                }
            }
        }
        gpus
    }
}

/// The first 16 bytes of `text`, zero-padded, as a number.
fn prefix(text: &str) -> u128 {
    let mut bytes = [0u8; 16];
    let n = text.len().min(16);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    u128::from_be_bytes(bytes)
}

/// `a == b`, compared eight bytes at a time: model names are short, and a library call per
/// comparison costs more than the comparison (this runs for every GPU of every node).
fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let word = |chunk: &[u8]| u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    a.len() == b.len()
        && a.chunks_exact(8)
            .zip(b.chunks_exact(8))
            .all(|(x, y)| word(x) == word(y))
        && a.chunks_exact(8).remainder() == b.chunks_exact(8).remainder()
}

/// Connected components of `0..n` under `linked`, as masks, by lowest member.
fn components(n: usize, linked: impl Fn(usize, usize) -> bool) -> Vec<u64> {
    let mut seen = 0u64;
    let mut groups = Vec::new();
    for start in 0..n {
        if seen & 1 << start != 0 {
            continue;
        }
        let mut group = 1u64 << start;
        let mut frontier = vec![start];
        while let Some(i) = frontier.pop() {
            for j in 0..n {
                if group & 1 << j == 0 && linked(i, j) {
                    group |= 1 << j;
                    frontier.push(j);
                }
            }
        }
        seen |= group;
        groups.push(group);
    }
    groups
}

/// The positions set in `mask`, ascending.
pub(crate) fn bits(mut mask: u64) -> impl Iterator<Item = usize> + Clone {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let pos = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            pos
        })
    })
}

/// Positions `0..n`.
fn mask_below(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// `C(n, k)`, saturating.
fn binomial(n: u32, k: u32) -> u64 {
    let k = k.min(n - k) as u64;
    let mut res: u64 = 1;
    for i in 0..k {
        res = res.saturating_mul(n as u64 - i) / (i + 1);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{NodeBuilder, A10, A100};
    use super::*;

    fn topology(node: NodeBuilder) -> (Node, Arc<Topology>) {
        let node = node.build();
        let topo = Topologies::default().of(&node);
        (node, topo)
    }

    fn set(positions: &[usize]) -> u64 {
        positions.iter().fold(0, |m, &p| m | 1 << p)
    }

    #[test]
    fn greedy_keeps_to_islands_on_large_nodes() {
        let (_node, topo) = topology(NodeBuilder::two_islands("n", 16, A100));
        let all = topo.all();
        // C(16, 8) and C(15, 5) are beyond enumeration: the greedy answers.
        assert!(binomial(16, 8) > ENUMERATION_LIMIT && binomial(15, 5) > ENUMERATION_LIMIT);
        let choose = |free: u64, k| topo.best_set(free, all, k, Path::NvLink).map(|c| c.gpus);
        assert_eq!(choose(all, 8), Some(set(&[0, 1, 2, 3, 4, 5, 6, 7])));
        assert_eq!(
            choose(all & !1, 8),
            Some(set(&[8, 9, 10, 11, 12, 13, 14, 15]))
        );
        // Five of the seven left on island 0-7: it is the fuller island, so 8-15 stays whole.
        assert_eq!(choose(all & !1, 5), Some(set(&[1, 2, 3, 4, 5])));
        assert_eq!(choose(all & !1 & !(1 << 8), 8), None);
        assert_eq!(
            topo.most_connected(all & !1 & !(1 << 8), all, Path::NvLink),
            7
        );
    }

    #[test]
    fn nvswitch_sets_are_all_nvlinked() {
        let (_node, topo) = topology(NodeBuilder::dgx("n", 8, A100));
        let all = topo.all();
        let choice = topo.best_set(all & !set(&[0, 5]), all, 3, Path::NvLink);
        // Any three are NVLinked, and NVLink makes the PCIe halves one group at every level:
        // the lowest indices win.
        assert_eq!(choice.map(|c| c.gpus), Some(set(&[1, 2, 3])));
        assert_eq!(choice.map(|c| c.rank.conn), Some(Connectivity::BEST));
    }

    #[test]
    fn pcie_sets_prefer_the_tightest_worst_relation() {
        let (_node, topo) = topology(NodeBuilder::no_nvlink("n", 8, A10));
        let all = topo.all();
        let conn = |free: u64, k| {
            topo.best_set(free, all, k, Path::ANY)
                .map(|c| (c.gpus, c.rank.conn.worst))
        };
        assert_eq!(
            conn(all, 2),
            Some((set(&[0, 1]), Path::Pcie(PcieRelation::Pix)))
        );
        assert_eq!(
            conn(set(&[1, 2, 3, 4]), 2),
            Some((set(&[2, 3]), Path::Pcie(PcieRelation::Pix)))
        );
        assert_eq!(
            conn(set(&[1, 3, 4]), 2),
            Some((set(&[1, 3]), Path::Pcie(PcieRelation::Node)))
        );
        assert_eq!(topo.best_set(all, all, 2, Path::NvLink), None);
        assert_eq!(topo.most_connected(all, all, Path::NvLink), 1);
    }

    #[test]
    fn nodes_alike_share_one_topology() {
        let mut topologies = Topologies::default();
        let (a, b, c) = (
            NodeBuilder::two_islands("a", 8, A100).build(),
            NodeBuilder::two_islands("b", 8, A100).build(),
            NodeBuilder::nvlink_pairs("c", 8, A100).build(),
        );
        let (ta, tb, tc) = (topologies.of(&a), topologies.of(&b), topologies.of(&c));
        assert!(Arc::ptr_eq(&ta, &tb));
        assert!(!Arc::ptr_eq(&ta, &tc));
    }

    #[test]
    fn binomials() {
        assert_eq!(binomial(8, 4), 70);
        assert_eq!(binomial(10, 5), 252);
        assert_eq!(binomial(16, 2), 120);
        assert_eq!(binomial(5, 0), 1);
        assert_eq!(binomial(5, 5), 1);
    }

    #[test]
    fn lowest_indices_order_is_lexicographic() {
        let key = |set: &[usize]| Reverse(set.iter().fold(0u64, |m, &p| m | 1 << p).reverse_bits());
        assert!(key(&[0, 3]) < key(&[1, 2]));
        assert!(key(&[0, 1]) < key(&[0, 2]));
        assert!(key(&[2, 5]) < key(&[3, 4]));
    }
}
