//! The history's indexes and its retention: which jobs are active (start-up reads only
//! those, however long the history), which ended when (history queries by end time, expiry
//! oldest first), and the removal of what is past `scheduler.keep_finished` and
//! `scheduler.keep_usage`.
//!
//! The `index` tree holds three kinds of keys, written in the same transaction as the records
//! they index (see [`Store::apply`]):
//! - `j` ++ job id: a job whose record in `jobs` is not finished;
//! - `a` ++ array id: an array that may still have tasks as submitted (no record of their
//!   own, not ended): recovery makes those tasks from the array's record. An array whose
//!   every task has a record of its own or ended loses its key at recovery or at expiry;
//!   a task without a record of its own in an array without the key does not exist
//!   (expired), whatever the array's record says;
//! - `e` ++ end time (i64, sign bit flipped, big-endian) ++ job id: a finished job, by when it
//!   ended, array tasks kept in their array's record included. Its value (see [`listed`]) is
//!   the job's listing entry, so that a listing by end time reads no record; or, for a run of
//!   an array's tasks kept in its record that ended together, the run's last id (one key for
//!   them all); or nothing, in stores written before values were (their records are read).
//!
//! `j` and `a` keys have empty values.
//!
//! Stores written before the index have it built once, at open ([`Store::build_index`]).
//!
//! **Expiry** ([`Store::expire_finished`]) walks the `e` keys oldest first, in small batches,
//! never under schedd's lock: a plain job's record, payload, events and key go together (one
//! transaction per batch, which replicas apply alike: [`Store::plan_expiry`]). An
//! array's task goes only once its array has no task as submitted left (else the array's
//! record would make it again, as submitted); the array's record, spec, payload and events
//! (its submit's, and its first task's, which share its id) go with its last task. Usage
//! records are kept apart, for `keep_usage` ([`Store::expire_usage`]).

use super::arrays::ArrayRecord;
use super::batch::Removals;
use super::listed::{self, EndedValue};
use super::{decode, usage, Batch, Result, Store};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use ysched_common::time::Millis;
use ysched_common::{Job, JobId};

/// `index` key of an active job.
const ACTIVE: u8 = b'j';
/// `index` key of an array that may have tasks as submitted.
const LIVE_ARRAY: u8 = b'a';
/// `index` key of a finished job, by its end.
const ENDED: u8 = b'e';

/// `meta` key: the index's version, once built.
pub(super) const INDEX_VERSION: &[u8] = b"index_version";

/// A job's or an array's change to the index, written with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum IndexWrite {
    /// A job whose record is not finished.
    Active(JobId),
    /// A job that ended at this time, with its key's value ([`listed::listed_value`]).
    Ended(JobId, Millis, Vec<u8>),
    /// Tasks `first ..= last` of an array, kept in its record, that ended at this time.
    EndedTasks {
        first: JobId,
        last: JobId,
        end: Millis,
    },
    /// An array submitted with tasks as submitted.
    LiveArray(JobId),
}

pub(super) fn active_key(id: JobId) -> [u8; 9] {
    prefixed(ACTIVE, id)
}

pub(super) fn live_array_key(id: JobId) -> [u8; 9] {
    prefixed(LIVE_ARRAY, id)
}

fn prefixed(kind: u8, id: JobId) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = kind;
    k[1..].copy_from_slice(&id.0.to_be_bytes());
    k
}

pub(super) fn ended_key(end: Millis, id: JobId) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = ENDED;
    k[1..9].copy_from_slice(&usage::time_bytes(end));
    k[9..].copy_from_slice(&id.0.to_be_bytes());
    k
}

/// The end and job of an `e` key.
fn parse_ended(key: &[u8]) -> Option<(Millis, JobId)> {
    let key: &[u8; 17] = key.try_into().ok()?;
    let end = (u64::from_be_bytes(key[1..9].try_into().ok()?) ^ (1 << 63)) as i64;
    Some((end, JobId(u64::from_be_bytes(key[9..].try_into().ok()?))))
}

/// The job of a `j` or `a` key.
fn parse_prefixed(key: &[u8]) -> Option<JobId> {
    let key: &[u8; 9] = key.try_into().ok()?;
    Some(JobId(u64::from_be_bytes(key[1..].try_into().ok()?)))
}

/// When a finished job counts as ended: its end (a finished record without one, which
/// schedd does not write, at its submit).
pub(super) fn end_of(job: &Job) -> Millis {
    job.end_time.unwrap_or(job.submit_time)
}

