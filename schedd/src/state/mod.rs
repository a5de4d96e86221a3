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

use crate::core::JobMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::{HostEnrolment, Job, JobId, JobSpec, Node, Owner};

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

/// The limits the state machine enforces, from the config.
#[derive(Debug, Clone)]
pub struct RecordLimits {
    /// `limits::max_jobs_named`: the most jobs one request may name.
    pub jobs_named: u64,
    /// `limits::max_dependency_jobs`: the most jobs one dependency may stand for.
    pub dependency_jobs: u64,
    /// `scheduler.max_jobs_per_user`.
    pub jobs_per_user: u64,
    /// `tiers.NAME.max_jobs_per_user`, for the tiers that set one.
    pub jobs_per_user_in_tier: BTreeMap<String, u64>,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            jobs_named: u64::MAX,
            dependency_jobs: u64::MAX,
            jobs_per_user: u64::MAX,
            jobs_per_user_in_tier: BTreeMap::new(),
        }
    }
}

impl RecordLimits {
    pub fn from_config(config: &ysched_common::Config) -> RecordLimits {
        RecordLimits {
            jobs_named: ysched_common::limits::max_jobs_named(config),
            dependency_jobs: ysched_common::limits::max_dependency_jobs(config),
            jobs_per_user: u64::from(config.scheduler.max_jobs_per_user),
            jobs_per_user_in_tier: config
                .tiers
                .iter()
                .filter(|(_, t)| t.max_jobs_per_user > 0)
                .map(|(name, t)| (name.clone(), u64::from(t.max_jobs_per_user)))
                .collect(),
        }
    }
}

