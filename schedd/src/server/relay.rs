//! Client requests relayed by node agents: every noded serves the client API on its own
//! socket, identifies each caller there by `SO_PEERCRED`, and forwards the request to schedd's
//! agent port on the connection of its authenticated session, naming the caller in the
//! binary metadata [`CALLER_METADATA`] (a `RelayedCaller`).
//!
//! The trust model is munge's: a host holding the cluster key vouches for its local users. A
//! relayed caller is taken only from a connection that passed the cluster-key check and on
//! which the named node's agent session is registered, so one host cannot speak for another.

use crate::shell::Cluster;
use prost::Message;
use std::path::PathBuf;
use tonic::{Request, Status};
use ysched_common::Owner;
use ysched_proto as pb;

use ysched_common::identity::RELAYED_CALLER_METADATA as CALLER_METADATA;

/// A relayed request's caller, as its agent named it.
pub struct Relayed {
    pub owner: Owner,
    /// The relaying agent's node.
    pub node: String,
    pub home: Option<PathBuf>,
}

/// The caller of a request that arrived on the agent port (its cluster key already checked):
/// refused unless it names a caller and comes on the session connection of the node it names.
pub fn relayed_caller<T>(req: &Request<T>, cluster: &Cluster) -> Result<Relayed, Status> {
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
    let peer = req
        .remote_addr()
        .map(|a| a.to_string())
        .ok_or_else(|| Status::unauthenticated("a relayed request without a peer address"))?;
    if !cluster.is_session_peer(&caller.node, &peer) {
        tracing::warn!(
            node = %caller.node,
            "refused a client request relayed from {peer}: it is not the connection of node \
             {}'s agent session",
            caller.node
        );
        return Err(Status::permission_denied(format!(
            "node '{}' has no agent session on this connection: a request is relayed only \
             by a registered agent, on its own session's connection",
            caller.node
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
        node: caller.node,
        home: (!caller.home.is_empty()).then(|| PathBuf::from(caller.home)),
    })
}
