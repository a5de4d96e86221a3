//! The shell around the state machine (`state/`): the records, agent sessions and the outbox
//! behind one lock. It runs each event: the state machine computes its effects, the shell
//! writes their batch, and only when that succeeded takes them into memory and the outbox.
//! Anything that must not happen before the change is durable (acknowledging a client,
//! telling an agent to launch or stop) waits for a flush (group commit).
//!
//! Locking: one `std::sync::Mutex<State>`, held only for short sections with no `.await`.

use crate::core::{self, Policy, Snapshot};
pub use crate::error::{ApiError, ApiResult};
use crate::state::agent_events::{Limits, Registration};
use crate::state::client_events::{audit_record, NewJob};
use crate::state::commands::AgentCommand;
use crate::state::lifecycle::PartEnd;
use crate::state::{Effects, Records};
use crate::store::{self, Store};
use crate::submit;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{broadcast, mpsc, oneshot, Notify};
use ysched_common::time::now_ms;
use ysched_common::{AuditRecord, Config, Job, JobId, JobState, Node, Owner};
use ysched_proto as pb;

/// sled fails for good after a failed flush (every later write fails until it is reopened),
/// and the changes it could not flush are already in memory: the only safe state is the one on
/// disk. Exit, so that the service manager restarts schedd from the store (everything
/// acknowledged is there). A full disk is refused before this (`check_room`).
fn store_failed(e: &store::Error) -> ! {
    tracing::error!(
        "state store write failed: {e}; exiting so that schedd restarts from what is on disk \
         (nothing acknowledged is lost)"
    );
    eprintln!("schedd: fatal: state store write failed: {e}");
    std::process::exit(75)
}

/// Messages to one agent's session, in the order they must arrive.
pub type AgentTx = mpsc::UnboundedSender<AgentCommand>;

struct Session {
    id: u64,
    /// The agent's address, for messages.
    peer: String,
    tx: AgentTx,
}

pub struct State {
    /// Jobs not yet finished (finished ones live only in the store), nodes, the id counter.
    rec: Records,
    sessions: BTreeMap<String, Session>,
    next_session_id: u64,
    /// Agent messages waiting for the next flush: never sent before the change they carry is
    /// durable, and sent in the order they were queued.
    outbox: Vec<(String, AgentCommand)>,
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
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock would be a bug; keep serving rather than cascade.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    /// Recovers state from the store and starts the flush and scheduling tasks.
    pub fn start(config: Config, store: Store) -> Result<Arc<Cluster>, store::Error> {
        let rec = store.recover()?;
        let (flush_tx, flush_rx) = mpsc::unbounded_channel();
        let cluster = Arc::new(Cluster {
            started: now_ms(),
            config,
            store,
            state: Mutex::new(State {
                rec: Records {
                    jobs: rec.active_jobs,
                    nodes: rec.nodes,
                    next_job_id: rec.next_job_id,
                },
                sessions: BTreeMap::new(),
                next_session_id: 1,
                outbox: Vec::new(),
            }),
            wake: Notify::new(),
            changes: broadcast::channel(4096).0,
            flush_tx,
        });
        tokio::spawn(cluster.clone().flush_loop(flush_rx));
        tokio::spawn(cluster.clone().schedule_loop());
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
        let (tx, rx) = oneshot::channel();
        let _ = self.flush_tx.send(Some(tx));
        match rx.await {
            Ok(true) => Ok(()),
            _ => Err(ApiError::Internal("state store flush failed".into())),
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
            let outbox = std::mem::take(&mut lock(&self.state).outbox);
            let ok = match self.store.flush().await {
                Ok(()) => true,
                Err(e) => store_failed(&e),
            };
            if ok {
                let st = lock(&self.state);
                for (node, msg) in outbox {
                    if let Some(s) = st.sessions.get(&node) {
                        let _ = s.tx.send(msg);
                    }
                }
            }
            for w in waiters {
                let _ = w.send(ok);
            }
        }
    }

