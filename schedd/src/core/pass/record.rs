//! A pass's decision for a job recorded: the plan takes its placement, evictions or reason,
//! and the node views, quotas and backfill's reservations take what it will hold.

use ysched_common::{Job, JobId, NodeAlloc};

use super::held_back::{begin_ms, limited_array, singleton_key};
use super::{Decision, Pass};
use crate::core::backfill::Reservation;
use crate::core::node_view::{Claim, Hold};
use crate::core::{Eviction, ExpectedStart, PendingReason, Placement};

impl<'a> Pass<'a> {
    pub(super) fn record(&mut self, job: &'a Job, decision: &Decision) {
        let held = match decision {
            Decision::Placed(allocs) => Some(allocs),
            Decision::Preempting(preemption) => Some(&preemption.targets),
            Decision::AwaitingEviction { targets, .. } => Some(targets),
            _ => None,
        };
        if let Some(allocs) = held {
            let gpus = self.charge_of(job, allocs);
            self.claim(job, gpus);
        }
        match decision {
            Decision::Placed(allocs) => {
                for alloc in allocs {
                    if let Some(view) = self.views.get_mut(alloc.node.as_str()) {
                        view.add_alloc(job.id, Claim::Placed, alloc, None, job.spec.exclusive);
                    }
                }
                self.plan.placements.push(Placement {
                    job: job.id,
                    alloc: allocs.clone(),
                });
            }
            Decision::Preempting(preemption) => {
                for (victim, node) in &preemption.victims {
                    self.plan.evictions.push(Eviction {
                        victim: *victim,
                        preemptor: job.id,
                        node: node.clone(),
                        grace_secs: self.jobs.get(victim).map_or(0, |v| v.grace_secs),
                    });
                    // Its resources are promised: no later preemptor may count on them.
                    for alloc in self.jobs.get(victim).map_or(&[][..], |v| &v.alloc) {
                        if let Some(view) = self.views.get_mut(alloc.node.as_str()) {
                            view.protect(*victim);
                        }
                    }
                }
                for target in &preemption.targets {
                    self.reserve(job, target);
                }
                self.promise(job.id, &preemption.targets);
                let ids: Vec<JobId> = preemption.victims.iter().map(|(id, _)| *id).collect();
                let nodes = preemption.nodes.iter().map(String::as_str);
                self.wait(job, preempting_reason(&ids, nodes));
            }
            Decision::AwaitingEviction {
                victims,
                nodes,
                targets,
            } => {
                for target in targets {
                    self.reserve(job, target);
                }
                self.promise(job.id, targets);
                self.wait(
                    job,
                    preempting_reason(victims, nodes.iter().map(String::as_str)),
                );
            }
            Decision::Waiting(reason) => self.wait(job, reason.clone()),
            Decision::Reserved(reason, reservation) => {
                self.keep_for(job, reservation);
                self.wait(job, reason.clone());
            }
            Decision::Dependency(reason) => {
                // Not `someone_waiting`: it waits for other jobs to end (or its time to
                // come), not for room.
                if let (PendingReason::BeginTime, Some(begin)) = (reason, job.spec.begin_unix_secs)
                {
                    // Slurm's StartTime of a job waiting for its begin time: that time (where
                    // is not known until then).
                    let at = begin_ms(begin);
                    let nodes = Vec::new();
                    self.plan
                        .expected_starts
                        .insert(job.id, ExpectedStart { at, nodes });
                }
                self.give_reason(job, reason.clone());
            }
            Decision::NodesUnavailable => {
                // Not `someone_waiting`: it waits for its nodes to come back, not for room.
                self.give_reason(job, PendingReason::ReqNodeNotAvail);
            }
            Decision::OverLimit(limit) => {
                // Not `someone_waiting`: it waits for its own account's (array's) jobs, not
                // for room.
                self.give_reason(job, limit.clone());
            }
            Decision::Unsatisfiable(why) => {
                // Not `someone_waiting`: a job that can never run blocks nobody.
                self.give_reason(job, PendingReason::Unsatisfiable(why.clone()));
            }
        }
    }

