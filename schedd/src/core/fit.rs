//! Whether a job fits on a node, which GPUs it gets there, and which nodes it gets.
//!
//! Placement, preemption, the submit-time satisfiability check and `explain` all ask
//! [`fit_on_node`], so they can never disagree about what fits. GPU choice inside a node lives in
//! [`Topology::best_set`] alone; node choice in [`find_placement`], ranked by [`NodeRank`].

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use ysched_common::time::Millis;
#[cfg(test)]
use ysched_common::Gpu;
use ysched_common::{gpu_type_matches, JobId, JobSpec, Node, NodeAlloc};

use super::preempt::Evictable;
use super::topo::{Connectivity, Path, Topologies, Topology};

/// The node feature that marks InfiniBand: preferred for jobs that span nodes.
pub(crate) const IB_FEATURE: &str = "ib";

/// Node views by node name.
pub(crate) type Views<'a> = BTreeMap<&'a str, NodeView<'a>>;

/// How many nodes a job spans: `nodes` 0 and 1 both mean one.
pub(crate) fn n_nodes(spec: &JobSpec) -> u32 {
    spec.nodes.max(1)
}

/// The worst path a job allows between two of its GPUs on one node.
pub(crate) fn required_path(spec: &JobSpec) -> Path {
    match &spec.interconnect {
        Some(wanted) if wanted.eq_ignore_ascii_case("nvlink") => Path::NvLink,
        _ => Path::ANY,
    }
}

/// Which GPUs a job accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuKind<'a> {
    Any,
    /// Any model matching one of these types (`A100` matches `NVIDIA A100-SXM4-80GB`).
    Types(&'a [String]),
    /// Exactly this model: a gang runs on one model on all of its nodes.
    Model(&'a str),
}

impl GpuKind<'_> {
    #[cfg(test)]
    pub(crate) fn accepts(self, gpu: &Gpu) -> bool {
        self.accepts_model(&gpu.model)
    }

    pub(crate) fn accepts_model(self, model: &str) -> bool {
        match self {
            GpuKind::Any => true,
            GpuKind::Types(types) => types.iter().any(|t| gpu_type_matches(t, model)),
            GpuKind::Model(wanted) => model == wanted,
        }
    }
}

/// Formats as a suffix for "4 GPUs": nothing, " of type A100|H100" or " of model ...".
impl fmt::Display for GpuKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuKind::Any => Ok(()),
            GpuKind::Types(types) => write!(f, " of type {}", types.join("|")),
            GpuKind::Model(model) => write!(f, " of model {model}"),
        }
    }
}

/// What a job needs on each node it runs on. A gang asks the same of every one of its nodes.
#[derive(Debug, Clone)]
pub(crate) struct NodeDemand<'a> {
    pub(crate) gpus: u32,
    pub(crate) cpus: u32,
    /// 0: the job asked for no memory.
    pub(crate) mem_mib: u64,
    pub(crate) gpu_kind: GpuKind<'a>,
    /// Features the node must advertise, all of them.
    pub(crate) constraints: &'a [String],
    /// `-w/--nodelist`, sorted at submit: only these nodes (empty: any).
    pub(crate) nodelist: &'a [String],
    /// `-x/--exclude`, sorted at submit: never these nodes.
    pub(crate) exclude: &'a [String],
    /// `--exclusive`: only a node nothing else holds, taken whole (every GPU in service,
    /// every CPU, all its memory).
    pub(crate) exclusive: bool,
    /// For an `--exclusive` job under a GPU quota: only nodes with at most this many GPUs in
    /// all (it would hold every one, see `quota`); `None`: any.
    pub(crate) max_whole_gpus: Option<u32>,
    /// The worst path allowed between two of the job's GPUs on one node: `NvLink` for
    /// `--interconnect nvlink`, [`Path::ANY`] otherwise. Preemption tightens it to what evicting
    /// everything eligible would give, so that a smaller eviction may not buy a worse set.
    pub(crate) worst_path: Path,
    /// When the job would end if it started now (`now` plus its time limit), where backfill
    /// lets it use room reserved for a later start: it may use the room of every reservation
    /// that starts at or after this ([`NodeView::free_for`]). `None`: it uses no reserved room
    /// (no time limit, backfill off, or a purpose that reservations must bind, such as
    /// preemption).
    pub(crate) ends_by: Option<Millis>,
    /// Which positions `gpu_kind` accepts, per topology met so far: matching model names is
    /// string work, and a pass meets few topologies but asks about many nodes. Holding the
    /// `Rc` keeps each topology alive, so its address identifies it.
    accepted: RefCell<Vec<(Arc<Topology>, u64)>>,
}

impl<'a> NodeDemand<'a> {
    pub(crate) fn of(spec: &'a JobSpec) -> Self {
        NodeDemand {
            // Submit validation makes a gang's GPUs divide evenly; rounding up would rather give
            // a malformed spec a GPU too many than one too few.
            gpus: spec.gpus.div_ceil(n_nodes(spec)),
            // Every process needs a CPU to run on.
            cpus: spec.cpus.max(1),
            mem_mib: spec.mem_mib,
            gpu_kind: if spec.gpu_types.is_empty() {
                GpuKind::Any
            } else {
                GpuKind::Types(&spec.gpu_types)
            },
            constraints: &spec.constraints,
            nodelist: &spec.nodelist,
            exclude: &spec.exclude,
            exclusive: spec.exclusive,
            max_whole_gpus: None,
            worst_path: required_path(spec),
            ends_by: None,
            accepted: RefCell::new(Vec::new()),
        }
    }