    fn changed(&self, ids: impl IntoIterator<Item = JobId>) {
        for id in ids {
            let _ = self.changes.send(id);
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.changes.subscribe()
    }

    // ------------------------------------------------------------------ client requests

    /// Validates, persists and acknowledges a submit. The id is returned only once the job is
    /// durable.
    pub async fn submit(
        &self,
        owner: Owner,
        home: Option<std::path::PathBuf>,
        spec: pb::JobSpec,
    ) -> ApiResult<JobId> {
        // Looked at before the lock: a home on a hanging automount must stall only this caller.
        let home_exists = home.as_deref().is_some_and(std::path::Path::is_dir);
        let wanted_tier = spec.tier.clone();
        let submitted = 'locked: {
            let mut st = lock(&self.state);
            let (spec, payload, grace_secs) =
                match submit::validate(spec, &owner, &self.config, &st.rec.nodes) {
                    Ok(v) => v,
                    Err(e) => break 'locked Err(e),
                };
            let checkpoint_dir = |id: JobId| {
                submit::checkpoint_dir_with(
                    &spec,
                    id.0,
                    &self.config.scheduler.checkpoint_root,
                    home.as_deref(),
                    |_| home_exists,
                )
            };
            let new = NewJob {
                owner: owner.clone(),
                tier_value: self.config.tier(&spec.tier).map(|t| t.value).unwrap_or(0),
                spec: spec.clone(),
                payload,
                grace_secs,
                checkpoint_dir: &checkpoint_dir,
            };
            let (mut effects, job) = st.rec.submit(new, now_ms());
            self.store.check_room()?;
            self.store.apply(std::mem::take(&mut effects.batch))?;
            // The id is taken now; the job enters memory once it is durable.
            let done = st.rec.commit(effects);
            Ok((job, done))
        };
        let (job, done) = match submitted {
            Ok(v) => v,
            Err(ApiError::Denied(msg)) => {
                // Refused permissions are audited, durably, before the refusal is reported.
                let detail = format!("submit to tier '{wanted_tier}': {msg}");
                let record = audit_record(&owner, "submit_refused", None, detail, now_ms());
                self.run_event(|_| {
                    let mut effects = Effects::default();
                    effects.audit(record);
                    Ok((effects, ()))
                })?;
                self.commit().await?;
                return Err(ApiError::Denied(msg));
            }
            Err(e) => return Err(e),
        };
        self.commit().await?;
        let id = job.id;
        lock(&self.state).rec.jobs.insert(id, job);
        if done.wake {
            self.wake.notify_one();
        }
        self.changed(done.changed);
        Ok(id)
    }

    pub fn list_jobs(&self, req: &pb::ListJobsRequest) -> ApiResult<Vec<pb::JobInfo>> {
        let states: Vec<JobState> = req
            .states
            .iter()
            .map(|s| {
                JobState::parse(s)
                    .ok_or_else(|| ApiError::Invalid(format!("unknown job state '{s}'")))
            })
            .collect::<ApiResult<_>>()?;
        let ids: BTreeSet<u64> = req.job_ids.iter().copied().collect();
        let want = |j: &Job| {
            (req.user.is_empty() || j.owner.user == req.user || j.owner.uid.to_string() == req.user)
                && (ids.is_empty() || ids.contains(&j.id.0))
                && (states.is_empty() || states.contains(&j.state))
        };
        // One consistent view: the active jobs are copied under the lock first, then the
        // finished ones are read from the store. A job ends by being written to the store
        // (finished) before it leaves memory, both under the lock, so a job missing from the
        // copy is already in the store; one that ends in between is in both, and the store's
        // (newer) record wins. Every job appears exactly once.
        let listing = ysched_common::convert::job_listing;
        let active: Vec<pb::JobInfo> = {
            let st = lock(&self.state);
            if ids.is_empty() {
                st.rec
                    .jobs
                    .values()
                    .filter(|j| want(j))
                    .map(listing)
                    .collect()
            } else {
                ids.iter()
                    .filter_map(|id| st.rec.jobs.get(&JobId(*id)))
                    .filter(|j| want(j))
                    .map(listing)
                    .collect()
            }
        };
        let finished: Vec<pb::JobInfo> = if !ids.is_empty() {
            // Asked by id: look each one up, never scan the history.
            let mut found = Vec::new();
            for id in &ids {
                if let Some(j) = self.store.job(JobId(*id))? {
                    if j.state.is_terminal() && want(&j) {
                        found.push(listing(&j));
                    }
                }
            }
            found
        } else if req.all || states.iter().any(|s| s.is_terminal()) {
            self.store
                .finished_jobs()?
                .iter()
                .filter(|j| want(j))
                .map(listing)
                .collect()
        } else {
            Vec::new()
        };
        if finished.is_empty() {
            return Ok(active);
        }
        // Both lists are in id order; a job that ended between the two reads is in both, and
        // its finished record (the newer one) is kept.
        let ended: BTreeSet<u64> = finished.iter().map(|j| j.id).collect();
        let mut merged = Vec::with_capacity(active.len() + finished.len());
        let mut active = active
            .into_iter()
            .filter(|j| !ended.contains(&j.id))
            .peekable();
        for done in finished {
            while let Some(j) = active.next_if(|j| j.id < done.id) {
                merged.push(j);
            }
            merged.push(done);
        }
        merged.extend(active);
        Ok(merged)
    }

