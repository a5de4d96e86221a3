//! A node as a pass sees it ([`NodeView`]): the holds on it (running jobs, this pass's
//! placements and reservations) and the free room derived from them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ysched_common::time::Millis;
use ysched_common::{JobId, Node, NodeAlloc};

use super::fit::Fit;
use super::preempt::Evictable;
use super::topo::Topology;

/// Node views by node name.
pub(crate) type Views<'a> = BTreeMap<&'a str, NodeView<'a>>;
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
