//! Client requests relayed by node agents: every noded serves the client API on its own
//! socket, identifies each caller there by `SO_PEERCRED`, and forwards the request to schedd's
//! agent port, naming the caller in the binary metadata [`CALLER_METADATA`] (a
//! `RelayedCaller`).
//!
//! A host vouches for its local users, within what its role allows. A relayed caller is taken
//! only from a request that came with the named node's own certificate (or, while schedd
//! accepts it, the cluster key) and that carries the relay token of that node's live agent
//! session: a secret schedd gave that session alone, in its `Registered`. So one host cannot
//! speak for another. A compute node speaks only for the users with a job running on it (the
//! request names the job: see [`vouched_by_job`]), so that root on a compute node acts as
//! no one else; a login host (enrolled as one) speaks for every user of its host. Agents relay
//! on a connection of their own, not the session's, so that nothing a relayed request does (a
//! huge answer, a protocol error, a stalled stream) can touch the session. Agents older than
//! the token relay on their session's connection, and are believed there.
//!
//! A follower replica forwards its own socket's callers the same way (see `forward`), naming
//! itself in `forwarded_by_replica`, on a connection with its replica certificate (from a
//! replica of an earlier version: with the forwarding token only replicas can make); such a
//! caller is taken as one of a schedd host.

use super::auth::Credential;
use super::forward::ForwardToken;
use crate::shell::Cluster;
use prost::Message;
use std::path::PathBuf;
use tonic::{Request, Status};
use ysched_common::edge::peer_log;
use ysched_common::{JobId, Owner};
use ysched_proto as pb;

use ysched_common::identity::RELAYED_CALLER_METADATA as CALLER_METADATA;

/// A relayed request's caller, as its agent (or a follower replica) named it.
pub struct Relayed {
    pub owner: Owner,
    /// The relaying agent's node; `None` for a caller a follower replica forwarded (one of a
    /// schedd host, as on schedd's own socket).
    pub node: Option<String>,
    pub home: Option<PathBuf>,
}

/// The caller of a request that arrived on the agent port (its credential already checked):
/// refused unless it names a caller, comes from the node it names (its certificate) and
/// carries the relay token of that node's live session (or comes on that session's
/// connection), and, from a compute node, names a job of the caller's running there; or,
/// forwarded by a replica, comes with that replica's certificate (or, from a replica of an
/// earlier version, the replicas' `forwarded` token; none: this schedd takes no forwarded
/// request).
pub fn relayed_caller<T>(
    req: &Request<T>,
    cluster: &Cluster,
    forwarded: Option<&ForwardToken>,
) -> Result<Relayed, Status> {
    let raw = req
        .metadata()
        .get_bin(CALLER_METADATA)
        .ok_or_else(|| {
            Status::unauthenticated(
                "a client request on the agent port must be relayed by a node agent",
            )
        })?
        .to_bytes()
        .map_err(|_| Status::invalid_argument("unreadable relayed caller"))?;
    let caller = pb::RelayedCaller::decode(raw)
        .map_err(|e| Status::invalid_argument(format!("unreadable relayed caller: {e}")))?;
    let peer = super::tls::conn_info(req)
        .map(|info| info.remote)
        .ok_or_else(|| Status::unauthenticated("a relayed request without a peer address"))?;
    let credential = Credential::of(req)
        .ok_or_else(|| Status::unauthenticated("a relayed request needs a credential"))?;
    match credential {
        Credential::Certificate(identity) => relayer_is_certified(identity, &caller, &peer)?,
        Credential::ClusterKey if caller.forwarded_by_replica != 0 => {
            forwarded_with_token(&caller, forwarded, &peer)?
        }
        Credential::ClusterKey => {}
    }
    if caller.forwarded_by_replica == 0 && !relay_session(cluster, &caller, &peer)?.login {
        vouched_by_job(cluster, &caller, &peer)?;
    }
    if caller.user.is_empty() {
        return Err(Status::invalid_argument(
            "a relayed caller without a user name",
        ));
    }
    // Names are printed on other users' terminals (`yq`, `yctl audit`).
    for name in std::iter::once(&caller.user).chain(&caller.groups) {
        ysched_common::text::check_printable("relayed user or group name", name)
            .map_err(Status::invalid_argument)?;
    }
    let mut groups = caller.groups;
    if groups.is_empty() {
        groups.push(caller.gid.to_string());
    }
    Ok(Relayed {
        owner: Owner {
            uid: caller.uid,
            gid: caller.gid,
            user: caller.user,
            groups,
        },
        node: (caller.forwarded_by_replica == 0).then_some(caller.node),
        home: (!caller.home.is_empty()).then(|| PathBuf::from(caller.home)),
    })
}

