//! Active jobs by tier and state, and the GPUs they hold, counted event by event.
//!
//! Kept up to date as events commit, so that a scrape need not walk the jobs.

use std::collections::BTreeMap;
use ysched_common::{Job, JobState};

/// The states of jobs that are not finished (finished ones are counted by
/// `ysched_jobs_ended_total`).
pub(super) const ACTIVE: [JobState; 4] = [
    JobState::Pending,
    JobState::Held,
    JobState::Running,
    JobState::Preempting,
];

/// The jobs in memory (not yet finished) by tier and state, and the GPUs those that hold
/// resources hold: kept up to date event by event, so that a scrape need not walk the jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveJobs {
    /// Tier → jobs in each of the [`ACTIVE`] states, in that order.
    pub(super) jobs: BTreeMap<String, [u64; ACTIVE.len()]>,
    /// Node → GPU index → jobs holding it (one, unless the records disagree with themselves).
    pub(super) held: BTreeMap<String, BTreeMap<u32, u32>>,
}

impl ActiveJobs {
    /// Counts `jobs` from scratch (at start; and the reference for tests).
    pub fn count<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> ActiveJobs {
        let mut active = ActiveJobs::default();
        for job in jobs {
            active.add(job);
        }
        active
    }

    /// A version of a job entered memory (a final one leaves nothing).
    pub(super) fn add(&mut self, job: &Job) {
        let Some(slot) = ACTIVE.iter().position(|s| *s == job.state) else {
            return;
        };
        let tier = job.spec.tier.as_str();
        match self.jobs.get_mut(tier) {
            Some(counts) => counts[slot] += 1,
            None => {
                let mut counts = [0; ACTIVE.len()];
                counts[slot] = 1;
                self.jobs.insert(tier.to_string(), counts);
            }
        }
        if job.state.holds_resources() {
            for (node, gpu) in job.gpus_held() {
                if !self.held.contains_key(node) {
                    self.held.insert(node.to_string(), BTreeMap::new());
                }
                if let Some(gpus) = self.held.get_mut(node) {
                    *gpus.entry(gpu).or_default() += 1;
                }
            }
        }
    }

    /// A version of a job left memory (replaced, or finished).
    pub(super) fn remove(&mut self, job: &Job) {
        let Some(slot) = ACTIVE.iter().position(|s| *s == job.state) else {
            return;
        };
        if let Some(counts) = self.jobs.get_mut(job.spec.tier.as_str()) {
            counts[slot] = counts[slot].saturating_sub(1);
            if counts.iter().all(|n| *n == 0) {
                self.jobs.remove(job.spec.tier.as_str());
            }
        }
        if job.state.holds_resources() {
            for (node, gpu) in job.gpus_held() {
                let Some(gpus) = self.held.get_mut(node) else {
                    continue;
                };
                if let Some(n) = gpus.get_mut(&gpu) {
                    *n -= 1;
                    if *n == 0 {
                        gpus.remove(&gpu);
                    }
                }
                if gpus.is_empty() {
                    self.held.remove(node);
                }
            }
        }
    }
}
