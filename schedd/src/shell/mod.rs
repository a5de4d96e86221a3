//! The shell around the state machine (`state/`): the records, agent sessions and the outbox
//! behind one lock. It runs each event through the state machine's reactor
//! (`state::reactor`) with its own ports: the wall clock, the store as journal (room check,
//! watchdog, exit 75), the metrics as observer, and an outbox that holds commands for the
//! next flush. Anything that must not happen before the change is durable (acknowledging a
//! client, telling an agent to launch or stop) waits for a flush (group commit).
//!
//! Locking: one `std::sync::Mutex<State>`, held only for short sections with no `.await`.
//!
//! - `requests`: client requests that change state (submit, cancel, hold, requeue, drain).
//! - `queries`: listings and details (read-only); `bulk`: reads of the history at low priority.
//! - `agents`: agent sessions and their reports.
//! - `scheduling`: the scheduling loop, node timeouts, and a pass off the lock.
//! - `usage`: usage reports (off the lock) and imports of usage.
//! - `mail`: the mail users asked for about their jobs, sent after the flush.

mod agents;
use agents::RelayToken;
mod bulk;
pub mod mail;
mod queries;
pub use queries::{JobDetail, JobFilter, Listing, Named, Page};
pub use requests::{GpuResumeOutcome, Submitted, GPU_CONFIRM_WAIT};
mod requests;
mod scheduling;
pub use scheduling::usage_half_life_ms;
mod scrape;
#[cfg(test)]
mod tests;
mod upkeep;
mod usage;
pub use usage::TraceExport;

use crate::core::{self, Policy, Snapshot};
pub use crate::error::{ApiError, ApiResult};
use crate::fair_share::{QueueView, UsageBook};
use crate::state::agent_events::{AgentReport, Limits, Registration};
use crate::state::client_events::audit_record;
use crate::state::commands::AgentCommand;
use crate::state::dependencies::EndedTargets;
use crate::state::reactor::{self, Clock, Ports, Reactor};
use crate::state::submission::NewJob;
use crate::state::{Effects, Records, SchedulerCopy};
use crate::store::{self, Store};
use crate::submit::{self, ValidSubmit};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{broadcast, mpsc, oneshot, Notify};
use ysched_common::time::now_ms;
use ysched_common::{AuditRecord, Caller, Config, Job, JobId, JobState};

/// sled fails for good after a failed flush or a write that failed inside it (every later
/// write fails, or never returns, until it is reopened), and the changes it could not flush
/// are already in memory: the only safe state is the one on disk. Exit, so that the service
/// manager restarts schedd from the store (everything acknowledged is there). A full disk is
/// refused before this (`Store::check_room`).
fn store_failed(e: &dyn std::fmt::Display) -> ! {
    tracing::error!(
        "state store write failed: {e}; exiting so that schedd restarts from what is on disk \
         (nothing acknowledged is lost)"
    );
    eprintln!("schedd: fatal: state store write failed: {e}");
    std::process::exit(75)
}

/// How long one write or flush of the store may take before schedd counts the store as
/// wedged (sled waits forever on a write that failed under it) and exits 75, as for a failed
/// flush. A write takes milliseconds, a flush at most a few seconds on a loaded disk.
const STORE_STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// Watches the store's writes and flushes from a thread of its own: one that has not
/// returned after [`STORE_STALL`] ends schedd (exit 75), with a log line, rather than leave
/// every request waiting for it forever.
#[derive(Default)]
struct StoreWatch {
    /// When the write in progress began (ms since the epoch); 0: none.
    write_since: std::sync::atomic::AtomicI64,
    /// When the flush in progress began; 0: none.
    flush_since: std::sync::atomic::AtomicI64,
}

