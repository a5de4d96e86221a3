//! The agent's session with schedd, kept up (and re-established) while noded runs.
//!
//! It registers, then streams both ways (launch/stop/ack in, job events and heartbeats out),
//! and reconnects with backoff whenever the stream fails. Jobs keep running while disconnected;
//! their ends are kept in the spool and reported at the next registration.
//!
//! schedd answers the registration and every heartbeat (numbered from 1 in each session)
//! with an acknowledgement; each one renews the node's fence lease from the time the agent
//! *sent* what it acknowledges (see [`crate::launch::lease`]), so that the jobs stop on their
//! own, under the node's supervisor, once schedd has not heard from this node for
//! `node.fence_after_secs`.
//!
//! While registered, the session's [`RelayLink`] is in a [`SessionSlot`], where the client
//! socket's relay (see [`crate::relay`]) finds it: relayed requests go on a connection of
//! their own, with the session's relay token.
//!
//! The waits between attempts to reconnect are randomized (each between half and all of the
//! backoff), so that the agents of a cluster do not all come back in the same instant after
//! a schedd restart.

mod heartbeat;
mod messages;
mod reconnect;

use crate::credential::HostCredential;
use crate::gpu_watch::GpuWatch;
use crate::launch::lease::{boottime_ms, LeaseKeeper};
use crate::launch::{JobEvent, JobParams, Launcher};
use crate::relay::{RelayLink, SessionSlot};
use heartbeat::{CheckpointScan, CheckpointWatch, HeartbeatLog};
use reconnect::{jitter_seed, jittered, tls_refusal, with_sources};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Endpoint;
use ysched_proto as pb;
use ysched_proto::agent_message::Msg as AgentMsg;
use ysched_proto::node_agent_client::NodeAgentClient;
use ysched_proto::scheduler_message::Msg as SchedulerMsg;

const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);
/// The HTTP/2 windows of the connections to schedd (the session's, and the one relayed
/// requests take): a listing of 10,000 jobs comes back in one go.
const WINDOW: u32 = 16 * 1024 * 1024;

/// Who this agent is and what its host has, as reported at registration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub name: String,
    /// Where multi-node peers reach this host.
    pub address: String,
    /// schedd's agent endpoint, `host:port`.
    pub schedd: String,
    /// With schedd's replicas (`scheduler.replicas`): all of their agent endpoints. The agent
    /// registers with the one that leads: a replica that does not lead names the leader, and
    /// the agent goes there (or tries the next). Empty: only `schedd`.
    pub replicas: Vec<String>,
    /// This host's certificate, or the shared cluster key (see [`crate::credential`]).
    pub credential: HostCredential,
    /// The cluster CA certificate (PEM): schedd must present a certificate it signed before
    /// anything, the cluster key included, is sent.
    pub ca_cert_pem: String,
    /// Where the CA came from, for messages.
    pub ca_cert_path: String,
    /// Largest message accepted from schedd (above any launch a submit can produce).
    pub max_message_bytes: usize,
    pub heartbeat: Duration,
    pub cpus: u32,
    pub mem_mib: u64,
    pub gpus: Vec<pb::Gpu>,
    pub features: Vec<String>,
    /// `compute` or `login` (`ysched_common::config::ROLE_*`), as registered.
    pub role: String,
    /// `node.fence_after_secs`: the lease this agent keeps for its jobs; 0: they are never
    /// fenced (nor on a login node, which has none).
    pub fence_after_secs: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the cluster key cannot be sent as a header (it must be printable ASCII)")]
    BadClusterKey,
    #[error("bad schedd address {0:?}: {1}")]
    BadAddress(String, tonic::transport::Error),
    #[error("cannot use the cluster CA {0}: {1}")]
    BadCa(String, tonic::transport::Error),
    #[error("cannot write the fence lease {0}: {1}")]
    Lease(String, std::io::Error),
}

/// Why one session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot connect: {}", with_sources(.0))]
    Connect(#[from] tonic::transport::Error),
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    #[error("schedd closed the session")]
    Closed,
    #[error("protocol error: {0}")]
    Protocol(String),
}

