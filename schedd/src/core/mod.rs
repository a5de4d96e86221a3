//! The scheduling core: from a snapshot of jobs and nodes, decide what runs where and whom to
//! evict. The server builds a [`Snapshot`], calls [`schedule`] and applies the [`Plan`].
//!
//! # Layout
//! - `order`: the queue order of pending jobs (tier, then the account's fair-share factor,
//!   then submit time, then id) and [`FairShare`], the factors the caller hands in.
//! - `topo`: GPU topology inside a node (NVLink, PCIe) and `Topology::best_set`, the one place
//!   that picks which GPUs of a node a job gets; [`Topologies`], the callers' cache of them.
//! - `demand`: what a job asks of each node it runs on (`NodeDemand`).
//! - `node_view`: a node as a pass sees it (`NodeView`): its holds and the free room they leave.
//! - `fit`: whether a job fits on a node (`fit_on_node`, the one fit check), and why not.
//! - `placement`: node ranking and gang placement (`find_placement`).
//! - `satisfiable`: whether a job could ever run, and why not ([`check_satisfiable`]).
//! - `preempt`: the minimal victim set on a node, the cheapest nodes to evict on, and the
//!   victims of a job spanning nodes.
//! - `pass`: one pass over the queue, building the plan and keeping node views in step; what
//!   holds a job back before any fit (dependencies, `singleton`, an array's `%N`).
//! - `quota`: the tiers' GPU quotas per account and per user, what a job counts against them
//!   (an `--exclusive` job, every GPU of its nodes), and [`check_quota_reachable`].
//! - `backfill`: expected ends of running jobs, the earliest start of a waiting job
//!   (`earliest_start`), and the reservations that jobs ending in time may use meanwhile.
//! - `explain`: per-node reasons for `yctl show job`.
//!
//! **Invariants.** This module is pure: no async runtime, RPC, storage, randomness, no clock
//! (time comes in as `now`) and no I/O. It never iterates an unordered map into a decision:
//! the same snapshot, policy and `now` always give the same plan. It cannot fail; what a
//! pending job waits for goes into [`Plan::pending_reasons`].

use std::collections::BTreeMap;
use std::sync::Arc;

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState, Node, NodeAlloc, TierConfig};

mod backfill;
mod demand;
mod explain;
mod fit;
mod node_view;
mod order;
mod pass;
mod placement;
mod preempt;
mod quota;
mod reason;
mod satisfiable;
mod topo;

#[cfg(test)]
mod backfill_tests;
#[cfg(test)]
mod dependency_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod slurm_options_tests;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
#[cfg(test)]
mod tests;

pub use explain::explain;
pub use order::FairShare;
pub use quota::{check_quota_reachable, TierQuota};
#[cfg(test)]
pub(crate) use reason::every_reason_as_rendered;
pub use reason::PendingReason;
pub use satisfiable::{check_satisfiable, check_satisfiable_with};
pub use topo::Topologies;

/// Jobs by id, each behind an `Arc`: schedd's records and the scheduler's copy of them share
/// every job that did not change since the copy was last brought up to date, so that a
/// queue of 100,000 jobs is held once, not twice. A shared job is never changed in place: a
/// change makes the changer's own (`Arc::make_mut`), and the other keeps what it had.
pub type JobMap = BTreeMap<JobId, Arc<Job>>;

/// What the scheduler looks at: an immutable view of the store.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// All non-terminal jobs: PENDING, HELD, RUNNING and PREEMPTING.
    pub jobs: &'a JobMap,
    /// Every known node, schedulable or not.
    pub nodes: &'a BTreeMap<String, Node>,
    /// How the finished jobs that pending jobs' dependencies name have ended (jobs that are
    /// not finished are in `jobs`; one in neither is [`TargetState::Gone`]).
    pub ended: &'a BTreeMap<JobId, JobState>,
}

impl<'a> Snapshot<'a> {
    /// These jobs and nodes, with no finished dependency target known.
    pub fn new(jobs: &'a JobMap, nodes: &'a BTreeMap<String, Node>) -> Self {
        static NONE: BTreeMap<JobId, JobState> = BTreeMap::new();
        Snapshot {
            jobs,
            nodes,
            ended: &NONE,
        }
    }
}

/// The configuration the scheduler obeys.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// Tiers by name, with their quotas (`max_gpus_per_account`, `max_gpus_per_user`).
    pub tiers: &'a BTreeMap<String, TierConfig>,
    /// Fair-share factors by account: the order of jobs inside one tier.
    pub fair_share: &'a FairShare,
    /// Backfill with reservations (`scheduler.backfill`, `scheduler.backfill_reservations`).
    pub backfill: Backfill,
}

/// Backfill settings: reservations for each tier's first `reservations` waiting jobs (of a
/// tier that may not preempt), which jobs after them may not delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backfill {
    pub enabled: bool,
    pub reservations: u32,
}

impl Backfill {
    pub const OFF: Backfill = Backfill {
        enabled: false,
        reservations: 0,
    };

    /// As configured: `scheduler.backfill` and `scheduler.backfill_reservations`.
    pub fn configured(scheduler: &ysched_common::config::SchedulerConfig) -> Backfill {
        Backfill {
            enabled: scheduler.backfill,
            reservations: scheduler.backfill_reservations,
        }
    }
}