impl StoreWatch {
    fn start(self: &Arc<Self>) {
        let watch = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("store-watch".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let limit = STORE_STALL.as_millis() as i64;
                let now = now_ms();
                for (what, since) in [("write", &watch.write_since), ("flush", &watch.flush_since)]
                {
                    let since = since.load(std::sync::atomic::Ordering::Relaxed);
                    if since > 0 && now - since > limit {
                        store_failed(&format!(
                            "a {what} of the state store has not returned for {} s (is its \
                             disk full or failing?)",
                            (now - since) / 1000
                        ));
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the state store's watchdog: {e}");
        }
    }

    /// Marks `slot` busy until the returned guard is dropped.
    fn busy(slot: &std::sync::atomic::AtomicI64) -> impl Drop + '_ {
        struct Busy<'a>(&'a std::sync::atomic::AtomicI64);
        impl Drop for Busy<'_> {
            fn drop(&mut self) {
                self.0.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
        slot.store(now_ms().max(1), std::sync::atomic::Ordering::Relaxed);
        Busy(slot)
    }
}

/// Messages to one agent's session, in the order they must arrive.
pub type AgentTx = mpsc::UnboundedSender<AgentCommand>;

struct Session {
    id: u64,
    /// The address the agent's connection comes from: its relayed client requests come on
    /// that connection or carry `relay_token` (see `server::relay`).
    peer: String,
    /// The session's secret, sent to the agent only in its `Registered`: a relayed request
    /// carrying it comes from this agent, on whatever connection (see `server::relay`).
    relay_token: RelayToken,
    tx: AgentTx,
    /// A login agent: it relays clients and runs nothing; its name is no node.
    login: bool,
}

pub struct State {
    /// Jobs not yet finished (finished ones live only in the store), nodes, the id counter.
    rec: Records,
    sessions: BTreeMap<String, Session>,
    next_session_id: u64,
    /// Agent messages waiting for the next flush: never sent before the change they carry is
    /// durable, and sent in the order they were queued.
    outbox: Vec<(String, AgentCommand)>,
    /// Job mails waiting for the next flush, like the outbox (see `mail`).
    mails: Vec<mail::Mail>,
    /// Node topologies for the submit-time check (the scheduling loop keeps its own).
    topologies: core::Topologies,
    /// The books every event keeps (fair share's usage, the end states dependencies read),
    /// and the one way events run (see `state::reactor`).
    reactor: Reactor,
    /// What the last pass saw: the share table and each pending job's place.
    queue_view: Arc<QueueView>,
    /// When and where the last pass expects pending jobs to start (memory only: each pass
    /// replaces it).
    expected: Arc<BTreeMap<JobId, core::ExpectedStart>>,
    /// When the reactor's end states last forgot the jobs no dependency names any more.
    deps_collected: std::time::Instant,
    /// Changes checked and taken by memory but not yet written to the store (see
    /// [`Unwritten`]).
    unwritten: Unwritten,
}

/// Changes memory took before the store: always within one hold of the lock, or until the
/// next write or flush, and only for changes nothing answers. sled 0.34 writes its log
/// buffer out, and wakes every one of its IO threads, at each transaction, whatever its
/// size: most of schedd's CPU per job went there while each submit and each agent's start
/// report was a transaction of its own. Every write first writes what is held here (in one
/// transaction with it), and so does the flush loop before it flushes: a change held here
/// is as durable as one written and not yet flushed, and nothing is acknowledged, launched
/// or stopped before the flush that covers it. Its room was checked before memory took it
/// (a refusal still changes nothing); sled failing a write ends schedd (see
/// [`store_failed`]), the store the truth again at the restart.
#[derive(Default)]
struct Unwritten {
    /// Changes that need no flush of their own (agents' start reports, see
    /// [`Cluster::report_loop`]): written with the next write or flush, which they ask for.
    held: Vec<store::Batch>,
    /// The event running now may be held (set around it).
    hold: bool,
    /// While the submit loop runs a round (see [`Cluster::submit_loop`]): its events'
    /// changes, written together at its end, before the lock is let go.
    round: Option<Vec<store::Batch>>,
}

/// A submit's event, run under the lock by the submit loop (see [`Cluster::submit_loop`]).
type SubmitEvent = Box<dyn FnOnce(&mut State, &Cluster) -> ApiResult<reactor::Done<()>> + Send>;

/// A submit waiting for the submit loop, and where its outcome goes.
pub(super) struct QueuedSubmit {
    event: SubmitEvent,
    reply: oneshot::Sender<ApiResult<reactor::Done<()>>>,
}

/// What the scheduling loop keeps between passes.
#[derive(Default)]
pub(crate) struct SchedulerView {
    copy: SchedulerCopy,
    topologies: core::Topologies,
}

pub struct Cluster {
    config: Config,
    store: Store,
    state: Mutex<State>,
    /// Wakes the scheduling loop: a submit, a job end, a node joining.
    wake: Notify,
    /// Job ids whose record changed, for `WatchJob` streams.
    changes: broadcast::Sender<JobId>,
    /// Group commit: each waiter is answered after one flush that began after it queued.
    flush_tx: mpsc::UnboundedSender<Option<oneshot::Sender<bool>>>,
    /// When this schedd started: a node's silence is counted from here at the earliest, so
    /// a schedd that was down longer than `node_timeout_secs` does not fail every job at start.
    started: i64,
    /// Agents' start and end reports, applied in batches by one task (`report_loop`).
    reports_tx: mpsc::UnboundedSender<(String, u64, AgentReport)>,
    /// Submits' events, run in rounds by one task (`submit_loop`).
    submits_tx: mpsc::UnboundedSender<QueuedSubmit>,
    /// The scheduler's copy of the jobs and its node topologies, kept between passes; held by
    /// the pass while it runs.
    scheduler_view: Arc<tokio::sync::Mutex<SchedulerView>>,
    /// Prometheus metrics: counters moved by events, gauges counted at scrape (`scrape`).
    metrics: Arc<crate::metrics::Metrics>,
    /// The store's writes and flushes in progress, for the watchdog.
    store_watch: Arc<StoreWatch>,
    /// Wakes the upkeep of the state disk (`upkeep`): the audit log grew past its limit.
    upkeep_wake: Notify,
    /// How many of each user's refused requests were audited lately.
    refusals: Mutex<upkeep::RefusalLimiter>,
    /// Woken after each node's word on its GPUs that changed something: resumes of GPUs wait
    /// on it for the node's confirmation.
    gpu_reports: Notify,
    /// Sends job mails (`notify.sendmail`), off the lock and off the runtime.
    mailer: mail::Mailer,
    /// This schedd's replica when it is one of `scheduler.replicas` (it then leads): changes
    /// are replicated instead of written to the store here, and are durable once a majority
    /// of replicas have them (see [`Cluster::flush_loop`]).
    replica: Option<crate::replica::Replica>,
    /// With a replica: the changes written since the last flush, in the order they were
    /// made (under the state lock), each to be replicated as one entry.
    proposals: Mutex<Vec<store::Batch>>,
    /// Set once replication failed: why. Nothing is acknowledged after it (see
    /// [`Cluster::replication_failed`]).
    replication_failure: std::sync::OnceLock<String>,
}

/// How long a leader that could not replicate goes on answering (every change refused with
/// why) before it exits (see [`Cluster::replication_failed`]).
const EXIT_AFTER_FAILED_REPLICATION: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a leader waits for a majority to take its changes before it gives up the lead
/// (see [`lead_lost`]): clients then get "no quorum" until one is back.
const REPLICATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock would be a bug; keep serving rather than cascade.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    /// Recovers state from the store and starts the flush and scheduling tasks.
    pub fn start(config: Config, store: Store) -> Result<Arc<Cluster>, store::Error> {
        Self::start_with(config, store, None, None)
    }