    /// Whether the job may run on node `name` at all: listed by its `--nodelist` (if it has
    /// one) and not by its `--exclude`.
    pub(crate) fn allows(&self, name: &str) -> bool {
        (self.nodelist.is_empty() || listed(self.nodelist, name)) && !listed(self.exclude, name)
    }

    /// The same demand for a job that would end by `ends_by` (see the field).
    pub(crate) fn ending(self, ends_by: Option<Millis>) -> Self {
        NodeDemand { ends_by, ..self }
    }

    /// The same demand, taking (if exclusive) only nodes of at most `gpus` GPUs in all.
    pub(crate) fn whole_at_most(self, gpus: u32) -> Self {
        NodeDemand {
            max_whole_gpus: Some(gpus),
            ..self
        }
    }

    /// The same demand, restricted to one GPU model.
    pub(crate) fn pinned_to(&self, model: &'a str) -> Self {
        NodeDemand {
            gpu_kind: GpuKind::Model(model),
            accepted: RefCell::new(Vec::new()),
            ..self.clone()
        }
    }

    /// The same demand, allowing no path worse than `worst` between its GPUs on a node.
    pub(crate) fn within(&self, worst: Path) -> Self {
        NodeDemand {
            worst_path: self.worst_path.min(worst),
            ..self.clone()
        }
    }

    /// The positions of `topo` whose model the job accepts.
    pub(crate) fn accepted_on(&self, topo: &Arc<Topology>) -> u64 {
        if let Some((_, mask)) = self
            .accepted
            .borrow()
            .iter()
            .find(|(t, _)| Arc::ptr_eq(t, topo))
        {
            return *mask;
        }
        let mask = topo
            .models()
            .iter()
            .filter(|(model, _)| self.gpu_kind.accepts_model(model))
            .fold(0, |mask, (_, gpus)| mask | gpus);
        self.accepted.borrow_mut().push((Arc::clone(topo), mask));
        mask
    }
}

/// Whether `list` (sorted at submit, see `submit::validate`) names `name`.
pub(crate) fn listed(list: &[String], name: &str) -> bool {
    list.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
}

/// Why resources on a node are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// A RUNNING or PREEMPTING job's allocation: held until the agent reports the process gone.
    Running,
    /// Given to a job earlier in this pass.
    Placed,
    /// Kept for a preemptor while its victims exit, so that no lower job takes it meanwhile.
    Reserved,
    /// Kept by backfill for a job expected to start here at this time: only a job that ends
    /// by then may use it (see [`NodeView::free_for`]).
    Backfill(Millis),
}

/// Resources one job takes on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) job: JobId,
    pub(crate) claim: Claim,
    /// Positions in the node's [`Topology`].
    pub(crate) gpus: u64,
    pub(crate) cpus: u32,
    pub(crate) mem_mib: u64,
    /// Set for a running job that a job of a higher tier may evict: preemption reads its
    /// candidates here. Cleared once a preemptor of this pass claimed it, since its resources
    /// are then promised.
    pub(crate) evictable: Option<Evictable>,
    /// The job took the node whole (`--exclusive`): nothing else may be placed beside it,
    /// whatever room its allocation leaves (a GPU returned to service meanwhile).
    pub(crate) whole: bool,
}

/// Whether a job that ends by `ends_by` may use the room of a hold with this claim: only a
/// backfill reservation that starts once it is gone.
fn crossable(claim: Claim, ends_by: Option<Millis>) -> bool {
    match (claim, ends_by) {
        (Claim::Backfill(at), Some(end)) => end <= at,
        _ => false,
    }
}

/// A node together with what is taken on it. The free resources are derived from the holds and
/// kept in step with them, which is why the fields are private.
#[derive(Debug, Clone)]
pub(crate) struct NodeView<'a> {
    node: &'a Node,
    topo: Arc<Topology>,
    holds: Vec<Hold>,
    /// How many of the holds are [`Claim::Backfill`]: without any, [`NodeView::free_for`] is
    /// the plain free room at no cost.
    n_backfill: u32,
    /// Positions.
    free_gpus: u64,
    free_cpus: u32,
    free_mem_mib: u64,
    /// The positions of the GPUs a job may get: all but those out of service (see
    /// `Node::unusable_gpus`), which no job is ever placed on.
    in_service: u64,
}

impl<'a> NodeView<'a> {
    /// The node with nothing taken and its GPUs out of service (or returned but not yet
    /// confirmed by the node, see `Node::unusable_gpus`) unavailable; `topo` is the node's
    /// topology (shared by nodes alike).
    pub(crate) fn new(node: &'a Node, topo: Arc<Topology>) -> Self {
        let out: Vec<u32> = node.unusable_gpus().collect();
        let in_service = topo.all() & !topo.mask_of(&out);
        NodeView::empty(node, topo, in_service)
    }