pub struct Agent {
    config: AgentConfig,
    /// Where schedd may be: `schedd`, or each replica (see [`AgentConfig::replicas`]).
    endpoints: Vec<(String, Endpoint)>,
    /// The one the agent talks to now.
    current: usize,
    /// The cluster key as a header, on a host that has one; `None`: not sent.
    authorization: Option<MetadataValue<Ascii>>,
    launcher: Launcher,
    events: mpsc::UnboundedReceiver<JobEvent>,
    told_systemd: bool,
    checkpoints: CheckpointWatch,
    lease: LeaseKeeper,
    /// This session's heartbeats that schedd has not acknowledged yet.
    beats: HeartbeatLog,
    /// The registered session's relay link, for the client socket's relay.
    session_slot: SessionSlot,
    /// State of the random numbers that spread reconnections.
    jitter: u64,
    /// The GPU health thread (see [`crate::gpu_watch`]); `None` on a login node (it has no
    /// GPU) and where the agent was built without one.
    gpu_watch: Option<GpuWatch>,
    /// GPUs schedd said were returned to service, on an agent without a health thread: their
    /// forget is confirmed at once in the next heartbeat (there was nothing to forget).
    forgotten_unwatched: Vec<u32>,
}

impl Agent {
    pub fn new(
        config: AgentConfig,
        launcher: Launcher,
        events: mpsc::UnboundedReceiver<JobEvent>,
    ) -> Result<Agent, AgentError> {
        let authorization = config
            .credential
            .cluster_key
            .as_ref()
            .map(|key| format!("Bearer {key}").parse())
            .transpose()
            .map_err(|_| AgentError::BadClusterKey)?;
        let mut addresses = config.replicas.clone();
        if addresses.is_empty() {
            addresses.push(config.schedd.clone());
        }
        let current = addresses
            .iter()
            .position(|a| *a == config.schedd)
            .unwrap_or(0);
        let endpoints = addresses
            .into_iter()
            .map(|addr| Ok((addr.clone(), schedd_endpoint(&config, &addr)?)))
            .collect::<Result<Vec<_>, AgentError>>()?;
        let lease_path = launcher.lease_path();
        let lease = LeaseKeeper::new(lease_path.clone(), config.fence_after_secs)
            .map_err(|e| AgentError::Lease(lease_path.display().to_string(), e))?;
        Ok(Agent {
            config,
            endpoints,
            current,
            authorization,
            launcher,
            events,
            told_systemd: false,
            checkpoints: CheckpointWatch::default(),
            lease,
            beats: HeartbeatLog::default(),
            session_slot: SessionSlot::default(),
            jitter: jitter_seed(),
            gpu_watch: None,
            forgotten_unwatched: Vec::new(),
        })
    }

    /// The agent with a GPU health thread: its findings go to schedd in the registration and
    /// the heartbeats, and it forgets the faults of GPUs schedd says were returned to service.
    pub fn with_gpu_watch(mut self, watch: GpuWatch) -> Agent {
        self.gpu_watch = Some(watch);
        self
    }

    /// Where the registered session's relay link is kept, for the client socket's relay.
    pub fn session_slot(&self) -> SessionSlot {
        self.session_slot.clone()
    }

    /// Keeps a session with schedd forever, reconnecting with exponential backoff
    /// (100 ms doubling up to 5 s, reset after each successful registration), each wait
    /// randomly between half and all of it.
    pub async fn run(mut self) {
        let mut retry = FIRST_RETRY;
        let mut was_connected = true;
        loop {
            let mut registered = false;
            let result = self.session(&mut registered).await;
            self.session_slot.clear();
            if registered {
                retry = FIRST_RETRY;
                was_connected = true;
            }
            let schedd = self.schedd().to_string();
            let moved = self.follow_leader(&result);
            match result {
                Ok(()) => {}
                // The first failure after a working session (or at start) is news; repeated
                // failures while schedd is down are not.
                // A peer that fails TLS verification is not schedd (or not this cluster's):
                // always worth an error line, since nothing was sent to it.
                Err(SessionError::Connect(e)) if tls_refusal(&e).is_some() => {
                    let why = tls_refusal(&e).unwrap_or_default();
                    tracing::error!(
                        "refusing schedd at {schedd}: {why}; nothing was sent to it (no \
                         cluster key, no request; cluster CA: {}). Retrying.",
                        self.config.ca_cert_path
                    )
                }
                // schedd refused this agent (another agent holds its name, a wrong key): an
                // admin must act, so say it every time.
                Err(SessionError::Status(status))
                    if matches!(
                        status.code(),
                        tonic::Code::AlreadyExists
                            | tonic::Code::Unauthenticated
                            | tonic::Code::PermissionDenied
                    ) =>
                {
                    tracing::error!(
                        "schedd at {schedd} refused this agent: {}; retrying",
                        status.message()
                    )
                }
                Err(e) if was_connected => {
                    tracing::warn!("session with schedd at {schedd} ended: {e}; retrying")
                }
                Err(e) => tracing::debug!("session with schedd at {schedd}: {e}"),
            }
            was_connected = false;
            if moved {
                // Told where the leader is: go there at once.
                retry = FIRST_RETRY;
            }
            tokio::time::sleep(jittered(retry, &mut self.jitter)).await;
            retry = (retry * 2).min(MAX_RETRY);
        }
    }

