//! One replica: its Raft over its store, started, joined to the others, and asked to
//! replicate a batch.

use super::network::{Link, Network};
use super::{LogStore, StateMachine, TypeConfig, VoteGuard, Warm};
use crate::store::{Batch, Store};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How fast replicas notice each other (milliseconds): the leader's heartbeat, and the
/// silence after which a follower stands for election (a random time in the range).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Entries applied between snapshots; the log before a snapshot is purged.
    pub snapshot_every: u64,
}

impl Default for Timing {
    fn default() -> Self {
        // A follower stands for election after a silence of openraft's leader lease (the
        // longest election timeout) plus a random election timeout: 1.5 to 2 s here, so that
        // a new leader serves within 3 s of a leader's death. With 0.8-1.6 s it
        // was 2.4 to 3.2 s of silence, and clients saw a gap of 3.1 s (p50, `bench
        // replicas`). Followers refuse votes while they hear from a leader, so a slow
        // replica cannot unseat a live one; a leader unheard for 1.5 s is replaced.
        Timing {
            heartbeat_ms: 150,
            election_min_ms: 500,
            election_max_ms: 1000,
            snapshot_every: 10_000,
        }
    }
}

/// The most entries one `AppendEntries` carries. openraft gives each the heartbeat interval
/// to be answered (its timeout is `heartbeat_interval`, 150 ms), and resends the same
/// entries, and those proposed meanwhile, after a timeout: with its default of 300 a
/// follower that fell behind on a loaded host was sent more than it could decode and write
/// in 150 ms, again and again, and the leader never heard a majority (CI, kill -9 under four
/// clients: no leader served for 24 s). A small bound keeps each message's work small, so
/// that a slow follower still catches up a piece at a time.
const MAX_ENTRIES_PER_APPEND: u64 = 16;

/// See `install_snapshot_timeout` in [`Replica::start`].
const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 120_000;

/// Why a replica could not start or replicate.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("replica settings: {0}")]
    Settings(String),
    #[error("replica: {0}")]
    Fatal(String),
    /// Not the leader: the leader this replica knows of, if any (id and address).
    #[error("not the leader{}", .0.as_ref().map(|(id, addr)| format!(": replica {id} at {addr} is")).unwrap_or_default())]
    NotLeader(Option<(u64, String)>),
    /// The leader could not reach a majority.
    #[error("no quorum: {0}")]
    NoQuorum(String),
}

/// A replica's Raft state, as its own metrics say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    /// "leader", "follower", "candidate", "learner", or "stopped" (its Raft shut down).
    pub role: &'static str,
    pub term: u64,
    /// The last log index applied to its store (0: none).
    pub applied: u64,
    /// The last log index in its log (0: none).
    pub last_log: u64,
    /// The replica it knows to lead.
    pub leader: Option<u64>,
    /// The voters and the learners of the membership it knows, with their addresses.
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub members: BTreeMap<u64, String>,
    /// Whether it grants votes (see [`super::voting`]).
    pub votes: bool,
}

/// A started replica.
#[derive(Clone)]
pub struct Replica {
    pub id: u64,
    pub raft: Raft<TypeConfig>,
    /// How recent a majority's acknowledgement must be for [`Replica::has_quorum`].
    quorum_fresh_ms: u64,
    /// How long a leader goes on unacknowledged by a majority before it steps down (see
    /// [`Replica::quorum_lost`]).
    lease_ms: u64,
    /// Its state machine: what it keeps warm for the day it leads.
    state: StateMachine,
    /// Whether it may vote (a replica that lost its store may not).
    pub voting: VoteGuard,
}

impl Replica {
    /// Starts replica `id` over `store`, reaching the others through `link`; it keeps
    /// nothing warm (see [`Replica::start_keeping_warm`]).
    pub async fn start(
        id: u64,
        store: Store,
        link: Arc<dyn Link>,
        timing: Timing,
    ) -> Result<Replica, ReplicaError> {
        Self::start_with(id, StateMachine::new(store.clone()), store, link, timing).await
    }

    /// [`Replica::start`] of a replica that keeps warm what it needs to lead ([`Warm`]:
    /// read from `store` now, then kept up to date as it applies entries); the usage book
    /// decays with `usage_half_life_ms` (the fair share's).
    pub async fn start_keeping_warm(
        id: u64,
        store: Store,
        link: Arc<dyn Link>,
        timing: Timing,
        usage_half_life_ms: i64,
    ) -> Result<Replica, ReplicaError> {
        let state = StateMachine::keeping_warm(store.clone(), usage_half_life_ms)
            .map_err(|e| ReplicaError::Fatal(format!("cannot read the state: {e}")))?;
        Self::start_with(id, state, store, link, timing).await
    }

