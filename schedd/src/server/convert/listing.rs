//! `ListJobs` on the wire: the request as a filter, and the answer encoded from what each
//! active job keeps for listings, with what the last pass said and what the caller may not see
//! left out.

use crate::error::ApiError;
use crate::shell::JobFilter;
use crate::state::ListingBytes;
use prost::Message;
use ysched_common::{JobId, JobState};
use ysched_proto as pb;

/// Leaves out, of each job whose usage `caller` may not see (`scheduler.reports_public =
/// false`: a job of another user, of an account they may not charge; see
/// [`ysched_common::Config::sees_job_usage`]), what it used: the nodes, GPUs, CPUs and
/// memory it holds or held, its start and end (its run time), its restarts, its last
/// checkpoint and its account's fair-share factor, and marks it `usage_private`. What it asks
/// for, its state and its place in the queue stay. Every view of a job goes through here, as
/// the last step of making it: listings, `yctl show job` (whose history the caller then does
/// not get either) and watches.
pub(crate) fn hide_others_usage(
    jobs: &mut [pb::JobInfo],
    caller: &ysched_common::Caller,
    config: &ysched_common::Config,
) {
    if config.sees_all_usage(caller) {
        return;
    }
    for job in jobs
        .iter_mut()
        .filter(|j| !config.sees_job_usage(caller, &j.account, j.uid))
    {
        job.alloc.clear();
        job.start_time_ms = 0;
        job.end_time_ms = 0;
        job.restart_count = 0;
        job.last_checkpoint_ms = 0;
        job.fair_share = None;
        job.run_ms_before = 0;
        job.usage_private = true;
    }
}

/// Fills in each PENDING job's fair-share factor and place in its tier's queue, as of the
/// last scheduling pass (a job it has not seen yet gets neither).
pub(crate) fn add_queue_places(jobs: &mut [pb::JobInfo], view: &crate::fair_share::QueueView) {
    let pending = JobState::Pending.as_str();
    for job in jobs.iter_mut().filter(|j| j.state == pending) {
        (job.queue_position, job.fair_share) = queue_place(JobId(job.id), &job.account, view);
    }
}

/// A PENDING job's place in its tier's queue and its account's fair-share factor, as the
/// last pass saw them: both `None` for a job it has not seen yet.
fn queue_place(
    id: JobId,
    account: &str,
    view: &crate::fair_share::QueueView,
) -> (Option<u32>, Option<f64>) {
    match view.place(id) {
        Some(place) => (Some(place), Some(view.factors.factor(account))),
        None => (None, None),
    }
}

/// Fills in when and where each PENDING job is expected to start, as the last scheduling
/// pass saw it (unknown: left at 0 and empty).
pub(crate) fn add_expected_starts(
    jobs: &mut [pb::JobInfo],
    expected: &std::collections::BTreeMap<JobId, crate::core::ExpectedStart>,
) {
    if expected.is_empty() {
        return;
    }
    let pending = JobState::Pending.as_str();
    for job in jobs.iter_mut().filter(|j| j.state == pending) {
        if let Some(e) = expected.get(&JobId(job.id)) {
            job.expected_start_ms = e.at;
            job.expected_nodes = e.nodes.clone();
        }
    }
}

/// What a listing (`ListJobs`) sends: each job's `JobInfo`, one `jobs` field (1) of a
/// `JobList` each, encoded from what each active job keeps for listings (see
/// [`kept_listing`]; made once per change of the job, not per listing), as prost encodes
/// `job_listing` with [`add_queue_places`], [`add_expected_starts`] and [`hide_others_usage`]
/// applied: the very same bytes (a test compares them).
pub(crate) struct WireListing<'a> {
    caller: &'a ysched_common::Caller,
    config: &'a ysched_common::Config,
    view: &'a crate::fair_share::QueueView,
    expected: &'a std::collections::BTreeMap<JobId, crate::core::ExpectedStart>,
    sees_all_usage: bool,
}

