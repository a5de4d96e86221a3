//! Preemption: for a pending job that fits nowhere, the smallest set of lower-tier jobs to evict,
//! and the nodes where that costs least.
//!
//! Per node (after Kubernetes' `SelectVictimsOnNode`): take every eligible victim off a copy of
//! the node and ask the same [`fit_on_node`] as placement. If the job fits, note how well its GPUs
//! would be connected, then reprieve the victims one at a time, most valuable first, keeping each
//! reprieve that still lets the job fit *as well connected*. Nodes compare by [`EvictionCost`].
//!
//! A job spanning `N` nodes takes the nodes where it fits already, then the cheapest nodes to
//! evict on until it has `N`, all with one GPU model. Its victims are then reprieved once more
//! across those nodes together: a victim that spans nodes frees its part on every one of them
//! (it is evicted whole), so another victim may no longer be needed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState, NodeAlloc, TierConfig};

use super::demand::{n_nodes, NodeDemand};
use super::fit::{fit_on_node, Fit};
use super::node_view::{Claim, NodeView, Views};
use super::placement::{gang_models, NodeRank};
use super::topo::{Connectivity, Path};

/// What preemption needs to know of a running job that a higher tier may evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Evictable {
    pub(crate) tier_value: i64,
    /// See [`gpu_secs_lost`].
    pub(crate) gpu_secs_lost: i64,
    /// When it started (`now` when unknown).
    pub(crate) started: Millis,
}

impl Evictable {
    /// The order in which victims are offered a reprieve, most valuable first: higher tier,
    /// more work to lose, older; the id makes it total.
    fn reprieve_key(&self, id: JobId) -> (Reverse<i64>, Reverse<i64>, Millis, JobId) {
        (
            Reverse(self.tier_value),
            Reverse(self.gpu_secs_lost),
            self.started,
            id,
        )
    }
}

/// `Some` when a job of a higher tier may evict `job`: it is RUNNING (not already stopping), its
/// tier is known and preemptible, and it has run its tier's `min_runtime`. A job whose tier is
/// no longer configured is never evicted: what cannot be classified is protected. Whether a
/// given preemptor may evict it also needs its tier value to be strictly lower.
pub(crate) fn evictable(
    job: &Job,
    tiers: &BTreeMap<String, TierConfig>,
    now: Millis,
) -> Option<Evictable> {
    let tier = tiers.get(&job.spec.tier)?;
    let min_runtime_ms = i64::try_from(tier.min_runtime)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    (job.state == JobState::Running && tier.preemptible && ran_ms(job, now) >= min_runtime_ms).then(
        || Evictable {
            tier_value: job.tier_value,
            gpu_secs_lost: gpu_secs_lost(job, now),
            started: job.start_time.unwrap_or(now),
        },
    )
}

/// The evictions chosen for one preemptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preemption {
    /// The victims by id, each with the node it is evicted for: the first target node, by name,
    /// where it holds resources.
    pub(crate) victims: Vec<(JobId, String)>,
    /// The target nodes that need evictions, by name: where the preemptor waits.
    pub(crate) nodes: Vec<String>,
    /// Where the preemptor will run once they are gone, one allocation per node, by node name.
    pub(crate) targets: Vec<NodeAlloc>,
    /// For each target, the worst path allowed between the preemptor's GPUs there: its own
    /// requirement, tightened on nodes with evictions to what evicting every candidate gave.
    /// Sparing any single victim makes the job misfit at that bound on some target.
    pub(crate) worst_paths: Vec<Path>,
    pub(crate) cost: EvictionCost,
}

/// What an eviction costs. Compared field by field, in declaration order; the lowest cost wins.
/// `N` names the target nodes: one borrowed name while nodes are compared one by one, all
/// their names for a whole plan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct EvictionCost<N = Vec<String>> {
    /// The most valuable victim's tier value: never disturb a higher tier where lower ones
    /// would do.
    pub(crate) max_victim_tier_value: i64,
    /// How well the preemptor's GPUs will be connected (the worst of its nodes): an eviction
    /// that frees a fully NVLinked set beats one that frees scattered GPUs.
    pub(crate) conn: Connectivity,
    /// How many jobs get interrupted.
    pub(crate) n_victims: usize,
    /// GPU-seconds of work thrown away: per victim, its GPUs times the seconds since its last
    /// checkpoint (or since it started, without one).
    pub(crate) gpu_secs_lost: i64,
    /// The victims' tier values summed: among otherwise equal sets, disturb less value.
    pub(crate) sum_victim_tier_values: i64,
    /// When the most recently started victim started, reversed: prefer evicting the set that
    /// contains the newest job.
    pub(crate) latest_start: Reverse<Millis>,
    /// The target nodes' names, so that ties always resolve the same way.
    pub(crate) nodes: N,
}

