//! The node's client socket: the CLIs on this host, and the jobs running here, reach schedd
//! through it.
//!
//! noded serves the `Ysched` client service on a Unix socket (`node.client_socket`, or
//! `noded --client-socket`), identifies each caller by the kernel's peer credentials
//! (`SO_PEERCRED`, as schedd does on its own socket), and forwards every request to schedd
//! on the connection of its agent session, with the cluster key and the caller named in the
//! binary metadata `ysched-caller-bin` (a `RelayedCaller`: this node, uid, gid, user and group
//! names, home). schedd believes that caller only on the connection where this node's agent
//! session is registered, so the relay must use that very connection: the agent puts its
//! session's channel in a [`SessionSlot`] once registered and takes it out when the session
//! ends. Nothing the client sends as metadata is passed on.
//!
//! schedd's answers, errors included, come back unchanged. While the agent has no session,
//! requests fail with `UNAVAILABLE`, naming the node and schedd's address.

use anyhow::Context as _;
use prost::Message as _;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::server::UdsConnectInfo;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use ysched_common::identity::owner_from_cred;
use ysched_proto as pb;
use ysched_proto::ysched_client::YschedClient;
use ysched_proto::ysched_server::{Ysched, YschedServer};

pub use ysched_common::identity::RELAYED_CALLER_METADATA as CALLER_METADATA;

/// HTTP/2 windows of the client socket: a listing of 10,000 jobs goes out in one go, as
/// from schedd's own socket.
const WINDOW: u32 = 16 * 1024 * 1024;

/// The channel of the agent's live, registered session with schedd, if there is one.
#[derive(Debug, Clone, Default)]
pub struct SessionSlot(Arc<Mutex<Option<Channel>>>);

impl SessionSlot {
    /// The session is registered: relayed requests go on its connection from now on.
    pub fn set(&self, channel: Channel) {
        *self.lock() = Some(channel);
    }

    /// The session ended: requests are refused until the next one is registered.
    pub fn clear(&self) {
        *self.lock() = None;
    }

    pub fn get(&self) -> Option<Channel> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Channel>> {
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
    pub cluster_key: String,
    /// Largest request passed to schedd (`Config::max_message_bytes`).
    pub max_message_bytes: usize,
}

/// The `Ysched` service of the client socket: forwards every request to schedd.
pub struct Relay {
    node: String,
    schedd: String,
    authorization: MetadataValue<Ascii>,
    max_message_bytes: usize,
    session: SessionSlot,
}

#[derive(Debug, thiserror::Error)]
#[error("the cluster key cannot be sent as a header (it must be printable ASCII)")]
pub struct BadClusterKey;

impl Relay {
    pub fn new(config: RelayConfig, session: SessionSlot) -> Result<Relay, BadClusterKey> {
        let authorization = format!("Bearer {}", config.cluster_key)
            .parse()
            .map_err(|_| BadClusterKey)?;
        Ok(Relay {
            node: config.node,
            schedd: config.schedd,
            authorization,
            max_message_bytes: config.max_message_bytes,
            session,
        })
    }

    /// The request to send to schedd: the client's message, the cluster key, and the caller
    /// as the kernel named it. Refused without peer credentials.
    async fn outgoing<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        let cred = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .ok_or_else(|| Status::unauthenticated("no peer credentials on this connection"))?;
        let (uid, gid) = (cred.uid(), cred.gid());
        // The name service may be slow (LDAP): not on a runtime thread.
        let (owner, home) = tokio::task::spawn_blocking(move || owner_from_cred(uid, gid))
            .await
            .map_err(|e| Status::internal(format!("identity lookup failed: {e}")))?;
        let caller = pb::RelayedCaller {
            node: self.node.clone(),
            uid,
            gid,
            user: owner.user,
            groups: owner.groups,
            home: home
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        let mut outgoing = Request::new(request.into_inner());
        let metadata = outgoing.metadata_mut();
        metadata.insert("authorization", self.authorization.clone());
        metadata.insert_bin(
            CALLER_METADATA,
            tonic::metadata::MetadataValue::from_bytes(&caller.encode_to_vec()),
        );
        Ok(outgoing)
    }

    /// A client on the agent session's connection, or `UNAVAILABLE` without a session.
    fn client(&self) -> Result<YschedClient<Channel>, Status> {
        let channel = self.session.get().ok_or_else(|| {
            Status::unavailable(format!(
                "node {} is not connected to schedd at {}; retry shortly",
                self.node, self.schedd
            ))
        })?;
        Ok(YschedClient::new(channel)
            .max_encoding_message_size(self.max_message_bytes)
            // What schedd sends a client (a listing of every job) has no limit there either.
            .max_decoding_message_size(usize::MAX))
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
        let outgoing = self.outgoing(request).await?;
        let client = self.client()?;
        let reply = call(client, outgoing).await.map_err(schedd_status)?;
        Ok(Response::new(reply.into_inner()))
    }
}

/// schedd's status as the client gets it: code, message and details, without the HTTP
/// headers of the hop.
fn schedd_status(status: Status) -> Status {
    Status::with_details(
        status.code(),
        status.message(),
        status.details().to_vec().into(),
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
        let outgoing = self.outgoing(request).await?;
        let mut client = self.client()?;
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

/// Serves the relay on `listener` until the listener fails.
pub async fn serve(listener: UnixListener, relay: Relay) -> Result<(), tonic::transport::Error> {
    let max_message_bytes = relay.max_message_bytes;
    tonic::transport::Server::builder()
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .add_service(
            YschedServer::new(relay)
                .max_decoding_message_size(max_message_bytes)
                .max_encoding_message_size(usize::MAX),
        )
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await
}