    fn find_job(&self, id: JobId) -> ApiResult<Job> {
        if let Some(j) = lock(&self.state).rec.jobs.get(&id) {
            return Ok(j.clone());
        }
        self.store
            .job(id)?
            .ok_or_else(|| ApiError::NotFound(format!("invalid job id {id}: no such job")))
    }

    pub fn job_info(&self, id: JobId) -> ApiResult<pb::JobInfo> {
        Ok((&self.find_job(id)?).into())
    }

    pub fn job_detail(&self, id: JobId) -> ApiResult<pb::JobDetail> {
        let job = self.find_job(id)?;
        let mut info = pb::JobInfo::from(&job);
        if job.state == JobState::Pending {
            // Replaying the queue ahead of the job takes as long as a pass: not under the lock.
            let (jobs, nodes) = self.core_view();
            let snap = Snapshot {
                jobs: &jobs,
                nodes: &nodes,
            };
            let why = core::explain(&job, &snap, &self.policy(), now_ms());
            let lines: Vec<String> = why.into_iter().map(|(n, w)| format!("{n}: {w}")).collect();
            if !lines.is_empty() {
                info.reason = format!("{} [{}]", info.reason, lines.join("; "));
            }
        }
        Ok(pb::JobDetail {
            job: Some(info),
            events: self.store.events(id)?.iter().map(Into::into).collect(),
        })
    }

    /// A copy of what the scheduling core looks at: pending jobs, jobs holding resources, and
    /// the nodes (held jobs can be most of a queue: copying them would be wasted time under
    /// the lock).
    fn core_view(&self) -> (BTreeMap<JobId, Job>, BTreeMap<String, Node>) {
        let st = lock(&self.state);
        let jobs = st
            .rec
            .jobs
            .iter()
            .filter(|(_, j)| j.state == JobState::Pending || j.state.holds_resources())
            .map(|(id, j)| (*id, j.clone()))
            .collect();
        (jobs, st.rec.nodes.clone())
    }

