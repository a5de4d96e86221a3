//! `ClusterStatus` (`yctl cluster`): one row per replica of `scheduler.replicas`, gathered by
//! whichever replica a client reaches (a follower too, and without a quorum): its own Raft
//! state from its metrics, the others' asked over the replicas' link, each within
//! `replication::STATUS_TIMEOUT` (unreachable after). A schedd without replicas answers with itself.

use super::replication::{status_message, GrpcLink};
use crate::replica::Replica;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use tonic::body::Body;
use tonic::codegen::{http, Service};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};
use ysched_proto as pb;

/// The path of `ClusterStatus`, as the generated service matches it.
const CLUSTER_STATUS_PATH: &str = "/ysched.v1.Ysched/ClusterStatus";

/// What a replica needs to answer `ClusterStatus`: itself, its link to the others, and
/// every replica's address.
pub struct ClusterView {
    pub replica: Replica,
    pub link: Arc<GrpcLink>,
    pub members: BTreeMap<u64, String>,
}

impl ClusterView {
    /// Every replica's row, as this one sees them now: those of `scheduler.replicas` and
    /// those the membership has (a replica added later).
    pub async fn answer(&self) -> pb::ClusterStatusReply {
        let own = self.replica.status();
        let mut members = self.members.clone();
        members.extend(own.members.clone());
        let mut asks = tokio::task::JoinSet::new();
        for (id, addr) in &members {
            if *id == self.replica.id {
                continue;
            }
            let (link, id, addr) = (Arc::clone(&self.link), *id, addr.clone());
            asks.spawn(async move { (id, link.status(id, &addr).await) });
        }
        let mut statuses = BTreeMap::new();
        statuses.insert(self.replica.id, status_message(self.replica.id, &own));
        while let Some(asked) = asks.join_next().await {
            match asked {
                Ok((id, Ok(status))) => {
                    statuses.insert(id, status);
                }
                Ok((_, Err(e))) => tracing::debug!("yctl cluster: {e}"),
                Err(e) => tracing::warn!("yctl cluster: asking a replica failed: {e}"),
            }
        }
        pb::ClusterStatusReply {
            replicas: rows(&members, self.replica.id, &statuses),
        }
    }
}

/// The rows of `members` (place → address), as replica `answering` gathered their `statuses`
/// (a replica without one did not answer: unreachable). Lag is counted from the leader's
/// last log index: the reachable replica that says it leads, in the highest term (a hung old
/// leader that wakes still says so, in its older term, until it hears of the new one).
pub fn rows(
    members: &BTreeMap<u64, String>,
    answering: u64,
    statuses: &BTreeMap<u64, pb::ReplicaStatus>,
) -> Vec<pb::ClusterReplica> {
    let leader = statuses
        .values()
        .filter(|s| s.role == "leader")
        .max_by_key(|s| s.term);
    // The membership as the answering replica knows it.
    let known = statuses.get(&answering);
    let membership = |id: &u64| match known {
        Some(s) if s.voters.contains(id) => "voter",
        Some(s) if s.learners.contains(id) => "learner",
        Some(_) => "none",
        None => "",
    };
    members
        .iter()
        .map(|(id, addr)| {
            let mut row = pb::ClusterReplica {
                replica: *id,
                address: addr.clone(),
                role: "unreachable".into(),
                answering: *id == answering,
                membership: membership(id).into(),
                ..Default::default()
            };
            if let Some(s) = statuses.get(id) {
                row.votes = Some(s.votes);
                row.role = s.role.clone();
                row.term = s.term;
                row.applied = s.applied;
                row.last_log = s.last_log;
                row.leader = s.leader;
                row.lag = leader.map(|l| {
                    if l.replica == *id {
                        0
                    } else {
                        l.last_log.saturating_sub(s.last_log)
                    }
                });
            }
            row
        })
        .collect()
}

/// The answer of a schedd without replicas: itself alone, the leader, at its agent address,
/// with no replicated log (term and indexes 0).
pub fn standalone(listen: &str) -> pb::ClusterStatusReply {
    pb::ClusterStatusReply {
        replicas: vec![pb::ClusterReplica {
            replica: 1,
            address: listen.to_string(),
            role: "leader".into(),
            lag: Some(0),
            leader: Some(1),
            answering: true,
            ..Default::default()
        }],
    }
}

