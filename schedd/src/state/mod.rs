//! schedd's state machine: decisions on domain records with no tokio, no sled, no wire types
//! and no clock (`now` is an argument). An event is a method that reads the records and
//! returns [`Effects`]; the reactor (`reactor`) has their change written, and only when that
//! succeeded commits them to memory ([`Records::commit`]) and hands on the commands.
//!
//! - `reactor`: the one cycle every event goes through (event, runs accounted, journal,
//!   commit, books, observer, outbox), with the clock, the store and the outbox behind small
//!   traits: schedd's shell, ysim and the tests drive the same code.
//! - `commands`: what schedd tells an agent (launch, stop, ack), as domain data.
//! - `effects`: what an event does, as data in domain terms (the store encodes it).
//! - `history`: the kinds of a job's history entries.
//! - `heartbeat`: an agent's heartbeat and the end of its session, in memory only.
//! - `expected`: when pending preemptors are expected to start (`yq --start`).
//! - `agent_events`: registration and reconciliation, a job's start, a part's end, silent
//!   nodes.
//! - `submission`: submit (a job, or every task of an array).
//! - `client_events`: cancel, hold and release, requeue, drain and resume.
//! - `holds`: a user's hold and an administrator's: which one a caller sets, who may lift it.
//! - `update`: `yctl update`, a queued job's tier, time limit, name, dependency or hold.
//! - `targets`: jobs as users name them (`12`, `12_7`, `12_[1-5]`) resolved into job ids.
//! - `dependencies`: `--dependency` resolved at submit, and the end states of finished jobs
//!   that live jobs' dependencies name ([`dependencies::EndedTargets`], the core's
//!   `Snapshot::ended`).
//! - `gpu_health`: GPUs out of service: failures nodes report (the jobs on them stopped and
//!   requeued), and administrators' drains and resumes of GPUs.
//! - `plan`: applying a plan of the scheduling core (evictions, placements, reasons).
//! - `views`: what read-only requests show (a node's derived state and GPU holders).
//! - `lifecycle`: how a job's run ends (an agent's report of a part's end and the final-state
//!   decision table, a part its agent no longer knows, nodes gone silent, a failed GPU).
//! - `usage`: the usage record of every run that an event ends (`Records::account_runs`).
//! - `hosts`: hosts' enrolments (the certificate schedd takes from each), tokens, revocation.
//! - `user_jobs`: each user's active jobs, counted, and the limits a submit is checked against.
//! - `scheduler_copy`: the scheduler's copy of the jobs, refreshed from the jobs touched since.
//! - `sharing`: one copy of each owner and distinct spec among the jobs in memory.

pub mod agent_events;
pub mod client_events;
pub mod commands;
pub mod dependencies;
pub mod effects;
pub mod expected;
pub mod gpu_health;
pub mod heartbeat;
pub mod history;
pub mod holds;
pub mod hosts;
pub mod lifecycle;
pub mod plan;
pub mod reactor;
pub mod submission;
pub mod targets;
pub mod update;
pub mod usage;
pub mod views;

mod scheduler_copy;
mod sharing;
mod user_jobs;

#[cfg(test)]
mod agent_events_tests;
#[cfg(test)]
mod array_tests;
#[cfg(test)]
mod client_events_tests;
#[cfg(test)]
mod gpu_health_tests;
#[cfg(test)]
mod holds_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod reactor_tests;
#[cfg(test)]
mod update_tests;
#[cfg(test)]
mod usage_tests;

pub use effects::Effects;
pub use heartbeat::HeartbeatSeen;
pub use history::{HistoryEntry, JobEventKind};
pub use scheduler_copy::SchedulerCopy;
pub use user_jobs::{RecordLimits, UserJobs};

use scheduler_copy::note_added;
use sharing::{share_owner, SharedSpecs};
use user_jobs::count_active;

use crate::core::JobMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::{HostEnrolment, Job, JobId, Node, Owner};

