//! Whether a job fits on a node, and which GPUs it gets there.
//!
//! Placement, preemption, the submit-time satisfiability check and `explain` all ask
//! [`fit_on_node`], so they can never disagree about what fits. GPU choice inside a node lives in
//! [`choose_gpus`] alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use ysched_common::{gpu_type_matches, Gpu, JobId, JobSpec, Node, NodeAlloc};

/// How many nodes a job spans: `nodes` 0 and 1 both mean one.
pub(crate) fn n_nodes(spec: &JobSpec) -> u32 {
    spec.nodes.max(1)
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
    pub(crate) fn accepts(self, gpu: &Gpu) -> bool {
        match self {
            GpuKind::Any => true,
            GpuKind::Types(types) => types.iter().any(|t| gpu_type_matches(t, &gpu.model)),
            GpuKind::Model(model) => gpu.model == model,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeDemand<'a> {
    pub(crate) gpus: u32,
    pub(crate) cpus: u32,
    /// 0: the job asked for no memory.
    pub(crate) mem_mib: u64,
    pub(crate) gpu_kind: GpuKind<'a>,
    /// Features the node must advertise, all of them.
    pub(crate) constraints: &'a [String],
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
        }
    }

    /// The same demand, restricted to one GPU model.
    pub(crate) fn pinned_to(self, model: &'a str) -> Self {
        NodeDemand {
            gpu_kind: GpuKind::Model(model),
            ..self
        }
    }
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
}

/// Resources one job takes on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) job: JobId,
    pub(crate) claim: Claim,
    pub(crate) gpus: Vec<u32>,
    pub(crate) cpus: u32,
    pub(crate) mem_mib: u64,
}

impl Hold {
    pub(crate) fn new(job: JobId, claim: Claim, alloc: &NodeAlloc) -> Hold {
        Hold {
            job,
            claim,
            gpus: alloc.gpus.clone(),
            cpus: alloc.cpus,
            mem_mib: alloc.mem_mib,
        }
    }
}

/// A node together with what is taken on it. The free resources are derived from the holds and
/// kept in step with them, which is why the fields are private.
#[derive(Debug, Clone)]
pub(crate) struct NodeView<'a> {
    node: &'a Node,
    holds: Vec<Hold>,
    free_gpus: BTreeSet<u32>,
    free_cpus: u32,
    free_mem_mib: u64,
}

impl<'a> NodeView<'a> {
    /// The node with nothing taken.
    pub(crate) fn new(node: &'a Node) -> Self {
        NodeView {
            node,
            holds: Vec::new(),
            free_gpus: node.gpus.iter().map(|g| g.index).collect(),
            free_cpus: node.cpus,
            free_mem_mib: node.mem_mib,
        }
    }

    pub(crate) fn node(&self) -> &'a Node {
        self.node
    }

    pub(crate) fn holds(&self) -> &[Hold] {
        &self.holds
    }

    pub(crate) fn free_gpus(&self) -> &BTreeSet<u32> {
        &self.free_gpus
    }

    pub(crate) fn free_cpus(&self) -> u32 {
        self.free_cpus
    }

    pub(crate) fn free_mem_mib(&self) -> u64 {
        self.free_mem_mib
    }

    pub(crate) fn add_hold(&mut self, hold: Hold) {
        for gpu in &hold.gpus {
            self.free_gpus.remove(gpu);
        }
        // Saturating: a node that re-registered smaller may be over-committed until jobs end.
        self.free_cpus = self.free_cpus.saturating_sub(hold.cpus);
        self.free_mem_mib = self.free_mem_mib.saturating_sub(hold.mem_mib);
        self.holds.push(hold);
    }

    /// A copy with every hold of these jobs released, as if they had exited.
    pub(crate) fn without(&self, jobs: &BTreeSet<JobId>) -> NodeView<'a> {
        // Rebuilt from scratch rather than by adding back: exact even when holds overlap.
        let mut view = NodeView::new(self.node);
        for hold in self.holds.iter().filter(|h| !jobs.contains(&h.job)) {
            view.add_hold(hold.clone());
        }
        view
    }

    /// Free GPUs of the node that `kind` accepts, by index.
    fn free_accepted_gpus(&self, kind: GpuKind<'_>) -> Vec<&'a Gpu> {
        let mut gpus: Vec<&Gpu> = self
            .node
            .gpus
            .iter()
            .filter(|g| self.free_gpus.contains(&g.index) && kind.accepts(g))
            .collect();
        gpus.sort_by_key(|g| g.index);
        gpus
    }

    pub(crate) fn n_free_accepted(&self, kind: GpuKind<'_>) -> usize {
        self.free_accepted_gpus(kind).len()
    }
}