    fn policy(&self) -> Policy<'_> {
        Policy {
            tiers: &self.config.tiers,
        }
    }

    /// Runs one event under the lock. Its batch is written first; only when that succeeded
    /// do its records reach memory and its commands the outbox (they leave after the next
    /// flush). A refused write returns the error and changes nothing.
    fn run_event<T>(
        &self,
        event: impl FnOnce(&Records) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<(Vec<JobId>, bool, T)> {
        let mut st = lock(&self.state);
        let (mut effects, out) = event(&st.rec)?;
        if !effects.batch.is_empty() {
            // After the request's own checks, so bad input is refused for what it is.
            self.store.check_room()?;
            self.store.apply(std::mem::take(&mut effects.batch))?;
        }
        let done = st.rec.commit(effects);
        if !done.commands.is_empty() {
            st.outbox.extend(done.commands);
            let _ = self.flush_tx.send(None);
        }
        Ok((done.changed, done.wake, out))
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

    /// Cancels jobs (see [`Records::cancel`]).
    pub async fn cancel(&self, caller: &Owner, ids: &[u64], user: &str) -> ApiResult<Vec<JobId>> {
        let finished = |id: JobId| self.store.job(id).map_err(ApiError::from);
        let (changed, wake, cancelled) =
            self.run_event(|rec| rec.cancel(caller, ids, user, &finished, now_ms()))?;
        self.settle(changed, wake).await?;
        Ok(cancelled)
    }

    pub async fn hold(&self, caller: &Owner, id: JobId, hold: bool) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec| Ok((rec.hold(caller, id, hold, now_ms())?, ())))?;
        self.settle(changed, wake).await
    }

    pub fn audit_log(&self, caller: &Owner, limit: usize) -> ApiResult<Vec<AuditRecord>> {
        if !caller.is_root() {
            return Err(ApiError::Denied("only root may read the audit log".into()));
        }
        Ok(self.store.audit_log(limit)?)
    }

    pub fn list_nodes(&self) -> Vec<pb::NodeInfo> {
        let st = lock(&self.state);
        st.rec
            .nodes
            .values()
            .map(|n| node_info(n, &st.rec.jobs))
            .collect()
    }

    pub async fn drain(&self, caller: &Owner, name: &str, reason: Option<String>) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec| Ok((rec.drain(caller, name, reason, now_ms())?, ())))?;
        self.settle(changed, wake).await
    }

    // ------------------------------------------------------------------ agent sessions

    /// An agent (re)registered: record its inventory, reconcile the jobs it reports with ours,
    /// and answer with the jobs it must kill. Returns the session id.
    pub async fn register_node(
        &self,
        reg: Registration,
        peer: &str,
        tx: AgentTx,
    ) -> ApiResult<u64> {
        let name = reg.name.clone();
        if name.is_empty() {
            return Err(ApiError::Invalid(
                "agent registered without a node name".into(),
            ));
        }
        let (session_id, changed) = {
            let mut st = lock(&self.state);
            // Two agents under one name would take turns replacing each other's inventory
            // and failing each other's jobs: the first one connected keeps the name.
            if let Some(current) = st.sessions.get(&name).filter(|s| !s.tx.is_closed()) {
                let msg = format!(
                    "node name '{name}' is already in use by the agent connected from {}: \
                     refusing the agent from {peer} (give it another --name)",
                    current.peer
                );
                tracing::error!("{msg}");
                return Err(ApiError::AlreadyExists(msg));
            }
            let (mut effects, kill_jobs) = st.rec.register(&reg, self.limits(), now_ms());
            self.store.check_room()?;
            self.store.apply(std::mem::take(&mut effects.batch))?;
            if !kill_jobs.is_empty() {
                tracing::warn!(
                    node = %name,
                    "agent still runs jobs {kill_jobs:?} that ended here; it kills them, and \
                     the node takes no new job until they are gone"
                );
            }
            let done = st.rec.commit(effects);
            // First on the new session; what the registration decided follows after the
            // flush, through the outbox.
            let _ = tx.send(AgentCommand::Registered { kill_jobs });
            let session_id = st.next_session_id;
            st.next_session_id += 1;
            st.sessions.insert(
                name.clone(),
                Session {
                    id: session_id,
                    peer: peer.to_string(),
                    tx,
                },
            );
            st.outbox.extend(done.commands);
            let _ = self.flush_tx.send(None);
            (session_id, done.changed)
        };
        self.settle(changed, true).await?;
        let _ = ysched_common::sdnotify::notify("STATUS=node registered");
        Ok(session_id)
    }

    pub fn node_disconnected(&self, name: &str, session_id: u64) {
        let mut st = lock(&self.state);
        if st.sessions.get(name).is_some_and(|s| s.id == session_id) {
            st.sessions.remove(name);
            if let Some(n) = st.rec.nodes.get_mut(name) {
                n.connected = false;
            }
            tracing::warn!(node = name, "agent disconnected");
        }
    }

    /// An agent's heartbeat: it is alive, and leftover jobs it no longer lists are gone
    /// (in case their end reports were lost).
    pub fn heartbeat(&self, name: &str, running_jobs: &[u64]) {
        let mut st = lock(&self.state);
        let Some(n) = st.rec.nodes.get_mut(name) else {
            return;
        };
        n.last_seen = now_ms();
        let before = n.killing.len();
        n.killing.retain(|id| running_jobs.contains(id));
        if n.killing.len() != before && n.killing.is_empty() {
            drop(st);
            self.wake.notify_one();
        }
    }

    pub async fn job_started(&self, name: &str, job_id: u64, pid: u32, time: i64) -> ApiResult<()> {
        let (changed, _, ()) =
            self.run_event(|rec| Ok((rec.job_started(name, job_id, pid, time), ())))?;
        self.changed(changed);
        Ok(())
    }

    /// An agent reports a part's end (see [`Records::job_finished`]).
    pub async fn job_finished(&self, name: &str, end: PartEnd) -> ApiResult<()> {
        let limits = self.limits();
        let (changed, wake, ()) =
            self.run_event(|rec| Ok((rec.job_finished(name, &end, limits, now_ms()), ())))?;
        self.settle(changed, wake).await
    }

    fn limits(&self) -> Limits {
        Limits {
            max_requeues: self.config.scheduler.max_requeues,
            max_launch_attempts: self.config.scheduler.max_launch_attempts,
        }
    }

    // ------------------------------------------------------------------ scheduling

    /// Passes run on events (submit, job end, node join). Conditions that change with time
    /// alone (a victim passing its tier's `min_runtime`) are caught by a pass at least every
    /// `RECHECK`.
    async fn schedule_loop(self: Arc<Self>) {
        const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);
        let mut store_full: Option<String> = None;
        loop {
            if tokio::time::timeout(RECHECK, self.wake.notified())
                .await
                .is_err()
            {
                // A quiet second: hand memory freed after a burst of requests back to the OS
                // (glibc keeps it in its arenas otherwise, and RSS stays at the burst's peak).
                // SAFETY: malloc_trim only walks and shrinks the allocator's own free lists.
                #[cfg(target_env = "gnu")]
                unsafe {
                    libc::malloc_trim(0);
                }
            }
            let silent = self.fail_silent_nodes().await;
            let started = std::time::Instant::now();
            let res = self.schedule_once().await;
            let took = started.elapsed();
            let full = match (&silent, &res) {
                (Err(ApiError::Unavailable(m)), _) | (_, Err(ApiError::Unavailable(m))) => {
                    Some(m.clone())
                }
                _ => None,
            };
            // A full store pauses scheduling; say so once, and once when it is back.
            match (&full, &store_full) {
                (Some(m), None) => tracing::error!("scheduling paused: {m}"),
                (None, Some(_)) => tracing::warn!("state store writable again: scheduling resumed"),
                _ => {}
            }
            store_full = full;
            match &silent {
                Err(e) if store_full.is_none() => {
                    tracing::error!("node timeout check failed: {e:?}")
                }
                _ => {}
            }
            match res {
                Ok(changed) if !changed.is_empty() && self.commit().await.is_ok() => {
                    self.changed(changed)
                }
                Err(e) if store_full.is_none() => tracing::error!("scheduling pass failed: {e:?}"),
                _ => {}
            }
            // Under a burst of events, passes would run back to back and hold the state lock
            // most of the time. Resting as long as the pass took caps them at half the time;
            // on a small queue a pass takes microseconds, so an idle cluster still starts a job
            // at once. Events during the rest are not lost: `Notify` keeps one permit.
            tokio::time::sleep(took.min(std::time::Duration::from_millis(100))).await;
        }
    }

    /// Jobs on a node whose agent has been gone longer than `node_timeout_secs` end NODE_FAIL
    /// and release their GPUs. (If the agent comes back still running one, registration tells
    /// it to kill it: schedd no longer counts it as running.)
    async fn fail_silent_nodes(&self) -> ApiResult<()> {
        let timeout_ms = self.config.scheduler.node_timeout_secs as i64 * 1000;
        let now = now_ms();
        let (changed, wake, ()) = self.run_event(|rec| {
            let silent: BTreeSet<String> = rec
                .nodes
                .values()
                .filter(|n| !n.connected && now - n.last_seen.max(self.started) > timeout_ms)
                .map(|n| n.name.clone())
                .collect();
            Ok((rec.fail_silent(&silent, now), ()))
        })?;
        if changed.is_empty() {
            return Ok(());
        }
        self.settle(changed, wake).await
    }

    /// Runs the core on a copy of the records, without the lock (requests are answered while
    /// it runs), then applies what of its plan still holds. Returns the jobs whose state
    /// changed.
    pub async fn schedule_once(self: &Arc<Self>) -> ApiResult<Vec<JobId>> {
        let now = now_ms();
        let (jobs, nodes) = self.core_view();
        let tiers = self.config.tiers.clone();
        let plan = tokio::task::spawn_blocking(move || {
            let snap = Snapshot {
                jobs: &jobs,
                nodes: &nodes,
            };
            core::schedule(&snap, &Policy { tiers: &tiers }, now)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("scheduling pass failed: {e}")))?;
        let payload = |id: JobId| match self.store.payload(id) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                tracing::error!(job = %id, "cannot read job payload: {e}");
                None
            }
        };
        let mut stale = false;
        let (changed, _, ()) = self.run_event(|rec| {
            let (plan, dropped) = rec.still_valid(plan);
            stale = dropped;
            Ok((rec.apply_plan(&plan, &payload, now_ms()), ()))
        })?;
        if stale {
            // Some decisions no longer held: decide again with what is true now.
            self.wake.notify_one();
        }
        Ok(changed)
    }
}

