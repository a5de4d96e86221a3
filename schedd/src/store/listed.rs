//! The values of the history index's `e` keys (see [`super::history`]): what a listing of
//! finished jobs by end time reads in place of each job's record, so that it costs one range
//! scan and a copy of bytes per job, not a point read and a JSON decode of ~1.8 KB.
//!
//! A value is one of:
//! - empty: written before values were (a store of an earlier version): the job's record
//!   says the rest;
//! - [`LISTED`] ++ the fields a listing's filter and the hiding of others' usage look at
//!   (state, uid, submit time, user, account) ++ the job's listing entry, as
//!   `ysched_common::convert::job_listing_bytes` made it when the job ended (opaque here);
//! - [`TASKS`] ++ the last id (u64 BE) of a run of an array's tasks, from the key's id on,
//!   that ended together without a record of their own (an array cancelled while queued: see
//!   [`super::ended`]): one key for them all, so that cancelling a 10,000-task array writes
//!   one key, not 10,000; each task is made from its array's record when listed.

use std::ops::Range;
use ysched_common::time::Millis;
use ysched_common::{Job, JobId, JobState};

/// Tag of a value holding one job's listing entry.
const LISTED: u8 = 1;
/// Tag of a value naming a run of an array's tasks kept in its record.
const TASKS: u8 = 2;

/// A finished job as the `e` index keeps it for listings: what filters look at, and its
/// key's value as sled's cache holds it (user, account and listing entry are read in place,
/// not copied: a listing of 30,000 finished jobs made 90,000 allocations of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedEntry {
    pub id: JobId,
    pub state: JobState,
    pub uid: u32,
    pub submit_time: Millis,
    value: sled::IVec,
    user: Range<usize>,
    account: Range<usize>,
    /// Where its listing entry begins: the rest of `value`.
    listing: usize,
}

impl FinishedEntry {
    /// The owner's user name.
    pub fn user(&self) -> &str {
        // Checked to be UTF-8 when read (`parse`).
        std::str::from_utf8(&self.value[self.user.clone()]).unwrap_or_default()
    }

    /// The job's account.
    pub fn account(&self) -> &str {
        std::str::from_utf8(&self.value[self.account.clone()]).unwrap_or_default()
    }

    /// Its listing entry, as `ysched_common::convert::job_listing_bytes` made it when the job
    /// ended.
    pub fn listing(&self) -> StoredBytes {
        StoredBytes {
            value: self.value.clone(),
            start: self.listing,
        }
    }

    /// The entry the index keeps of finished `job`.
    #[cfg(test)]
    pub(crate) fn of(job: &Job) -> FinishedEntry {
        match parse(job.id, &listed_value(job).into()) {
            Some(EndedValue::Listed(entry)) => entry,
            other => panic!("a finished job's value reads back as {other:?}"),
        }
    }
}

/// Bytes of a value read from the store, shared with sled's cache rather than copied.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredBytes {
    value: sled::IVec,
    start: usize,
}

impl std::ops::Deref for StoredBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.value[self.start..]
    }
}

impl std::fmt::Debug for StoredBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoredBytes({} bytes)", self.len())
    }
}

/// A finished job of a listing by end time: its kept entry, or (for keys written before
/// values were, and for array tasks kept in their array's record) its record.
#[derive(Debug, Clone)]
pub enum Finished {
    Entry(FinishedEntry),
    Record(Box<Job>),
}

impl Finished {
    pub fn id(&self) -> JobId {
        match self {
            Finished::Entry(e) => e.id,
            Finished::Record(j) => j.id,
        }
    }
}

/// An `e` key's value, read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum EndedValue {
    /// No value (an earlier version's key): read the record.
    Bare,
    Listed(FinishedEntry),
    /// The key's task and the following ones up to this id, kept in their array's record.
    Tasks {
        last: JobId,
    },
}

/// The value of a finished job's `e` key: its listing entry and the fields filters use.
pub(super) fn listed_value(job: &Job) -> Vec<u8> {
    let listing = ysched_common::convert::job_listing_bytes(job);
    let (user, account) = (job.owner.user.as_bytes(), job.spec.account.as_bytes());
    let mut v = Vec::with_capacity(1 + 1 + 4 + 8 + 4 + user.len() + account.len() + listing.len());
    v.push(LISTED);
    v.push(state_code(job.state));
    v.extend_from_slice(&job.owner.uid.to_be_bytes());
    v.extend_from_slice(&job.submit_time.to_be_bytes());
    put_text(&mut v, user);
    put_text(&mut v, account);
    v.extend_from_slice(&listing);
    v
}

/// The value of the `e` key of tasks `key id ..= last` of one array.
pub(super) fn tasks_value(last: JobId) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[0] = TASKS;
    v[1..].copy_from_slice(&last.0.to_be_bytes());
    v
}

/// Reads the value of job `id`'s `e` key; `None` when it is malformed (then the record is
/// read, as for a bare key).
pub(super) fn parse(id: JobId, value: &sled::IVec) -> Option<EndedValue> {
    let Some((&tag, rest)) = value.split_first() else {
        return Some(EndedValue::Bare);
    };
    match tag {
        LISTED => {
            let (&state, rest) = rest.split_first()?;
            let state = *JobState::ALL.get(usize::from(state))?;
            let (uid, rest) = rest.split_first_chunk::<4>()?;
            let (submit, _) = rest.split_first_chunk::<8>()?;
            let user = text_at(value, 1 + 1 + 4 + 8)?;
            let account = text_at(value, user.end)?;
            Some(EndedValue::Listed(FinishedEntry {
                id,
                state,
                uid: u32::from_be_bytes(*uid),
                submit_time: i64::from_be_bytes(*submit),
                value: value.clone(),
                listing: account.end,
                user,
                account,
            }))
        }
        TASKS => {
            let last: &[u8; 8] = rest.try_into().ok()?;
            let last = JobId(u64::from_be_bytes(*last));
            // An array's places are u32: a longer run is no value this store wrote.
            (last >= id && last.0 - id.0 <= u64::from(u32::MAX))
                .then_some(EndedValue::Tasks { last })
        }
        _ => None,
    }
}

/// A state's place in [`JobState::ALL`] (which only grows at its end).
fn state_code(state: JobState) -> u8 {
    JobState::ALL
        .iter()
        .position(|s| *s == state)
        .expect("every state is in ALL") as u8
}

/// A text of at most 64 KiB, after its length (u16 BE); a longer one (never: users and
/// accounts are bounded far below) is cut.
fn put_text(v: &mut Vec<u8>, text: &[u8]) {
    let len = text.len().min(usize::from(u16::MAX));
    v.extend_from_slice(&(len as u16).to_be_bytes());
    v.extend_from_slice(&text[..len]);
}

/// The range of the text (see [`put_text`]) at `at` in `value`, when it is there and UTF-8.
fn text_at(value: &[u8], at: usize) -> Option<Range<usize>> {
    let len = value.get(at..at + 2)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    let text = at + 2..at + 2 + len;
    std::str::from_utf8(value.get(text.clone())?).ok()?;
    Some(text)
}
