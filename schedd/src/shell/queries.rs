//! Read-only requests: listings (one consistent view), a job in detail, nodes.

use super::*;
use crate::fair_share::ShareTable;
use crate::state::client_events::FinishedLookup;
use crate::state::targets::{parse_target, parse_targets, plain_target, Resolved};
use crate::state::views::{node_view, NodeView};
use crate::state::ListingBytes;
use crate::store::{Finished as StoredFinished, FinishedEntry, PageRoom};

/// Finished jobs a listing read, in id order, with where the read stopped short (`Some`: more
/// may follow after that id).
type Finished<T> = (Vec<(JobId, T)>, Option<JobId>);

/// Finished jobs' records read at once by a listing by id: a page is read a chunk at a time,
/// so that it holds its entries and one chunk of records, not a page of records.
const READ_AT_ONCE: usize = 1024;

/// How a listing makes each job's entry.
pub trait Listing {
    type Entry;
    /// A job's entry made from its record: every job's, unless [`Listing::encode`] says
    /// otherwise.
    fn entry(&self, job: &Job) -> Self::Entry;
    /// What an active job keeps as its listing entry until it changes (see
    /// [`Records::visit_listed`]), so that a listing need not make it again; `None` (the
    /// default): nothing kept, every entry made by [`Listing::entry`].
    fn encode(&self) -> Option<&dyn Fn(&Job) -> ListingBytes> {
        None
    }
    /// An active job's entry from what it keeps (`kept`, made by [`Listing::encode`]).
    fn kept_entry(&self, job: &Job, _kept: &ListingBytes) -> Self::Entry {
        self.entry(job)
    }
    /// The bytes `entry` weighs on the wire, for pages bounded in bytes (`JobFilter::max_bytes`);
    /// 0 (the default): pages bounded in jobs only.
    fn size(&self, _entry: &Self::Entry) -> usize {
        0
    }
    /// A finished job's entry from what the history's index keeps of it (its listing entry
    /// as `ysched_common::convert::job_listing_bytes` made it when it ended), for listings by
    /// end time; `None` (the default): its record is read and [`Listing::entry`] makes it.
    fn finished_entry(&self, _finished: &FinishedEntry) -> Option<Self::Entry> {
        None
    }
}

/// One page of a listing: its entries, in id order, and where the next page goes on
/// (`None`: that was all).
#[derive(Debug)]
pub struct Page<T> {
    pub entries: Vec<T>,
    pub next_after: Option<JobId>,
}

/// A listing whose entries a function makes from each record.
struct FromRecord<F>(F);

impl<T, F: Fn(&Job) -> T> Listing for FromRecord<F> {
    type Entry = T;
    fn entry(&self, job: &Job) -> T {
        (self.0)(job)
    }
}

impl Cluster {
    /// The jobs `filter` selects, in id order, each as `entry` makes it.
    pub fn list_jobs<T>(&self, filter: &JobFilter, entry: impl Fn(&Job) -> T) -> ApiResult<Vec<T>> {
        Ok(self.list_jobs_with(filter, &FromRecord(entry))?.entries)
    }

