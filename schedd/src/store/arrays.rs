//! Arrays in the store: an array's tasks as submitted in one record ([`ArrayRecord`]), the
//! spec they share kept once, and the reads that make a task whole from them.

use super::{decode, ended, Error, Result, Store};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use ysched_common::{Job, JobId, JobSpec};

/// Whether two tasks of one array are the same but for their id, index and checkpoint
/// directory (what an [`ArrayRecord`] keeps once for all). Every other field is named, so
/// that a field added to `Job` must be considered here.
pub(super) fn same_but_place(a: &Job, b: &Job) -> bool {
    let Job {
        id: _,
        array: _,
        checkpoint_dir: _,
        spec,
        owner,
        tier_value,
        state,
        reason,
        held_by,
        alloc,
        restart_count,
        exit_code,
        signal,
        submit_time,
        start_time,
        end_time,
        launched,
        grace_secs,
        stop,
        last_checkpoint,
        parts,
        launch_attempts,
        queued_at,
        run_ms_before,
    } = a;
    (std::sync::Arc::ptr_eq(spec, &b.spec) || **spec == *b.spec)
        && (std::sync::Arc::ptr_eq(owner, &b.owner) || **owner == *b.owner)
        && *tier_value == b.tier_value
        && *state == b.state
        && *reason == b.reason
        && *held_by == b.held_by
        && *alloc == b.alloc
        && *restart_count == b.restart_count
        && *exit_code == b.exit_code
        && *signal == b.signal
        && *submit_time == b.submit_time
        && *start_time == b.start_time
        && *end_time == b.end_time
        && *launched == b.launched
        && *grace_secs == b.grace_secs
        && *stop == b.stop
        && *last_checkpoint == b.last_checkpoint
        && *parts == b.parts
        && *launch_attempts == b.launch_attempts
        && *queued_at == b.queued_at
        && *run_ms_before == b.run_ms_before
}

/// An array's tasks as submitted: every task is its first one (`first`, stored slim, like
/// any task record) but for its id (`first.id` plus its place), its index (from the spec's
/// task list) and its checkpoint directory (the same for all, or `checkpoint_prefix` and the
/// job id).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ArrayRecord {
    pub(super) first: Job,
    pub(super) count: u32,
    pub(super) checkpoint_prefix: Option<String>,
    /// Tasks that ended without changing before, as they ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) ended: Vec<ended::EndedTasks>,
}

impl ArrayRecord {
    /// Task `i` (by place) as submitted; `first` complete (with its spec), `tasks` its
    /// indices.
    pub(super) fn task(&self, first: &Job, i: usize) -> Job {
        let id = JobId(first.id.0 + i as u64);
        let mut job = first.clone();
        job.id = id;
        let task = first.spec.array.as_ref().and_then(|a| a.task_at(i as u64));
        job.array = Some(ysched_common::ArrayTask {
            array_id: first.id,
            task: task.unwrap_or(i as u32),
        });
        if let Some(prefix) = &self.checkpoint_prefix {
            job.checkpoint_dir = format!("{prefix}{id}");
        }
        if let Some(ended) = self.ended_at(i) {
            ended.apply_to(&mut job);
        }
        job
    }
}

/// What an array task's record carries in place of the spec its tasks share.
pub(super) fn spec_placeholder() -> &'static std::sync::Arc<JobSpec> {
    static PLACEHOLDER: std::sync::OnceLock<std::sync::Arc<JobSpec>> = std::sync::OnceLock::new();
    PLACEHOLDER.get_or_init(Default::default)
}

/// Whether a job's stored record leaves its spec to `array_specs`.
pub(super) fn spec_shared(job: &Job) -> bool {
    job.array.is_some() && job.spec.array.is_some()
}

/// The spec and owner a recovery or a scan shares between the tasks of each array.
#[derive(Default)]
pub(super) struct Shared {
    arrays: BTreeMap<
        JobId,
        (
            std::sync::Arc<JobSpec>,
            Option<std::sync::Arc<ysched_common::Owner>>,
        ),
    >,
}