/// A job's entry in a listing, on its way to the wire.
#[derive(Debug)]
pub(crate) enum ListedJob {
    /// An active job's kept entry ([`kept_listing`]), with its place in the queue and its
    /// expected start when it is PENDING (the fields the entry leaves out).
    Kept {
        kept: ListingBytes,
        queue: Option<Box<QueueFields>>,
    },
    /// A `JobInfo` made afresh: an ended job's (from the store, or ended lately), or one
    /// whose usage the caller may not see; its queue fields and the hiding are applied when
    /// it is encoded.
    Made(Box<pb::JobInfo>),
    /// A finished job's `JobInfo` as the history's index keeps it, encoded when it ended
    /// (`ysched_common::convert::job_listing_bytes`), for a caller who may see its usage: a
    /// finished job has no queue fields, so these are its bytes on the wire.
    Finished(crate::store::StoredBytes),
}

impl<'a> WireListing<'a> {
    pub(crate) fn new(
        caller: &'a ysched_common::Caller,
        config: &'a ysched_common::Config,
        view: &'a crate::fair_share::QueueView,
        expected: &'a std::collections::BTreeMap<JobId, crate::core::ExpectedStart>,
    ) -> Self {
        WireListing {
            caller,
            config,
            view,
            expected,
            sees_all_usage: config.sees_all_usage(caller),
        }
    }

    /// The `JobList` of `jobs` (in their order), ready to be written, saying where the next
    /// page goes on (`next_after`, see `shell::Page`).
    pub(crate) fn encode(&self, jobs: Vec<ListedJob>, next_after: Option<JobId>) -> JobListReply {
        use prost::encoding::encoded_len_varint;
        // Each entry measured first: the reply's length comes before it.
        let entries: Vec<(usize, ListedJob)> = jobs
            .into_iter()
            .map(|job| match job {
                ListedJob::Kept { kept, queue } => {
                    let len = kept.len() - KEPT_HEADER + queue.as_ref().map_or(0, |q| q.len());
                    (len, ListedJob::Kept { kept, queue })
                }
                ListedJob::Made(mut info) => {
                    let one = std::slice::from_mut(&mut *info);
                    add_queue_places(one, self.view);
                    add_expected_starts(one, self.expected);
                    hide_others_usage(one, self.caller, self.config);
                    (info.encoded_len(), ListedJob::Made(info))
                }
                ListedJob::Finished(bytes) => (bytes.len(), ListedJob::Finished(bytes)),
            })
            .collect();
        let next_after_id = next_after.map_or(0, |id| id.0);
        let len = entries
            .iter()
            .map(|(len, _)| 1 + encoded_len_varint(*len as u64) + len)
            .sum::<usize>()
            + if next_after_id == 0 {
                0
            } else {
                1 + encoded_len_varint(next_after_id)
            };
        JobListReply {
            entries,
            next_after_id,
            len,
        }
    }
}

/// A listing's `JobList`, its entries measured ([`WireListing::encode`]): written as prost
/// would write the `JobList`, straight into the transport's buffer (no copy of its own).
#[derive(Debug)]
pub(crate) struct JobListReply {
    entries: Vec<(usize, ListedJob)>,
    /// `JobList.next_after_id` (2): 0 when the listing is complete.
    next_after_id: u64,
    len: usize,
}

impl JobListReply {
    /// Jobs listed.
    pub(crate) fn jobs(&self) -> usize {
        self.entries.len()
    }
}

impl prost::Message for JobListReply {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        use prost::encoding::{encode_key, encode_varint, WireType};
        for (len, entry) in &self.entries {
            encode_key(1, WireType::LengthDelimited, buf);
            encode_varint(*len as u64, buf);
            match entry {
                ListedJob::Kept { kept, queue } => {
                    let [head, middle, tail] = kept_segments(kept);
                    buf.put_slice(head);
                    if let Some(q) = queue {
                        q.place.encode_raw(buf);
                    }
                    buf.put_slice(middle);
                    if let Some(q) = queue {
                        q.expected.encode_raw(buf);
                    }
                    buf.put_slice(tail);
                }
                ListedJob::Made(info) => info.encode_raw(buf),
                ListedJob::Finished(bytes) => buf.put_slice(bytes),
            }
        }
        if self.next_after_id != 0 {
            encode_key(2, WireType::Varint, buf);
            encode_varint(self.next_after_id, buf);
        }
    }

    /// Never decoded (clients decode a `JobList`): whatever comes is skipped.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.next_after_id = 0;
        self.len = 0;
    }
}