/// Why a job does not fit on a node. The `*Capacity` kinds hold even on an empty node; the
/// `*Busy` kinds are transient: jobs ending (or being evicted) could make room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Misfit<'d> {
    MissingFeatures(Vec<&'d str>),
    GpuCapacity {
        kind: GpuKind<'d>,
        needed: u32,
        total: u32,
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
    CpusBusy {
        needed: u32,
        free: u32,
    },
    MemBusy {
        needed: u64,
        free: u64,
    },
}

impl Misfit<'_> {
    /// Freeing resources on the node could make the job fit.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            Misfit::GpusBusy { .. } | Misfit::CpusBusy { .. } | Misfit::MemBusy { .. }
        )
    }
}

impl fmt::Display for Misfit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            Misfit::CpuCapacity { needed, total } => {
                write!(f, "needs {}, node has {total}", plural(*needed, "CPU"))
            }
            Misfit::MemCapacity { needed, total } => {
                write!(f, "needs {needed} MiB of memory, node has {total} MiB")
            }
            Misfit::GpusBusy { kind, needed, free } => {
                write!(f, "needs {}{kind}, {free} free", plural(*needed, "GPU"))
            }
            Misfit::CpusBusy { needed, free } => {
                write!(f, "needs {}, {free} free", plural(*needed, "CPU"))
            }
            Misfit::MemBusy { needed, free } => {
                write!(f, "needs {needed} MiB of memory, {free} MiB free")
            }
        }
    }
}

