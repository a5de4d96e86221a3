//! One scheduling pass: walk the queue once, deciding for each pending job in turn, and keep
//! the working view of every node in step with the decisions so far.

use std::collections::{BTreeMap, BTreeSet};

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState, NodeAlloc, StopReason, StopRequest, TierConfig};

use super::fit::{
    capacity_views, find_placement, fit_on_node, n_nodes, satisfiable_on, Claim, Hold, NodeDemand,
    NodeView,
};
use super::preempt::{plan_preemption, Preemption};
use super::{Eviction, Placement, Plan, Policy, Snapshot};

/// What the pass decided for one pending job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Placed(Vec<NodeAlloc>),
    /// Evict these victims; the free part of the target is reserved for the job.
    Preempting(Preemption),
    /// An eviction for this job is already in flight on `node`; its reservation is renewed.
    AwaitingEviction {
        node: String,
        victims: Vec<JobId>,
        target: NodeAlloc,
    },
    /// `Resources` or `Priority`.
    Waiting(&'static str),
    Unsatisfiable(String),
}

pub(crate) struct Pass<'a> {
    jobs: &'a BTreeMap<JobId, Job>,
    tiers: &'a BTreeMap<String, TierConfig>,
    now: Millis,
    /// Every schedulable node, with the running jobs' holds and this pass's decisions so far.
    views: BTreeMap<String, NodeView<'a>>,
    /// Every node as if empty, for the satisfiability check (built once per pass, not per job).
    capacity: BTreeMap<String, NodeView<'a>>,
    /// Evictions already requested and not finished: preemptor → its PREEMPTING victims.
    in_flight: BTreeMap<JobId, Vec<&'a Job>>,
    /// Victims chosen earlier in this pass. Their resources are promised to their preemptor,
    /// so a later preemptor may not count on them.
    claimed_victims: BTreeSet<JobId>,
    /// An earlier job in the queue is waiting: a later one that does not fit waits for
    /// `Priority`, not `Resources`.
    someone_waiting: bool,
    plan: Plan,
}

impl<'a> Pass<'a> {
    pub(crate) fn new(snap: &Snapshot<'a>, policy: &Policy<'a>, now: Millis) -> Self {
        let mut views: BTreeMap<String, NodeView<'a>> = snap
            .nodes
            .iter()
            .filter(|(_, node)| node.is_schedulable())
            .map(|(name, node)| (name.clone(), NodeView::new(node)))
            .collect();
        let mut in_flight: BTreeMap<JobId, Vec<&Job>> = BTreeMap::new();
        for job in snap.jobs.values() {
            if !job.state.holds_resources() {
                continue;
            }
            // The allocation is the one truth of who holds a GPU: held until the agent
            // reports the process gone, whatever the job's stop request says.
            for alloc in &job.alloc {
                if let Some(view) = views.get_mut(&alloc.node) {
                    view.add_hold(Hold::new(job.id, Claim::Running, alloc));
                }
            }
            if let (
                JobState::Preempting,
                Some(StopRequest {
                    reason: StopReason::Preempt { by },
                    ..
                }),
            ) = (job.state, &job.stop)
            {
                in_flight.entry(*by).or_default().push(job);
            }
        }
        Pass {
            jobs: snap.jobs,
            tiers: policy.tiers,
            now,
            views,
            capacity: capacity_views(snap.nodes),
            in_flight,
            claimed_victims: BTreeSet::new(),
            someone_waiting: false,
            plan: Plan::default(),
        }
    }