    /// The schedd endpoint the agent talks to now.
    fn schedd(&self) -> &str {
        &self.endpoints[self.current].0
    }

    /// After a session with one of schedd's replicas ended: on to the leader it named, or to
    /// the next replica. Whether it named one.
    fn follow_leader(&mut self, result: &Result<(), SessionError>) -> bool {
        if self.endpoints.len() < 2 {
            return false;
        }
        let named = match result {
            Err(SessionError::Status(s)) if s.code() == tonic::Code::Unavailable => {
                leader_named(s.message())
                    .and_then(|leader| self.endpoints.iter().position(|(addr, _)| addr == leader))
            }
            _ => None,
        };
        self.current = named.unwrap_or((self.current + 1) % self.endpoints.len());
        named.is_some()
    }

    async fn session(&mut self, registered: &mut bool) -> Result<(), SessionError> {
        let endpoint = self.endpoints[self.current].1.clone();
        let channel = endpoint.connect().await?;
        let mut client = NodeAgentClient::new(channel.clone())
            .max_decoding_message_size(self.config.max_message_bytes)
            .max_encoding_message_size(self.config.max_message_bytes);
        let (outbox, outgoing) = mpsc::channel::<pb::AgentMessage>(256);

        // Events queued while disconnected are stale: the registration below carries the
        // running jobs and every unacknowledged end from the spool. Drained first, so an
        // event that happens meanwhile is sent afterwards (at worst twice, never lost).
        while self.events.try_recv().is_ok() {}
        if let Some(watch) = self.gpu_watch.as_mut() {
            watch.catch_up();
        }
        let register = self.registration();
        let (running, finished) = (register.running_jobs.len(), register.finished.len());
        self.beats = HeartbeatLog::default();
        // Taken before it goes out: the lease counts from no later than the real sending.
        let register_sent = boottime_ms();
        send(&outbox, AgentMsg::Register(register)).await?;

        let mut request = tonic::Request::new(ReceiverStream::new(outgoing));
        if let Some(authorization) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", authorization.clone());
        }
        let mut inbound = client.session(request).await?.into_inner();

        match inbound.message().await?.and_then(|m| m.msg) {
            Some(SchedulerMsg::Registered(registered_reply)) => {
                *registered = true;
                self.lease.renew(register_sent);
                // Relayed requests get a connection of their own (opened at the first one),
                // so that none of them can stall or break the session's; a schedd without
                // relay tokens believes them only on the session's connection.
                let token = registered_reply.relay_token;
                let relay_channel = if token.is_empty() {
                    channel.clone()
                } else {
                    endpoint.connect_lazy()
                };
                self.session_slot.set(RelayLink {
                    channel: relay_channel,
                    token,
                });
                tracing::info!(
                    "registered with schedd at {} ({running} running, {finished} ended jobs reported)",
                    self.schedd()
                );
                self.notify_systemd_once();
                for job_id in registered_reply.kill_jobs {
                    tracing::warn!("job {job_id}: schedd does not know it, killing it");
                    self.launcher.kill(job_id);
                }
            }
            Some(other) => {
                return Err(SessionError::Protocol(format!(
                    "expected Registered first, got {other:?}"
                )))
            }
            None => return Err(SessionError::Closed),
        }

        let mut heartbeat =
            tokio::time::interval(self.config.heartbeat.max(Duration::from_secs(1)));
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await; // the first tick is immediate; registration just said it all

