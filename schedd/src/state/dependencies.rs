//! Dependencies (`--dependency afterok:12`): resolved at submit into the job ids they name,
//! and what the core needs to evaluate them each pass: how the finished jobs they name ended
//! ([`EndedTargets`], handed to the core as `Snapshot::ended`). Unfinished targets are in the
//! records themselves; finished jobs are only in the store, so their end states are kept here,
//! for the jobs some live job's dependency names and no others.

use super::client_events::FinishedLookup;
use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::array::merge_targets;
use ysched_common::{
    limits, DepClause, Dependency, DependencyRequest, Job, JobId, JobSpec, JobState,
};

/// A dependency's targets with how each had ended at submit (`None`: not finished, or not
/// known at all).
pub type TargetStates = Vec<(JobId, Option<JobState>)>;

/// A job's state in the store (`None`: no such job).
pub type StateLookup<'a> = &'a dyn Fn(JobId) -> ApiResult<Option<JobState>>;

impl Records {
    /// Resolves a submitted `--dependency` into job ids: every target must be a known job
    /// (active, or finished in the store: `finished`); an array's id stands for all its
    /// tasks, `12_7` for one. Jobs of other users may be named (every user sees every job).
    /// Returns the dependency for the spec and its targets' states (see
    /// [`Effects::dependency_targets`]; `state_of`: a job's state in the store, cheaper than
    /// its whole record for the tasks of a finished array).
    pub fn resolve_dependency(
        &self,
        request: &DependencyRequest,
        finished: FinishedLookup<'_>,
        state_of: StateLookup<'_>,
    ) -> ApiResult<(Dependency, TargetStates)> {
        let mut clauses = Vec::with_capacity(request.clauses.len());
        let mut states: BTreeMap<JobId, Option<JobState>> = BTreeMap::new();
        let text = ysched_common::text::excerpt(&request.text, 60);
        let mut named = 0u64;
        for clause in &request.clauses {
            let mut jobs = Vec::new();
            for target in merge_targets(&clause.targets) {
                let resolved = self.resolve(&target, finished).map_err(|e| match e {
                    ApiError::NotFound(why) => {
                        let detail = why
                            .split_once(" (")
                            .map(|(_, d)| format!(" ({d}"))
                            .unwrap_or_default();
                        ApiError::Invalid(format!(
                            "--dependency '{text}': dependency on unknown job {}{detail}",
                            ysched_common::text::excerpt(&target.to_string(), 40)
                        ))
                    }
                    other => other,
                })?;
                // An array counts its tasks: the dependency keeps (and the core looks at)
                // every one of them.
                named += resolved.ids.len() as u64;
                limits::DEPENDENCY_JOBS
                    .check_count_with(named, self.limits.dependency_jobs)
                    .map_err(|e| ApiError::Invalid(format!("--dependency '{text}': {e}")))?;
                jobs.extend(resolved.ids);
            }
            jobs.sort_unstable();
            jobs.dedup();
            for id in &jobs {
                if !states.contains_key(id) {
                    let state = if self.jobs.contains_key(id) {
                        None
                    } else {
                        state_of(*id)?.filter(|s| s.is_terminal())
                    };
                    states.insert(*id, state);
                }
            }
            clauses.push(DepClause {
                kind: clause.kind,
                jobs,
            });
        }
        let dependency = Dependency {
            any: request.any,
            clauses,
            singleton: request.singleton,
            text: request.text.clone(),
        };
        Ok((dependency, states.into_iter().collect()))
    }
}

/// The end states of the finished jobs that live jobs' dependencies name: the core's
/// `Snapshot::ended`. Kept up to date event by event ([`EndedTargets::observe`], before each
/// commit), rebuilt at start ([`EndedTargets::rebuild`]), and trimmed of jobs no live
/// dependency names any more ([`EndedTargets::collect_garbage`], now and then: it walks the
/// records once).
#[derive(Debug, Default)]
pub struct EndedTargets {
    /// Every job some live dependency names (a superset between collections).
    named: BTreeSet<JobId>,
    /// The targets of submits written but not yet in memory (by their first job id): a
    /// collection must keep them although no record names them yet.
    pinned: BTreeMap<JobId, Vec<JobId>>,
    /// How the named jobs that have finished ended. Shared with the pass that copied it.
    ended: Arc<BTreeMap<JobId, JobState>>,
    /// A job with a dependency has left memory since the last collection.
    garbage: bool,
}

