//! Agent sessions: registration (one agent per node name), heartbeats, starts and ends.

use super::{lock, AgentTx, Cluster, RelaySession, State, WallClock};
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::metrics::preempted_checkpoint_saves;
use crate::state::agent_events::AgentReport;
use crate::state::agent_events::Registration;
use crate::state::commands::AgentCommand;
use crate::state::gpu_health::GpuReport;
use crate::state::reactor;
use crate::state::HeartbeatSeen;
use crate::state::Records;
use crate::store;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::mpsc;
use ysched_common::time::now_ms;
use ysched_common::time::Millis;
use ysched_common::JobId;
use ysched_common::Node;

/// The GPUs `after` has out of service for a failure that `before` (the node's previous
/// record, if any) had not, with their faults: for the log and the failure counter.
fn newly_failed(before: Option<&Node>, after: &Node) -> Vec<(u32, String)> {
    after
        .gpus_out_of_service
        .iter()
        .filter(|(index, outage)| {
            outage.failed()
                && !before.is_some_and(|b| {
                    b.gpus_out_of_service
                        .get(index)
                        .is_some_and(|o| o.failed() && o.since == outage.since)
                })
        })
        .map(|(index, outage)| (*index, outage.reason.clone()))
        .collect()
}

/// A registering host's certificate is still taken (not revoked, not replaced by a newer
/// enrolment): checked under the lock that a revocation's end of the session takes too.
fn still_taken(st: &State, identity: Option<&ysched_common::tls::HostIdentity>) -> ApiResult<()> {
    match identity {
        Some(identity) => st.rec.check_certificate(identity).map_err(ApiError::Denied),
        None => Ok(()),
    }
}

impl Cluster {
    /// An agent (re)registered: record its inventory, reconcile the jobs it reports with ours,
    /// and answer with the jobs it must kill. Returns the session id. With the `identity` of
    /// its certificate, which is checked again under the lock (a revocation may have come
    /// since the connection was admitted).
    pub async fn register_node(
        &self,
        reg: Registration,
        peer: &str,
        tx: AgentTx,
        identity: Option<&ysched_common::tls::HostIdentity>,
    ) -> ApiResult<u64> {
        let name = reg.name.clone();
        if name.is_empty() {
            return Err(ApiError::Invalid(
                "agent registered without a node name".into(),
            ));
        }
        // Node names are shown in every listing, as users' names are.
        ysched_common::limits::NODE_NAME
            .check_len(&name)
            .and_then(|()| ysched_common::text::check_printable("node name", &name))
            .map_err(ApiError::Invalid)?;
        if reg.login {
            return self.register_login(&reg, peer, tx, identity);
        }
        let limits = self.limits();
        let (session_id, changed) = {
            let mut st = lock(&self.state);
            still_taken(&st, identity)?;
            st.sessions.name_free(&name, peer)?;
            let done = st.run(self, store::Room::Cluster, &WallClock, |rec, now| {
                let (effects, kill_jobs) = rec.register(&reg, limits, now);
                let failed = effects
                    .nodes
                    .iter()
                    .find(|n| n.name == name)
                    .map_or_else(Vec::new, |after| {
                        newly_failed(rec.nodes().get(&name), after)
                    });
                Ok((effects, (kill_jobs, failed)))
            })?;
            let (kill_jobs, failed) = done.out;
            self.gpus_failed(&name, &failed);
            if !kill_jobs.is_empty() {
                tracing::warn!(
                    node = %name,
                    "agent still runs jobs {kill_jobs:?} that ended here; it kills them, and \
                     the node takes no new job until they are gone"
                );
            }
            // First on the new session; what the registration decided follows after the
            // flush, through the outbox (which the lock keeps from leaving before this).
            let registered = tx.clone();
            let (session_id, relay_token) = st.sessions.open(&name, peer, tx, false)?;
            let _ = registered.send(AgentCommand::Registered {
                kill_jobs,
                relay_token,
            });
            (session_id, done.changed)
        };
        self.settle(changed, true).await?;
        let _ = ysched_common::sdnotify::notify("STATUS=node registered");
        Ok(session_id)
    }

