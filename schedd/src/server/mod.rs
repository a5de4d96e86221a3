//! The gRPC face of schedd: the only module that knows tonic. Two listeners:
//! - a Unix socket for local clients, whose identity comes from `SO_PEERCRED`, with a limit
//!   of live connections per uid and in all (`ysched_common::edge::unix_listener`);
//! - TCP for node agents and the other replicas: TLS with a certificate from the cluster CA
//!   (agents pin it), each peer authenticated by its own certificate from that CA (or, for
//!   agents, the shared cluster key while schedd still accepts it: see `auth`); a connection
//!   that has not authenticated within seconds is closed (see `tls`). Agents also relay their
//!   hosts' client requests there (see `relay`), and hosts enrol there (see `hosts`).
//!
//! Every error message a client gets is at most
//! [`ysched_common::edge::MAX_STATUS_MESSAGE_BYTES`] long, whatever input it echoes.

mod agent_api;
mod answering;
mod auth;
mod client_api;
mod client_service;
mod cluster_status;
pub(crate) mod convert;
mod empty_start;
mod forward;
mod hosts;
mod leading;
mod metrics_http;
mod relay;
mod replica_doors;
mod replication;
mod tls;
mod watch;

pub(crate) use convert::agent::part_end;
pub use replica_doors::serve_replica;
pub use tls::{load_or_create_ca, server_config as tls_server_config};
/// Agent-port connections that may be open without having authenticated yet, in all.
pub const UNAUTHENTICATED_AGENT_CONNECTIONS: usize = tls::UNAUTHENTICATED_TOTAL;

use crate::error::ApiError;
use crate::shell::Cluster;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use ysched_common::edge::answers::AnswerBudget;
use ysched_common::edge::unix_listener::{ConnectionLimits, LimitedIncoming};
use ysched_common::edge::{cap_message, MAX_STATUS_MESSAGE_BYTES};
use ysched_proto as pb;
use ysched_proto::node_agent_server::NodeAgentServer;

/// The status a client gets for `e`. Its message is capped: it travels in an HTTP/2 header,
/// and one over the peer's header limit (16 KiB) would fail the whole connection.
impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        let (code, message) = match e {
            ApiError::Invalid(m) => (tonic::Code::InvalidArgument, m),
            ApiError::NotFound(m) => (tonic::Code::NotFound, m),
            ApiError::Denied(m) => (tonic::Code::PermissionDenied, m),
            ApiError::Conflict(m) => (tonic::Code::FailedPrecondition, m),
            ApiError::AlreadyExists(m) => (tonic::Code::AlreadyExists, m),
            ApiError::Unavailable(m) => (tonic::Code::Unavailable, m),
            ApiError::Internal(m) => (tonic::Code::Internal, m),
        };
        tonic::Status::new(code, cap_message(&message, MAX_STATUS_MESSAGE_BYTES))
    }
}

/// The cluster key agents may still authenticate with, if any: read from
/// `scheduler.cluster_key_file` when `scheduler.accept_cluster_key` is on and the file exists
/// (schedd no longer makes one: new hosts enrol). Taking it is logged as a warning at every
/// start, since a host that holds it can register as any node and relay any user. A key others
/// may read or write, or that belongs to another user, is refused (see
/// [`ysched_common::secret`]).
pub fn load_cluster_key(config: &ysched_common::Config) -> anyhow::Result<Option<Arc<str>>> {
    let path = &config.scheduler.cluster_key_file;
    if !config.scheduler.accept_cluster_key {
        tracing::info!(
            "agents authenticate with their own certificates only \
             (scheduler.accept_cluster_key = false)"
        );
        return Ok(None);
    }
    match ysched_common::secret::read_private_file(path, "cluster key")? {
        Some(k) if !k.trim().is_empty() => {
            tracing::warn!(
                "agents may still authenticate with the shared cluster key {} \
                 (scheduler.accept_cluster_key = true): any host holding it can register as \
                 any node and relay any user. Enrol every host (`yctl node enrol NAME`, then \
                 `noded --enrol-token FILE`), then set scheduler.accept_cluster_key = false \
                 and delete the key from the nodes",
                path.display()
            );
            Ok(Some(Arc::from(k.trim())))
        }
        Some(_) => anyhow::bail!("cluster key file {} is empty", path.display()),
        None => {
            tracing::info!(
                "no cluster key at {}: agents authenticate with their own certificates only",
                path.display()
            );
            Ok(None)
        }
    }
}

/// Binds the client socket (mode 0666: identity comes from peer credentials, not from
/// file permissions; a directory made for it is 0755, whatever schedd's umask).
pub fn bind_client_socket(path: &Path) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        ysched_common::durable::create_dir_all_with_mode(dir, 0o755)?;
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => anyhow::bail!("another schedd is already listening on {}", path.display()),
        Err(_) => {
            let _ = std::fs::remove_file(path);
        }
    }
    let l = UnixListener::bind(path)
        .map_err(|e| anyhow::anyhow!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}

