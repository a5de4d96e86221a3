//! The queue order of pending jobs: tier, then the account's fair-share factor, then submit
//! time, then id.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState};

use super::JobMap;

/// Each account's fair-share factor, from 0 to 1: 1 for an account that used nothing lately,
/// smaller the more it used beyond its shares. Computed outside the core (from the usage
/// book, `crate::fair_share`) and handed in as data. Inside one tier, a higher factor goes
/// first. An account not listed counts as 1, so an empty table keeps the order of submit time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FairShare {
    factors: BTreeMap<String, f64>,
    /// The sort keys of the accounts whose names fit in [`ShortName`], by name: a pass looks
    /// up every pending job's account, and this finds it among a few cache lines of integers
    /// rather than by comparing strings on the heap.
    short: Vec<(ShortName, u64)>,
}

/// No fair share at all: [`super::Policy::new`]'s default.
static NO_FAIR_SHARE: FairShare = FairShare {
    factors: BTreeMap::new(),
    short: Vec::new(),
};

/// A name of at most 16 bytes as its bytes, zero-padded, read as one big-endian number, and its
/// length: equal exactly when the names are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ShortName(u128, usize);

impl ShortName {
    fn of(name: &str) -> Option<Self> {
        let bytes = name.as_bytes();
        let mut padded = [0u8; 16];
        padded.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(ShortName(u128::from_be_bytes(padded), bytes.len()))
    }
}

impl FairShare {
    /// Factors by account; each is clamped to 0..=1 (a NaN counts as 0).
    pub fn new(factors: impl IntoIterator<Item = (String, f64)>) -> Self {
        // `f > 0.0` is false for NaN and -0.0 too: both become +0.0, whose bits sort first.
        let clamp = |f: f64| if f > 0.0 { f.min(1.0) } else { 0.0 };
        let factors: BTreeMap<String, f64> = factors
            .into_iter()
            .map(|(account, f)| (account, clamp(f)))
            .collect();
        let mut short: Vec<(ShortName, u64)> = factors
            .iter()
            .filter_map(|(account, f)| Some((ShortName::of(account)?, f.to_bits())))
            .collect();
        short.sort_unstable();
        FairShare { factors, short }
    }

    /// The empty table: every account counts as 1.
    pub fn none() -> &'static FairShare {
        &NO_FAIR_SHARE
    }

    /// `account`'s factor; 1 when not listed.
    pub fn factor(&self, account: &str) -> f64 {
        self.factors.get(account).copied().unwrap_or(1.0)
    }

    pub fn is_empty(&self) -> bool {
        self.factors.is_empty()
    }

    /// The factor as a sort key: for numbers from 0 to 1, the order of their bits is their
    /// numeric order, and integers keep the key total and cheap to compare.
    fn key(&self, account: &str) -> u64 {
        const UNLISTED: u64 = 0x3ff0_0000_0000_0000; // 1.0
        if self.factors.is_empty() {
            return UNLISTED;
        }
        match ShortName::of(account) {
            Some(name) => self
                .short
                .binary_search_by_key(&name, |(n, _)| *n)
                .map_or(UNLISTED, |i| self.short[i].1),
            None => self.factor(account).to_bits(),
        }
    }
}

/// A job's place in the queue; the smaller key goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    /// Higher tiers first. The value was frozen at submit, so editing a tier's config later
    /// does not reshuffle jobs already queued. Fair share never lets a job pass one of a
    /// higher tier.
    tier_value: Reverse<i64>,
    /// Within a tier, the account that used less of its share first ([`FairShare::key`]).
    fair_share: Reverse<u64>,
    /// Then first come, first served.
    submit_time: Millis,
    /// Ids are never reused, so this makes the order total.
    id: JobId,
}

pub(crate) fn queue_key(job: &Job, fair_share: &FairShare) -> QueueKey {
    QueueKey {
        tier_value: Reverse(job.tier_value),
        fair_share: Reverse(fair_share.key(&job.spec.account)),
        submit_time: job.submit_time,
        id: job.id,
    }
}

impl QueueKey {
    /// The job, and the tier value it is queued at.
    pub(crate) fn job_and_tier(&self) -> (JobId, i64) {
        (self.id, self.tier_value.0)
    }
}

/// The PENDING jobs in queue order, each with its key. HELD jobs wait for a release and are
/// not queued at all.
pub(crate) fn pending_keyed<'j>(
    jobs: &'j JobMap,
    fair_share: &FairShare,
) -> Vec<(QueueKey, &'j Job)> {
    // Each key once (a lookup by account name), not once per comparison.
    let mut keyed: Vec<(QueueKey, &Job)> = jobs
        .values()
        .filter(|j| j.state == JobState::Pending)
        .map(|j| (queue_key(j, fair_share), &**j))
        .collect();
    // Keys end on the id, so they are unique and an unstable sort is deterministic.
    keyed.sort_unstable_by_key(|(key, _)| *key);
    keyed
}

/// The PENDING jobs in queue order.
pub(crate) fn pending_in_order<'j>(jobs: &'j JobMap, fair_share: &FairShare) -> Vec<&'j Job> {
    pending_keyed(jobs, fair_share)
        .into_iter()
        .map(|(_, j)| j)
        .collect()
}