impl EndedTargets {
    /// From the records at start: the targets of every live job's dependency (each shared
    /// spec looked at once), with the end states of the finished ones (`finished`: the
    /// store's record of a job not in memory).
    pub fn rebuild<E, J: Borrow<Job>>(
        jobs: &BTreeMap<JobId, J>,
        mut finished: impl FnMut(JobId) -> Result<Option<JobState>, E>,
    ) -> Result<EndedTargets, E> {
        let named = named_by(jobs);
        let mut ended = BTreeMap::new();
        for id in &named {
            if jobs.contains_key(id) {
                continue;
            }
            if let Some(state) = finished(*id)?.filter(|s| s.is_terminal()) {
                ended.insert(*id, state);
            }
        }
        Ok(EndedTargets {
            named,
            pinned: BTreeMap::new(),
            ended: Arc::new(ended),
            garbage: false,
        })
    }

    /// Takes note of what an event does, before it is committed: a submit's targets become
    /// named (and pinned until [`EndedTargets::settled`]), a named job that ends is recorded
    /// with its state, and a job with a dependency that ends makes a collection due.
    pub fn observe(&mut self, effects: &Effects, submitted: Option<JobId>) {
        if !effects.dependency_targets.is_empty() {
            for (id, state) in &effects.dependency_targets {
                self.named.insert(*id);
                if let Some(state) = state {
                    Arc::make_mut(&mut self.ended).insert(*id, *state);
                }
            }
            if let Some(first) = submitted {
                self.pinned.insert(
                    first,
                    effects
                        .dependency_targets
                        .iter()
                        .map(|(id, _)| *id)
                        .collect(),
                );
            }
        }
        let mut last_spec: Option<*const JobSpec> = None;
        for job in effects.jobs.iter().filter(|j| j.state.is_terminal()) {
            if self.named.contains(&job.id) {
                Arc::make_mut(&mut self.ended).insert(job.id, job.state);
            }
            // The tasks of an array share their spec: looked at once per run of them.
            let spec = Arc::as_ptr(&job.spec);
            if last_spec != Some(spec) {
                last_spec = Some(spec);
                if job.spec.dependency.is_some() {
                    self.garbage = true;
                }
            }
        }
    }

    /// The submit whose first job is `first` is in memory: its records name its targets now.
    pub fn settled(&mut self, first: JobId) {
        self.pinned.remove(&first);
    }

    /// Whether jobs with dependencies have ended since the last collection.
    pub fn garbage_due(&self) -> bool {
        self.garbage
    }

    /// Forgets the jobs that no live job's dependency names any more (one walk over the
    /// records, each shared spec looked at once).
    pub fn collect_garbage(&mut self, jobs: &crate::core::JobMap) {
        let mut named = named_by(jobs);
        named.extend(self.pinned.values().flatten().copied());
        if self.ended.keys().any(|id| !named.contains(id)) {
            Arc::make_mut(&mut self.ended).retain(|id, _| named.contains(id));
        }
        self.named = named;
        self.garbage = false;
    }

    /// The end states, for a pass (shared, not copied).
    pub fn ended(&self) -> Arc<BTreeMap<JobId, JobState>> {
        Arc::clone(&self.ended)
    }

    /// The jobs whose end state live dependencies may still need (named by a job in memory,
    /// or by a submit not yet there): the history keeps them past its retention.
    pub fn needed(&self) -> BTreeSet<JobId> {
        let mut needed = self.named.clone();
        needed.extend(self.pinned.values().flatten().copied());
        needed
    }

    /// How many finished jobs are kept (for tests and logs).
    pub fn len(&self) -> usize {
        self.ended.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ended.is_empty()
    }

    /// Whether a live dependency names `id` (as far as known: a superset between collections).
    pub fn is_named(&self, id: JobId) -> bool {
        self.named.contains(&id)
    }
}

/// Every job the dependencies of `jobs` name, each spec looked at once (the tasks of an
/// array share theirs).
fn named_by<J: Borrow<Job>>(jobs: &BTreeMap<JobId, J>) -> BTreeSet<JobId> {
    let mut seen: BTreeSet<*const JobSpec> = BTreeSet::new();
    let mut named = BTreeSet::new();
    for job in jobs.values().map(Borrow::borrow) {
        let Some(dep) = &job.spec.dependency else {
            continue;
        };
        if seen.insert(Arc::as_ptr(&job.spec)) {
            named.extend(dep.targets());
        }
    }
    named
}