/// What a listing adds to a PENDING job's kept entry, as two `JobInfo`s with only those
/// fields set, so that prost encodes each run of them as it would in the whole message.
#[derive(Debug)]
pub(crate) struct QueueFields {
    /// `fair_share` (24) and `queue_position` (25).
    place: pb::JobInfo,
    /// `expected_start_ms` (28) and `expected_nodes` (29).
    expected: pb::JobInfo,
}

impl QueueFields {
    fn len(&self) -> usize {
        self.place.encoded_len() + self.expected.encoded_len()
    }
}

/// The two offsets that open a kept entry (see [`kept_listing`]).
const KEPT_HEADER: usize = 8;

/// What an active job keeps as its listing entry (see `Records::visit_listed`): its
/// `job_listing`, encoded as prost does, in three runs cut where the fields a listing adds
/// go (24 and 25: its place in the queue; 28 and 29: its expected start), so that the
/// entry with them is written by copying bytes in field order. Opened by the two runs'
/// offsets (u32, little-endian).
pub(crate) fn kept_listing(job: &ysched_common::Job) -> ListingBytes {
    let mut head = ysched_common::convert::job_listing(job);
    let middle = pb::JobInfo {
        array_job_id: head.array_job_id.take(),
        array_task_id: head.array_task_id.take(),
        ..Default::default()
    };
    let tail = pb::JobInfo {
        display_id: std::mem::take(&mut head.display_id),
        array_max_running: std::mem::take(&mut head.array_max_running),
        usage_private: std::mem::take(&mut head.usage_private),
        run_ms_before: std::mem::take(&mut head.run_ms_before),
        cancelling: std::mem::take(&mut head.cancelling),
        nodes_requested: std::mem::take(&mut head.nodes_requested),
        hold: std::mem::take(&mut head.hold),
        ..Default::default()
    };
    let mut buf = Vec::with_capacity(
        KEPT_HEADER + head.encoded_len() + middle.encoded_len() + tail.encoded_len(),
    );
    buf.extend_from_slice(&[0; KEPT_HEADER]);
    head.encode_raw(&mut buf);
    let middle_at = buf.len() - KEPT_HEADER;
    middle.encode_raw(&mut buf);
    let tail_at = buf.len() - KEPT_HEADER;
    tail.encode_raw(&mut buf);
    // An entry is a job's few short fields: far below 4 GiB.
    buf[..4].copy_from_slice(&(middle_at as u32).to_le_bytes());
    buf[4..KEPT_HEADER].copy_from_slice(&(tail_at as u32).to_le_bytes());
    ListingBytes::from(buf)
}

/// A kept entry's three runs of fields (see [`kept_listing`]).
fn kept_segments(kept: &[u8]) -> [&[u8]; 3] {
    let offset = |at: usize| {
        let mut raw = [0; 4];
        raw.copy_from_slice(&kept[at..at + 4]);
        u32::from_le_bytes(raw) as usize
    };
    let (middle_at, tail_at) = (offset(0), offset(4));
    let body = &kept[KEPT_HEADER..];
    [
        &body[..middle_at],
        &body[middle_at..tail_at],
        &body[tail_at..],
    ]
}

