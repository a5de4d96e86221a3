//! How replicas talk: openraft's network over a [`Link`], which carries each message and its
//! answer as bytes (gRPC between schedd processes, in `server`; a direct call in tests), so
//! that this module knows openraft and not the transport.

use super::reachability::Reachability;
use super::{decode, encode, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The kinds of message between replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Log entries (or a heartbeat) from the leader.
    Append,
    /// A candidate asks for a vote.
    Vote,
    /// A chunk of the leader's snapshot, for a replica whose log is behind what it kept.
    Snapshot,
}

impl Message {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Message::Append => "append",
            Message::Vote => "vote",
            Message::Snapshot => "snapshot",
        }
    }

    /// The message a name on the wire names.
    pub fn parse(name: &str) -> Option<Message> {
        [Message::Append, Message::Vote, Message::Snapshot]
            .into_iter()
            .find(|m| m.as_str() == name)
    }
}

/// A replica could not be reached, or did not answer.
#[derive(Debug, thiserror::Error)]
#[error("replica {target} at {addr}: {why}")]
pub struct LinkError {
    pub target: u64,
    pub addr: String,
    pub why: String,
}

impl LinkError {
    pub fn new(target: u64, addr: &str, why: impl Into<String>) -> Self {
        LinkError {
            target,
            addr: addr.to_string(),
            why: why.into(),
        }
    }
}

/// What an answer of a [`Link`] is.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, LinkError>> + Send + 'a>>;

/// Carries a message to replica `target` (at `addr`, as the membership names it) and brings
/// its answer back.
pub trait Link: Send + Sync + 'static {
    fn call<'a>(
        &'a self,
        target: u64,
        addr: &'a str,
        message: Message,
        body: Vec<u8>,
    ) -> Answer<'a>;
}

/// openraft's network: a [`Peer`] per replica, over one [`Link`].
#[derive(Clone)]
pub struct Network {
    link: Arc<dyn Link>,
    reachability: Arc<Reachability>,
}

impl Network {
    pub fn new(link: Arc<dyn Link>) -> Self {
        Network {
            link,
            reachability: Arc::default(),
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Peer {
        Peer {
            link: Arc::clone(&self.link),
            reachability: Arc::clone(&self.reachability),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// Another replica, as this one's leader or candidate sends to it.
pub struct Peer {
    link: Arc<dyn Link>,
    reachability: Arc<Reachability>,
    target: u64,
    addr: String,
}

impl Peer {
    async fn send<Req, Resp, E>(
        &self,
        message: Message,
        request: &Req,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        E: std::error::Error + serde::de::DeserializeOwned,
    {
        let answer = match self
            .link
            .call(self.target, &self.addr, message, encode(request))
            .await
        {
            Ok(answer) => {
                self.reachability.answered(self.target);
                answer
            }
            Err(e) => {
                self.reachability.failed(self.target, &self.addr, &e.why);
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
        };
        let result: Result<Resp, RaftError<u64, E>> =
            decode(&answer).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(Message::Append, &rpc).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.send(Message::Snapshot, &rpc).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(Message::Vote, &rpc).await
    }
}

/// This replica's answer to a message from another: `body` decoded and handed to `raft`,
/// its answer encoded. A body that cannot be read is refused.
pub async fn answer(
    raft: &Raft<TypeConfig>,
    message: Message,
    body: &[u8],
) -> Result<Vec<u8>, serde_json::Error> {
    Ok(match message {
        Message::Append => encode(&raft.append_entries(decode(body)?).await),
        Message::Vote => encode(&raft.vote(decode(body)?).await),
        Message::Snapshot => encode(&raft.install_snapshot(decode(body)?).await),
    })
}