const WINDOW: u32 = 16 * 1024 * 1024;
/// Requests one client connection may have in flight at once (the CLIs make one at a time):
/// with the limit of connections per user, this bounds what one user can have schedd work
/// on at once.
const CLIENT_STREAMS_PER_CONNECTION: u32 = 16;

/// The services of the schedd that leads (the only one there is without replicas).
#[derive(Clone)]
struct Leader {
    cluster: Arc<Cluster>,
    clients: client_service::ClientService,
    agents: NodeAgentServer<agent_api::AgentApi>,
    /// The client API again, for requests agents relay from their hosts' client sockets
    /// (see `relay`).
    relayed: client_service::ClientService,
    enrolment: pb::enrolment_server::EnrolmentServer<hosts::EnrolmentApi>,
}

impl Leader {
    /// The services of `cluster`; a replica's take requests its followers forward, proven by
    /// `forwarded` (see `forward`). Hosts enrol with certificates from `ca`.
    fn of(
        cluster: &Arc<Cluster>,
        forwarded: Option<forward::ForwardToken>,
        ca: &Arc<ysched_common::tls::ClusterCa>,
    ) -> Leader {
        // Every message limit is above what a submit may carry (script and environment at
        // `scheduler.max_script_mib` each), so a job accepted at submit always reaches its
        // node.
        let max_message = cluster.config().max_message_bytes();
        // One budget of answers not yet read for both doors: a user's relayed requests and
        // those on schedd's own socket share their room.
        let answers = AnswerBudget::new(Default::default(), "schedd");
        let clients = |forwarded| {
            client_service::ClientService::new(
                cluster.clone(),
                max_message,
                forwarded,
                answers.clone(),
                ca.clone(),
            )
        };
        Leader {
            cluster: cluster.clone(),
            clients: clients(None),
            agents: NodeAgentServer::new(agent_api::AgentApi::new(cluster.clone()))
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
            relayed: clients(forwarded),
            enrolment: pb::enrolment_server::EnrolmentServer::new(hosts::EnrolmentApi::new(
                cluster.clone(),
                ca.clone(),
            ))
            .max_decoding_message_size(hosts::MAX_ENROL_MESSAGE),
        }
    }
}

/// What only a replica serves besides the leader's services: its `Replication` service,
/// `ClusterStatus` on both doors, and the forwarding of its client socket's requests while
/// it does not lead.
struct ReplicaDoors {
    replication: pb::replication_server::ReplicationServer<replication::ReplicationApi>,
    view: Arc<cluster_status::ClusterView>,
    forwarder: Arc<forward::Forwarder>,
}

/// What schedd serves on, and with: the client socket, the agent port (TLS with `tls`, hosts
/// authenticated by certificates from `ca`, or the cluster `key` while it is accepted) and
/// the metrics endpoint (`scheduler.metrics_listen`, see `metrics_http`) when there is one.
pub struct Doors {
    pub clients: UnixListener,
    pub agents: TcpListener,
    pub metrics: Option<TcpListener>,
    pub key: Option<Arc<str>>,
    pub tls: Arc<tokio_rustls::rustls::ServerConfig>,
    pub ca: Arc<ysched_common::tls::ClusterCa>,
}

/// Serves `cluster` at its `doors` until `shutdown` completes.
pub async fn serve(
    cluster: Arc<Cluster>,
    mut doors: Doors,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let metrics_task = doors.metrics.take().map(|listener| {
        let stopped = stop.clone().cancelled_owned();
        let served = cluster.clone();
        let metrics_of: metrics_http::MetricsOf = Arc::new(move || Some(served.clone()));
        tokio::spawn(metrics_http::serve(listener, metrics_of, stopped))
    });
    let (_leader, serving) = tokio::sync::watch::channel(leading::Serving::Leader(Leader::of(
        &cluster, None, &doors.ca,
    )));
    let served = serve_listeners(cluster.config(), serving, None, doors, stop, shutdown).await;
    if let Some(task) = metrics_task {
        // It stops accepting at once; a scrape in flight is not waited for.
        task.abort();
    }
    served
}