    /// [`Cluster::start`] for the leader of `scheduler.replicas`, over its store (which holds
    /// every committed change): its changes go through `replica`. It starts from what the
    /// replica kept warm as a follower when that covers everything it applied (see
    /// `replica::Warm`), else from the store.
    pub fn start_leading(
        config: Config,
        store: Store,
        replica: crate::replica::Replica,
    ) -> Result<Arc<Cluster>, store::Error> {
        let warm = replica.take_warm();
        Self::start_with(config, store, Some(replica), warm)
    }

    fn start_with(
        config: Config,
        store: Store,
        replica: Option<crate::replica::Replica>,
        warm: Option<crate::replica::Warm>,
    ) -> Result<Arc<Cluster>, store::Error> {
        let now = now_ms();
        let (rec, usage_book) = match warm {
            Some(warm) if warm.usage.half_life_ms() == usage_half_life_ms(&config) => {
                let mut book = warm.usage;
                book.advance(now);
                (warm.recovered, book)
            }
            Some(warm) => (
                warm.recovered,
                scheduling::usage_book(&config, &store, now)?,
            ),
            None => (
                store.recover()?,
                scheduling::usage_book(&config, &store, now)?,
            ),
        };
        let (flush_tx, flush_rx) = mpsc::unbounded_channel();
        let (reports_tx, reports_rx) = mpsc::unbounded_channel();
        let (submits_tx, submits_rx) = mpsc::unbounded_channel();
        let metrics = Arc::new(crate::metrics::Metrics::new(
            config.tiers.keys().map(String::as_str),
        ));
        metrics.recovered(rec.active_jobs.values());
        let deps = EndedTargets::rebuild(&rec.active_jobs, |id| store.job_state(id))?;
        let limits = crate::state::RecordLimits::from_config(&config);
        let config_notify = config.notify.clone();
        let cluster = Arc::new(Cluster {
            metrics,
            started: now_ms(),
            config,
            store,
            state: Mutex::new(State {
                rec: Records::new(rec.active_jobs, rec.nodes, rec.next_job_id, limits),
                sessions: BTreeMap::new(),
                next_session_id: 1,
                outbox: Vec::new(),
                mails: Vec::new(),
                topologies: core::Topologies::default(),
                reactor: Reactor::new(usage_book, deps),
                queue_view: Default::default(),
                expected: Default::default(),
                deps_collected: std::time::Instant::now(),
                unwritten: Unwritten::default(),
            }),
            wake: Notify::new(),
            changes: broadcast::channel(4096).0,
            flush_tx,
            reports_tx,
            submits_tx,
            scheduler_view: Default::default(),
            store_watch: Default::default(),
            upkeep_wake: Notify::new(),
            refusals: Default::default(),
            gpu_reports: Notify::new(),
            mailer: mail::Mailer::new(&config_notify),
            replica,
            proposals: Mutex::default(),
            replication_failure: std::sync::OnceLock::new(),
        });
        cluster.store_watch.start();
        tokio::spawn(cluster.clone().report_loop(reports_rx));
        tokio::spawn(cluster.clone().submit_loop(submits_rx));
        tokio::spawn(cluster.clone().flush_loop(flush_rx));
        tokio::spawn(cluster.clone().schedule_loop());
        tokio::spawn(cluster.clone().upkeep_loop());
        cluster.wake.notify_one();
        Ok(cluster)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store (tests make it refuse writes with [`Store::fail_writes`]).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Waits until everything applied so far is durable, then delivers queued agent messages.
    async fn commit(&self) -> ApiResult<()> {
        self.request_flush().await
    }

    /// Asks for a flush of everything applied so far (at once, not when polled); the future
    /// is ready once it is durable and the queued agent messages are delivered.
    fn request_flush(&self) -> impl std::future::Future<Output = ApiResult<()>> + '_ {
        let (tx, rx) = oneshot::channel();
        let _ = self.flush_tx.send(Some(tx));
        async move {
            match rx.await {
                Ok(true) => Ok(()),
                _ => Err(match self.replication_failure.get() {
                    Some(why) => ApiError::Unavailable(why.clone()),
                    None => ApiError::Internal("state store flush failed".into()),
                }),
            }
        }
    }

