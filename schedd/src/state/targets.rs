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
//!
//! Ranges are never expanded past the array's own tasks: a name costs O(its text) plus
//! O(the tasks it matches), so `12_[0-4294967294]` costs what the array has. A request's
//! names of one job are merged first ([`merge_targets`]) and a request names at most
//! [`limits::max_jobs_named`] jobs.

use super::client_events::FinishedLookup;
use super::Records;
use crate::error::{ApiError, ApiResult};
use std::sync::Arc;
use ysched_common::array::{merge_targets, ArraySpec, ArrayTask, JobTarget, TaskSet};
use ysched_common::{limits, JobId, JobSpec};

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
                let example = match self.target.first_task() {
                    Some(task) => format!("{}_{task}", self.target.id),
                    None => format!("{}_<task>", self.target.id),
                };
                let what_it_is = match &self.target.tasks {
                    None => format!(
                        "job {} is an array of {} tasks",
                        self.target.id,
                        self.ids.len()
                    ),
                    Some(_) => format!(
                        "{} names {} tasks",
                        ysched_common::text::excerpt(&self.target.to_string(), 60),
                        self.ids.len()
                    ),
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

/// Parses the names of one request: at most [`limits::TARGETS`] of them (counting the plain
/// ids `extra` besides), each as [`parse_target`]. Checked before the state lock.
pub fn parse_targets(texts: &[String], extra: usize) -> ApiResult<Vec<JobTarget>> {
    limits::TARGETS
        .check_count((texts.len() + extra) as u64)
        .map_err(ApiError::Invalid)?;
    texts.iter().map(|t| parse_target(t)).collect()
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
    let shown = ysched_common::text::excerpt(&target.to_string(), 60);
    match (&target.tasks, detail.is_empty()) {
        (None, _) => ApiError::NotFound(format!("invalid job id {}: no such job", target.id)),
        (Some(_), true) => ApiError::NotFound(format!("job {shown} not found")),
        (Some(_), false) => ApiError::NotFound(format!("job {shown} not found ({detail})")),
    }
}

/// The places (job id minus the array's id) of the tasks `ranges` name in `array`, in
/// order, each once; a task the array does not have is returned as the error. Costs
/// O(ranges log ranges) plus O(the array's span / 64) where ranges overlap, plus O(matched
/// tasks · log runs): never more than the array has, whatever the ranges say.
pub fn task_places(array: &ArraySpec, target: &JobTarget) -> Result<Vec<u64>, u32> {
    let set: &TaskSet = array.task_set();
    let (Some(lo), Some(hi), Some(ranges)) = (set.first(), set.last(), target.tasks.as_ref())
    else {
        return Err(target.first_task().unwrap_or(0));
    };
    if let Some(missing) = target.first_outside(lo, hi) {
        return Err(missing);
    }
    // Within the array's span: their union is no larger than the span.
    let asked = TaskSet::union(ranges).map_err(|_| lo)?;
    asked
        .iter()
        .map(|task| set.place_of(task).ok_or(task))
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
            (Some(_), Some(spec)) => {
                let places = task_places(spec, target).map_err(|missing| {
                    ApiError::NotFound(format!(
                        "job {id}_{missing} not found (array {id} has tasks {})",
                        spec.task_set().describe(80)
                    ))
                })?;
                Ok(Resolved {
                    target: target.clone(),
                    ids: places.into_iter().map(|p| JobId(id.0 + p)).collect(),
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

    /// [`Records::resolve`] for each name, the names of one job merged first (see
    /// [`merge_targets`]); refused when they name more than `limits.jobs_named` jobs in all.
    pub fn resolve_all(
        &self,
        targets: &[JobTarget],
        finished: FinishedLookup<'_>,
    ) -> ApiResult<Vec<Resolved>> {
        let mut named = 0u64;
        merge_targets(targets)
            .iter()
            .map(|t| {
                let resolved = self.resolve(t, finished)?;
                named += resolved.ids.len() as u64;
                self.check_jobs_named(named)?;
                Ok(resolved)
            })
            .collect()
    }

    /// Refuses a request that names more than `limits.jobs_named` jobs.
    pub fn check_jobs_named(&self, named: u64) -> ApiResult<()> {
        limits::JOBS_NAMED
            .check_count_with(named, self.limits.jobs_named)
            .map_err(ApiError::Invalid)
    }
}
