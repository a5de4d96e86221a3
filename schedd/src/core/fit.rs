//! Whether a job fits on a node ([`fit_on_node`], the one fit check), where, and why not
//! ([`Misfit`]).
//!
//! Placement, preemption, the submit-time satisfiability check and `explain` all ask
//! [`fit_on_node`], so they can never disagree about what fits. GPU choice inside a node lives in
//! [`Topology::best_set`](super::topo::Topology::best_set) alone; node choice in
//! [`find_placement`](super::placement::find_placement), ranked by
//! [`NodeRank`](super::placement::NodeRank).

use std::collections::BTreeSet;
use std::fmt;

use ysched_common::JobId;

use super::demand::{listed, GpuKind, NodeDemand};
use super::node_view::NodeView;
use super::topo::{Connectivity, Path};

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

/// "1 GPU", "4 GPUs"
pub(crate) fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
