//! Client requests relayed by node agents: every noded serves the client API on its own
//! socket, identifies each caller there by `SO_PEERCRED`, and forwards the request to schedd's
//! agent port, naming the caller in the binary metadata [`CALLER_METADATA`] (a
//! `RelayedCaller`).
//!
//! The trust model is munge's: a host holding the cluster key vouches for its local users. A
//! relayed caller is taken only from a request that passed the cluster-key check and that
//! carries the relay token of the named node's live agent session: a secret schedd gave that
//! session alone, in its `Registered`. So one host cannot speak for another. Agents relay on a
//! connection of their own, not the session's, so that nothing a relayed request does (a huge
//! answer, a protocol error, a stalled stream) can touch the session. Agents older than the
//! token relay on their session's connection, and are believed there.
//!
//! A follower replica forwards its own socket's callers the same way (see `forward`), naming
//! itself in `forwarded_by_replica` and proving it is a replica with the forwarding token
//! only replicas can make; such a caller is taken as one of a schedd host.

use super::forward::ForwardToken;
use crate::shell::Cluster;
use prost::Message;
use std::path::PathBuf;
use tonic::{Request, Status};
use ysched_common::edge::peer_log;
use ysched_common::Owner;
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

/// The caller of a request that arrived on the agent port (its cluster key already checked):
/// refused unless it names a caller and carries the relay token of the node it names (or
/// comes on that node's session connection), or, forwarded by a replica, the replicas'
/// `forwarded` token (none: this schedd takes no forwarded request).
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
    if caller.forwarded_by_replica != 0
        && !forwarded.is_some_and(|t| t.matches(&caller.relay_token))
    {
        peer_log::warn(
            "refused forwarded request",
            &peer.ip().to_string(),
            format_args!(
                "refused a client request from {peer} said to be forwarded by replica {}: it \
                 carries no valid forwarding token",
                caller.forwarded_by_replica
            ),
        );
        return Err(Status::permission_denied(
            "a request forwarded by a replica must carry the replicas' forwarding token \
             (derived from the cluster CA's key); this one does not",
        ));
    }
    let believed = if caller.forwarded_by_replica != 0 {
        // Checked just above.
        true
    } else if caller.relay_token.is_empty() {
        cluster.is_session_peer(&caller.node, &peer.to_string())
    } else {
        cluster.is_relay_token(&caller.node, &caller.relay_token)
    };
    if !believed {
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
        return Err(Status::permission_denied(format!(
            "node '{node}' has no live agent session that relays this request: a request is \
             relayed only by a registered agent, with its session's relay token"
        )));
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
