//! One scheduling pass: walk the queue once, deciding for each pending job in turn, and keep
//! the working view of every node in step with the decisions so far.
//!
//! **Monotone within a pass.** Node views only ever lose room during a pass (placements and
//! reservations are added, nothing is released), and the set of evictable jobs only shrinks
//! (victims of one preemptor are protected from the next). Since the fit is monotone in free
//! room, a job shape that found no room, or no eviction at some tier, finds none later in the
//! same pass either. The pass remembers those answers per [`Shape`], which is what lets it walk
//! a queue of a hundred thousand jobs: once the cluster is full, most jobs cost a lookup.
//!
//! **Backfill keeps it monotone.** With backfill, a job that would end by `E` (now plus its time
//! limit) may also use the room kept for every reservation starting at or after `E` (see
//! [`super::backfill`]). For a fixed `E` that room still only shrinks: every hold added later
//! takes room, except a reservation `E` may cross, which that job ignores. So "no room" is
//! remembered per shape together with the set of reservations the failing job could cross,
//! as the earliest end it covers ([`ShapeMemo::no_room_from`]): a later job of that shape that
//! ends no earlier than the latest reservation start before the failed job's end crosses
//! none of the reservations of that time that the failed job could not, and reservations
//! made since only take room from it (or are crossed, and change nothing). Reservations sorted
//! by start make "which ones a job may cross" a prefix, which is why one bound per shape says
//! it all. Without a limit (or without backfill) a job crosses nothing: the memo is the plain
//! "no room" of before.
//!
//! **Held back before any fit.** A job whose dependency is not met (`Dependency`,
//! `DependencyNeverSatisfied`), a `singleton` while a job of its name and user holds resources
//! or was placed earlier in the pass (`Dependency`), and an array task whose array has `%N`
//! tasks running or placed (`JobArrayTaskLimit`) are not considered for placement or
//! preemption, and hold up no job after them. A dependency is evaluated once per pass per
//! spec: every task of an array shares one, and may name every task of another array.
//!
//! **Quotas.** A tier's `max_gpus_per_account` and `max_gpus_per_user` count the GPUs held by
//! the account's (user's) running and stopping jobs of that tier, plus those of its jobs placed
//! or preempting earlier in the pass, each as [`super::quota`] counts them: an `--exclusive`
//! job, every GPU of its nodes. A job that would go over waits (`AccountLimit`, `UserLimit`),
//! preempts nobody, and holds up no job after it. An exclusive job under a quota is placed on
//! nodes within what it may still hold when some fit; when only larger ones do, it waits for
//! its quota.
//!
//! **Reservations.** With backfill on, each tier's first `reservations` jobs that wait for room
//! (`Resources`, `Priority`) in a tier that may not preempt (one that may preempt gets in by
//! eviction) get their earliest start computed ([`super::backfill::earliest_start`]); when
//! there is one, its allocation is reserved from then on and the start goes into
//! [`super::Plan::expected_starts`]. A job whose start cannot be foreseen (what it needs is
//! held by jobs without a limit) still counts among those first jobs: a pass computes at most
//! `reservations` starts per tier, each a walk over the releases to come, whatever the queue.

use std::collections::{BTreeMap, BTreeSet};

use ysched_common::dependency::DepStatus;
use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState, NodeAlloc, StopReason, StopRequest, TierConfig};

use super::backfill::{earliest_start, end_if_started, Reservation};
use super::demand::{n_nodes, required_path};
use super::node_view::{Claim, Views};
use super::placement::{find_placement, find_placement_ending, find_placement_whole_at_most};
use super::preempt::{evictable, plan_preemption, Preemption};
use super::quota::{gpus_charged, Quotas};
use super::satisfiable::{capacity_views, satisfiable_on};
use super::topo::{Path, Topologies};
use super::{JobMap, PendingReason, Plan, Policy, Snapshot};

mod held_back;
mod record;

use held_back::limited_array;
pub(crate) use held_back::{begin_ms, HeldBack};