    /// The jobs `filter` selects, in id order, each as `listing` makes it: the active ones'
    /// from what they keep when it keeps something (their wire form, made once per change of
    /// the job: a listing of ten thousand jobs copies bytes, not records), the finished ones
    /// of a window by end time from what the history's index keeps (bytes too).
    ///
    /// Paged by id (`filter.after`, `filter.limit`, `filter.max_bytes`): a page holds the
    /// first selected jobs with ids above `after` that fit `limit` and `max_bytes`; a job that
    /// ends between two pages is in one of them only (its id is either behind the cut or
    /// ahead of it). Building a page holds the page (and a chunk of records), however much
    /// history the filter selects.
    pub fn list_jobs_with<L: Listing>(
        &self,
        filter: &JobFilter,
        listing: &L,
    ) -> ApiResult<Page<L::Entry>> {
        let uid = filter.user.parse::<u32>().ok();
        let after = filter.after.unwrap_or(JobId(0));
        let want = |j: &Job| j.id > after && filter.selects(j, uid);
        let listed = |j: &Job| (j.id, listing.entry(j));
        let ids = &filter.ids;
        // One consistent view: the active jobs are copied under the lock first, then the
        // finished ones are read from the store. A job ends by being written to the store
        // (finished) before it leaves memory, both under the lock, so a job missing from the
        // copy is already in the store; one that ends in between is in both, and the store's
        // (newer) record wins. Every job appears exactly once.
        // A plain listing (no ids, states or --all) also shows the jobs whose run ended badly
        // in the last few minutes (`state::MIN_JOB_AGE_MS`, Slurm's MinJobAge), from memory.
        let plain = ids.is_empty() && !filter.all && filter.states.is_empty();
        let mut recent: Vec<(JobId, L::Entry)> = Vec::new();
        let mut active: Vec<(JobId, L::Entry)> = Vec::new();
        {
            let mut st = lock(&self.state);
            if plain {
                recent = st
                    .rec
                    .recently_ended(ysched_common::time::now_ms())
                    .into_iter()
                    .filter(|j| want(j))
                    .map(listed)
                    .collect();
            }
            st.rec
                .visit_listed(ids, want, listing.encode(), |job, kept| {
                    active.push((
                        job.id,
                        match kept {
                            Some(kept) => listing.kept_entry(job, kept),
                            None => listing.entry(job),
                        },
                    ))
                });
        }
        // What the page may hold: `limit` jobs, and `max_bytes` of entries (the first always).
        let room = PageRoom {
            jobs: if filter.limit == 0 {
                usize::MAX
            } else {
                filter.limit
            },
            bytes: if filter.max_bytes == 0 {
                usize::MAX
            } else {
                filter.max_bytes
            },
        };
        // The finished jobs, a page's worth at most, and where their read stopped short, when
        // it did (more may follow).
        let (finished, bound) = if !ids.is_empty() {
            let found: BTreeSet<JobId> = active.iter().map(|(id, _)| *id).collect();
            self.finished_named(filter, listing, &found, room)?
        } else if filter.windowed() {
            self.finished_by_end(filter, listing, room)?
        } else if filter.all || filter.states.iter().any(|s| s.is_terminal()) {
            self.finished_by_id(filter, listing, room)?
        } else {
            (recent, None)
        };
        let mut merged = if finished.is_empty() {
            active
        } else {
            // Both lists are in id order; a job that ended between the two reads is in both,
            // and its finished record (the newer one) is kept.
            let ended: BTreeSet<JobId> = finished.iter().map(|(id, _)| *id).collect();
            let mut merged = Vec::with_capacity(active.len() + finished.len());
            let mut active = active
                .into_iter()
                .filter(|(id, _)| !ended.contains(id))
                .peekable();
            for done in finished {
                while let Some(j) = active.next_if(|(id, _)| *id < done.0) {
                    merged.push(j);
                }
                merged.push(done);
            }
            merged.extend(active);
            merged
        };
        // The page: the first jobs that fit its room, and none past where the finished jobs
        // read stopped (there may be finished ones before the next active one).
        if let Some(bound) = bound {
            merged.retain(|(id, _)| *id <= bound);
        }
        let (mut kept, mut bytes) = (0, 0usize);
        for (_, entry) in &merged {
            let size = listing.size(entry);
            if kept == room.jobs || (kept > 0 && bytes.saturating_add(size) > room.bytes) {
                break;
            }
            bytes = bytes.saturating_add(size);
            kept += 1;
        }
        let cut = bound.is_some() || merged.len() > kept;
        merged.truncate(kept);
        let next_after = if cut {
            merged.last().map(|(id, _)| *id)
        } else {
            None
        };
        Ok(Page {
            entries: merged.into_iter().map(|(_, e)| e).collect(),
            next_after,
        })
    }

    /// The finished jobs of `filter.ids` (a page's worth: `room`) not `active`, read a few at
    /// a time by id (never a scan of the history): an array's 10,000 tasks listed by name cost
    /// a page's records at once, not 10,000.
    fn finished_named<L: Listing>(
        &self,
        filter: &JobFilter,
        listing: &L,
        active: &BTreeSet<JobId>,
        room: PageRoom,
    ) -> ApiResult<Finished<L::Entry>> {
        let (uid, after) = (
            filter.user.parse::<u32>().ok(),
            filter.after.unwrap_or(JobId(0)),
        );
        let mut ids = filter
            .ids
            .iter()
            .copied()
            .filter(|id| *id > after && !active.contains(id))
            .peekable();
        let mut page = Vec::new();
        let mut bytes = 0usize;
        while ids.peek().is_some() {
            let chunk: Vec<JobId> = ids.by_ref().take(READ_AT_ONCE).collect();
            let last = chunk.last().copied();
            for job in self.store.jobs_by_id(chunk)? {
                if job.state.is_terminal() && job.id > after && filter.selects(&job, uid) {
                    let entry = listing.entry(&job);
                    bytes = bytes.saturating_add(listing.size(&entry));
                    page.push((job.id, entry));
                }
            }
            if ids.peek().is_some() && (page.len() >= room.jobs || bytes >= room.bytes) {
                return Ok((page, last));
            }
        }
        Ok((page, None))
    }