    /// `job` will hold its resources (`gpus` as its quotas count them): count them against
    /// its quotas, its array's limit and its name's `singleton`.
    fn claim(&mut self, job: &'a Job, gpus: u32) {
        self.quotas.charge(job, self.tiers, gpus);
        if let Some(array) = limited_array(job) {
            *self.array_tasks.entry(array).or_default() += 1;
        }
        match &mut self.singletons {
            Some(taken) => {
                taken.insert(singleton_key(job));
            }
            None => self.claimed.push(job),
        }
    }

    /// These allocations are promised to `job` for good: later reservations keep off them.
    fn promise(&mut self, job: JobId, allocs: &[NodeAlloc]) {
        if self.backfill.enabled {
            let promised = allocs.iter().map(|alloc| (job, alloc.clone()));
            self.backfill.promised.extend(promised);
        }
    }

    /// Keeps the room of `reservation` that is free now for `job` (the rest is held by jobs
    /// that end by its start): only jobs that end by then may use it.
    fn keep_for(&mut self, job: &Job, reservation: &Reservation) {
        let (whole, job) = (job.spec.exclusive, job.id);
        for alloc in &reservation.allocs {
            let Some(view) = self.views.get_mut(alloc.node.as_str()) else {
                continue;
            };
            let hold = Hold {
                job,
                claim: Claim::Backfill(reservation.at),
                gpus: view.topology().mask_of(&alloc.gpus) & view.free_gpus(),
                cpus: alloc.cpus.min(view.free_cpus()),
                mem_mib: alloc.mem_mib.min(view.free_mem_mib()),
                evictable: None,
                whole,
            };
            view.add_hold(hold);
        }
        self.promise(job, &reservation.allocs);
        let at = self
            .backfill
            .starts
            .partition_point(|s| *s <= reservation.at);
        self.backfill.starts.insert(at, reservation.at);
        self.plan.expected_starts.insert(
            job,
            ExpectedStart {
                at: reservation.at,
                nodes: reservation.allocs.iter().map(|a| a.node.clone()).collect(),
            },
        );
        self.backfill.reservations.push((job, reservation.clone()));
    }

    fn wait(&mut self, job: &Job, reason: PendingReason) {
        self.someone_waiting = true;
        self.give_reason(job, reason);
    }

    /// `job` stays pending for `reason`: into the plan, unless only changed reasons are
    /// kept and it is the job's own already.
    fn give_reason(&mut self, job: &Job, reason: PendingReason) {
        if reason == PendingReason::DependencyNeverSatisfied {
            self.plan.never_satisfied.push(job.id);
        }
        if self.only_changed_reasons && reason.is_text_of(&job.reason) {
            // A job is given one reason a pass; should it ever be given a second, the plan
            // must not keep the first.
            self.plan.pending_reasons.remove(&job.id);
            return;
        }
        self.plan.pending_reasons.insert(job.id, reason);
    }

    /// Keeps for `job` the part of `target` that is free now; its victims hold the rest until
    /// they exit. Lower jobs later in this pass therefore cannot take it, and the next pass
    /// renews the reservation while the eviction is in flight.
    fn reserve(&mut self, job: &Job, target: &NodeAlloc) {
        let (whole, job) = (job.spec.exclusive, job.id);
        let Some(view) = self.views.get_mut(target.node.as_str()) else {
            return;
        };
        let hold = Hold {
            job,
            claim: Claim::Reserved,
            gpus: view.topology().mask_of(&target.gpus) & view.free_gpus(),
            cpus: target.cpus.min(view.free_cpus()),
            mem_mib: target.mem_mib.min(view.free_mem_mib()),
            evictable: None,
            whole,
        };
        view.add_hold(hold);
    }
}

/// `Preempting 17,18 on n1,n2`
fn preempting_reason<'n>(
    victims: &[JobId],
    nodes: impl IntoIterator<Item = &'n str>,
) -> PendingReason {
    PendingReason::Preempting {
        victims: victims.to_vec(),
        nodes: nodes.into_iter().map(str::to_string).collect(),
    }
}
