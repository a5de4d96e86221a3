//! Hosts' credentials on the wire: the administrators' requests (`yctl node enrol`, `revoke`,
//! `hosts`) and the `Enrolment` service, where a host trades its token and a certificate
//! request for its own certificate.
//!
//! The enrolment service is open to anyone on the agent port: its token is the credential
//! (signed with a key derived from the CA key, for one generation of one host, expiring). A
//! request is bounded before anything is decoded (the service's message limit), the token is
//! checked before the certificate request is read, and the enrolment is durable before the
//! certificate is returned. A refused token is logged, rate-limited per address.

use super::tls::conn_info;
use crate::shell::Cluster;
use std::sync::Arc;
use tonic::{Request, Response, Status};
use ysched_common::edge::peer_log;
use ysched_common::time::now_ms;
use ysched_common::tls::enrol::{MAX_REQUEST_BYTES, MAX_TOKEN_BYTES};
use ysched_common::tls::{ClusterCa, EnrolToken, HostRole};
use ysched_common::{limits, Caller};
use ysched_proto as pb;

/// How long a token is good for when the administrator says nothing: long enough to copy it
/// to the host and start its agent.
pub const DEFAULT_TOKEN_SECS: u64 = 3600;
/// The longest a token may be good for: a token lying around is a host's identity for
/// whoever finds it.
pub const MAX_TOKEN_SECS: u64 = 7 * 24 * 3600;
/// The largest `Enrol` request: a token and a certificate request, with room for framing.
pub const MAX_ENROL_MESSAGE: usize = MAX_TOKEN_BYTES + MAX_REQUEST_BYTES + 1024;

/// `EnrolHost`: a token for host `name`, made by an administrator (audited before it is shown).
pub async fn enrol_token(
    cluster: &Cluster,
    ca: &ClusterCa,
    caller: &Caller,
    req: pb::EnrolHostRequest,
) -> Result<pb::EnrolHostReply, Status> {
    limits::NODE_NAME
        .check_len(&req.name)
        .map_err(Status::invalid_argument)?;
    if req.name.is_empty() {
        return Err(Status::invalid_argument("a host to enrol needs a name"));
    }
    ysched_common::text::check_printable("host name", &req.name)
        .map_err(Status::invalid_argument)?;
    let valid_secs = match req.valid_secs {
        0 => DEFAULT_TOKEN_SECS,
        secs if secs > MAX_TOKEN_SECS => {
            return Err(Status::invalid_argument(format!(
                "a token may be valid for at most {} days (asked: {secs} s)",
                MAX_TOKEN_SECS / 86_400
            )))
        }
        secs => secs,
    };
    let token = EnrolToken {
        role: if req.login {
            HostRole::Login
        } else {
            HostRole::Compute
        },
        generation: cluster.next_generation(&req.name),
        expires_ms: now_ms().saturating_add(valid_secs as i64 * 1000),
        name: req.name,
    };
    cluster.token_made(caller, &token).await?;
    Ok(pb::EnrolHostReply {
        token: token.encode(&ca.token_key()),
        expires_ms: token.expires_ms,
        generation: token.generation,
    })
}

/// `ChangeCluster`: a change of who the replicas are (administrators), on the leader.
pub async fn change_cluster(
    cluster: &Cluster,
    caller: &Caller,
    req: pb::ClusterChangeRequest,
) -> Result<pb::ClusterChangeReply, Status> {
    use crate::replica::MembershipChange;
    let address = req.address.trim().to_string();
    let change = match req.action.as_str() {
        "add" => {
            let host_port = address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if address.len() > 256 || !host_port {
                return Err(Status::invalid_argument(
                    "a replica to add needs its agent-port address, HOST:PORT",
                ));
            }
            ysched_common::text::check_printable("replica address", &address)
                .map_err(Status::invalid_argument)?;
            let id = match req.replica {
                0 => cluster.place_for(&address),
                id => id,
            };
            MembershipChange::Add { id, addr: address }
        }
        "promote" | "remove" if req.replica == 0 => {
            return Err(Status::invalid_argument(
                "name the replica by its place (1, 2, ...)",
            ))
        }
        "promote" => MembershipChange::Promote(req.replica),
        "remove" => MembershipChange::Remove(req.replica),
        other => {
            return Err(Status::invalid_argument(format!(
                "unknown change {:?}: add, promote or remove",
                ysched_common::text::excerpt(other, 32)
            )))
        }
    };
    let replica = match &change {
        MembershipChange::Add { id, .. } => *id,
        MembershipChange::Promote(id) | MembershipChange::Remove(id) => *id,
    };
    let done = cluster.change_membership(caller, &change).await?;
    Ok(pb::ClusterChangeReply { done, replica })
}

/// `ListHosts`: every host ever enrolled (administrators).
pub fn list_hosts(cluster: &Cluster, caller: &Caller) -> Result<pb::HostList, Status> {
    Ok(pb::HostList {
        hosts: cluster
            .hosts(caller)?
            .into_iter()
            .map(|(h, connected)| pb::HostInfo {
                name: h.name,
                role: h.role.as_str().into(),
                generation: h.generation,
                time_ms: h.time,
                revoked: h.revoked,
                connected,
            })
            .collect(),
    })
}

/// The `Enrolment` service of the leader.
#[derive(Clone)]
pub struct EnrolmentApi {
    cluster: Arc<Cluster>,
    ca: Arc<ClusterCa>,
}

impl EnrolmentApi {
    pub fn new(cluster: Arc<Cluster>, ca: Arc<ClusterCa>) -> Self {
        EnrolmentApi { cluster, ca }
    }
}

#[tonic::async_trait]
impl pb::enrolment_server::Enrolment for EnrolmentApi {
    async fn enrol(
        &self,
        req: Request<pb::EnrolRequest>,
    ) -> Result<Response<pb::EnrolReply>, Status> {
        let info = conn_info(&req).cloned();
        let peer = info.as_ref().map_or_else(
            || "an unknown address".to_string(),
            |i| i.remote.to_string(),
        );
        let ip = info
            .as_ref()
            .map_or_else(|| "unknown".to_string(), |i| i.remote.ip().to_string());
        let r = req.into_inner();
        if r.request.len() > MAX_REQUEST_BYTES {
            return Err(Status::invalid_argument(format!(
                "a certificate request is at most {MAX_REQUEST_BYTES} bytes"
            )));
        }
        let now = now_ms();
        let token = EnrolToken::verify(&r.token, &self.ca.token_key(), now).map_err(|e| {
            peer_log::warn(
                "refused enrolment",
                &ip,
                format_args!("refused an enrolment from {peer}: {e}"),
            );
            Status::permission_denied(e.to_string())
        })?;
        let identity = token.identity();
        let certificate = self
            .ca
            .sign_request(&r.request, &identity, now / 1000)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.cluster.enrol_host(&token, &peer).await.map_err(|e| {
            peer_log::warn(
                "refused enrolment",
                &ip,
                format_args!("refused an enrolment of '{}' from {peer}: {e}", token.name),
            );
            Status::from(e)
        })?;
        if let Some(info) = &info {
            info.mark_authenticated();
        }
        Ok(Response::new(pb::EnrolReply { certificate }))
    }
}