/// What the pass decided for one pending job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Placed(Vec<NodeAlloc>),
    /// Evict these victims; the free part of the targets is reserved for the job.
    Preempting(Preemption),
    /// Evictions for this job are already in flight; its reservation on `targets` is renewed.
    AwaitingEviction {
        /// The in-flight victims on the target nodes, by id.
        victims: Vec<JobId>,
        /// Target nodes holding one of them, by name.
        nodes: Vec<String>,
        targets: Vec<NodeAlloc>,
    },
    /// `Resources` or `Priority`.
    Waiting(PendingReason),
    /// Waiting (`Resources` or `Priority`), with backfill's reservation: the job is expected
    /// to start then and there, and later jobs may use that room only if they end by then.
    Reserved(PendingReason, Reservation),
    /// `Dependency` or `DependencyNeverSatisfied`: its dependency is not met, or it is a
    /// `singleton` and a job of its name and user runs. Not considered for room, and later
    /// jobs are not held up by it.
    Dependency(PendingReason),
    /// `AccountLimit` or `UserLimit` (over a tier quota), or `JobArrayTaskLimit` (its array's
    /// `%N` tasks run): later jobs are not held up by it.
    OverLimit(PendingReason),
    /// `ReqNodeNotAvail`: a node of its `--nodelist` cannot take jobs (drained, down, not
    /// connected). It waits for that node, not for room: later jobs are not held up by it.
    NodesUnavailable,
    Unsatisfiable(String),
}

/// Everything about a job that placement and preemption look at, except its tier: jobs of one
/// shape fit (or not) in the same places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Shape<'a> {
    gpus: u32,
    nodes: u32,
    cpus: u32,
    mem_mib: u64,
    gpu_types: &'a [String],
    constraints: &'a [String],
    nodelist: &'a [String],
    exclude: &'a [String],
    exclusive: bool,
    worst_path: Path,
}

impl<'a> Shape<'a> {
    fn of(job: &'a Job) -> Self {
        let spec = &job.spec;
        Shape {
            gpus: spec.gpus,
            nodes: spec.nodes.max(1),
            cpus: spec.cpus.max(1),
            mem_mib: spec.mem_mib,
            gpu_types: &spec.gpu_types,
            constraints: &spec.constraints,
            nodelist: &spec.nodelist,
            exclude: &spec.exclude,
            exclusive: spec.exclusive,
            worst_path: required_path(spec),
        }
    }
}

/// What the pass learnt about one [`Shape`].
#[derive(Debug, Clone)]
struct ShapeMemo {
    /// The submit-time check against empty nodes: fixed for the whole pass.
    satisfiable: Result<(), String>,
    /// Placement failed for a job that, with backfill, could cross the reservations starting
    /// at or after its end: it fails for the rest of the pass for every job of the shape that
    /// ends at or after this time, or never (see the module doc). `Millis::MIN` without
    /// reservations to cross: it fails for every job of the shape.
    no_room_from: Option<Millis>,
    /// Preemption failed for a preemptor of this tier value: it fails for the rest of the
    /// pass for this value and every lower one (they may evict fewer jobs).
    no_eviction_at: Option<i64>,
}

