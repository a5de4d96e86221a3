//! Backfill with reservations: when a job at the head of the queue can expect to start and
//! where, so that jobs after it may use that room only if they are gone by then.
//!
//! **Expected ends.** A job holding resources gives them back at the end of its time limit
//! (start plus limit), or once a stop request's grace has run out, whichever comes first; a
//! job already past its limit ends `now`; a job without a limit and without a stop never ends
//! as far as backfill can tell. A job placed by this pass ends `now` plus its limit. What is
//! promised for good (a preemptor's targets, an earlier reservation's allocation) never frees
//! up: later reservations never overlap earlier ones.
//!
//! **The earliest start** ([`earliest_start`]): the node views of the pass at the job's turn,
//! with each promise held whole, release their holds in the order of their expected ends; after
//! each point in time the normal placement (`find_placement`, with its topology rules) is asked
//! again. The first time it finds room is the expected start, and the allocation there is the
//! reservation. Room only grows along that timeline, so a node that fits keeps fitting: the
//! walk counts the nodes that fit (per GPU model, for a gang) as releases come, one fit check
//! per changed node, and asks placement only once enough do, which is exactly when it
//! succeeds.
//!
//! **What a reservation binds** (see `node_view::NodeView::free_for`): the pass keeps the part
//! of the reserved allocation that is free now as a [`Claim::Backfill`] hold. A job that ends
//! by the reservation's start may use it (it is gone in time); no other job may. The part that
//! running jobs hold now is theirs until they end, which is by the start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobSpec, NodeAlloc};

use super::demand::{n_nodes, NodeDemand};
use super::fit::fit_on_node;
use super::node_view::{Claim, NodeView, Views};
use super::placement::{find_placement, gang_models};
use super::JobMap;

/// A waiting job's reserved start: at `at`, with this allocation (one entry per node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) at: Millis,
    pub(crate) allocs: Vec<NodeAlloc>,
}

/// When `job`, which holds resources, is expected to give them back (see the module doc);
/// `None`: not foreseeable.
pub(crate) fn expected_end(job: &Job, now: Millis) -> Option<Millis> {
    let limit_end = job.spec.time_limit_secs.map(|secs| {
        job.start_time
            .unwrap_or(now)
            .saturating_add(secs_to_ms(secs))
    });
    let stop_end = job
        .stop
        .as_ref()
        .map(|stop| stop.at.saturating_add(i64::from(stop.grace_secs) * 1000));
    let end = match (limit_end, stop_end) {
        (Some(limit), Some(stop)) => Some(limit.min(stop)),
        (limit, stop) => limit.or(stop),
    };
    end.map(|end| end.max(now))
}

/// When a job of this spec would end if it started `now`: `now` plus its time limit.
pub(crate) fn end_if_started(spec: &JobSpec, now: Millis) -> Option<Millis> {
    spec.time_limit_secs
        .map(|secs| now.saturating_add(secs_to_ms(secs)))
}

fn secs_to_ms(secs: u64) -> Millis {
    i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000)
}