    /// The finished jobs that ended since `filter.since`, a page's worth (`room`), from what
    /// the history's index keeps (see `store::listed`).
    fn finished_by_end<L: Listing>(
        &self,
        filter: &JobFilter,
        listing: &L,
        room: PageRoom,
    ) -> ApiResult<Finished<L::Entry>> {
        let (uid, after) = (
            filter.user.parse::<u32>().ok(),
            filter.after.unwrap_or(JobId(0)),
        );
        let since = filter.since.unwrap_or(i64::MIN);
        let (found, bound) =
            self.store
                .finished_listed_page(since, i64::MAX, after, room, |kept| {
                    filter.selects_finished(kept, uid)
                })?;
        let mut page = Vec::with_capacity(found.len());
        for finished in found {
            match finished {
                StoredFinished::Entry(kept) => match listing.finished_entry(&kept) {
                    Some(entry) => page.push((kept.id, entry)),
                    // A listing that makes its entries from records only.
                    None => {
                        if let Some(job) = self.store.job(kept.id)? {
                            page.push((job.id, listing.entry(&job)));
                        }
                    }
                },
                StoredFinished::Record(job) => {
                    if job.id > after && filter.selects(&job, uid) {
                        page.push((job.id, listing.entry(&job)));
                    }
                }
            }
        }
        Ok((page, bound))
    }

    /// The finished jobs after `filter.after` in id order, a page's worth (`room`), read
    /// [`READ_AT_ONCE`] at a time: a page costs what it returns, not `limit` records at once.
    fn finished_by_id<L: Listing>(
        &self,
        filter: &JobFilter,
        listing: &L,
        room: PageRoom,
    ) -> ApiResult<Finished<L::Entry>> {
        let (uid, after) = (
            filter.user.parse::<u32>().ok(),
            filter.after.unwrap_or(JobId(0)),
        );
        let want = |j: &Job| j.id > after && filter.selects(j, uid);
        let mut page = Vec::new();
        let (mut from, mut bytes) = (after, 0usize);
        loop {
            let take = (room.jobs - page.len()).min(READ_AT_ONCE);
            let (jobs, stopped) = self.store.finished_jobs_after(from, take, want)?;
            for job in &jobs {
                let entry = listing.entry(job);
                bytes = bytes.saturating_add(listing.size(&entry));
                page.push((job.id, entry));
            }
            match stopped {
                Some(last) if page.len() < room.jobs && bytes < room.bytes => from = last,
                stopped => return Ok((page, stopped)),
            }
        }
    }

    /// The one job `name` names; a name of several (an array, a range of tasks) is refused,
    /// naming the syntax for one task (`what`: what the caller wants to do with it).
    pub async fn resolve_one(self: &Arc<Self>, name: &Named, what: &str) -> ApiResult<JobId> {
        match name {
            Named::Id(id) => Ok(*id),
            Named::Target(_) => self.resolve(name).await?.single(what),
        }
    }

    /// What `name` names (see [`crate::state::targets`]): the store read off the lock and
    /// off the runtime's workers.
    pub async fn resolve(self: &Arc<Self>, name: &Named) -> ApiResult<Resolved> {
        let read = self.read_finished_off_runtime([name.job_id()]).await?;
        let finished = |id: JobId| read.job(id, &self.store);
        let st = lock(&self.state);
        name.resolve(&st.rec, &finished)
    }

    /// The jobs `targets` name (as users type them: `12`, `12_7`, `12_[1-5]`), for a listing;
    /// an unknown one is refused.
    /// Checked before the lock: at most `limits::TARGETS` names (with the `extra` plain ids of
    /// the request), each at most `limits::JOB_TARGET` bytes; and at most
    /// `limits::max_jobs_named` jobs named in all.
    pub fn resolve_targets(&self, targets: &[String], extra: usize) -> ApiResult<BTreeSet<JobId>> {
        let parsed = parse_targets(targets, extra)?;
        let read = self.read_finished(parsed.iter().map(|t| t.id))?;
        let finished = |id: JobId| read.job(id, &self.store);
        let st = lock(&self.state);
        let mut ids = BTreeSet::new();
        for resolved in st.rec.resolve_all(&parsed, &finished)? {
            ids.extend(resolved.ids);
        }
        Ok(ids)
    }