    /// The node with nothing taken and every GPU counted, out of service or not: what it
    /// could hold once an administrator returns its GPUs (the submit-time check).
    pub(crate) fn whole(node: &'a Node, topo: Arc<Topology>) -> Self {
        let all = topo.all();
        NodeView::empty(node, topo, all)
    }

    /// This (empty) view with the node's GPUs out of service unavailable, as
    /// [`NodeView::new`] makes it: from a [`NodeView::whole`] view, the topology is at hand.
    pub(crate) fn in_service(&self) -> Self {
        NodeView::new(self.node, Arc::clone(&self.topo))
    }

    fn empty(node: &'a Node, topo: Arc<Topology>, in_service: u64) -> Self {
        NodeView {
            node,
            free_gpus: in_service,
            topo,
            holds: Vec::new(),
            n_backfill: 0,
            free_cpus: node.cpus,
            free_mem_mib: node.mem_mib,
            in_service,
        }
    }

    /// The positions of its GPUs out of service (none in a [`NodeView::whole`] view).
    pub(crate) fn out_of_service(&self) -> u64 {
        self.topo.all() & !self.in_service
    }

    pub(crate) fn node(&self) -> &'a Node {
        self.node
    }

    pub(crate) fn topology(&self) -> &Arc<Topology> {
        &self.topo
    }

    pub(crate) fn holds(&self) -> &[Hold] {
        &self.holds
    }

    /// Free GPU positions.
    pub(crate) fn free_gpus(&self) -> u64 {
        self.free_gpus
    }

    /// Free GPUs by index.
    #[cfg(test)]
    pub(crate) fn free_gpu_indices(&self) -> Vec<u32> {
        self.topo.indices_of(self.free_gpus)
    }

    pub(crate) fn free_cpus(&self) -> u32 {
        self.free_cpus
    }

    pub(crate) fn free_mem_mib(&self) -> u64 {
        self.free_mem_mib
    }

    /// The room a job that ends by `ends_by` may use: what is free, plus what backfill keeps
    /// here for reservations that start at or after `ends_by` (the job is gone by then), less
    /// what other jobs took of that. As (GPU positions, CPUs, MiB).
    ///
    /// Monotone like the free room itself: a later `ends_by` crosses fewer reservations, and
    /// every hold added later only takes room, except a reservation this job may cross, which
    /// it ignores.
    pub(crate) fn free_for(&self, ends_by: Option<Millis>) -> (u64, u32, u64) {
        let crossable = |claim: Claim| crossable(claim, ends_by);
        if self.n_backfill == 0 || !self.holds.iter().any(|h| crossable(h.claim)) {
            return (self.free_gpus, self.free_cpus, self.free_mem_mib);
        }
        // Recounted from the holds, as `add_hold` counts them: exact whatever was lent.
        let (mut gpus, mut cpus, mut mem) = (self.in_service, self.node.cpus, self.node.mem_mib);
        for hold in self.holds.iter().filter(|h| !crossable(h.claim)) {
            gpus &= !hold.gpus;
            cpus = cpus.saturating_sub(hold.cpus);
            mem = mem.saturating_sub(hold.mem_mib);
        }
        (gpus, cpus, mem)
    }

    /// The holds a job that ends by `ends_by` must leave alone: all but the backfill
    /// reservations it may cross.
    pub(crate) fn holds_binding(&self, ends_by: Option<Millis>) -> impl Iterator<Item = &Hold> {
        self.holds
            .iter()
            .filter(move |h| !crossable(h.claim, ends_by))
    }

    /// `job` takes what `alloc` names on this node; `whole`: the node, for `--exclusive`.
    pub(crate) fn add_alloc(
        &mut self,
        job: JobId,
        claim: Claim,
        alloc: &NodeAlloc,
        evictable: Option<Evictable>,
        whole: bool,
    ) {
        self.add_hold(Hold {
            job,
            claim,
            gpus: self.topo.mask_of(&alloc.gpus),
            cpus: alloc.cpus,
            mem_mib: alloc.mem_mib,
            evictable,
            whole,
        });
    }

    pub(crate) fn add_hold(&mut self, hold: Hold) {
        if matches!(hold.claim, Claim::Backfill(_)) {
            self.n_backfill += 1;
        }
        self.free_gpus &= !hold.gpus;
        // Saturating: a node that re-registered smaller may be over-committed until jobs end.
        self.free_cpus = self.free_cpus.saturating_sub(hold.cpus);
        self.free_mem_mib = self.free_mem_mib.saturating_sub(hold.mem_mib);
        self.holds.push(hold);
    }

    /// `job` may no longer be evicted for anyone else in this pass.
    pub(crate) fn protect(&mut self, job: JobId) {
        for hold in self.holds.iter_mut().filter(|h| h.job == job) {
            hold.evictable = None;
        }
    }

    /// A copy with every hold of these jobs released, as if they had exited.
    pub(crate) fn without(&self, jobs: &BTreeSet<JobId>) -> NodeView<'a> {
        // Rebuilt from scratch rather than by adding back: exact even when holds overlap.
        let mut view = NodeView::empty(self.node, Arc::clone(&self.topo), self.in_service);
        view.holds.reserve(self.holds.len());
        for hold in self.holds.iter().filter(|h| !jobs.contains(&h.job)) {
            view.add_hold(*hold);
        }
        view
    }

    /// The allocation a fit on this node (or on a copy of it) stands for.
    pub(crate) fn alloc(&self, fit: &Fit) -> NodeAlloc {
        NodeAlloc {
            node: self.node.name.clone(),
            gpus: self.topo.indices_of(fit.gpus),
            cpus: fit.cpus,
            mem_mib: fit.mem_mib,
        }
    }
}

