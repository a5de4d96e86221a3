//! Applying a batch: one sled transaction over every tree, with each history entry keyed in
//! the store's own increasing order and what the batch removes resolved to keys first.

use super::batch::{self, encode_job, JobWrite};
use super::history::{self, IndexWrite};
use super::{ended, host_key, listed, release_deferred, Batch, Error, Result, Store, NEXT_JOB_ID};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use ysched_common::JobId;

/// Writes the `e` keys of the array tasks `batch` ends without their having run
/// ([`JobWrite::EndedTask`]): a task written as any job gets its own (with its listing, see
/// [`listed`]), and the tasks kept in their array's record (`compacted`) one per run of
/// consecutive ids that ended at the same time: cancelling a queued 10,000-task array writes
/// one key, not 10,000 (which had taken it from ~83 to ~200 ms). Those had no `j` key (a
/// task as submitted has none), so none is removed.
fn ended_tasks_indexed(
    batch: &Batch,
    compacted: &std::collections::HashSet<JobId>,
    index: &sled::transaction::TransactionalTree,
) -> std::result::Result<(), sled::transaction::UnabortableTransactionError> {
    // By array, then end: a run never spans two arrays (expiry takes a run as its array's).
    let mut kept: Vec<(JobId, i64, JobId)> = Vec::new();
    for (id, write) in &batch.jobs {
        let JobWrite::EndedTask(job) = write else {
            continue;
        };
        let end = history::end_of(job);
        if compacted.contains(id) {
            kept.push((job.array.map_or(*id, |a| a.array_id), end, *id));
        } else {
            index.remove(&history::active_key(*id))?;
            index.insert(&history::ended_key(end, *id), listed::listed_value(job))?;
        }
    }
    kept.sort_unstable();
    let mut runs = kept.into_iter().peekable();
    while let Some((array, end, first)) = runs.next() {
        let mut last = first;
        while let Some((_, _, next)) =
            runs.next_if(|&(a, e, id)| a == array && e == end && id.0 == last.0 + 1)
        {
            last = next;
        }
        index.insert(&history::ended_key(end, first), &listed::tasks_value(last))?;
    }
    Ok(())
}

/// What [`Store::resolve_removals`] found.
#[derive(Default)]
struct ResolvedRemovals {
    events: Vec<sled::IVec>,
    audit: Vec<sled::IVec>,
    audit_bytes: u64,
}

/// Event keys are the job id, then an increasing number: this bit and a store-wide id (from
/// `sled::Db::generate_id`), or a per-job sequence number in stores written before.
const EVENT_ID_BASE: u64 = 1 << 63;

/// Bits of an event's sequence for its place in its batch (see [`Store::apply`]).
const EVENT_SEQ_BITS: u32 = 24;

/// The least store-wide id whose events sort after the event keyed `key` (0 for the per-job
/// sequence numbers of older stores, which every generated id follows).
pub(super) fn event_id_after(key: &[u8]) -> u64 {
    let Some(seq) = key.get(8..16).and_then(|s| <[u8; 8]>::try_from(s).ok()) else {
        return 0;
    };
    let seq = u64::from_be_bytes(seq);
    match seq.checked_sub(EVENT_ID_BASE) {
        Some(generated) => (generated >> EVENT_SEQ_BITS).saturating_add(1),
        None => 0,
    }
}