/// Serves the client socket and the agent port of `doors` (with a replica's own services
/// there too; the metrics endpoint is the caller's), each request by the leader's services
/// while `serving` has them, until `shutdown` completes; then cancels `stop`.
async fn serve_listeners(
    config: &ysched_common::Config,
    serving: tokio::sync::watch::Receiver<leading::Serving<Leader>>,
    replica: Option<ReplicaDoors>,
    doors: Doors,
    stop: CancellationToken,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use leading::WhileLeading;
    let Doors {
        clients,
        agents,
        key,
        tls,
        ..
    } = doors;
    // A host's certificate is taken while the leader's records take it.
    let roster: auth::Roster = {
        let serving = serving.clone();
        Arc::new(move |identity| match &*serving.borrow() {
            leading::Serving::Leader(l) => l.cluster.check_certificate(identity),
            leading::Serving::Elsewhere(_) => Ok(()),
        })
    };
    // Listings of 10,000 jobs are megabytes: large HTTP/2 windows send them in one go
    // instead of waiting for WINDOW_UPDATEs every 64 KiB.
    let scheduler = &config.scheduler;
    let client_limits = ConnectionLimits {
        per_user: scheduler.max_connections_per_user as usize,
        per_user_key: "scheduler.max_connections_per_user",
        total: scheduler.max_client_connections as usize,
        total_key: "scheduler.max_client_connections",
        exempt_uid: Some(0),
    };
    let clients = LimitedIncoming::new(
        clients,
        format!("client socket {}", scheduler.socket.display()),
        client_limits,
    );
    let clients_while_leading = WhileLeading::new(serving.clone(), |l: &Leader| l.clients.clone())
        .forwarding(replica.as_ref().map(|r| Arc::clone(&r.forwarder)));
    let relayed_while_leading = WhileLeading::new(serving.clone(), |l: &Leader| l.relayed.clone());
    // A replica answers `ClusterStatus` itself, leading or not (it is how one finds out
    // which leads); the rest goes to the leader's services.
    let (clients_first, relayed_first, clients_rest, relayed_rest, replication) = match replica {
        Some(r) => (
            Some(cluster_status::StatusFirst::new(
                Arc::clone(&r.view),
                clients_while_leading,
            )),
            Some(cluster_status::StatusFirst::new(
                r.view,
                relayed_while_leading,
            )),
            None,
            None,
            Some(r.replication),
        ),
        None => (
            None,
            None,
            Some(clients_while_leading),
            Some(relayed_while_leading),
            None,
        ),
    };
    let client_srv = tonic::transport::Server::builder()
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .max_concurrent_streams(Some(CLIENT_STREAMS_PER_CONNECTION))
        .add_optional_service(clients_first)
        .add_optional_service(clients_rest)
        .serve_with_incoming_shutdown(clients, stop.clone().cancelled_owned());
    let (tls_incoming, accept_task) = tls::accept_loop(agents, tls);
    let gate = |door| auth::check(door, key.clone(), Arc::clone(&roster));
    let agent_srv = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(10)))
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .add_service(InterceptedService::new(
            WhileLeading::new(serving.clone(), |l: &Leader| l.agents.clone()),
            gate(auth::Door::Agents),
        ))
        .add_optional_service(
            relayed_first.map(|svc| InterceptedService::new(svc, gate(auth::Door::Agents))),
        )
        .add_optional_service(
            relayed_rest.map(|svc| InterceptedService::new(svc, gate(auth::Door::Agents))),
        )
        .add_optional_service(
            replication.map(|r| InterceptedService::new(r, gate(auth::Door::Replication))),
        )
        // Anyone may enrol: the token is the credential, checked by the service.
        .add_service(WhileLeading::new(serving.clone(), |l: &Leader| {
            l.enrolment.clone()
        }))
        .serve_with_incoming_shutdown(tls_incoming, stop.clone().cancelled_owned());
    let client_task = tokio::spawn(client_srv);
    let agent_task = tokio::spawn(agent_srv);
    shutdown.await;
    accept_task.abort();
    stop.cancel();
    // A graceful stop waits for open streams, but agent sessions (and `ysub --wait`) never end
    // by themselves: give requests in flight a moment, then close the rest. Agents reconnect
    // to the next schedd; nothing acknowledged is lost (it is all in the store already).
    let grace = std::time::Duration::from_secs(2);
    for task in [client_task, agent_task] {
        let abort = task.abort_handle();
        match tokio::time::timeout(grace, task).await {
            Ok(res) => res??,
            Err(_) => abort.abort(),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statuses_are_capped_whatever_they_echo() {
        let account = "z".repeat(60_000);
        let status = tonic::Status::from(ApiError::Denied(format!(
            "user nobody may not charge account '{account}' (allowed: members of the Unix \
             group '{account}')"
        )));
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES);
        assert!(status
            .message()
            .starts_with("user nobody may not charge account 'zzz"));
        let status = tonic::Status::from(ApiError::NotFound("job 5 is not known".into()));
        assert_eq!(
            (status.code(), status.message()),
            (tonic::Code::NotFound, "job 5 is not known")
        );
    }
}