pub(crate) struct Pass<'a> {
    jobs: &'a JobMap,
    tiers: &'a BTreeMap<String, TierConfig>,
    /// Every schedulable node, with the running jobs' holds and this pass's decisions so far.
    views: Views<'a>,
    /// Every node as if empty, for the satisfiability check (built once per pass, not per job).
    capacity: Views<'a>,
    /// Evictions already requested and not finished: preemptor → its PREEMPTING victims.
    in_flight: BTreeMap<JobId, Vec<&'a Job>>,
    /// See the module doc. Off only in tests that check it changes nothing.
    memoize: bool,
    /// The plan keeps only the reasons that differ from the jobs' own (see
    /// [`Pass::only_changed_reasons`]).
    only_changed_reasons: bool,
    shapes: BTreeMap<Shape<'a>, ShapeMemo>,
    /// An earlier job in the queue is waiting: a later one that does not fit waits for
    /// `Priority`, not `Resources`.
    someone_waiting: bool,
    quotas: Quotas<'a>,
    now: Millis,
    /// How finished dependency targets ended.
    ended: &'a BTreeMap<JobId, JobState>,
    /// Each dependency's status, by the address of the spec holding it: all tasks of an array
    /// share one spec, so it is evaluated once per pass, not once per task.
    dependencies: BTreeMap<usize, DepStatus>,
    /// (user, job name) of the jobs holding resources or placed, preempting or awaiting an
    /// eviction in this pass; built at the first `singleton` met (most passes meet none).
    singletons: Option<BTreeSet<(&'a str, &'a str)>>,
    /// The jobs this pass placed or let preempt, while `singletons` is not built yet.
    claimed: Vec<&'a Job>,
    /// Tasks holding resources (or placed or preempting in this pass), per array with a `%N`
    /// limit.
    array_tasks: BTreeMap<JobId, u32>,
    backfill: BackfillState<'a>,
    plan: Plan,
}

/// Backfill's part of the pass.
#[derive(Debug, Default)]
struct BackfillState<'a> {
    enabled: bool,
    /// Reservations per tier.
    per_tier: u32,
    /// Jobs whose earliest start the pass computed, per tier name.
    tried: BTreeMap<&'a str, u32>,
    /// The starts of the reservations made so far, sorted.
    starts: Vec<Millis>,
    /// Allocations promised for good: preemptors' targets and reservations, by job.
    promised: Vec<(JobId, NodeAlloc)>,
    /// The reservations made, in queue order.
    reservations: Vec<(JobId, Reservation)>,
}

impl BackfillState<'_> {
    /// The earliest end from which jobs of a shape are known to fail, given that one ending
    /// at `end` failed: one after the latest reservation start before `end`, since jobs ending
    /// after it cross no reservation `end` could not. `Millis::MIN` when none starts before.
    fn no_room_from(&self, end: Millis) -> Millis {
        let before = self.starts.partition_point(|start| *start < end);
        match before {
            0 => Millis::MIN,
            n => self.starts[n - 1].saturating_add(1),
        }
    }
}

impl<'a> Pass<'a> {
    pub(crate) fn new(
        snap: &Snapshot<'a>,
        policy: &Policy<'a>,
        now: Millis,
        topologies: &mut Topologies,
    ) -> Self {
        let capacity = capacity_views(snap.nodes, topologies);
        // What may take jobs now: GPUs out of service are not (the capacity counts them).
        let mut views: Views<'a> = capacity
            .iter()
            .filter(|(_, view)| view.node().is_schedulable())
            .map(|(name, view)| (*name, view.in_service()))
            .collect();
        let mut in_flight: BTreeMap<JobId, Vec<&Job>> = BTreeMap::new();
        let mut quotas = Quotas::new(policy.tiers);
        let mut array_tasks: BTreeMap<JobId, u32> = BTreeMap::new();
        // The allocation is the one truth of who holds a GPU: held until the agent reports the
        // process gone, whatever the job's stop request says.
        let mut allocs = Vec::new();
        for job in snap.jobs.values() {
            if !job.state.holds_resources() {
                continue;
            }
            let evictable = evictable(job, policy.tiers, now);
            if quotas.any() {
                let held = gpus_charged(&job.spec, &job.alloc, |node| node_gpus(&capacity, node));
                quotas.charge(job, policy.tiers, held);
            }
            if let Some(array) = limited_array(job) {
                *array_tasks.entry(array).or_default() += 1;
            }
            allocs.extend(job.alloc.iter().map(|alloc| {
                let node = NameKey::of(&alloc.node);
                (node, job.id, alloc, evictable, job.spec.exclusive)
            }));
            if let (
                JobState::Preempting,
                Some(StopRequest {
                    reason: StopReason::Preempt { by },
                    ..
                }),
            ) = (job.state, job.stop.as_deref())
            {
                in_flight.entry(*by).or_default().push(job);
            }
        }
        // Hand each node its holds in one merge over both lists in name order, rather than
        // looking every allocation's node up by name: with a thousand nodes and thousands of
        // running jobs, those string comparisons would cost more than a one-job pass decides.
        allocs.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let mut allocs = allocs.into_iter().peekable();
        for (name, view) in &mut views {
            let name = NameKey::of(name);
            // Allocations on nodes that are unknown or unschedulable are passed over.
            while allocs.next_if(|a| a.0 < name).is_some() {}
            while let Some((_, job, alloc, evictable, whole)) = allocs.next_if(|a| a.0 == name) {
                view.add_alloc(job, Claim::Running, alloc, evictable, whole);
            }
        }
        Pass {
            jobs: snap.jobs,
            tiers: policy.tiers,
            views,
            capacity,
            in_flight,
            memoize: true,
            only_changed_reasons: false,
            shapes: BTreeMap::new(),
            someone_waiting: false,
            quotas,
            now,
            ended: snap.ended,
            dependencies: BTreeMap::new(),
            singletons: None,
            claimed: Vec::new(),
            array_tasks,
            backfill: BackfillState {
                enabled: policy.backfill.enabled,
                per_tier: policy.backfill.reservations,
                ..BackfillState::default()
            },
            plan: Plan::default(),
        }
    }

