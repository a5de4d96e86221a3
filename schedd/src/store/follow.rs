//! What a follower keeps of the replicated state as it applies entries, so that
//! once elected it serves without reading the store again: the active jobs, nodes and id
//! counter that [`Store::recover`] reads, brought up to date from each applied batch by
//! decoding only what the batch wrote (its job records, array records, nodes and runs).

use super::arrays::{ArrayRecord, Shared};
use super::batch::JobWrite;
use super::{decode, usage, Batch, Recovered, Result, Store};
use ysched_common::{Job, Node, RunView};

impl Store {
    /// The state as [`Store::recover`] reads it, writing nothing: what a follower starts
    /// from (its store changes only through replicated entries).
    pub fn recover_read_only(&self) -> Result<Recovered> {
        self.recover_and_tidy(false)
    }

    /// Brings `rec` (what [`Store::recover`] read before `batch`) up to what it reads after
    /// it, `batch` having just been applied; hands each run the batch records to `each_run`.
    /// Reads only the array specs of the tasks it writes and the records of the arrays it
    /// submits.
    pub fn follow(
        &self,
        batch: &Batch,
        rec: &mut Recovered,
        mut each_run: impl FnMut(&RunView<'_>),
    ) -> Result<()> {
        let mut shared = Shared::default();
        let mut highest = 0u64;
        for (id, write) in &batch.jobs {
            highest = highest.max(id.0);
            match write {
                JobWrite::Record(bytes) => {
                    let job: Job = decode(&id.0.to_be_bytes(), bytes)?;
                    if job.state.is_terminal() {
                        rec.active_jobs.remove(id);
                    } else {
                        rec.active_jobs
                            .insert(*id, self.complete(job, &mut shared)?);
                    }
                }
                // Always an end: kept in its array's record or given one of its own.
                JobWrite::EndedTask(_) => {
                    rec.active_jobs.remove(id);
                }
            }
        }
        // After the jobs: a task that has a record of its own in the batch is not one as
        // submitted.
        for (array_id, value) in &batch.arrays {
            let record: ArrayRecord = decode(&array_id.0.to_be_bytes(), value)?;
            highest = highest.max(array_id.0 + u64::from(record.count).saturating_sub(1));
            self.tasks_as_submitted(*array_id, &mut rec.active_jobs, &mut shared)?;
        }
        if highest > 0 || batch.next_job_id.is_some() {
            rec.next_job_id = rec
                .next_job_id
                .max(batch.next_job_id.unwrap_or(0))
                .max(highest + 1);
        }
        for (name, value) in &batch.nodes {
            let mut node: Node = decode(name.as_bytes(), value)?;
            node.connected = false;
            rec.nodes.insert(node.name.clone(), node);
        }
        for (name, value) in &batch.hosts {
            let host: ysched_common::HostEnrolment = decode(name.as_bytes(), value)?;
            rec.hosts.insert(host.name.clone(), host);
        }
        for (key, value) in &batch.runs {
            each_run(&usage::decode(key, value)?);
        }
        Ok(())
    }
}