/// The earliest time `spec` could start on these views, and where, or `None` when it never
/// could (what it needs is held by jobs without a time limit, or promised).
///
/// `views` are the pass's views at the job's turn; `promised` the allocations promised for good
/// (preemptors' targets, earlier reservations), each held whole from now on; `jobs` tells the
/// holds' expected ends.
pub(crate) fn earliest_start(
    views: &Views<'_>,
    promised: &[(JobId, NodeAlloc)],
    jobs: &JobMap,
    spec: &JobSpec,
    now: Millis,
) -> Option<Reservation> {
    let mut promised_on: BTreeMap<&str, Vec<(JobId, &NodeAlloc)>> = BTreeMap::new();
    for (job, alloc) in promised {
        promised_on
            .entry(alloc.node.as_str())
            .or_default()
            .push((*job, alloc));
    }
    // The views as they will be: each hold with its expected end, promises held whole.
    let mut future: Views<'_> = BTreeMap::new();
    let mut releases: Vec<(Millis, &str, JobId)> = Vec::new();
    for (name, view) in views {
        let mut fresh = NodeView::new(view.node(), Arc::clone(view.topology()));
        for hold in view.holds() {
            let end = match hold.claim {
                Claim::Running => jobs.get(&hold.job).and_then(|j| expected_end(j, now)),
                Claim::Placed => jobs
                    .get(&hold.job)
                    .and_then(|j| end_if_started(&j.spec, now)),
                // Only the part free at the time: held whole below instead.
                Claim::Reserved | Claim::Backfill(_) => continue,
            };
            fresh.add_hold(*hold);
            if let Some(end) = end {
                releases.push((end, name, hold.job));
            }
        }
        for (job, alloc) in promised_on.get(name).into_iter().flatten() {
            let whole = jobs.get(job).is_some_and(|j| j.spec.exclusive);
            fresh.add_alloc(*job, Claim::Reserved, alloc, None, whole);
        }
        future.insert(name, fresh);
    }
    // By time, then node and job: the same order every time.
    releases.sort_unstable();

    // Placement succeeds once enough nodes fit: for a job on one node (or without GPUs), the
    // demand itself; for a GPU gang, the demand pinned to one GPU model, on as many nodes as
    // it spans, for some model. Room only grows along the timeline, so a node that fits keeps
    // fitting: count them as they come, and ask placement (with its ranking) only once some
    // count is reached.
    let n = n_nodes(spec) as usize;
    let demand = NodeDemand::of(spec);
    let units: Vec<NodeDemand<'_>> = if n == 1 || demand.gpus == 0 {
        vec![demand]
    } else {
        let models = gang_models(&future, &demand);
        models.into_iter().map(|m| demand.pinned_to(m)).collect()
    };
    let mut fits = FitCount {
        counts: vec![0; units.len()],
        units,
        counted: BTreeSet::new(),
        wanted: n,
    };
    let mut reached = false;
    for (name, view) in &future {
        reached |= fits.add(name, view);
    }
    // Not expected (the job failed on the views at its turn, which hold no more than these),
    // but then it could start now.
    if reached {
        let allocs = find_placement(&future, spec);
        debug_assert!(allocs.is_some(), "enough nodes fit, yet no placement");
        if let Some(allocs) = allocs {
            return Some(Reservation { at: now, allocs });
        }
    }
    let mut i = 0;
    while i < releases.len() {
        let at = releases[i].0;
        let mut reached = false;
        while i < releases.len() && releases[i].0 == at {
            let node = releases[i].1;
            let mut gone = BTreeSet::new();
            while i < releases.len() && releases[i].0 == at && releases[i].1 == node {
                gone.insert(releases[i].2);
                i += 1;
            }
            if let Some(view) = future.get_mut(node) {
                *view = view.without(&gone);
                reached |= fits.add(node, view);
            }
        }
        if reached {
            let allocs = find_placement(&future, spec);
            debug_assert!(allocs.is_some(), "enough nodes fit, yet no placement");
            if let Some(allocs) = allocs {
                return Some(Reservation { at, allocs });
            }
        }
    }
    None
}

/// How many nodes fit each unit of a demand (the demand, or the demand pinned to one GPU model
/// for a gang), counting each node once per unit: they keep fitting as room grows.
struct FitCount<'n, 'd> {
    units: Vec<NodeDemand<'d>>,
    counts: Vec<usize>,
    counted: BTreeSet<(&'n str, usize)>,
    /// Nodes the job spans.
    wanted: usize,
}

impl<'n> FitCount<'n, '_> {
    /// Counts `view` (node `name`) where it fits now; whether a unit that gained a node has
    /// enough of them (placement then succeeds).
    fn add(&mut self, name: &'n str, view: &NodeView<'_>) -> bool {
        let mut reached = false;
        for (i, unit) in self.units.iter().enumerate() {
            if !self.counted.contains(&(name, i)) && fit_on_node(view, unit).is_ok() {
                self.counted.insert((name, i));
                self.counts[i] += 1;
                reached |= self.counts[i] >= self.wanted;
            }
        }
        reached
    }
}
