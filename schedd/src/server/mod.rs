//! The gRPC face of schedd: the only module that knows tonic. Two listeners:
//! - a Unix socket for local clients, whose identity comes from `SO_PEERCRED`, with a limit
//!   of live connections per uid and in all (`ysched_common::edge::unix_listener`);
//! - TCP for node agents: TLS with a certificate from the cluster CA (agents pin it), then
//!   each agent authenticated by the cluster key; a connection that has not authenticated
//!   within seconds is closed (see `tls`). Agents also relay their hosts' client requests
//!   there (see `relay`).
//!
//! Every error message a client gets is at most
//! [`ysched_common::edge::MAX_STATUS_MESSAGE_BYTES`] long, whatever input it echoes.

mod agent_api;
mod client_api;
pub(crate) mod convert;
mod metrics_http;
mod relay;
mod tls;

pub(crate) use convert::part_end;
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
use ysched_common::edge::unix_listener::{ConnectionLimits, LimitedIncoming};
use ysched_common::edge::{cap_message, MAX_STATUS_MESSAGE_BYTES};
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

/// Reads the cluster key, creating it (0600, random) at first start. A key others may read
/// or write, or that belongs to another user, is refused (see [`ysched_common::secret`]).
pub fn load_or_create_key(path: &Path) -> anyhow::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    match ysched_common::secret::read_private_file(path, "cluster key")? {
        Some(k) if !k.trim().is_empty() => return Ok(k.trim().to_string()),
        Some(_) => anyhow::bail!("cluster key file {} is empty", path.display()),
        None => {}
    }
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    let key: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = path.parent() {
        ysched_common::durable::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot create cluster key file {}: {e}", path.display()))?;
    std::io::Write::write_all(&mut f, format!("{key}\n").as_bytes())?;
    f.sync_all()?;
    // The file's name too: a key lost to a power loss would be replaced by a new one, which
    // every agent would refuse.
    ysched_common::durable::sync_parent(path)?;
    tracing::info!("created cluster key {}", path.display());
    Ok(key)
}

/// Binds the client socket (mode 0666: identity comes from peer credentials, not from
/// file permissions).
pub fn bind_client_socket(path: &Path) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
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

/// Serves both listeners, and the metrics endpoint on `metrics` when given
/// (`scheduler.metrics_listen`, see `metrics_http`), until `shutdown` completes. Agents get
/// TLS with `tls`.
pub async fn serve(
    cluster: Arc<Cluster>,
    key: String,
    tls: Arc<tokio_rustls::rustls::ServerConfig>,
    clients: UnixListener,
    agents: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Every message limit is above what a submit may carry (script and environment at
    // `scheduler.max_script_mib` each), so a job accepted at submit always reaches its node.
    let max_message = cluster.config().max_message_bytes();
    // Cancelled once `shutdown` completes: every listener stops accepting.
    let stop = CancellationToken::new();
    let metrics_task = metrics.map(|listener| {
        let stopped = stop.clone().cancelled_owned();
        tokio::spawn(metrics_http::serve(listener, cluster.clone(), stopped))
    });
    // Listings of 10,000 jobs are megabytes: large HTTP/2 windows send them in one go
    // instead of waiting for WINDOW_UPDATEs every 64 KiB.
    let config = &cluster.config().scheduler;
    let client_limits = ConnectionLimits {
        per_user: config.max_connections_per_user as usize,
        per_user_key: "scheduler.max_connections_per_user",
        total: config.max_client_connections as usize,
        total_key: "scheduler.max_client_connections",
        exempt_uid: Some(0),
    };
    let clients = LimitedIncoming::new(
        clients,
        format!("client socket {}", config.socket.display()),
        client_limits,
    );
    let client_srv = tonic::transport::Server::builder()
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .max_concurrent_streams(Some(CLIENT_STREAMS_PER_CONNECTION))
        .add_service(client_api::ClientService::new(cluster.clone(), max_message))
        .serve_with_incoming_shutdown(clients, stop.clone().cancelled_owned());
    let agent_service = NodeAgentServer::new(agent_api::AgentApi::new(cluster.clone()))
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);
    // The client API again, for requests agents relay from their hosts' client sockets
    // (see `relay`): behind the same cluster-key check as the sessions.
    let relayed_clients = client_api::ClientService::new(cluster, max_message);
    let (tls_incoming, accept_task) = tls::accept_loop(agents, tls);
    let agent_srv = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(10)))
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            agent_service,
            agent_api::key_check(key.clone()),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            relayed_clients,
            agent_api::key_check(key),
        ))
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
    if let Some(task) = metrics_task {
        // It stops accepting at once; a scrape in flight is not waited for.
        task.abort();
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