/// The cheapest eviction that would let `preemptor` run, or `None`.
///
/// Candidates are the holds the views mark [`Evictable`] with a tier value below the
/// preemptor's (the pass clears that mark once a job is another preemptor's victim). A job
/// spanning nodes tries each GPU model it accepts and keeps the cheapest.
pub(crate) fn plan_preemption(preemptor: &Job, views: &Views<'_>) -> Option<Preemption> {
    let demand = NodeDemand::of(&preemptor.spec);
    let n = n_nodes(&preemptor.spec) as usize;
    let value = preemptor.tier_value;
    if n == 1 || demand.gpus == 0 {
        return plan_on(value, &demand, n, views);
    }
    gang_models(views, &demand)
        .into_iter()
        .filter_map(|model| plan_on(value, &demand.pinned_to(model), n, views))
        .min_by(|a, b| a.cost.cmp(&b.cost))
}

/// One node of a planned eviction: the victims there, alone, and the demand tightened to the
/// connectivity that evicting them all gives.
struct NodeEviction<'v, 'a, 'd> {
    view: &'v NodeView<'a>,
    demand: NodeDemand<'d>,
    victims: BTreeSet<JobId>,
    cost: EvictionCost<&'a str>,
}

/// [`plan_preemption`] for one demand on `n` nodes.
fn plan_on(value: i64, demand: &NodeDemand<'_>, n: usize, views: &Views<'_>) -> Option<Preemption> {
    let mut fitting = Vec::new();
    let mut candidates = Vec::new();
    let mut bounds = Vec::new();
    for view in views.values() {
        let lb = lower_bound(value, demand, view);
        // A job on one node fits nowhere as things are (placement failed), so a node without
        // enough to evict is of no use to it, and its fit need not be asked.
        if n == 1 && lb.is_none() {
            continue;
        }
        match (fit_on_node(view, demand), lb) {
            (Ok(fit), _) => fitting.push((NodeRank::of(view, &fit, n > 1), view, fit)),
            // Wrong GPU model, missing feature, too small: no eviction changes that.
            (Err(misfit), _) if !misfit.is_transient() => {}
            (Err(_), Some(lb)) => {
                bounds.push(Reverse((lb, candidates.len())));
                candidates.push(view);
            }
            (Err(_), None) => {}
        }
    }
    if fitting.len() >= n {
        // It fits without evicting anyone: placement's business.
        return None;
    }
    fitting.sort_by(|a, b| a.0.cmp(&b.0));
    let needed = n - fitting.len();

    // Branch and bound: visit nodes by a lower bound of their cost, and stop once the `needed`
    // cheapest found cost no more than the next bound. A heap, since few nodes get visited.
    let mut bounds = BinaryHeap::from(bounds);
    let mut evictions: Vec<NodeEviction<'_, '_, '_>> = Vec::new();
    while let Some(Reverse((lb, i))) = bounds.pop() {
        if evictions.len() >= needed && evictions[needed - 1].cost <= lb {
            break;
        }
        if let Some(eviction) = victims_on_node(value, demand, candidates[i]) {
            let at = evictions.partition_point(|e| e.cost <= eviction.cost);
            evictions.insert(at, eviction);
        }
    }
    if evictions.len() < needed {
        return None;
    }
    evictions.truncate(needed);
    finish(value, demand, fitting, evictions)
}

