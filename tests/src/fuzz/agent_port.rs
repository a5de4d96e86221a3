//! Arbitrary and adversarial requests on schedd's agent port from a host that holds a valid
//! certificate of its own, as root on a compromised host would send them: Raft messages of
//! every kind (random bodies, votes and heartbeats of any term, any sender) and replica status
//! requests; sessions registering under other names and roles, and, registered as itself,
//! reports of jobs that are not its own; relayed requests for other nodes, other uids and jobs
//! that are not theirs; enrolments with random tokens and requests. Each answer is counted by
//! kind and status code: the test asserts what must never be answered `Ok`, and that nothing
//! changed that the host does not own.
//!
//! Deterministic for a seed, as the client fuzz is.

use super::Rng;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt as _;
use tonic::transport::Channel;
use ysched_proto as pb;

/// Where and as whom to send.
#[derive(Debug, Clone)]
pub struct AgentPortTarget {
    /// The agent port, `host:port`.
    pub addr: String,
    pub ca_file: PathBuf,
    /// The attacking host's identity directory (`node.crt`, `node.key`).
    pub identity_dir: PathBuf,
    /// The attacking host's node name.
    pub own_name: String,
    /// Names of the other hosts, and job ids that exist, to name in the requests.
    pub other_names: Vec<String>,
    pub job_ids: Vec<u64>,
}

/// Answers per kind of request and status code ("Ok", "Unauthenticated", ...).
pub type AgentPortStats = BTreeMap<String, BTreeMap<String, u64>>;

/// The kinds of request sent.
pub const KINDS: [&str; 7] = [
    "raft",
    "replica_status",
    "register_as_other",
    "reports_as_itself",
    "relay_as_other_node",
    "relay_as_other_user",
    "enrol",
];

/// Sends requests of `kinds` (of [`KINDS`]) for `duration`, from one connection per kind;
/// returns what was answered.
pub async fn run(
    target: &AgentPortTarget,
    kinds: &[&str],
    duration: Duration,
    seed: u64,
) -> AgentPortStats {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let target = target.clone();
        let kind = kind.to_string();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed.wrapping_add(i as u64 * 0x9e37_79b9));
            let mut codes: BTreeMap<String, u64> = BTreeMap::new();
            let channel = crate::host_link::host_channel(
                &target.addr,
                &target.ca_file,
                Some(&target.identity_dir),
            )
            .await;
            while Instant::now() < deadline {
                let code = match tokio::time::timeout(
                    Duration::from_secs(10),
                    send(&kind, &target, channel.clone(), &mut rng),
                )
                .await
                {
                    Ok(code) => code,
                    Err(_) => "ClientTimeout".into(),
                };
                *codes.entry(code).or_default() += 1;
            }
            (kind, codes)
        }));
    }
    let mut stats = AgentPortStats::new();
    for task in tasks {
        let (kind, codes) = task.await.expect("agent-port fuzz worker");
        stats.insert(kind, codes);
    }
    stats
}

fn code<T>(answer: Result<T, tonic::Status>) -> String {
    match answer {
        Ok(_) => "Ok".into(),
        Err(status) => format!("{:?}", status.code()),
    }
}

/// Random bytes, sometimes a JSON-looking Raft body.
fn body(rng: &mut Rng) -> Vec<u8> {
    if rng.percent(50) {
        let term = rng.next_u64() >> rng.below(64);
        let from = rng.below(8);
        return format!(
            r#"{{"vote":{{"leader_id":{{"term":{term},"node_id":{from}}},"committed":{}}},"last_log_id":null,"prev_log_id":null,"entries":[],"leader_commit":null}}"#,
            rng.percent(50)
        )
        .into_bytes();
    }
    (0..rng.below(2048)).map(|_| rng.next_u64() as u8).collect()
}

