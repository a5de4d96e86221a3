//! Applying a plan of the scheduling core: evictions become stop requests (SIGTERM and the
//! victim's grace), placements become runs with their launch orders, and the reasons pending
//! jobs wait for are updated in memory only (they are derived again by every pass).

use super::commands::Payload;
use super::commands::{AgentCommand, LaunchOrder};
use super::history::JobEventKind;
use super::{Effects, Records};
use crate::core::{PendingReason, Plan};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Job, JobId, JobState, NodeAlloc, Parts, PartsProgress};
use ysched_common::{StopReason, StopRequest};

/// A job's script and environment, read when it is placed (`None`: unreadable; the job stays
/// queued and the error is logged by the caller). Asked for by the id it is stored under:
/// the job's, or for an array's task the array's.
pub type PayloadLookup<'a> = &'a dyn Fn(JobId) -> Option<Arc<Payload>>;

impl Records {
    pub fn apply_plan(&self, plan: &Plan, payload: PayloadLookup<'_>, now: Millis) -> Effects {
        let mut fx = Effects::default();
        for (id, reason) in &plan.pending_reasons {
            if self
                .jobs
                .get(id)
                .is_some_and(|j| !reason.is_text_of(&j.reason))
            {
                fx.reasons.push((*id, reason.clone()));
            }
        }
        for ev in &plan.evictions {
            let Some(victim) = self.jobs.get(&ev.victim) else {
                continue;
            };
            let mut victim = Job::clone(victim);
            victim.state = JobState::Preempting;
            victim.stop = Some(Box::new(StopRequest {
                reason: StopReason::Preempt { by: ev.preemptor },
                at: now,
                grace_secs: ev.grace_secs,
            }));
            victim.reason = format!("preempted by {}", ev.preemptor);
            fx.audit(AuditRecord {
                time: now,
                user: "schedd".into(),
                uid: 0,
                action: "preempt".into(),
                host: None,
                job_id: Some(ev.victim),
                detail: format!(
                    "job {} evicts job {} of {} (tier {}) on {}, grace {}s",
                    ev.preemptor,
                    ev.victim,
                    victim.owner.user,
                    victim.spec.tier,
                    ev.node,
                    ev.grace_secs
                ),
            });
            fx.event(
                ev.victim,
                now,
                JobEventKind::Preempting,
                format!(
                    "for job {} on {}: SIGTERM, SIGKILL after {}s",
                    ev.preemptor, ev.node, ev.grace_secs
                ),
            );
            fx.event(
                ev.preemptor,
                now,
                JobEventKind::Evicting,
                format!("job {} on {}", ev.victim, ev.node),
            );
            let nodes: Vec<String> = victim.alloc.iter().map(|a| a.node.clone()).collect();
            fx.stop_parts(ev.victim, &nodes, ev.grace_secs, "preempt");
            fx.put_job(victim);
        }
        // Rendezvous ports in use, by rank-0 node: those of running jobs (looked at once, not
        // per placement: the records may hold a hundred thousand pending jobs), then those
        // this plan hands out.
        let mut ports_taken: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        if !plan.placements.is_empty() {
            for j in self.jobs.values().filter(|j| j.state.holds_resources()) {
                if let Some(rank0) = j.parts.nodelist.first() {
                    ports_taken
                        .entry(rank0.clone())
                        .or_default()
                        .insert(j.parts.master_port);
                }
            }
        }
        // The tasks of an array share one payload, stored under the array's id: read once.
        let mut payloads: BTreeMap<JobId, Option<Arc<Payload>>> = BTreeMap::new();
        for p in &plan.placements {
            let Some(job) = self.jobs.get(&p.job) else {
                continue;
            };
            let owner_of_payload = job.array.map_or(p.job, |a| a.array_id);
            let Some(payload) = payloads
                .entry(owner_of_payload)
                .or_insert_with(|| payload(owner_of_payload))
                .clone()
            else {
                continue;
            };
            let nodelist: Vec<String> = p.alloc.iter().map(|a| a.node.clone()).collect();
            let rank0 = nodelist.first().cloned().unwrap_or_default();
            let master_addr = self
                .nodes
                .get(&rank0)
                .map(|n| n.address.clone())
                .unwrap_or_default();
            let taken = ports_taken.entry(rank0.clone()).or_default();
            let master_port = rendezvous_port(p.job, taken);
            taken.insert(master_port);
            let mut job = Job::clone(job);
            job.state = JobState::Running;
            job.alloc = p.alloc.clone();
            job.parts = PartsProgress::from(Parts {
                nodelist: nodelist.clone(),
                master_port,
                ..Default::default()
            });
            job.start_time = Some(now);
            job.launched = false;
            job.reason = String::new();
            fx.event(
                p.job,
                now,
                JobEventKind::Scheduled,
                format!("on {}", describe_alloc(&p.alloc)),
            );
            for (rank, a) in p.alloc.iter().enumerate() {
                let order = LaunchOrder {
                    job: job.clone(),
                    payload: payload.clone(),
                    gpus: a.gpus.clone(),
                    rank: rank as u32,
                    nodelist: nodelist.clone(),
                    master_addr: master_addr.clone(),
                    master_port,
                };
                fx.command(&a.node, AgentCommand::Launch(Box::new(order)));
            }
            fx.put_job(job);
        }
        fx
    }
}