/// The victims on the chosen eviction nodes, reprieved across all of them, and what it costs.
fn finish(
    value: i64,
    demand: &NodeDemand<'_>,
    fitting: Vec<(NodeRank<'_>, &NodeView<'_>, Fit)>,
    evictions: Vec<NodeEviction<'_, '_, '_>>,
) -> Option<Preemption> {
    // Every candidate on the eviction nodes, once, with what the views know of it.
    let mut candidates: BTreeMap<JobId, Evictable> = BTreeMap::new();
    for eviction in &evictions {
        candidates.extend(candidates_on(value, eviction.view));
    }
    // Start from the union of the per-node minimal sets...
    let mut gone: BTreeSet<JobId> = BTreeSet::new();
    for eviction in &evictions {
        gone.extend(&eviction.victims);
    }
    // ...and reprieve once more across the nodes: a victim that spans several of them frees
    // room on each. Fit is monotone, so the result is minimal: sparing any one victim makes
    // the job misfit on some node.
    let fits_everywhere = |gone: &BTreeSet<JobId>| {
        evictions
            .iter()
            .all(|e| fit_on_node(&e.view.without(gone), &e.demand).is_ok())
    };
    if evictions.len() > 1 {
        let mut order: Vec<(JobId, Evictable)> =
            gone.iter().map(|id| (*id, candidates[id])).collect();
        order.sort_by_key(|(id, e)| e.reprieve_key(*id));
        for (id, _) in order {
            gone.remove(&id);
            if !fits_everywhere(&gone) {
                gone.insert(id);
            }
        }
    }

    // A node that fits already keeps the preemptor's own requirement.
    let mut targets: Vec<(NodeAlloc, Path, Connectivity)> = fitting
        .iter()
        .map(|(_, view, fit)| (view.alloc(fit), demand.worst_path, fit.conn))
        .collect();
    for eviction in &evictions {
        let freed = eviction.view.without(&gone);
        let fit = fit_on_node(&freed, &eviction.demand).ok()?;
        targets.push((
            eviction.view.alloc(&fit),
            eviction.demand.worst_path,
            fit.conn,
        ));
    }
    targets.sort_by(|a, b| a.0.node.cmp(&b.0.node));

    let victims: Vec<(JobId, String)> = gone
        .iter()
        .map(|id| {
            let node = evictions
                .iter()
                .map(|e| e.view)
                .filter(|view| view.holds().iter().any(|h| h.job == *id))
                .map(|view| view.node().name.clone())
                .min()
                .unwrap_or_default();
            (*id, node)
        })
        .collect();
    // Every eviction node still holds a victim: it did not fit without one.
    let mut nodes: Vec<String> = evictions
        .iter()
        .map(|e| e.view.node().name.clone())
        .collect();
    nodes.sort();
    let lost: Vec<&Evictable> = gone.iter().map(|id| &candidates[id]).collect();
    let cost = EvictionCost {
        max_victim_tier_value: lost.iter().map(|v| v.tier_value).max()?,
        conn: targets
            .iter()
            .map(|t| t.2)
            .max()
            .unwrap_or(Connectivity::BEST),
        n_victims: lost.len(),
        gpu_secs_lost: lost.iter().map(|v| v.gpu_secs_lost).sum(),
        sum_victim_tier_values: lost
            .iter()
            .fold(0i64, |sum, v| sum.saturating_add(v.tier_value)),
        latest_start: Reverse(lost.iter().map(|v| v.started).max()?),
        nodes: targets.iter().map(|t| t.0.node.clone()).collect(),
    };
    Some(Preemption {
        victims,
        nodes,
        worst_paths: targets.iter().map(|t| t.1).collect(),
        targets: targets.into_iter().map(|t| t.0).collect(),
        cost,
    })
}

/// The holds on `view` a preemptor of tier `value` may evict, by job.
fn candidates_on(value: i64, view: &NodeView<'_>) -> BTreeMap<JobId, Evictable> {
    view.holds()
        .iter()
        .filter(|h| h.claim == Claim::Running)
        .filter_map(|h| Some((h.job, h.evictable?)))
        .filter(|(_, e)| e.tier_value < value)
        .collect()
}

/// A cost no eviction on `view` can undercut, or `None` when evicting every candidate there
/// would still leave too few GPUs, CPUs or memory. Each field is at most the real cost's
/// (a victim set is never empty), so the bound compares no higher than the real cost.
///
/// Computed for every node at every preemption, hence in one sweep and without allocating.
fn lower_bound<'a>(
    value: i64,
    demand: &NodeDemand<'_>,
    view: &NodeView<'a>,
) -> Option<EvictionCost<&'a str>> {
    let mut freeable = view.free_gpus();
    let mut cpus = u64::from(view.free_cpus());
    let mut mem = view.free_mem_mib();
    let mut bound: Option<EvictionCost<&'a str>> = None;
    let mut negative_tiers = 0i64;
    for hold in view.holds().iter().filter(|h| h.claim == Claim::Running) {
        let Some(e) = hold.evictable.filter(|e| e.tier_value < value) else {
            continue;
        };
        freeable |= hold.gpus;
        cpus += u64::from(hold.cpus);
        mem = mem.saturating_add(hold.mem_mib);
        negative_tiers = negative_tiers.saturating_add(e.tier_value.min(0));
        let b = bound.get_or_insert(EvictionCost {
            max_victim_tier_value: e.tier_value,
            conn: Connectivity::BEST,
            n_victims: 1,
            gpu_secs_lost: e.gpu_secs_lost,
            sum_victim_tier_values: e.tier_value,
            latest_start: Reverse(e.started),
            nodes: view.node().name.as_str(),
        });
        b.max_victim_tier_value = b.max_victim_tier_value.min(e.tier_value);
        b.gpu_secs_lost = b.gpu_secs_lost.min(e.gpu_secs_lost);
        b.latest_start = b.latest_start.min(Reverse(e.started));
    }
    // A victim's GPU out of service is freed for nobody.
    freeable &= !view.out_of_service();
    if (freeable & demand.accepted_on(view.topology())).count_ones() < demand.gpus
        || cpus < u64::from(demand.cpus)
        || mem < demand.mem_mib
    {
        return None;
    }
    // With negative tier values, more victims can sum lower than the least one alone.
    bound.map(|b| EvictionCost {
        sum_victim_tier_values: b.max_victim_tier_value.min(negative_tiers),
        ..b
    })
}

