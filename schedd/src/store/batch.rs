//! An event's change encoded for the store ([`Batch`]): job records (an array's tasks as one
//! record), payloads, history entries, nodes, audit records, usage records and the id counter,
//! as JSON or the usage records' binary form, with the bytes they will take counted for the
//! room check.

use super::arrays::{same_but_place, spec_placeholder, spec_shared, ArrayRecord};
use super::history::{end_of, index_of, IndexWrite};
use super::upkeep::{bounded_detail, AUDIT_DETAIL_MAX_BYTES};
use super::{ended, usage, Payload};
use crate::state::Effects;
use ysched_common::{AuditRecord, HostEnrolment, Job, JobEvent, JobId, JobSpec, Node, RunRecord};

/// One atomic change: job records, events and nodes written together. Serializable: it is
/// what a replica's log entry carries (see `replica`), applied to each replica's store.
#[derive(Default, Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Batch {
    pub(super) jobs: Vec<(JobId, JobWrite)>,
    pub(super) events: Vec<(JobId, JobEvent)>,
    pub(super) payloads: Vec<(JobId, Vec<u8>)>,
    pub(super) nodes: Vec<(String, Vec<u8>)>,
    /// Hosts' enrolments, by name (kept in `meta` under [`super::HOST_PREFIX`]). Left out of
    /// the entries that enrol none (and of those written before enrolments were).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) hosts: Vec<(String, Vec<u8>)>,
    pub(super) audit: Vec<Vec<u8>>,
    pub(super) next_job_id: Option<u64>,
    pub(super) runs: Vec<(usage::RunKey, Vec<u8>)>,
    pub(super) array_specs: Vec<(JobId, Vec<u8>)>,
    pub(super) arrays: Vec<(JobId, Vec<u8>)>,
    /// The history index's entries for the jobs and arrays written (see [`super::history`]).
    pub(super) index: Vec<IndexWrite>,
    /// About how many bytes the batch writes (keys and values), for [`Store::check_room`].
    pub(super) bytes: u64,
    /// History past its retention, removed (see [`Removals`]). Left out of the entries that
    /// remove nothing, and of those written before it was (they still read).
    #[serde(default, skip_serializing_if = "Removals::is_empty")]
    pub(super) removals: Removals,
    /// `meta` keys written in the same transaction: a replica's mark of the log entry the
    /// batch came from (see [`Store::apply_replicated`]); never replicated itself.
    #[serde(skip)]
    pub(super) marks: Vec<(&'static [u8], Vec<u8>)>,
}

/// History past its retention removed in one step of its expiry (see `history` and
/// `upkeep`): named by what every replica's store holds alike (job ids, and the keys of the
/// index and of usage records, which are the same everywhere), never by the keys a store
/// made itself (an event's, an audit entry's), so that a replicated removal removes the same
/// on every replica. Applied in one transaction with the rest of its batch.
#[derive(Default, Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Removals {
    /// Job records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) jobs: Vec<JobId>,
    /// Payloads, by their job's (or array's) id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) payloads: Vec<JobId>,
    /// Every history entry of these jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) events_of: Vec<JobId>,
    /// Arrays gone with their last task: record, spec, payload and history entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) arrays: Vec<JobId>,
    /// `index` keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) index: Vec<Vec<u8>>,
    /// `usage` keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) usage: Vec<Vec<u8>>,
    /// How many audit entries go, oldest first (every replica appends them in the log's
    /// order).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(super) oldest_audit: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Removals {
    pub(super) fn is_empty(&self) -> bool {
        *self == Removals::default()
    }
}

/// What [`Batch::bytes`] counts for an array task that ends without having run: usually
/// kept in its array's record, whose size the batch does not know beforehand.
const ENDED_TASK_BYTES: u64 = 512;

/// A job's write: its record, or an array task that ended without running, which
/// [`Store::apply`] keeps in its array's record when it can (see [`ended`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) enum JobWrite {
    Record(Vec<u8>),
    EndedTask(Box<Job>),
}

/// A job's record. Script and environment live in `payloads`; a job record never repeats
/// them. An array's task leaves its whole spec to `array_specs` (see `put_array_spec`).
pub(super) fn encode_job(job: &Job) -> Vec<u8> {
    let value = if spec_shared(job) {
        let mut slim = job.clone();
        slim.spec = std::sync::Arc::clone(spec_placeholder());
        serde_json::to_vec(&slim)
    } else if job.spec.script.is_empty() && job.spec.env.is_empty() {
        serde_json::to_vec(job)
    } else {
        let mut slim = job.clone();
        let spec = std::sync::Arc::make_mut(&mut slim.spec);
        spec.script.clear();
        spec.env.clear();
        serde_json::to_vec(&slim)
    };
    value.expect("job serializes")
}

