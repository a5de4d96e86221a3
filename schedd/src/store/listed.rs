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
//!
//! A listing by end time reads them a page at a time ([`Store::finished_listed_page`]):
//! whatever the window, it holds the page it returns, not the window.

use super::arrays::Shared;
use super::{decode, Result, Store};
use std::collections::BTreeMap;
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

    /// The length of its listing entry.
    pub fn listing_len(&self) -> usize {
        self.value.len() - self.listing
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

/// What one page of a listing by end time may hold: so many jobs, and about so many bytes of
/// listing entries (the first job always, whatever its size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRoom {
    pub jobs: usize,
    pub bytes: usize,
}

impl PageRoom {
    /// No bound: the whole window.
    pub const WHOLE: PageRoom = PageRoom {
        jobs: usize::MAX,
        bytes: usize::MAX,
    };
}

/// What a job to be made from its record is counted as in a page until it is read.
const RECORD_GUESS: usize = 512;

/// What each id's latest key said, in a page being read.
enum Found {
    Entry(FinishedEntry),
    Record,
}

impl Found {
    fn size(&self) -> usize {
        match self {
            Found::Entry(entry) => entry.listing_len(),
            Found::Record => RECORD_GUESS,
        }
    }
}

/// The first ids of a window (the page), each with its latest key, as the keys come (by end
/// time): never more than the page holds; past the first id that had to go (`cut`), ids
/// are passed over.
struct FirstIds {
    room: PageRoom,
    found: BTreeMap<JobId, Found>,
    bytes: usize,
    cut: Option<JobId>,
}

impl FirstIds {
    fn open(&self, id: JobId) -> bool {
        self.cut.is_none_or(|cut| id < cut)
    }

    /// `id` as its latest key says: kept while it is among the page's first ids.
    fn put(&mut self, id: JobId, what: Found) {
        if !self.open(id) {
            return;
        }
        self.bytes += what.size();
        if let Some(earlier) = self.found.insert(id, what) {
            self.bytes -= earlier.size();
        }
        while self.found.len() > self.room.jobs
            || (self.bytes > self.room.bytes && self.found.len() > 1)
        {
            let Some((last, what)) = self.found.pop_last() else {
                break;
            };
            self.bytes -= what.size();
            self.cut = Some(last);
        }
    }

    /// `id`'s latest key is not selected: an earlier one no longer counts either.
    fn remove(&mut self, id: JobId) {
        if let Some(earlier) = self.found.remove(&id) {
            self.bytes -= earlier.size();
        }
    }
}

impl Store {
    /// The finished jobs that ended in `[from_ms, to_ms)` with ids above `after`, in id order,
    /// each once (see [`Store::finished_listed_page`]), all of them.
    pub fn finished_listed_between(
        &self,
        from_ms: Millis,
        to_ms: Millis,
        after: JobId,
    ) -> Result<Vec<Finished>> {
        Ok(self
            .finished_listed_page(from_ms, to_ms, after, PageRoom::WHOLE, |_| true)?
            .0)
    }

    /// A page of the finished jobs that ended in `[from_ms, to_ms)` with ids above `after`,
    /// in id order, each once: those whose `e` keys keep them for listings as their keys keep
    /// them (one range scan, no record read), if `selects` takes them; or, where a key has no
    /// listing (an earlier version's, or a run of an array's tasks kept in its record), made
    /// from their records (which the caller then selects). A job with two keys (written
    /// again with another end, which schedd does not do) is listed as of its latest end.
    ///
    /// The page is the first ids that fit `room`; `Some(bound)` when more may follow after
    /// `bound`. While it scans the window it holds the page, not the window: a listing since
    /// the first day of a long history costs a page's memory, however many jobs ended since.
    pub fn finished_listed_page(
        &self,
        from_ms: Millis,
        to_ms: Millis,
        after: JobId,
        room: PageRoom,
        selects: impl Fn(&FinishedEntry) -> bool,
    ) -> Result<(Vec<Finished>, Option<JobId>)> {
        let mut page = FirstIds {
            room,
            found: BTreeMap::new(),
            bytes: 0,
            cut: None,
        };
        for ended in self.ended_keys(from_ms, to_ms) {
            let (id, value) = ended?;
            // A key past the page, or before it, is not read: each page of a long window
            // passes over most of its keys. (A run of tasks goes on from its key's id: it may
            // reach past `after`, never back before `cut`.)
            if !page.open(id) || (id <= after && value.first() != Some(&TASKS)) {
                continue;
            }
            match parse(id, &value) {
                Some(EndedValue::Listed(entry)) if id > after => {
                    if selects(&entry) {
                        page.put(id, Found::Entry(entry));
                    } else {
                        page.remove(id);
                    }
                }
                Some(EndedValue::Tasks { last }) if last > after => {
                    let mut task = id.0.max(after.0 + 1);
                    while task <= last.0 && page.open(JobId(task)) {
                        page.put(JobId(task), Found::Record);
                        task += 1;
                    }
                }
                Some(EndedValue::Bare) | None if id > after => page.put(id, Found::Record),
                _ => {}
            }
        }
        let bound = page
            .cut
            .and_then(|_| page.found.last_key_value().map(|(id, _)| *id));
        let mut shared = Shared::default();
        // The array whose tasks were made last, with its first task made whole: a run of
        // tasks reads its array's record once.
        let mut array: Option<(super::arrays::ArrayRecord, Job)> = None;
        let mut listed = Vec::with_capacity(page.found.len());
        for (id, what) in page.found {
            match what {
                Found::Entry(entry) => listed.push(Finished::Entry(entry)),
                Found::Record => {
                    let own = self.jobs.get(id.0.to_be_bytes())?;
                    let job = match own {
                        Some(v) => self.complete_unless_expired(
                            decode(&id.0.to_be_bytes(), &v)?,
                            &mut shared,
                        )?,
                        None => {
                            let cached = array.as_ref().is_some_and(|(r, _)| {
                                id.0.checked_sub(r.first.id.0)
                                    .is_some_and(|p| p < u64::from(r.count))
                            });
                            if !cached {
                                array = match self.submitted_task(id)? {
                                    Some((record, _)) => self
                                        .first_task_unless_expired(&record, &mut shared)?
                                        .map(|first| (record, first)),
                                    None => None,
                                };
                            }
                            array.as_ref().and_then(|(record, first)| {
                                let place = (id.0 - record.first.id.0) as usize;
                                // As `submitted_task` decides: a task neither kept as it
                                // ended nor in a live array has expired.
                                record
                                    .ended_at(place)
                                    .is_some()
                                    .then(|| record.task(first, place))
                            })
                        }
                    };
                    if let Some(job) = job.filter(|j| j.state.is_terminal()) {
                        listed.push(Finished::Record(Box::new(job)));
                    }
                }
            }
        }
        Ok((listed, bound))
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