/// Why a job does not fit on a node. The `*Capacity` kinds and `GpuTopology` hold even on an
/// empty node; the `*Busy` kinds and `GpusScattered` are transient: jobs ending (or being
/// evicted) could make room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Misfit<'d> {
    /// Not one of the job's `--nodelist`.
    NotListed,
    /// One of the job's `--exclude`.
    Excluded,
    MissingFeatures(Vec<&'d str>),
    GpuCapacity {
        kind: GpuKind<'d>,
        needed: u32,
        total: u32,
    },
    /// Not `needed` accepted GPUs linked within `worst`, even with all of them free.
    GpuTopology {
        kind: GpuKind<'d>,
        needed: u32,
        worst: Path,
        most: u32,
    },
    CpuCapacity {
        needed: u32,
        total: u32,
    },
    MemCapacity {
        needed: u64,
        total: u64,
    },
    GpusBusy {
        kind: GpuKind<'d>,
        needed: u32,
        free: u32,
    },
    /// Enough accepted GPUs are free, but not `needed` of them linked within `worst`.
    GpusScattered {
        kind: GpuKind<'d>,
        needed: u32,
        worst: Path,
        most: u32,
    },
    CpusBusy {
        needed: u32,
        free: u32,
    },
    MemBusy {
        needed: u64,
        free: u64,
    },
    /// The job takes whole nodes (`--exclusive`) and `jobs` other jobs hold part of this one.
    NotWhole {
        jobs: usize,
    },
    /// Job `job` holds this node whole (`--exclusive`).
    HeldWhole {
        job: JobId,
    },
    /// The job takes whole nodes (`--exclusive`) and this one has more GPUs than its quota
    /// lets it hold now (`most`).
    WholeOverQuota {
        gpus: u32,
        most: u32,
    },
}

impl Misfit<'_> {
    /// Freeing resources on the node could make the job fit.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            Misfit::GpusBusy { .. }
                | Misfit::GpusScattered { .. }
                | Misfit::CpusBusy { .. }
                | Misfit::MemBusy { .. }
                | Misfit::NotWhole { .. }
                | Misfit::HeldWhole { .. }
                | Misfit::WholeOverQuota { .. }
        )
    }
}

impl fmt::Display for Misfit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::NotListed => f.write_str("not in the job's --nodelist"),
            Misfit::Excluded => f.write_str("excluded by the job's --exclude"),
            Misfit::NotWhole { jobs } => write!(
                f,
                "the job takes whole nodes (--exclusive), and {} hold part of this one",
                plural(*jobs as u32, "other job")
            ),
            Misfit::HeldWhole { job } => {
                write!(f, "job {job} holds this node whole (--exclusive)")
            }
            Misfit::WholeOverQuota { gpus, most } => write!(
                f,
                "the job takes whole nodes (--exclusive): this one would count {} against \
                 its tier's GPU quota, which lets it hold {most} more",
                plural(*gpus, "GPU")
            ),
            Misfit::MissingFeatures(missing) if missing.len() == 1 => {
                write!(f, "missing feature {}", missing[0])
            }
            Misfit::MissingFeatures(missing) => {
                write!(f, "missing features {}", missing.join(", "))
            }
            Misfit::GpuCapacity {
                kind,
                needed,
                total,
            } => write!(
                f,
                "needs {}{kind}, node has {total}",
                plural(*needed, "GPU")
            ),
            Misfit::GpuTopology {
                kind,
                needed,
                worst,
                most,
            } => write!(
                f,
                "needs {}{kind} linked by {worst}, node has at most {most}",
                plural(*needed, "GPU")
            ),
            Misfit::CpuCapacity { needed, total } => {
                write!(f, "needs {}, node has {total}", plural(*needed, "CPU"))
            }
            Misfit::MemCapacity { needed, total } => {
                write!(f, "needs {needed} MiB of memory, node has {total} MiB")
            }
            Misfit::GpusBusy { kind, needed, free } => {
                write!(f, "needs {}{kind}, {free} free", plural(*needed, "GPU"))
            }
            Misfit::GpusScattered {
                kind,
                needed,
                worst,
                most,
            } => write!(
                f,
                "needs {}{kind} linked by {worst}, at most {most} free are",
                plural(*needed, "GPU")
            ),
            Misfit::CpusBusy { needed, free } => {
                write!(f, "needs {}, {free} free", plural(*needed, "CPU"))
            }
            Misfit::MemBusy { needed, free } => {
                write!(f, "needs {needed} MiB of memory, {free} MiB free")
            }
        }
    }
}