/// One user's active jobs: all of them, and per tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserJobs {
    pub total: u64,
    pub per_tier: BTreeMap<String, u64>,
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
                if job.reason != reason {
                    // Its own job for the records (the copy's, shared until now, keeps the
                    // old reason), which the copy takes again at its next refresh.
                    Arc::make_mut(job).reason = reason;
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

    fn count_active(&mut self, job: &Job, add: bool) {
        count_active(&mut self.active_per_user, job, add);
        if !add && !self.active_per_user.contains_key(&job.owner.uid) {
            self.owners.remove(&job.owner.uid);
        }
    }

    /// Records whose jobs were put in place as a whole (tests' literals): the per-user
    /// counts made from them.
    #[cfg(test)]
    pub(crate) fn with_active_jobs(mut self) -> Records {
        self.active_per_user = self.recount_active();
        self
    }

    /// The jobs, for tests that drive the state machine from a cluster of their own.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn into_jobs(self) -> JobMap {
        self.jobs
    }

    /// User `uid`'s active jobs (queued, held, running, being stopped), in all and per tier.
    pub fn active_jobs_of(&self, uid: u32) -> UserJobs {
        self.active_per_user.get(&uid).cloned().unwrap_or_default()
    }

    /// The per-user counts made afresh from `jobs` (tests check the kept ones against it).
    pub fn recount_active(&self) -> BTreeMap<u32, UserJobs> {
        let mut counts = BTreeMap::new();
        for job in self.jobs.values() {
            count_active(&mut counts, job, true);
        }
        counts
    }

    /// The kept per-user counts.
    pub fn kept_active_counts(&self) -> &BTreeMap<u32, UserJobs> {
        &self.active_per_user
    }

    /// Takes the jobs of a durable submit (one job, or every task of an array) into memory.
    #[cfg(test)]
    pub(crate) fn insert_jobs(&mut self, jobs: impl IntoIterator<Item = Job>) {
        for job in jobs {
            self.insert_job(job);
        }
    }

    /// Refuses a submit of `count` jobs to `tier` by `caller` when it would take them past
    /// `scheduler.max_jobs_per_user` or the tier's own `max_jobs_per_user` (administrators
    /// are not limited). The whole submit is refused: an array is never cut.
    pub fn check_jobs_per_user(
        &self,
        caller: &ysched_common::Caller,
        tier: &str,
        count: u64,
    ) -> crate::error::ApiResult<()> {
        if caller.is_admin() {
            return Ok(());
        }
        let mine = self.active_jobs_of(caller.owner.uid);
        let what = if count == 1 {
            "this job".to_string()
        } else {
            format!("this array of {count}")
        };
        let user = &caller.owner.user;
        if mine.total.saturating_add(count) > self.limits.jobs_per_user {
            return Err(crate::error::ApiError::Invalid(format!(
                "user {user} has {} active jobs; {what} would exceed \
                 scheduler.max_jobs_per_user = {}",
                mine.total, self.limits.jobs_per_user
            )));
        }
        if let Some(&limit) = self.limits.jobs_per_user_in_tier.get(tier) {
            let in_tier = mine.per_tier.get(tier).copied().unwrap_or(0);
            if in_tier.saturating_add(count) > limit {
                return Err(crate::error::ApiError::Invalid(format!(
                    "user {user} has {in_tier} active jobs in tier '{tier}'; {what} would \
                     exceed tiers.{tier}.max_jobs_per_user = {limit}"
                )));
            }
        }
        Ok(())
    }

    /// Counts the jobs of a submit whose batch is written but not yet durable as their
    /// owner's, so that a concurrent submit sees them; they enter `jobs` by
    /// [`Records::insert_reserved_jobs`], or are counted out by [`Records::release_reserved`]
    /// when the flush fails.
    pub(crate) fn reserve_active(&mut self, jobs: &[Job]) {
        for job in jobs {
            count_active(&mut self.active_per_user, job, true);
        }
    }

    pub(crate) fn release_reserved(&mut self, jobs: &[Job]) {
        for job in jobs {
            self.count_active(job, false);
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

    /// Brings `copy` (the jobs the scheduler looks at, as of its last refresh: every job not
    /// finished, as the core's `Snapshot::jobs` wants them; a held job is no candidate, but
    /// dependencies on it must see that it has not started) up to date with the records,
    /// taking again only the jobs touched since (a reason changed by a plan touches its job
    /// too). A fresh (empty) copy is filled in full. The copy shares each job with the
    /// records (an `Arc` each): a record changed later is the records' own new job, and the
    /// copy keeps the one it took until its next refresh.
    pub fn refresh_copy(&mut self, copy: &mut SchedulerCopy) {
        let wanted = |j: &Job| !j.state.is_terminal();
        if !copy.filled {
            copy.jobs = self
                .jobs
                .iter()
                .filter(|(_, j)| wanted(j))
                .map(|(id, j)| (*id, Arc::clone(j)))
                .collect();
            copy.filled = true;
            copy.added = 0;
            self.touched.clear();
            return;
        }
        for id in std::mem::take(&mut self.touched) {
            match self.jobs.get(&id).filter(|j| wanted(j)) {
                Some(job) => {
                    if copy.jobs.insert(id, Arc::clone(job)).is_none() {
                        note_added(&mut copy.jobs, &mut copy.added);
                    }
                }
                None => {
                    copy.jobs.remove(&id);
                }
            }
        }
    }
}

/// Notes that a job came into `map` (`added` counts them since its last rebuild), and
/// rebuilds it once a quarter of it came since, and at least [`REBUILD_AFTER`] jobs.
///
/// Why: jobs come in id order (ids only increase), and a B-tree filled at its end keeps its
/// nodes little more than half full (a full node splits in two, and its left half never
/// fills again): with 10,000 queued jobs the records and the scheduler's copy each held
/// about 600 bytes of node per job for a 328-byte entry (330 rebuilt). `append` into a map of one builds a
/// tree of full nodes from the two sorted runs, moving each job once, with no other copy
/// of the map; rebuilt when a quarter came in since, that is a few moves per job in all.
fn note_added<V>(map: &mut BTreeMap<JobId, V>, added: &mut usize) {
    *added += 1;
    if *added < REBUILD_AFTER || *added * 4 < map.len() {
        return;
    }
    *added = 0;
    let mut rest = std::mem::take(map);
    if let Some((id, first)) = rest.pop_first() {
        *map = BTreeMap::from([(id, first)]);
        map.append(&mut rest);
    }
}

/// The fewest jobs come in before a map of jobs is rebuilt (see [`note_added`]).
const REBUILD_AFTER: usize = 1024;

/// Makes `job` share its owner with the other active jobs of the same user (`owners`, by
/// uid); an owner that differs from the one kept (the user's groups changed between two
/// submits) becomes the one kept, for the jobs that come after it.
fn share_owner(owners: &mut BTreeMap<u32, Arc<Owner>>, job: &mut Job) {
    match owners.get(&job.owner.uid) {
        Some(kept) if Arc::ptr_eq(kept, &job.owner) => {}
        Some(kept) if **kept == *job.owner => job.owner = Arc::clone(kept),
        _ => {
            owners.insert(job.owner.uid, Arc::clone(&job.owner));
        }
    }
}

/// The specs of the jobs in memory, one `Arc` per distinct spec, which every job that comes
/// into the records is made to share (see [`SharedSpecs::share`]).
///
/// Why: a spec is some 700 bytes inline with its strings besides (the script and environment
/// are not in it: they are the payload, in the store), and every plain submit made its own,
/// while a queue of a hundred thousand jobs typically holds a few distinct ones (a user's
/// loop of `ysub` with the same options): at 100,000 queued jobs, sharing them saves some
/// 85 MB. An array's tasks shared one already. Jobs that share a spec behave as before: a
/// spec is never changed in place where shared (`Arc::make_mut` copies it: `yctl update`),
/// and what the core evaluates once per shared spec (a dependency's status) depends on the
/// spec alone.
#[derive(Debug, Default, Clone)]
struct SharedSpecs {
    /// The kept specs by [`spec_hash`]: those of one hash are compared in full.
    by_hash: BTreeMap<u64, Vec<Arc<JobSpec>>>,
    /// The addresses of the kept specs: a job that already shares one (most changes of a
    /// job keep its spec) is known without hashing it. An address here is never reused
    /// while it is here, since the spec it names is kept alive by `by_hash`.
    kept: BTreeSet<usize>,
    /// Kept specs no job uses any more are forgotten when `kept` grows past this.
    sweep_at: usize,
}

impl SharedSpecs {
    /// Makes `job` share the kept spec equal to its own, or keeps its own.
    fn share(&mut self, job: &mut Job) {
        if self.kept.contains(&(Arc::as_ptr(&job.spec) as usize)) {
            return;
        }
        let same = self.by_hash.entry(spec_hash(&job.spec)).or_default();
        if let Some(kept) = same.iter().find(|kept| ***kept == *job.spec) {
            job.spec = Arc::clone(kept);
            return;
        }
        same.push(Arc::clone(&job.spec));
        self.kept.insert(Arc::as_ptr(&job.spec) as usize);
        if self.kept.len() > self.sweep_at {
            self.sweep();
        }
    }

    /// Forgets the kept specs that only this holds (their jobs ended or changed spec), and
    /// sets the next sweep at twice what is left: a few visits per kept spec in all.
    fn sweep(&mut self) {
        let kept = &mut self.kept;
        self.by_hash.retain(|_, same| {
            same.retain(|spec| {
                let used = Arc::strong_count(spec) > 1;
                if !used {
                    kept.remove(&(Arc::as_ptr(spec) as usize));
                }
                used
            });
            !same.is_empty()
        });
        self.sweep_at = (2 * self.kept.len()).max(MIN_SPECS_SWEPT);
    }
}

/// The fewest kept specs [`SharedSpecs`] sweeps.
const MIN_SPECS_SWEPT: usize = 1024;

/// A hash of what usually tells two specs apart (the rest is compared in full when the
/// hash is equal). `DefaultHasher::new` has fixed keys: the same spec, the same hash.
fn spec_hash(spec: &JobSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (
        &spec.name,
        &spec.tier,
        spec.gpus,
        &spec.gpu_types,
        spec.cpus,
        spec.mem_mib,
    )
        .hash(&mut h);
    (
        spec.time_limit_secs,
        spec.grace_secs,
        &spec.checkpoint_dir,
        &spec.account,
    )
        .hash(&mut h);
    (
        &spec.stdout_path,
        &spec.stderr_path,
        &spec.workdir,
        &spec.args,
        spec.nodes,
    )
        .hash(&mut h);
    (
        &spec.constraints,
        &spec.nodelist,
        &spec.exclude,
        spec.begin_unix_secs,
    )
        .hash(&mut h);
    (
        &spec.comment,
        &spec.partition,
        &spec.qos,
        &spec.mail_user,
        &spec.interconnect,
    )
        .hash(&mut h);
    spec.array.as_ref().map(|a| &a.indices).hash(&mut h);
    spec.dependency.as_ref().map(|d| &d.text).hash(&mut h);
    h.finish()
}

/// Counts `job` in (`add`) or out of its owner's active jobs in `counts`.
fn count_active(counts: &mut BTreeMap<u32, UserJobs>, job: &Job, add: bool) {
    let uid = job.owner.uid;
    let user = counts.entry(uid).or_default();
    if add {
        user.total += 1;
        *user.per_tier.entry(job.spec.tier.clone()).or_default() += 1;
        return;
    }
    user.total = user.total.saturating_sub(1);
    if let Some(n) = user.per_tier.get_mut(&job.spec.tier) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            user.per_tier.remove(&job.spec.tier);
        }
    }
    if user.total == 0 {
        counts.remove(&uid);
    }
}

