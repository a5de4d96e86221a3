//! Each user's active jobs, counted as jobs come and go, and the limits on them that a submit
//! is checked against.

use super::Records;
use std::collections::BTreeMap;
use ysched_common::Job;

/// The limits the state machine enforces, from the config.
#[derive(Debug, Clone)]
pub struct RecordLimits {
    /// `limits::max_jobs_named`: the most jobs one request may name.
    pub jobs_named: u64,
    /// `limits::max_dependency_jobs`: the most jobs one dependency may stand for.
    pub dependency_jobs: u64,
    /// `scheduler.max_jobs_per_user`.
    pub jobs_per_user: u64,
    /// `tiers.NAME.max_jobs_per_user`, for the tiers that set one.
    pub jobs_per_user_in_tier: BTreeMap<String, u64>,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            jobs_named: u64::MAX,
            dependency_jobs: u64::MAX,
            jobs_per_user: u64::MAX,
            jobs_per_user_in_tier: BTreeMap::new(),
        }
    }
}

impl RecordLimits {
    pub fn from_config(config: &ysched_common::Config) -> RecordLimits {
        RecordLimits {
            jobs_named: ysched_common::limits::max_jobs_named(config),
            dependency_jobs: ysched_common::limits::max_dependency_jobs(config),
            jobs_per_user: u64::from(config.scheduler.max_jobs_per_user),
            jobs_per_user_in_tier: config
                .tiers
                .iter()
                .filter(|(_, t)| t.max_jobs_per_user > 0)
                .map(|(name, t)| (name.clone(), u64::from(t.max_jobs_per_user)))
                .collect(),
        }
    }
}

/// One user's active jobs: all of them, and per tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserJobs {
    pub total: u64,
    pub per_tier: BTreeMap<String, u64>,
}

/// Counts `job` in (`add`) or out of its owner's active jobs in `counts`.
pub(super) fn count_active(counts: &mut BTreeMap<u32, UserJobs>, job: &Job, add: bool) {
    let uid = job.owner.uid;
    let user = counts.entry(uid).or_default();
    if add {
        user.total += 1;
        *user.per_tier.entry(job.spec.tier.clone()).or_default() += 1;
        return;
    }
    user.total = user.total.saturating_sub(1);
    if let Some(n) = user.per_tier.get_mut(&job.spec.tier) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            user.per_tier.remove(&job.spec.tier);
        }
    }
    if user.total == 0 {
        counts.remove(&uid);
    }
}

impl Records {
    pub(super) fn count_active(&mut self, job: &Job, add: bool) {
        count_active(&mut self.active_per_user, job, add);
        if !add && !self.active_per_user.contains_key(&job.owner.uid) {
            self.owners.remove(&job.owner.uid);
        }
    }

    /// Records whose jobs were put in place as a whole (tests' literals): the per-user
    /// counts made from them.
    #[cfg(test)]
    pub(crate) fn with_active_jobs(mut self) -> Records {
        self.active_per_user = self.recount_active();
        self
    }

    /// User `uid`'s active jobs (queued, held, running, being stopped), in all and per tier.
    pub fn active_jobs_of(&self, uid: u32) -> UserJobs {
        self.active_per_user.get(&uid).cloned().unwrap_or_default()
    }

    /// The per-user counts made afresh from `jobs` (tests check the kept ones against it).
    pub fn recount_active(&self) -> BTreeMap<u32, UserJobs> {
        let mut counts = BTreeMap::new();
        for job in self.jobs.values() {
            count_active(&mut counts, job, true);
        }
        counts
    }

    /// The kept per-user counts.
    pub fn kept_active_counts(&self) -> &BTreeMap<u32, UserJobs> {
        &self.active_per_user
    }

    /// Refuses a submit of `count` jobs to `tier` by `caller` when it would take them past
    /// `scheduler.max_jobs_per_user` or the tier's own `max_jobs_per_user` (administrators
    /// are not limited). The whole submit is refused: an array is never cut.
    pub fn check_jobs_per_user(
        &self,
        caller: &ysched_common::Caller,
        tier: &str,
        count: u64,
    ) -> crate::error::ApiResult<()> {
        if caller.is_admin() {
            return Ok(());
        }
        let mine = self.active_jobs_of(caller.owner.uid);
        let what = if count == 1 {
            "this job".to_string()
        } else {
            format!("this array of {count}")
        };
        let user = &caller.owner.user;
        if mine.total.saturating_add(count) > self.limits.jobs_per_user {
            return Err(crate::error::ApiError::Invalid(format!(
                "user {user} has {} active jobs; {what} would exceed \
                 scheduler.max_jobs_per_user = {}",
                mine.total, self.limits.jobs_per_user
            )));
        }
        if let Some(&limit) = self.limits.jobs_per_user_in_tier.get(tier) {
            let in_tier = mine.per_tier.get(tier).copied().unwrap_or(0);
            if in_tier.saturating_add(count) > limit {
                return Err(crate::error::ApiError::Invalid(format!(
                    "user {user} has {in_tier} active jobs in tier '{tier}'; {what} would \
                     exceed tiers.{tier}.max_jobs_per_user = {limit}"
                )));
            }
        }
        Ok(())
    }

    /// Counts the jobs of a submit whose batch is written but not yet durable as their
    /// owner's, so that a concurrent submit sees them; they enter `jobs` by
    /// [`Records::insert_reserved_jobs`], or are counted out by [`Records::release_reserved`]
    /// when the flush fails.
    pub(crate) fn reserve_active(&mut self, jobs: &[Job]) {
        for job in jobs {
            count_active(&mut self.active_per_user, job, true);
        }
    }

    pub(crate) fn release_reserved(&mut self, jobs: &[Job]) {
        for job in jobs {
            self.count_active(job, false);
        }
    }
}