/// Where a job fits on a node: the GPUs it gets (positions; [`NodeView::alloc`] names them) and
/// what the node ranking needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fit {
    pub(crate) gpus: u64,
    pub(crate) conn: Connectivity,
    /// Free GPUs the job accepts on the node, before it takes its own.
    pub(crate) n_free: u32,
    pub(crate) cpus: u32,
    pub(crate) mem_mib: u64,
}

/// Whether `demand` fits in what is free on `view` (for a job that ends by a backfill
/// reservation's start, also in the room kept for it: [`NodeView::free_for`]), and if so where.
///
/// The one fit check: placement, preemption (on a copy of the view with the candidate victims
/// removed), satisfiability (on an empty view) and `explain` all call it. It is monotone in the
/// free resources (more free never turns a fit into a misfit), which is what makes the reprieve
/// in `preempt` yield a minimal victim set. Schedulability (drain, connection) is the caller's
/// business: this answers only for resources, features and topology.
pub(crate) fn fit_on_node<'d>(
    view: &NodeView<'_>,
    demand: &NodeDemand<'d>,
) -> Result<Fit, Misfit<'d>> {
    let node = view.node();
    let topo = view.topology();
    // Fixed properties of the node first: they explain a misfit better than momentary load.
    if !demand.nodelist.is_empty() && !listed(demand.nodelist, &node.name) {
        return Err(Misfit::NotListed);
    }
    if listed(demand.exclude, &node.name) {
        return Err(Misfit::Excluded);
    }
    if !demand.constraints.iter().all(|c| node.features.contains(c)) {
        return Err(Misfit::MissingFeatures(
            demand
                .constraints
                .iter()
                .filter(|c| !node.features.contains(c))
                .map(String::as_str)
                .collect(),
        ));
    }
    let accepted = demand.accepted_on(topo);
    let n_accepted = accepted.count_ones();
    if n_accepted < demand.gpus {
        return Err(Misfit::GpuCapacity {
            kind: demand.gpu_kind,
            needed: demand.gpus,
            total: n_accepted,
        });
    }
    if demand.worst_path < Path::ANY
        && topo
            .best_set(topo.all(), accepted, demand.gpus, demand.worst_path)
            .is_none()
    {
        return Err(Misfit::GpuTopology {
            kind: demand.gpu_kind,
            needed: demand.gpus,
            worst: demand.worst_path,
            most: topo.most_connected(topo.all(), accepted, demand.worst_path),
        });
    }
    if node.cpus < demand.cpus {
        return Err(Misfit::CpuCapacity {
            needed: demand.cpus,
            total: node.cpus,
        });
    }
    if node.mem_mib < demand.mem_mib {
        return Err(Misfit::MemCapacity {
            needed: demand.mem_mib,
            total: node.mem_mib,
        });
    }
    if let (true, Some(most)) = (demand.exclusive, demand.max_whole_gpus) {
        let gpus = node.gpus.len() as u32;
        if gpus > most {
            return Err(Misfit::WholeOverQuota { gpus, most });
        }
    }

    // `--exclusive` both ways: a whole node for the job, and nothing beside a job that has one.
    if let Some(whole) = view.holds_binding(demand.ends_by).find(|h| h.whole) {
        return Err(Misfit::HeldWhole { job: whole.job });
    }
    if demand.exclusive {
        let others: BTreeSet<JobId> = view.holds_binding(demand.ends_by).map(|h| h.job).collect();
        if !others.is_empty() {
            return Err(Misfit::NotWhole { jobs: others.len() });
        }
    }
    let (free_gpus, free_cpus, free_mem_mib) = view.free_for(demand.ends_by);
    let n_free = (free_gpus & accepted).count_ones();
    if n_free < demand.gpus {
        return Err(Misfit::GpusBusy {
            kind: demand.gpu_kind,
            needed: demand.gpus,
            free: n_free,
        });
    }
    if free_cpus < demand.cpus {
        return Err(Misfit::CpusBusy {
            needed: demand.cpus,
            free: free_cpus,
        });
    }
    if free_mem_mib < demand.mem_mib {
        return Err(Misfit::MemBusy {
            needed: demand.mem_mib,
            free: free_mem_mib,
        });
    }
    let Some(choice) = topo.best_set(free_gpus, accepted, demand.gpus, demand.worst_path) else {
        return Err(Misfit::GpusScattered {
            kind: demand.gpu_kind,
            needed: demand.gpus,
            worst: demand.worst_path,
            most: topo.most_connected(free_gpus, accepted, demand.worst_path),
        });
    };
    if demand.exclusive {
        // Nothing binding is held here: the free room is the whole node (in service).
        return Ok(Fit {
            gpus: free_gpus,
            conn: choice.rank.conn,
            n_free,
            cpus: free_cpus,
            mem_mib: free_mem_mib,
        });
    }
    Ok(Fit {
        gpus: choice.gpus,
        conn: choice.rank.conn,
        n_free,
        cpus: demand.cpus,
        mem_mib: demand.mem_mib,
    })
}