/// The records schedd keeps in memory: the jobs not yet finished (finished ones live only in
/// the store), the nodes, and the next job id. Changed only by the state machine (events
/// through the reactor, and the memory-only changes of `heartbeat`), which keeps `touched`
/// and the per-user counts with them: outside `state/` they are read-only.
#[derive(Debug, Default, Clone)]
pub struct Records {
    /// Each behind an `Arc` shared with the scheduler's copy while unchanged (see
    /// [`JobMap`]).
    jobs: JobMap,
    nodes: BTreeMap<String, Node>,
    /// Every host ever enrolled (see `hosts`).
    hosts: BTreeMap<String, HostEnrolment>,
    next_job_id: u64,
    /// Jobs changed in memory since the scheduler last brought its own copy up to date (see
    /// [`Records::refresh_copy`]): with a hundred thousand jobs queued, copying them all for
    /// every pass would hold the lock for a hundred milliseconds.
    touched: BTreeSet<JobId>,
    /// The limits events enforce (from the config; the default limits nothing).
    limits: RecordLimits,
    /// Active jobs per user (uid) and, within that, per tier: kept with `jobs` by every
    /// change that goes through [`Records::commit`] and [`Records::insert_job`], so that a
    /// submit checks `max_jobs_per_user` in O(log users).
    active_per_user: BTreeMap<u32, UserJobs>,
    /// Jobs whose run ended badly (FAILED, TIMEOUT, CANCELLED while running, ...) in the last
    /// [`MIN_JOB_AGE_MS`], oldest end first, at most [`MAX_RECENTLY_ENDED`]: a plain `yq`
    /// shows them, as squeue shows ended jobs for Slurm's `MinJobAge`, so that a job whose
    /// launch failed does not vanish from the queue without a word. Memory only.
    recently_ended: std::collections::VecDeque<Job>,
    /// Each active job's entry in listings as the server encoded it (bytes `state/` never
    /// reads), dropped whenever the job changes (see [`Records::visit_listed`]): a listing of
    /// ten thousand jobs encodes only those changed since the last one. Memory only.
    listings: BTreeMap<JobId, ListingBytes>,
    /// One `Owner` per user among the active jobs, by uid: every job of theirs that comes into
    /// memory is made to share it (see [`share_owner`]), so that ten thousand queued jobs of
    /// one user hold one copy of their name and groups, not one each. Dropped with the user's
    /// last active job.
    owners: BTreeMap<u32, Arc<Owner>>,
    /// One `JobSpec` per distinct spec among the jobs in memory (see [`SharedSpecs`]).
    specs: SharedSpecs,
    /// Jobs that came into `jobs` since it was last rebuilt (see [`note_added`]).
    added: usize,
}

/// A job's entry in listings, encoded by the server (see [`Records::visit_listed`]).
pub type ListingBytes = Arc<[u8]>;

/// How long a job whose run ended badly stays in a plain `yq` listing: 5 minutes, Slurm's
/// default `MinJobAge` (300 s).
pub const MIN_JOB_AGE_MS: ysched_common::time::Millis = 5 * 60 * 1000;

/// The most such jobs kept (the newest): a burst of failures cannot grow memory or listings
/// without bound.
pub const MAX_RECENTLY_ENDED: usize = 1000;

/// Whether a plain `yq` keeps showing `job`, which just ended: it ended other than COMPLETED,
/// and not by a cancel while it was queued (an array of ten thousand cancelled at once
/// would otherwise fill the listing; the user asked for that end).
fn shown_after_end(job: &Job) -> bool {
    use ysched_common::JobState;
    match job.state {
        JobState::Completed => false,
        JobState::Cancelled => job.start_time.is_some(),
        state => state.is_terminal(),
    }
}

impl Records {
    /// Records made whole (at start, from the store; ysim's empty cluster): the active jobs,
    /// the nodes, the next job id and the limits to enforce; the per-user counts are made
    /// from the jobs.
    pub fn new(
        jobs: BTreeMap<JobId, Job>,
        nodes: BTreeMap<String, Node>,
        next_job_id: u64,
        limits: RecordLimits,
    ) -> Records {
        let mut rec = Records {
            jobs: jobs.into_iter().map(|(id, j)| (id, Arc::new(j))).collect(),
            nodes,
            next_job_id,
            limits,
            ..Records::default()
        };
        rec.active_per_user = rec.recount_active();
        for job in rec.jobs.values_mut() {
            // Not yet shared with any copy: no clone.
            let job = Arc::make_mut(job);
            share_owner(&mut rec.owners, job);
            rec.specs.share(job);
        }
        rec
    }

