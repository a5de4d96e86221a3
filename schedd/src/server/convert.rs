//! Wire messages to and from the agents, made from and into the state machine's domain types:
//! the one place that knows both.

use crate::error::ApiError;
use crate::shell::JobFilter;
use crate::state::agent_events::Registration;
use crate::state::commands::{AgentCommand, LaunchOrder};
use crate::state::lifecycle::PartEnd;
use crate::state::ListingBytes;
use prost::Message;
use ysched_common::{JobId, JobState};
use ysched_proto as pb;
use ysched_proto::scheduler_message::Msg;

/// An agent's `JobFinished` as the state machine's report.
pub(crate) fn part_end(f: &pb::JobFinished) -> PartEnd {
    PartEnd {
        job_id: f.job_id,
        exit_code: f.exit_code,
        signal: f.signal,
        end_time_ms: f.end_time_ms,
        timed_out: f.timed_out,
        term_time_ms: f.term_time_ms,
        killed: f.killed,
        error: f.error.clone(),
        checkpoint_saved: f.checkpoint_saved,
        restart_count: f.restart_count,
        out_of_memory: f.out_of_memory,
        fenced: f.fenced,
        node_fault: f.node_fault,
    }
}

/// Why an agent says its node cannot take jobs (`Heartbeat.unhealthy_reason`,
/// `Register.unhealthy_reason`), as a drain reason may hold it: printable, at most
/// [`UNHEALTHY_REASON_MAX_BYTES`]; `None` when empty (it can).
pub(crate) fn unhealthy_reason(reason: &str) -> Option<String> {
    let reason = reason.trim();
    if reason.is_empty() {
        return None;
    }
    let mut clean: String = reason
        .chars()
        .map(|c| {
            if ysched_common::text::is_unsafe_char(c) {
                '?'
            } else {
                c
            }
        })
        .collect();
    if clean.len() > UNHEALTHY_REASON_MAX_BYTES {
        let mut end = UNHEALTHY_REASON_MAX_BYTES;
        while !clean.is_char_boundary(end) {
            end -= 1;
        }
        clean.truncate(end);
        clean.push('…');
    }
    Some(clean)
}

/// The longest reason an agent's word on its health keeps.
pub(crate) const UNHEALTHY_REASON_MAX_BYTES: usize = 256;

/// An agent's `Register` as the state machine's registration.
pub(crate) fn registration(r: &pb::Register) -> Registration {
    Registration {
        name: r.name.clone(),
        address: r.address.clone(),
        cpus: r.cpus,
        mem_mib: r.mem_mib,
        gpus: r.gpus.iter().map(ysched_common::Gpu::from).collect(),
        features: r.features.clone(),
        running_jobs: r.running_jobs.clone(),
        finished: r.finished.iter().map(part_end).collect(),
        login: r.role == ysched_common::config::ROLE_LOGIN,
        fence_after_secs: r.fence_after_secs,
        unhealthy_reason: unhealthy_reason(&r.unhealthy_reason),
        gpu_faults: gpu_faults(&r.gpu_faults),
    }
}

/// An agent's GPU faults (`Heartbeat.gpu_faults`, `Register.gpu_faults`) as the state machine
/// takes them: reasons made printable and bounded as drain reasons are (an empty one says
/// only that the GPU fails), at most one per GPU and [`MAX_GPU_FAULTS`] in all (a node has
/// at most that many GPUs).
pub(crate) fn gpu_faults(faults: &[pb::GpuFault]) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = Vec::new();
    for fault in faults {
        if out.len() >= MAX_GPU_FAULTS {
            break;
        }
        if out.iter().any(|(index, _)| *index == fault.index) {
            continue;
        }
        let reason = unhealthy_reason(&fault.reason)
            .unwrap_or_else(|| "failing (its node gave no reason)".to_string());
        out.push((fault.index, reason));
    }
    out
}

/// The most GPU faults one report is read for: the most GPUs a node may have.
pub(crate) const MAX_GPU_FAULTS: usize = 64;