    /// When and where the last pass expects each pending job to start, where it could tell.
    pub fn expected_starts(&self) -> Arc<BTreeMap<JobId, core::ExpectedStart>> {
        Arc::clone(&lock(&self.state).expected)
    }

    fn find_job(&self, id: JobId) -> ApiResult<Job> {
        if let Some(j) = lock(&self.state).rec.jobs().get(&id) {
            return Ok(Job::clone(j));
        }
        self.store
            .job(id)?
            .ok_or_else(|| ApiError::NotFound(format!("invalid job id {id}: no such job")))
    }

    /// A job, active or finished.
    pub fn job(&self, id: JobId) -> ApiResult<Job> {
        self.find_job(id)
    }

    /// A job with why it waits on each node (when pending) and its history.
    pub async fn job_detail(self: &Arc<Self>, id: JobId) -> ApiResult<JobDetail> {
        // A finished job and every history are read from the store off the runtime's workers.
        let job = self
            .off_runtime(move |cluster| cluster.find_job(id))
            .await?;
        let mut waits = Vec::new();
        if job.state == JobState::Pending {
            // Replaying the queue ahead of the job takes as long as a pass: on a copy of the
            // scheduler's copy of the records (brought up to date under the lock: only what
            // changed is taken; the copy's map is copied, its jobs are shared), replayed
            // without any lock.
            let (jobs, nodes, queue, ended) = {
                let mut view = self.scheduler_view.lock().await;
                let (nodes, queue, ended) = {
                    let mut st = lock(&self.state);
                    st.rec.refresh_copy(&mut view.copy);
                    (
                        st.rec.nodes().clone(),
                        Arc::clone(&st.queue_view),
                        st.reactor.ended_targets().ended(),
                    )
                };
                (view.copy.jobs.clone(), nodes, queue, ended)
            };
            let tiers = self.config.tiers.clone();
            let backfill = self.backfill();
            waits = tokio::task::spawn_blocking(move || {
                let snap = Snapshot {
                    jobs: &jobs,
                    nodes: &nodes,
                    ended: &ended,
                };
                // In the order of the last pass: its fair-share factors.
                let policy = Policy {
                    tiers: &tiers,
                    fair_share: &queue.factors,
                    backfill,
                };
                let waits = core::explain(&job, &snap, &policy, now_ms());
                // The map just replayed (at 100,000 queued jobs a few MB of nodes; the jobs
                // are shared) goes now: its memory is handed back at once rather than kept
                // at its peak.
                drop(jobs);
                super::scheduling::release_freed_memory();
                waits
            })
            .await
            .map_err(|e| ApiError::Internal(format!("explaining job {id} failed: {e}")))?;
        }
        let (job, events) = self
            .off_runtime(move |cluster| {
                let job = cluster.find_job(id)?;
                let events = cluster.store.job_events(&job)?;
                Ok((job, events))
            })
            .await?;
        Ok(JobDetail { events, job, waits })
    }

    /// What the last scheduling pass saw: fair share per account and each pending job's
    /// place in its tier.
    pub fn queue_view(&self) -> Arc<QueueView> {
        Arc::clone(&lock(&self.state).queue_view)
    }

    /// Fair share per account at the last pass (`yctl shares`). With `reports_public = false`,
    /// a caller who is not an administrator sees only the accounts they may charge.
    pub fn shares(&self, caller: &Caller) -> ShareTable {
        let mut table = self.queue_view().table.clone();
        if table.as_of == 0 {
            // No pass yet: no figures, but the half-life is known.
            table.half_life_ms = lock(&self.state).reactor.usage_book().half_life_ms();
        }
        if !self.config.sees_all_usage(caller) {
            table
                .accounts
                .retain(|a| self.config.sees_usage_of(caller, &a.account));
        }
        table
    }