    /// One task flushes for everybody: concurrent submits share a flush (group commit), and
    /// agent messages leave in queue order, each after the flush that covers its change.
    async fn flush_loop(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<Option<oneshot::Sender<bool>>>,
    ) {
        while let Some(first) = rx.recv().await {
            let mut waiters: Vec<_> = first.into_iter().collect();
            while let Ok(w) = rx.try_recv() {
                waiters.extend(w);
            }
            let (outbox, mails, proposals) = {
                let mut st = lock(&self.state);
                if let Err(e) = self.write_unwritten(&mut st.unwritten) {
                    tracing::error!("writing held changes failed: {e}");
                }
                (
                    std::mem::take(&mut st.outbox),
                    std::mem::take(&mut st.mails),
                    std::mem::take(&mut *self.lock_proposals()),
                )
            };
            let ok = if let Some(replica) = &self.replica {
                // Durable once a majority of the replicas have the changes in their logs;
                // the answer comes once this replica applied them to its store too.
                let replicated = if self.replication_failure.get().is_some() {
                    false
                } else {
                    match tokio::time::timeout(
                        REPLICATION_TIMEOUT,
                        replica.replicate_all(proposals),
                    )
                    .await
                    {
                        Ok(Ok(())) => true,
                        Ok(Err(e)) => self.replication_failed(e.to_string()),
                        Err(_) => self.replication_failed(format!(
                            "no quorum: a majority of scheduler.replicas did not take the \
                             change within {} s: it was not acknowledged, and takes effect only \
                             if this replica leads again once a majority is back (check with \
                             yq before you repeat it)",
                            REPLICATION_TIMEOUT.as_secs()
                        )),
                    }
                };
                replicated
            } else {
                let _busy = StoreWatch::busy(&self.store_watch.flush_since);
                match self.store.flush().await {
                    Ok(()) => true,
                    Err(e) => store_failed(&e),
                }
            };
            if ok {
                let st = lock(&self.state);
                for (node, msg) in outbox {
                    if let AgentCommand::Launch(order) = &msg {
                        ysched_common::stamp::stamp("d.launch_out", order.job.id.0);
                    }
                    if let Some(s) = st.sessions.get(&node) {
                        let _ = s.tx.send(msg);
                    }
                }
                drop(st);
                // Durable now: the users may be told (queued, never waited for).
                self.mailer.send(mails);
            }
            for w in waiters {
                let _ = w.send(ok);
            }
        }
    }

