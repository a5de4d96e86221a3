//! `yctl cluster`: schedd's replicas (`scheduler.replicas`) as a table and as JSON: each
//! one's role, term, log and lag behind the leader, as the replica that answered sees them.

use crate::output::{Column, Table};
use serde::Serialize;
use std::borrow::Cow;
use ysched_common::text::escape_for_terminal;
use ysched_proto::{ClusterReplica, ClusterStatusReply};

const CLUSTER_COLUMNS: &[Column; 8] = &[
    Column::right("REPLICA"),
    Column::left("ADDRESS"),
    Column::left("ROLE"),
    Column::right("TERM"),
    Column::right("APPLIED"),
    Column::right("LAST_LOG"),
    Column::right("LAG"),
    Column::left("ANSWERED"),
];

/// The role of a replica that did not answer.
const UNREACHABLE: &str = "unreachable";

/// The `yctl cluster` table: `-` where a figure is unknown (a replica unreachable, or no
/// leader to count lag from); `*` marks the replica that answered.
pub fn format_cluster_table(reply: &ClusterStatusReply) -> String {
    let mut table = Table::with_capacity(CLUSTER_COLUMNS, reply.replicas.len());
    for r in &reply.replicas {
        let reached = r.role != UNREACHABLE;
        let figure = |n: u64| {
            if reached {
                Cow::Owned(n.to_string())
            } else {
                Cow::Borrowed("-")
            }
        };
        table.push_row([
            Cow::Owned(r.replica.to_string()),
            escape_for_terminal(&r.address),
            escape_for_terminal(&r.role),
            figure(r.term),
            figure(r.applied),
            figure(r.last_log),
            r.lag
                .map_or(Cow::Borrowed("-"), |lag| Cow::Owned(lag.to_string())),
            Cow::Borrowed(if r.answering { "*" } else { "" }),
        ]);
    }
    let mut out = String::new();
    table.render(&mut out, true);
    out
}

/// One replica in `yctl cluster --json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ClusterJson<'a> {
    /// Its place in `scheduler.replicas` (1-based).
    pub replica: u64,
    pub address: &'a str,
    /// "leader", "follower", "candidate", "learner" or "unreachable".
    pub role: &'a str,
    /// Null when unreachable.
    pub term: Option<u64>,
    /// The last log index applied to its store; null when unreachable.
    pub applied: Option<u64>,
    /// The last log index in its log; null when unreachable.
    pub last_log: Option<u64>,
    /// Entries its log is behind the leader's (0 for the leader); null when unknown.
    pub lag: Option<u64>,
    /// The replica it knows to lead; null when none is known (or it is unreachable).
    pub leader: Option<u64>,
    /// Whether this replica answered the request.
    pub answering: bool,
}

pub fn cluster_to_json(r: &ClusterReplica) -> ClusterJson<'_> {
    let reached = r.role != UNREACHABLE;
    ClusterJson {
        replica: r.replica,
        address: &r.address,
        role: &r.role,
        term: reached.then_some(r.term),
        applied: reached.then_some(r.applied),
        last_log: reached.then_some(r.last_log),
        lag: r.lag,
        leader: r.leader,
        answering: r.answering,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> ClusterStatusReply {
        ClusterStatusReply {
            replicas: vec![
                ClusterReplica {
                    replica: 1,
                    address: "h1:7400".into(),
                    role: "leader".into(),
                    term: 3,
                    applied: 120,
                    last_log: 120,
                    lag: Some(0),
                    leader: Some(1),
                    answering: false,
                },
                ClusterReplica {
                    replica: 2,
                    address: "h2:7400".into(),
                    role: "follower".into(),
                    term: 3,
                    applied: 118,
                    last_log: 119,
                    lag: Some(1),
                    leader: Some(1),
                    answering: true,
                },
                ClusterReplica {
                    replica: 3,
                    address: "h3:7400".into(),
                    role: "unreachable".into(),
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn the_table_marks_who_answered_and_what_is_unknown() {
        let text = format_cluster_table(&reply());
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines,
            [
                vec![
                    "REPLICA", "ADDRESS", "ROLE", "TERM", "APPLIED", "LAST_LOG", "LAG", "ANSWERED"
                ],
                vec!["1", "h1:7400", "leader", "3", "120", "120", "0"],
                vec!["2", "h2:7400", "follower", "3", "118", "119", "1", "*"],
                vec!["3", "h3:7400", "unreachable", "-", "-", "-", "-"],
            ]
        );
    }

    #[test]
    fn json_names_each_field_and_nulls_what_an_unreachable_replica_did_not_say() {
        let reply = reply();
        let rows: Vec<ClusterJson> = reply.replicas.iter().map(cluster_to_json).collect();
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(
            json[1],
            serde_json::json!({
                "replica": 2, "address": "h2:7400", "role": "follower", "term": 3,
                "applied": 118, "last_log": 119, "lag": 1, "leader": 1, "answering": true
            })
        );
        assert_eq!(
            json[2],
            serde_json::json!({
                "replica": 3, "address": "h3:7400", "role": "unreachable", "term": null,
                "applied": null, "last_log": null, "lag": null, "leader": null,
                "answering": false
            })
        );
    }
}
