//! Client events that change jobs or nodes: cancel, hold and release, requeue, drain and
//! resume. Each checks everything first (a refused request changes nothing but, where it is
//! audited, the audit log: see [`refusal`]), then returns its effects.

use super::history::JobEventKind;
use super::holds;
use super::targets::{not_found, plain_target, Resolved};
use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use std::collections::BTreeMap;
use ysched_common::array::{fold_tasks, JobTarget};
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Caller, HeldBy, Job, JobId, JobState, StopReason, StopRequest};

/// An audit entry for something `who` did.
pub fn audit_record(
    who: &Caller,
    action: &str,
    job: Option<JobId>,
    detail: String,
    now: Millis,
) -> AuditRecord {
    AuditRecord {
        time: now,
        user: who.owner.user.clone(),
        uid: who.owner.uid,
        action: action.into(),
        job_id: job,
        detail,
        host: who.host.clone(),
    }
}

/// Administrators may act on every job; others on their own.
pub fn check_owner(job: &Job, caller: &Caller) -> ApiResult<()> {
    if caller.is_admin() || caller.owner.uid == job.owner.uid {
        Ok(())
    } else {
        Err(ApiError::Denied(format!(
            "job {} belongs to {}: you ({}) may only act on your own jobs",
            job.display_id(),
            job.owner.user,
            caller.owner.user
        )))
    }
}

/// Where a job that is not active is to be found: `finished` looks it up in history.
pub type FinishedLookup<'a> = &'a dyn Fn(JobId) -> ApiResult<Option<Job>>;

impl Records {
    /// Cancels `ids` (each as [`Records::cancel_targets`] reads a plain id: an array's id
    /// stands for the whole array) and, with `user`, all of that user's jobs.
    pub fn cancel(
        &self,
        caller: &Caller,
        ids: &[u64],
        user: &str,
        finished: FinishedLookup<'_>,
        now: Millis,
    ) -> ApiResult<(Effects, Vec<JobId>)> {
        let targets: Vec<JobTarget> = ids.iter().map(|&id| plain_target(id)).collect();
        let (fx, done) = self.cancel_targets(caller, &targets, user, finished, now)?;
        Ok((fx, done.into_iter().map(|(id, _)| id).collect()))
    }

