//! Array tasks that ended without ever having changed before (an array cancelled while
//! queued): kept in their array's record, one entry for all that ended the same way, instead
//! of a record and an event each. Cancelling a 10,000-task array is then one write of a few
//! hundred bytes, not 20,000 inserts (~350 ms under schedd's lock).
//!
//! Only tasks that end the same way in numbers (at least [`MIN_GROUP`] in one write, as an
//! array's cancel makes them) are kept so, and an array's record keeps at most
//! [`MAX_ENTRIES`] such groups: tasks cancelled one by one are written as any job, so that
//! the record, rewritten with each group, stays small.
//!
//! A task that ended so has no record of its own in `jobs`; [`ArrayRecord::task`] gives it
//! as it ended, and its end's events are the entry's. A task with a record of its own is
//! never compacted (its record stands for it), and one compacted is never written again
//! (it has ended).

use super::{same_but_place, spec_shared, ArrayRecord};
use serde::{Deserialize, Serialize};
use sled::transaction::{TransactionalTree, UnabortableTransactionError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{Job, JobEvent, JobId, JobSpec, JobState};

/// The fewest tasks ending the same way in one write that are kept in their array's record.
const MIN_GROUP: usize = 16;

/// The most groups of ended tasks an array's record keeps.
const MAX_ENTRIES: usize = 64;

/// Tasks of one array that ended the same way, with nothing else about them changed since
/// their submit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct EndedTasks {
    /// Places in the array (0 is the array's first task), as inclusive ranges in order.
    pub places: Vec<(u32, u32)>,
    pub state: JobState,
    pub reason: String,
    pub end_time: Option<Millis>,
    /// The events of each task's end (the same for all).
    pub events: Vec<JobEvent>,
}

impl EndedTasks {
    pub fn contains(&self, place: u32) -> bool {
        let i = self.places.partition_point(|&(_, to)| to < place);
        self.places.get(i).is_some_and(|&(from, _)| from <= place)
    }

    /// The task as submitted, made as it ended.
    pub fn apply_to(&self, job: &mut Job) {
        job.state = self.state;
        job.reason.clone_from(&self.reason);
        job.end_time = self.end_time;
    }

    fn push(&mut self, place: u32) {
        match self.places.last_mut() {
            Some((_, to)) if to.checked_add(1) == Some(place) => *to = place,
            _ => self.places.push((place, place)),
        }
    }

    /// Every place, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.places.iter().flat_map(|&(from, to)| from..=to)
    }
}

impl ArrayRecord {
    /// How the task at `place` ended, when it ended without changing before.
    pub(super) fn ended_at(&self, place: usize) -> Option<&EndedTasks> {
        let place = u32::try_from(place).ok()?;
        self.ended.iter().find(|e| e.contains(place))
    }
}

/// Whether a job written to a batch may be an array task that ended without running: then
/// [`Compactor`] decides, in the transaction, whether it is one as submitted.
pub(super) fn candidate(job: &Job) -> bool {
    spec_shared(job)
        && job.state.is_terminal()
        && job.start_time.is_none()
        && !job.launched
        && job.alloc.is_empty()
}

/// An array as stored, with what comparing a task against it needs.
struct ArrayView {
    record: ArrayRecord,
    /// The first task, with the array's spec.
    first: Job,
    tasks: Vec<u32>,
    /// A spec (by address) already found equal to the array's.
    equal_spec: Option<*const JobSpec>,
    /// The first task as the last task taken ended, with that task's spec: what every task
    /// that ended so is but for its id, index and checkpoint directory.
    ended_first: Option<Job>,
    /// Scratch space for a task's checkpoint directory.
    dir: String,
}

/// Collects, within one transaction, the ended tasks that can live in their array's record.
pub(super) struct Compactor<'a> {
    /// The candidates that have a record of their own in `jobs` (looked up before the
    /// transaction: every write to the store is made under schedd's one lock).
    own_records: HashSet<JobId>,
    /// Jobs written as records in this transaction so far.
    written: HashSet<JobId>,
    views: BTreeMap<JobId, Option<ArrayView>>,
    taken: BTreeMap<JobId, Vec<(u32, &'a Job)>>,
    ids: HashSet<JobId>,
}

type TxResult<T> = std::result::Result<T, UnabortableTransactionError>;