/// The scheduler's own copy of the jobs it looks at, kept up to date by
/// [`Records::refresh_copy`] and read by passes without the lock.
#[derive(Debug, Default)]
pub struct SchedulerCopy {
    pub jobs: JobMap,
    /// Filled once; afterwards only touched jobs are copied again.
    filled: bool,
    /// Jobs that came into `jobs` since it was last rebuilt (see [`note_added`]).
    added: usize,
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

#[cfg(test)]
mod rebuild_tests {
    use super::*;
    use crate::core::testkit::JobBuilder;

    #[test]
    fn records_and_the_scheduler_s_copy_rebuilt_as_they_grow_keep_every_job() {
        let mut rec = Records::with_jobs(Vec::new());
        let mut copy = SchedulerCopy::default();
        rec.refresh_copy(&mut copy);
        let mut next = 1;
        for batch in [1, 700, 1500, 2500] {
            let jobs: Vec<Job> = (next..next + batch)
                .map(|id| JobBuilder::new(id).build())
                .collect();
            next += batch;
            rec.reserve_active(&jobs);
            rec.insert_reserved_jobs(jobs);
            rec.refresh_copy(&mut copy);
        }
        let ids: Vec<u64> = (1..next).collect();
        assert_eq!(rec.jobs().keys().map(|id| id.0).collect::<Vec<_>>(), ids);
        assert_eq!(copy.jobs.keys().map(|id| id.0).collect::<Vec<_>>(), ids);
        assert!(rec.added < rec.jobs().len() / 4 && copy.added < copy.jobs.len() / 4);
        assert_eq!(rec.recount_active(), *rec.kept_active_counts());
    }