/// What `yctl nodes` shows: derived state and the job holding each GPU.
fn node_info(n: &Node, jobs: &BTreeMap<JobId, Job>) -> pb::NodeInfo {
    let mut holders = vec![0u64; n.gpus.len()];
    let (mut cpus_alloc, mut mem_alloc, mut n_jobs) = (0u32, 0u64, 0);
    for j in jobs.values().filter(|j| j.state.holds_resources()) {
        for a in j.alloc.iter().filter(|a| a.node == n.name) {
            n_jobs += 1;
            cpus_alloc += a.cpus;
            mem_alloc += a.mem_mib;
            for g in &a.gpus {
                if let Some(pos) = n.gpus.iter().position(|x| x.index == *g) {
                    holders[pos] = j.id.0;
                }
            }
        }
    }
    let busy_gpus = holders.iter().filter(|h| **h != 0).count();
    let state = if !n.connected {
        "DOWN"
    } else if n.drain_reason.is_some() {
        if n_jobs > 0 {
            "DRAINING"
        } else {
            "DRAINED"
        }
    } else if n_jobs == 0 {
        "IDLE"
    } else if (n.gpus.is_empty() && cpus_alloc >= n.cpus)
        || (!n.gpus.is_empty() && busy_gpus == n.gpus.len())
    {
        "ALLOCATED"
    } else {
        "MIXED"
    };
    pb::NodeInfo {
        name: n.name.clone(),
        state: state.into(),
        address: n.address.clone(),
        cpus: n.cpus,
        mem_mib: n.mem_mib,
        gpus: n.gpus.iter().map(Into::into).collect(),
        gpu_holders: holders,
        reason: n.drain_reason.clone().unwrap_or_default(),
        cpus_alloc,
        mem_alloc_mib: mem_alloc,
        features: n.features.clone(),
        last_seen_ms: n.last_seen,
    }
}