        // A new schedd knows of no checkpoint: the first scan's results go out when it ends.
        self.checkpoints.new_session();
        let mut scan: Option<CheckpointScan> = None;
        self.checkpoints.start_scan(&self.launcher, &mut scan);
        let mut health_check: Option<JoinHandle<()>> = None;
        loop {
            tokio::select! {
                message = inbound.message() => match message? {
                    Some(message) => {
                        if self.handle(message) {
                            let beat = self.heartbeat();
                            send(&outbox, AgentMsg::Heartbeat(beat)).await?;
                        }
                    }
                    None => return Err(SessionError::Closed),
                },
                news = async {
                    match self.gpu_watch.as_mut() {
                        Some(watch) => watch.next().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let worth_a_beat = self
                        .gpu_watch
                        .as_mut()
                        .is_some_and(|watch| watch.take(news));
                    if worth_a_beat {
                        // At once: schedd stops the jobs on a failing GPU.
                        let beat = self.heartbeat();
                        send(&outbox, AgentMsg::Heartbeat(beat)).await?;
                    }
                }
                Some(event) = self.events.recv() => {
                    for message in self.messages(event) {
                        send(&outbox, message).await?;
                    }
                }
                _ = heartbeat.tick() => {
                    let beat = self.heartbeat();
                    send(&outbox, AgentMsg::Heartbeat(beat)).await?;
                    self.checkpoints.start_scan(&self.launcher, &mut scan);
                    self.start_health_check(&mut health_check);
                }
                _ = async {
                    match health_check.as_mut() {
                        Some(running) => { let _ = running.await; }
                        None => std::future::pending().await,
                    }
                }, if health_check.is_some() => {
                    // A change was sent as its event (see above).
                    health_check = None;
                }
                done = async {
                    match scan.as_mut() {
                        Some(running) => running.await,
                        None => std::future::pending().await,
                    }
                }, if scan.is_some() => {
                    scan = None;
                    let news = match done {
                        Ok(found) => self.checkpoints.take(found),
                        Err(e) => {
                            tracing::warn!("checkpoint scan failed: {e}");
                            false
                        }
                    };
                    if news {
                        let beat = self.heartbeat();
                        send(&outbox, AgentMsg::Heartbeat(beat)).await?;
                    }
                }
            }
        }
    }

    /// `first` and the job events already queued behind it, as the messages that tell them
    /// (see [`messages::job_messages`]).
    fn messages(&mut self, first: JobEvent) -> Vec<AgentMsg> {
        /// Enough to empty the queue of a busy node, few enough to send without delay.
        const MOST_AT_ONCE: usize = 256;
        let mut events = vec![first];
        while events.len() < MOST_AT_ONCE {
            match self.events.try_recv() {
                Ok(event) => events.push(event),
                Err(_) => break,
            }
        }
        for event in &events {
            if let JobEvent::Finished(finished) = event {
                ysched_common::stamp::stamp("n.finished_out", finished.job_id);
            }
        }
        messages::job_messages(events, || self.heartbeat())
    }

    /// The next heartbeat of this session, numbered and remembered as sent now, with why
    /// the node cannot take jobs, if it cannot.
    fn heartbeat(&mut self) -> pb::Heartbeat {
        let mut beat = self.checkpoints.heartbeat(self.launcher.running_jobs());
        beat.seq = self.beats.sent(boottime_ms());
        beat.unhealthy_reason = self.launcher.unhealthy_reason().unwrap_or_default();
        beat.gpu_faults_forgotten = std::mem::take(&mut self.forgotten_unwatched);
        if let Some(watch) = self.gpu_watch.as_mut() {
            beat.gpu_faults = watch.faults();
            beat.gpu_faults_forgotten.extend(watch.take_forgotten());
        }
        beat
    }

    /// Probes the spool on a blocking thread (a hung disk must not hold up the session),
    /// unless the last probe is still running: [`Launcher::check_health`].
    fn start_health_check(&self, running: &mut Option<JoinHandle<()>>) {
        if running.is_some() {
            return;
        }
        let probe = self.launcher.health_probe();
        *running = Some(tokio::task::spawn_blocking(move || {
            probe();
        }));
    }

    fn registration(&self) -> pb::Register {
        // Ends first, then running jobs: a job ending in between shows up in neither
        // snapshot but its event is still queued (see `session`).
        let finished = self
            .launcher
            .unacked_finished()
            .iter()
            .map(pb::JobFinished::from)
            .collect();
        let running_jobs = self.launcher.running_jobs();
        pb::Register {
            name: self.config.name.clone(),
            address: self.config.address.clone(),
            cpus: self.config.cpus,
            mem_mib: self.config.mem_mib,
            gpus: self.config.gpus.clone(),
            features: self.config.features.clone(),
            running_jobs,
            finished,
            version: crate::VERSION.to_string(),
            role: self.config.role.clone(),
            fence_after_secs: u32::try_from(self.config.fence_after_secs).unwrap_or(u32::MAX),
            unhealthy_reason: self.launcher.unhealthy_reason().unwrap_or_default(),
            gpu_faults: self
                .gpu_watch
                .as_ref()
                .map_or_else(Vec::new, GpuWatch::faults),
        }
    }