    /// The nodes as `caller` may see them: a GPU held by a job whose usage is not theirs to
    /// see (`scheduler.reports_public = false`) is in use by [`PRIVATE_HOLDER`](crate::state::views::PRIVATE_HOLDER).
    pub fn list_nodes(&self, caller: &Caller) -> Vec<NodeView> {
        let st = lock(&self.state);
        let all = self.config.sees_all_usage(caller);
        st.rec
            .nodes()
            .values()
            .map(|n| {
                let mut view = node_view(n, st.rec.jobs());
                if !all {
                    for holder in view.gpu_holders.iter_mut().filter(|h| **h != 0) {
                        let visible = st.rec.jobs().get(&JobId(*holder)).is_some_and(|j| {
                            self.config
                                .sees_job_usage(caller, &j.spec.account, j.owner.uid)
                        });
                        if !visible {
                            *holder = crate::state::views::PRIVATE_HOLDER;
                        }
                    }
                }
                view
            })
            .collect()
    }
}

/// A job as a request names it: by its id (`JobRef.job_id`: exactly that job's record), or
/// as the user typed it (`JobRef.target`: `12` is every task when 12 is an array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Id(JobId),
    Target(ysched_common::JobTarget),
}

impl Named {
    /// From a wire `JobRef`'s parts: `target` when set (refused when malformed), else `job_id`.
    pub fn from_ref(job_id: u64, target: &str) -> ApiResult<Named> {
        if target.trim().is_empty() {
            Ok(Named::Id(JobId(job_id)))
        } else {
            Ok(Named::Target(parse_target(target)?))
        }
    }

    /// The id it starts from: the job's, or the array's a target names.
    pub fn job_id(&self) -> JobId {
        match self {
            Named::Id(id) => *id,
            Named::Target(target) => target.id,
        }
    }

    /// What it names among `rec` and the finished jobs.
    pub fn resolve(&self, rec: &Records, finished: FinishedLookup<'_>) -> ApiResult<Resolved> {
        match self {
            Named::Id(id) => Ok(Resolved {
                target: plain_target(id.0),
                ids: vec![*id],
                array: None,
            }),
            Named::Target(target) => rec.resolve(target, finished),
        }
    }
}

/// Which jobs a listing shows; empty parts select everything.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// A user name or uid.
    pub user: String,
    pub ids: BTreeSet<JobId>,
    pub states: Vec<JobState>,
    /// Finished jobs too (they are shown anyway when `states` or `ids` ask for them).
    pub all: bool,
    /// Finished jobs that ended at or after this (ms), found by their end (see
    /// `store::history`): the listing costs what it returns, not the whole history.
    pub since: Option<i64>,
    /// Only jobs submitted before this (ms), as sacct's `-E`.
    pub until: Option<i64>,
    /// Only jobs with larger ids: where the previous page stopped (see [`Page`]).
    pub after: Option<JobId>,
    /// At most this many jobs in one page; 0: no limit (schedd's server always sets one).
    pub limit: usize,
    /// At most about this many bytes of entries in one page, as [`Listing::size`] weighs them
    /// (the first entry always); 0: no limit.
    pub max_bytes: usize,
}

impl JobFilter {
    /// `uid`: `user` read as a number, once per listing rather than once per job.
    fn selects(&self, j: &Job, uid: Option<u32>) -> bool {
        (self.user.is_empty() || j.owner.user == self.user || Some(j.owner.uid) == uid)
            && (self.ids.is_empty() || self.ids.contains(&j.id))
            && (self.states.is_empty() || self.states.contains(&j.state))
            && self.until.is_none_or(|until| j.submit_time < until)
    }

    /// [`JobFilter::selects`] for a finished job as the history's index keeps it.
    fn selects_finished(&self, f: &FinishedEntry, uid: Option<u32>) -> bool {
        (self.user.is_empty() || f.user() == self.user || Some(f.uid) == uid)
            && (self.ids.is_empty() || self.ids.contains(&f.id))
            && (self.states.is_empty() || self.states.contains(&f.state))
            && self.until.is_none_or(|until| f.submit_time < until)
    }

    /// Whether history is asked for by its end time.
    fn windowed(&self) -> bool {
        self.since.is_some()
    }

    /// Whether the listing scans the history (by end time, or every finished job by id), not
    /// only reads the jobs it names: a bulk read (see `bulk`).
    pub fn scans_history(&self) -> bool {
        self.ids.is_empty()
            && (self.windowed() || self.all || self.states.iter().any(|s| s.is_terminal()))
    }
}

/// A job in full: its record, why it waits on each node (node, reason), and its history.
pub struct JobDetail {
    pub job: Job,
    pub waits: Vec<(String, String)>,
    pub events: Vec<ysched_common::JobEvent>,
}
