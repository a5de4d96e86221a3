//! End-to-end: one compromised host is one host. The attacker is root on an agent's host: it
//! holds that host's own certificate and key (its identity directory) and can take its agent's
//! place. It may register, heartbeat and relay only as that host, and relay only the users
//! with a job running there; it cannot speak Raft to the replicas nor pass its users off as a
//! replica's. Enrolment tokens enrol once; a revoked host is refused until enrolled anew; a
//! schedd that no longer takes the cluster key refuses a holder of it.

use std::time::Duration;
use tokio_stream::StreamExt as _;
use tonic::transport::Channel;
use ysched_proto as pb;
use ysched_tests::host_link::{channel_with_issued, host_channel};
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn log(c: &TestCluster, name: &str) -> String {
    std::fs::read_to_string(c.dir.path().join(format!("{name}.log"))).unwrap_or_default()
}

/// Opens an agent session on `channel` registering `name` (a login host with `login`): its
/// relay token and the stream (kept open while the session should live), or the refusal.
async fn register(
    channel: Channel,
    name: &str,
    login: bool,
) -> Result<
    (
        Vec<u8>,
        tonic::Streaming<pb::SchedulerMessage>,
        tokio::sync::mpsc::Sender<pb::AgentMessage>,
    ),
    tonic::Status,
> {
    let (out, outgoing) = tokio::sync::mpsc::channel(4);
    let role = if login {
        ysched_common::config::ROLE_LOGIN
    } else {
        ysched_common::config::ROLE_COMPUTE
    };
    out.send(pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::Register(pb::Register {
            name: name.into(),
            role: role.into(),
            cpus: 64,
            mem_mib: 1024,
            version: "attacker".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(outgoing));
    let mut inbound = pb::node_agent_client::NodeAgentClient::new(channel)
        .session(request)
        .await?
        .into_inner();
    match inbound.next().await {
        Some(Ok(pb::SchedulerMessage {
            msg: Some(pb::scheduler_message::Msg::Registered(r)),
        })) => Ok((r.relay_token, inbound, out)),
        Some(Err(status)) => Err(status),
        other => panic!("expected Registered, got {other:?}"),
    }
}

/// `message` relayed for `node` as uid `uid` (user `user`), with `token` and `job_id`.
fn relayed<T>(
    message: T,
    node: &str,
    uid: u32,
    user: &str,
    token: &[u8],
    job_id: u64,
) -> tonic::Request<T> {
    let caller = pb::RelayedCaller {
        node: node.into(),
        uid,
        gid: uid,
        user: user.into(),
        groups: vec![user.into()],
        relay_token: token.to_vec(),
        job_id,
        ..Default::default()
    };
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert_bin(
        ysched_common::identity::RELAYED_CALLER_METADATA,
        tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&caller)),
    );
    request
}

fn held_submit(name: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        spec: Some(pb::JobSpec {
            name: name.into(),
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            hold: true,
            ..Default::default()
        }),
    }
}

/// nobody's job running on `node` (one GPU there).
fn nobodys_job_on(c: &TestCluster, node: &str) -> u64 {
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-G", "1", "-w", node, "--wrap", "sleep 300"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    c.wait_state(id, "RUNNING", SECS(20));
    id
}