    /// Cancels the jobs `targets` name (`12`, `12_7`, `12_[1-5]`: see [`super::targets`])
    /// and, with `user`, all of that user's jobs. Everything is checked first: one bad name
    /// cancels nothing. Queued jobs end at once; running ones get SIGTERM and their grace,
    /// and end CANCELLED when their agent reports them gone. An array's tasks that have
    /// finished already are passed over (a name all of whose jobs have finished is refused).
    /// Returns the cancelled jobs with their display ids (a job already being cancelled
    /// counts, and is not signalled again). The audit log gets one entry per plain job and
    /// one per array, however many of its tasks were cancelled.
    pub fn cancel_targets(
        &self,
        caller: &Caller,
        targets: &[JobTarget],
        user: &str,
        finished: FinishedLookup<'_>,
        now: Millis,
    ) -> ApiResult<(Effects, Vec<(JobId, String)>)> {
        if targets.is_empty() && user.is_empty() {
            return Err(ApiError::Invalid("no job ids or user given".into()));
        }
        let mut ids = Vec::new();
        for resolved in self.resolve_all(targets, finished)? {
            let target = &resolved.target;
            let before = ids.len();
            for id in &resolved.ids {
                if let Some(j) = self.jobs.get(id) {
                    check_owner(j, caller)?;
                    ids.push(*id);
                }
            }
            if ids.len() == before {
                return Err(match resolved.array {
                    None => match finished(target.id)? {
                        Some(j) => ApiError::Conflict(format!(
                            "job {} already finished ({})",
                            target.id, j.state
                        )),
                        None => not_found(target, ""),
                    },
                    Some(_) => ApiError::Conflict(format!(
                        "job {}: every task has finished already",
                        ysched_common::text::excerpt(&target.to_string(), 60)
                    )),
                });
            }
        }
        if !user.is_empty() {
            if !caller.is_admin() && caller.owner.user != user {
                return Err(ApiError::Denied(format!(
                    "you ({}) may only cancel your own jobs, not {user}'s",
                    caller.owner.user
                )));
            }
            ids.extend(
                self.jobs
                    .values()
                    .filter(|j| j.owner.user == user)
                    .map(|j| j.id),
            );
        }
        ids.sort();
        ids.dedup();
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        let by = &caller.owner.user;
        // Per array: the tasks cancelled while queued, and while running.
        let mut arrays: BTreeMap<JobId, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
        let mut done = Vec::with_capacity(ids.len());
        for id in ids {
            let mut job = Job::clone(&self.jobs[&id]);
            let task = job.array;
            let mut audit = |fx: &mut Effects, queued: bool| match task {
                Some(a) => {
                    let entry = arrays.entry(a.array_id).or_default();
                    if queued {
                        entry.0.push(a.task)
                    } else {
                        entry.1.push(a.task)
                    }
                }
                None => fx.audit(audit_record(
                    caller,
                    "cancel",
                    Some(id),
                    if queued {
                        "while queued"
                    } else {
                        "while running"
                    }
                    .into(),
                    now,
                )),
            };
            match job.state {
                JobState::Pending | JobState::Held => {
                    job.state = JobState::Cancelled;
                    job.reason = format!("cancelled by {by}");
                    job.end_time = Some(now);
                    audit(&mut fx, true);
                    fx.event(
                        id,
                        now,
                        JobEventKind::Cancelled,
                        format!("by {by} while queued"),
                    );
                    fx.put_job(job);
                }
                JobState::Running | JobState::Preempting => {
                    let already = matches!(
                        job.stop.as_deref(),
                        Some(StopRequest {
                            reason: StopReason::Cancel { .. },
                            ..
                        })
                    );
                    if !already {
                        let grace = job.grace_secs;
                        job.stop = Some(Box::new(StopRequest {
                            reason: StopReason::Cancel { by: by.clone() },
                            at: now,
                            grace_secs: grace,
                        }));
                        job.reason = format!("cancelling (by {by})");
                        audit(&mut fx, false);
                        fx.event(
                            id,
                            now,
                            JobEventKind::Cancel,
                            format!("by {by}: SIGTERM, SIGKILL after {grace}s"),
                        );
                        let nodes: Vec<String> = job.alloc.iter().map(|a| a.node.clone()).collect();
                        fx.stop_parts(id, &nodes, grace, "cancel");
                        fx.put_job(job);
                    }
                }
                _ => {}
            }
            done.push((id, self.jobs[&id].display_id()));
        }
        for (array_id, (queued, running)) in arrays {
            let mut tasks: Vec<u32> = queued.iter().chain(&running).copied().collect();
            tasks.sort_unstable();
            let detail = format!(
                "{} tasks of array {array_id} ({array_id}_[{}]): {} while queued, {} while running",
                tasks.len(),
                fold_tasks(&tasks),
                queued.len(),
                running.len()
            );
            fx.audit(audit_record(caller, "cancel", Some(array_id), detail, now));
        }
        Ok((fx, done))
    }

    /// Holds a PENDING job (`hold`) or releases a HELD one. Asking for the state a job is
    /// already in is refused (`job 12 is already held`, `job 12 is not held`), as every
    /// other state is: the user learns that nothing changed. An administrator's hold is
    /// released only by an administrator, and a user holding it again leaves it theirs (see
    /// [`holds::step`]).
    pub fn hold(&self, caller: &Caller, id: JobId, hold: bool, now: Millis) -> ApiResult<Effects> {
        let job = self.jobs.get(&id).ok_or_else(|| {
            ApiError::NotFound(format!("invalid job id {id}: no such active job"))
        })?;
        check_owner(job, caller)?;
        let step = holds::step(job, caller, hold).map_err(|why| holds::refusal(job, hold, why))?;
        let mut job = Job::clone(job);
        holds::apply(&mut job, step, now);
        let action = if hold { "hold" } else { "release" };
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        fx.event(
            id,
            now,
            if hold {
                JobEventKind::Held
            } else {
                JobEventKind::Released
            },
            holds::event_detail(caller, step),
        );
        let detail = match step {
            holds::Step::Hold(HeldBy::Admin) => "an administrator's hold".to_string(),
            _ => String::new(),
        };
        fx.audit(audit_record(caller, action, Some(id), detail, now));
        fx.put_job(job);
        Ok(fx)
    }

