//! A follower forwards its client socket's requests to the leader, so that the CLIs on any
//! replica's host work: the caller is the one the kernel named on the follower's socket
//! (`SO_PEERCRED`), sent to the leader's agent port as a `RelayedCaller` with
//! `forwarded_by_replica` set, on a connection with the follower's replica certificate, which
//! the leader requires of a forwarded caller (see `relay`): an agent's host cannot pass its
//! users off as a schedd host's.
//!
//! The caller also carries the replicas' [`ForwardToken`], derived from the cluster CA's
//! private key, for a leader of a version that knows no replica certificates (and took
//! forwarded callers from holders of the cluster key with it). The request goes on as it
//! came (its body streamed, `WatchJob`'s answer too), with none of the client's metadata
//! but the gRPC protocol's own headers; the leader's answer comes back as it is.

use super::replication::{bearer, Channels, ReplicaCertificate};
use std::sync::Arc;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::Status;
use ysched_common::edge::passed_on::passed_on;
use ysched_common::identity::{relayed_caller, Handover, Hop, RELAYED_CALLER_METADATA};

/// The leader's answer as the client gets it: should it break off (the leader gone in the
/// middle of a `WatchJob` stream), the client's stream ends with `UNAVAILABLE`, which the
/// tools take as a cue to ask again, rather than with the connection's own error (an HTTP/2
/// reset, which reads as an internal error).
struct BrokenOffAsUnavailable {
    body: Body,
    ended: bool,
}

impl tonic::codegen::Body for BrokenOffAsUnavailable {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                let status = Status::unavailable(format!(
                    "the leader's answer broke off ({}); ask again",
                    e.message()
                ));
                let mut trailers = http::HeaderMap::new();
                let _ = status.add_header(&mut trailers);
                Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The replicas' proof of being one, on a forwarded request: HMAC-SHA256 of a fixed label,
/// keyed by the cluster CA's private key (the same on every replica; agents have only the
/// certificate).
#[derive(Clone)]
pub struct ForwardToken(Arc<[u8]>);

impl ForwardToken {
    pub fn from_ca_key(ca_key_pem: &str) -> Self {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, ca_key_pem.as_bytes());
        let tag = ring::hmac::sign(&key, b"ysched: a request forwarded by a replica, v1");
        ForwardToken(tag.as_ref().into())
    }

    /// Whether `given` is this token, in time independent of where they differ.
    pub fn matches(&self, given: &[u8]) -> bool {
        given.len() == self.0.len()
            && given
                .iter()
                .zip(self.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

impl std::fmt::Debug for ForwardToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForwardToken(..)")
    }
}

/// Forwards client requests of replica `place` to the leader.
pub struct Forwarder {
    place: u64,
    token: ForwardToken,
    /// The cluster key, for a leader of an earlier version (see the module docs).
    authorization: Option<MetadataValue<Ascii>>,
    /// Connections of their own, not the Raft link's: a large answer (a listing of every
    /// job) must not hold up the heartbeats that keep the leader leading.
    channels: Channels,
}

impl Forwarder {
    pub fn new(
        place: u64,
        token: ForwardToken,
        key: Option<&str>,
        ca_pem: &str,
        own: &ReplicaCertificate,
    ) -> anyhow::Result<Forwarder> {
        Ok(Forwarder {
            place,
            token,
            authorization: key.map(bearer).transpose()?,
            channels: Channels::new(ca_pem, own),
        })
    }

    /// `req`, from this replica's client socket, served by the leader (replica `leader` at
    /// `addr`). When it cannot be forwarded, `UNAVAILABLE` with `why` (which names the leader)
    /// and the reason.
    pub async fn forward(
        &self,
        req: http::Request<Body>,
        leader: u64,
        addr: &str,
        why: &str,
    ) -> http::Response<Body> {
        match self.forwarded(req, addr).await {
            Ok(answer) => answer,
            Err(Refusal::Caller(status)) => status.into_http(),
            Err(Refusal::Unreachable(e)) => Status::unavailable(format!(
                "{why}; forwarding the request to replica {leader} failed: {e}"
            ))
            .into_http(),
        }
    }

    async fn forwarded(
        &self,
        req: http::Request<Body>,
        addr: &str,
    ) -> Result<http::Response<Body>, Refusal> {
        let cred = req
            .extensions()
            .get::<ysched_common::edge::unix_listener::ClientConnectInfo>()
            .and_then(|info| info.peer_cred())
            .ok_or_else(|| {
                Refusal::Caller(Status::unauthenticated(
                    "no peer credentials on this connection",
                ))
            })?;
        let (parts, body) = req.into_parts();
        let caller = self
            .caller(cred.uid(), cred.gid())
            .await
            .map_err(Refusal::Caller)?;
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let uri: http::Uri = format!("https://{addr}{path}")
            .parse()
            .map_err(|e| Refusal::Unreachable(format!("bad address {addr}: {e}")))?;
        let mut metadata = MetadataMap::new();
        if let Some(authorization) = &self.authorization {
            metadata.insert("authorization", authorization.clone());
        }
        metadata.insert_bin(RELAYED_CALLER_METADATA, MetadataValue::from_bytes(&caller));
        let outgoing = passed_on(parts, body, uri, metadata);
        let channel = self.channels.get(addr).map_err(Refusal::Unreachable)?;
        use tower::ServiceExt;
        let answer = channel
            .oneshot(outgoing)
            .await
            .map_err(|e| Refusal::Unreachable(transport_error(&e)))?;
        Ok(answer.map(|body| Body::new(BrokenOffAsUnavailable { body, ended: false })))
    }

    /// The caller the kernel named (`uid`, `gid`), encoded as the leader reads it.
    async fn caller(&self, uid: u32, gid: u32) -> Result<Vec<u8>, Status> {
        let handover = Handover {
            relay_token: self.token.0.to_vec(),
            forwarded_by_replica: self.place,
            ..Handover::default()
        };
        relayed_caller(uid, gid, Hop::Forward, handover).await
    }
}

/// Why a request was not forwarded.
enum Refusal {
    /// The caller's own request cannot be (no credentials, an identity too large).
    Caller(Status),
    /// The leader could not be reached.
    Unreachable(String),
}

/// A transport error with its causes (tonic's own message is only "transport error").
fn transport_error(e: &tonic::transport::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forward_token_follows_the_ca_key_and_is_compared_whole() {
        let token = ForwardToken::from_ca_key("-----BEGIN PRIVATE KEY-----\nabc\n");
        let same = ForwardToken::from_ca_key("-----BEGIN PRIVATE KEY-----\nabc\n");
        let other = ForwardToken::from_ca_key("-----BEGIN PRIVATE KEY-----\nabd\n");
        assert!(token.matches(&same.0));
        assert!(!token.matches(&other.0));
        assert!(!token.matches(&same.0[..31]));
        assert!(!token.matches(b""));
    }
}
