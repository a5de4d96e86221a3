//! Jobs as users name them (`12`, `12_7`, `12_[1-5]`; see [`JobTarget`]) resolved into the
//! job ids they stand for: the one place that knows what a name means.
//!
//! - `12`: job 12; when job 12 is the first task of an array (its `array.array_id` is 12),
//!   every task of the array.
//! - `12_7`: task 7 of array 12 (its job id from [`ysched_common::ArraySpec::job_of`]'s rule:
//!   the array's id plus the task's place in the sorted task list).
//! - `12_[1-5,9]`: those tasks, each of which must exist.
//!
//! A job is found among the active records first, then in the store (finished jobs).

use super::client_events::FinishedLookup;
use super::Records;
use crate::error::{ApiError, ApiResult};
use std::sync::Arc;
use ysched_common::array::{fold_tasks, ArrayTask, JobTarget};
use ysched_common::{JobId, JobSpec};

/// What a name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// As the user named it (for messages and the audit log).
    pub target: JobTarget,
    /// The jobs it names, in id order (for an array, finished tasks too).
    pub ids: Vec<JobId>,
    /// The array whose tasks it names (all of them, or those asked for); `None`: one job
    /// named by its id (a plain job, or a task named by its own job id).
    pub array: Option<JobId>,
}

impl Resolved {
    /// The one job this names, for requests about one job (`yctl show job`, `yctl requeue`,
    /// `ysub --wait`): a name of several tasks is refused, naming the syntax for one.
    pub fn single(&self, what: &str) -> ApiResult<JobId> {
        match self.ids.as_slice() {
            [id] => Ok(*id),
            _ => {
                let example = match &self.target.tasks {
                    Some(tasks) => format!("{}_{}", self.target.id, tasks[0]),
                    None => format!("{}_<task>", self.target.id),
                };
                let what_it_is = match &self.target.tasks {
                    None => format!(
                        "job {} is an array of {} tasks",
                        self.target.id,
                        self.ids.len()
                    ),
                    Some(_) => format!("{} names {} tasks", self.target, self.ids.len()),
                };
                Err(ApiError::Invalid(format!(
                    "{what_it_is}: {what} one task at a time, as {example}"
                )))
            }
        }
    }

    /// Whether it names every task of an array, by the array's id.
    pub fn is_whole_array(&self) -> bool {
        self.array.is_some() && self.target.tasks.is_none()
    }
}

/// Parses a name as users type it; a bad one is refused with what was expected.
pub fn parse_target(text: &str) -> ApiResult<JobTarget> {
    JobTarget::parse(text).map_err(ApiError::Invalid)
}

/// A plain id, as the `job_ids` fields of requests carry them.
pub fn plain_target(id: u64) -> JobTarget {
    JobTarget {
        id: JobId(id),
        tasks: None,
    }
}

/// The refusal for a name that matches no job.
pub fn not_found(target: &JobTarget, detail: &str) -> ApiError {
    match (&target.tasks, detail.is_empty()) {
        (None, _) => ApiError::NotFound(format!("invalid job id {}: no such job", target.id)),
        (Some(_), true) => ApiError::NotFound(format!("job {target} not found")),
        (Some(_), false) => ApiError::NotFound(format!("job {target} not found ({detail})")),
    }
}

/// The job ids of `tasks` (sorted or not) in the array `array_id` whose tasks are `all`
/// (sorted, as [`ysched_common::ArraySpec::tasks`] gives them): the array's id plus each
/// task's place. A task the array does not have is returned as the error.
pub fn task_ids(array_id: JobId, all: &[u32], tasks: &[u32]) -> Result<Vec<JobId>, u32> {
    tasks
        .iter()
        .map(|t| {
            all.binary_search(t)
                .map(|i| JobId(array_id.0 + i as u64))
                .map_err(|_| *t)
        })
        .collect()
}

impl Records {
    /// What `target` names, looking in memory first and then at finished jobs. An unknown
    /// job, an array without the task asked for, or a task list after a job that is no array
    /// is `NotFound`, naming it.
    pub fn resolve(&self, target: &JobTarget, finished: FinishedLookup<'_>) -> ApiResult<Resolved> {
        let id = target.id;
        let (array, spec): (Option<ArrayTask>, Arc<JobSpec>) = match self.jobs.get(&id) {
            Some(j) => (j.array, Arc::clone(&j.spec)),
            None => match finished(id)? {
                Some(j) => (j.array, j.spec),
                None => return Err(not_found(target, "")),
            },
        };
        // The first task of an array stands for the array.
        let head = array.filter(|a| a.array_id == id).and(spec.array.as_ref());
        match (&target.tasks, head) {
            (None, None) => Ok(Resolved {
                target: target.clone(),
                ids: vec![id],
                array: None,
            }),
            (None, Some(spec)) => Ok(Resolved {
                target: target.clone(),
                ids: (0..u64::from(spec.count))
                    .map(|i| JobId(id.0 + i))
                    .collect(),
                array: Some(id),
            }),
            (Some(tasks), Some(spec)) => {
                let all = spec.tasks();
                let mut ids = task_ids(id, &all, tasks).map_err(|missing| {
                    ApiError::NotFound(format!(
                        "job {id}_{missing} not found (array {id} has tasks {})",
                        fold_tasks(&all)
                    ))
                })?;
                ids.sort_unstable();
                ids.dedup();
                Ok(Resolved {
                    target: target.clone(),
                    ids,
                    array: Some(id),
                })
            }
            (Some(_), None) => Err(not_found(
                target,
                &match array {
                    Some(a) => format!(
                        "job {id} is task {}_{} of array {}, not an array",
                        a.array_id, a.task, a.array_id
                    ),
                    None => format!("job {id} is not an array"),
                },
            )),
        }
    }

    /// [`Records::resolve`] for each name, in order.
    pub fn resolve_all(
        &self,
        targets: &[JobTarget],
        finished: FinishedLookup<'_>,
    ) -> ApiResult<Vec<Resolved>> {
        targets.iter().map(|t| self.resolve(t, finished)).collect()
    }
}