/// An event's durable change, encoded: its submit's jobs (an array's as one record), the new
/// versions of jobs and nodes, payloads, history entries (their kinds as their stored text),
/// audit records, usage records and the id counter.
impl From<&Effects> for Batch {
    fn from(effects: &Effects) -> Batch {
        let mut batch = Batch::default();
        batch.put_array(&effects.submitted);
        for job in &effects.jobs {
            batch.put_job(job);
        }
        for (id, payload) in &effects.payloads {
            batch.put_payload(*id, payload);
        }
        for entry in &effects.events {
            batch.event(
                entry.job,
                entry.time,
                entry.kind.as_str(),
                entry.detail.as_str(),
            );
        }
        for node in &effects.nodes {
            batch.put_node(node);
        }
        for host in &effects.hosts {
            batch.put_host(host);
        }
        for record in &effects.audit {
            batch.audit(record);
        }
        for run in &effects.runs {
            batch.put_run(run);
        }
        if let Some(next) = effects.next_job_id {
            batch.set_next_job_id(next);
        }
        batch
    }
}

impl Batch {
    pub fn put_job(&mut self, job: &Job) {
        let write = if ended::candidate(job) {
            // Its index entry is decided with the task, in the transaction (see
            // `Store::apply`): a run of tasks kept in their array's record shares one.
            self.bytes += ENDED_TASK_BYTES;
            JobWrite::EndedTask(Box::new(job.clone()))
        } else {
            let index = index_of(job);
            if let IndexWrite::Ended(_, _, value) = &index {
                self.bytes += 17 + value.len() as u64;
            }
            self.index.push(index);
            let record = encode_job(job);
            self.bytes += 8 + record.len() as u64;
            JobWrite::Record(record)
        };
        self.jobs.push((job.id, write));
    }

    /// Every task of an array, as just submitted (`tasks`: consecutive ids from the array's,
    /// in task order, sharing one spec): their spec and one record of them all (see
    /// [`ArrayRecord`]), instead of a record each. Tasks that do not follow the pattern (none
    /// do, as the state machine makes them) are written one by one.
    pub fn put_array(&mut self, tasks: &[Job]) {
        let Some(first) = tasks.first() else {
            return;
        };
        let Some(spec) = first.spec.array.as_ref().filter(|_| spec_shared(first)) else {
            for job in tasks {
                self.put_job(job);
            }
            return;
        };
        let indices = spec.tasks();
        let same_dir = tasks
            .iter()
            .all(|j| j.checkpoint_dir == first.checkpoint_dir);
        let prefix = if same_dir {
            None
        } else {
            first
                .checkpoint_dir
                .strip_suffix(&first.id.to_string())
                .map(str::to_string)
        };
        let record = ArrayRecord {
            first: first.clone(),
            count: tasks.len() as u32,
            checkpoint_prefix: prefix,
            ended: Vec::new(),
        };
        let mut dir = String::new();
        let follows = indices.len() == tasks.len()
            && (same_dir || record.checkpoint_prefix.is_some())
            && tasks.iter().enumerate().all(|(i, j)| {
                let id = JobId(first.id.0 + i as u64);
                let task = ysched_common::ArrayTask {
                    array_id: first.id,
                    task: indices[i],
                };
                let dir_ok = match &record.checkpoint_prefix {
                    None => j.checkpoint_dir == first.checkpoint_dir,
                    Some(prefix) => {
                        use std::fmt::Write;
                        dir.clear();
                        let _ = write!(dir, "{prefix}{id}");
                        j.checkpoint_dir == dir
                    }
                };
                j.id == id && j.array == Some(task) && dir_ok && same_but_place(j, first)
            });
        if !follows {
            for job in tasks {
                self.put_job(job);
            }
            self.put_array_spec(first.id, &first.spec);
            return;
        }
        let mut slim = record;
        slim.first.spec = std::sync::Arc::clone(spec_placeholder());
        let value = serde_json::to_vec(&slim).expect("array record serializes");
        self.bytes += 8 + value.len() as u64;
        self.arrays.push((first.id, value));
        self.index.push(IndexWrite::LiveArray(first.id));
        // Tasks that ended as they were submitted (all alike, or they would not follow the
        // pattern): one key for them all, read from the array's record.
        if first.state.is_terminal() {
            self.index.push(IndexWrite::EndedTasks {
                first: first.id,
                last: JobId(first.id.0 + tasks.len() as u64 - 1),
                end: end_of(first),
            });
        }
        self.put_array_spec(first.id, &first.spec);
    }

    /// The spec the tasks of array `array_id` share (written once, with the tasks).
    pub fn put_array_spec(&mut self, array_id: JobId, spec: &JobSpec) {
        let value = if spec.script.is_empty() && spec.env.is_empty() {
            serde_json::to_vec(spec)
        } else {
            let mut slim = spec.clone();
            slim.script.clear();
            slim.env.clear();
            serde_json::to_vec(&slim)
        };
        let value = value.expect("spec serializes");
        self.bytes += 8 + value.len() as u64;
        self.array_specs.push((array_id, value));
    }

    pub fn put_payload(&mut self, id: JobId, payload: &Payload) {
        let value = serde_json::to_vec(payload).expect("payload serializes");
        self.bytes += 8 + value.len() as u64;
        self.payloads.push((id, value));
    }

