//! `yctl cluster`: schedd's replicas (`scheduler.replicas`, and any added since) as a table
//! and as JSON: each one's role, membership, whether it votes, term, log and lag behind the
//! leader, as the replica that answered sees them; and the membership changes administrators
//! make (`yctl cluster add|promote|remove`).

use crate::output::{Column, Table};
use serde::Serialize;
use std::borrow::Cow;
use ysched_common::text::escape_for_terminal;
use ysched_proto::{ClusterReplica, ClusterStatusReply};

const CLUSTER_COLUMNS: &[Column; 10] = &[
    Column::right("REPLICA"),
    Column::left("ADDRESS"),
    Column::left("ROLE"),
    Column::left("MEMBER"),
    Column::left("VOTES"),
    Column::right("TERM"),
    Column::right("APPLIED"),
    Column::right("LAST_LOG"),
    Column::right("LAG"),
    Column::left("ANSWERED"),
];

/// `yctl cluster add|promote|remove`: a change of who the replicas are, made by the leader.
#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Add the replica at ADDR (its agent-port address) as a learner: it takes the log and
    /// does not vote until promoted. Start schedd there with --replica N (N as printed)
    Add {
        #[arg(value_name = "ADDR")]
        address: String,
        /// Its place [default: its place in scheduler.replicas, else the next free one]
        #[arg(long, value_name = "N")]
        id: Option<u64>,
    },
    /// Make learner N a voter, once it has caught up with the log (`yctl cluster` shows its
    /// lag)
    Promote {
        #[arg(value_name = "N")]
        replica: u64,
    },
    /// Take replica N out of the membership (a voter or a learner): the others no longer
    /// wait for it, and it no longer votes. How a replica that lost its disk comes back:
    /// remove, start it again, add, promote
    Remove {
        #[arg(value_name = "N")]
        replica: u64,
    },
}

impl ClusterCommand {
    pub fn request(&self) -> ysched_proto::ClusterChangeRequest {
        let (action, replica, address) = match self {
            ClusterCommand::Add { address, id } => ("add", id.unwrap_or(0), address.clone()),
            ClusterCommand::Promote { replica } => ("promote", *replica, String::new()),
            ClusterCommand::Remove { replica } => ("remove", *replica, String::new()),
        };
        ysched_proto::ClusterChangeRequest {
            action: action.into(),
            replica,
            address,
        }
    }
}

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
            match r.membership.as_str() {
                "" => Cow::Borrowed("-"),
                m => escape_for_terminal(m),
            },
            Cow::Borrowed(match r.votes {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            }),
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
    /// "voter", "learner" (takes the log, does not vote) or "none", as the replica that
    /// answered knows the membership; null when it could not tell.
    pub membership: Option<&'a str>,
    /// Whether it grants votes (one that lost its store does not, until promoted); null
    /// when unreachable.
    pub votes: Option<bool>,
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
        membership: (!r.membership.is_empty()).then_some(r.membership.as_str()),
        votes: r.votes,
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
                    membership: "voter".into(),
                    votes: Some(true),
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
                    membership: "learner".into(),
                    votes: Some(false),
                },
                ClusterReplica {
                    replica: 3,
                    address: "h3:7400".into(),
                    role: "unreachable".into(),
                    membership: "voter".into(),
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
                    "REPLICA", "ADDRESS", "ROLE", "MEMBER", "VOTES", "TERM", "APPLIED", "LAST_LOG",
                    "LAG", "ANSWERED"
                ],
                vec!["1", "h1:7400", "leader", "voter", "yes", "3", "120", "120", "0"],
                vec!["2", "h2:7400", "follower", "learner", "no", "3", "118", "119", "1", "*"],
                vec![
                    "3",
                    "h3:7400",
                    "unreachable",
                    "voter",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-"
                ],
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
                "replica": 2, "address": "h2:7400", "role": "follower",
                "membership": "learner", "votes": false, "term": 3,
                "applied": 118, "last_log": 119, "lag": 1, "leader": 1, "answering": true
            })
        );
        assert_eq!(
            json[2],
            serde_json::json!({
                "replica": 3, "address": "h3:7400", "role": "unreachable",
                "membership": "voter", "votes": null, "term": null,
                "applied": null, "last_log": null, "lag": null, "leader": null,
                "answering": false
            })
        );
    }
}
