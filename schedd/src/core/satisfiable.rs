//! Whether a job could ever run on the cluster as it is (the submit-time check, and a pass's,
//! once per shape of job), and in words why not.

use std::collections::{BTreeMap, BTreeSet};

use ysched_common::{JobSpec, Node};

use super::demand::{n_nodes, GpuKind, NodeDemand};
use super::fit::{fit_on_node, plural};
use super::node_view::{NodeView, Views};
use super::placement::find_placement;
use super::topo::{Path, Topologies};

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