/// The index entry a job's write makes: active, or ended at [`end_of`] with its listing.
pub(super) fn index_of(job: &Job) -> IndexWrite {
    if job.state.is_terminal() {
        IndexWrite::Ended(job.id, end_of(job), listed::listed_value(job))
    } else {
        IndexWrite::Active(job.id)
    }
}

/// What one call of [`Store::expire_finished`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Finished jobs removed.
    pub jobs: usize,
    /// Index entries looked at (removed or left for later).
    pub examined: usize,
    /// Where the next call goes on (after the last entry looked at), so that entries left
    /// for later are not looked at again in the same round; `None` once past the cutoff.
    pub resume: Option<Vec<u8>>,
}

impl Store {
    /// Builds the index of a store written before it (once: its version is kept in `meta`).
    /// Reads every record once; a crash in between builds it again.
    pub(super) fn build_index(&self) -> Result<()> {
        if self.meta.get(INDEX_VERSION)?.is_some() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut written = 0usize;
        for kv in self.jobs.iter() {
            let (k, v) = kv?;
            let job: Job = decode(&k, &v)?;
            match index_of(&job) {
                IndexWrite::Active(id) => batch.insert(&active_key(id), &[]),
                IndexWrite::Ended(id, end, value) => batch.insert(&ended_key(end, id), value),
                IndexWrite::EndedTasks { .. } | IndexWrite::LiveArray(_) => {
                    unreachable!("a job's record is one job")
                }
            }
            written += 1;
            if written.is_multiple_of(10_000) {
                self.index.apply_batch(std::mem::take(&mut batch))?;
            }
        }
        for kv in self.arrays.iter() {
            let (k, v) = kv?;
            let record: ArrayRecord = decode(&k, &v)?;
            // Recovery drops the key of an array with no task as submitted left.
            batch.insert(&live_array_key(record.first.id), &[]);
            for group in &record.ended {
                let end = group.end_time.unwrap_or(record.first.submit_time);
                for &(from, to) in &group.places {
                    let first = JobId(record.first.id.0 + u64::from(from));
                    let last = JobId(record.first.id.0 + u64::from(to));
                    batch.insert(&ended_key(end, first), &listed::tasks_value(last));
                }
            }
        }
        self.index.apply_batch(batch)?;
        self.meta.insert(INDEX_VERSION, &[1u8])?;
        if written > 0 {
            tracing::info!(jobs = written, "state store: built the history index");
        }
        Ok(())
    }