/// An agent's heartbeat's word on its GPUs.
pub(crate) fn gpu_report(h: &pb::Heartbeat) -> crate::state::gpu_health::GpuReport {
    crate::state::gpu_health::GpuReport {
        faults: gpu_faults(&h.gpu_faults),
        forgotten: h
            .gpu_faults_forgotten
            .iter()
            .take(MAX_GPU_FAULTS)
            .copied()
            .collect(),
    }
}

/// The wire form of a command to an agent.
pub(crate) fn scheduler_message(command: AgentCommand) -> pb::SchedulerMessage {
    let msg = match command {
        AgentCommand::Registered {
            kill_jobs,
            relay_token,
        } => Msg::Registered(pb::Registered {
            kill_jobs,
            relay_token,
        }),
        AgentCommand::Launch(order) => Msg::Launch(launch_job(&order)),
        AgentCommand::Stop {
            job_id,
            grace_secs,
            reason,
        } => Msg::Stop(pb::StopJob {
            job_id,
            grace_secs,
            reason,
        }),
        AgentCommand::Ack { job_id } => Msg::Ack(pb::AckFinished { job_id }),
        AgentCommand::HeartbeatAck { seq } => Msg::HeartbeatAck(pb::HeartbeatAck { seq }),
        AgentCommand::ResumeGpu { index } => Msg::ResumeGpu(pb::ResumeGpu { index }),
    };
    pb::SchedulerMessage { msg: Some(msg) }
}

fn launch_job(order: &LaunchOrder) -> pb::LaunchJob {
    let job = &order.job;
    let spec = &job.spec;
    pb::LaunchJob {
        job_id: job.id.0,
        name: spec.name.clone(),
        user: job.owner.user.clone(),
        uid: job.owner.uid,
        gid: job.owner.gid,
        workdir: spec.workdir.clone(),
        script: order.payload.script.clone(),
        args: spec.args.clone(),
        env: order
            .payload
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        stdout_path: spec.stdout_path.clone().unwrap_or_default(),
        stderr_path: spec.stderr_path.clone().unwrap_or_default(),
        gpus: order.gpus.clone(),
        restart_count: job.restart_count,
        checkpoint_dir: job.checkpoint_dir.clone(),
        time_limit_secs: spec.time_limit_secs.unwrap_or(0),
        grace_secs: job.grace_secs,
        node_rank: order.rank,
        nnodes: order.nodelist.len() as u32,
        nodelist: order.nodelist.clone(),
        master_addr: order.master_addr.clone(),
        master_port: order.master_port,
        // What the user asked for (`--mem`, `-c`) is the limit on every node of the job; 0
        // (not asked) is no limit.
        mem_bytes: spec.mem_mib.saturating_mul(1024 * 1024),
        cpus: spec.cpus,
        // `--signal`: sent before the time limit (by the agent, which keeps the time).
        warn_signal: spec.warn_signal.map_or(0, |w| w.signal),
        warn_secs: spec.warn_signal.map_or(0, |w| w.secs),
        warn_batch_only: spec.warn_signal.is_some_and(|w| w.batch_only),
        is_array_task: job.array.is_some(),
        array_job_id: job.array.map_or(0, |a| a.array_id.0),
        array_task_id: job.array.map_or(0, |a| a.task),
        array_task_count: spec.array.as_ref().map_or(0, |a| a.count),
        array_task_min: spec.array.as_ref().map_or(0, |a| a.min),
        array_task_max: spec.array.as_ref().map_or(0, |a| a.max),
        slurm_env: spec.slurm_env,
        open_append: spec.open_append,
        ntasks_per_node: spec.ntasks_per_node,
        // SLURM_JOB_PARTITION: what the job was submitted to, in the words it used.
        partition: if spec.partition.is_empty() {
            spec.tier.clone()
        } else {
            spec.partition.clone()
        },
        account: spec.account.clone(),
    }
}