    async fn start_with(
        id: u64,
        state: StateMachine,
        store: Store,
        link: Arc<dyn Link>,
        timing: Timing,
    ) -> Result<Replica, ReplicaError> {
        let config = openraft::Config {
            cluster_name: "ysched".into(),
            heartbeat_interval: timing.heartbeat_ms,
            election_timeout_min: timing.election_min_ms,
            election_timeout_max: timing.election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(timing.snapshot_every),
            max_in_snapshot_log_to_keep: 0,
            // How long one piece of a snapshot may take to send, and the last one to send and
            // install: openraft's 200 ms is far less than installing the state of 100,000 jobs
            // takes (seconds), and a piece that runs out sends the snapshot again from the
            // start (`bench replicas_catch_up`: 414 s to catch up with it).
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
            max_payload_entries: MAX_ENTRIES_PER_APPEND,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ReplicaError::Settings(e.to_string()))?;
        let voting = VoteGuard::open(&store)
            .map_err(|e| ReplicaError::Fatal(format!("cannot read the replica's store: {e}")))?;
        let raft = Raft::new(
            id,
            Arc::new(config),
            Network::new(link),
            LogStore::new(store),
            state.clone(),
        )
        .await
        .map_err(|e| ReplicaError::Fatal(e.to_string()))?;
        tokio::spawn(super::voting::follow_membership(
            raft.clone(),
            id,
            voting.clone(),
        ));
        Ok(Replica {
            id,
            raft,
            quorum_fresh_ms: timing.election_min_ms,
            // A follower stands for election after the leader lease (the longest election
            // timeout) and a random election timeout: no other leader can exist before the
            // shortest such silence.
            lease_ms: timing.election_max_ms + timing.election_min_ms,
            state,
            voting,
        })
    }

    /// What this replica kept warm, for it to lead with, if it covers the last entry it
    /// applied (see [`StateMachine::take_warm`]); kept no longer after this.
    pub fn take_warm(&self) -> Option<Warm> {
        self.state.take_warm()
    }

    /// After stepping down: keeps warm again what leading needs, read from the store (see
    /// [`StateMachine::keep_warm_again`]). Blocking: a whole read of the state.
    pub fn keep_warm_again(&self) {
        self.state.keep_warm_again()
    }

    /// Makes the first membership: every replica (id → address). Done once, by one replica,
    /// on a cluster that never had one; a replica that has one already refuses, harmlessly.
    pub async fn initialize(&self, members: &BTreeMap<u64, String>) -> Result<(), ReplicaError> {
        let nodes: BTreeMap<u64, BasicNode> = members
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ReplicaError::Fatal(e.to_string())),
        }
    }

    /// Replicates `batch`: returns once a majority has it in its log and this replica (the
    /// leader) applied it to its store.
    pub async fn replicate(&self, batch: Batch) -> Result<u64, ReplicaError> {
        match self.raft.client_write(batch).await {
            Ok(written) => Ok(written.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(
                ReplicaError::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr))),
            ),
            Err(RaftError::APIError(e)) => Err(ReplicaError::NoQuorum(e.to_string())),
            Err(RaftError::Fatal(e)) => Err(ReplicaError::Fatal(e.to_string())),
        }
    }

    /// Replicates `batches` in their order, as one entry each, all sent before any is
    /// waited for (openraft appends and sends them together).
    pub async fn replicate_all(&self, batches: Vec<Batch>) -> Result<(), ReplicaError> {
        let mut answers = Vec::with_capacity(batches.len());
        for batch in batches {
            answers.push(
                self.raft
                    .client_write_ff(batch)
                    .await
                    .map_err(|e| ReplicaError::Fatal(e.to_string()))?,
            );
        }
        for answer in answers {
            match answer.await {
                Ok(Ok(_)) => {}
                Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
                    return Err(ReplicaError::NotLeader(
                        f.leader_id.zip(f.leader_node.map(|n| n.addr)),
                    ))
                }
                Ok(Err(e)) => return Err(ReplicaError::NoQuorum(e.to_string())),
                Err(e) => return Err(ReplicaError::Fatal(e.to_string())),
            }
        }
        Ok(())
    }

    /// Whether this replica leads and a majority acknowledged it lately (within the
    /// shortest election timeout, before which no other replica can have been elected): what
    /// an agent's fence lease may be renewed on.
    pub fn has_quorum(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        m.current_leader == Some(self.id)
            && m.millis_since_quorum_ack
                .is_some_and(|ms| ms < self.quorum_fresh_ms)
    }

    /// While this replica leads: how long (ms) no majority has acknowledged it, once that is
    /// a leader's lease or more; `None` otherwise. A leader past it steps down: another
    /// replica may have been elected meanwhile.
    pub fn quorum_lost(&self) -> Option<u64> {
        let m = self.raft.metrics().borrow().clone();
        (m.current_leader == Some(self.id))
            .then_some(m.millis_since_quorum_ack)
            .flatten()
            .filter(|ms| *ms >= self.lease_ms)
    }

    /// See [`Replica::quorum_lost`].
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// This replica's Raft state, as its metrics say now (`yctl cluster`).
    pub fn status(&self) -> RaftStatus {
        let m = self.raft.metrics().borrow().clone();
        RaftStatus {
            role: match m.state {
                openraft::ServerState::Leader => "leader",
                openraft::ServerState::Follower => "follower",
                openraft::ServerState::Candidate => "candidate",
                openraft::ServerState::Learner => "learner",
                openraft::ServerState::Shutdown => "stopped",
            },
            term: m.current_term,
            applied: m.last_applied.map_or(0, |l| l.index),
            last_log: m.last_log_index.unwrap_or(0),
            leader: m.current_leader,
            voters: m.membership_config.membership().voter_ids().collect(),
            learners: m.membership_config.membership().learner_ids().collect(),
            members: m
                .membership_config
                .membership()
                .nodes()
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect(),
            votes: self.voting.refusal(self.id).is_none(),
        }
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// Stops this replica's Raft (its store stays open with its owner).
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}