/// The minimal victim set on one node and its cost, or `None` when evicting every candidate
/// there would still not make room.
fn victims_on_node<'v, 'a, 'd>(
    value: i64,
    demand: &NodeDemand<'d>,
    view: &'v NodeView<'a>,
) -> Option<NodeEviction<'v, 'a, 'd>> {
    let candidates = candidates_on(value, view);
    let everyone: BTreeSet<JobId> = candidates.keys().copied().collect();
    // Whatever is spared must leave the job as well connected as evicting everyone would.
    let best = fit_on_node(&view.without(&everyone), demand).ok()?;
    let demand = demand.within(best.conn.worst);
    let victims = minimal_victims(&candidates, &demand, view)?;
    let fit = fit_on_node(&view.without(&victims), &demand).ok()?;
    let lost: Vec<&Evictable> = victims.iter().map(|id| &candidates[id]).collect();
    let cost = EvictionCost {
        max_victim_tier_value: lost.iter().map(|v| v.tier_value).max()?,
        conn: fit.conn,
        n_victims: lost.len(),
        gpu_secs_lost: lost.iter().map(|v| v.gpu_secs_lost).sum(),
        sum_victim_tier_values: lost
            .iter()
            .fold(0i64, |sum, v| sum.saturating_add(v.tier_value)),
        latest_start: Reverse(lost.iter().map(|v| v.started).max()?),
        nodes: view.node().name.as_str(),
    };
    Some(NodeEviction {
        view,
        demand,
        victims,
        cost,
    })
}

/// Evict every candidate on `view`, then reprieve them greedily, most valuable first. Since
/// the fit is monotone in free resources, the result is minimal: when victim v was tried,
/// fewer jobs than now were spared, and even that was too little. `None` when even evicting
/// every candidate leaves no room (or no eviction is needed).
fn minimal_victims(
    candidates: &BTreeMap<JobId, Evictable>,
    demand: &NodeDemand<'_>,
    view: &NodeView<'_>,
) -> Option<BTreeSet<JobId>> {
    let mut order: Vec<(JobId, Evictable)> = candidates.iter().map(|(id, e)| (*id, *e)).collect();
    order.sort_by_key(|(id, e)| e.reprieve_key(*id));
    let mut evicted: BTreeSet<JobId> = order.iter().map(|(id, _)| *id).collect();
    fit_on_node(&view.without(&evicted), demand).ok()?;
    for (id, _) in &order {
        evicted.remove(id);
        if fit_on_node(&view.without(&evicted), demand).is_err() {
            evicted.insert(*id);
        }
    }
    (!evicted.is_empty()).then_some(evicted)
}

/// How long a job has run; a RUNNING job without a start time counts as just started.
fn ran_ms(job: &Job, now: Millis) -> Millis {
    job.start_time.map_or(0, |start| (now - start).max(0))
}

/// GPU-seconds of work a job would lose if evicted now: all of its GPUs (it is evicted as a
/// whole, on every node) times the seconds since the later of its (re)start and its last
/// checkpoint (the newest file its agents saw in its checkpoint directory; one from before a
/// requeue does not count).
pub(crate) fn gpu_secs_lost(job: &Job, now: Millis) -> i64 {
    let since = match (job.start_time, job.last_checkpoint) {
        (Some(start), Some(checkpoint)) => start.max(checkpoint),
        (start, checkpoint) => start.or(checkpoint).unwrap_or(now),
    };
    let n_gpus = job.gpus_held().count() as i64;
    n_gpus * ((now - since).max(0) / 1000)
}
