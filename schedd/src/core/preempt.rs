//! Preemption: for a pending job that fits nowhere, the smallest set of lower-tier jobs to evict
//! on one node, and the node where that costs least.
//!
//! Per node (after Kubernetes' `SelectVictimsOnNode`): take every eligible victim off a copy of
//! the node and ask the same [`fit_on_node`] as placement. If the job fits, reprieve the victims
//! one at a time, most valuable first, keeping each reprieve that still lets the job fit. Then
//! compare the nodes by [`EvictionCost`].

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState, NodeAlloc, TierConfig};

use super::fit::{fit_on_node, Claim, NodeDemand, NodeView};

/// Evictions chosen for one preemptor on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preemption {
    pub(crate) node: String,
    /// By id.
    pub(crate) victims: Vec<JobId>,
    /// Where the preemptor would run once the victims are gone.
    pub(crate) target: NodeAlloc,
    pub(crate) cost: EvictionCost,
}

/// What evicting a victim set on a node costs. Compared field by field, in declaration order;
/// the lowest cost wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct EvictionCost {
    /// The most valuable victim's tier value: never disturb a higher tier where lower ones
    /// would do.
    pub(crate) max_victim_tier_value: i64,
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
    /// The node's name, so that ties always resolve the same way.
    pub(crate) node: String,
}

/// The cheapest node on which evicting lower-tier jobs would let `preemptor` fit, or `None`.
///
/// `demand` is the preemptor's single-node demand. Jobs in `claimed` are already victims of a
/// higher preemptor in this pass; their resources are spoken for, so they are no candidates.
pub(crate) fn plan_preemption(
    preemptor: &Job,
    demand: &NodeDemand<'_>,
    views: &BTreeMap<String, NodeView<'_>>,
    jobs: &BTreeMap<JobId, Job>,
    tiers: &BTreeMap<String, TierConfig>,
    now: Millis,
    claimed: &BTreeSet<JobId>,
) -> Option<Preemption> {
    views
        .values()
        .filter_map(|view| victims_on_node(preemptor, demand, view, jobs, tiers, now, claimed))
        .min_by(|a, b| a.cost.cmp(&b.cost))
}

/// The minimal victim set on one node, or `None` when evicting every eligible job there would
/// still not make room (or nothing needs evicting).
pub(crate) fn victims_on_node(
    preemptor: &Job,
    demand: &NodeDemand<'_>,
    view: &NodeView<'_>,
    jobs: &BTreeMap<JobId, Job>,
    tiers: &BTreeMap<String, TierConfig>,
    now: Millis,
    claimed: &BTreeSet<JobId>,
) -> Option<Preemption> {
    match fit_on_node(view, demand) {
        // Fits already: nothing to evict.
        Ok(_) => return None,
        // Wrong GPU model, missing feature, too small: no eviction changes that.
        Err(misfit) if !misfit.is_transient() => return None,
        Err(_) => {}
    }
    let mut candidates: Vec<&Job> = view
        .holds()
        .iter()
        .filter(|h| h.claim == Claim::Running && !claimed.contains(&h.job))
        .filter_map(|h| jobs.get(&h.job))
        .filter(|victim| is_eligible_victim(victim, preemptor, tiers, now))
        .collect();
    // Most valuable first: the order in which they are offered a reprieve. The id makes the
    // order total (and drops a job listed twice).
    candidates.sort_by_key(|v| {
        (
            Reverse(v.tier_value),
            Reverse(gpu_secs_lost(v, now)),
            v.start_time.unwrap_or(now),
            v.id,
        )
    });
    candidates.dedup_by_key(|v| v.id);

    let mut evicted: BTreeSet<JobId> = candidates.iter().map(|v| v.id).collect();
    let mut target = fit_on_node(&view.without(&evicted), demand).ok()?;
    // Reprieve greedily. Since the fit is monotone in free resources, the result is minimal:
    // when victim v was tried, fewer jobs than now were spared, and even that was too little.
    for victim in &candidates {
        evicted.remove(&victim.id);
        match fit_on_node(&view.without(&evicted), demand) {
            Ok(fit) => target = fit,
            Err(_) => {
                evicted.insert(victim.id);
            }
        }
    }

    let victims: Vec<&Job> = candidates
        .into_iter()
        .filter(|v| evicted.contains(&v.id))
        .collect();
    let cost = EvictionCost {
        max_victim_tier_value: victims.iter().map(|v| v.tier_value).max()?,
        n_victims: victims.len(),
        gpu_secs_lost: victims.iter().map(|v| gpu_secs_lost(v, now)).sum(),
        sum_victim_tier_values: victims
            .iter()
            .fold(0i64, |sum, v| sum.saturating_add(v.tier_value)),
        latest_start: Reverse(
            victims
                .iter()
                .map(|v| v.start_time.unwrap_or(now))
                .max()
                .unwrap_or(now),
        ),
        node: view.node().name.clone(),
    };
    Some(Preemption {
        node: view.node().name.clone(),
        victims: evicted.into_iter().collect(),
        target,
        cost,
    })
}

/// Whether `preemptor` may evict `victim`: the victim is RUNNING (not already stopping), its
/// tier is known and preemptible, strictly lower in value, and it has run its tier's
/// `min_runtime`. A job whose tier is no longer configured is never evicted: what cannot be
/// classified is protected.
pub(crate) fn is_eligible_victim(
    victim: &Job,
    preemptor: &Job,
    tiers: &BTreeMap<String, TierConfig>,
    now: Millis,
) -> bool {
    let Some(tier) = tiers.get(&victim.spec.tier) else {
        return false;
    };
    let min_runtime_ms = i64::try_from(tier.min_runtime)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    victim.state == JobState::Running
        && tier.preemptible
        && victim.tier_value < preemptor.tier_value
        && ran_ms(victim, now) >= min_runtime_ms
}

/// How long a job has run; a RUNNING job without a start time counts as just started.
fn ran_ms(job: &Job, now: Millis) -> Millis {
    job.start_time.map_or(0, |start| (now - start).max(0))
}

/// GPU-seconds of work a job would lose if evicted now: all of its GPUs (it is evicted as a
/// whole, on every node) times the seconds since its last checkpoint or start.
pub(crate) fn gpu_secs_lost(job: &Job, now: Millis) -> i64 {
    let since = match (job.start_time, job.last_checkpoint) {
        (Some(start), Some(checkpoint)) => start.max(checkpoint),
        (start, checkpoint) => start.or(checkpoint).unwrap_or(now),
    };
    let n_gpus = job.gpus_held().count() as i64;
    n_gpus * ((now - since).max(0) / 1000)
}