/// How a node ranks for a job that fits on it: the smallest wins. Compared field by field, in
/// declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct NodeRank<'n> {
    /// Only for a job that spans nodes: the node lacks the `ib` feature. InfiniBand between the
    /// job's nodes is a soft preference (`--constraint ib` makes it hard).
    pub(crate) lacks_ib: bool,
    /// How well the GPUs the job would get there are connected: a node that offers a fully
    /// NVLinked set beats one that does not.
    pub(crate) conn: Connectivity,
    /// Best fit: the fewest free GPUs the job accepts, so that big holes stay for big jobs.
    pub(crate) n_free: u32,
    /// The node's name, so that ties always resolve the same way.
    pub(crate) name: &'n str,
}

impl<'n> NodeRank<'n> {
    pub(crate) fn of(view: &NodeView<'n>, fit: &Fit, spans_nodes: bool) -> Self {
        NodeRank {
            lacks_ib: spans_nodes && !view.node().features.iter().any(|f| f == IB_FEATURE),
            conn: fit.conn,
            n_free: fit.n_free,
            name: &view.node().name,
        }
    }
}

/// How the nodes chosen for a gang on one GPU model rank against those on another model: the
/// smallest wins, field by field; ties go to the model name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct GangRank {
    /// Chosen nodes without the `ib` feature.
    n_lacking_ib: usize,
    /// The worst connectivity of the GPU sets on the chosen nodes.
    worst_conn: Connectivity,
    /// Best fit: free accepted GPUs on the chosen nodes, summed.
    n_free: u32,
}

/// Where the whole job would go on these views, or `None`.
///
/// Each node is ranked by [`NodeRank`]: topology of the GPU set it offers, then best fit, then
/// name. A gang (`nodes` > 1) gets that many distinct nodes, all with one GPU model (the best
/// model by [`GangRank`], then by name), or nothing.
pub(crate) fn find_placement(views: &Views<'_>, spec: &JobSpec) -> Option<Vec<NodeAlloc>> {
    find_placement_ending(views, spec, None)
}

/// [`find_placement`] for a job that would end by `ends_by`: it may also use the room that
/// backfill keeps for reservations starting at or after then ([`NodeView::free_for`]).
pub(crate) fn find_placement_ending(
    views: &Views<'_>,
    spec: &JobSpec,
    ends_by: Option<Millis>,
) -> Option<Vec<NodeAlloc>> {
    place_demand(views, NodeDemand::of(spec).ending(ends_by), spec)
}

/// [`find_placement_ending`] for an `--exclusive` job that may hold at most `gpus` GPUs on
/// each node (a quota's room): only nodes of at most that many GPUs in all.
pub(crate) fn find_placement_whole_at_most(
    views: &Views<'_>,
    spec: &JobSpec,
    ends_by: Option<Millis>,
    gpus: u32,
) -> Option<Vec<NodeAlloc>> {
    let demand = NodeDemand::of(spec).ending(ends_by).whole_at_most(gpus);
    place_demand(views, demand, spec)
}

/// Where a job with this demand goes on these views, or `None` (see [`find_placement`]).
fn place_demand(
    views: &Views<'_>,
    demand: NodeDemand<'_>,
    spec: &JobSpec,
) -> Option<Vec<NodeAlloc>> {
    let n_nodes = n_nodes(spec) as usize;
    if n_nodes == 1 || demand.gpus == 0 {
        return best_nodes(views, &demand, n_nodes).map(|(allocs, _)| allocs);
    }
    // Among the models the gang could run on (the set iterates in name order and `min_by_key`
    // keeps the first of equals).
    gang_models(views, &demand)
        .into_iter()
        .filter_map(|model| best_nodes(views, &demand.pinned_to(model), n_nodes))
        .min_by_key(|(_, rank)| *rank)
        .map(|(allocs, _)| allocs)
}

/// The GPU models of these views that `demand` accepts.
pub(crate) fn gang_models<'v>(views: &Views<'v>, demand: &NodeDemand<'_>) -> BTreeSet<&'v str> {
    let mut topologies: Vec<&Arc<Topology>> = Vec::new();
    let mut models = BTreeSet::new();
    for view in views.values() {
        let topo = view.topology();
        if topologies.iter().any(|t| Arc::ptr_eq(t, topo)) {
            continue;
        }
        topologies.push(topo);
        let accepted = demand.accepted_on(topo);
        // The first node of each topology stands for all: the model names are the same.
        let node_models = view.node().gpus.iter().filter(|g| {
            topo.models()
                .iter()
                .any(|(m, mask)| *m == g.model && mask & accepted != 0)
        });
        models.extend(node_models.map(|g| g.model.as_str()));
    }
    models
}

