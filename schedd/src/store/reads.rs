//! The store's reads: jobs (finished ones, by id, or their states), payloads, histories, the
//! audit log and usage records.

use super::arrays::{ArrayRecord, Shared};
use super::{decode, usage, Payload, Result, Store};
use crate::state::JobEventKind;
use ysched_common::{AuditRecord, Job, JobEvent, JobId, RunRecord, RunView};

/// What an audit record adds on the wire to its bytes as stored (field tags, lengths).
const AUDIT_ENTRY_FRAMING: usize = 32;

impl Store {
    pub fn payload(&self, id: JobId) -> Result<Payload> {
        match self.payloads.get(id.0.to_be_bytes())? {
            Some(v) => decode(&id.0.to_be_bytes(), &v),
            None => Ok(Payload::default()),
        }
    }

    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.job_shared(id, &mut Shared::default())
    }

    pub(super) fn job_shared(&self, id: JobId, shared: &mut Shared) -> Result<Option<Job>> {
        match self.jobs.get(id.0.to_be_bytes())? {
            Some(v) => {
                let job = decode(&id.0.to_be_bytes(), &v)?;
                self.complete_unless_expired(job, shared)
            }
            None => match self.submitted_task(id)? {
                Some((record, i)) => Ok(self
                    .first_task_unless_expired(&record, shared)?
                    .map(|first| record.task(&first, i))),
                None => Ok(None),
            },
        }
    }

    /// How job `id` is as far as its record says, without its spec (cheaper than
    /// [`Store::job`] for an array's task): its state.
    pub fn job_state(&self, id: JobId) -> Result<Option<ysched_common::JobState>> {
        match self.jobs.get(id.0.to_be_bytes())? {
            Some(v) => Ok(Some(decode::<Job>(&id.0.to_be_bytes(), &v)?.state)),
            None => Ok(self.submitted_task(id)?.map(|(record, i)| {
                record
                    .ended_at(i)
                    .map_or(record.first.state, |ended| ended.state)
            })),
        }
    }

    /// The jobs of `ids` that exist, in the order asked (the tasks of an array share one
    /// read of their spec).
    pub fn jobs_by_id(&self, ids: impl IntoIterator<Item = JobId>) -> Result<Vec<Job>> {
        let mut shared = Shared::default();
        let mut found = Vec::new();
        for id in ids {
            if let Some(job) = self.job_shared(id, &mut shared)? {
                found.push(job);
            }
        }
        Ok(found)
    }

    /// Finished jobs, oldest id first (all of them: for tests).
    pub fn finished_jobs(&self) -> Result<Vec<Job>> {
        Ok(self.finished_jobs_after(JobId(0), 0, |_| true)?.0)
    }

    /// Finished jobs with ids above `after` that `want` selects, in id order, for listings
    /// that include history: at most `limit` (0: no limit), read from the first id after
    /// `after` on, so that a page costs what it returns (and the records it passes over).
    /// With `Some(bound)` when it stopped at `limit`: complete up to `bound`, more may follow.
    pub fn finished_jobs_after(
        &self,
        after: JobId,
        limit: usize,
        want: impl Fn(&Job) -> bool,
    ) -> Result<(Vec<Job>, Option<JobId>)> {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let start = after.0.saturating_add(1).to_be_bytes();
        let mut res = Vec::new();
        let mut shared = Shared::default();
        let mut bound = None;
        for kv in self.jobs.range(start..) {
            let (k, v) = kv?;
            let job: Job = decode(&k, &v)?;
            // `want` looks at no spec: asked before the array's is read.
            if job.state.is_terminal() && job.id > after && want(&job) {
                let Some(job) = self.complete_unless_expired(job, &mut shared)? else {
                    continue;
                };
                res.push(job);
                if res.len() >= limit {
                    bound = res.last().map(|j: &Job| j.id);
                    break;
                }
            }
        }
        // Tasks that ended without a record of their own, up to where the records stopped:
        // from the array that holds the first id after `after` on.
        let upto = bound.map_or(u64::MAX, |b: JobId| b.0);
        let from = self
            .arrays
            .range(..=start)
            .next_back()
            .transpose()?
            .map_or(start.to_vec(), |(k, _)| k.to_vec());
        let before = res.len();
        for kv in self.arrays.range(from..) {
            let (k, v) = kv?;
            let record: ArrayRecord = decode(&k, &v)?;
            if record.first.id.0 > upto {
                break;
            }
            if record.ended.is_empty() {
                continue;
            }
            let mut first = None;
            for place in record.ended.iter().flat_map(|e| e.iter()) {
                let id = record.first.id.0 + u64::from(place);
                if id <= after.0 || id > upto || self.jobs.contains_key(id.to_be_bytes())? {
                    continue;
                }
                if first.is_none() {
                    first = self.first_task_unless_expired(&record, &mut shared)?;
                }
                let Some(first) = &first else {
                    break; // The array expired while this read went on.
                };
                let task = record.task(first, place as usize);
                if want(&task) {
                    res.push(task);
                }
            }
        }
        if res.len() > before {
            res.sort_by_key(|j| j.id);
            if res.len() > limit {
                res.truncate(limit);
                bound = res.last().map(|j| j.id);
            }
        }
        Ok((res, bound))
    }

    /// A page of the audit log, newest first: the records older than `before` (from the
    /// newest when `None`), at most `limit` of them (no limit when 0) and about `max_bytes`
    /// as stored (one record at least). Also returns the id to ask the next page before, if
    /// older records remain.
    pub fn audit_page(
        &self,
        before: Option<u64>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<AuditRecord>, Option<u64>)> {
        let n = if limit == 0 { usize::MAX } else { limit };
        let older = match before {
            Some(id) => self.audit.range(..id.to_be_bytes()),
            None => self.audit.range::<&[u8], _>(..),
        };
        let (mut page, mut bytes) = (Vec::new(), 0usize);
        let mut last = None;
        for kv in older.rev() {
            let (k, v) = kv?;
            bytes = bytes.saturating_add(v.len() + AUDIT_ENTRY_FRAMING);
            if page.len() == n || (!page.is_empty() && bytes > max_bytes) {
                return Ok((page, last));
            }
            last = <[u8; 8]>::try_from(k.as_ref()).ok().map(u64::from_be_bytes);
            page.push(decode(&k, &v)?);
        }
        Ok((page, None))
    }

    /// The newest `limit` audit records (all when 0), newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<AuditRecord>> {
        let n = if limit == 0 { usize::MAX } else { limit };
        self.audit
            .iter()
            .rev()
            .take(n)
            .map(|kv| {
                let (k, v) = kv?;
                decode(&k, &v)
            })
            .collect()
    }

    /// The recorded runs that ended in `[from_ms, to_ms)`, oldest end first.
    pub fn runs_between(&self, from_ms: i64, to_ms: i64) -> Result<Vec<RunRecord>> {
        let mut runs = Vec::new();
        self.scan_runs(from_ms, to_ms, |run| runs.push(run))?;
        Ok(runs)
    }

    /// Calls `each` with every recorded run that ended in `[from_ms, to_ms)`, oldest end
    /// first, without collecting them.
    pub fn scan_runs(
        &self,
        from_ms: i64,
        to_ms: i64,
        mut each: impl FnMut(RunRecord),
    ) -> Result<()> {
        self.scan_run_views(from_ms, to_ms, |run| each(run.to_record()))
    }

    /// [`Store::scan_runs`] with each run borrowed from the store's page: a report over a
    /// million runs copies no string. Two threads share the work: one walks the tree and hands
    /// over batches of entries (sled's iteration is most of the cost), the caller's decodes
    /// them and calls `each`.
    pub fn scan_run_views(
        &self,
        from_ms: i64,
        to_ms: i64,
        mut each: impl FnMut(&RunView<'_>),
    ) -> Result<()> {
        if from_ms >= to_ms {
            return Ok(());
        }
        const BATCH: usize = 4096;
        type Entries = Vec<(sled::IVec, sled::IVec)>;
        let range = usage::first_key(from_ms)..usage::first_key(to_ms);
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<std::result::Result<Entries, sled::Error>>(8);
        std::thread::scope(|scope| {
            let tree = &self.usage;
            scope.spawn(move || {
                let mut batch = Vec::with_capacity(BATCH);
                for kv in tree.range(range) {
                    match kv {
                        Ok(kv) => batch.push(kv),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                    if batch.len() == BATCH {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                        if tx.send(Ok(full)).is_err() {
                            return; // the reader stopped (a corrupt record)
                        }
                    }
                }
                if !batch.is_empty() {
                    let _ = tx.send(Ok(batch));
                }
            });
            for batch in rx {
                for (k, v) in batch? {
                    each(&usage::decode(&k, &v)?);
                }
            }
            Ok(())
        })
    }

    /// Whether a run with the same end, job and restart as `run` is recorded.
    pub fn has_run(&self, run: &RunRecord) -> Result<bool> {
        Ok(self.usage.contains_key(usage::key(run))?)
    }

    /// How many runs are recorded (counts them: for tests and benchmarks).
    pub fn run_count(&self) -> usize {
        self.usage.len()
    }

    /// A job's history: for an array's task, the array's submit first (one event for all
    /// its tasks, under the array's id), then its own.
    pub fn job_events(&self, job: &Job) -> Result<Vec<JobEvent>> {
        let mut events = self.events(job.id)?;
        if let Some(task) = job.array.filter(|a| a.array_id != job.id) {
            let submitted = self
                .events(task.array_id)?
                .into_iter()
                .find(|e| e.kind == JobEventKind::Submitted.as_str());
            if let Some(e) = submitted {
                events.insert(0, e);
            }
        }
        // A task that ended without a record of its own: its end's events are kept with the
        // array.
        if job.array.is_some() && !self.jobs.contains_key(job.id.0.to_be_bytes())? {
            if let Some((record, i)) = self.submitted_task(job.id)? {
                if let Some(ended) = record.ended_at(i) {
                    events.extend(ended.events.iter().cloned());
                }
            }
        }
        Ok(events)
    }

    pub fn events(&self, id: JobId) -> Result<Vec<JobEvent>> {
        self.events
            .scan_prefix(id.0.to_be_bytes())
            .map(|kv| {
                let (k, v) = kv?;
                decode(&k, &v)
            })
            .collect()
    }
}
