//! What holds a job back before any fit ([`HeldBack`]): its `--begin` time, its dependency
//! (evaluated once per pass per spec), `singleton`, and its array's `%N` limit.

use std::collections::BTreeMap;

use ysched_common::dependency::{DepStatus, Dependency, TargetState};
use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState};

use super::Pass;
use crate::core::{JobMap, PendingReason};

/// Why a job is not considered for room at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldBack {
    /// Its `--begin` time has not come.
    BeginTime,
    /// Its dependency may still be met.
    Dependency,
    /// Its dependency can never be met.
    NeverSatisfied,
    /// A `singleton` while a job of its name and user runs or was placed in the pass.
    Singleton,
    /// Its array's `%N` tasks run or were placed in the pass.
    ArrayLimit,
}

impl HeldBack {
    /// The pending reason, as Slurm names it.
    pub(crate) fn reason(self) -> PendingReason {
        match self {
            HeldBack::BeginTime => PendingReason::BeginTime,
            HeldBack::Dependency | HeldBack::Singleton => PendingReason::Dependency,
            HeldBack::NeverSatisfied => PendingReason::DependencyNeverSatisfied,
            HeldBack::ArrayLimit => PendingReason::JobArrayTaskLimit,
        }
    }
}

impl<'a> Pass<'a> {
    /// Why `job` is not considered for room at all, if it is not: its dependency, `singleton`,
    /// or its array's `%N` limit (see the module doc).
    pub(crate) fn held_back(&mut self, job: &'a Job) -> Option<HeldBack> {
        if job
            .spec
            .begin_unix_secs
            .is_some_and(|begin| begin_ms(begin) > self.now)
        {
            return Some(HeldBack::BeginTime);
        }
        if let Some(dependency) = &job.spec.dependency {
            match self.dependency_status(job, dependency) {
                DepStatus::Satisfied => {}
                DepStatus::Waiting => return Some(HeldBack::Dependency),
                DepStatus::Never => return Some(HeldBack::NeverSatisfied),
            }
            if dependency.singleton && self.singleton_taken(job) {
                return Some(HeldBack::Singleton);
            }
        }
        let over = limited_array(job).is_some_and(|array| {
            let max = job.spec.array.as_ref().map_or(0, |a| a.max_running);
            self.array_tasks.get(&array).copied().unwrap_or(0) >= max
        });
        over.then_some(HeldBack::ArrayLimit)
    }

    /// The status of `job`'s dependency, evaluated once per pass per spec.
    fn dependency_status(&mut self, job: &Job, dependency: &Dependency) -> DepStatus {
        if dependency.clauses.is_empty() {
            return DepStatus::Satisfied;
        }
        let key = std::sync::Arc::as_ptr(&job.spec) as usize;
        if let Some(status) = self.dependencies.get(&key) {
            return *status;
        }
        let (jobs, ended) = (self.jobs, self.ended);
        let status = dependency.status(|id| target_state(jobs, ended, id));
        self.dependencies.insert(key, status);
        status
    }

    /// Another job of `job`'s name and user holds resources, or was placed (or let preempt)
    /// earlier in this pass.
    fn singleton_taken(&mut self, job: &'a Job) -> bool {
        let (jobs, claimed) = (self.jobs, &self.claimed);
        let taken = self.singletons.get_or_insert_with(|| {
            jobs.values()
                .map(|j| &**j)
                .filter(|j| j.state.holds_resources())
                .chain(claimed.iter().copied())
                .map(singleton_key)
                .collect()
        });
        taken.contains(&singleton_key(job))
    }
}

/// `--begin` (seconds since the epoch) in the pass's milliseconds.
pub(crate) fn begin_ms(begin_unix_secs: u64) -> Millis {
    i64::try_from(begin_unix_secs)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000)
}

/// The array whose `%N` limit applies to `job`, if it is a task of one with a limit.
pub(super) fn limited_array(job: &Job) -> Option<JobId> {
    let task = job.array.as_ref()?;
    let limited = job.spec.array.as_ref().is_some_and(|a| a.max_running > 0);
    limited.then_some(task.array_id)
}

/// What `singleton` compares: the user and the job name.
pub(super) fn singleton_key(job: &Job) -> (&str, &str) {
    (job.owner.user.as_str(), job.spec.name.as_str())
}

/// How a dependency sees job `id`: from its record while it is not finished, from how it
/// ended once it is; a job known to neither is gone.
fn target_state(jobs: &JobMap, ended: &BTreeMap<JobId, JobState>, id: JobId) -> TargetState {
    if let Some(job) = jobs.get(&id) {
        TargetState::of(job.state, job.has_run())
    } else if let Some(state) = ended.get(&id) {
        TargetState::Ended(*state)
    } else {
        TargetState::Gone
    }
}