/// The `n` best-ranked nodes for `demand`, or `None` when fewer fit.
fn best_nodes(
    views: &Views<'_>,
    demand: &NodeDemand<'_>,
    n: usize,
) -> Option<(Vec<NodeAlloc>, GangRank)> {
    let spans_nodes = n > 1;
    let fits = views
        .values()
        .filter_map(|view| fit_on_node(view, demand).ok().map(|fit| (view, fit)));
    let chosen: Vec<(NodeRank<'_>, &NodeView<'_>, Fit)> = if n == 1 {
        // The common case, without collecting every node that fits.
        let best = fits
            .map(|(view, fit)| (NodeRank::of(view, &fit, false), view, fit))
            .min_by(|a, b| a.0.cmp(&b.0))?;
        vec![best]
    } else {
        let mut all: Vec<_> = fits
            .map(|(view, fit)| (NodeRank::of(view, &fit, spans_nodes), view, fit))
            .collect();
        if all.len() < n {
            return None;
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all.truncate(n);
        all
    };
    let rank = GangRank {
        n_lacking_ib: chosen.iter().filter(|(r, _, _)| r.lacks_ib).count(),
        worst_conn: chosen
            .iter()
            .map(|(r, _, _)| r.conn)
            .max()
            .unwrap_or(Connectivity::BEST),
        n_free: chosen.iter().map(|(r, _, _)| r.n_free).sum(),
    };
    Some((
        chosen
            .into_iter()
            .map(|(_, view, fit)| view.alloc(&fit))
            .collect(),
        rank,
    ))
}

/// Every node, with nothing taken and regardless of drain, connection or GPUs out of service:
/// what could ever run.
pub(crate) fn capacity_views<'a>(
    nodes: &'a BTreeMap<String, Node>,
    topologies: &mut Topologies,
) -> Views<'a> {
    topologies.forget_replaced(nodes);
    nodes
        .iter()
        .map(|(name, node)| (name.as_str(), NodeView::whole(node, topologies.of(node))))
        .collect()
}

/// [`check_satisfiable`] against prebuilt [`capacity_views`], so a pass builds them once.
pub(crate) fn satisfiable_on(capacity: &Views<'_>, spec: &JobSpec) -> Result<(), String> {
    check_named_nodes(
        spec,
        |name| capacity.contains_key(name),
        || capacity.keys().copied().collect(),
    )?;
    if enough_fit_alone(capacity.values(), spec) {
        return Ok(());
    }
    match find_placement(capacity, spec) {
        Some(_) => Ok(()),
        None => Err(why_unsatisfiable(capacity, spec)),
    }
}

/// Whether enough of these (empty) nodes fit the job each on its own for it to run, looking
/// no further than needed: the same answer as `find_placement` on them for a job that is not
/// a GPU gang (it finds a placement exactly when that many fit), at the cost of the first few
/// nodes rather than a ranking of all. `false` for a GPU gang: ask `find_placement`.
fn enough_fit_alone<'v, V>(views: impl Iterator<Item = V>, spec: &JobSpec) -> bool
where
    V: std::borrow::Borrow<NodeView<'v>>,
{
    let demand = NodeDemand::of(spec);
    let wanted = n_nodes(spec) as usize;
    if wanted > 1 && demand.gpus > 0 {
        return false;
    }
    views
        .filter(|view| fit_on_node(view.borrow(), &demand).is_ok())
        .take(wanted)
        .count()
        == wanted
}

/// Submit-time check: could this spec ever run on some known node, ignoring current
/// allocations, drain, connectivity and GPUs out of service (they may return)? The error names the problem, e.g. "no node has 16 GPUs
/// (largest has 8)".
pub fn check_satisfiable(spec: &JobSpec, nodes: &BTreeMap<String, Node>) -> Result<(), String> {
    check_satisfiable_with(spec, nodes, &mut Topologies::default())
}

/// [`check_satisfiable`] with node topologies kept by the caller between calls.
pub fn check_satisfiable_with(
    spec: &JobSpec,
    nodes: &BTreeMap<String, Node>,
    topologies: &mut Topologies,
) -> Result<(), String> {
    check_named_nodes(
        spec,
        |name| nodes.contains_key(name),
        || nodes.keys().map(String::as_str).collect(),
    )?;
    // Every submit asks this: look at nodes one by one, as their views are made, and stop at
    // the first that answer (see `enough_fit_alone`).
    let views = nodes
        .values()
        .map(|node| NodeView::whole(node, topologies.of(node)));
    if enough_fit_alone(views, spec) {
        return Ok(());
    }
    satisfiable_on(&capacity_views(nodes, topologies), spec)
}

/// Refuses a `--nodelist` or `--exclude` naming a node that is not registered (a typo would
/// otherwise wait forever, or exclude nothing): "no node named 'gpu9' (nodes: gpu1, gpu2)".
fn check_named_nodes<'n>(
    spec: &JobSpec,
    known: impl Fn(&str) -> bool,
    names: impl FnOnce() -> Vec<&'n str>,
) -> Result<(), String> {
    let Some(unknown) = spec
        .nodelist
        .iter()
        .chain(&spec.exclude)
        .find(|name| !known(name))
    else {
        return Ok(());
    };
    // A few names are enough to spot a typo; the whole list of a large cluster is not.
    const SHOWN: usize = 20;
    let all = names();
    let mut shown = all
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if all.len() > SHOWN {
        shown.push_str(&format!(", ... ({} in all)", all.len()));
    }
    if all.is_empty() {
        shown = "none registered".into();
    }
    Err(format!(
        "no node named '{}' (nodes: {shown})",
        ysched_common::text::excerpt(unknown, 64)
    ))
}

