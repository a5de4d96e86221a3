//! Who may use each service of the agent port, checked on a request's headers before its body
//! is decoded: the replicas' link and forwarding take replicas' certificates only; the agents'
//! sessions and relayed requests take hosts' certificates (compute and login) and, while
//! schedd still accepts it (`scheduler.accept_cluster_key`), the shared cluster key; the
//! enrolment service takes anyone (its token is the credential, checked by the service).
//!
//! A request that passes marks its connection authenticated (see
//! [`super::tls::AgentConn`]); one that fails is refused with `UNAUTHENTICATED` and logged,
//! rate-limited per address. Which host a certificate names, and whether that host may do
//! what the request does (register as itself, relay its own users), is for the services.

use super::tls::{conn_info, AgentConnInfo};
use std::sync::Arc;
use tonic::{Request, Status};
use ysched_common::edge::peer_log;
use ysched_common::tls::{HostIdentity, HostRole};

/// The doors of the agent port, each with whom it admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `NodeAgent` sessions and relayed client requests: hosts (and, for relayed requests,
    /// replicas forwarding their clients).
    Agents,
    /// The replicas' `Replication` service.
    Replication,
}

/// How a request on the agent port proved who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A certificate from the cluster CA naming this host.
    Certificate(Arc<HostIdentity>),
    /// The shared cluster key: any host that holds it, whatever name it gives.
    ClusterKey,
}

impl Credential {
    /// The credential of a request that passed [`check`] (in its extensions).
    pub fn of<T>(req: &Request<T>) -> Option<&Credential> {
        req.extensions().get::<Credential>()
    }

    /// The identity, for a certificate.
    pub fn identity(&self) -> Option<&HostIdentity> {
        match self {
            Credential::Certificate(identity) => Some(identity),
            Credential::ClusterKey => None,
        }
    }
}

/// Whether a host's certificate is taken now (its enrolment's generation, not revoked): the
/// leader's records say; a replica that does not lead takes it (it serves agents nothing
/// but where the leader is).
pub type Roster = Arc<dyn Fn(&HostIdentity) -> Result<(), String> + Send + Sync>;

/// The interceptor of `door`: admits a request by its connection's certificate (a host's only
/// while `roster` takes it), or by the cluster `key` (`None`: not accepted), and records how
/// in its extensions ([`Credential`]).
pub fn check(
    door: Door,
    key: Option<Arc<str>>,
    roster: Roster,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |mut req: Request<()>| {
        let info = conn_info(&req).cloned();
        let credential = admit(door, info.as_ref(), &req, key.as_deref(), &roster)?;
        if let Some(info) = &info {
            info.mark_authenticated();
        }
        req.extensions_mut().insert(credential);
        Ok(req)
    }
}

fn admit<T>(
    door: Door,
    info: Option<&AgentConnInfo>,
    req: &Request<T>,
    key: Option<&str>,
    roster: &Roster,
) -> Result<Credential, Status> {
    let peer = info.map_or_else(
        || "an unknown address".to_string(),
        |i| i.remote.to_string(),
    );
    let ip = info.map_or_else(|| "unknown".to_string(), |i| i.remote.ip().to_string());
    let refuse = |what: &'static str, why: String, status: Status| {
        peer_log::warn(
            what,
            &ip,
            format_args!("agent port: refused a request from {peer}: {why}"),
        );
        Err(status)
    };
    match (door, info.and_then(|i| i.identity.clone())) {
        (Door::Replication, Some(identity)) if identity.role == HostRole::Replica => {
            Ok(Credential::Certificate(identity))
        }
        (Door::Replication, identity) => {
            let held = identity.map_or_else(|| "no certificate".to_string(), |i| i.to_string());
            refuse(
                "refused replication",
                format!("the replication service takes replicas' certificates only ({held})"),
                Status::unauthenticated(
                    "the replication service takes replicas' certificates only",
                ),
            )
        }
        (Door::Agents, Some(identity)) => match roster(&identity) {
            Ok(()) => Ok(Credential::Certificate(identity)),
            Err(why) => refuse(
                "certificate not taken",
                format!("the certificate of {identity} is not taken: {why}"),
                Status::permission_denied(format!("this host's certificate is not taken: {why}")),
            ),
        },
        (Door::Agents, None) => {
            let given = req
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            match (key, given) {
                (Some(key), Some(given)) if constant_time_eq(given.as_bytes(), key.as_bytes()) => {
                    Ok(Credential::ClusterKey)
                }
                (Some(_), _) => refuse(
                    "wrong cluster key",
                    "no certificate, and a wrong or missing cluster key".into(),
                    Status::unauthenticated(
                        "wrong or missing cluster key (and no host certificate: enrol this \
                         host with `yctl node enrol NAME`)",
                    ),
                ),
                (None, _) => refuse(
                    "no certificate",
                    "no host certificate (this schedd takes no cluster key)".into(),
                    Status::unauthenticated(
                        "this schedd takes only enrolled hosts' certificates, not the cluster \
                         key: enrol this host (`yctl node enrol NAME` on a scheduler host, then \
                         noded --enrol-token FILE)",
                    ),
                ),
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
