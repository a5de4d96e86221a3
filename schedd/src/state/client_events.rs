//! Client events that change jobs or nodes: cancel, hold and release, requeue, drain and
//! resume. Each checks everything first (a refused request changes nothing but, where it is
//! audited, the audit log: see [`refusal`]), then returns its effects.

use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, Caller, Job, JobId, JobState, Owner, StopReason, StopRequest};

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
            job.id, job.owner.user, caller.owner.user
        )))
    }
}

/// The effects of a refused request that is audited (a requeue of someone else's job): one
/// audit entry `action` about `job`, and nothing else.
pub fn refusal(who: &Caller, action: &str, job: Option<JobId>, why: &str, now: Millis) -> Effects {
    let mut fx = Effects::default();
    fx.audit(audit_record(who, action, job, why.to_string(), now));
    fx
}

/// Where a job that is not active is to be found: `finished` looks it up in history.
pub type FinishedLookup<'a> = &'a dyn Fn(JobId) -> ApiResult<Option<Job>>;

impl Records {
    /// Cancels `ids` and, with `user`, all of that user's jobs. All ids are checked first:
    /// one bad id cancels nothing. Queued jobs end at once; running ones get SIGTERM and their
    /// grace, and end CANCELLED when their agent reports them gone. Returns the cancelled
    /// ids (a job already being cancelled counts, and is not signalled again).
    pub fn cancel(
        &self,
        caller: &Caller,
        ids: &[u64],
        user: &str,
        finished: FinishedLookup<'_>,
        now: Millis,
    ) -> ApiResult<(Effects, Vec<JobId>)> {
        if ids.is_empty() && user.is_empty() {
            return Err(ApiError::Invalid("no job ids or user given".into()));
        }
        let mut targets = Vec::new();
        for &id in ids {
            let id = JobId(id);
            match self.jobs.get(&id) {
                Some(j) => {
                    check_owner(j, caller)?;
                    targets.push(id);
                }
                None => {
                    return Err(match finished(id)? {
                        Some(j) => {
                            ApiError::Conflict(format!("job {id} already finished ({})", j.state))
                        }
                        None => ApiError::NotFound(format!("invalid job id {id}: no such job")),
                    })
                }
            }
        }
        if !user.is_empty() {
            if !caller.is_admin() && caller.owner.user != user {
                return Err(ApiError::Denied(format!(
                    "you ({}) may only cancel your own jobs, not {user}'s",
                    caller.owner.user
                )));
            }
            targets.extend(
                self.jobs
                    .values()
                    .filter(|j| j.owner.user == user)
                    .map(|j| j.id),
            );
        }
        targets.sort();
        targets.dedup();
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        let mut done = Vec::new();
        for id in targets {
            let mut job = self.jobs[&id].clone();
            match job.state {
                JobState::Pending | JobState::Held => {
                    job.state = JobState::Cancelled;
                    job.reason = format!("cancelled by {}", caller.owner.user);
                    job.end_time = Some(now);
                    fx.audit(audit_record(
                        caller,
                        "cancel",
                        Some(id),
                        "while queued".into(),
                        now,
                    ));
                    fx.event(
                        id,
                        now,
                        "cancelled",
                        format!("by {} while queued", caller.owner.user),
                    );
                    fx.put_job(job);
                }
                JobState::Running | JobState::Preempting => {
                    let already = matches!(
                        job.stop,
                        Some(StopRequest {
                            reason: StopReason::Cancel { .. },
                            ..
                        })
                    );
                    if !already {
                        let grace = job.grace_secs;
                        job.stop = Some(StopRequest {
                            reason: StopReason::Cancel {
                                by: caller.owner.user.clone(),
                            },
                            at: now,
                            grace_secs: grace,
                        });
                        job.reason = format!("cancelling (by {})", caller.owner.user);
                        fx.audit(audit_record(
                            caller,
                            "cancel",
                            Some(id),
                            "while running".into(),
                            now,
                        ));
                        fx.event(
                            id,
                            now,
                            "cancel",
                            format!("by {}: SIGTERM, SIGKILL after {grace}s", caller.owner.user),
                        );
                        let nodes: Vec<String> = job.alloc.iter().map(|a| a.node.clone()).collect();
                        fx.stop_parts(id, &nodes, grace, "cancel");
                        fx.put_job(job);
                    }
                }
                _ => {}
            }
            done.push(id);
        }
        Ok((fx, done))
    }