    /// A login agent registered: it keeps a session (for the requests it relays) and is no
    /// node: nothing is placed there and it appears in no node listing.
    fn register_login(
        &self,
        reg: &Registration,
        peer: &str,
        tx: AgentTx,
        identity: Option<&ysched_common::tls::HostIdentity>,
    ) -> ApiResult<u64> {
        let name = &reg.name;
        let mut st = lock(&self.state);
        still_taken(&st, identity)?;
        st.sessions.name_free(name, peer)?;
        if st.rec.nodes().contains_key(name) {
            let msg = format!(
                "'{name}' is the name of a compute node: refusing it for the login agent from \
                 {peer} (give it another --name)"
            );
            tracing::error!("{msg}");
            return Err(ApiError::AlreadyExists(msg));
        }
        let registered = tx.clone();
        let (session_id, relay_token) = st.sessions.open(name, peer, tx, true)?;
        let _ = registered.send(AgentCommand::Registered {
            kill_jobs: reg.running_jobs.clone(),
            relay_token,
        });
        tracing::info!(node = %name, "login agent registered from {peer}");
        Ok(session_id)
    }

    /// `node`'s live agent session, if `peer` is its connection: requests relayed for that
    /// node may come there (agents older than the relay token send them there).
    pub fn session_on_peer(&self, node: &str, peer: &str) -> Option<RelaySession> {
        lock(&self.state).sessions.on_peer(node, peer)
    }

    /// `node`'s live agent session, if `token` is its relay token: a request relayed for
    /// that node carrying it comes from that agent, on whatever connection.
    pub fn relay_session(&self, node: &str, token: &[u8]) -> Option<RelaySession> {
        lock(&self.state).sessions.with_token(node, token)
    }

    /// Whether job `id` holds resources on `node` now (starting, running or being stopped
    /// there), as user `uid`'s: what lets a compute node relay that user.
    pub fn runs_on_as(&self, id: JobId, node: &str, uid: u32) -> bool {
        let st = lock(&self.state);
        st.rec.jobs().get(&id).is_some_and(|job| {
            job.owner.uid == uid
                && job.state.holds_resources()
                && job.alloc.iter().any(|a| a.node == node)
        })
    }

    pub fn node_disconnected(&self, name: &str, session_id: u64) {
        let mut st = lock(&self.state);
        if let Some(session) = st.sessions.close(name, Some(session_id)) {
            if session.login {
                tracing::info!(node = name, "login agent disconnected");
                return;
            }
            st.rec.node_disconnected(name);
            tracing::warn!(node = name, "agent disconnected");
        }
    }