    /// A leader that could not replicate (it lost the lead, or a majority of the replicas
    /// did not answer in time) holds changes in memory that may never be durable: from now
    /// on it acknowledges nothing (each waiting request is told `why`), and it exits shortly
    /// (status 75), so that the service manager restarts it as a follower of whoever leads,
    /// from what was committed. Always `false` (nothing was replicated).
    fn replication_failed(&self, why: String) -> bool {
        tracing::error!("replication failed: {why}; exiting so that schedd restarts as a follower");
        let _ = self.replication_failure.set(why);
        tokio::spawn(async {
            tokio::time::sleep(EXIT_AFTER_FAILED_REPLICATION).await;
            eprintln!("schedd: fatal: replication failed");
            std::process::exit(75)
        });
        false
    }

    fn lock_proposals(&self) -> MutexGuard<'_, Vec<store::Batch>> {
        self.proposals.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self, ids: impl IntoIterator<Item = JobId>) {
        for id in ids {
            let _ = self.changes.send(id);
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.changes.subscribe()
    }

    /// Writes an event's change (not yet durable) if the state disk has room for it (see
    /// [`Store::check_room`]): a refusal changes nothing. A write that sled itself failed
    /// ends schedd (exit 75): sled cannot go on after it.
    /// In a round of the submit loop, or for an event that may be held, the change is
    /// checked and kept (see [`Unwritten`]); else it is written with what is held.
    fn write(
        &self,
        effects: &Effects,
        room: store::Room,
        unwritten: &mut Unwritten,
    ) -> ApiResult<()> {
        // Encoded first: the room check counts the bytes the write takes.
        let batch = store::Batch::from(effects);
        if batch.is_empty() {
            return Ok(());
        }
        self.store.check_room(batch.bytes(), room)?;
        let audited = batch.has_audit();
        if self.replica.is_none() && (unwritten.hold || unwritten.round.is_some()) {
            match &mut unwritten.round {
                Some(round) => round.push(batch),
                None => unwritten.held.push(batch),
            }
            if audited {
                self.audit_written();
            }
            return Ok(());
        }
        if self.replica.is_some() {
            // Replicated at the next flush, in this order; every replica (this one too)
            // writes it to its store when it is committed.
            self.lock_proposals().push(batch);
            if audited {
                self.audit_written();
            }
            return Ok(());
        }
        let _busy = StoreWatch::busy(&self.store_watch.write_since);
        let held = std::mem::take(&mut unwritten.held);
        match self.store.apply_group(held.into_iter().chain([batch])) {
            Err(e) if e.is_fatal_write() => store_failed(&e),
            Err(e) => Err(e.into()),
            Ok(()) => {
                if audited {
                    self.audit_written();
                }
                Ok(())
            }
        }
    }

    /// Writes the changes held and those of a round of the submit loop (see
    /// [`Unwritten`]), in as few transactions as the store can make of them. A failure that
    /// leaves sled working (only a test's injected one: the room was checked before) loses
    /// them, as a crash before a flush would: the caller refuses the round's requests.
    fn write_unwritten(&self, unwritten: &mut Unwritten) -> ApiResult<()> {
        let mut batches = std::mem::take(&mut unwritten.held);
        batches.extend(unwritten.round.take().unwrap_or_default());
        if batches.is_empty() {
            return Ok(());
        }
        let _busy = StoreWatch::busy(&self.store_watch.write_since);
        match self.store.apply_group(batches) {
            Err(e) if e.is_fatal_write() => store_failed(&e),
            Err(e) => Err(e.into()),
            Ok(()) => Ok(()),
        }
    }

    /// Runs one event of a client's request under the lock (see [`Cluster::run_event_in`]).
    fn run_event<T>(
        &self,
        event: impl FnOnce(&Records, i64) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<(Vec<JobId>, bool, T)> {
        self.run_event_in(store::Room::Request, &WallClock, event)
    }

    /// Runs one event of the cluster's own bookkeeping (agents' reports, placements), which
    /// may use more of the state disk's reserve than a client's request (see
    /// [`store::Room`]).
    fn run_cluster_event<T>(
        &self,
        event: impl FnOnce(&Records, i64) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<(Vec<JobId>, bool, T)> {
        self.run_event_in(store::Room::Cluster, &WallClock, event)
    }

    /// [`Cluster::run_cluster_event`] for an event nothing answers, whose change may be held
    /// until the next write or flush (see [`Unwritten`]); it asks for that flush, and does
    /// not wait for it.
    fn run_held_event<T>(
        &self,
        event: impl FnOnce(&Records, i64) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<(Vec<JobId>, bool, T)> {
        let done = {
            let mut st = lock(&self.state);
            st.unwritten.hold = true;
            let done = st.run(self, store::Room::Cluster, &WallClock, event);
            st.unwritten.hold = false;
            done?
        };
        let _ = self.flush_tx.send(None);
        Ok((done.changed, done.wake, done.out))
    }

    /// Runs one event under the lock, through the reactor: its change is written first; only
    /// when that succeeded do its records reach memory and its commands the outbox (they
    /// leave after the next flush). A refused write returns the error and changes nothing.
    fn run_event_in<T>(
        &self,
        room: store::Room,
        clock: &dyn Clock,
        event: impl FnOnce(&Records, i64) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<(Vec<JobId>, bool, T)> {
        let mut st = lock(&self.state);
        let done = st.run(self, room, clock, event)?;
        Ok((done.changed, done.wake, done.out))
    }

    /// After [`run_event`]: waits until the change is durable (group commit), then wakes the
    /// scheduler and the watchers.
    async fn settle(&self, changed: Vec<JobId>, wake: bool) -> ApiResult<()> {
        self.commit().await?;
        if wake {
            self.wake.notify_one();
        }
        self.changed(changed);
        Ok(())
    }

    /// After [`run_event`] for an agent's report: nobody waits for an answer, so the next
    /// report need not wait for this one's flush. What must wait does: the acknowledgement
    /// and any launch or stop it leads to leave through the outbox after the flush that covers
    /// the change (a flush is of the whole store), and until then the agent keeps the report.
    fn settle_report(&self, changed: Vec<JobId>, wake: bool) {
        let _ = self.flush_tx.send(None);
        if wake {
            self.wake.notify_one();
        }
        self.changed(changed);
    }

    /// Backfill as configured (`scheduler.backfill`, `scheduler.backfill_reservations`).
    fn backfill(&self) -> core::Backfill {
        core::Backfill::configured(&self.config.scheduler)
    }

    fn limits(&self) -> Limits {
        Limits {
            max_requeues: self.config.scheduler.max_requeues,
            max_launch_attempts: self.config.scheduler.max_launch_attempts,
        }
    }
}

/// schedd's clock: the wall clock, read once per event.
struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> i64 {
        now_ms()
    }
}

/// schedd's journal: the store, with the room check and the watchdog (see
/// [`Cluster::write`]); in a round of the submit loop, the round's kept writes.
struct StoreJournal<'a> {
    cluster: &'a Cluster,
    unwritten: &'a mut Unwritten,
}

impl reactor::Journal for StoreJournal<'_> {
    fn write(&mut self, effects: &Effects, room: store::Room) -> ApiResult<()> {
        self.cluster.write(effects, room, self.unwritten)
    }
}

/// schedd's observer: the metrics moved by events, and the job mails they call for (sent
/// after the flush).
struct ShellObserver<'a> {
    metrics: &'a crate::metrics::Metrics,
    mails: &'a mut Vec<mail::Mail>,
}