#[test]
fn root_on_a_compute_node_acts_only_as_that_node_and_for_its_jobs_owners() {
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 1, A100),
        FakeNode::uniform("n2", 1, A100),
    ]);
    let on_n1 = nobodys_job_on(&c, "n1");
    let addr = format!("127.0.0.1:{}", c.port);
    let ca = c.dir.path().join("cluster-ca.crt");
    let n2_identity = c.spool_dir("n2").join("identity");
    // The attacker takes n2's agent's place, with n2's certificate.
    c.stop_agent("n2", nix::sys::signal::Signal::SIGKILL);
    let rt = runtime();
    let on_n2 = rt.block_on(async {
        // 1. Registering as another node, or as a login host, is refused.
        for (name, login) in [("n1", false), ("n9", false), ("n2", true)] {
            let channel = host_channel(&addr, &ca, Some(&n2_identity)).await;
            let status = register(channel, name, login).await.expect_err("refused");
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
            assert!(
                status.message().contains("names compute host 'n2'"),
                "{status:?}"
            );
        }
        // 2. As itself it registers, and gets its session's relay token.
        let (token, _inbound, _session) = register(
            host_channel(&addr, &ca, Some(&n2_identity)).await,
            "n2",
            false,
        )
        .await
        .expect("n2 registers as itself");
        let mut relay = pb::ysched_client::YschedClient::new(
            host_channel(&addr, &ca, Some(&n2_identity)).await,
        );
        // 3. It relays no one who has no job on n2: not root, not nobody (whose job is on
        // n1), not with nobody's job on n1 as a voucher, not a uid claiming that job.
        for (uid, user, job) in [
            (0, "root", 0),
            (NOBODY, "nobody", 0),
            (NOBODY, "nobody", on_n1),
            (0, "root", on_n1),
            (1000, "alice", 424242),
        ] {
            let status = relay
                .submit(relayed(held_submit("forged"), "n2", uid, user, &token, job))
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
            assert!(
                status.message().contains(
                    "is a compute node: it relays only the users with a job running on it"
                ),
                "{status:?}"
            );
        }
        // 4. Nor does it speak for node n1, with its token or any.
        for token in [token.clone(), Vec::new(), vec![0u8; 32]] {
            let status = relay
                .submit(relayed(
                    held_submit("forged"),
                    "n1",
                    NOBODY,
                    "nobody",
                    &token,
                    on_n1,
                ))
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
            assert!(
                status.message().contains("names compute host 'n2'"),
                "{status:?}"
            );
        }
        // 5. It cannot relay callers said to be forwarded by a replica.
        let mut claim = relayed(pb::SharesRequest::default(), "", 0, "root", &[], 0);
        let forged = pb::RelayedCaller {
            uid: 0,
            user: "root".into(),
            forwarded_by_replica: 1,
            ..Default::default()
        };
        claim.metadata_mut().insert_bin(
            ysched_common::identity::RELAYED_CALLER_METADATA,
            tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&forged)),
        );
        let status = relay.shares(claim).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        // (its own session is dropped here: the attacker leaves)
        token
    });
    drop(on_n2);
    // The attacker's connections close with its runtime.
    drop(rt);
    // Nothing was disturbed: nobody's job still runs on n1, no forged job exists, and the
    // real n2 comes back with its own certificate.
    assert_eq!(c.job(on_n1)["state"], "RUNNING");
    assert!(
        c.jobs().iter().all(|j| j["name"] != "forged"),
        "{:?}",
        c.jobs()
    );
    c.start_agent("n2");
    let back = || {
        c.nodes().iter().any(|n| {
            n["name"] == "n2"
                && n["state"] != "DOWN"
                && n["gpus"].as_array().is_some_and(|g| g.len() == 1)
        })
    };
    let start = std::time::Instant::now();
    while !back() {
        assert!(
            start.elapsed() < SECS(20),
            "the real n2 is not back: {:?}\n{}",
            c.nodes(),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // With a job of nobody's on n2, n2 relays nobody (what a compromised n2 gets: the owners
    // of the jobs it runs, whose processes it controls anyway).
    let on_n2 = nobodys_job_on(&c, "n2");
    let out = c.run_on(Some("n2"), NOBODY, NOBODY, "yq", &["--me", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("\"id\":{on_n2}")));
    let out = c.run_on(Some("n2"), 0, 0, "yq", &[]);
    assert!(
        !out.status.success(),
        "root relayed from n2 without a job there"
    );
    let schedd = log(&c, "schedd");
    assert!(
        schedd.contains("refused the registration of compute node 'n1'"),
        "{schedd}"
    );
    for job in [on_n1, on_n2] {
        assert!(c.run("ycancel", &[&job.to_string()]).status.success());
    }
}

/// Trades `token` for a certificate at the Enrolment service as a new host would.
async fn enrol(addr: &str, ca: &std::path::Path, token: &str) -> Result<String, tonic::Status> {
    let (_key, request) = ysched_common::tls::enrol::new_request("host").unwrap();
    let mut client = pb::enrolment_client::EnrolmentClient::new(host_channel(addr, ca, None).await);
    client
        .enrol(pb::EnrolRequest {
            token: token.into(),
            request,
        })
        .await
        .map(|r| r.into_inner().certificate)
}

#[test]
fn a_token_enrols_once_and_a_revoked_host_stays_out_until_enrolled_anew() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let addr = format!("127.0.0.1:{}", c.port);
    let ca = c.dir.path().join("cluster-ca.crt");
    // Only an administrator makes tokens.
    let out = c.run_as(NOBODY, NOBODY, "yctl", &["node", "enrol", "n9"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("only administrators may enrol hosts"),
        "{}",
        stderr(&out)
    );
    let token = c.enrol_token("n9", false);
    let short = {
        let out = c.run("yctl", &["node", "enrol", "n8", "--valid", "1s"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    let rt = runtime();
    rt.block_on(async {
        // Once: the second use of the same token is refused.
        let cert = enrol(&addr, &ca, &token).await.expect("first use");
        assert!(cert.contains("BEGIN CERTIFICATE"));
        let status = enrol(&addr, &ca, &token).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(status.message().contains("was used already"), "{status:?}");
        // Altered, foreign, expired: refused.
        let altered = token.replacen(".compute.", ".login.", 1);
        let status = enrol(&addr, &ca, &altered).await.unwrap_err();
        assert!(
            status.message().contains("not made by this cluster"),
            "{status:?}"
        );
        let status = enrol(&addr, &ca, "not a token").await.unwrap_err();
        assert!(
            status.message().contains("not an enrolment token"),
            "{status:?}"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let status = enrol(&addr, &ca, &short).await.unwrap_err();
        assert!(status.message().contains("expired"), "{status:?}");
    });

    // Revoked: n1's session ends at once, and its certificate is refused from then on.
    let out = c.run("yctl", &["node", "revoke", "n1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_until(SECS(10), "n1 is down", || c.nodes()[0]["state"] == "DOWN");
    wait_until(SECS(10), "n1's agent is told why", || {
        log(&c, "noded-n1").contains("host 'n1' was revoked")
    });
    std::thread::sleep(SECS(2));
    assert_eq!(c.nodes()[0]["state"], "DOWN");
    let hosts: Vec<serde_json::Value> =
        serde_json::from_str(&stdout(&c.run("yctl", &["node", "hosts", "--json"]))).unwrap();
    let n1 = hosts.iter().find(|h| h["name"] == "n1").unwrap();
    assert_eq!(
        (n1["revoked"].as_bool(), n1["connected"].as_bool()),
        (Some(true), Some(false))
    );
    // Enrolled anew (its agent started with a new token), it is back.
    c.stop_agent("n1", nix::sys::signal::Signal::SIGTERM);
    std::fs::remove_dir_all(c.spool_dir("n1").join("identity")).unwrap();
    c.start_agent("n1");
    c.wait_nodes_up(1);
    let audit: Vec<serde_json::Value> =
        serde_json::from_str(&stdout(&c.run("yctl", &["audit", "--json"]))).unwrap();
    for action in ["enrol_token", "enrol", "revoke"] {
        assert!(
            audit.iter().any(|e| e["action"] == action),
            "no {action} in {audit:?}"
        );
    }
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "COMPLETED", SECS(20));
}

#[test]
fn a_schedd_that_no_longer_takes_the_cluster_key_refuses_a_holder_of_it() {
    let mut c = TestCluster::start_with_cluster_key(vec![FakeNode::uniform("n1", 1, A100)]);
    // While it takes the key, every start says so.
    assert!(
        log(&c, "schedd").contains("agents may still authenticate with the shared cluster key"),
        "{}",
        log(&c, "schedd")
    );
    // Turned off: an agent holding only the key is refused; enrolled agents are not.
    let text = std::fs::read_to_string(&c.conf).unwrap();
    std::fs::write(
        &c.conf,
        text.replacen(
            "[scheduler]\n",
            "[scheduler]\naccept_cluster_key = false\n",
            1,
        ),
    )
    .unwrap();
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let before = log(&c, "schedd").len();
    c.start_schedd();
    c.wait_nodes_up(1);
    let mut impostor = c.spawn_impostor_agent("n1");
    wait_until(SECS(10), "the key holder is refused", || {
        log(&c, "noded-n1-dup").contains("takes only enrolled hosts' certificates")
    });
    let _ = impostor.kill();
    let _ = impostor.wait();
    let since = log(&c, "schedd")[before..].to_string();
    assert!(
        !since.contains("may still authenticate with the shared cluster key"),
        "{since}"
    );
    assert_eq!(c.nodes().len(), 1, "{:?}", c.nodes());
}

/// A Raft message of `kind` claiming to come from replica `from`, of `term`: a vote request,
/// or an empty append (a leader's heartbeat), as replicas encode them.
fn raft_message(kind: &str, from: u64, to: u64, term: u64) -> pb::RaftMessage {
    let vote = format!(
        r#"{{"leader_id":{{"term":{term},"node_id":{from}}},"committed":{}}}"#,
        kind == "append"
    );
    let body = match kind {
        "vote" => format!(r#"{{"vote":{vote},"last_log_id":null}}"#),
        _ => format!(r#"{{"vote":{vote},"prev_log_id":null,"entries":[],"leader_commit":null}}"#),
    };
    pb::RaftMessage {
        from,
        to,
        kind: kind.into(),
        body: body.into_bytes(),
    }
}

#[test]
fn raft_cannot_be_steered_from_an_agents_host() {
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", 1, A100));
    let (leader, _) = r.leader(SECS(30));
    let rows = r.cluster(leader).unwrap();
    let term = |rows: &[serde_json::Value]| -> u64 {
        rows.iter()
            .filter_map(|x| x["term"].as_u64())
            .max()
            .unwrap()
    };
    let before = term(&rows);
    let addrs: Vec<(u64, String)> = rows
        .iter()
        .map(|x| {
            (
                x["replica"].as_u64().unwrap(),
                x["address"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let ca = r.dir.path().join("cluster-ca.crt");
    let ca_key = r.dir.path().join("cluster-ca.key");
    let n1 = r.dir.path().join("spool/n1/identity");
    wait_until(SECS(30), "n1 enrolled", || n1.join("node.crt").exists());
    let rt = runtime();
    rt.block_on(async {
        for (to, addr) in &addrs {
            let from = if *to == 1 { 2 } else { 1 };
            // With an agent's certificate, and with none: refused before the message is read.
            for identity in [Some(n1.as_path()), None] {
                let mut client = pb::replication_client::ReplicationClient::new(
                    host_channel(addr, &ca, identity).await,
                );
                for kind in ["vote", "append"] {
                    for _ in 0..10 {
                        let status = client
                            .raft(raft_message(kind, from, *to, before + 1000))
                            .await
                            .unwrap_err();
                        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
                    }
                }
                let status = client
                    .status(pb::ReplicaStatusRequest { from, to: *to })
                    .await
                    .unwrap_err();
                assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
            }
            // A replica's certificate (made here with the CA key, which only scheduler hosts
            // hold) for replica 3, with a message saying it is from another: refused too.
            let three = ysched_common::tls::HostIdentity::replica(3);
            let mut client = pb::replication_client::ReplicationClient::new(
                channel_with_issued(addr, &ca, &ca_key, &three).await,
            );
            let liar = if *to == 1 { 2 } else { 1 };
            let status = client
                .raft(raft_message("vote", liar, *to, before + 1000))
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        }
    });
    // The cluster did not move: same leader, same term, and it serves.
    std::thread::sleep(SECS(2));
    let (now, _) = r.leader(SECS(10));
    assert_eq!(now, leader, "the leader changed");
    let after = term(&r.cluster(leader).unwrap());
    assert_eq!(after, before, "a term from outside reached Raft");
    let id = r.submit(leader, &["--hold", "--wrap", "true"]);
    assert!(id > 0);
    let logs = r.logs();
    assert!(
        logs.contains("the replication service takes replicas' certificates only"),
        "{logs}"
    );
    // The message itself was a valid one: from a replica's certificate that says so, it is
    // read and answered (this moves the term, so it comes last).
    rt.block_on(async {
        let (to, addr) = addrs.iter().find(|(n, _)| *n != 3).unwrap();
        let three = ysched_common::tls::HostIdentity::replica(3);
        let mut client = pb::replication_client::ReplicationClient::new(
            channel_with_issued(addr, &ca, &ca_key, &three).await,
        );
        client
            .raft(raft_message("vote", 3, *to, before + 1000))
            .await
            .expect("a replica's vote request is read");
    });
}

/// How long each agent-port fuzz runs (`YSCHED_FUZZ_SECS`, default 5), and its seed
/// (`YSCHED_FUZZ_SEED` replays one).
fn fuzz_settings() -> (Duration, u64) {
    let secs: f64 = std::env::var("YSCHED_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let seed = std::env::var("YSCHED_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("agent-port fuzz seed {seed} (YSCHED_FUZZ_SEED={seed} replays it), {secs} s");
    (Duration::from_secs_f64(secs), seed)
}

/// Root on compute node n2, with n2's certificate, sends arbitrary requests of every kind on
/// the agent port: none that is not n2's own business is taken, schedd never aborts, and
/// nothing of n1's, of another user's or of the cluster's changes.
#[test]
fn arbitrary_requests_with_a_hosts_certificate_change_nothing_it_does_not_own() {
    use ysched_tests::fuzz::agent_port::{self, AgentPortTarget};
    let (duration, seed) = fuzz_settings();
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 2, A100),
        FakeNode::uniform("n2", 1, A100),
    ]);
    let victim = nobodys_job_on(&c, "n1");
    let held = c.submit(&["--hold", "-J", "roots", "--wrap", "true"]);
    let target = AgentPortTarget {
        addr: format!("127.0.0.1:{}", c.port),
        ca_file: c.dir.path().join("cluster-ca.crt"),
        identity_dir: c.spool_dir("n2").join("identity"),
        own_name: "n2".into(),
        other_names: vec![
            "n1".into(),
            "login1".into(),
            "".into(),
            "n1\u{1b}[2J".into(),
        ],
        job_ids: vec![victim, held, victim + 1000],
    };
    c.stop_agent("n2", nix::sys::signal::Signal::SIGKILL);
    let stats = {
        let rt = runtime();
        rt.block_on(agent_port::run(&target, &agent_port::KINDS, duration, seed))
    };
    eprintln!("agent-port fuzz: {stats:?}");
    for (kind, codes) in &stats {
        assert!(codes.values().sum::<u64>() > 0, "no {kind} sent");
        if kind != "reports_as_itself" {
            assert!(
                !codes.contains_key("Ok"),
                "{kind} was taken from n2's certificate (seed {seed}): {codes:?}"
            );
        }
    }
    assert!(c.schedd_alive(), "schedd died (seed {seed})\n{}", c.logs());
    assert!(
        !log(&c, "schedd").contains("panicked"),
        "{}",
        log(&c, "schedd")
    );
    // n1's job runs on, root's job is still held, no relayed job exists, no node was added.
    assert_eq!(c.job(victim)["state"], "RUNNING", "seed {seed}");
    assert_eq!(c.job(held)["state"], "HELD", "seed {seed}");
    assert!(c.jobs().iter().all(|j| j["name"] != "fuzz-relayed"));
    let names: Vec<String> = c
        .nodes()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["n1", "n2"]);
    // And n1 still relays its job's owner.
    let out = c.run_on(Some("n1"), NOBODY, NOBODY, "yq", &["--me"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(c.run("ycancel", &[&victim.to_string()]).status.success());
}

/// The same against three replicas, on their replication link: every message from an
/// agent's certificate is refused, and the cluster keeps its leader and term.
#[test]
fn arbitrary_raft_messages_from_an_agents_host_move_no_replica() {
    use ysched_tests::fuzz::agent_port::{self, AgentPortTarget};
    let (duration, seed) = fuzz_settings();
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", 1, A100));
    let (leader, _) = r.leader(SECS(30));
    let rows = r.cluster(leader).unwrap();
    let term = |rows: &[serde_json::Value]| -> u64 {
        rows.iter()
            .filter_map(|x| x["term"].as_u64())
            .max()
            .unwrap()
    };
    let before = term(&rows);
    let identity = r.dir.path().join("spool/n1/identity");
    wait_until(SECS(30), "n1 enrolled", || {
        identity.join("node.crt").exists()
    });
    let rt = runtime();
    for row in &rows {
        let target = AgentPortTarget {
            addr: row["address"].as_str().unwrap().to_string(),
            ca_file: r.dir.path().join("cluster-ca.crt"),
            identity_dir: identity.clone(),
            own_name: "n1".into(),
            other_names: vec!["n2".into()],
            job_ids: Vec::new(),
        };
        let stats = rt.block_on(agent_port::run(
            &target,
            &["raft", "replica_status"],
            duration / 3,
            seed,
        ));
        for (kind, codes) in &stats {
            assert_eq!(
                codes.keys().collect::<Vec<_>>(),
                ["Unauthenticated"],
                "{kind} (seed {seed}): {codes:?}"
            );
        }
    }
    let (now, _) = r.leader(SECS(10));
    assert_eq!(now, leader, "the leader changed (seed {seed})");
    assert_eq!(term(&r.cluster(leader).unwrap()), before, "seed {seed}");
}

/// The node supervisor's socket (how noded hands it jobs) is root's: another user cannot
/// connect to it, let alone start a job through it.
#[test]
fn the_node_supervisors_socket_is_closed_to_other_users() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "COMPLETED", SECS(20));
    let socket = c.spool_dir("n1").join("supervisor.sock");
    assert!(
        socket.exists(),
        "no supervisor socket at {}",
        socket.display()
    );
    let path = socket.clone();
    let refused = on_thread_as(NOBODY, NOBODY, move || {
        std::os::unix::net::UnixStream::connect(&path).map(|_| ())
    });
    let err = refused.expect_err("nobody reached the supervisor's socket");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    // Root (noded's user) still reaches it: a job still runs.
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "COMPLETED", SECS(20));
}