/// `yctl nodes`' wire form of a node.
pub(crate) fn node_info(v: &crate::state::views::NodeView) -> pb::NodeInfo {
    let n = &v.node;
    pb::NodeInfo {
        name: n.name.clone(),
        state: v.state.into(),
        address: n.address.clone(),
        cpus: n.cpus,
        mem_mib: n.mem_mib,
        gpus: n.gpus.iter().map(Into::into).collect(),
        gpu_holders: v.gpu_holders.clone(),
        reason: v.reason.clone(),
        cpus_alloc: v.cpus_alloc,
        mem_alloc_mib: v.mem_alloc_mib,
        features: n.features.clone(),
        last_seen_ms: n.last_seen,
        fence_after_secs: n.fence_after_secs,
        gpus_out_of_service: n
            .gpus_out_of_service
            .iter()
            .map(|(index, outage)| pb::GpuOutage {
                index: *index,
                reason: outage.reason.clone(),
                since_ms: outage.since,
                by: outage.by.clone(),
            })
            .collect(),
    }
}

/// `yctl show job`'s wire form: the reason carries the per-node explanation of a pending job.
pub(crate) fn job_detail(d: &crate::shell::JobDetail) -> pb::JobDetail {
    let mut info = pb::JobInfo::from(&d.job);
    if !d.waits.is_empty() {
        let lines: Vec<String> = d.waits.iter().map(|(n, w)| format!("{n}: {w}")).collect();
        info.reason = format!("{} [{}]", info.reason, lines.join("; "));
    }
    pb::JobDetail {
        job: Some(info),
        events: d.events.iter().map(Into::into).collect(),
    }
}

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