    /// The copy shares the records' jobs, and a change to the records (a new reason, a new
    /// version of a job) is never seen through the copy until its next refresh: a pass
    /// decides on the jobs as they were when it began.
    #[test]
    fn the_scheduler_s_copy_shares_jobs_and_sees_no_change_until_refreshed() {
        let mut rec =
            Records::with_jobs(vec![JobBuilder::new(1).build(), JobBuilder::new(2).build()]);
        let mut copy = SchedulerCopy::default();
        rec.refresh_copy(&mut copy);
        let shared = |rec: &Records, copy: &SchedulerCopy, id: u64| {
            Arc::ptr_eq(&rec.jobs()[&JobId(id)], &copy.jobs[&JobId(id)])
        };
        assert!(shared(&rec, &copy, 1) && shared(&rec, &copy, 2));
        // What a pass that began now looks at (the map cloned: its jobs shared).
        let in_pass = copy.jobs.clone();
        let mut fx = Effects::default();
        fx.reasons.push((JobId(1), "Resources".into()));
        let mut held = Job::clone(&rec.jobs()[&JobId(2)]);
        held.state = ysched_common::JobState::Held;
        fx.put_job(held);
        rec.commit(fx);
        assert_eq!(rec.jobs()[&JobId(1)].reason, "Resources");
        assert_eq!(rec.jobs()[&JobId(2)].state, ysched_common::JobState::Held);
        for jobs in [&copy.jobs, &in_pass] {
            assert_eq!(jobs[&JobId(1)].reason, "");
            assert_eq!(jobs[&JobId(2)].state, ysched_common::JobState::Pending);
        }
        assert!(!shared(&rec, &copy, 1) && !shared(&rec, &copy, 2));
        // Refreshed, the copy shares the records' new jobs again (the reason's too).
        rec.refresh_copy(&mut copy);
        assert!(shared(&rec, &copy, 1) && shared(&rec, &copy, 2));
        assert_eq!(copy.jobs[&JobId(1)].reason, "Resources");
        assert_eq!(in_pass[&JobId(1)].reason, "");
    }

    #[test]
    fn equal_specs_of_different_submits_are_shared_and_forgotten_once_unused() {
        let mut rec = Records::with_jobs(Vec::new());
        let own_spec = |id: u64, gpus: u32| {
            let mut job = JobBuilder::new(id).name("train").gpus(gpus).build();
            job.spec = Arc::new((*job.spec).clone());
            job
        };
        let jobs = vec![own_spec(1, 1), own_spec(2, 1), own_spec(3, 2)];
        rec.reserve_active(&jobs);
        rec.insert_reserved_jobs(jobs);
        let spec = |rec: &Records, id: u64| Arc::clone(&rec.jobs()[&JobId(id)].spec);
        assert!(Arc::ptr_eq(&spec(&rec, 1), &spec(&rec, 2)));
        assert!(!Arc::ptr_eq(&spec(&rec, 1), &spec(&rec, 3)));
        assert_eq!(spec(&rec, 3).gpus, 2);
        // Jobs 2 and 3 leave; a sweep forgets job 3's spec, not the one job 1 still uses.
        rec.jobs.remove(&JobId(2));
        rec.jobs.remove(&JobId(3));
        rec.specs.sweep();
        assert_eq!(rec.specs.kept.len(), 1);
        let first = Arc::as_ptr(&spec(&rec, 1)) as usize;
        assert!(rec.specs.kept.contains(&first));
    }
}