    /// Holds (`hold`) or releases what `target` names. One job: as [`Records::hold`]. Tasks
    /// of an array (all, or a range): every one PENDING (HELD) is held (released), the
    /// others are passed over; refused when none is (naming whether they all are in the
    /// state asked for already), and, changing nothing, when a user would release a task
    /// an administrator holds. One audit entry for the whole request.
    pub fn hold_targets(
        &self,
        caller: &Caller,
        target: &Resolved,
        hold: bool,
        now: Millis,
    ) -> ApiResult<Effects> {
        let Some(array_id) = target.array else {
            return match target.ids.as_slice() {
                [id] => self.hold(caller, *id, hold, now),
                _ => Err(ApiError::Invalid(format!("{} names no job", target.target))),
            };
        };
        let from = if hold {
            JobState::Pending
        } else {
            JobState::Held
        };
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        let (mut tasks, mut already) = (Vec::new(), 0usize);
        for id in &target.ids {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            check_owner(job, caller)?;
            let step = match holds::step(job, caller, hold) {
                Ok(step) => step,
                Err(holds::NoStep::AlreadyHeld(_) | holds::NoStep::NotHeld) => {
                    already += 1;
                    continue;
                }
                Err(holds::NoStep::AdminHold) => {
                    return Err(holds::admin_hold_refused(&job.display_id()))
                }
                Err(holds::NoStep::Elsewhere(_)) => continue,
            };
            let mut job = Job::clone(job);
            holds::apply(&mut job, step, now);
            tasks.extend(job.array.map(|a| a.task));
            fx.event(
                *id,
                now,
                if hold {
                    JobEventKind::Held
                } else {
                    JobEventKind::Released
                },
                holds::event_detail(caller, step),
            );
            fx.put_job(job);
        }
        if tasks.is_empty() {
            if already > 0 {
                return Err(ApiError::Conflict(format!(
                    "no task of {} is {from}: {already} {} already {}",
                    target.target,
                    if already == 1 { "is" } else { "are" },
                    if hold { "held" } else { "pending" }
                )));
            }
            return Err(ApiError::Conflict(format!(
                "no task of {} is {from}: only {from} jobs can be {}",
                target.target,
                if hold { "held" } else { "released" }
            )));
        }
        tasks.sort_unstable();
        let detail = format!(
            "{} tasks of array {array_id} ({array_id}_[{}])",
            tasks.len(),
            fold_tasks(&tasks)
        );
        let action = if hold { "hold" } else { "release" };
        fx.audit(audit_record(caller, action, Some(array_id), detail, now));
        Ok(fx)
    }