    /// The records with the hosts' enrolments read from the store.
    pub fn with_hosts(mut self, hosts: BTreeMap<String, HostEnrolment>) -> Records {
        self.hosts = hosts;
        self
    }

    /// The jobs not yet finished.
    pub fn jobs(&self) -> &JobMap {
        &self.jobs
    }

    /// The nodes (not the login agents), by name.
    pub fn nodes(&self) -> &BTreeMap<String, Node> {
        &self.nodes
    }

    /// The id the next submit takes.
    pub fn next_job_id(&self) -> u64 {
        self.next_job_id
    }

    /// The limits events enforce.
    pub fn limits(&self) -> &RecordLimits {
        &self.limits
    }

    /// Takes an event's records into memory, once their batch is durable (or at least
    /// written: the flush that covers it comes before any reply or command). Returns the
    /// commands, the changed jobs and whether to wake the scheduler.
    pub(crate) fn commit(&mut self, effects: Effects) -> Committed {
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
            self.changed(job.id);
            if job.state.is_terminal() {
                if let Some(gone) = self.jobs.remove(&job.id) {
                    self.count_active(&gone, false);
                }
                if shown_after_end(&job) {
                    self.remember_ended(job);
                }
            } else {
                self.insert_active(job);
            }
        }
        for (id, reason) in effects.reasons {
            if let Some(job) = self.jobs.get_mut(&id) {
                if !reason.is_text_of(&job.reason) {
                    // Its own job for the records (the copy's, shared until now, keeps the
                    // old reason), which the copy takes again at its next refresh. Rendered
                    // here: the record keeps (and the store and listings show) its text.
                    Arc::make_mut(job).reason = reason.to_string();
                    self.touched.insert(id);
                    self.listings.remove(&id);
                }
                if !was_changed(&id) {
                    changed_reasons.push(id);
                }
            }
        }
        for node in effects.nodes {
            self.nodes.insert(node.name.clone(), node);
        }
        for host in effects.hosts {
            self.hosts.insert(host.name.clone(), host);
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

    /// Keeps `job`, which just ended badly, for plain listings (see `recently_ended`),
    /// forgetting those that ended more than [`MIN_JOB_AGE_MS`] before it, and the oldest
    /// beyond [`MAX_RECENTLY_ENDED`].
    fn remember_ended(&mut self, job: Job) {
        let newest = job.end_time.unwrap_or(0);
        while self
            .recently_ended
            .front()
            .is_some_and(|old| old.end_time.unwrap_or(0) < newest.saturating_sub(MIN_JOB_AGE_MS))
            || self.recently_ended.len() >= MAX_RECENTLY_ENDED
        {
            self.recently_ended.pop_front();
        }
        self.recently_ended.push_back(job);
    }

    /// The jobs whose run ended badly within [`MIN_JOB_AGE_MS`] before `now` (see
    /// `recently_ended`), in id order.
    pub fn recently_ended(&self, now: ysched_common::time::Millis) -> Vec<&Job> {
        let mut jobs: Vec<&Job> = self
            .recently_ended
            .iter()
            .filter(|j| j.end_time.unwrap_or(0) >= now.saturating_sub(MIN_JOB_AGE_MS))
            .collect();
        jobs.sort_by_key(|j| j.id);
        jobs.dedup_by_key(|j| j.id);
        jobs
    }

    /// Takes a job that is durable into memory (a submit: its id was taken by `commit`).
    #[cfg(test)]
    pub(crate) fn insert_job(&mut self, job: Job) {
        self.changed(job.id);
        self.insert_active(job);
    }

    /// Puts an active job in `jobs`, counting it for its owner unless its earlier version
    /// was counted already.
    fn insert_active(&mut self, mut job: Job) {
        share_owner(&mut self.owners, &mut job);
        self.specs.share(&mut job);
        match self.jobs.get(&job.id) {
            Some(old) if old.owner.uid == job.owner.uid && old.spec.tier == job.spec.tier => {}
            Some(old) => {
                count_active(&mut self.active_per_user, old, false);
                count_active(&mut self.active_per_user, &job, true);
            }
            None => count_active(&mut self.active_per_user, &job, true),
        }
        if self.jobs.insert(job.id, Arc::new(job)).is_none() {
            note_added(&mut self.jobs, &mut self.added);
        }
    }

    /// The jobs, for tests that drive the state machine from a cluster of their own.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn into_jobs(self) -> JobMap {
        self.jobs
    }