/// Fair share per account (`yctl shares`).
pub(crate) fn share_list(t: &crate::fair_share::ShareTable) -> pb::ShareList {
    pb::ShareList {
        accounts: t
            .accounts
            .iter()
            .map(|a| pb::AccountShare {
                account: a.account.clone(),
                parent: a.parent.clone(),
                shares: a.shares,
                norm_shares: a.norm_shares,
                raw_gpu_secs: a.raw_gpu_secs,
                decayed_gpu_secs: a.decayed_gpu_secs,
                effective_usage: a.effective_usage,
                fair_share: a.factor,
            })
            .collect(),
        half_life_secs: u64::try_from(t.half_life_ms / 1000).unwrap_or(0),
        as_of_ms: t.as_of,
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

fn tier_waits(waits: &[crate::report::Waits]) -> Vec<pb::TierWait> {
    waits
        .iter()
        .map(|w| pb::TierWait {
            tier: w.tier.clone(),
            starts: w.starts,
            wait_p50_ms: w.p50_ms,
            wait_p95_ms: w.p95_ms,
            wait_max_ms: w.max_ms,
        })
        .collect()
}

/// A usage report (`yctl report`) on the wire.
pub(crate) fn report_reply(r: &crate::report::Report) -> pb::ReportReply {
    let c = &r.cluster;
    pb::ReportReply {
        from_ms: r.from,
        to_ms: r.to,
        by: r.by.as_str().to_string(),
        generated_ms: r.generated,
        all_accounts: r.all_accounts,
        cluster: Some(pb::ReportCluster {
            gpus: c.gpus,
            capacity_gpu_ms: c.capacity_gpu_ms,
            used_gpu_ms: c.used_gpu_ms,
            jobs: c.jobs,
            runs: c.runs,
            running: c.running,
            preemptions: c.preemptions,
            checkpoints_saved: c.checkpoints_saved,
            lost_gpu_ms: c.lost_gpu_ms,
            restarts: c.restarts,
            start_latency: tier_waits(&c.start_latency),
        }),
        groups: r
            .groups
            .iter()
            .map(|g| pb::ReportGroup {
                name: g.name.clone(),
                gpu_ms: g.gpu_ms,
                cpu_ms: g.cpu_ms,
                jobs: g.jobs,
                runs: g.runs,
                running: g.running,
                restarts: g.restarts,
                preemptions_suffered: g.preemptions_suffered,
                preemptions_caused: g.preemptions_caused,
                checkpoints_saved: g.checkpoints_saved,
                lost_gpu_ms: g.lost_gpu_ms,
                waits: tier_waits(&g.waits),
                outcomes: g
                    .outcomes
                    .iter()
                    .map(|(outcome, runs)| pb::OutcomeCount {
                        outcome: outcome.clone(),
                        runs: *runs,
                    })
                    .collect(),
            })
            .collect(),
        days: r
            .days
            .iter()
            .map(|d| pb::ReportDay {
                start_ms: d.start_ms,
                capacity_gpu_ms: d.capacity_gpu_ms,
                used_gpu_ms: d.used_gpu_ms,
                groups: d
                    .groups
                    .iter()
                    .map(|(name, gpu_ms)| pb::GroupUsage {
                        name: name.clone(),
                        gpu_ms: *gpu_ms,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A trace export (`yctl report --export-trace`) on the wire.
pub(crate) fn trace_reply(e: &crate::shell::TraceExport) -> pb::TraceReply {
    pb::TraceReply {
        from_ms: e.from,
        to_ms: e.to,
        generated_ms: e.generated,
        all_accounts: e.all_accounts,
        unfinished: e.trace.unfinished,
        jobs: e
            .trace
            .rows
            .iter()
            .map(|r| {
                let spec = r.spec.as_ref();
                pb::TraceJob {
                    job_id: r.display_id.clone(),
                    submit_ms: r.submit_ms,
                    tier: r.tier.clone(),
                    account: r.account.clone(),
                    user: r.user.clone(),
                    gpus: r.gpus,
                    duration_ms: r.duration_ms,
                    outcome: r.outcome.clone(),
                    restarts: r.restarts,
                    spec_known: spec.is_some(),
                    gpu_types: spec.map(|s| s.gpu_types.clone()).unwrap_or_default(),
                    nodes: spec.map(|s| s.nodes),
                    cpus: spec.map_or(r.run_cpus, |s| s.cpus),
                    mem_mib: spec.map_or(0, |s| s.mem_mib),
                    time_limit_secs: spec.and_then(|s| s.time_limit_secs),
                    grace_secs: spec.and_then(|s| s.grace_secs),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testkit::{alice, JobBuilder, T0};
    use crate::core::ExpectedStart;
    use crate::shell::Listing;
    use ysched_common::{StopReason, StopRequest};

    /// Jobs of every kind a listing shows: queued with and without a place and an expected
    /// start, held, running, being cancelled, an array task, bob's, and an ended one.
    fn listed_jobs() -> Vec<ysched_common::Job> {
        let mut cancelling = JobBuilder::new(6)
            .running_on("n1", &[2])
            .started(T0)
            .build();
        cancelling.stop = Some(Box::new(StopRequest {
            reason: StopReason::Cancel { by: "alice".into() },
            at: T0 + 5,
            grace_secs: 30,
        }));
        let mut ended = JobBuilder::new(8).name("done").build();
        ended.state = JobState::Failed;
        ended.exit_code = Some(3);
        ended.end_time = Some(T0 + 90);
        let mut waiting = JobBuilder::new(1).gpus(2).time_limit(600).build();
        waiting.reason = "Resources".into();
        let bobs = |job: JobBuilder| {
            let mut job = job.user("bob").account("physics").build();
            std::sync::Arc::make_mut(&mut job.owner).uid = 1001;
            job
        };
        // Bob's job that ran and ended: what it used is hidden from alice when reports are
        // private, whether its entry comes from its record or from the history's index.
        let mut bobs_ended = bobs(JobBuilder::new(10).running_on("n2", &[0]).started(T0));
        bobs_ended.state = JobState::Completed;
        bobs_ended.exit_code = Some(0);
        bobs_ended.end_time = Some(T0 + 60);
        vec![
            waiting,
            JobBuilder::new(2).build(),
            JobBuilder::new(3).held().build(),
            JobBuilder::new(4)
                .running_on("n1", &[0, 1])
                .started(T0 + 10)
                .checkpointed(T0 + 20)
                .build(),
            bobs(JobBuilder::new(5).array(5, 7, 2)),
            cancelling,
            bobs(JobBuilder::new(7).running_on("n2", &[1]).started(T0)),
            ended,
            bobs(JobBuilder::new(9)),
            bobs_ended,
        ]
    }

    #[test]
    fn a_listing_from_kept_entries_is_byte_for_byte_what_prost_makes_of_each_job() {
        let jobs = listed_jobs();
        let view = crate::fair_share::QueueView::new(
            Default::default(),
            crate::core::FairShare::new([("research".to_string(), 0.25)]),
            vec![(JobId(1), 100), (JobId(5), 100), (JobId(9), 100)],
        );
        let expected: std::collections::BTreeMap<JobId, ExpectedStart> = [
            (
                JobId(1),
                ExpectedStart {
                    at: T0 + 3_600_000,
                    nodes: vec!["n1".into(), "n2".into()],
                },
            ),
            (
                JobId(2),
                ExpectedStart {
                    at: T0 + 60_000,
                    nodes: vec!["n2".into()],
                },
            ),
            (
                JobId(9),
                ExpectedStart {
                    at: T0 + 7_200_000,
                    nodes: vec!["n1".into()],
                },
            ),
        ]
        .into();
        for public in [true, false] {
            let mut config = ysched_common::Config::default();
            config.scheduler.reports_public = public;
            let caller = alice();
            // As listings were made before: each job's `JobInfo`, then what the last pass
            // said, then what the caller may not see left out.
            let mut infos: Vec<pb::JobInfo> = jobs
                .iter()
                .map(ysched_common::convert::job_listing)
                .collect();
            add_queue_places(&mut infos, &view);
            add_expected_starts(&mut infos, &expected);
            hide_others_usage(&mut infos, &caller, &config);
            let before = pb::JobList {
                jobs: infos,
                next_after_id: 0,
            };

            let listing = WireListing::new(&caller, &config, &view, &expected);
            // Finished jobs made from their records, or (as listings by end time make them)
            // from what the history's index keeps; a page that says where the next goes on.
            for (kept_by_index, next_after) in [(false, None), (true, Some(JobId(42)))] {
                let entries = jobs
                    .iter()
                    .map(|job| match job.state.is_terminal() {
                        true if kept_by_index => listing
                            .finished_entry(&crate::store::FinishedEntry::of(job))
                            .expect("an entry from the bytes"),
                        true => listing.entry(job),
                        false => listing.kept_entry(job, &kept_listing(job)),
                    })
                    .collect();
                let encoded = listing.encode(entries, next_after).encode_to_vec();
                let before = pb::JobList {
                    next_after_id: next_after.map_or(0, |id| id.0),
                    ..before.clone()
                };
                assert_eq!(
                    pb::JobList::decode(encoded.as_slice()).unwrap(),
                    before,
                    "reports_public = {public}, kept by the index: {kept_by_index}"
                );
                assert_eq!(encoded, before.encode_to_vec(), "reports_public = {public}");
            }
            // What the hiding takes is gone from bob's jobs when reports are private.
            assert_eq!(before.jobs[6].alloc.is_empty(), !public);
            assert_eq!(before.jobs[9].end_time_ms == 0, !public);
            assert_eq!(before.jobs[9].usage_private, !public);
            assert_eq!(before.jobs[8].queue_position, Some(3));
        }
    }

    #[test]
    fn a_private_gpu_holder_passes_to_the_wire_as_the_wires_own_value() {
        // `gpu_holders` are copied as they are: the domain's marker must be the wire's.
        assert_eq!(
            crate::state::views::PRIVATE_HOLDER,
            ysched_proto::PRIVATE_HOLDER
        );
    }

    #[test]
    fn an_agents_word_on_its_health_is_printable_and_bounded() {
        assert_eq!(unhealthy_reason("  "), None);
        assert_eq!(
            unhealthy_reason("spool full: No space left on device").as_deref(),
            Some("spool full: No space left on device")
        );
        assert_eq!(
            unhealthy_reason("bad\x1b[2Jthing\n").as_deref(),
            Some("bad?[2Jthing")
        );
        let long = unhealthy_reason(&"é".repeat(1000)).unwrap();
        assert!(long.len() <= UNHEALTHY_REASON_MAX_BYTES + '…'.len_utf8());
        assert!(long.ends_with('…'));
    }
}
