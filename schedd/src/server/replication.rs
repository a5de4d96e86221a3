//! The replicas' link over gRPC: the `Replication` service, which hands another replica's
//! Raft messages to this one's and tells its Raft state (`yctl cluster`), and [`GrpcLink`],
//! which sends this one's and asks the others': over TLS with the cluster CA, each replica
//! presenting the certificate it issued itself at start (role `replica`, its place), which
//! the service requires before a message is decoded (see `auth`), and whose place must be the
//! message's sender: an agent's host, which holds no CA key, cannot speak Raft to a replica.

use crate::replica::network::{answer, Answer, Link, LinkError, Message};
use crate::replica::{RaftStatus, Replica};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// This replica's own certificate and key (issued at start with the CA key).
pub type ReplicaCertificate = ysched_common::tls::Issued;
use tonic::{Request, Response, Status};
use ysched_proto as pb;

/// How long one message to another replica may take: a heartbeat is answered in
/// milliseconds, a chunk of a snapshot (openraft's 3 MiB) in well under this.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a replica asked for its state (`yctl cluster`) may take before it is shown
/// unreachable: it answers from memory, in milliseconds.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// The `Replication` service of replica `place`.
pub struct ReplicationApi {
    replica: Replica,
}

impl ReplicationApi {
    pub fn new(replica: Replica) -> Self {
        ReplicationApi { replica }
    }
}

#[tonic::async_trait]
impl pb::replication_server::Replication for ReplicationApi {
    async fn raft(
        &self,
        req: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftAnswer>, Status> {
        let sender = sender_place(&req)?;
        let peer = super::tls::conn_info(&req)
            .map_or_else(|| "an unknown address".into(), |i| i.remote.to_string());
        let m = req.into_inner();
        if m.from != sender {
            return Err(refuse_sender(&peer, sender, m.from));
        }
        if m.to != self.replica.id {
            return Err(Status::invalid_argument(format!(
                "this is replica {}, not {} (replica {} sent it): is scheduler.replicas the same \
                 list, in the same order, on every host?",
                self.replica.id, m.to, m.from
            )));
        }
        let kind = Message::parse(&m.kind).ok_or_else(|| {
            Status::invalid_argument(format!(
                "unknown replication message {:?}",
                ysched_common::text::excerpt(&m.kind, 32)
            ))
        })?;
        // A replica that started with an empty store takes no message before it knows
        // where it stands (a leader could otherwise make it a voter while it is still asking,
        // and it would take that for a vote it had before), and votes only once it knows it
        // may (see `replica::voting`): refused here, so that its Raft never grants one.
        let voting = self.replica.voting.state();
        if kind == Message::Vote || voting == crate::replica::Voting::Undecided {
            if let Some(why) = self.replica.voting.refusal(self.replica.id) {
                return Err(Status::failed_precondition(why));
            }
        }
        let body = answer(&self.replica.raft, kind, &m.body)
            .await
            .map_err(|e| Status::invalid_argument(format!("unreadable {} message: {e}", m.kind)))?;
        Ok(Response::new(pb::RaftAnswer { body }))
    }

    async fn status(
        &self,
        req: Request<pb::ReplicaStatusRequest>,
    ) -> Result<Response<pb::ReplicaStatus>, Status> {
        sender_place(&req)?;
        let asked = req.into_inner();
        if asked.to != self.replica.id {
            return Err(Status::invalid_argument(format!(
                "this is replica {}, not {} (replica {} asked): is scheduler.replicas the same \
                 list, in the same order, on every host?",
                self.replica.id, asked.to, asked.from
            )));
        }
        Ok(Response::new(status_message(
            self.replica.id,
            &self.replica.status(),
        )))
    }
}

/// The place of the replica whose certificate the request came with (the interceptor let
/// only replicas' certificates through: see `auth`).
fn sender_place<T>(req: &Request<T>) -> Result<u64, Status> {
    super::auth::Credential::of(req)
        .and_then(|c| c.identity())
        .and_then(|identity| identity.replica_place())
        .ok_or_else(|| Status::unauthenticated("the replication service takes replicas only"))
}

/// A message whose sender is not the replica its certificate names: logged (rate-limited)
/// and refused before openraft sees it, so that a term it carries moves nothing.
fn refuse_sender(peer: &str, sender: u64, claimed: u64) -> Status {
    ysched_common::edge::peer_log::warn(
        "replication sender mismatch",
        peer,
        format_args!(
            "refused a replication message from {peer}: its certificate is replica {sender}'s \
             but it says it is from replica {claimed}"
        ),
    );
    Status::permission_denied(format!(
        "this connection is replica {sender}'s; a message from replica {claimed} is refused"
    ))
}

/// Replica `id`'s state as the `Status` answer carries it.
pub fn status_message(id: u64, status: &RaftStatus) -> pb::ReplicaStatus {
    pb::ReplicaStatus {
        replica: id,
        role: status.role.to_string(),
        term: status.term,
        applied: status.applied,
        last_log: status.last_log,
        leader: status.leader,
        voters: status.voters.clone(),
        learners: status.learners.clone(),
        votes: status.votes,
        members: status
            .members
            .iter()
            .map(|(id, addr)| pb::ReplicaAddress {
                replica: *id,
                address: addr.clone(),
            })
            .collect(),
    }
}

/// Connections to the other replicas, one per address, made at first use (and again by
/// tonic after a failure): over TLS, trusting the cluster CA only, presenting this replica's
/// own certificate.
pub struct Channels {
    tls: ClientTlsConfig,
    open: Mutex<BTreeMap<String, Channel>>,
}

impl Channels {
    pub fn new(ca_pem: &str, own: &ReplicaCertificate) -> Self {
        Channels {
            tls: ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca_pem))
                .domain_name(ysched_common::tls::SCHEDD_TLS_NAME)
                .identity(Identity::from_pem(&own.cert_pem, &own.key_pem)),
            open: Mutex::default(),
        }
    }

    /// The connection to the replica at `addr`.
    pub fn get(&self, addr: &str) -> Result<Channel, String> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.get(addr) {
            return Ok(c.clone());
        }
        let channel = Endpoint::from_shared(format!("https://{addr}"))
            .map_err(|e| format!("bad address: {e}"))?
            .tls_config(self.tls.clone())
            .map_err(|e| format!("TLS: {e}"))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .connect_lazy();
        open.insert(addr.to_string(), channel.clone());
        Ok(channel)
    }
}