impl Records {
    /// Cancels the jobs `ids` whose dependency a pass found can never be met, as
    /// `scheduler.kill_invalid_depend` asks: those still PENDING with a dependency end
    /// CANCELLED with the reason `DependencyNeverSatisfied`, recorded as done by `schedd`
    /// (one audit entry per plain job, one per array however many of its tasks).
    pub fn cancel_never_satisfied(&self, ids: &[JobId], now: Millis) -> Effects {
        let mut fx = Effects::default();
        let mut arrays: BTreeMap<JobId, Vec<u32>> = BTreeMap::new();
        let audit = |job: Option<JobId>, detail: String| AuditRecord {
            time: now,
            user: "schedd".into(),
            uid: 0,
            action: "cancel".into(),
            host: None,
            job_id: job,
            detail,
        };
        for id in ids {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            let Some(dep) = job.spec.dependency.as_ref() else {
                continue;
            };
            if job.state != JobState::Pending {
                continue;
            }
            let mut job = Job::clone(job);
            job.state = JobState::Cancelled;
            job.reason = PendingReason::DependencyNeverSatisfied.to_string();
            job.end_time = Some(now);
            fx.event(
                *id,
                now,
                JobEventKind::Cancelled,
                format!(
                    "by schedd: its dependency ({}) can never be satisfied \
                     (scheduler.kill_invalid_depend)",
                    dep.text
                ),
            );
            match job.array {
                Some(a) => arrays.entry(a.array_id).or_default().push(a.task),
                None => fx.audit(audit(
                    Some(*id),
                    format!("dependency never satisfied ({})", dep.text),
                )),
            }
            fx.put_job(job);
        }
        for (array_id, mut tasks) in arrays {
            tasks.sort_unstable();
            fx.audit(audit(
                Some(array_id),
                format!(
                    "dependency never satisfied: {} tasks of array {array_id} ({array_id}_[{}])",
                    tasks.len(),
                    ysched_common::array::fold_tasks(&tasks)
                ),
            ));
        }
        // Their dependents may be decided now.
        fx.wake = !fx.jobs.is_empty();
        fx
    }
}