    /// The schedulable nodes as the next job will see them.
    pub(crate) fn views(&self) -> &BTreeMap<String, NodeView<'a>> {
        &self.views
    }

    /// Decides for the next pending job in queue order, records the decision in the plan and
    /// applies it to the node views.
    pub(crate) fn step(&mut self, job: &Job) -> Decision {
        let decision = self.decide(job);
        self.record(job, &decision);
        decision
    }

    pub(crate) fn into_plan(self) -> Plan {
        self.plan
    }

    fn decide(&self, job: &Job) -> Decision {
        if let Err(why) = satisfiable_on(&self.capacity, &job.spec) {
            return Decision::Unsatisfiable(why);
        }
        if let Some(allocs) = find_placement(&self.views, &job.spec) {
            return Decision::Placed(allocs);
        }
        // Multi-node jobs never preempt for now: choosing victims on several nodes at once, and
        // keeping that choice minimal, is left for later; a gang waits for room instead.
        if n_nodes(&job.spec) == 1 {
            let demand = NodeDemand::of(&job.spec);
            if let Some(victims) = self.in_flight.get(&job.id) {
                // Never a second eviction while the first is still in flight (Kubernetes'
                // `PodEligibleToPreemptOthers`). Once its victims have exited the job is
                // placed normally, ahead of lower jobs by queue order.
                if let Some(decision) = self.await_eviction(&demand, victims) {
                    return decision;
                }
            } else if self.may_preempt(job) {
                if let Some(preemption) = plan_preemption(
                    job,
                    &demand,
                    &self.views,
                    self.jobs,
                    self.tiers,
                    self.now,
                    &self.claimed_victims,
                ) {
                    return Decision::Preempting(preemption);
                }
            }
        }
        Decision::Waiting(if self.someone_waiting {
            "Priority"
        } else {
            "Resources"
        })
    }

    /// The job's fit on a node of its in-flight victims, treating them as gone. `None` when
    /// jobs higher in the queue took that room in this pass (or the node is unschedulable).
    fn await_eviction(&self, demand: &NodeDemand<'_>, victims: &[&Job]) -> Option<Decision> {
        let victim_ids: BTreeSet<JobId> = victims.iter().map(|v| v.id).collect();
        let nodes: BTreeSet<&str> = victims
            .iter()
            .flat_map(|v| v.alloc.iter().map(|a| a.node.as_str()))
            .collect();
        nodes.into_iter().find_map(|node| {
            let view = self.views.get(node)?;
            let target = fit_on_node(&view.without(&victim_ids), demand).ok()?;
            let on_node = victims
                .iter()
                .filter(|v| v.alloc.iter().any(|a| a.node == node))
                .map(|v| v.id)
                .collect();
            Some(Decision::AwaitingEviction {
                node: node.to_string(),
                victims: on_node,
                target,
            })
        })
    }

    fn may_preempt(&self, job: &Job) -> bool {
        self.tiers
            .get(&job.spec.tier)
            .is_some_and(|tier| tier.may_preempt)
    }

    fn record(&mut self, job: &Job, decision: &Decision) {
        match decision {
            Decision::Placed(allocs) => {
                for alloc in allocs {
                    if let Some(view) = self.views.get_mut(&alloc.node) {
                        view.add_hold(Hold::new(job.id, Claim::Placed, alloc));
                    }
                }
                self.plan.placements.push(Placement {
                    job: job.id,
                    alloc: allocs.clone(),
                });
            }
            Decision::Preempting(preemption) => {
                for victim in &preemption.victims {
                    self.claimed_victims.insert(*victim);
                    self.plan.evictions.push(Eviction {
                        victim: *victim,
                        preemptor: job.id,
                        node: preemption.node.clone(),
                        grace_secs: self.jobs.get(victim).map_or(0, |v| v.grace_secs),
                    });
                }
                self.reserve(job.id, &preemption.target);
                self.wait(
                    job,
                    preempting_reason(&preemption.victims, &preemption.node),
                );
            }
            Decision::AwaitingEviction {
                node,
                victims,
                target,
            } => {
                self.reserve(job.id, target);
                self.wait(job, preempting_reason(victims, node));
            }
            Decision::Waiting(reason) => self.wait(job, reason.to_string()),
            Decision::Unsatisfiable(why) => {
                // Not `someone_waiting`: a job that can never run blocks nobody.
                self.plan
                    .pending_reasons
                    .insert(job.id, format!("Unsatisfiable: {why}"));
            }
        }
    }

    fn wait(&mut self, job: &Job, reason: String) {
        self.someone_waiting = true;
        self.plan.pending_reasons.insert(job.id, reason);
    }

    /// Keeps for `job` the part of `target` that is free now; its victims hold the rest until
    /// they exit. Lower jobs later in this pass therefore cannot take it, and the next pass
    /// renews the reservation while the eviction is in flight.
    fn reserve(&mut self, job: JobId, target: &NodeAlloc) {
        let Some(view) = self.views.get_mut(&target.node) else {
            return;
        };
        let gpus = target
            .gpus
            .iter()
            .filter(|g| view.free_gpus().contains(g))
            .copied()
            .collect();
        let hold = Hold {
            job,
            claim: Claim::Reserved,
            gpus,
            cpus: target.cpus.min(view.free_cpus()),
            mem_mib: target.mem_mib.min(view.free_mem_mib()),
        };
        view.add_hold(hold);
    }
}

/// `Preempting 17,18 on n1`
fn preempting_reason(victims: &[JobId], node: &str) -> String {
    let ids: Vec<String> = victims.iter().map(JobId::to_string).collect();
    format!("Preempting {} on {node}", ids.join(","))
}
