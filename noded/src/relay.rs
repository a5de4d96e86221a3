//! The node's client socket: the CLIs on this host, and its jobs, reach schedd through it.
//!
//! noded serves the `Ysched` client service on a Unix socket (`node.client_socket`, or
//! `noded --client-socket`), identifies each caller by the kernel's peer credentials
//! (`SO_PEERCRED`, as schedd does on its own socket), and forwards every request to schedd
//! on a connection with this host's certificate (or the cluster key), the caller named in the
//! binary metadata `ysched-caller-bin` (a `RelayedCaller`: this node, uid, gid, user and group
//! names, home, the relay token of the agent's session, and on a compute node a job of the
//! caller's running here). schedd believes that caller only with the token it gave this
//! node's live session, and from a compute node only for a user with a job running on it. The agent puts the session's [`RelayLink`] in a [`SessionSlot`] once
//! registered and takes it out when the session ends. Nothing the client sends as metadata is
//! passed on.
//!
//! Relayed requests go on a connection of their own, not the session's: HTTP/2 shares flow
//! control and connection errors between the streams of a connection, so a relayed request
//! on the session's connection (a huge answer, an answer too large for a header, a client
//! that stops reading) could stall or end the session, and with it the node's heartbeats.
//!
//! The client socket admits at most `node.max_connections_per_user` live connections per uid
//! and `node.max_client_connections` in all (`ysched_common::edge::unix_listener`).
//!
//! schedd's answers come back as they are, except that an error message is capped at
//! [`MAX_STATUS_MESSAGE_BYTES`]. While the agent has no session, requests fail with
//! `UNAVAILABLE`, naming the node and schedd's address.

use anyhow::Context as _;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::UnixListener;
use tokio_stream::{Stream, StreamExt as _};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::server::UdsConnectInfo;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use ysched_common::edge::unix_listener::{ConnectionLimits, LimitedIncoming};
use ysched_common::edge::{cap_message, MAX_STATUS_MESSAGE_BYTES};
use ysched_common::identity::{relayed_caller, Handover, Hop};
use ysched_proto as pb;
use ysched_proto::ysched_client::YschedClient;
use ysched_proto::ysched_server::{Ysched, YschedServer};

pub use ysched_common::identity::RELAYED_CALLER_METADATA as CALLER_METADATA;

/// HTTP/2 windows of the client socket: a listing of 10,000 jobs goes out in one go, as
/// from schedd's own socket.
const WINDOW: u32 = 16 * 1024 * 1024;

pub use ysched_common::identity::MAX_CALLER_BYTES;

/// How this agent's session relays requests: on `channel`, naming `token` (the session's
/// relay token from schedd; empty from a schedd that has none, which then believes relayed
/// requests only on the session's own connection, the channel given then).
#[derive(Debug, Clone)]
pub struct RelayLink {
    pub channel: Channel,
    pub token: Vec<u8>,
}

/// The relay link of the agent's live, registered session with schedd, if there is one.
#[derive(Debug, Clone, Default)]
pub struct SessionSlot(Arc<Mutex<Option<RelayLink>>>);

impl SessionSlot {
    /// The session is registered: relayed requests go by `link` from now on.
    pub fn set(&self, link: RelayLink) {
        *self.lock() = Some(link);
    }

    /// The session ended: requests are refused until the next one is registered.
    pub fn clear(&self) {
        *self.lock() = None;
    }

    pub fn get(&self) -> Option<RelayLink> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<RelayLink>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The relay's settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// This node's name, as registered.
    pub node: String,
    /// schedd's agent address, for messages.
    pub schedd: String,
    /// The cluster key, on a host that has one (see [`crate::credential`]).
    pub cluster_key: Option<String>,
    /// The jobs running here, by user: on a compute node, the job that vouches for each
    /// caller; `None` on a login host (schedd takes every user of its host from it).
    pub jobs: Option<crate::launch::UserJobs>,
    /// Largest request passed to schedd (`Config::max_message_bytes`).
    pub max_message_bytes: usize,
    /// `node.max_connections_per_user` and `node.max_client_connections`.
    pub max_connections_per_user: usize,
    pub max_client_connections: usize,
}

/// The `Ysched` service of the client socket: forwards every request to schedd.
pub struct Relay {
    node: String,
    schedd: String,
    authorization: Option<MetadataValue<Ascii>>,
    jobs: Option<crate::launch::UserJobs>,
    max_message_bytes: usize,
    limits: ConnectionLimits,
    session: SessionSlot,
}

#[derive(Debug, thiserror::Error)]
#[error("the cluster key cannot be sent as a header (it must be printable ASCII)")]
pub struct BadClusterKey;