async fn send(kind: &str, t: &AgentPortTarget, channel: Channel, rng: &mut Rng) -> String {
    match kind {
        "raft" => {
            let mut client = pb::replication_client::ReplicationClient::new(channel);
            let kinds = ["vote", "append", "snapshot", "", "\u{202e}vote"];
            code(
                client
                    .raft(pb::RaftMessage {
                        from: rng.below(6),
                        to: rng.below(6),
                        kind: rng.pick(&kinds).to_string(),
                        body: body(rng),
                    })
                    .await,
            )
        }
        "replica_status" => {
            let mut client = pb::replication_client::ReplicationClient::new(channel);
            code(
                client
                    .status(pb::ReplicaStatusRequest {
                        from: rng.below(6),
                        to: rng.below(6),
                    })
                    .await,
            )
        }
        "register_as_other" => {
            let mut names = t.other_names.clone();
            names.push(format!("new-{}", rng.below(1000)));
            let name = rng.pick(&names).clone();
            let login = rng.percent(30);
            code(session(channel, &name, login, Vec::new()).await)
        }
        "reports_as_itself" => {
            // Registered as itself (allowed), it reports starts and ends of other jobs.
            let mut reports = Vec::new();
            for _ in 0..rng.below(8) + 1 {
                let job_id = pick_job(t, rng);
                let msg = if rng.percent(50) {
                    pb::agent_message::Msg::Started(pb::JobStarted {
                        job_id,
                        pid: rng.below(1 << 20) as u32,
                        time_ms: rng.next_u64() as i64 >> 20,
                    })
                } else {
                    pb::agent_message::Msg::Finished(pb::JobFinished {
                        job_id,
                        exit_code: Some(rng.below(256) as i32),
                        ..Default::default()
                    })
                };
                reports.push(pb::AgentMessage { msg: Some(msg) });
            }
            code(session(channel, &t.own_name, false, reports).await)
        }
        "relay_as_other_node" => {
            let node = rng.pick(&t.other_names).clone();
            let token: Vec<u8> = (0..rng.pick(&[0u64, 16, 32, 64]).to_owned())
                .map(|_| rng.next_u64() as u8)
                .collect();
            relay(
                channel,
                &node,
                rng.below(70_000) as u32,
                token,
                pick_job(t, rng),
            )
            .await
        }
        "relay_as_other_user" => {
            // With no session of its own here, any token is a guess.
            let token: Vec<u8> = (0..32).map(|_| rng.next_u64() as u8).collect();
            let uid = *rng.pick(&[0u32, 1, 1000, 65534]);
            relay(channel, &t.own_name, uid, token, pick_job(t, rng)).await
        }
        _ => {
            let mut client = pb::enrolment_client::EnrolmentClient::new(channel);
            let token = if rng.percent(50) {
                format!(
                    "ysched-enrol-1.{}.compute.{}.{}.{:064x}",
                    hex(t.own_name.as_bytes()),
                    rng.next_u64(),
                    i64::MAX,
                    rng.next_u64()
                )
            } else {
                String::from_utf8_lossy(&body(rng)).into_owned()
            };
            code(
                client
                    .enrol(pb::EnrolRequest {
                        token,
                        request: body(rng),
                    })
                    .await,
            )
        }
    }
}

fn pick_job(t: &AgentPortTarget, rng: &mut Rng) -> u64 {
    if t.job_ids.is_empty() || rng.percent(20) {
        rng.below(1 << 40)
    } else {
        *rng.pick(&t.job_ids)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A session registering `name` (a login host with `login`) that sends `then` once
/// registered; `Ok` when schedd registered it.
async fn session(
    channel: Channel,
    name: &str,
    login: bool,
    then: Vec<pb::AgentMessage>,
) -> Result<(), tonic::Status> {
    let (out, outgoing) = tokio::sync::mpsc::channel(16);
    let role = if login {
        ysched_common::config::ROLE_LOGIN
    } else {
        ysched_common::config::ROLE_COMPUTE
    };
    let _ = out
        .send(pb::AgentMessage {
            msg: Some(pb::agent_message::Msg::Register(pb::Register {
                name: name.into(),
                role: role.into(),
                cpus: 1,
                mem_mib: 64,
                version: "fuzz".into(),
                ..Default::default()
            })),
        })
        .await;
    let request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(outgoing));
    let mut inbound = pb::node_agent_client::NodeAgentClient::new(channel)
        .session(request)
        .await?
        .into_inner();
    match inbound.next().await {
        Some(Ok(_)) => {}
        Some(Err(status)) => return Err(status),
        None => return Err(tonic::Status::aborted("closed")),
    }
    for message in then {
        let _ = out.send(message).await;
    }
    // Long enough for the reports to be taken.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// A relayed `ListJobs` for `node`, as uid `uid` with `token` and `job_id`.
async fn relay(channel: Channel, node: &str, uid: u32, token: Vec<u8>, job_id: u64) -> String {
    let caller = pb::RelayedCaller {
        node: node.into(),
        uid,
        gid: uid,
        user: format!("user{uid}"),
        groups: vec![format!("user{uid}")],
        relay_token: token,
        job_id,
        ..Default::default()
    };
    let mut request = tonic::Request::new(pb::SubmitRequest {
        spec: Some(pb::JobSpec {
            name: "fuzz-relayed".into(),
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            hold: true,
            ..Default::default()
        }),
    });
    request.metadata_mut().insert_bin(
        ysched_common::identity::RELAYED_CALLER_METADATA,
        tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&caller)),
    );
    code(
        pb::ysched_client::YschedClient::new(channel)
            .submit(request)
            .await,
    )
}
