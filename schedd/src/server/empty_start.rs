//! A replica that starts with an empty store finds out, from the other replicas, whether it
//! may vote (see `replica::voting`): it asks each of `scheduler.replicas` for its state,
//! every half second, until one has a membership (the cluster exists) or a majority (itself
//! included) answer with none (the cluster is new).
//!
//! In an existing cluster that still counts it as a voter, it must not run: it lost the log
//! it acknowledged. schedd then exits (status 78) saying how to bring it back. Anywhere else
//! in an existing cluster it joins: it takes the log and votes only once promoted.

use super::replication::GrpcLink;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the replicas are asked again while nothing is decided.
const ASK_EVERY: Duration = Duration::from_millis(500);

/// What a replica with an empty store learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No replica of a majority has a membership: the cluster is formed now.
    New,
    /// The cluster exists, its log reached `after`, and this replica is no voter there.
    Join { after: u64 },
    /// The cluster counts this replica as a voter: it must not start (why, and what to do).
    Refuse(String),
}

/// Decides for replica `place` of `members` (place → address), asking over `link`.
pub async fn decide(link: &Arc<GrpcLink>, place: u64, members: &BTreeMap<u64, String>) -> Decision {
    let mut told = false;
    loop {
        let mut asks = tokio::task::JoinSet::new();
        for (id, addr) in members.iter().filter(|(id, _)| **id != place) {
            let (link, id, addr) = (Arc::clone(link), *id, addr.clone());
            asks.spawn(async move { link.status(id, &addr).await.ok() });
        }
        let mut answered = 1; // itself: empty
        let mut newest: Option<ysched_proto::ReplicaStatus> = None;
        while let Some(Ok(status)) = asks.join_next().await {
            let Some(status) = status else { continue };
            answered += 1;
            let has_membership = !status.voters.is_empty();
            if has_membership && newest.as_ref().is_none_or(|n| n.last_log < status.last_log) {
                newest = Some(status);
            }
        }
        if let Some(status) = newest {
            return decision_in(place, members, &status);
        }
        if answered > members.len() / 2 {
            return Decision::New;
        }
        if !told {
            tracing::warn!(
                "replica {place}'s store is empty: waiting to hear from a majority of \
                 scheduler.replicas whether the cluster is new (it does not vote meanwhile)"
            );
            told = true;
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// What replica `place` does in the cluster whose most advanced reachable replica reports
/// `status`.
fn decision_in(
    place: u64,
    members: &BTreeMap<u64, String>,
    status: &ysched_proto::ReplicaStatus,
) -> Decision {
    if !status.voters.contains(&place) {
        return Decision::Join {
            after: status.last_log,
        };
    }
    let addr = members.get(&place).map_or("ADDR", String::as_str);
    Decision::Refuse(format!(
        "replica {place}'s store is empty, but the cluster (replica {} has its log up to index \
         {}) counts it as a voter: a voter that lost its log must not vote, or changes a \
         majority acknowledged could be lost. To bring it back: remove it (`yctl cluster \
         remove {place}` on another replica's host), start it again (it takes the log without \
         voting), add it (`yctl cluster add {addr} --id {place}`), and promote it once `yctl \
         cluster` shows it caught up (`yctl cluster promote {place}`)",
        status.replica, status.last_log
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> BTreeMap<u64, String> {
        (1..=3).map(|i| (i, format!("h{i}:7400"))).collect()
    }

    #[test]
    fn a_replica_that_lost_its_store_is_refused_if_it_still_votes_and_joins_otherwise() {
        let status = ysched_proto::ReplicaStatus {
            replica: 1,
            last_log: 120,
            voters: vec![1, 2, 3],
            ..Default::default()
        };
        let Decision::Refuse(why) = decision_in(2, &members(), &status) else {
            panic!("a voter with an empty store was not refused");
        };
        assert!(why.contains("yctl cluster remove 2"), "{why}");
        assert!(why.contains("yctl cluster add h2:7400 --id 2"), "{why}");
        let removed = ysched_proto::ReplicaStatus {
            voters: vec![1, 3],
            learners: vec![2],
            ..status
        };
        assert_eq!(
            decision_in(2, &members(), &removed),
            Decision::Join { after: 120 }
        );
    }
}
