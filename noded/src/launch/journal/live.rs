//! What the journal's records say: each record ([`Entry`]), and the jobs they leave live
//! ([`Live`]), as a replay or the committer folds them in.

use super::frame;
use crate::launch::spool::{FinishedRecord, JobRecord, StopState, EXIT_ERROR_MAX_BYTES};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;

/// One record of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Entry {
    /// A job accepted for launch here: everything needed to supervise it after a restart
    /// (its environment included). Synced. A new run of a job replaces the earlier one.
    Launched(Box<JobRecord>),
    /// The job's main process exec'd: its pid (its process group) and when. Not synced.
    Started {
        job_id: u64,
        job_pid: u32,
        start_time_ms: i64,
    },
    /// The job's stop progress (asked, timed out, SIGTERM and SIGKILL times). Not synced.
    Stop { job_id: u64, stop: StopState },
    /// How the job ended, as reported to schedd. Synced before it is reported.
    Ended(FinishedRecord),
    /// schedd recorded the end: the job is forgotten. Not synced.
    Acked { job_id: u64 },
}

impl Entry {
    /// Whether the record must be on disk before anyone acts on it (see the module docs).
    pub fn needs_sync(&self) -> bool {
        matches!(self, Entry::Launched(_) | Entry::Ended(_))
    }

    pub fn job_id(&self) -> u64 {
        match self {
            Entry::Launched(record) => record.job.job_id,
            Entry::Ended(finished) => finished.job_id,
            Entry::Started { job_id, .. }
            | Entry::Stop { job_id, .. }
            | Entry::Acked { job_id } => *job_id,
        }
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let payload = match self {
            // The error is cut as the blank `exit.json` cut it, so that an end always fits
            // its reserve.
            Entry::Ended(finished) if finished.error.len() > EXIT_ERROR_MAX_BYTES => {
                let mut cut = finished.clone();
                let mut end = EXIT_ERROR_MAX_BYTES;
                while !cut.error.is_char_boundary(end) {
                    end -= 1;
                }
                cut.error.truncate(end);
                cut.error.push('…');
                serde_json::to_vec(&Entry::Ended(cut))
            }
            entry => serde_json::to_vec(entry),
        }
        .map_err(io::Error::other)?;
        frame::encode(&payload, out)
    }
}

/// What the journal knows of one job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobState {
    /// The job as launched, with its start and stop progress folded in; `None` for an end
    /// recorded without a launch (a launch refused before it was recorded).
    pub record: Option<JobRecord>,
    /// Its end, once recorded, until schedd acknowledges it.
    pub ended: Option<FinishedRecord>,
}

/// The jobs the journal's records leave live: launched and not acknowledged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Live {
    pub jobs: BTreeMap<u64, JobState>,
}

impl Live {
    /// Folds one record in.
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::Launched(record) => {
                self.jobs.insert(
                    record.job.job_id,
                    JobState {
                        record: Some(JobRecord::clone(record)),
                        ended: None,
                    },
                );
            }
            Entry::Started {
                job_id,
                job_pid,
                start_time_ms,
            } => {
                if let Some(record) = self.record_mut(*job_id) {
                    record.job_pid = Some(*job_pid);
                    record.start_time_ms = *start_time_ms;
                }
            }
            Entry::Stop { job_id, stop } => {
                if let Some(record) = self.record_mut(*job_id) {
                    record.stop = stop.clone();
                }
            }
            Entry::Ended(finished) => {
                self.jobs.entry(finished.job_id).or_default().ended = Some(finished.clone());
            }
            Entry::Acked { job_id } => {
                self.jobs.remove(job_id);
            }
        }
    }

    fn record_mut(&mut self, job_id: u64) -> Option<&mut JobRecord> {
        self.jobs.get_mut(&job_id)?.record.as_mut()
    }

    /// Jobs launched whose end is not recorded: running, or lost with their processes.
    pub fn unended(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs
            .values()
            .filter(|job| job.ended.is_none())
            .filter_map(|job| job.record.as_ref())
    }

    /// Recorded ends schedd has not acknowledged, by job id.
    pub fn unacked_ends(&self) -> impl Iterator<Item = &FinishedRecord> {
        self.jobs.values().filter_map(|job| job.ended.as_ref())
    }

    /// The records that rebuild this state (what compaction writes).
    pub fn snapshot(&self) -> Vec<Entry> {
        let mut entries = Vec::new();
        for job in self.jobs.values() {
            if let Some(record) = &job.record {
                entries.push(Entry::Launched(Box::new(record.clone())));
            }
            if let Some(finished) = &job.ended {
                entries.push(Entry::Ended(finished.clone()));
            }
        }
        entries
    }

    pub(super) fn unended_count(&self) -> u64 {
        self.jobs.values().filter(|job| job.ended.is_none()).count() as u64
    }
}