impl crate::shell::Listing for WireListing<'_> {
    type Entry = ListedJob;

    /// The entry's bytes in the `JobList`, with its field's key and length (as
    /// [`WireListing::encode`] measures it; a `Made` entry before others' usage is hidden from
    /// it, which only makes it smaller).
    fn size(&self, entry: &ListedJob) -> usize {
        let len = match entry {
            ListedJob::Kept { kept, queue } => {
                kept.len() - KEPT_HEADER + queue.as_ref().map_or(0, |q| q.len())
            }
            ListedJob::Made(info) => info.encoded_len(),
            ListedJob::Finished(bytes) => bytes.len(),
        };
        1 + prost::encoding::encoded_len_varint(len as u64) + len
    }

    fn entry(&self, job: &ysched_common::Job) -> ListedJob {
        ListedJob::Made(Box::new(ysched_common::convert::job_listing(job)))
    }

    fn encode(&self) -> Option<&dyn Fn(&ysched_common::Job) -> ListingBytes> {
        Some(&kept_listing)
    }

    fn kept_entry(&self, job: &ysched_common::Job, kept: &ListingBytes) -> ListedJob {
        if !self.sees_all_usage
            && !self
                .config
                .sees_job_usage(self.caller, &job.spec.account, job.owner.uid)
        {
            return self.entry(job);
        }
        let mut queue = None;
        if job.state == JobState::Pending {
            let (queue_position, fair_share) = queue_place(job.id, &job.spec.account, self.view);
            let expected = self.expected.get(&job.id);
            if queue_position.is_some() || expected.is_some() {
                queue = Some(Box::new(QueueFields {
                    place: pb::JobInfo {
                        queue_position,
                        fair_share,
                        ..Default::default()
                    },
                    expected: pb::JobInfo {
                        expected_start_ms: expected.map_or(0, |e| e.at),
                        expected_nodes: expected.map(|e| e.nodes.clone()).unwrap_or_default(),
                        ..Default::default()
                    },
                }));
            }
        }
        ListedJob::Kept {
            kept: kept.clone(),
            queue,
        }
    }

    fn finished_entry(&self, finished: &crate::store::FinishedEntry) -> Option<ListedJob> {
        if !self.sees_all_usage
            && !self
                .config
                .sees_job_usage(self.caller, finished.account(), finished.uid)
        {
            // What the caller may not see is left out of a `JobInfo` (see `encode`), as for
            // an entry made from the record; bytes that do not decode (never written so)
            // leave the entry to be made from the record.
            return pb::JobInfo::decode(&finished.listing()[..])
                .ok()
                .map(|info| ListedJob::Made(Box::new(info)));
        }
        Some(ListedJob::Finished(finished.listing()))
    }
}

/// A listing request as a filter; an unknown state name is refused.
pub fn job_filter(req: &pb::ListJobsRequest) -> Result<JobFilter, ApiError> {
    use ysched_common::limits;
    let invalid = ApiError::Invalid;
    limits::USER.check_len(&req.user).map_err(invalid)?;
    limits::STATES
        .check_count(req.states.len() as u64)
        .map_err(invalid)?;
    limits::TARGETS
        .check_count((req.job_ids.len() + req.targets.len()) as u64)
        .map_err(invalid)?;
    let states = req
        .states
        .iter()
        .map(|s| {
            limits::STATE.check_len(s).map_err(invalid)?;
            JobState::parse(s).ok_or_else(|| {
                invalid(format!(
                    "unknown job state '{}'",
                    ysched_common::text::excerpt(s, 32)
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(JobFilter {
        user: req.user.clone(),
        ids: req.job_ids.iter().map(|id| JobId(*id)).collect(),
        states,
        all: req.all || req.since_ms != 0,
        since: (req.since_ms != 0).then_some(req.since_ms),
        until: (req.until_ms != 0).then_some(req.until_ms),
        after: (req.after_id != 0).then_some(JobId(req.after_id)),
        // Never more than the maximum per reply, whatever the client asks (0: the maximum).
        limit: match u64::from(req.limit) {
            0 => limits::JOBS_PER_REPLY.max,
            asked => asked.min(limits::JOBS_PER_REPLY.max),
        } as usize,
        // Set by the server from the caller's room for answers (see `client_api::job_list`).
        max_bytes: limits::LISTING_BYTES_PER_REPLY.max as usize,
    })
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