fn event_key(id: JobId, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.0.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

impl Store {
    /// Applies a change atomically (not yet durable: see [`Store::flush`]): a batch, or an
    /// event's effects, encoded here.
    pub fn apply(&self, change: impl Into<Batch>) -> Result<()> {
        self.apply_batch(&change.into())
    }

    /// Applies `batches` in their order, as [`Store::apply`] of each would, in as few
    /// transactions as their kinds allow (see [`Batch::mergeable`]): sled 0.34 writes its log
    /// buffer out at every transaction, so a wave of submits written as one costs one write
    /// instead of one each. On an error, the batches before the failed transaction are
    /// applied, the rest not.
    pub fn apply_group(&self, batches: impl IntoIterator<Item = Batch>) -> Result<()> {
        let mut merged: Option<Batch> = None;
        for batch in batches {
            if batch.is_empty() {
                continue;
            }
            if !batch.mergeable() {
                if let Some(before) = merged.take() {
                    self.apply_batch(&before)?;
                }
                self.apply_batch(&batch)?;
                continue;
            }
            match &mut merged {
                Some(before) => before.absorb(batch),
                None => merged = Some(batch),
            }
        }
        match merged {
            Some(batch) => self.apply_batch(&batch),
            None => Ok(()),
        }
    }

    /// [`Store::apply`] of a batch the caller keeps.
    pub(super) fn apply_batch(&self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        let _writing = self.writing();
        let mut audit = Vec::with_capacity(batch.audit.len());
        let mut audit_bytes = 0;
        if !batch.audit.is_empty() {
            // After the last entry, whatever the store's own counter says: a replica whose
            // state a snapshot replaced holds the leader's keys, and its entries must stay
            // in the log's order (retention removes the oldest: see `Removals`).
            let mut next = match self.audit.last()? {
                Some((k, _)) => <[u8; 8]>::try_from(k.as_ref())
                    .map_or(0, |k| u64::from_be_bytes(k).saturating_add(1)),
                None => 0,
            };
            for rec in &batch.audit {
                let id = self.db.generate_id()?.max(next);
                next = id.saturating_add(1);
                audit.push((id.to_be_bytes(), rec.as_slice()));
                audit_bytes += 8 + rec.len() as u64;
            }
        }
        let removed = self.resolve_removals(&batch.removals)?;
        // Keyed here, and written in the transaction unless their task was compacted.
        let mut events = Vec::with_capacity(batch.events.len());
        if !batch.events.is_empty() {
            // The store's own increasing ids order a job's events without reading its last
            // one first: one per batch, shifted, plus the event's place in the batch (a
            // batch may hold thousands: an array's cancel). Sequences after those of earlier
            // batches (a generated id is larger than every earlier one, shifted or not), and
            // the top bit puts them after the per-job sequence numbers that stores written
            // by earlier versions hold.
            let generated = self
                .db
                .generate_id()?
                .max(self.event_id_floor.load(Relaxed));
            self.event_id_floor
                .store(generated.saturating_add(1), Relaxed);
            let base = EVENT_ID_BASE + (generated << EVENT_SEQ_BITS);
            for (i, (id, ev)) in batch.events.iter().enumerate() {
                let seq = base + i as u64;
                events.push((*id, event_key(*id, seq), ev));
            }
        }
        let own_records = self.own_records_of_ended_tasks(batch)?;
        let res: std::result::Result<(), TransactionError<()>> = (
            &self.jobs,
            &self.payloads,
            &self.events,
            &self.nodes,
            &self.audit,
            &self.meta,
            &self.usage,
            &self.array_specs,
            &self.arrays,
            &self.index,
        )
            .transaction(
                |(jobs, payloads, ev, nodes, au, meta, usage, specs, arrays, index)| {
                    let gone = &batch.removals;
                    for id in &gone.jobs {
                        jobs.remove(&id.0.to_be_bytes())?;
                    }
                    for id in gone.payloads.iter().chain(&gone.arrays) {
                        payloads.remove(&id.0.to_be_bytes())?;
                    }
                    for id in &gone.arrays {
                        specs.remove(&id.0.to_be_bytes())?;
                        arrays.remove(&id.0.to_be_bytes())?;
                    }
                    for k in &removed.events {
                        ev.remove(k)?;
                    }
                    for k in &removed.audit {
                        au.remove(k)?;
                    }
                    for k in &gone.index {
                        index.remove(k.as_slice())?;
                    }
                    for k in &gone.usage {
                        usage.remove(k.as_slice())?;
                    }
                    for write in &batch.index {
                        match write {
                            IndexWrite::Active(id) => {
                                index.insert(&history::active_key(*id), &[])?;
                            }
                            IndexWrite::Ended(id, end, value) => {
                                index.remove(&history::active_key(*id))?;
                                index.insert(&history::ended_key(*end, *id), value.as_slice())?;
                            }
                            IndexWrite::EndedTasks { first, last, end } => {
                                index.insert(
                                    &history::ended_key(*end, *first),
                                    &listed::tasks_value(*last),
                                )?;
                            }
                            IndexWrite::LiveArray(id) => {
                                index.insert(&history::live_array_key(*id), &[])?;
                            }
                        }
                    }
                    // Arrays first: a task may end in the batch that submits it.
                    for (id, v) in &batch.array_specs {
                        specs.insert(&id.0.to_be_bytes(), v.as_slice())?;
                    }
                    for (id, v) in &batch.arrays {
                        arrays.insert(&id.0.to_be_bytes(), v.as_slice())?;
                    }
                    let mut compactor = ended::Compactor::new(own_records.clone());
                    for (id, write) in &batch.jobs {
                        let key = id.0.to_be_bytes();
                        match write {
                            JobWrite::Record(v) => {
                                jobs.insert(&key, v.as_slice())?;
                                compactor.written(*id);
                            }
                            JobWrite::EndedTask(job) => {
                                if !compactor.take(job, arrays, specs)? {
                                    jobs.insert(&key, encode_job(job))?;
                                    compactor.written(*id);
                                }
                            }
                        }
                    }
                    let finished = compactor.finish(&batch.events, arrays)?;
                    for job in finished.apart {
                        jobs.insert(&job.id.0.to_be_bytes(), encode_job(job))?;
                    }
                    ended_tasks_indexed(batch, &finished.compacted, index)?;
                    for (id, k, event) in &events {
                        if !finished.compacted.contains(id) {
                            ev.insert(k, serde_json::to_vec(event).expect("event"))?;
                        }
                    }
                    for (id, v) in &batch.payloads {
                        payloads.insert(&id.0.to_be_bytes(), v.as_slice())?;
                    }
                    for (name, v) in &batch.nodes {
                        nodes.insert(name.as_bytes(), v.as_slice())?;
                    }
                    for (name, v) in &batch.hosts {
                        meta.insert(host_key(name), v.as_slice())?;
                    }
                    for (k, v) in &audit {
                        au.insert(k, *v)?;
                    }
                    if let Some(next) = batch.next_job_id {
                        meta.insert(NEXT_JOB_ID, &next.to_be_bytes())?;
                    }
                    for (k, v) in &batch.runs {
                        usage.insert(k, v.as_slice())?;
                    }
                    for (k, v) in &batch.marks {
                        meta.insert(*k, v.as_slice())?;
                    }
                    Ok::<(), ConflictableTransactionError<()>>(())
                },
            );
        release_deferred();
        match res {
            Ok(()) => {
                use std::sync::atomic::Ordering::Relaxed;
                self.audit_bytes.fetch_add(audit_bytes, Relaxed);
                if removed.audit_bytes > 0 {
                    let _ = self.audit_bytes.fetch_update(Relaxed, Relaxed, |b| {
                        Some(b.saturating_sub(removed.audit_bytes))
                    });
                }
                Ok(())
            }
            Err(TransactionError::Storage(e)) => Err(e.into()),
            Err(TransactionError::Abort(())) => unreachable!("no transaction aborts"),
        }
    }

    /// The keys of this store's own making that `removals` names: the history entries of
    /// its jobs and arrays, and its oldest audit entries (with their bytes). Read under the
    /// write lock, so that they are the ones its transaction removes.
    fn resolve_removals(&self, removals: &batch::Removals) -> Result<ResolvedRemovals> {
        let mut resolved = ResolvedRemovals::default();
        for id in removals.events_of.iter().chain(&removals.arrays) {
            for k in self.events.scan_prefix(id.0.to_be_bytes()).keys() {
                resolved.events.push(k?);
            }
        }
        for kv in self.audit.iter().take(removals.oldest_audit) {
            let (k, v) = kv?;
            resolved.audit_bytes += (k.len() + v.len()) as u64;
            resolved.audit.push(k);
        }
        Ok(resolved)
    }

    /// Which of the array tasks `batch` ends without their having run have a record of their
    /// own in `jobs` (those are written as any job): one range scan per array.
    fn own_records_of_ended_tasks(
        &self,
        batch: &Batch,
    ) -> Result<std::collections::HashSet<JobId>> {
        let mut spans: BTreeMap<JobId, (u64, u64)> = BTreeMap::new();
        for (id, write) in &batch.jobs {
            if let JobWrite::EndedTask(job) = write {
                let Some(task) = job.array else { continue };
                let span = spans.entry(task.array_id).or_insert((id.0, id.0));
                span.0 = span.0.min(id.0);
                span.1 = span.1.max(id.0);
            }
        }
        let mut own = std::collections::HashSet::new();
        for (from, to) in spans.into_values() {
            for key in self
                .jobs
                .range(from.to_be_bytes()..=to.to_be_bytes())
                .keys()
            {
                let key = key?;
                if let Ok(bytes) = <[u8; 8]>::try_from(key.as_ref()) {
                    own.insert(JobId(u64::from_be_bytes(bytes)));
                }
            }
        }
        Ok(own)
    }
}
