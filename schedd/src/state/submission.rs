//! A submit: a job, or every task of an array, queued under the next ids in one batch.

use super::history::JobEventKind;
use super::{Effects, Records};
use std::sync::Arc;
use ysched_common::array::ArrayTask;
use ysched_common::time::Millis;
use ysched_common::{HeldBy, Job, JobId, JobState, Owner};

/// A validated submit: the spec with defaults resolved, its payload and grace, the tier's
/// value, and a way to name the checkpoint directory once the id is known.
pub struct NewJob<'a> {
    pub owner: Owner,
    /// The node whose agent relayed the submit; `None`: schedd's own socket.
    pub from_host: Option<String>,
    pub spec: ysched_common::JobSpec,
    pub payload: super::commands::Payload,
    pub grace_secs: u32,
    pub tier_value: i64,
    pub checkpoint_dir: &'a dyn Fn(JobId) -> String,
}

impl Records {
    /// Queues a job under the next id, or, for an array (`spec.array`), one job per task
    /// under consecutive ids from the next one (the array's id is the first task's): the
    /// records (for an array, one record of all its tasks), the payload (stored once, under
    /// the array's id: the tasks share it), the first history entry (for an array, one under
    /// its id) and the counter, in one batch. The tasks share one spec and one
    /// owner. `--hold` holds every task. The jobs are the effects' `submitted`: they enter
    /// memory only once the batch is flushed.
    pub fn submit(&self, new: NewJob<'_>, now: Millis) -> Effects {
        let first = JobId(self.next_job_id);
        let held = new.spec.hold;
        let tasks = new.spec.array.as_ref().map(|a| a.tasks());
        let count = tasks.as_ref().map_or(1, |t| t.len().max(1)) as u64;
        let spec = Arc::new(new.spec);
        let owner = Arc::new(new.owner);
        let job = |id: JobId, array: Option<ArrayTask>| Job {
            id,
            state: if held {
                JobState::Held
            } else {
                JobState::Pending
            },
            // A submit's hold is its user's, whoever submits: they may release it.
            reason: if held {
                HeldBy::User.reason().into()
            } else {
                String::new()
            },
            held_by: HeldBy::User,
            checkpoint_dir: (new.checkpoint_dir)(id),
            spec: Arc::clone(&spec),
            owner: Arc::clone(&owner),
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
            run_ms_before: 0,
            array,
        };
        let jobs: Vec<Job> = match &tasks {
            Some(tasks) => tasks
                .iter()
                .enumerate()
                .map(|(i, task)| {
                    let array = ArrayTask {
                        array_id: first,
                        task: *task,
                    };
                    job(JobId(first.0 + i as u64), Some(array))
                })
                .collect(),
            None => vec![job(first, None)],
        };
        let next = first.0 + count;
        let mut fx = Effects {
            // A held job cannot start: no pass needed until it is released.
            wake: !held,
            next_job_id: Some(next),
            ..Effects::default()
        };
        if let Some(array) = &spec.array {
            // The tasks as one history entry (see `Store::job_events`), and written as one
            // record (`store::Batch::put_array`): 10,000 tasks are a handful of writes.
            fx.event(
                first,
                now,
                JobEventKind::Submitted,
                format!(
                    "{} to tier {}: array {first}_[{}] of {} tasks",
                    who(&owner, new.from_host.as_deref()),
                    spec.tier,
                    array.describe(),
                    jobs.len()
                ),
            );
            for job in &jobs {
                fx.mark_changed(job.id);
            }
        } else {
            fx.event(
                first,
                now,
                JobEventKind::Submitted,
                format!(
                    "{} to tier {}",
                    who(&owner, new.from_host.as_deref()),
                    spec.tier
                ),
            );
            fx.mark_changed(first);
        }
        fx.payloads.push((first, new.payload));
        fx.submitted = jobs;
        fx
    }
}

/// `by alice`, or `by alice from login1` for a relayed submit.
fn who(owner: &Owner, from_host: Option<&str>) -> String {
    match from_host {
        Some(host) => format!("by {} from {host}", owner.user),
        None => format!("by {}", owner.user),
    }
}
