//! The queue order of pending jobs.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState};

/// A job's place in the queue; the smaller key goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    /// Higher tiers first. The value was frozen at submit, so editing a tier's config later
    /// does not reshuffle jobs already queued.
    tier_value: Reverse<i64>,
    /// Within a tier, first come, first served.
    submit_time: Millis,
    /// Ids are never reused, so this makes the order total.
    id: JobId,
}

pub(crate) fn queue_key(job: &Job) -> QueueKey {
    QueueKey {
        tier_value: Reverse(job.tier_value),
        submit_time: job.submit_time,
        id: job.id,
    }
}

/// The PENDING jobs in queue order. HELD jobs wait for a release and are not queued at all.
pub(crate) fn pending_in_order(jobs: &BTreeMap<JobId, Job>) -> Vec<&Job> {
    let mut pending: Vec<&Job> = jobs
        .values()
        .filter(|j| j.state == JobState::Pending)
        .collect();
    pending.sort_by_key(|j| queue_key(j));
    pending
}
