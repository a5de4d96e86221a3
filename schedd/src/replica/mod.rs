//! schedd's replicas: the only module that knows openraft. A replicated entry
//! carries one event's store batch (`store::Batch`); each replica appends entries to its own
//! log and applies the committed ones, in order, to its own store.
//!
//! Here: the log ([`LogStore`]) and the state machine ([`StateMachine`]) over the
//! replica's `store::Store`, checked against openraft's own storage test suite; what a
//! follower keeps warm for the day it leads ([`Warm`]); the network over a transport-neutral
//! [`network::Link`] (its gRPC side is `server::replication`); a [`Replica`] that starts,
//! joins and replicates; whether it may vote ([`voting`]: a replica that lost its store does
//! not); the membership changes administrators make (`membership`); which other replicas
//! answer (`reachability`: a down one logged once, then rarely); tests of three replicas in
//! one process (`tests`, `cluster_tests`).

// openraft's `StorageError` is what its traits return, large as it is.
#![allow(clippy::result_large_err)]

#[cfg(test)]
mod cluster_tests;
mod log_store;
mod membership;
pub mod network;
mod node;
mod reachability;
mod state_machine;
#[cfg(test)]
mod tests;
pub mod voting;

pub use log_store::LogStore;
pub use membership::MembershipChange;
pub use node::{RaftStatus, Replica, ReplicaError, Timing};
pub use state_machine::{StateMachine, Warm};
pub use voting::{VoteGuard, Voting};

openraft::declare_raft_types!(
    /// The replicas' Raft: an entry's data is a store batch; applying it answers nothing
    /// (the leader answered its client from its own event before proposing).
    pub TypeConfig:
        D = crate::store::Batch,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A replica's storage error, as openraft takes it.
type StorageError = openraft::StorageError<u64>;

/// Encodes what the replica keeps (entries, votes, log ids, memberships).
fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("openraft's types serialize")
}

/// Decodes what [`encode`] made.
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(bytes)
}