/// `MASTER_PORT` for a job whose rank 0 runs on a node where the jobs holding resources (and
/// those placed by the same plan) use the ports `taken`: from 20000–32767, below Linux's
/// ephemeral range (32768–60999) so the kernel never hands it to an outgoing connection, and
/// different from every one taken.
pub fn rendezvous_port(id: JobId, taken: &BTreeSet<u32>) -> u32 {
    const FIRST: u32 = 20000;
    const SPAN: u32 = 12768;
    let start = (id.0 % SPAN as u64) as u32;
    (0..SPAN)
        .map(|k| FIRST + (start + k) % SPAN)
        .find(|p| !taken.contains(p))
        .unwrap_or(FIRST + start)
}

/// `n1 gpus [0,1]; n2 gpus [0,1]`, for the history.
pub fn describe_alloc(alloc: &[NodeAlloc]) -> String {
    alloc
        .iter()
        .map(|a| {
            let gpus: Vec<String> = a.gpus.iter().map(|g| g.to_string()).collect();
            format!("{} gpus [{}]", a.node, gpus.join(","))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Records {
    /// A plan computed from an earlier copy of these records, cut down to what still holds
    /// now (the pass runs without the lock, so requests may have changed things meanwhile):
    /// a placement stays only if its job is still pending and every part still fits on a
    /// schedulable node (GPUs free, CPUs and memory left, counting the placements kept
    /// before it); an eviction stays only if its victim still runs and is not being stopped;
    /// a reason only for a job still pending. What is dropped is decided again by the next
    /// pass. Returns the plan and whether anything was dropped.
    pub fn still_valid(&self, plan: Plan) -> (Plan, bool) {
        #[derive(Default)]
        struct Used {
            gpus: BTreeSet<u32>,
            cpus: u64,
            mem_mib: u64,
        }
        let mut used: BTreeMap<&str, Used> = BTreeMap::new();
        for job in self.jobs.values().filter(|j| j.state.holds_resources()) {
            for a in &job.alloc {
                let u = used.entry(a.node.as_str()).or_default();
                u.gpus.extend(&a.gpus);
                u.cpus += u64::from(a.cpus);
                u.mem_mib += a.mem_mib;
            }
        }
        let before = (plan.placements.len(), plan.evictions.len());
        let mut kept = Plan {
            pending_reasons: plan
                .pending_reasons
                .into_iter()
                .filter(|(id, _)| {
                    self.jobs
                        .get(id)
                        .is_some_and(|j| j.state == JobState::Pending)
                })
                .collect(),
            ..Plan::default()
        };
        for p in plan.placements {
            let pending = self
                .jobs
                .get(&p.job)
                .is_some_and(|j| j.state == JobState::Pending && j.alloc.is_empty());
            let fits = p.alloc.iter().all(|a| {
                let Some(node) = self.nodes.get(&a.node) else {
                    return false;
                };
                let u = used.get(a.node.as_str());
                let (gpus, cpus, mem) =
                    u.map_or((None, 0, 0), |u| (Some(&u.gpus), u.cpus, u.mem_mib));
                node.is_schedulable()
                    && a.gpus.iter().all(|g| {
                        node.gpus.iter().any(|x| x.index == *g)
                            && !node.unusable_gpus().any(|u| u == *g)
                            && !gpus.is_some_and(|held| held.contains(g))
                    })
                    && cpus + u64::from(a.cpus) <= u64::from(node.cpus)
                    && (a.mem_mib == 0 || mem + a.mem_mib <= node.mem_mib)
            });
            if pending && fits {
                for a in &p.alloc {
                    let u = used.entry(self.nodes[&a.node].name.as_str()).or_default();
                    u.gpus.extend(&a.gpus);
                    u.cpus += u64::from(a.cpus);
                    u.mem_mib += a.mem_mib;
                }
                kept.placements.push(p);
            }
        }
        for ev in plan.evictions {
            let runs = self
                .jobs
                .get(&ev.victim)
                .is_some_and(|j| j.state == JobState::Running && j.stop.is_none());
            if runs {
                kept.evictions.push(ev);
            }
        }
        let dropped = (kept.placements.len(), kept.evictions.len()) != before;
        (kept, dropped)
    }
}
