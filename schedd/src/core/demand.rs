//! What a job asks of each node it runs on ([`NodeDemand`]): GPUs of the kinds it accepts, CPUs,
//! memory, features, the nodes it names, and how its GPUs must be linked.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use ysched_common::time::Millis;
#[cfg(test)]
use ysched_common::Gpu;
use ysched_common::{gpu_type_matches, JobSpec};

use super::topo::{Path, Topology};

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
