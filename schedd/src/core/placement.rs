//! Which nodes a job gets: each node that fits ranked ([`NodeRank`]), and a gang placed on
//! nodes of one GPU model ([`find_placement`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use ysched_common::time::Millis;
use ysched_common::{JobSpec, NodeAlloc};

use super::demand::{n_nodes, NodeDemand};
use super::fit::{fit_on_node, Fit};
use super::node_view::{NodeView, Views};
use super::topo::{Connectivity, Topology};

/// The node feature that marks InfiniBand: preferred for jobs that span nodes.
pub(crate) const IB_FEATURE: &str = "ib";
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