    /// Takes the jobs of a durable submit (one job, or every task of an array) into memory.
    #[cfg(test)]
    pub(crate) fn insert_jobs(&mut self, jobs: impl IntoIterator<Item = Job>) {
        for job in jobs {
            self.insert_job(job);
        }
    }

    /// [`Records::insert_jobs`] for jobs counted by [`Records::reserve_active`].
    pub(crate) fn insert_reserved_jobs(&mut self, jobs: impl IntoIterator<Item = Job>) {
        for mut job in jobs {
            self.changed(job.id);
            share_owner(&mut self.owners, &mut job);
            self.specs.share(&mut job);
            if self.jobs.insert(job.id, Arc::new(job)).is_none() {
                note_added(&mut self.jobs, &mut self.added);
            }
        }
    }

    /// Notes that job `id`'s record changed (or came, or went): the scheduler's copy takes it
    /// again at its next refresh, and its listing entry is made afresh.
    fn changed(&mut self, id: JobId) {
        self.touched.insert(id);
        self.listings.remove(&id);
    }

    /// Visits the active jobs of a listing in id order: every one when `ids` is empty, else
    /// those of `ids`; of them those `want` keeps. With `encode`, each comes with its listing
    /// entry, made by `encode` only when the job has none kept: it is new, or changed since
    /// it was last listed.
    pub fn visit_listed(
        &mut self,
        ids: &BTreeSet<JobId>,
        want: impl Fn(&Job) -> bool,
        encode: Option<&dyn Fn(&Job) -> ListingBytes>,
        mut visit: impl FnMut(&Job, Option<&ListingBytes>),
    ) {
        let Records { jobs, listings, .. } = self;
        let listed = || -> Box<dyn Iterator<Item = &Job>> {
            if ids.is_empty() {
                Box::new(jobs.values().map(|j| &**j).filter(|j| want(j)))
            } else {
                Box::new(
                    ids.iter()
                        .filter_map(|id| jobs.get(id).map(|j| &**j))
                        .filter(|j| want(j)),
                )
            }
        };
        let Some(encode) = encode else {
            listed().for_each(|job| visit(job, None));
            return;
        };
        // The entries missing are made first, and only then are the jobs visited: what
        // `visit` makes lives as long as the listing, and made in turn with the entries that
        // are kept, each page of memory it freed would still hold kept entries, and could not
        // be handed back (at 50,000 queued tasks that kept some 20 MB of a listing's memory).
        for job in listed() {
            listings.entry(job.id).or_insert_with(|| encode(job));
        }
        for job in listed() {
            let kept = listings.entry(job.id).or_insert_with(|| encode(job));
            visit(job, Some(kept));
        }
    }

    /// The listing entries kept, for tests that check each one against its job.
    #[cfg(test)]
    pub(crate) fn kept_listings(&self) -> &BTreeMap<JobId, ListingBytes> {
        &self.listings
    }
}

#[cfg(test)]
impl Records {
    /// For tests: `jobs`, two 8-GPU NVLinked nodes `n1` and `n2`, next id 10.
    pub(crate) fn with_jobs(jobs: Vec<Job>) -> Records {
        use crate::core::testkit::{NodeBuilder, A100};
        Records {
            jobs: jobs.into_iter().map(|j| (j.id, Arc::new(j))).collect(),
            nodes: ["n1", "n2"]
                .into_iter()
                .map(|n| (n.to_string(), NodeBuilder::dgx(n, 8, A100).build()))
                .collect(),
            next_job_id: 10,
            ..Records::default()
        }
        .with_active_jobs()
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
