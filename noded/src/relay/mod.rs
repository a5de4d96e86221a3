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
//! A request goes on as it came (its body streamed), with none of the client's metadata but
//! gRPC's own headers. schedd's answers come back as they are, except that an error message
//! is capped at [`MAX_STATUS_MESSAGE_BYTES`]: read from schedd as they come, and held for the
//! client only within the node's budget of answers not yet read, per connection, per local
//! user and in all (see [`answer`]). While the agent has no session, requests fail with
//! `UNAVAILABLE`, naming the node and schedd's address.

mod answer;

use anyhow::Context as _;
use std::convert::Infallible;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::UnixListener;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::transport::Channel;
use tonic::Status;
use ysched_common::edge::answers::{AnswerBudget, Holder, ANSWER_ROOM_METADATA};
use ysched_common::edge::passed_on::passed_on;
use ysched_common::edge::unix_listener::{ClientConnectInfo, ConnectionLimits, LimitedIncoming};
use ysched_common::edge::{cap_message, MAX_STATUS_MESSAGE_BYTES};
use ysched_common::identity::{relayed_caller, Handover, Hop};
use ysched_common::limits;
use ysched_proto as pb;

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
    limits: ConnectionLimits,
    session: SessionSlot,
    /// What answers not yet read by this host's clients may hold.
    answers: AnswerBudget,
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
        let answers =
            AnswerBudget::new(Default::default(), format!("node {}'s agent", config.node));
        Ok(Relay {
            node: config.node,
            schedd: config.schedd,
            authorization,
            jobs: config.jobs,
            answers,
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

    /// `req`, from the client socket, relayed to schedd: its answer, as it comes (see the
    /// module docs); a refusal of the relay's own (no credentials, no session) as the answer.
    async fn relay(&self, req: http::Request<Body>) -> http::Response<Body> {
        match self.relayed(req).await {
            Ok(answer) => answer,
            Err(status) => status.into_http(),
        }
    }

    async fn relayed(&self, req: http::Request<Body>) -> Result<http::Response<Body>, Status> {
        let connection = req
            .extensions()
            .get::<ClientConnectInfo>()
            .cloned()
            .ok_or_else(|| Status::unauthenticated("no peer credentials on this connection"))?;
        let cred = connection
            .peer_cred()
            .ok_or_else(|| Status::unauthenticated("no peer credentials on this connection"))?;
        let link = self.link()?;
        // On a compute node, a job of the caller's running here vouches for them; schedd
        // refuses anyone else, so they are refused here, costing schedd nothing.
        let job_id = match &self.jobs {
            None => 0,
            Some(jobs) => jobs.job_of(cred.uid()).ok_or_else(|| {
                Status::permission_denied(format!(
                    "node '{}' is a compute node: it relays only the users with a job running \
                     on it, and uid {} has none there; run the command on a login host or a \
                     scheduler host",
                    self.node,
                    cred.uid()
                ))
            })?,
        };
        let handover = Handover {
            node: self.node.clone(),
            relay_token: link.token.clone(),
            job_id,
            ..Handover::default()
        };
        let caller = relayed_caller(cred.uid(), cred.gid(), Hop::Relay, handover).await?;
        let holder = Holder {
            uid: cred.uid(),
            connection: Some(connection.answers),
        };
        // The room for a unary answer, reserved before schedd makes it: a user whose answers
        // not yet read fill their room here costs schedd nothing more.
        let method = req.uri().path().rsplit('/').next().unwrap_or_default();
        let room = if method == "WatchJob" {
            None
        } else {
            let most = if LARGE_ANSWERS.contains(&method) {
                limits::LISTING_BYTES_PER_REPLY.max
            } else {
                SMALL_ROOM
            };
            Some(self.answers.reserve_up_to(
                &holder,
                most,
                SMALL_ROOM.min(limits::LISTING_BYTES_AT_LEAST),
            )?)
        };
        let (parts, body) = req.into_parts();
        // The method's path alone: the channel puts schedd's address in front.
        let uri: http::Uri = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .map_err(|e| Status::invalid_argument(format!("a request to a bad path: {e}")))?;
        let mut metadata = MetadataMap::new();
        if let Some(authorization) = &self.authorization {
            metadata.insert("authorization", authorization.clone());
        }
        metadata.insert_bin(CALLER_METADATA, MetadataValue::from_bytes(&caller));
        if let Some(room) = &room {
            metadata.insert(ANSWER_ROOM_METADATA, MetadataValue::from(room.bytes()));
        }
        let outgoing = passed_on(parts, body, uri, metadata);
        use tower::ServiceExt;
        let answer = link.channel.oneshot(outgoing).await.map_err(|e| {
            Status::unavailable(format!(
                "node {} could not relay the request to schedd at {}: {e}; retry shortly",
                self.node, self.schedd
            ))
        })?;
        let (parts, body) = answer.into_parts();
        let body = answer::relayed(body, self.answers.clone(), holder, room);
        let mut relayed = http::Response::new(Body::new(body));
        *relayed.status_mut() = parts.status;
        *relayed.headers_mut() = passed_answer_headers(&parts.headers);
        Ok(relayed)
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
}

/// Methods whose answers may be large (a page of a listing, every node, a report): the room
/// reserved before the request goes on is a listing's page at most (see `relayed`).
const LARGE_ANSWERS: [&str; 6] = [
    "ListJobs",
    "ListNodes",
    "ListHosts",
    "Audit",
    "Report",
    "ExportTrace",
];
/// The room reserved before any other unary request goes on; its answer grows it if it must.
const SMALL_ROOM: u64 = 64 << 10;

/// The headers of schedd's answer the client gets: gRPC's own, with a status (an answer that
/// is only a status) capped as [`schedd_status`] caps it.
fn passed_answer_headers(headers: &http::HeaderMap) -> http::HeaderMap {
    let mut passed = match Status::from_header_map(headers) {
        Some(status) => answer::status_trailers(schedd_status(status)),
        None => http::HeaderMap::new(),
    };
    for name in ["content-type", "grpc-encoding", "grpc-accept-encoding"] {
        if let Some(value) = headers.get(name) {
            passed.insert(name, value.clone());
        }
    }
    passed
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

/// The relay as the client socket's server runs it.
#[derive(Clone)]
struct RelayService(Arc<Relay>);

impl tonic::server::NamedService for RelayService {
    const NAME: &'static str = pb::ysched_server::SERVICE_NAME;
}

impl tower::Service<http::Request<Body>> for RelayService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let relay = Arc::clone(&self.0);
        Box::pin(async move { Ok(relay.relay(req).await) })
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
        .add_service(RelayService(Arc::new(relay)))
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