    /// The ids of the jobs recorded active, in order.
    pub(super) fn active_ids(&self) -> impl Iterator<Item = Result<JobId>> + '_ {
        self.index
            .scan_prefix([ACTIVE])
            .keys()
            .map(|k| Ok(parse_prefixed(&k?).unwrap_or(JobId(0))))
    }

    /// The ids of the arrays that may have tasks as submitted, in order.
    pub(super) fn live_array_ids(&self) -> impl Iterator<Item = Result<JobId>> + '_ {
        self.index
            .scan_prefix([LIVE_ARRAY])
            .keys()
            .map(|k| Ok(parse_prefixed(&k?).unwrap_or(JobId(0))))
    }

    /// Whether array `id` may have tasks as submitted (see the module docs).
    pub(super) fn array_is_live(&self, id: JobId) -> Result<bool> {
        Ok(self.index.contains_key(live_array_key(id))?)
    }

    /// Forgets that arrays `ids` may have tasks as submitted (none is left).
    pub(super) fn arrays_done(&self, ids: &[JobId]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for id in ids {
            batch.remove(&live_array_key(*id));
        }
        Ok(self.index.apply_batch(batch)?)
    }

    /// The `e` keys of the ends in `[from_ms, to_ms)`, in key order: each one's job and value
    /// (keys that are not an end's are passed over).
    pub(super) fn ended_keys(
        &self,
        from_ms: Millis,
        to_ms: Millis,
    ) -> impl Iterator<Item = Result<(JobId, sled::IVec)>> + '_ {
        let range = (from_ms < to_ms).then(|| {
            self.index
                .range(ended_key(from_ms, JobId(0))..ended_key(to_ms, JobId(0)))
        });
        range.into_iter().flatten().filter_map(|kv| match kv {
            Ok((key, value)) => parse_ended(&key).map(|(_, id)| Ok((id, value))),
            Err(e) => Some(Err(e.into())),
        })
    }

    /// The ids of the jobs that ended in `[from_ms, to_ms)`, in id order, each once.
    pub fn ended_between(&self, from_ms: Millis, to_ms: Millis) -> Result<Vec<JobId>> {
        let mut ids = BTreeSet::new();
        for ended in self.ended_keys(from_ms, to_ms) {
            let (id, value) = ended?;
            match listed::parse(id, &value) {
                Some(EndedValue::Tasks { last }) => ids.extend((id.0..=last.0).map(JobId)),
                _ => {
                    ids.insert(id);
                }
            }
        }
        Ok(ids.into_iter().collect())
    }

    /// Finished jobs that ended in `[from_ms, to_ms)`, in id order: what the index names,
    /// read by id (the cost of what is returned, not of the history).
    pub fn finished_between(&self, from_ms: Millis, to_ms: Millis) -> Result<Vec<Job>> {
        let ids = self.ended_between(from_ms, to_ms)?;
        Ok(self
            .jobs_by_id(ids)?
            .into_iter()
            .filter(|j| j.state.is_terminal())
            .collect())
    }

    /// Whether every task of array `record` has a record of its own or ended (no task as
    /// submitted is left): then its key `a` may go.
    fn no_task_as_submitted(&self, record: &ArrayRecord) -> Result<bool> {
        let first = record.first.id.0;
        let own: BTreeSet<u64> = self
            .jobs
            .range(first.to_be_bytes()..(first + u64::from(record.count)).to_be_bytes())
            .keys()
            .filter_map(|k| k.ok())
            .filter_map(|k| <[u8; 8]>::try_from(k.as_ref()).ok().map(u64::from_be_bytes))
            .collect();
        Ok((0..record.count as usize)
            .all(|place| own.contains(&(first + place as u64)) || record.ended_at(place).is_some()))
    }

    /// Removes finished jobs that ended before `cutoff_ms`, oldest first, looking at no more
    /// than `limit` index entries, from the start or after `resume` (from the previous
    /// call's [`Expired::resume`]). Jobs in `keep` (the end states live dependencies still
    /// need) stay, as do the tasks of an array that still has tasks as submitted; a later
    /// round looks at them again. [`Store::plan_expiry`], then its batch applied.
    pub fn expire_finished(
        &self,
        cutoff_ms: Millis,
        limit: usize,
        keep: &BTreeSet<JobId>,
        resume: Option<&[u8]>,
    ) -> Result<Expired> {
        let (done, batch) = self.plan_expiry(cutoff_ms, limit, keep, resume)?;
        self.apply(batch)?;
        Ok(done)
    }

    /// What [`Store::expire_finished`] removes, as a batch (see `batch::Removals`) that
    /// every replica can apply alike, without removing it: the leader of replicas proposes
    /// it. Refused (a full disk) as the removal would be.
    pub fn plan_expiry(
        &self,
        cutoff_ms: Millis,
        limit: usize,
        keep: &BTreeSet<JobId>,
        resume: Option<&[u8]>,
    ) -> Result<(Expired, Batch)> {
        let mut done = Expired::default();
        let mut gone = Removals::default();
        let mut arrays_touched: BTreeMap<JobId, Option<ArrayRecord>> = BTreeMap::new();
        let upto = ended_key(cutoff_ms, JobId(0));
        let mut ids_removed = HashSet::new();
        let mut jobs_removed = HashSet::new();
        let start = ended_key(i64::MIN, JobId(0));
        let range = match resume {
            Some(after) => self.index.range::<&[u8], _>((
                std::ops::Bound::Excluded(after),
                std::ops::Bound::Excluded(&upto[..]),
            )),
            None => self.index.range::<&[u8], _>((
                std::ops::Bound::Included(&start[..]),
                std::ops::Bound::Excluded(&upto[..]),
            )),
        };
        for kv in range {
            if done.examined >= limit {
                break;
            }
            done.examined += 1;
            let (key, value) = kv?;
            done.resume = Some(key.to_vec());
            let Some((_, id)) = parse_ended(&key) else {
                gone.index.push(key.to_vec());
                continue;
            };
            // A run of an array's tasks kept in its record: they go together, as the first
            // would (none has a record or events of its own).
            let last = match listed::parse(id, &value) {
                Some(EndedValue::Tasks { last }) => last,
                _ => id,
            };
            if keep.range(id..=last).next().is_some() {
                continue;
            }
            let job: Option<Job> = match self.jobs.get(id.0.to_be_bytes())? {
                Some(v) => Some(decode(&id.0.to_be_bytes(), &v)?),
                None => None,
            };
            if job.as_ref().is_some_and(|j| !j.state.is_terminal()) {
                // Written again since (never done to a finished job): not history.
                gone.index.push(key.to_vec());
                continue;
            }
            let array_id = match &job {
                Some(j) => j.array.map(|t| t.array_id),
                // A task kept in its array's record (or already gone).
                None => self.submitted_task(id)?.map(|(r, _)| r.first.id),
            };
            if let Some(array_id) = array_id {
                let record = match arrays_touched.entry(array_id) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        let key = array_id.0.to_be_bytes();
                        let record: Option<ArrayRecord> = match self.arrays.get(key)? {
                            Some(v) => Some(decode(&key, &v)?),
                            None => None,
                        };
                        if let Some(r) = &record {
                            if self.array_is_live(array_id)? {
                                if !self.no_task_as_submitted(r)? {
                                    // Tasks as submitted are left: removing this one's
                                    // record would make it one of them again.
                                    e.insert(None);
                                    continue;
                                }
                                // No task as submitted left: the array loses its key.
                                gone.index.push(live_array_key(array_id).to_vec());
                            }
                        }
                        e.insert(record)
                    }
                };
                if record.is_none() && self.arrays.contains_key(array_id.0.to_be_bytes())? {
                    continue;
                }
                // The first task's events share the array's id: they go with the array.
                if id != array_id {
                    gone.events_of.push(id);
                }
            } else {
                gone.payloads.push(id);
                gone.events_of.push(id);
            }
            if job.is_some() {
                gone.jobs.push(id);
                jobs_removed.insert(id);
            }
            gone.index.push(key.to_vec());
            ids_removed.extend((id.0..=last.0).map(JobId));
            done.jobs += (last.0 - id.0 + 1) as usize;
        }
        if done.examined == 0 {
            return Ok((done, Batch::default()));
        }
        self.check_room(64 * done.examined as u64, super::Room::Cluster)?;
        // An array goes with its last task: no record of a task of its own left, every task
        // kept in its record ended before the cutoff.
        for (array_id, record) in arrays_touched {
            let Some(record) = record else { continue };
            let first = array_id.0;
            let mut own_left = false;
            for k in self
                .jobs
                .range(first.to_be_bytes()..(first + u64::from(record.count)).to_be_bytes())
                .keys()
            {
                let k = k?;
                let id = <[u8; 8]>::try_from(k.as_ref()).map_or(0, u64::from_be_bytes);
                if !jobs_removed.contains(&JobId(id)) {
                    own_left = true;
                    break;
                }
            }
            let kept_ended_before = record
                .ended
                .iter()
                .all(|g| g.end_time.unwrap_or(record.first.submit_time) < cutoff_ms);
            let kept_left = record.ended.iter().any(|g| {
                g.iter().any(|place| {
                    let id = JobId(first + u64::from(place));
                    !ids_removed.contains(&id)
                        && self
                            .indexed_as_ended(g.end_time.unwrap_or(record.first.submit_time), id)
                            .unwrap_or(true)
                })
            });
            if own_left || !kept_ended_before || kept_left {
                continue;
            }
            gone.arrays.push(array_id);
        }
        Ok((
            done,
            Batch {
                removals: gone,
                ..Batch::default()
            },
        ))
    }

    /// Whether job `id` has an `e` key at `end`: its own, or its run's (see [`listed`]).
    fn indexed_as_ended(&self, end: Millis, id: JobId) -> Result<bool> {
        let Some((key, value)) = self
            .index
            .range(ended_key(end, JobId(0))..=ended_key(end, id))
            .next_back()
            .transpose()?
        else {
            return Ok(false);
        };
        let Some((_, from)) = parse_ended(&key) else {
            return Ok(false);
        };
        Ok(from == id
            || matches!(listed::parse(from, &value), Some(EndedValue::Tasks { last }) if last >= id))
    }

    /// Removes usage records of runs that ended before `cutoff_ms`, at most `limit`; how many.
    pub fn expire_usage(&self, cutoff_ms: Millis, limit: usize) -> Result<usize> {
        let (removed, batch) = self.plan_usage_expiry(cutoff_ms, limit)?;
        self.apply(batch)?;
        Ok(removed)
    }

    /// What [`Store::expire_usage`] removes, as a batch, without removing it (see
    /// [`Store::plan_expiry`]).
    pub fn plan_usage_expiry(&self, cutoff_ms: Millis, limit: usize) -> Result<(usize, Batch)> {
        let mut gone = Removals::default();
        for key in self.usage.range(..usage::time_bytes(cutoff_ms)).keys() {
            if gone.usage.len() >= limit {
                break;
            }
            gone.usage.push(key?.to_vec());
        }
        let removed = gone.usage.len();
        if removed > 0 {
            self.check_room(32 * removed as u64, super::Room::Cluster)?;
        }
        Ok((
            removed,
            Batch {
                removals: gone,
                ..Batch::default()
            },
        ))
    }
}