/// A client service (`S`) with `ClusterStatus` answered first, by this replica, whatever
/// `S` does with the rest (refuses or forwards them on a follower).
#[derive(Clone)]
pub struct StatusFirst<S> {
    view: Arc<ClusterView>,
    inner: S,
}

impl<S> StatusFirst<S> {
    pub fn new(view: Arc<ClusterView>, inner: S) -> Self {
        StatusFirst { view, inner }
    }
}

impl<S: NamedService> NamedService for StatusFirst<S> {
    const NAME: &'static str = S::NAME;
}

/// `ClusterStatus` as a unary service.
struct Answer(Arc<ClusterView>);

impl tonic::server::UnaryService<pb::ClusterStatusRequest> for Answer {
    type Response = pb::ClusterStatusReply;
    type Future = Pin<
        Box<
            dyn std::future::Future<Output = Result<Response<pb::ClusterStatusReply>, Status>>
                + Send,
        >,
    >;

    fn call(&mut self, _request: Request<pb::ClusterStatusRequest>) -> Self::Future {
        let view = Arc::clone(&self.0);
        Box::pin(async move { Ok(Response::new(view.answer().await)) })
    }
}

impl<S> Service<http::Request<Body>> for StatusFirst<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        // Readiness is the served service's, checked per request.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path() != CLUSTER_STATUS_PATH {
            let inner = self.inner.clone();
            return Box::pin(async move {
                use tower::ServiceExt;
                inner.oneshot(req).await
            });
        }
        let view = Arc::clone(&self.view);
        Box::pin(async move {
            let codec =
                tonic_prost::ProstCodec::<pb::ClusterStatusReply, pb::ClusterStatusRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.unary(Answer(view), req).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> BTreeMap<u64, String> {
        (1..=3).map(|i| (i, format!("h{i}:7400"))).collect()
    }

    fn status(replica: u64, role: &str, term: u64, last_log: u64) -> pb::ReplicaStatus {
        pb::ReplicaStatus {
            replica,
            role: role.into(),
            term,
            applied: last_log.saturating_sub(1),
            last_log,
            leader: Some(2),
            voters: vec![1, 2, 3],
            votes: true,
            ..Default::default()
        }
    }

    #[test]
    fn rows_name_every_replica_with_its_lag_behind_the_leader() {
        let statuses: BTreeMap<u64, pb::ReplicaStatus> = [
            (1, status(1, "follower", 4, 90)),
            (2, status(2, "leader", 4, 100)),
        ]
        .into();
        let rows = rows(&members(), 1, &statuses);
        let seen: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.replica,
                    r.address.as_str(),
                    r.role.as_str(),
                    r.term,
                    r.applied,
                    r.last_log,
                    r.lag,
                    r.leader,
                    r.answering,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (1, "h1:7400", "follower", 4, 89, 90, Some(10), Some(2), true),
                (2, "h2:7400", "leader", 4, 99, 100, Some(0), Some(2), false),
                (3, "h3:7400", "unreachable", 0, 0, 0, None, None, false),
            ]
        );
    }

    #[test]
    fn without_a_reachable_leader_lag_is_unknown_and_an_old_leader_does_not_count() {
        let alone: BTreeMap<u64, pb::ReplicaStatus> = [(3, status(3, "candidate", 7, 50))].into();
        let rows_alone = rows(&members(), 3, &alone);
        assert!(rows_alone.iter().all(|r| r.lag.is_none()));
        assert_eq!(rows_alone[2].role, "candidate");

        // A hung leader of term 3 woke beside the leader of term 4: lag counts from term 4's.
        let two: BTreeMap<u64, pb::ReplicaStatus> = [
            (1, status(1, "leader", 3, 200)),
            (2, status(2, "leader", 4, 150)),
            (3, status(3, "follower", 4, 150)),
        ]
        .into();
        let rows_two = rows(&members(), 3, &two);
        let lags: Vec<_> = rows_two.iter().map(|r| r.lag).collect();
        assert_eq!(lags, [Some(0), Some(0), Some(0)]);
    }

    #[test]
    fn a_schedd_without_replicas_shows_itself_leading() {
        let reply = standalone("0.0.0.0:7400");
        assert_eq!(reply.replicas.len(), 1);
        let row = &reply.replicas[0];
        assert_eq!(
            (row.replica, row.address.as_str(), row.role.as_str()),
            (1, "0.0.0.0:7400", "leader")
        );
        assert_eq!(
            (row.lag, row.leader, row.answering),
            (Some(0), Some(1), true)
        );
    }
}