impl Relay {
    pub fn new(config: RelayConfig, session: SessionSlot) -> Result<Relay, BadClusterKey> {
        let authorization = config
            .cluster_key
            .as_ref()
            .map(|key| format!("Bearer {key}").parse())
            .transpose()
            .map_err(|_| BadClusterKey)?;
        Ok(Relay {
            node: config.node,
            schedd: config.schedd,
            authorization,
            jobs: config.jobs,
            max_message_bytes: config.max_message_bytes,
            limits: ConnectionLimits {
                per_user: config.max_connections_per_user,
                per_user_key: "node.max_connections_per_user",
                total: config.max_client_connections,
                total_key: "node.max_client_connections",
                exempt_uid: Some(0),
            },
            session,
        })
    }

    /// The request to send to schedd by `link`: the client's message, the cluster key (if
    /// this host has one), and the caller as the kernel named it, with the session's relay
    /// token and, on a compute node, a job of the caller's running here. Refused without peer
    /// credentials.
    async fn outgoing<T>(
        &self,
        request: Request<T>,
        link: &RelayLink,
    ) -> Result<Request<T>, Status> {
        let cred = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .ok_or_else(|| Status::unauthenticated("no peer credentials on this connection"))?;
        let handover = Handover {
            node: self.node.clone(),
            relay_token: link.token.clone(),
            job_id: self
                .jobs
                .as_ref()
                .and_then(|jobs| jobs.job_of(cred.uid()))
                .unwrap_or(0),
            ..Handover::default()
        };
        let caller = relayed_caller(cred.uid(), cred.gid(), Hop::Relay, handover).await?;
        let mut outgoing = Request::new(request.into_inner());
        let metadata = outgoing.metadata_mut();
        if let Some(authorization) = &self.authorization {
            metadata.insert("authorization", authorization.clone());
        }
        metadata.insert_bin(
            CALLER_METADATA,
            tonic::metadata::MetadataValue::from_bytes(&caller),
        );
        Ok(outgoing)
    }

    /// The session's relay link, or `UNAVAILABLE` without a session.
    fn link(&self) -> Result<RelayLink, Status> {
        self.session.get().ok_or_else(|| {
            Status::unavailable(format!(
                "node {} is not connected to schedd at {}; retry shortly",
                self.node, self.schedd
            ))
        })
    }

    /// A client of schedd by `link`.
    fn client(&self, link: RelayLink) -> YschedClient<Channel> {
        YschedClient::new(link.channel)
            .max_encoding_message_size(self.max_message_bytes)
            // What schedd sends a client (a listing of every job) has no limit there either.
            .max_decoding_message_size(usize::MAX)
    }

    /// Forwards one unary request with `call` and returns schedd's answer.
    async fn forward<T, R, F, Fut>(
        &self,
        request: Request<T>,
        call: F,
    ) -> Result<Response<R>, Status>
    where
        F: FnOnce(YschedClient<Channel>, Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<Response<R>, Status>>,
    {
        let link = self.link()?;
        let outgoing = self.outgoing(request, &link).await?;
        let reply = call(self.client(link), outgoing)
            .await
            .map_err(schedd_status)?;
        Ok(Response::new(reply.into_inner()))
    }
}

/// The longest error details passed back (schedd sends none today).
const MAX_STATUS_DETAILS_BYTES: usize = 1024;

/// schedd's status as the client gets it: code, message (capped, as schedd caps its own) and
/// details, without the HTTP headers of the hop.
fn schedd_status(status: Status) -> Status {
    let details = if status.details().len() <= MAX_STATUS_DETAILS_BYTES {
        status.details().to_vec()
    } else {
        Vec::new()
    };
    Status::with_details(
        status.code(),
        cap_message(status.message(), MAX_STATUS_MESSAGE_BYTES),
        details.into(),
    )
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::JobInfo, Status>> + Send>>;

#[tonic::async_trait]
impl Ysched for Relay {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        self.forward(request, |mut c, r| async move { c.submit(r).await })
            .await
    }

    async fn list_jobs(
        &self,
        request: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::JobList>, Status> {
        self.forward(request, |mut c, r| async move { c.list_jobs(r).await })
            .await
    }

    async fn get_job(
        &self,
        request: Request<pb::JobRef>,
    ) -> Result<Response<pb::JobDetail>, Status> {
        self.forward(request, |mut c, r| async move { c.get_job(r).await })
            .await
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        self.forward(request, |mut c, r| async move { c.cancel(r).await })
            .await
    }

    async fn hold(&self, request: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.hold(r).await })
            .await
    }