    /// An agent's heartbeat: it is alive, leftover jobs it no longer lists are gone (in case
    /// their end reports were lost), and its jobs' newest checkpoint times (`(job id, ms)`,
    /// see [`Records::note_checkpoints`]: memory only, no store write).
    ///
    /// Every heartbeat is answered (`seq`), from the session it came on: the agent renews its
    /// fence lease from it. It is answered after `last_seen` moved, so a node's fence never
    /// runs later than `last_seen` plus its `fence_after_secs`.
    ///
    /// `unhealthy`: why the node cannot take jobs, if it cannot; a change drains or resumes
    /// it (see [`Records::node_health`]), written before the next message of the session
    /// is read: the end of a launch that failed for it comes after it.
    ///
    /// `gpus`: its GPUs' health; a GPU newly failing goes out of service and the jobs on it
    /// are stopped, and a forget it confirms is recorded (see [`Records::gpu_report`]),
    /// likewise before the next message is read.
    #[allow(clippy::too_many_arguments)]
    pub fn heartbeat(
        &self,
        name: &str,
        session_id: u64,
        seq: u64,
        running_jobs: &[u64],
        checkpoints: &[(u64, Millis)],
        unhealthy: Option<&str>,
        gpus: &GpuReport,
    ) {
        let now = now_ms();
        let seen = {
            let mut st = lock(&self.state);
            let st = &mut *st;
            if !st.sessions.is_current(name, session_id) {
                return; // an old session's heartbeat: its connection is on its way out
            }
            let seen = st
                .rec
                .heartbeat(name, running_jobs, checkpoints, unhealthy, gpus, now);
            // After `last_seen` moved (see above). A replica that leads without a majority
            // behind it lately renews no lease: fences follow the quorum, not one process.
            if self.durability.may_renew_fences() {
                st.sessions.send(name, AgentCommand::HeartbeatAck { seq });
            }
            match seen {
                Some(seen) => seen,
                None => return,
            }
        };
        let HeartbeatSeen {
            freed,
            health_changes,
            gpu_changes,
            refused_checkpoints: refused,
        } = seen;
        if freed {
            self.wake.notify_one();
        }
        if gpu_changes {
            self.gpu_report(name, session_id, gpus, now);
        }
        if health_changes {
            // At the heartbeat's time, as the rest of what it said.
            let at = reactor::At(now);
            match self.run_event_in(store::Room::Cluster, &at, |rec, now| {
                Ok((rec.node_health(name, unhealthy, now), ()))
            }) {
                Ok((changed, wake, ())) => {
                    match unhealthy {
                        Some(why) => tracing::warn!(node = name, "drained by its agent: {why}"),
                        None => tracing::warn!(node = name, "resumed by its agent"),
                    }
                    self.settle_report(changed, wake);
                }
                // Said again with the next heartbeat.
                Err(e) => tracing::debug!(node = name, "cannot record the node's health: {e}"),
            }
        }
        if let Some((job_id, time)) = refused.first() {
            use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
            // A node with a broken clock would say it with every heartbeat: once a minute.
            static LAST_WARNED: AtomicI64 = AtomicI64::new(0);
            let last = LAST_WARNED.load(Relaxed);
            if now - last >= 60_000
                && LAST_WARNED
                    .compare_exchange(last, now, Relaxed, Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    node = name,
                    "ignoring checkpoint times that cannot be right (job {job_id}: {time} ms \
                     since the epoch, now {now}; {} in this heartbeat): is the node's clock \
                     set? (said at most once a minute)",
                    refused.len()
                );
            }
        }
    }

    /// A node's word on its GPUs that changes something (see [`Records::gpu_report`]). If the
    /// store refuses it, the session ends: the agent registers again, reporting its faults,
    /// and is asked again to forget those of GPUs returned to service (whose confirmation
    /// this report carried).
    fn gpu_report(&self, name: &str, session_id: u64, gpus: &GpuReport, now: Millis) {
        let limits = self.limits();
        let outcome = self.run_event_in(store::Room::Cluster, &reactor::At(now), |rec, now| {
            let effects = rec.gpu_report(name, gpus, limits, now);
            let failed = effects
                .nodes
                .iter()
                .find(|n| n.name == name)
                .map_or_else(Vec::new, |after| newly_failed(rec.nodes().get(name), after));
            Ok((effects, failed))
        });
        match outcome {
            Ok((changed, wake, failed)) => {
                self.gpus_failed(name, &failed);
                self.settle_report(changed, wake);
                // Resumes waiting for this node's word (see `resume_gpus`).
                self.gpu_reports.notify_waiters();
            }
            Err(e) => {
                tracing::warn!(
                    node = name,
                    "cannot record the health of its GPUs: {e}; ending the session"
                );
                self.end_session(name, session_id);
            }
        }
    }

    /// GPUs of `node` that went out of service for a failure: logged and counted.
    fn gpus_failed(&self, node: &str, failed: &[(u32, String)]) {
        for (index, fault) in failed {
            tracing::warn!(
                node,
                "GPU {index} failed: {fault}; out of service until `yctl resume {node} --gpu \
                 {index}`"
            );
        }
        self.metrics.gpus_failed(node, failed.len());
    }

    /// An agent's report of a start or an end, from its session `session_id`. Reports are
    /// applied in arrival order, those that arrived together as one event with one store
    /// write (see [`Records::agent_reports`]); nobody waits for them: what must wait for the
    /// write to be durable (the acknowledgement, launches and stops it leads to) leaves
    /// through the outbox after the flush, and until then the agent keeps the report.
    pub fn report(&self, node: &str, session_id: u64, report: AgentReport) {
        let _ = self.reports_tx.send((node.to_string(), session_id, report));
    }

    pub(super) async fn report_loop(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<(String, u64, AgentReport)>,
    ) {
        /// Enough to take what a thousand agents send in a moment, small enough that one
        /// event stays short under the lock.
        const MOST_AT_ONCE: usize = 2048;
        let mut arrived = Vec::with_capacity(MOST_AT_ONCE);
        while rx.recv_many(&mut arrived, MOST_AT_ONCE).await > 0 {
            let mut sessions: Vec<(String, u64)> = Vec::with_capacity(arrived.len());
            let mut reports: Vec<(String, AgentReport)> = Vec::with_capacity(arrived.len());
            for (node, session, report) in arrived.drain(..) {
                sessions.push((node.clone(), session));
                reports.push((node, report));
            }
            let limits = self.limits();
            let event = |rec: &Records, now| {
                let effects = rec.agent_reports(&reports, limits, now);
                let saves = preempted_checkpoint_saves(rec.jobs(), &effects.jobs, &reports);
                let answered = !effects.commands.is_empty();
                Ok((effects, (saves, answered)))
            };
            // Starts alone are answered by nothing: their change may wait for the next write
            // or flush (see `Unwritten`), instead of a store transaction of their own.
            let starts_only = reports
                .iter()
                .all(|(_, report)| matches!(report, AgentReport::Started { .. }));
            let applied = if starts_only {
                self.run_held_event(event)
            } else {
                self.run_cluster_event(event)
            };
            ysched_common::stamp::stamp("d.reports_applied", reports.len() as u64);
            match applied {
                Ok((changed, wake, (saves, answered))) => {
                    self.metrics.checkpoints_saved(&saves);
                    if wake {
                        self.wake.notify_one();
                    }
                    self.changed_when_durable(changed);
                    // Reports that only say jobs started are answered by nothing: their
                    // change becomes durable with the next flush, whoever asks for it (a
                    // launch or a stop they lead to leaves after the pass's own flush). An
                    // end is acknowledged after the flush that covers it (the outbox asked
                    // for it); the next batch is taken once that flush is done, so that what
                    // arrives meanwhile is one event, one store write, one flush and one
                    // scheduling pass, however many agents report. Nothing waits longer for
                    // it: the acknowledgements leave after this flush in any case.
                    if answered {
                        let _ = self.request_flush().await;
                    }
                }
                // The store cannot take the reports now: end the sessions they came on, so
                // that their agents register again (resending what they have not had
                // acknowledged) and are let in once the store takes writes again.
                Err(e) => {
                    let mut ended = BTreeSet::new();
                    for (node, session) in sessions {
                        if ended.insert(node.clone()) {
                            tracing::warn!(node = %node, "agent report refused: {e}; ending the session");
                            self.end_session(&node, session);
                        }
                    }
                }
            }
        }
    }

    /// Ends the session of a node gone silent while its connection stayed open (a hung
    /// agent): it is DOWN until it registers again.
    pub(super) fn end_silent_session(&self, name: &str) {
        let mut st = lock(&self.state);
        if st.rec.node_disconnected(name) {
            st.sessions.close(name, None);
            tracing::warn!(
                node = name,
                "no heartbeat for scheduler.node_timeout_secs: session ended"
            );
        }
    }

    /// Ends an agent's session from our side: it sees its command stream end and connects
    /// again.
    fn end_session(&self, name: &str, session_id: u64) {
        let mut st = lock(&self.state);
        if st.sessions.close(name, Some(session_id)).is_some() {
            st.rec.node_disconnected(name);
        }
    }
}
