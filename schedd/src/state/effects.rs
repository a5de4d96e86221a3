//! What an event does, as data: the durable change (one store batch), the new versions of the
//! records it touched, the messages for agents, the jobs whose watchers to wake, and whether
//! the scheduler should run. The shell writes the batch first and hands the rest to memory
//! only once the write has succeeded, so a refused write changes nothing.

use super::commands::AgentCommand;
use crate::store::Batch;
use std::collections::BTreeSet;
use ysched_common::{AuditRecord, Job, JobId, JobState, Node};

#[derive(Default)]
pub struct Effects {
    /// Everything to write, in one atomic batch.
    pub batch: Batch,
    /// New versions of jobs, in order (a later version of a job wins). A job in a final state
    /// leaves the active set.
    pub jobs: Vec<Job>,
    /// New versions of nodes.
    pub nodes: Vec<Node>,
    /// Why pending jobs wait, updated in memory only: every pass derives them again.
    pub reasons: Vec<(JobId, String)>,
    /// A submit's jobs (one, or every task of an array): written by the event, but taken
    /// into memory only once durable (see [`super::reactor::Reactor::submit_durable`]).
    pub submitted: Vec<Job>,
    /// The job id counter after this event.
    pub next_job_id: Option<u64>,
    /// Messages to agents, in the order they must arrive, sent after the flush.
    pub commands: Vec<(String, AgentCommand)>,
    /// Jobs whose record changed, for watchers.
    pub changed: Vec<JobId>,
    /// The scheduler should look again (resources freed, a job queued, a node changed).
    pub wake: bool,
    /// Runs that ended in this event (written in its batch): fair share takes them once
    /// committed.
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
        self.batch.put_job(&job);
        self.mark_changed(job.id);
        self.jobs.push(job);
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

    /// Records a run's usage: written in this event's batch, and handed to fair share once
    /// committed.
    pub fn put_run(&mut self, run: ysched_common::RunRecord) {
        self.batch.put_run(&run);
        self.runs.push(run);
    }

    pub fn put_node(&mut self, node: Node) {
        self.batch.put_node(&node);
        self.nodes.push(node);
    }

    pub fn event(&mut self, id: JobId, time: i64, kind: &str, detail: impl Into<String>) {
        self.batch.event(id, time, kind, detail);
    }

    pub fn audit(&mut self, record: AuditRecord) {
        self.batch.audit(&record);
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