    /// The same pass, deciding every job from scratch (see the module doc).
    #[cfg(test)]
    pub(crate) fn without_memo(mut self) -> Self {
        self.memoize = false;
        self
    }

    /// The plan keeps a pending job's reason only where it differs from the reason the job
    /// holds (`Job::reason`): most jobs of a queue that waits wait for the reason they waited
    /// for before, and a pass over a long queue then builds no map of them all (nor does the
    /// applier compare them). The jobs whose dependency can never be met are listed apart
    /// ([`Plan::never_satisfied`]), changed or not.
    pub(crate) fn only_changed_reasons(mut self) -> Self {
        self.only_changed_reasons = true;
        self
    }

    /// The schedulable nodes as the next job will see them.
    pub(crate) fn views(&self) -> &Views<'a> {
        &self.views
    }

    /// How many dependencies the pass evaluated: one per spec, however many jobs share it.
    #[cfg(test)]
    pub(crate) fn dependencies_evaluated(&self) -> usize {
        self.dependencies.len()
    }

    /// The reservations made so far, in queue order.
    #[cfg(test)]
    pub(crate) fn reservations(&self) -> &[(JobId, Reservation)] {
        &self.backfill.reservations
    }

    /// When `job` would end if it started now, where backfill lets it use room reserved from
    /// then on; `None`: it may use no reserved room.
    pub(crate) fn ends_by(&self, job: &Job) -> Option<Millis> {
        if self.backfill.enabled {
            end_if_started(&job.spec, self.now)
        } else {
            None
        }
    }

    /// Decides for the next pending job in queue order, records the decision in the plan and
    /// applies it to the node views.
    pub(crate) fn step(&mut self, job: &'a Job) -> Decision {
        let decision = self.decide(job);
        self.record(job, &decision);
        decision
    }

    pub(crate) fn into_plan(self) -> Plan {
        self.plan
    }

    fn decide(&mut self, job: &'a Job) -> Decision {
        if let Some(held) = self.held_back(job) {
            return match held {
                HeldBack::ArrayLimit => Decision::OverLimit(held.reason()),
                // Not waiting for room: like a dependency, it holds up nobody.
                _ => Decision::Dependency(held.reason()),
            };
        }
        let shape = Shape::of(job);
        if !self.memoize || !self.shapes.contains_key(&shape) {
            let memo = ShapeMemo {
                satisfiable: satisfiable_on(&self.capacity, &job.spec),
                no_room_from: None,
                no_eviction_at: None,
            };
            self.shapes.insert(shape, memo);
        }
        let memo = &self.shapes[&shape];
        if let Err(why) = &memo.satisfiable {
            return Decision::Unsatisfiable(why.clone());
        }
        // What it asked for, at least, is what it would hold.
        if let Some(limit) = self.quotas.exceeded(job, self.tiers, job.spec.gpus) {
            return Decision::OverLimit(limit);
        }
        // It runs on every listed node or not at one: one that takes no jobs (drained, down,
        // not connected) keeps it waiting, whatever is free elsewhere (Slurm's word).
        let listed = &job.spec.nodelist;
        if listed.iter().any(|n| !self.views.contains_key(n.as_str())) {
            return Decision::NodesUnavailable;
        }
        let ends_by = self.ends_by(job);
        // Never ending crosses no reservation: it is the latest end of all.
        let end = ends_by.unwrap_or(Millis::MAX);
        if memo.no_room_from.is_none_or(|from| end < from) {
            if let Some(decision) = self.place(job, ends_by) {
                return decision;
            }
            let from = self.backfill.no_room_from(end);
            self.remember(shape, |memo| {
                memo.no_room_from = Some(memo.no_room_from.map_or(from, |f| f.min(from)));
            });
        }
        // Evicting for this shape failed earlier in the pass at this tier value or above.
        let known_to_fail = self.shapes[&shape]
            .no_eviction_at
            .is_some_and(|failed| job.tier_value <= failed);
        if let Some(victims) = self.in_flight.get(&job.id) {
            // Never a second eviction while the first is still in flight (Kubernetes'
            // `PodEligibleToPreemptOthers`). Once its victims have exited the job is placed
            // normally, ahead of lower jobs by queue order.
            if let Some(decision) = self.await_eviction(job, victims) {
                return decision;
            }
        } else if self.may_preempt(job) && !known_to_fail {
            if let Some(preemption) = plan_preemption(job, &self.views) {
                if let Some(limit) = self.over_quota(job, &preemption.targets) {
                    return Decision::OverLimit(limit);
                }
                return Decision::Preempting(preemption);
            }
            let value = job.tier_value;
            self.remember(shape, |memo| {
                memo.no_eviction_at = Some(memo.no_eviction_at.map_or(value, |v| v.max(value)));
            });
        }
        let reason = if self.someone_waiting {
            PendingReason::Priority
        } else {
            PendingReason::Resources
        };
        match self.reserve_start(job) {
            Some(reservation) => Decision::Reserved(reason, reservation),
            None => Decision::Waiting(reason),
        }
    }

    /// Where `job` goes now, if anywhere: `Placed`, or `OverLimit` when the only room there is
    /// would take it over its quota (an `--exclusive` job on nodes with more GPUs than it may
    /// still hold). `None`: no room. An exclusive job under a quota tries the nodes within
    /// what it may hold first, each of them at most its share of that room.
    fn place(&self, job: &'a Job, ends_by: Option<Millis>) -> Option<Decision> {
        let spec = &job.spec;
        if let Some(room) = spec
            .exclusive
            .then(|| self.quotas.room(job, self.tiers))
            .flatten()
        {
            let share = room / n_nodes(spec);
            if let Some(allocs) = find_placement_whole_at_most(&self.views, spec, ends_by, share) {
                return Some(Decision::Placed(allocs));
            }
        }
        let allocs = find_placement_ending(&self.views, spec, ends_by)?;
        Some(match self.over_quota(job, &allocs) {
            Some(limit) => Decision::OverLimit(limit),
            None => Decision::Placed(allocs),
        })
    }

    /// The GPUs `job` would count against its quotas holding `allocs` (see [`super::quota`]).
    fn charge_of(&self, job: &Job, allocs: &[NodeAlloc]) -> u32 {
        gpus_charged(&job.spec, allocs, |node| node_gpus(&self.capacity, node))
    }

    /// `AccountLimit` or `UserLimit` when `job` holding `allocs` would go over its quota.
    fn over_quota(&self, job: &'a Job, allocs: &[NodeAlloc]) -> Option<PendingReason> {
        if !self.quotas.any() {
            return None;
        }
        self.quotas
            .exceeded(job, self.tiers, self.charge_of(job, allocs))
    }

    /// Backfill's reservation for a job that waits for room, if it is one of its tier's first
    /// `reservations` waiting jobs, its tier may not preempt, and it could start some time.
    fn reserve_start(&mut self, job: &'a Job) -> Option<Reservation> {
        if !self.backfill.enabled || self.may_preempt(job) {
            return None;
        }
        let tried = self
            .backfill
            .tried
            .entry(job.spec.tier.as_str())
            .or_default();
        if *tried >= self.backfill.per_tier {
            return None;
        }
        *tried += 1;
        earliest_start(
            &self.views,
            &self.backfill.promised,
            self.jobs,
            &job.spec,
            self.now,
        )
    }

    fn remember(&mut self, shape: Shape<'a>, learn: impl FnOnce(&mut ShapeMemo)) {
        if self.memoize {
            if let Some(memo) = self.shapes.get_mut(&shape) {
                learn(memo);
            }
        }
    }

    /// Where the job fits once its in-flight victims are gone. `None` when jobs higher in the
    /// queue took that room in this pass (or the nodes are unschedulable).
    fn await_eviction(&self, job: &Job, victims: &[&Job]) -> Option<Decision> {
        let victim_ids: BTreeSet<JobId> = victims.iter().map(|v| v.id).collect();
        let mut freed = self.views.clone();
        for node in victims.iter().flat_map(|v| v.alloc.iter().map(|a| &a.node)) {
            if let Some(view) = freed.get_mut(node.as_str()) {
                *view = view.without(&victim_ids);
            }
        }
        let targets = find_placement(&freed, &job.spec)?;
        if let Some(limit) = self.over_quota(job, &targets) {
            return Some(Decision::OverLimit(limit));
        }
        let on_targets = |v: &&&Job| {
            v.alloc
                .iter()
                .any(|a| targets.iter().any(|t| t.node == a.node))
        };
        let victims: Vec<JobId> = victims.iter().filter(on_targets).map(|v| v.id).collect();
        if victims.is_empty() {
            // It fits without them after all: unreachable, since placement failed.
            return Some(Decision::Placed(targets));
        }
        let nodes = targets
            .iter()
            .filter(|t| {
                self.views
                    .get(t.node.as_str())
                    .is_some_and(|v| v.holds().iter().any(|h| victim_ids.contains(&h.job)))
            })
            .map(|t| t.node.clone())
            .collect();
        Some(Decision::AwaitingEviction {
            victims,
            nodes,
            targets,
        })
    }

    fn may_preempt(&self, job: &Job) -> bool {
        self.tiers
            .get(&job.spec.tier)
            .is_some_and(|tier| tier.may_preempt)
    }
}

/// A node name that compares fast, in the order of the names themselves: its first 16 bytes,
/// zero-padded, as a big-endian number order like the bytes they hold. Two names with the same
/// prefix that both fit in it differ at most in trailing zero bytes, so the shorter comes first;
/// only longer names need the full comparison.
#[derive(Debug, Clone, Copy)]
struct NameKey<'n> {
    prefix: u128,
    name: &'n str,
}

impl Ord for NameKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| {
            if self.name.len() <= 16 && other.name.len() <= 16 {
                self.name.len().cmp(&other.name.len())
            } else {
                self.name.cmp(other.name)
            }
        })
    }
}

impl PartialEq for NameKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for NameKey<'_> {}

impl PartialOrd for NameKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<'n> NameKey<'n> {
    fn of(name: &'n str) -> Self {
        let mut bytes = [0u8; 16];
        let n = name.len().min(16);
        bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        NameKey {
            prefix: u128::from_be_bytes(bytes),
            name,
        }
    }
}

/// How many GPUs node `name` has in all, out of service or not (`None`: not known).
fn node_gpus(capacity: &Views<'_>, name: &str) -> Option<u32> {
    capacity.get(name).map(|view| view.node().gpus.len() as u32)
}