impl reactor::Observer for ShellObserver<'_> {
    fn applying(&mut self, rec: &Records, jobs: &[Job]) {
        self.metrics.observe_jobs(rec.jobs(), jobs);
        mail::collect(rec, jobs, self.mails);
    }

    fn reasons(&mut self, rec: &Records, reasons: &[(JobId, String)]) {
        mail::collect_reasons(rec, reasons, self.mails);
    }
}

/// schedd's outbox: commands wait for the next flush, which they ask for.
struct FlushedOutbox<'a> {
    outbox: &'a mut Vec<(String, AgentCommand)>,
    flush_tx: &'a mpsc::UnboundedSender<Option<oneshot::Sender<bool>>>,
}

impl reactor::Outbox for FlushedOutbox<'_> {
    fn post(&mut self, commands: Vec<(String, AgentCommand)>) {
        self.outbox.extend(commands);
        let _ = self.flush_tx.send(None);
    }
}

impl State {
    /// Runs one event through the reactor, with the cluster's store, metrics and outbox.
    fn run<T>(
        &mut self,
        cluster: &Cluster,
        room: store::Room,
        clock: &dyn Clock,
        event: impl FnOnce(&Records, i64) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<reactor::Done<T>> {
        let mails_before = self.mails.len();
        let ports = Ports {
            clock,
            journal: &mut StoreJournal {
                cluster,
                unwritten: &mut self.unwritten,
            },
            observer: &mut ShellObserver {
                metrics: &cluster.metrics,
                mails: &mut self.mails,
            },
            outbox: &mut FlushedOutbox {
                outbox: &mut self.outbox,
                flush_tx: &cluster.flush_tx,
            },
        };
        let done = self.reactor.run(&mut self.rec, ports, room, event);
        if self.mails.len() > mails_before {
            // The mails leave after a flush: make sure one comes.
            let _ = cluster.flush_tx.send(None);
        }
        done
    }
}
