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
mod answering;
mod client_api;
mod client_service;
mod cluster_status;
pub(crate) mod convert;
mod forward;
mod leading;
mod metrics_http;
mod relay;
mod replication;
mod tls;
mod watch;

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

/// The services of the schedd that leads (the only one there is without replicas).
#[derive(Clone)]
struct Leader {
    clients: client_service::ClientService,
    agents: NodeAgentServer<agent_api::AgentApi>,
    /// The client API again, for requests agents relay from their hosts' client sockets
    /// (see `relay`): behind the same cluster-key check as the sessions.
    relayed: client_service::ClientService,
}

impl Leader {
    /// The services of `cluster`; a replica's take requests its followers forward, proven by
    /// `forwarded` (see `forward`).
    fn of(cluster: &Arc<Cluster>, forwarded: Option<forward::ForwardToken>) -> Leader {
        // Every message limit is above what a submit may carry (script and environment at
        // `scheduler.max_script_mib` each), so a job accepted at submit always reaches its
        // node.
        let max_message = cluster.config().max_message_bytes();
        // One budget of answers not yet read for both doors: a user's relayed requests and
        // those on schedd's own socket share their room.
        let answers = AnswerBudget::new(Default::default(), "schedd");
        Leader {
            clients: client_service::ClientService::new(
                cluster.clone(),
                max_message,
                None,
                answers.clone(),
            ),
            agents: NodeAgentServer::new(agent_api::AgentApi::new(cluster.clone()))
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
            relayed: client_service::ClientService::new(
                cluster.clone(),
                max_message,
                forwarded,
                answers,
            ),
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

/// What schedd serves on, and with: the client socket, the agent port (TLS with `tls`,
/// behind the cluster `key`) and the metrics endpoint (`scheduler.metrics_listen`, see
/// `metrics_http`) when there is one.
pub struct Doors {
    pub clients: UnixListener,
    pub agents: TcpListener,
    pub metrics: Option<TcpListener>,
    pub key: String,
    pub tls: Arc<tokio_rustls::rustls::ServerConfig>,
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
        tokio::spawn(metrics_http::serve(listener, cluster.clone(), stopped))
    });
    let (_leader, serving) =
        tokio::sync::watch::channel(leading::Serving::Leader(Leader::of(&cluster, None)));
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
    let keyed = |svc| {
        tonic::service::interceptor::InterceptedService::new(svc, agent_api::key_check(key.clone()))
    };
    let agent_srv = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(10)))
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW))
        .add_service(keyed(WhileLeading::new(serving.clone(), |l: &Leader| {
            l.agents.clone()
        })))
        .add_optional_service(relayed_first.map(|svc| {
            tonic::service::interceptor::InterceptedService::new(
                svc,
                agent_api::key_check(key.clone()),
            )
        }))
        .add_optional_service(relayed_rest.map(|svc| {
            tonic::service::interceptor::InterceptedService::new(
                svc,
                agent_api::key_check(key.clone()),
            )
        }))
        .add_optional_service(replication.map(|r| {
            tonic::service::interceptor::InterceptedService::new(
                r,
                agent_api::key_check(key.clone()),
            )
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

/// Serves as replica `place` of `scheduler.replicas` over `store`: always the replication
/// service and `ClusterStatus`; clients and agents only while this replica leads (otherwise
/// its client socket's requests are forwarded to the leader, and agents and relayed requests
/// are told where the leader is). A replica that becomes the leader loads the state from its store (every
/// committed change is in it) and starts scheduling; one that loses the lead exits (status
/// 75), to be restarted as a follower.
pub async fn serve_replica(
    config: ysched_common::Config,
    store: crate::store::Store,
    place: u64,
    ca: &ysched_common::tls::ClusterCa,
    mut doors: Doors,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use crate::replica::{Replica, Timing};
    let members: std::collections::BTreeMap<u64, String> = config
        .scheduler
        .replicas
        .iter()
        .enumerate()
        .map(|(i, addr)| (i as u64 + 1, addr.clone()))
        .collect();
    let ca_pem = &ca.cert_pem;
    let link = Arc::new(replication::GrpcLink::new(
        place,
        &doors.key,
        ca_pem,
        config.max_message_bytes(),
    )?);
    let raft_link: Arc<dyn crate::replica::network::Link> = link.clone();
    // As a follower it keeps warm what leading needs, so that once elected it serves at once.
    let replica = Replica::start_keeping_warm(
        place,
        store.clone(),
        raft_link,
        Timing::default(),
        crate::shell::usage_half_life_ms(&config),
    )
    .await?;
    let forward_token = forward::ForwardToken::from_ca_key(&ca.key_pem());
    let forwarder = forward::Forwarder::new(place, forward_token.clone(), &doors.key, ca_pem)?;
    // The cluster is formed once, by the first replica at its first start (a replica with a
    // log of its own ignores it). Only the first: another that formed it too would stand at
    // once in the same term and unseat a leader the others had just elected.
    if place == 1 {
        replica.initialize(&members).await?;
    }
    let replication_service = pb::replication_server::ReplicationServer::new(
        replication::ReplicationApi::new(replica.clone()),
    )
    .max_decoding_message_size(config.max_message_bytes())
    .max_encoding_message_size(config.max_message_bytes());
    let (leader_tx, serving) = tokio::sync::watch::channel(leading::Serving::Elsewhere(
        where_the_leader_is(place, None, &members),
    ));
    let view = Arc::new(cluster_status::ClusterView {
        replica: replica.clone(),
        link,
        members: members.clone(),
    });
    let stop = CancellationToken::new();
    let leading = tokio::spawn(lead_when_elected(
        Electable {
            config: config.clone(),
            store,
            replica: replica.clone(),
            members,
            forwarded: forward_token,
        },
        leader_tx,
        doors.metrics.take(),
        stop.clone(),
    ));
    let replica_doors = ReplicaDoors {
        replication: replication_service,
        view,
        forwarder: Arc::new(forwarder),
    };
    let served =
        serve_listeners(&config, serving, Some(replica_doors), doors, stop, shutdown).await;
    leading.abort();
    replica.shutdown().await;
    served
}

/// What a replica that does not lead tells clients and agents, and where it forwards
/// clients.
fn where_the_leader_is(
    place: u64,
    leader: Option<u64>,
    members: &std::collections::BTreeMap<u64, String>,
) -> leading::Elsewhere {
    // A replica that counts itself the leader but has no majority behind it (one restarted
    // with its own vote) does not lead either.
    match leader
        .filter(|l| *l != place)
        .and_then(|l| Some((l, members.get(&l)?)))
    {
        Some((l, addr)) => leading::Elsewhere {
            why: format!(
                "not the leader: this schedd is replica {place} of scheduler.replicas; replica \
                 {l} at {addr} leads"
            ),
            leader: Some((l, addr.clone())),
        },
        None => leading::Elsewhere {
            why: format!(
                "no quorum: no replica of scheduler.replicas leads (a majority of the {} must be \
                 up and reach each other); this is replica {place}",
                members.len()
            ),
            leader: None,
        },
    }
}

/// What a replica needs to lead once elected: its config, store and Raft, every replica's
/// address, and the token its followers' forwarded requests carry.
struct Electable {
    config: ysched_common::Config,
    store: crate::store::Store,
    replica: crate::replica::Replica,
    members: std::collections::BTreeMap<u64, String>,
    forwarded: forward::ForwardToken,
}

/// Follows the replica's role: once it leads and has applied everything committed, starts
/// the `Cluster` from what the replica kept warm (or the store) and serves it (and the metrics endpoint); exits when the
/// lead is lost (see `shell::lead_lost`).
async fn lead_when_elected(
    electable: Electable,
    serving: tokio::sync::watch::Sender<leading::Serving<Leader>>,
    metrics: Option<TcpListener>,
    stop: CancellationToken,
) {
    let Electable {
        config,
        store,
        replica,
        members,
        forwarded,
    } = electable;
    let mut watch = replica.raft.metrics();
    let mut metrics = metrics;
    let mut cluster: Option<Arc<Cluster>> = None;
    loop {
        let m = watch.borrow_and_update().clone();
        let leads = m.current_leader == Some(replica.id) && m.state.is_leader();
        match (&cluster, leads) {
            (Some(_), false) => {
                tracing::error!(
                    "replica {} lost the lead ({}); exiting so that it restarts as a follower",
                    replica.id,
                    where_the_leader_is(replica.id, m.current_leader, &members).why
                );
                eprintln!("schedd: fatal: lost the lead");
                std::process::exit(75);
            }
            (None, true)
                if m.last_applied.map(|l| l.index) >= m.last_log_index && replica.has_quorum() =>
            {
                let loading = std::time::Instant::now();
                match Cluster::start_leading(config.clone(), store.clone(), replica.clone()) {
                    Ok(c) => {
                        tracing::info!(
                            replica = replica.id,
                            term = m.current_term,
                            took = ?loading.elapsed(),
                            "leading: state loaded, serving clients and agents"
                        );
                        if let Some(listener) = metrics.take() {
                            tokio::spawn(metrics_http::serve(
                                listener,
                                c.clone(),
                                stop.clone().cancelled_owned(),
                            ));
                        }
                        let _ = serving.send(leading::Serving::Leader(Leader::of(
                            &c,
                            Some(forwarded.clone()),
                        )));
                        cluster = Some(c);
                    }
                    Err(e) => {
                        tracing::error!("cannot load the state to lead: {e}");
                        eprintln!("schedd: fatal: cannot load the state to lead: {e}");
                        std::process::exit(75);
                    }
                }
            }
            (None, _) => {
                let _ = serving.send(leading::Serving::Elsewhere(where_the_leader_is(
                    replica.id,
                    m.current_leader,
                    &members,
                )));
            }
            (Some(_), true) => {}
        }
        // Looked at again on each change, and every 100 ms (a majority's acknowledgement
        // ages without a change).
        tokio::select! {
            changed = watch.changed() => if changed.is_err() {
                // Raft stopped under us (its store failed: a full disk, an I/O error): as for
                // a failed store write, restart from what is on disk.
                tracing::error!(
                    "replica {} stopped (its log or state could not be written); exiting so \
                     that it restarts from its store",
                    replica.id
                );
                eprintln!("schedd: fatal: replica stopped");
                std::process::exit(75);
            },
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
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