impl Store {
    /// An array's first task made whole: what [`ArrayRecord::task`] makes every task from.
    pub(super) fn first_task(&self, record: &ArrayRecord, shared: &mut Shared) -> Result<Job> {
        self.complete(record.first.clone(), shared)
    }

    /// [`Store::complete`] for a read that may race the expiry of the job's array: a read
    /// of several trees is no snapshot, and the array may have left the history (its tasks'
    /// records and its spec, in one transaction) between the read of `job`'s record and that
    /// of the spec. Then the task is gone (`None`), as a read a moment later would find it; a
    /// spec missing while the record is still there is an error, as before.
    pub(super) fn complete_unless_expired(
        &self,
        job: Job,
        shared: &mut Shared,
    ) -> Result<Option<Job>> {
        let id = job.id.0.to_be_bytes();
        match self.complete(job, shared) {
            Err(Error::MissingArraySpec { .. }) if !self.jobs.contains_key(id)? => Ok(None),
            done => done.map(Some),
        }
    }

    /// [`Store::first_task`] for a read that may race the expiry of the array (see
    /// [`Store::complete_unless_expired`]): `None` when the array's record is gone too.
    pub(super) fn first_task_unless_expired(
        &self,
        record: &ArrayRecord,
        shared: &mut Shared,
    ) -> Result<Option<Job>> {
        let id = record.first.id.0.to_be_bytes();
        match self.first_task(record, shared) {
            Err(Error::MissingArraySpec { .. }) if !self.arrays.contains_key(id)? => Ok(None),
            done => done.map(Some),
        }
    }

    /// The array record that holds job `id` as submitted, and its place there, when `id` is
    /// a task without a record of its own.
    pub(super) fn submitted_task(&self, id: JobId) -> Result<Option<(ArrayRecord, usize)>> {
        let Some((k, v)) = self
            .arrays
            .range(..=id.0.to_be_bytes())
            .next_back()
            .transpose()?
        else {
            return Ok(None);
        };
        let record: ArrayRecord = decode(&k, &v)?;
        let place = id.0 - record.first.id.0;
        if place >= u64::from(record.count) {
            return Ok(None);
        }
        // In an array with no task as submitted left, a task without a record of its own is
        // one kept as it ended, or one expired from the history (see `history`).
        if record.ended_at(place as usize).is_none() && !self.array_is_live(record.first.id)? {
            return Ok(None);
        }
        Ok(Some((record, place as usize)))
    }

    /// A decoded job record made whole: an array task gets the spec its array shares (read
    /// once per array and shared through `shared`, as is its owner). Records written before
    /// arrays existed carry their own spec and are returned as they are.
    pub(super) fn complete(&self, mut job: Job, shared: &mut Shared) -> Result<Job> {
        let Some(task) = job.array else {
            return Ok(job);
        };
        let array_id = task.array_id;
        let entry = match shared.arrays.entry(array_id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) if job.spec.array.is_none() => {
                let key = array_id.0.to_be_bytes();
                let v = self.array_specs.get(key)?.ok_or(Error::MissingArraySpec {
                    id: job.id.0,
                    array_id: array_id.0,
                })?;
                let spec: JobSpec = decode(&key, &v)?;
                e.insert((std::sync::Arc::new(spec), None))
            }
            // A record that carries its own spec (written before arrays had `array_specs`).
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert((std::sync::Arc::clone(&job.spec), None))
            }
        };
        if job.spec.array.is_none() || *entry.0 == *job.spec {
            job.spec = std::sync::Arc::clone(&entry.0);
        }
        match &entry.1 {
            Some(owner) if **owner == *job.owner => job.owner = std::sync::Arc::clone(owner),
            Some(_) => {}
            None => entry.1 = Some(std::sync::Arc::clone(&job.owner)),
        }
        Ok(job)
    }
}