/// Whether `demand` fits in what is free on `view`, and if so the allocation it would get.
///
/// The one fit check: placement, preemption (on a copy of the view with the candidate victims
/// removed), satisfiability (on an empty view) and `explain` all call it. It is monotone in the
/// free resources (more free never turns a fit into a misfit), which is what makes the reprieve
/// in `preempt` yield a minimal victim set. Schedulability (drain, connection) is the caller's
/// business: this answers only for resources and features.
pub(crate) fn fit_on_node<'d>(
    view: &NodeView<'_>,
    demand: &NodeDemand<'d>,
) -> Result<NodeAlloc, Misfit<'d>> {
    let node = view.node();
    // Fixed properties of the node first: they explain a misfit better than momentary load.
    let missing: Vec<&str> = demand
        .constraints
        .iter()
        .filter(|c| !node.features.contains(c))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(Misfit::MissingFeatures(missing));
    }
    let n_accepted = node
        .gpus
        .iter()
        .filter(|g| demand.gpu_kind.accepts(g))
        .count() as u32;
    if n_accepted < demand.gpus {
        return Err(Misfit::GpuCapacity {
            kind: demand.gpu_kind,
            needed: demand.gpus,
            total: n_accepted,
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

    let free_gpus = view.free_accepted_gpus(demand.gpu_kind);
    if (free_gpus.len() as u32) < demand.gpus {
        return Err(Misfit::GpusBusy {
            kind: demand.gpu_kind,
            needed: demand.gpus,
            free: free_gpus.len() as u32,
        });
    }
    if view.free_cpus() < demand.cpus {
        return Err(Misfit::CpusBusy {
            needed: demand.cpus,
            free: view.free_cpus(),
        });
    }
    if view.free_mem_mib() < demand.mem_mib {
        return Err(Misfit::MemBusy {
            needed: demand.mem_mib,
            free: view.free_mem_mib(),
        });
    }
    Ok(NodeAlloc {
        node: node.name.clone(),
        gpus: choose_gpus(&free_gpus, demand.gpus),
        cpus: demand.cpus,
        mem_mib: demand.mem_mib,
    })
}

/// Picks `n` of the free, accepted GPUs of one node (`free` is sorted by index and has at least
/// `n`). The only place that decides which GPUs inside a node a job gets: for now the lowest
/// indices; topology (NVLink islands) will be taught here, and only here. Whatever it learns, it
/// must stay a choice *among* `free`, so that `fit_on_node` stays monotone.
fn choose_gpus(free: &[&Gpu], n: u32) -> Vec<u32> {
    free.iter().take(n as usize).map(|g| g.index).collect()
}

/// Where the whole job would go on these views, choosing by best fit, or `None`.
///
/// Best fit: prefer the node with the fewest free GPUs the job accepts that still fits (the big
/// holes stay for big jobs); tie → node name. A gang (`nodes` > 1) gets that many distinct
/// nodes, all with one GPU model, or nothing.
pub(crate) fn find_placement(
    views: &BTreeMap<String, NodeView<'_>>,
    spec: &JobSpec,
) -> Option<Vec<NodeAlloc>> {
    let demand = NodeDemand::of(spec);
    let n_nodes = n_nodes(spec) as usize;
    if n_nodes == 1 || demand.gpus == 0 {
        return best_nodes(views, &demand, n_nodes).map(|(allocs, _)| allocs);
    }
    let models: BTreeSet<&str> = views
        .values()
        .flat_map(|v| v.node().gpus.iter())
        .filter(|g| demand.gpu_kind.accepts(g))
        .map(|g| g.model.as_str())
        .collect();
    // Among the models the gang could run on, best fit again: the fewest free GPUs left
    // unused on the chosen nodes; tie → model name (the set iterates in name order and
    // `min_by_key` keeps the first of equals).
    models
        .into_iter()
        .filter_map(|model| best_nodes(views, &demand.pinned_to(model), n_nodes))
        .min_by_key(|(_, n_free)| *n_free)
        .map(|(allocs, _)| allocs)
}

/// The `n` best-fitting nodes for `demand`, with the sum of their free accepted GPUs.
fn best_nodes(
    views: &BTreeMap<String, NodeView<'_>>,
    demand: &NodeDemand<'_>,
    n: usize,
) -> Option<(Vec<NodeAlloc>, usize)> {
    let mut fits: Vec<(usize, &str, NodeAlloc)> = views
        .values()
        .filter_map(|view| {
            let alloc = fit_on_node(view, demand).ok()?;
            Some((
                view.n_free_accepted(demand.gpu_kind),
                view.node().name.as_str(),
                alloc,
            ))
        })
        .collect();
    if fits.len() < n {
        return None;
    }
    fits.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    fits.truncate(n);
    let n_free = fits.iter().map(|(n_free, _, _)| n_free).sum();
    Some((
        fits.into_iter().map(|(_, _, alloc)| alloc).collect(),
        n_free,
    ))
}

/// Every node, with nothing taken and regardless of drain or connection: what could ever run.
pub(crate) fn capacity_views(nodes: &BTreeMap<String, Node>) -> BTreeMap<String, NodeView<'_>> {
    nodes
        .iter()
        .map(|(name, node)| (name.clone(), NodeView::new(node)))
        .collect()
}

/// [`check_satisfiable`] against prebuilt [`capacity_views`], so a pass builds them once.
pub(crate) fn satisfiable_on(
    capacity: &BTreeMap<String, NodeView<'_>>,
    spec: &JobSpec,
) -> Result<(), String> {
    match find_placement(capacity, spec) {
        Some(_) => Ok(()),
        None => Err(why_unsatisfiable(
            capacity.values().map(|v| v.node()).collect(),
            spec,
        )),
    }
}

/// Submit-time check: could this spec ever run on some known node, ignoring current
/// allocations, drain and connectivity? The error names the problem, e.g. "no node has 16 GPUs
/// (largest has 8)".
pub fn check_satisfiable(spec: &JobSpec, nodes: &BTreeMap<String, Node>) -> Result<(), String> {
    satisfiable_on(&capacity_views(nodes), spec)
}

/// Names the first reason no node could ever hold the job. Only called once `find_placement`
/// failed on empty nodes, so the last sentence (no node has everything together) is true when
/// every single requirement is met somewhere.
fn why_unsatisfiable(nodes: Vec<&Node>, spec: &JobSpec) -> String {
    if nodes.is_empty() {
        return "no nodes are registered".into();
    }
    let demand = NodeDemand::of(spec);
    let n_nodes = n_nodes(spec);
    if n_nodes as usize > nodes.len() {
        return format!(
            "the job needs {n_nodes} nodes, only {} are registered",
            nodes.len()
        );
    }
    let on_each = if n_nodes > 1 {
        format!(", and the job needs that on each of {n_nodes} nodes")
    } else {
        String::new()
    };
    for feature in demand.constraints {
        if !nodes.iter().any(|n| n.features.contains(feature)) {
            return format!("no node has feature {feature}");
        }
    }
    if demand.gpus > 0 {
        let accepted = |node: &Node| {
            node.gpus
                .iter()
                .filter(|g| demand.gpu_kind.accepts(g))
                .count() as u32
        };
        if let GpuKind::Types(types) = demand.gpu_kind {
            if nodes.iter().all(|n| accepted(n) == 0) {
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
                    "no node has GPU type {} (models: {models})",
                    types.join("|")
                );
            }
        }
        let largest = nodes.iter().map(|n| accepted(n)).max().unwrap_or(0);
        if largest < demand.gpus {
            return format!(
                "no node has {}{} (largest has {largest}){on_each}",
                plural(demand.gpus, "GPU"),
                demand.gpu_kind
            );
        }
    }
    let largest_cpus = nodes.iter().map(|n| n.cpus).max().unwrap_or(0);
    if largest_cpus < demand.cpus {
        return format!(
            "no node has {} (largest has {largest_cpus}){on_each}",
            plural(demand.cpus, "CPU")
        );
    }
    let largest_mem = nodes.iter().map(|n| n.mem_mib).max().unwrap_or(0);
    if largest_mem < demand.mem_mib {
        return format!(
            "no node has {} MiB of memory (largest has {largest_mem} MiB){on_each}",
            demand.mem_mib
        );
    }
    if n_nodes == 1 {
        format!("no node has {} together", describe(&demand))
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

/// "8 GPUs of type A100, 64 CPUs, 1000 MiB of memory, features ib, nvme"
fn describe(demand: &NodeDemand<'_>) -> String {
    let mut parts = Vec::new();
    if demand.gpus > 0 {
        parts.push(format!("{}{}", plural(demand.gpus, "GPU"), demand.gpu_kind));
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
fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
