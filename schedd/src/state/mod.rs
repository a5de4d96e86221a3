//! schedd's state machine, growing out of `cluster.rs`: decisions on domain records with no
//! tokio, no sled, no wire types and no clock (`now` is an argument). An event is a method
//! that reads the records and returns [`Effects`]; the shell writes their batch, and only when
//! that succeeded calls [`Records::commit`] and sends the commands.
//!
//! - `commands`: what schedd tells an agent (launch, stop, ack), as domain data.
//! - `effects`: what an event does, as data.
//! - `agent_events`: registration and reconciliation, a job's start, a part's end, silent
//!   nodes.
//! - `client_events`: submit (a job, or every task of an array), cancel, hold and release,
//!   requeue, drain and resume.
//! - `targets`: jobs as users name them (`12`, `12_7`, `12_[1-5]`) resolved into job ids.
//! - `dependencies`: `--dependency` resolved at submit, and the end states of finished jobs
//!   that live jobs' dependencies name ([`dependencies::EndedTargets`], the core's
//!   `Snapshot::ended`).
//! - `plan`: applying a plan of the scheduling core (evictions, placements, reasons).
//! - `views`: what read-only requests show (a node's derived state and GPU holders).
//! - `lifecycle`: how a job's run ends (an agent's report of a part's end, or a part its agent
//!   no longer knows).
//! - `usage`: the usage record of every run that an event ends (`Records::account_runs`).

pub mod agent_events;
pub mod client_events;
pub mod commands;
pub mod dependencies;
pub mod effects;
pub mod lifecycle;
pub mod plan;
pub mod targets;
pub mod usage;
pub mod views;

#[cfg(test)]
mod agent_events_tests;
#[cfg(test)]
mod array_tests;
#[cfg(test)]
mod client_events_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod usage_tests;

pub use effects::Effects;

use std::collections::{BTreeMap, BTreeSet};
use ysched_common::{Job, JobId, Node};

/// The records schedd keeps in memory: the jobs not yet finished (finished ones live only in
/// the store), the nodes, and the next job id.
#[derive(Debug, Default, Clone)]
pub struct Records {
    pub jobs: BTreeMap<JobId, Job>,
    pub nodes: BTreeMap<String, Node>,
    pub next_job_id: u64,
    /// Jobs changed in memory since the scheduler last brought its own copy up to date (see
    /// [`Records::refresh_copy`]): with a hundred thousand jobs queued, copying them all for
    /// every pass would hold the lock for a hundred milliseconds.
    pub touched: BTreeSet<JobId>,
}

impl Records {
    /// Takes an event's records into memory, once their batch is durable (or at least
    /// written: the flush that covers it comes before any reply or command). Returns the
    /// commands, the changed jobs and whether to wake the scheduler.
    pub fn commit(&mut self, effects: Effects) -> Committed {
        let mut changed_reasons = Vec::new();
        // Looked up once per reason: a set when both are long (a pass after a large submit).
        let changed_set: Option<BTreeSet<JobId>> = (effects.reasons.len() > 32
            && effects.changed.len() > 32)
            .then(|| effects.changed.iter().copied().collect());
        let was_changed = |id: &JobId| match &changed_set {
            Some(set) => set.contains(id),
            None => effects.changed.contains(id),
        };
        for job in effects.jobs {
            self.touched.insert(job.id);
            if job.state.is_terminal() {
                self.jobs.remove(&job.id);
            } else {
                self.jobs.insert(job.id, job);
            }
        }
        for (id, reason) in effects.reasons {
            if let Some(job) = self.jobs.get_mut(&id) {
                job.reason = reason;
                if !was_changed(&id) {
                    changed_reasons.push(id);
                }
            }
        }
        for node in effects.nodes {
            self.nodes.insert(node.name.clone(), node);
        }
        if let Some(next) = effects.next_job_id {
            self.next_job_id = next;
        }
        let mut changed = effects.changed;
        changed.extend(changed_reasons);
        Committed {
            commands: effects.commands,
            changed,
            wake: effects.wake,
            runs: effects.runs,
        }
    }

    /// Takes a job that is durable into memory (a submit: its id was taken by `commit`).
    pub fn insert_job(&mut self, job: Job) {
        self.touched.insert(job.id);
        self.jobs.insert(job.id, job);
    }

    /// Takes the jobs of a durable submit (one job, or every task of an array) into memory.
    pub fn insert_jobs(&mut self, jobs: impl IntoIterator<Item = Job>) {
        for job in jobs {
            self.insert_job(job);
        }
    }

    /// Brings `copy` (the jobs the scheduler looks at, as of its last refresh: every job not
    /// finished, as the core's `Snapshot::jobs` wants them; a held job is no candidate, but
    /// dependencies on it must see that it has not started) up to date with the records,
    /// copying only the jobs touched since. A fresh (empty) copy is filled in full. Reasons
    /// are not the scheduler's concern and may lag in the copy.
    pub fn refresh_copy(&mut self, copy: &mut SchedulerCopy) {
        let wanted = |j: &Job| !j.state.is_terminal();
        if !copy.filled {
            copy.jobs = self
                .jobs
                .iter()
                .filter(|(_, j)| wanted(j))
                .map(|(id, j)| (*id, j.clone()))
                .collect();
            copy.filled = true;
            self.touched.clear();
            return;
        }
        for id in std::mem::take(&mut self.touched) {
            match self.jobs.get(&id).filter(|j| wanted(j)) {
                Some(job) => {
                    copy.jobs.insert(id, job.clone());
                }
                None => {
                    copy.jobs.remove(&id);
                }
            }
        }
    }
}

/// The scheduler's own copy of the jobs it looks at, kept up to date by
/// [`Records::refresh_copy`] and read by passes without the lock.
#[derive(Debug, Default)]
pub struct SchedulerCopy {
    pub jobs: BTreeMap<JobId, Job>,
    /// Filled once; afterwards only touched jobs are copied again.
    filled: bool,
}

#[cfg(test)]
impl Records {
    /// For tests: `jobs`, two 8-GPU NVLinked nodes `n1` and `n2`, next id 10.
    pub(crate) fn with_jobs(jobs: Vec<Job>) -> Records {
        use crate::core::testkit::{NodeBuilder, A100};
        Records {
            touched: BTreeSet::new(),
            jobs: jobs.into_iter().map(|j| (j.id, j)).collect(),
            nodes: ["n1", "n2"]
                .into_iter()
                .map(|n| (n.to_string(), NodeBuilder::dgx(n, 8, A100).build()))
                .collect(),
            next_job_id: 10,
        }
    }
}

/// What is left of an event once its records are in memory.
pub struct Committed {
    pub commands: Vec<(String, AgentCommand)>,
    pub changed: Vec<JobId>,
    pub wake: bool,
    /// Runs that ended in the event, now durable.
    pub runs: Vec<ysched_common::RunRecord>,
}

pub use commands::AgentCommand;