    pub fn event(&mut self, id: JobId, time: i64, kind: &str, detail: impl Into<String>) {
        let event = JobEvent {
            time,
            kind: kind.to_string(),
            detail: detail.into(),
        };
        // Its JSON: the two strings and some 40 bytes around them.
        self.bytes += 16 + 40 + (event.kind.len() + event.detail.len()) as u64;
        self.events.push((id, event));
    }

    pub fn put_node(&mut self, node: &Node) {
        let value = serde_json::to_vec(node).expect("node serializes");
        self.bytes += (node.name.len() + value.len()) as u64;
        self.nodes.push((node.name.clone(), value));
    }

    pub fn put_host(&mut self, host: &HostEnrolment) {
        let value = serde_json::to_vec(host).expect("enrolment serializes");
        self.bytes += (super::HOST_PREFIX.len() + host.name.len() + value.len()) as u64;
        self.hosts.push((host.name.clone(), value));
    }

    /// An audit entry; its detail is cut to [`AUDIT_DETAIL_MAX_BYTES`].
    pub fn audit(&mut self, record: &AuditRecord) {
        let value = match bounded_detail(&record.detail, AUDIT_DETAIL_MAX_BYTES) {
            std::borrow::Cow::Borrowed(_) => serde_json::to_vec(record),
            std::borrow::Cow::Owned(detail) => serde_json::to_vec(&AuditRecord {
                detail,
                ..record.clone()
            }),
        }
        .expect("audit record serializes");
        self.bytes += 8 + value.len() as u64;
        self.audit.push(value);
    }

    /// A run's usage record (see the `usage` tree).
    pub fn put_run(&mut self, run: &RunRecord) {
        let (key, value) = (usage::key(run), usage::encode(run));
        self.bytes += (key.len() + value.len()) as u64;
        self.runs.push((key, value));
    }

    pub fn set_next_job_id(&mut self, next: u64) {
        self.next_job_id = Some(next);
    }

    /// Whether the batch can share one transaction with the batches before it
    /// ([`Batch::absorb`]): what its transaction reads of the store before writing (the
    /// history a removal takes, the own records of array tasks that end without running)
    /// must not depend on writes of the same transaction, and a replica's marks go with
    /// their own entry.
    pub(super) fn mergeable(&self) -> bool {
        self.removals.is_empty()
            && self.marks.is_empty()
            && !self
                .jobs
                .iter()
                .any(|(_, write)| matches!(write, JobWrite::EndedTask(_)))
    }

    /// Appends `later`'s writes after this batch's, as if applied one after the other: a key
    /// both write ends with `later`'s value, the id counter with the later one (it only
    /// grows). Both must be [`Batch::mergeable`].
    pub(super) fn absorb(&mut self, later: Batch) {
        debug_assert!(self.mergeable() && later.mergeable());
        let Batch {
            jobs,
            events,
            payloads,
            nodes,
            hosts,
            audit,
            next_job_id,
            runs,
            array_specs,
            arrays,
            index,
            bytes,
            removals: _,
            marks: _,
        } = later;
        self.jobs.extend(jobs);
        self.events.extend(events);
        self.payloads.extend(payloads);
        self.nodes.extend(nodes);
        self.hosts.extend(hosts);
        self.audit.extend(audit);
        self.next_job_id = next_job_id.or(self.next_job_id);
        self.runs.extend(runs);
        self.array_specs.extend(array_specs);
        self.arrays.extend(arrays);
        self.index.extend(index);
        self.bytes += bytes;
    }

    /// Whether the batch writes audit entries.
    pub fn has_audit(&self) -> bool {
        !self.audit.is_empty()
    }

    /// About how many bytes the batch writes: its keys and values.
    pub fn bytes(&self) -> u64 {
        self.bytes + if self.next_job_id.is_some() { 19 } else { 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.events.is_empty()
            && self.payloads.is_empty()
            && self.nodes.is_empty()
            && self.hosts.is_empty()
            && self.audit.is_empty()
            && self.next_job_id.is_none()
            && self.runs.is_empty()
            && self.array_specs.is_empty()
            && self.arrays.is_empty()
            && self.marks.is_empty()
            && self.removals.is_empty()
    }

    /// The batch as a replicated log entry carries it.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a batch serializes")
    }

    /// A batch from a replicated log entry.
    pub fn from_bytes(bytes: &[u8]) -> super::Result<Batch> {
        super::decode(b"replicated batch", bytes)
    }
}

/// How many of each kind of write a batch holds (for tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BatchCounts {
    pub jobs: usize,
    pub events: usize,
    pub payloads: usize,
    pub audit: usize,
    pub array_specs: usize,
    pub arrays: usize,
    pub next_job_id: Option<u64>,
}

#[cfg(test)]
impl Batch {
    pub(crate) fn counts(&self) -> BatchCounts {
        BatchCounts {
            jobs: self.jobs.len(),
            events: self.events.len(),
            payloads: self.payloads.len(),
            audit: self.audit.len(),
            array_specs: self.array_specs.len(),
            arrays: self.arrays.len(),
            next_job_id: self.next_job_id,
        }
    }
}