    /// Requeues a running job on its owner's (or root's) request, as `scontrol requeue` does:
    /// SIGTERM to every process now, SIGKILL after its grace (the stop a cancel sends), and
    /// when its agents report it gone it goes back to PENDING with its submit time (so its
    /// place in the queue), its checkpoint directory, and its restart count one higher
    /// (`lifecycle::part_ended`). Refused for a job submitted with `--no-requeue` (never
    /// requeued, as with sbatch), for one not running (queued, finished, being cancelled or
    /// preempted), and for someone else's job. Asking again while it is being requeued does
    /// nothing.
    pub fn requeue(
        &self,
        caller: &Caller,
        id: JobId,
        finished: FinishedLookup<'_>,
        now: Millis,
    ) -> ApiResult<Effects> {
        let Some(job) = self.jobs.get(&id) else {
            return Err(match finished(id)? {
                Some(j) => ApiError::Conflict(format!(
                    "job {} already finished ({}): only a running job can be requeued; \
                     submit it again instead",
                    j.display_id(),
                    j.state
                )),
                None => ApiError::NotFound(format!("invalid job id {id}: no such job")),
            });
        };
        check_owner(job, caller)?;
        let id_shown = job.display_id();
        if job.spec.no_requeue {
            return Err(ApiError::Conflict(format!(
                "job {id_shown} was submitted with --no-requeue: it is never requeued"
            )));
        }
        let stopping = matches!(job.state, JobState::Running | JobState::Preempting);
        match (job.state, job.stop.as_ref().map(|s| &s.reason)) {
            (JobState::Running, None) => {}
            (JobState::Running, Some(StopReason::Requeue { .. })) => return Ok(Effects::default()),
            (_, Some(StopReason::Cancel { by })) if stopping => {
                return Err(ApiError::Conflict(format!(
                    "job {id_shown} is being cancelled (by {by}): it cannot be requeued"
                )))
            }
            (_, Some(StopReason::Preempt { by })) if stopping => {
                return Err(ApiError::Conflict(format!(
                    "job {id_shown} is being preempted (by job {by}): it is requeued once it has \
                     stopped"
                )))
            }
            (_, Some(_)) if stopping => {
                return Err(ApiError::Conflict(format!(
                    "job {id_shown} is being stopped ({}): it cannot be requeued",
                    job.reason
                )))
            }
            (state, _) => {
                return Err(ApiError::Conflict(format!(
                    "job {id_shown} is {state}: only a RUNNING job can be requeued"
                )))
            }
        }
        let mut job = Job::clone(job);
        let grace = job.grace_secs;
        job.stop = Some(Box::new(StopRequest {
            reason: StopReason::Requeue {
                by: caller.owner.user.clone(),
            },
            at: now,
            grace_secs: grace,
        }));
        job.reason = format!("requeueing (by {})", caller.owner.user);
        let mut fx = Effects::default();
        fx.audit(audit_record(
            caller,
            "requeue",
            Some(id),
            format!("while running (restart {})", job.restart_count + 1),
            now,
        ));
        fx.event(
            id,
            now,
            JobEventKind::Requeue,
            format!("by {}: SIGTERM, SIGKILL after {grace}s", caller.owner.user),
        );
        let nodes: Vec<String> = job.alloc.iter().map(|a| a.node.clone()).collect();
        fx.stop_parts(id, &nodes, grace, "requeue");
        fx.put_job(job);
        Ok(fx)
    }

    /// Drains node `name` (no new jobs; running ones finish) with `reason`, or resumes it
    /// with `None`. Administrators only.
    pub fn drain(
        &self,
        caller: &Caller,
        name: &str,
        reason: Option<String>,
        now: Millis,
    ) -> ApiResult<Effects> {
        if !caller.is_admin() {
            return Err(ApiError::Denied(format!(
                "only administrators may drain or resume nodes ({} is not one: root on the \
                 schedd host, scheduler.admin_group, root on scheduler.admin_hosts)",
                caller.describe()
            )));
        }
        if let Some(reason) = &reason {
            ysched_common::text::check_printable("drain reason", reason)
                .map_err(ApiError::Invalid)?;
        }
        let mut node = self
            .nodes
            .get(name)
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "unknown node '{}'",
                    ysched_common::text::excerpt(name, 64)
                ))
            })?
            .clone();
        let (action, detail) = match &reason {
            Some(r) => ("drain", format!("node {name}: {r}")),
            None => ("resume", format!("node {name}")),
        };
        node.drain_reason = reason;
        // An administrator's drain or resume is theirs: the node's own resume never ends it.
        node.drained_by_node = false;
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        fx.audit(audit_record(caller, action, None, detail, now));
        fx.put_node(node);
        Ok(fx)
    }
}
