//! What an event does, as data in domain terms: the durable change (new versions of jobs and
//! nodes, a submit's jobs and payload, history entries, audit records, usage records, the id
//! counter), what changes in memory only (pending reasons), the messages for agents, the jobs
//! whose watchers to wake, and whether the scheduler should run. The reactor has the durable
//! part written first (the store encodes it: `store::Batch`) and hands the rest to memory only
//! once the write has succeeded, so a refused write changes nothing.

use super::commands::{AgentCommand, Payload};
use super::history::{HistoryEntry, JobEventKind};
use crate::core::PendingReason;
use std::collections::BTreeSet;
use ysched_common::time::Millis;
use ysched_common::{AuditRecord, HostEnrolment, Job, JobId, JobState, Node};

#[derive(Default)]
pub struct Effects {
    /// New versions of jobs, in order (a later version of a job wins), written and taken
    /// into memory. A job in a final state leaves the active set.
    pub jobs: Vec<Job>,
    /// New versions of nodes, written and taken into memory.
    pub nodes: Vec<Node>,
    /// Hosts' new enrolments (or revocations), written and taken into memory.
    pub hosts: Vec<HostEnrolment>,
    /// Scripts and environments, written (an array's tasks share one, under its id).
    pub payloads: Vec<(JobId, Payload)>,
    /// Entries of jobs' histories, written in order.
    pub events: Vec<HistoryEntry>,
    /// Entries of the audit log, written in order.
    pub audit: Vec<AuditRecord>,
    /// Why pending jobs wait, updated in memory only: every pass derives them again. Typed
    /// until the records take them: rendered into `Job::reason` by
    /// [`Records::commit`](super::Records::commit).
    pub reasons: Vec<(JobId, PendingReason)>,
    /// A submit's jobs (one, or every task of an array): written by the event, but taken
    /// into memory only once durable (see [`super::reactor::Reactor::submit_durable`]).
    pub submitted: Vec<Job>,
    /// The job id counter after this event (written with the jobs that take the ids).
    pub next_job_id: Option<u64>,
    /// Messages to agents, in the order they must arrive, sent after the flush.
    pub commands: Vec<(String, AgentCommand)>,
    /// Jobs whose record changed, for watchers.
    pub changed: Vec<JobId>,
    /// The scheduler should look again (resources freed, a job queued, a node changed).
    pub wake: bool,
    /// Runs that ended in this event, written: fair share takes them once committed.
    pub runs: Vec<ysched_common::RunRecord>,
    /// How the runs that ended in this event ended, where an agent's report said (see
    /// [`super::usage::RunEnd`]): read by [`Records::account_runs`](super::Records::account_runs).
    pub run_ends: Vec<super::usage::RunEnd>,
    /// A submit's dependency targets: every job its dependency names, with how it ended when
    /// it had already finished (see [`super::dependencies::EndedTargets`]).
    pub dependency_targets: Vec<(JobId, Option<JobState>)>,
    /// Membership of `changed`, kept once it is long (a cancel of a 10,000-task array would
    /// otherwise search it once per job).
    pub(super) changed_index: Option<BTreeSet<JobId>>,
}

/// Past this many changed jobs, [`Effects::mark_changed`] keeps an index.
const INDEX_CHANGED_FROM: usize = 32;

impl Effects {
    /// Records the new version of `job` (written, then taken into memory).
    pub fn put_job(&mut self, job: Job) {
        self.mark_changed(job.id);
        self.jobs.push(job);
    }

    /// Whether the event writes nothing (a refusal, or a change already made).
    pub fn writes_nothing(&self) -> bool {
        self.jobs.is_empty()
            && self.submitted.is_empty()
            && self.nodes.is_empty()
            && self.hosts.is_empty()
            && self.payloads.is_empty()
            && self.events.is_empty()
            && self.audit.is_empty()
            && self.runs.is_empty()
            && self.next_job_id.is_none()
    }

    /// Adds `id` to the jobs whose watchers to wake, once.
    pub fn mark_changed(&mut self, id: JobId) {
        if let Some(index) = &mut self.changed_index {
            if index.insert(id) {
                self.changed.push(id);
            }
            return;
        }
        if self.changed.contains(&id) {
            return;
        }
        self.changed.push(id);
        if self.changed.len() > INDEX_CHANGED_FROM {
            self.changed_index = Some(self.changed.iter().copied().collect());
        }
    }

    /// Records a run's usage: written with this event, and handed to fair share once
    /// committed.
    pub fn put_run(&mut self, run: ysched_common::RunRecord) {
        self.runs.push(run);
    }

    pub fn put_node(&mut self, node: Node) {
        self.nodes.push(node);
    }

    /// An entry of job `id`'s history.
    pub fn event(
        &mut self,
        id: JobId,
        time: Millis,
        kind: JobEventKind,
        detail: impl Into<String>,
    ) {
        self.events.push(HistoryEntry {
            job: id,
            time,
            kind,
            detail: detail.into(),
        });
    }

    pub fn audit(&mut self, record: AuditRecord) {
        self.audit.push(record);
    }

    pub fn command(&mut self, node: &str, command: AgentCommand) {
        self.commands.push((node.to_string(), command));
    }

    /// A `StopJob` (SIGTERM now, SIGKILL after `grace`) for the job's part on each of `nodes`.
    pub fn stop_parts(&mut self, id: JobId, nodes: &[String], grace: u32, reason: &str) {
        for node in nodes {
            self.command(node, AgentCommand::stop(id.0, grace, reason));
        }
    }
}