    /// Acts on one message from schedd; `true` when a heartbeat is due at once (a GPU's
    /// forget to confirm on an agent without a health thread).
    fn handle(&mut self, message: pb::SchedulerMessage) -> bool {
        match message.msg {
            Some(SchedulerMsg::Launch(job)) => {
                ysched_common::stamp::stamp("n.launch_in", job.job_id);
                tracing::info!(
                    "job {}: launch as {} (uid {})",
                    job.job_id,
                    job.user,
                    job.uid
                );
                if let Err(e) = self.launcher.launch(JobParams::from(&job)) {
                    tracing::warn!("{e}; launch ignored");
                }
            }
            Some(SchedulerMsg::Stop(stop)) => {
                tracing::info!(
                    "job {}: stop requested ({}), grace {}s",
                    stop.job_id,
                    stop.reason,
                    stop.grace_secs
                );
                if !self.launcher.stop(stop.job_id, stop.grace_secs) {
                    tracing::info!("job {}: not running here, stop ignored", stop.job_id);
                }
            }
            Some(SchedulerMsg::Ack(ack)) => {
                if let Err(e) = self.launcher.ack(ack.job_id) {
                    tracing::warn!("job {}: cannot forget it: {e}", ack.job_id);
                }
            }
            Some(SchedulerMsg::HeartbeatAck(ack)) => match self.beats.acked(ack.seq) {
                Some(sent_at_ms) => self.lease.renew(sent_at_ms),
                None => tracing::debug!("acknowledgement of unknown heartbeat {}", ack.seq),
            },
            Some(SchedulerMsg::Registered(_)) => {
                tracing::warn!("unexpected second Registered from schedd, ignored")
            }
            Some(SchedulerMsg::ResumeGpu(resume)) => {
                tracing::info!(
                    "GPU {}: returned to service by an administrator; forgetting its faults",
                    resume.index
                );
                match &self.gpu_watch {
                    // The health thread answers, after a poll.
                    Some(watch) => watch.forget(resume.index),
                    None => {
                        self.forgotten_unwatched.push(resume.index);
                        return true;
                    }
                }
            }
            None => tracing::debug!("empty message from schedd, ignored"),
        }
        false
    }

    fn notify_systemd_once(&mut self) {
        if !self.told_systemd {
            self.told_systemd = true;
            if let Err(e) = ysched_common::sdnotify::notify_ready() {
                tracing::warn!("cannot notify systemd: {e}");
            }
        }
    }
}

async fn send(outbox: &mpsc::Sender<pb::AgentMessage>, msg: AgentMsg) -> Result<(), SessionError> {
    outbox
        .send(pb::AgentMessage { msg: Some(msg) })
        .await
        .map_err(|_| SessionError::Closed)
}

/// The endpoint of schedd (or one of its replicas) at `addr`: only the pinned cluster CA is
/// trusted (no system roots), and the name checked is the one schedd's certificate is always
/// issued for, whatever address is dialled.
fn schedd_endpoint(config: &AgentConfig, addr: &str) -> Result<Endpoint, AgentError> {
    let tls = config.credential.tls(&config.ca_cert_pem);
    Ok(Endpoint::from_shared(format!("https://{addr}"))
        .map_err(|e| AgentError::BadAddress(addr.to_string(), e))?
        .tls_config(tls)
        .map_err(|e| AgentError::BadCa(config.ca_cert_path.clone(), e))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        // A schedd host that vanished (no RST) is noticed within about a heartbeat.
        .http2_keep_alive_interval(config.heartbeat.max(Duration::from_secs(1)))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW)))
}

/// The leader's address in a replica's refusal ("... replica 2 at h2:7400 leads").
pub(crate) fn leader_named(message: &str) -> Option<&str> {
    let (_, rest) = message.rsplit_once(" at ")?;
    rest.strip_suffix(" leads")
}

#[cfg(test)]
mod leader_tests {
    #[test]
    fn the_leader_is_read_from_a_replicas_refusal() {
        let refusal = "not the leader: this schedd is replica 1 of scheduler.replicas; replica \
                       3 at 10.0.0.3:7400 leads";
        assert_eq!(super::leader_named(refusal), Some("10.0.0.3:7400"));
        assert_eq!(
            super::leader_named("no quorum: no replica of scheduler.replicas leads"),
            None
        );
    }
}