    async fn release(&self, request: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.release(r).await })
            .await
    }

    async fn list_nodes(
        &self,
        request: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::NodeList>, Status> {
        self.forward(request, |mut c, r| async move { c.list_nodes(r).await })
            .await
    }

    async fn drain(
        &self,
        request: Request<pb::DrainRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.drain(r).await })
            .await
    }

    async fn resume(&self, request: Request<pb::NodeRef>) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.resume(r).await })
            .await
    }

    async fn requeue(&self, request: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.requeue(r).await })
            .await
    }

    type WatchJobStream = WatchStream;

    async fn watch_job(
        &self,
        request: Request<pb::JobRef>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let link = self.link()?;
        let outgoing = self.outgoing(request, &link).await?;
        let mut client = self.client(link);
        let stream = client
            .watch_job(outgoing)
            .await
            .map_err(schedd_status)?
            .into_inner()
            .map(|item| item.map_err(schedd_status));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn audit(
        &self,
        request: Request<pb::AuditRequest>,
    ) -> Result<Response<pb::AuditList>, Status> {
        self.forward(request, |mut c, r| async move { c.audit(r).await })
            .await
    }

    async fn shares(
        &self,
        request: Request<pb::SharesRequest>,
    ) -> Result<Response<pb::ShareList>, Status> {
        self.forward(request, |mut c, r| async move { c.shares(r).await })
            .await
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportReply>, Status> {
        self.forward(request, |mut c, r| async move { c.report(r).await })
            .await
    }

    async fn export_trace(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::TraceReply>, Status> {
        self.forward(request, |mut c, r| async move { c.export_trace(r).await })
            .await
    }

    async fn import_usage(
        &self,
        request: Request<pb::ImportUsageRequest>,
    ) -> Result<Response<pb::ImportUsageReply>, Status> {
        self.forward(request, |mut c, r| async move { c.import_usage(r).await })
            .await
    }

    async fn drain_gpu(
        &self,
        request: Request<pb::DrainGpuRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.drain_gpu(r).await })
            .await
    }

    async fn resume_gpu(
        &self,
        request: Request<pb::ResumeGpuRequest>,
    ) -> Result<Response<pb::ResumeGpuReply>, Status> {
        self.forward(request, |mut c, r| async move { c.resume_gpu(r).await })
            .await
    }

    async fn update_job(
        &self,
        request: Request<pb::UpdateJobRequest>,
    ) -> Result<Response<pb::UpdateJobReply>, Status> {
        self.forward(request, |mut c, r| async move { c.update_job(r).await })
            .await
    }

    async fn cluster_status(
        &self,
        request: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusReply>, Status> {
        self.forward(request, |mut c, r| async move { c.cluster_status(r).await })
            .await
    }

    async fn change_cluster(
        &self,
        request: Request<pb::ClusterChangeRequest>,
    ) -> Result<Response<pb::ClusterChangeReply>, Status> {
        self.forward(request, |mut c, r| async move { c.change_cluster(r).await })
            .await
    }

    async fn enrol_host(
        &self,
        request: Request<pb::EnrolHostRequest>,
    ) -> Result<Response<pb::EnrolHostReply>, Status> {
        self.forward(request, |mut c, r| async move { c.enrol_host(r).await })
            .await
    }

    async fn revoke_host(
        &self,
        request: Request<pb::NodeRef>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.forward(request, |mut c, r| async move { c.revoke_host(r).await })
            .await
    }

    async fn list_hosts(
        &self,
        request: Request<pb::ListHostsRequest>,
    ) -> Result<Response<pb::HostList>, Status> {
        self.forward(request, |mut c, r| async move { c.list_hosts(r).await })
            .await
    }
}

/// Binds the client socket at `path`: creates its directory, refuses when something already
/// listens there (another noded), replaces a stale socket file. Mode 0666: identity comes
/// from peer credentials, not from file permissions.
pub fn bind_client_socket(path: &Path) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {} for the client socket", dir.display()))?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        anyhow::bail!(
            "another process (another noded?) is already listening on the client socket {}",
            path.display()
        );
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| {
                format!("cannot remove the stale client socket {}", path.display())
            })
        }
        _ => {}
    }
    let listener = UnixListener::bind(path)
        .with_context(|| format!("cannot bind the client socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot open up the client socket {}", path.display()))?;
    Ok(listener)
}

/// Requests one client connection may have in flight at once (the CLIs make one at a time).
const CLIENT_STREAMS_PER_CONNECTION: u32 = 16;

/// Serves the relay on `listener` until the listener fails.
pub async fn serve(listener: UnixListener, relay: Relay) -> Result<(), tonic::transport::Error> {
    let max_message_bytes = relay.max_message_bytes;
    let name = match listener.local_addr() {
        Ok(addr) => match addr.as_pathname() {
            Some(path) => format!("client socket {}", path.display()),
            None => "client socket".to_string(),
        },
        Err(_) => "client socket".to_string(),
    };
    let incoming = LimitedIncoming::new(listener, name, relay.limits.clone());
    tonic::transport::Server::builder()
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .max_concurrent_streams(Some(CLIENT_STREAMS_PER_CONNECTION))
        .add_service(
            YschedServer::new(relay)
                .max_decoding_message_size(max_message_bytes)
                .max_encoding_message_size(usize::MAX),
        )
        .serve_with_incoming(incoming)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedds_errors_are_passed_on_capped() {
        let status = schedd_status(Status::permission_denied("z".repeat(100_000)));
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES);
        assert!(status.message().ends_with("… (100000 bytes in all)"));
        let short = schedd_status(Status::not_found("job 5 is not known"));
        assert_eq!(short.message(), "job 5 is not known");
    }
}