    /// Holds a PENDING job (`hold`) or releases a HELD one. Asking for the state a job is
    /// already in is a no-op with no effects.
    pub fn hold(&self, caller: &Caller, id: JobId, hold: bool, now: Millis) -> ApiResult<Effects> {
        let job = self.jobs.get(&id).ok_or_else(|| {
            ApiError::NotFound(format!("invalid job id {id}: no such active job"))
        })?;
        check_owner(job, caller)?;
        let (from, to) = if hold {
            (JobState::Pending, JobState::Held)
        } else {
            (JobState::Held, JobState::Pending)
        };
        if job.state == to {
            return Ok(Effects::default());
        }
        if job.state != from {
            return Err(ApiError::Conflict(format!(
                "job {id} is {}: only {} jobs can be {}",
                job.state,
                from,
                if hold { "held" } else { "released" }
            )));
        }
        let mut job = job.clone();
        job.state = to;
        job.reason = if hold { "Held".into() } else { String::new() };
        // A held job is not waiting to run: its wait begins when it is released.
        job.queued_at = (!hold).then_some(now);
        let action = if hold { "hold" } else { "release" };
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        fx.event(
            id,
            now,
            if hold { "held" } else { "released" },
            format!("by {}", caller.owner.user),
        );
        fx.audit(audit_record(caller, action, Some(id), String::new(), now));
        fx.put_job(job);
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
                    "job {id} already finished ({}): only a running job can be requeued; \
                     submit it again instead",
                    j.state
                )),
                None => ApiError::NotFound(format!("invalid job id {id}: no such job")),
            });
        };
        check_owner(job, caller)?;
        if job.spec.no_requeue {
            return Err(ApiError::Conflict(format!(
                "job {id} was submitted with --no-requeue: it is never requeued"
            )));
        }
        let stopping = matches!(job.state, JobState::Running | JobState::Preempting);
        match (job.state, job.stop.as_ref().map(|s| &s.reason)) {
            (JobState::Running, None) => {}
            (JobState::Running, Some(StopReason::Requeue { .. })) => return Ok(Effects::default()),
            (_, Some(StopReason::Cancel { by })) if stopping => {
                return Err(ApiError::Conflict(format!(
                    "job {id} is being cancelled (by {by}): it cannot be requeued"
                )))
            }
            (_, Some(StopReason::Preempt { by })) if stopping => {
                return Err(ApiError::Conflict(format!(
                    "job {id} is being preempted (by job {by}): it is requeued once it has \
                     stopped"
                )))
            }
            (_, Some(_)) if stopping => {
                return Err(ApiError::Conflict(format!(
                    "job {id} is being stopped ({}): it cannot be requeued",
                    job.reason
                )))
            }
            (state, _) => {
                return Err(ApiError::Conflict(format!(
                    "job {id} is {state}: only a RUNNING job can be requeued"
                )))
            }
        }
        let mut job = job.clone();
        let grace = job.grace_secs;
        job.stop = Some(StopRequest {
            reason: StopReason::Requeue {
                by: caller.owner.user.clone(),
            },
            at: now,
            grace_secs: grace,
        });
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
            "requeue",
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
            .ok_or_else(|| ApiError::NotFound(format!("unknown node '{name}'")))?
            .clone();
        let (action, detail) = match &reason {
            Some(r) => ("drain", format!("node {name}: {r}")),
            None => ("resume", format!("node {name}")),
        };
        node.drain_reason = reason;
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        fx.audit(audit_record(caller, action, None, detail, now));
        fx.put_node(node);
        Ok(fx)
    }
}

/// A validated submit: the spec with defaults resolved, its payload and grace, the tier's
/// value, and a way to name the checkpoint directory once the id is known.
pub struct NewJob<'a> {
    pub owner: Owner,
    /// The node whose agent relayed the submit; `None`: schedd's own socket.
    pub from_host: Option<String>,
    pub spec: ysched_common::JobSpec,
    pub payload: crate::store::Payload,
    pub grace_secs: u32,
    pub tier_value: i64,
    pub checkpoint_dir: &'a dyn Fn(JobId) -> String,
}

impl Records {
    /// Queues a job under the next id: its record, payload, first history entry and the
    /// counter, in one batch. Returns the effects (without the job itself: the shell takes it
    /// into memory only once the batch is flushed) and the job.
    pub fn submit(&self, new: NewJob<'_>, now: Millis) -> (Effects, Job) {
        let id = JobId(self.next_job_id);
        let held = new.spec.hold;
        let new_from = new.from_host;
        let job = Job {
            id,
            state: if held {
                JobState::Held
            } else {
                JobState::Pending
            },
            reason: if held { "Held".into() } else { String::new() },
            checkpoint_dir: (new.checkpoint_dir)(id),
            spec: Arc::new(new.spec),
            owner: Arc::new(new.owner),
            tier_value: new.tier_value,
            alloc: vec![],
            restart_count: 0,
            exit_code: None,
            signal: None,
            submit_time: now,
            start_time: None,
            end_time: None,
            launched: false,
            grace_secs: new.grace_secs,
            stop: None,
            last_checkpoint: None,
            parts: Default::default(),
            launch_attempts: 0,
            queued_at: (!held).then_some(now),
            array: None,
        };
        let mut fx = Effects {
            // A held job cannot start: no pass needed until it is released.
            wake: !held,
            next_job_id: Some(id.0 + 1),
            ..Effects::default()
        };
        fx.batch.put_job(&job);
        fx.batch.put_payload(id, &new.payload);
        fx.batch.set_next_job_id(id.0 + 1);
        fx.event(
            id,
            now,
            "submitted",
            match &new_from {
                Some(host) => format!(
                    "by {} from {host} to tier {}",
                    job.owner.user, job.spec.tier
                ),
                None => format!("by {} to tier {}", job.owner.user, job.spec.tier),
            },
        );
        fx.changed.push(id);
        (fx, job)
    }
}