/// Names the first reason no node could ever hold the job. Only called once `find_placement`
/// failed on empty nodes, so the last sentence (no node has everything together) is true when
/// every single requirement is met somewhere.
fn why_unsatisfiable(capacity: &Views<'_>, spec: &JobSpec) -> String {
    if capacity.is_empty() {
        return "no nodes are registered".into();
    }
    let demand = NodeDemand::of(spec);
    // Only the nodes the job may use (`--nodelist`, `--exclude`) speak for it.
    let capacity: Views<'_> = capacity
        .iter()
        .filter(|(name, _)| demand.allows(name))
        .map(|(name, view)| (*name, view.clone()))
        .collect();
    let nodes: Vec<&Node> = capacity.values().map(|v| v.node()).collect();
    let n_nodes = n_nodes(spec);
    if n_nodes as usize > nodes.len() {
        let outside = if spec.exclude.is_empty() {
            ""
        } else {
            " outside its --exclude"
        };
        return format!(
            "the job needs {n_nodes} nodes, only {} are registered{outside}",
            nodes.len()
        );
    }
    let on_listed = if spec.nodelist.is_empty() {
        ""
    } else {
        " of its --nodelist"
    };
    let on_each = if n_nodes > 1 {
        format!(", and the job needs that on each of {n_nodes} nodes")
    } else {
        String::new()
    };
    for feature in demand.constraints {
        if !nodes.iter().any(|n| n.features.contains(feature)) {
            return format!("no node{on_listed} has feature {feature}");
        }
    }
    if demand.gpus > 0 {
        let accepted = |view: &NodeView<'_>| demand.accepted_on(view.topology()).count_ones();
        if let GpuKind::Types(types) = demand.gpu_kind {
            if capacity.values().all(|v| accepted(v) == 0) {
                let models: BTreeSet<&str> = nodes
                    .iter()
                    .flat_map(|n| n.gpus.iter().map(|g| g.model.as_str()))
                    .collect();
                let models = if models.is_empty() {
                    "none".to_string()
                } else {
                    models.into_iter().collect::<Vec<_>>().join(", ")
                };
                return format!(
                    "no node{on_listed} has GPU type {} (models: {models})",
                    types.join("|")
                );
            }
        }
        let largest = capacity.values().map(accepted).max().unwrap_or(0);
        if largest < demand.gpus {
            return format!(
                "no node{on_listed} has {}{} (largest has {largest}){on_each}",
                plural(demand.gpus, "GPU"),
                demand.gpu_kind
            );
        }
        if demand.worst_path < Path::ANY {
            let most = capacity
                .values()
                .map(|v| {
                    let topo = v.topology();
                    topo.most_connected(topo.all(), demand.accepted_on(topo), demand.worst_path)
                })
                .max()
                .unwrap_or(0);
            if most < demand.gpus {
                return format!(
                    "no node{on_listed} has {}{} linked by {} (the most on one node is {most}){on_each}",
                    plural(demand.gpus, "GPU"),
                    demand.gpu_kind,
                    demand.worst_path
                );
            }
        }
    }
    let largest_cpus = nodes.iter().map(|n| n.cpus).max().unwrap_or(0);
    if largest_cpus < demand.cpus {
        return format!(
            "no node{on_listed} has {} (largest has {largest_cpus}){on_each}",
            plural(demand.cpus, "CPU")
        );
    }
    let largest_mem = nodes.iter().map(|n| n.mem_mib).max().unwrap_or(0);
    if largest_mem < demand.mem_mib {
        return format!(
            "no node{on_listed} has {} MiB of memory (largest has {largest_mem} MiB){on_each}",
            demand.mem_mib
        );
    }
    if n_nodes == 1 {
        format!("no node{on_listed} has {} together", describe(&demand))
    } else {
        let one_model = if demand.gpus > 0 {
            " with one GPU model"
        } else {
            ""
        };
        format!(
            "fewer than {n_nodes} nodes{one_model} each have {}",
            describe(&demand)
        )
    }
}

/// "8 GPUs of type A100 linked by NVLink, 64 CPUs, 1000 MiB of memory, features ib, nvme"
fn describe(demand: &NodeDemand<'_>) -> String {
    let mut parts = Vec::new();
    if demand.gpus > 0 {
        let linked = if demand.worst_path < Path::ANY && demand.gpus > 1 {
            format!(" linked by {}", demand.worst_path)
        } else {
            String::new()
        };
        parts.push(format!(
            "{}{}{linked}",
            plural(demand.gpus, "GPU"),
            demand.gpu_kind
        ));
    }
    parts.push(plural(demand.cpus, "CPU"));
    if demand.mem_mib > 0 {
        parts.push(format!("{} MiB of memory", demand.mem_mib));
    }
    match demand.constraints {
        [] => {}
        [one] => parts.push(format!("feature {one}")),
        many => parts.push(format!("features {}", many.join(", "))),
    }
    parts.join(", ")
}

/// "1 GPU", "4 GPUs"
pub(crate) fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