/// A request relayed on a connection with `identity`'s certificate: a host relays only as
/// itself, a replica forwards only as itself.
fn relayer_is_certified(
    identity: &ysched_common::tls::HostIdentity,
    caller: &pb::RelayedCaller,
    peer: &std::net::SocketAddr,
) -> Result<(), Status> {
    let claimed = match (identity.replica_place(), caller.forwarded_by_replica) {
        (Some(place), forwarded) if forwarded == place => return Ok(()),
        (Some(_), 0) => format!(
            "a request relayed for node '{}'",
            ysched_common::edge::cap_message(&caller.node, 64)
        ),
        (None, 0) if caller.node == identity.name => return Ok(()),
        (None, 0) => format!(
            "a request relayed for node '{}'",
            ysched_common::edge::cap_message(&caller.node, 64)
        ),
        (_, forwarded) => format!("a request said to be forwarded by replica {forwarded}"),
    };
    peer_log::warn(
        "refused relayed request",
        &peer.ip().to_string(),
        format_args!("refused {claimed} from {peer}: its certificate names {identity}"),
    );
    Err(Status::permission_denied(format!(
        "this connection's certificate names {identity}: it may not send {claimed}"
    )))
}

/// A request a replica of an earlier version forwarded (on a cluster-key connection): taken
/// with the replicas' forwarding token only.
fn forwarded_with_token(
    caller: &pb::RelayedCaller,
    forwarded: Option<&ForwardToken>,
    peer: &std::net::SocketAddr,
) -> Result<(), Status> {
    if forwarded.is_some_and(|t| t.matches(&caller.relay_token)) {
        return Ok(());
    }
    peer_log::warn(
        "refused forwarded request",
        &peer.ip().to_string(),
        format_args!(
            "refused a client request from {peer} said to be forwarded by replica {}: it \
             carries no valid forwarding token",
            caller.forwarded_by_replica
        ),
    );
    Err(Status::permission_denied(
        "a request forwarded by a replica must come with a replica's certificate; this one \
         does not",
    ))
}

/// The live session of the node a relayed request names, proven by its relay token (or, for
/// agents older than the token, by coming on the session's own connection).
fn relay_session(
    cluster: &Cluster,
    caller: &pb::RelayedCaller,
    peer: &std::net::SocketAddr,
) -> Result<crate::shell::RelaySession, Status> {
    let session = if caller.relay_token.is_empty() {
        cluster.session_on_peer(&caller.node, &peer.to_string())
    } else {
        cluster.relay_session(&caller.node, &caller.relay_token)
    };
    session.ok_or_else(|| {
        let node = ysched_common::edge::cap_message(&caller.node, 64);
        peer_log::warn(
            "refused relayed request",
            &peer.ip().to_string(),
            format_args!(
                "refused a client request relayed from {peer} for node '{node}': it carries \
                 neither the relay token of that node's live agent session nor comes on its \
                 connection"
            ),
        );
        Status::permission_denied(format!(
            "node '{node}' has no live agent session that relays this request: a request is \
             relayed only by a registered agent, with its session's relay token"
        ))
    })
}

/// A compute node relays a user only while a job of theirs runs there: the request names one
/// (`job_id`), and it must hold resources on that node and belong to the caller's uid. Root
/// on a compromised compute node can so speak for the owners of the jobs it runs (whose
/// processes it controls anyway), and for no one else.
fn vouched_by_job(
    cluster: &Cluster,
    caller: &pb::RelayedCaller,
    peer: &std::net::SocketAddr,
) -> Result<(), Status> {
    let job = JobId(caller.job_id);
    if caller.job_id != 0 && cluster.runs_on_as(job, &caller.node, caller.uid) {
        return Ok(());
    }
    let node = ysched_common::edge::cap_message(&caller.node, 64);
    peer_log::warn(
        "refused relayed request",
        &peer.ip().to_string(),
        format_args!(
            "refused a client request of uid {} relayed by compute node '{node}' ({peer}): \
             {}",
            caller.uid,
            match caller.job_id {
                0 => "it names no job of theirs running there".to_string(),
                id => format!("job {id} is not theirs running there"),
            }
        ),
    );
    Err(Status::permission_denied(format!(
        "node '{node}' is a compute node: it relays only the users with a job running on it, \
         and uid {} has none there; run the command on a login host or a scheduler host",
        caller.uid
    )))
}
