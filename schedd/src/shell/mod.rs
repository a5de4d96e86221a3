//! The shell around the state machine (`state/`): the records, agent sessions and the outbox
//! behind one lock. It runs each event through the state machine's reactor
//! (`state::reactor`) with its own ports: the wall clock, the store as journal (room check,
//! watchdog, exit 75), the metrics as observer, and an outbox that holds commands for the
//! next flush. Anything that must not happen before the change is durable (acknowledging a
//! client, telling an agent to launch or stop) waits for a flush (group commit).
//!
//! Locking: one `std::sync::Mutex<State>`, held only for short sections with no `.await`.
//!
//! - `submits`: submits, run in rounds by the submit loop.
//! - `requests`: the other client requests that change state (cancel, hold, requeue, drain).
//! - `queries`: listings and details (read-only); `bulk`: reads of the history at low priority.
//! - `agents`: agent sessions and their reports; `sessions`: the live sessions themselves.
//! - `hosts`: hosts' enrolments, revocations, and the check of their certificates.
//! - `scheduling`: the scheduling loop, node timeouts, and a pass off the lock.
//! - `usage`: usage reports (off the lock) and imports of usage; `scrape`: the metrics.
//! - `mail`: the mail users asked for about their jobs, sent after the flush; `mail_queue`:
//!   its queue, bounded in all and per user.
//! - `durability`: where a change becomes durable (one schedd's store, or the replicas'
//!   log); `flusher`: the group commit, and what waits for it.
//! - `retire`: a replicas' leader stepping down, its cluster changing nothing more.
//! - `upkeep`: the state disk (retention, the audit log's bounds, the ballast).

mod agents;
mod sessions;
pub use sessions::RelaySession;
use sessions::{AgentTx, Sessions};
mod bulk;
mod durability;
mod flusher;
use flusher::Flushes;
mod hosts;
pub mod mail;
mod mail_queue;
mod queries;
pub use queries::{JobDetail, JobFilter, Listing, Named, Page};
pub use requests::{GpuResumeOutcome, GPU_CONFIRM_WAIT};
pub use submits::Submitted;
mod requests;
mod retire;
mod scheduling;
mod submits;
pub use scheduling::usage_half_life_ms;
mod scrape;
#[cfg(test)]
mod tests;
mod upkeep;
mod usage;
pub use usage::TraceExport;

use crate::core::{self, PendingReason, Policy, Snapshot};
pub use crate::error::{ApiError, ApiResult};
use crate::fair_share::QueueView;
use crate::state::agent_events::{AgentReport, Limits};
use crate::state::commands::AgentCommand;
use crate::state::dependencies::EndedTargets;
use crate::state::reactor::{self, Clock, Ports, Reactor};
use crate::state::{Effects, Records, SchedulerCopy};
use crate::store::{self, Store};
use durability::{Durability, Unwritten};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{broadcast, mpsc, oneshot, Notify};
use ysched_common::time::now_ms;
use ysched_common::{Caller, Config, Job, JobId, JobState};