/// Sends this replica's Raft messages to the others, one connection each (made at the first
/// message, and again by tonic after a failure).
pub struct GrpcLink {
    from: u64,
    /// The cluster key, for replicas of a version that knows no replica certificates (they
    /// take this replica's messages during a rolling upgrade); `None`: none is sent.
    authorization: Option<MetadataValue<Ascii>>,
    max_message: usize,
    channels: Channels,
}

impl GrpcLink {
    /// The link of replica `from`, trusting `ca_pem`, presenting `own`, and carrying the
    /// cluster `key` if there is one.
    pub fn new(
        from: u64,
        key: Option<&str>,
        ca_pem: &str,
        own: &ReplicaCertificate,
        max_message: usize,
    ) -> anyhow::Result<Self> {
        Ok(GrpcLink {
            from,
            authorization: key.map(bearer).transpose()?,
            max_message,
            channels: Channels::new(ca_pem, own),
        })
    }

    /// Replica `target`'s (at `addr`) Raft state, or why it could not be had within
    /// [`STATUS_TIMEOUT`].
    pub async fn status(&self, target: u64, addr: &str) -> Result<pb::ReplicaStatus, LinkError> {
        let failed = |why: String| LinkError::new(target, addr, why);
        let channel = self.channels.get(addr).map_err(failed)?;
        let mut client = pb::replication_client::ReplicationClient::new(channel);
        let mut req = Request::new(pb::ReplicaStatusRequest {
            from: self.from,
            to: target,
        });
        req.set_timeout(STATUS_TIMEOUT);
        if let Some(authorization) = &self.authorization {
            req.metadata_mut()
                .insert("authorization", authorization.clone());
        }
        // The deadline covers connecting too (a stopped host never answers the handshake).
        match tokio::time::timeout(STATUS_TIMEOUT, client.status(req)).await {
            Ok(Ok(answer)) => Ok(answer.into_inner()),
            Ok(Err(status)) => Err(failed(format!("{:?}: {}", status.code(), status.message()))),
            Err(_) => Err(failed(format!("no answer within {STATUS_TIMEOUT:?}"))),
        }
    }
}

/// The `authorization` metadata carrying the cluster `key`.
pub fn bearer(key: &str) -> anyhow::Result<MetadataValue<Ascii>> {
    format!("Bearer {key}")
        .parse()
        .map_err(|_| anyhow::anyhow!("the cluster key is not printable ASCII"))
}

impl Link for GrpcLink {
    fn call<'a>(
        &'a self,
        target: u64,
        addr: &'a str,
        message: Message,
        body: Vec<u8>,
    ) -> Answer<'a> {
        Box::pin(async move {
            let failed = |why: String| LinkError::new(target, addr, why);
            let channel = self.channels.get(addr).map_err(failed)?;
            let mut client = pb::replication_client::ReplicationClient::new(channel)
                .max_decoding_message_size(self.max_message)
                .max_encoding_message_size(self.max_message);
            let mut req = Request::new(pb::RaftMessage {
                from: self.from,
                to: target,
                kind: message.as_str().into(),
                body,
            });
            req.set_timeout(CALL_TIMEOUT);
            if let Some(authorization) = &self.authorization {
                req.metadata_mut()
                    .insert("authorization", authorization.clone());
            }
            match client.raft(req).await {
                Ok(answer) => Ok(answer.into_inner().body),
                Err(status) => Err(failed(format!("{:?}: {}", status.code(), status.message()))),
            }
        })
    }
}