impl<'a> Compactor<'a> {
    pub fn new(own_records: HashSet<JobId>) -> Compactor<'a> {
        Compactor {
            own_records,
            written: HashSet::new(),
            views: BTreeMap::new(),
            taken: BTreeMap::new(),
            ids: HashSet::new(),
        }
    }

    /// Notes that `id` was written as a record in this transaction: that record stands for
    /// it, even if it was taken before.
    pub fn written(&mut self, id: JobId) {
        self.written.insert(id);
        if self.ids.remove(&id) {
            for tasks in self.taken.values_mut() {
                tasks.retain(|(_, job)| job.id != id);
            }
        }
    }

    /// Takes `job` (a [`candidate`]) for its array's record if it is a task without a record
    /// of its own, as submitted but for its end (whether it is kept there is decided in
    /// [`Compactor::finish`]). `false`: write it as any job.
    pub fn take(
        &mut self,
        job: &'a Job,
        arrays: &TransactionalTree,
        specs: &TransactionalTree,
    ) -> TxResult<bool> {
        let Some(task) = job.array else {
            return Ok(false);
        };
        if self.ids.contains(&job.id)
            || self.own_records.contains(&job.id)
            || self.written.contains(&job.id)
        {
            return Ok(false);
        }
        let view = match self.views.entry(task.array_id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(load(task.array_id, arrays, specs)?)
            }
        };
        let Some(view) = view else {
            return Ok(false);
        };
        let Some(place) = job
            .id
            .0
            .checked_sub(task.array_id.0)
            .filter(|&p| p < u64::from(view.record.count))
        else {
            return Ok(false);
        };
        let place = place as usize;
        if view.record.ended_at(place).is_some() {
            return Ok(false);
        }
        if view.equal_spec != Some(Arc::as_ptr(&job.spec)) {
            if *job.spec != *view.first.spec {
                return Ok(false);
            }
            view.equal_spec = Some(Arc::as_ptr(&job.spec));
        }
        let same_end = |t: &Job| {
            t.state == job.state
                && t.reason == job.reason
                && t.end_time == job.end_time
                && Arc::ptr_eq(&t.spec, &job.spec)
        };
        if !view.ended_first.as_ref().is_some_and(same_end) {
            let mut ended = view.first.clone();
            ended.spec = Arc::clone(&job.spec);
            ended.state = job.state;
            ended.reason.clone_from(&job.reason);
            ended.end_time = job.end_time;
            view.ended_first = Some(ended);
        }
        let ended_first = view.ended_first.as_ref().expect("set above");
        // What `ArrayRecord::task` makes of the first task, checked without making it.
        let index = view.tasks.get(place).copied().unwrap_or(place as u32);
        let dir_ok = match &view.record.checkpoint_prefix {
            None => job.checkpoint_dir == view.first.checkpoint_dir,
            Some(prefix) => {
                use std::fmt::Write;
                view.dir.clear();
                let _ = write!(view.dir, "{prefix}{}", job.id);
                job.checkpoint_dir == view.dir
            }
        };
        let as_submitted = task.task == index
            && task.array_id == view.first.id
            && dir_ok
            && same_but_place(job, ended_first);
        if !as_submitted {
            return Ok(false);
        }
        self.ids.insert(job.id);
        self.taken
            .entry(task.array_id)
            .or_default()
            .push((place as u32, job));
        Ok(true)
    }

    /// Writes the records of the arrays whose tasks were taken, each task's `events` with
    /// them. Only tasks that end the same way in numbers are kept so (see [`MIN_GROUP`] and
    /// [`MAX_ENTRIES`]); the others are handed back, to be written as any job.
    pub fn finish(
        self,
        events: &[(JobId, JobEvent)],
        arrays: &TransactionalTree,
    ) -> TxResult<Finished<'a>> {
        let mut finished = Finished {
            compacted: self.ids,
            apart: Vec::new(),
        };
        if self.taken.is_empty() {
            return Ok(finished);
        }
        let mut events_of: HashMap<JobId, Vec<&JobEvent>> = HashMap::new();
        for (id, event) in events {
            if finished.compacted.contains(id) {
                events_of.entry(*id).or_default().push(event);
            }
        }
        let mut views = self.views;
        for (array_id, mut tasks) in self.taken {
            let Some(Some(view)) = views.remove(&array_id) else {
                continue;
            };
            tasks.sort_by_key(|(place, _)| *place);
            let mut groups: Vec<(EndedTasks, Vec<&'a Job>)> = Vec::new();
            for (place, job) in tasks {
                let events = events_of.remove(&job.id).unwrap_or_default();
                let same = |g: &EndedTasks| {
                    g.state == job.state
                        && g.reason == job.reason
                        && g.end_time == job.end_time
                        && g.events.iter().eq(events.iter().copied())
                };
                match groups.iter_mut().find(|(g, _)| same(g)) {
                    Some((group, jobs)) => {
                        group.push(place);
                        jobs.push(job);
                    }
                    None => groups.push((
                        EndedTasks {
                            places: vec![(place, place)],
                            state: job.state,
                            reason: job.reason.clone(),
                            end_time: job.end_time,
                            events: events.into_iter().cloned().collect(),
                        },
                        vec![job],
                    )),
                }
            }
            let mut record = view.record;
            let before = record.ended.len();
            for (group, jobs) in groups {
                if jobs.len() >= MIN_GROUP && record.ended.len() < MAX_ENTRIES {
                    record.ended.push(group);
                } else {
                    for job in jobs {
                        finished.compacted.remove(&job.id);
                        finished.apart.push(job);
                    }
                }
            }
            if record.ended.len() > before {
                // `record.first` is as stored: without its spec.
                let value = serde_json::to_vec(&record).expect("array record serializes");
                arrays.insert(&array_id.0.to_be_bytes(), value)?;
            }
        }
        Ok(finished)
    }
}

/// What [`Compactor::finish`] kept in array records, and what is to be written as any job.
pub(super) struct Finished<'a> {
    /// Their events are in their records too.
    pub compacted: HashSet<JobId>,
    pub apart: Vec<&'a Job>,
}

/// The array `array_id` as stored; `None` when it has no record (its tasks were written one
/// by one) or one that does not decode (then its tasks are too).
fn load(
    array_id: JobId,
    arrays: &TransactionalTree,
    specs: &TransactionalTree,
) -> TxResult<Option<ArrayView>> {
    let key = array_id.0.to_be_bytes();
    let Some(value) = arrays.get(key)? else {
        return Ok(None);
    };
    let Ok(record) = serde_json::from_slice::<ArrayRecord>(&value) else {
        return Ok(None);
    };
    let Some(value) = specs.get(key)? else {
        return Ok(None);
    };
    let Ok(spec) = serde_json::from_slice::<JobSpec>(&value) else {
        return Ok(None);
    };
    let tasks = spec.array.as_ref().map(|a| a.tasks()).unwrap_or_default();
    let mut first = record.first.clone();
    first.spec = Arc::new(spec);
    Ok(Some(ArrayView {
        record,
        first,
        tasks,
        equal_spec: None,
        ended_first: None,
        dir: String::new(),
    }))
}