pub struct State {
    /// Jobs not yet finished (finished ones live only in the store), nodes, the id counter.
    rec: Records,
    sessions: Sessions,
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
    flushes: Flushes,
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
    /// Wakes the upkeep of the state disk (`upkeep`): the audit log grew past its limit.
    upkeep_wake: Notify,
    /// How many of each user's refused requests were audited lately.
    refusals: Mutex<upkeep::RefusalLimiter>,
    /// Woken after each node's word on its GPUs that changed something: resumes of GPUs wait
    /// on it for the node's confirmation.
    gpu_reports: Notify,
    /// Sends job mails (`notify.sendmail`), off the lock and off the runtime.
    mailer: mail::Mailer,
    /// Where a change becomes durable: this schedd's store, or (when it leads replicas) the
    /// replicas' Raft log (see `durability`).
    durability: Arc<dyn Durability>,
    /// Jobs whose change is announced to watchers after the next flush (see
    /// [`Cluster::changed_when_durable`]).
    announced_after_flush: Mutex<Vec<JobId>>,
    /// Cancelled when this `schedd` no longer leads its replicas: its loops end, and it
    /// changes nothing more (see `retire`).
    retired: tokio_util::sync::CancellationToken,
}

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
        let (flushes, flush_rx) = Flushes::new();
        let (reports_tx, reports_rx) = mpsc::unbounded_channel();
        let (submits_tx, submits_rx) = mpsc::unbounded_channel();
        let metrics = Arc::new(crate::metrics::Metrics::new(
            config.tiers.keys().map(String::as_str),
        ));
        metrics.recovered(rec.active_jobs.values());
        let deps = EndedTargets::rebuild(&rec.active_jobs, |id| store.job_state(id))?;
        let limits = crate::state::RecordLimits::from_config(&config);
        let retired = tokio_util::sync::CancellationToken::new();
        let durability: Arc<dyn Durability> = match replica {
            Some(replica) => Arc::new(durability::Replicated::new(replica, retired.clone())),
            None => {
                let watch = Arc::new(durability::StoreWatch::default());
                watch.start();
                Arc::new(durability::LocalStore::new(store.clone(), watch))
            }
        };
        let config_notify = config.notify.clone();
        let cluster = Arc::new(Cluster {
            metrics,
            started: now_ms(),
            config,
            store,
            state: Mutex::new(State {
                rec: Records::new(rec.active_jobs, rec.nodes, rec.next_job_id, limits)
                    .with_hosts(rec.hosts),
                sessions: Sessions::default(),
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
            flushes,
            reports_tx,
            submits_tx,
            scheduler_view: Default::default(),
            upkeep_wake: Notify::new(),
            refusals: Default::default(),
            gpu_reports: Notify::new(),
            mailer: mail::Mailer::new(&config_notify),
            durability,
            announced_after_flush: Mutex::default(),
            retired,
        });
        // Each loop holds the cluster; they end when it retires.
        cluster.spawn_until_retired(cluster.clone().report_loop(reports_rx));
        cluster.spawn_until_retired(cluster.clone().submit_loop(submits_rx));
        cluster.spawn_until_retired(cluster.clone().flush_loop(flush_rx));
        cluster.spawn_until_retired(cluster.clone().schedule_loop());
        cluster.spawn_until_retired(cluster.clone().upkeep_loop());
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

    fn changed(&self, ids: impl IntoIterator<Item = JobId>) {
        for id in ids {
            let _ = self.changes.send(id);
        }
    }

    /// Announces to watchers jobs whose change a flush has yet to cover (an agent's report):
    /// at once with one `schedd`, whose store has the change already (written, not yet
    /// flushed), so a watcher that reads a finished job there reads it. A replica's leader
    /// writes a change to its store only once the change is replicated and applied: it
    /// announces after that flush, or a watcher would read a job that left memory in its
    /// store's earlier version, and wait for a change that already came.
    fn changed_when_durable(&self, ids: Vec<JobId>) {
        if !self.durability.store_follows_flush() {
            return self.changed(ids);
        }
        self.announced_after_flush
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(ids);
        self.flushes.soon();
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
        self.durability.take(batch, unwritten)?;
        if audited {
            self.audit_written();
        }
        Ok(())
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
        self.flushes.soon();
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
        self.flushes.soon();
        if wake {
            self.wake.notify_one();
        }
        self.changed_when_durable(changed);
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

    fn reasons(&mut self, rec: &Records, reasons: &[(JobId, PendingReason)]) {
        mail::collect_reasons(rec, reasons, self.mails);
    }
}

/// schedd's outbox: commands wait for the next flush, which they ask for.
struct FlushedOutbox<'a> {
    outbox: &'a mut Vec<(String, AgentCommand)>,
    flushes: &'a Flushes,
}

impl reactor::Outbox for FlushedOutbox<'_> {
    fn post(&mut self, commands: Vec<(String, AgentCommand)>) {
        self.outbox.extend(commands);
        self.flushes.soon();
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
        // A leader that stepped down changes nothing more: it would never be durable.
        cluster.refuse_if_retired()?;
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
                flushes: &cluster.flushes,
            },
        };
        let done = self.reactor.run(&mut self.rec, ports, room, event);
        if self.mails.len() > mails_before {
            // The mails leave after a flush: make sure one comes.
            cluster.flushes.soon();
        }
        done
    }
}