impl<'a> Policy<'a> {
    /// These tiers and no fair share: inside a tier, first come, first served.
    pub fn new(tiers: &'a BTreeMap<String, TierConfig>) -> Self {
        Policy {
            tiers,
            fair_share: FairShare::none(),
            backfill: Backfill::OFF,
        }
    }
}

/// The outcome of one pass. A value: the server applies it (and may re-check it against a
/// newer state).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Jobs to start, in decision order (queue order).
    pub placements: Vec<Placement>,
    /// Jobs to stop for a preemptor, grouped by preemptor in queue order, victims by id.
    pub evictions: Vec<Eviction>,
    /// Why each PENDING job that is not placed by this plan still waits; from
    /// [`schedule_with_queue`] (schedd's passes) only the reasons that differ from the jobs'
    /// own.
    pub pending_reasons: BTreeMap<JobId, PendingReason>,
    /// The PENDING jobs whose dependency can never be met (`DependencyNeverSatisfied`), in
    /// queue order, whether or not that reason is new: `kill_invalid_depend` cancels them.
    pub never_satisfied: Vec<JobId>,
    /// When and where PENDING jobs are expected to start, where the pass could tell (the
    /// reserved jobs of backfill, at least).
    pub expected_starts: BTreeMap<JobId, ExpectedStart>,
}

/// A pending job's expected start: the earliest time its resources free up, given the time
/// limits of the jobs holding them and the reservations of the jobs before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedStart {
    pub at: Millis,
    /// The nodes it would get, by name.
    pub nodes: Vec<String>,
}

/// Start `job` with this allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub job: JobId,
    /// One entry per node used.
    pub alloc: Vec<NodeAlloc>,
}

/// Stop `victim` so that `preemptor` can run on `node` (for a victim spanning nodes: the first of
/// the preemptor's nodes it holds room on; it is stopped whole). The victim keeps its resources
/// until its agent reports the process gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub victim: JobId,
    pub preemptor: JobId,
    pub node: String,
    /// Seconds between SIGTERM and SIGKILL: the victim's own grace.
    pub grace_secs: u32,
}

/// Decides placements and evictions for the pending jobs, in queue order.
///
/// Each job that fits somewhere is placed (best-connected GPUs, then best fit); a job of a tier
/// that may preempt and fits nowhere plans the cheapest minimal eviction (on as many nodes as it
/// spans) and reserves what is free of its targets; a job that would take its account (user)
/// over its tier's `max_gpus_per_account` (`max_gpus_per_user`) waits with `AccountLimit`
/// (`UserLimit`) without holding up the jobs after it, as does a job whose dependency is not
/// met (`Dependency`, `DependencyNeverSatisfied`) and an array task over its array's `%N`
/// (`JobArrayTaskLimit`); with backfill, the first waiting jobs of each tier that may not
/// preempt get a reservation at their earliest start, which only jobs ending by then may use;
/// every other pending job gets a reason. Deterministic and infallible.
pub fn schedule(snap: &Snapshot<'_>, policy: &Policy<'_>, now: Millis) -> Plan {
    schedule_with(snap, policy, now, &mut Topologies::default())
}

/// [`schedule`] with node topologies kept by the caller between passes: the same plan, but a
/// pass no longer reads every node's GPU lists, which is most of a small pass's cost on a
/// large cluster.
pub fn schedule_with(
    snap: &Snapshot<'_>,
    policy: &Policy<'_>,
    now: Millis,
    topologies: &mut Topologies,
) -> Plan {
    let mut pass = pass::Pass::new(snap, policy, now, topologies);
    for (_, job) in order::pending_keyed(snap.jobs, policy.fair_share) {
        pass.step(job);
    }
    pass.into_plan()
}

/// [`schedule_with`] as schedd runs it: the plan keeps only the pending reasons that differ
/// from the jobs' own (`Job::reason`: most jobs of a queue that waits wait for the reason they
/// waited for before, and the applier needs only the others), and the queue the pass walked
/// comes with it: every PENDING job in queue order, with the tier value it is queued at (for
/// `yq`'s place in the queue). Otherwise the same plan.
pub fn schedule_with_queue(
    snap: &Snapshot<'_>,
    policy: &Policy<'_>,
    now: Millis,
    topologies: &mut Topologies,
) -> (Plan, Vec<(JobId, i64)>) {
    let keyed = order::pending_keyed(snap.jobs, policy.fair_share);
    let mut pass = pass::Pass::new(snap, policy, now, topologies).only_changed_reasons();
    for (_, job) in &keyed {
        pass.step(job);
    }
    let queue = keyed.iter().map(|(key, _)| key.job_and_tier()).collect();
    (pass.into_plan(), queue)
}

/// [`schedule_with_queue`]'s plan alone: only the reasons that changed.
pub fn schedule_changes(
    snap: &Snapshot<'_>,
    policy: &Policy<'_>,
    now: Millis,
    topologies: &mut Topologies,
) -> Plan {
    schedule_with_queue(snap, policy, now, topologies).0
}

/// The PENDING jobs in the order a pass walks them (tier, fair-share factor, submit time, id),
/// without deciding anything: for benchmarks and tools.
pub fn queue_order(jobs: &JobMap, fair_share: &FairShare) -> Vec<JobId> {
    order::pending_keyed(jobs, fair_share)
        .iter()
        .map(|(key, _)| key.job_and_tier().0)
        .collect()
}
