//! What start-up reads: the active jobs (through the index), the tasks of live arrays still as
//! submitted, the nodes, the hosts' enrolments and the id counter.

use super::arrays::{ArrayRecord, Shared};
use super::{decode, Result, Store, HOST_PREFIX, NEXT_JOB_ID};
use std::collections::BTreeMap;
use ysched_common::{HostEnrolment, Job, JobId, Node};

/// Everything recovered at start-up.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    /// Jobs that are not finished.
    pub active_jobs: BTreeMap<JobId, Job>,
    pub nodes: BTreeMap<String, Node>,
    /// Every host ever enrolled.
    pub hosts: BTreeMap<String, HostEnrolment>,
    pub next_job_id: u64,
}

impl Store {
    /// What start-up needs: the active jobs (read through the index, so that the time does
    /// not grow with the history), the nodes and the id counter.
    pub fn recover(&self) -> Result<Recovered> {
        self.recover_and_tidy(true)
    }

    /// [`Store::recover`], writing nothing when `tidy` is false (a follower reads its state
    /// outside the replicated writes: see [`super::follow`]); with it, the arrays found to
    /// have no task as submitted left lose their index key.
    pub(super) fn recover_and_tidy(&self, tidy: bool) -> Result<Recovered> {
        let mut active_jobs = BTreeMap::new();
        let mut shared = Shared::default();
        for id in self.active_ids() {
            let id = id?;
            let key = id.0.to_be_bytes();
            let Some(v) = self.jobs.get(key)? else {
                continue;
            };
            let job: Job = decode(&key, &v)?;
            if !job.state.is_terminal() {
                let job = self.complete(job, &mut shared)?;
                active_jobs.insert(job.id, job);
            }
        }
        // Tasks still as submitted: every task of a live array without a record of its own
        // that has not ended. An array with none left is live no more.
        let mut done = Vec::new();
        for array_id in self.live_array_ids() {
            let array_id = array_id?;
            if !self.tasks_as_submitted(array_id, &mut active_jobs, &mut shared)? {
                done.push(array_id);
            }
        }
        if tidy && !done.is_empty() && !self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            self.arrays_done(&done)?;
        }
        // The highest id ever given: the counter, or (in stores from before it was kept)
        // the last record's.
        let mut max_id = 0;
        if let Some(k) = self.jobs.last()?.map(|(k, _)| k) {
            if let Ok(bytes) = <[u8; 8]>::try_from(k.as_ref()) {
                max_id = u64::from_be_bytes(bytes);
            }
        }
        if let Some((k, v)) = self.arrays.last()? {
            let record: ArrayRecord = decode(&k, &v)?;
            max_id = max_id.max(record.first.id.0 + u64::from(record.count).saturating_sub(1));
        }
        let mut nodes = BTreeMap::new();
        for kv in self.nodes.iter() {
            let (k, v) = kv?;
            let mut node: Node = decode(&k, &v)?;
            node.connected = false;
            nodes.insert(node.name.clone(), node);
        }
        let mut hosts = BTreeMap::new();
        for kv in self.meta.scan_prefix(HOST_PREFIX) {
            let (k, v) = kv?;
            let host: HostEnrolment = decode(&k, &v)?;
            hosts.insert(host.name.clone(), host);
        }
        let stored_next = self
            .meta
            .get(NEXT_JOB_ID)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(1);
        Ok(Recovered {
            active_jobs,
            nodes,
            hosts,
            next_job_id: stored_next.max(max_id + 1),
        })
    }

    /// Adds to `active` the tasks of array `array_id` still as submitted (none of their own
    /// record, not ended, not in `active` already); whether the array has any.
    pub(super) fn tasks_as_submitted(
        &self,
        array_id: JobId,
        active: &mut BTreeMap<JobId, Job>,
        shared: &mut Shared,
    ) -> Result<bool> {
        let key = array_id.0.to_be_bytes();
        let Some(v) = self.arrays.get(key)? else {
            return Ok(false);
        };
        let record: ArrayRecord = decode(&key, &v)?;
        let mut first: Option<Job> = None;
        for i in 0..record.count as usize {
            let id = JobId(array_id.0 + i as u64);
            if record.ended_at(i).is_some()
                || active.contains_key(&id)
                || self.jobs.contains_key(id.0.to_be_bytes())?
            {
                continue;
            }
            if first.is_none() {
                first = Some(self.first_task(&record, shared)?);
            }
            let job = first.as_ref().expect("set above");
            active.insert(id, record.task(job, i));
        }
        Ok(first.is_some())
    }
}
