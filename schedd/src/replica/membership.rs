//! The membership changes administrators make (`yctl cluster add|promote|remove`), through
//! openraft's joint consensus on the leader: a replica joins as a learner (it takes the log
//! and does not vote), becomes a voter only once it has caught up, and leaves.

use super::node::{Replica, ReplicaError};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use std::collections::{BTreeMap, BTreeSet};

/// A change of who the replicas are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipChange {
    /// Replica `id` at `addr` joins as a learner.
    Add { id: u64, addr: String },
    /// Learner `id` (caught up) becomes a voter.
    Promote(u64),
    /// Replica `id` leaves (a voter or a learner).
    Remove(u64),
}

impl Replica {
    /// Forms a new cluster with this replica as its only voter (at `addr`); the others join
    /// through [`Replica::complete_formation`]. A replica that has a membership already
    /// refuses, harmlessly.
    pub async fn form_alone(&self, addr: &str) -> Result<(), ReplicaError> {
        self.initialize(&[(self.id, addr.to_string())].into()).await
    }

    /// Brings the other replicas of `members` (place → address) into the membership this
    /// one formed alone: each as a learner at once, then as a voter once it has caught up (a
    /// replica that never voted has nothing to forget). Runs while this replica leads, until
    /// every one votes.
    pub async fn complete_formation(&self, members: &BTreeMap<u64, String>) {
        loop {
            let m = self.raft.metrics().borrow().clone();
            if m.state == openraft::ServerState::Shutdown {
                return;
            }
            if m.current_leader == Some(self.id) {
                let membership = m.membership_config.membership();
                let voters: BTreeSet<u64> = membership.voter_ids().collect();
                if members.keys().all(|id| voters.contains(id)) {
                    tracing::info!("the cluster is formed: every replica votes");
                    return;
                }
                let known: BTreeSet<u64> = membership.nodes().map(|(id, _)| *id).collect();
                for (id, addr) in members.iter().filter(|(id, _)| !voters.contains(id)) {
                    let change = if known.contains(id) {
                        MembershipChange::Promote(*id)
                    } else {
                        MembershipChange::Add {
                            id: *id,
                            addr: addr.clone(),
                        }
                    };
                    match self.change_membership(&change).await {
                        Ok(done) => tracing::info!("forming the cluster: {done}"),
                        Err(e) => tracing::debug!("forming the cluster: {e}"),
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Every member of the membership this replica knows (voters and learners), with its
    /// address.
    pub fn members(&self) -> BTreeMap<u64, String> {
        let m = self.raft.metrics().borrow().clone();
        m.membership_config
            .membership()
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect()
    }

    /// Makes `change` on this replica, which must lead; what was done, for the
    /// administrator.
    pub async fn change_membership(
        &self,
        change: &MembershipChange,
    ) -> Result<String, ReplicaError> {
        let m = self.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Err(ReplicaError::NotLeader(None));
        }
        let membership = m.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let learners: BTreeSet<u64> = membership.learner_ids().collect();
        let refused = |why: String| Err(ReplicaError::Settings(why));
        match change {
            MembershipChange::Add { id, addr } => {
                if voters.contains(id) || learners.contains(id) {
                    return refused(format!("replica {id} is a member already"));
                }
                if let Some((other, _)) = membership.nodes().find(|(_, n)| n.addr == *addr) {
                    return refused(format!("replica {other} is at {addr} already"));
                }
                written(
                    self.raft
                        .add_learner(*id, BasicNode::new(addr), false)
                        .await,
                )?;
                Ok(format!(
                    "replica {id} at {addr} joins as a learner: start schedd there with \
                     --replica {id}; promote it once `yctl cluster` shows it caught up"
                ))
            }
            MembershipChange::Promote(id) => {
                if voters.contains(id) {
                    return refused(format!("replica {id} votes already"));
                }
                if !learners.contains(id) {
                    return refused(format!(
                        "replica {id} is not a member: add it first (yctl cluster add ADDR --id {id})"
                    ));
                }
                let committed = m.last_applied.map_or(0, |l| l.index);
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id).copied().flatten())
                    .map_or(0, |l| l.index);
                if matched < committed {
                    return refused(format!(
                        "replica {id} has the log up to index {matched} of {committed}: promote \
                         it once it has caught up (`yctl cluster` shows its lag)"
                    ));
                }
                written(
                    self.raft
                        .change_membership(ChangeMembers::AddVoterIds([*id].into()), false)
                        .await,
                )?;
                Ok(format!("replica {id} is a voter"))
            }
            MembershipChange::Remove(id) => {
                if *id == self.id {
                    return refused(format!(
                        "replica {id} leads: stop it, and remove it through the replica that \
                         leads next"
                    ));
                }
                let changes = if voters.contains(id) {
                    ChangeMembers::RemoveVoters([*id].into())
                } else if learners.contains(id) {
                    ChangeMembers::RemoveNodes([*id].into())
                } else {
                    return refused(format!("replica {id} is not a member"));
                };
                written(self.raft.change_membership(changes, false).await)?;
                Ok(format!("replica {id} is no longer a member"))
            }
        }
    }
}

/// A membership change's outcome as a [`ReplicaError`].
fn written<T>(
    result: Result<T, RaftError<u64, ClientWriteError<u64, BasicNode>>>,
) -> Result<T, ReplicaError> {
    match result {
        Ok(t) => Ok(t),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(
            ReplicaError::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr))),
        ),
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Err(ReplicaError::Settings(e.to_string()))
        }
        Err(RaftError::Fatal(e)) => Err(ReplicaError::Fatal(e.to_string())),
    }
}
