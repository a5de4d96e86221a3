//! schedd under Raft: three replicas on loopback. A `kill -9` of the leader loses
//! no acknowledged submit and hands out no id twice, under four submitting clients and with
//! sixteen jobs running, none of which notices; a new leader serves within seconds; followers
//! forward clients to the leader, as themselves; `yctl cluster` answers on every replica; a
//! replica that comes back, even wiped, catches up and can lead; a rolling restart disturbs no
//! job and charges every run once; a leader hung for 20 s is replaced and launches nothing.

use nix::sys::signal::Signal;
use std::collections::BTreeSet;
use std::time::Duration;
use ysched_tests::*;

fn ids(jobs: &[serde_json::Value]) -> BTreeSet<u64> {
    jobs.iter().map(|j| j["id"].as_u64().expect("id")).collect()
}

#[test]
fn a_new_leader_takes_over_a_kill_9_with_every_acknowledged_submit() {
    let (mut r, leader) = with_an_agent();
    let mut acked = BTreeSet::new();
    for i in 0..10 {
        acked.insert(r.submit(
            leader,
            &["--hold", "-J", &format!("j{i}"), "--wrap", "true"],
        ));
    }
    // A follower forwards to the leader: it lists what the leader acknowledged.
    let follower = (1..=3).find(|n| *n != leader).unwrap();
    assert!(acked.is_subset(&ids(&r.jobs(follower))));

    r.kill(leader, Signal::SIGKILL);
    let (second, gap) = r.leader(Duration::from_secs(30));
    assert_ne!(second, leader);
    println!("failover: a new leader served {gap:?} after the kill");
    assert!(gap < Duration::from_secs(15), "took {gap:?}\n{}", r.logs());
    let listed = ids(&r.jobs(second));
    assert!(
        acked.is_subset(&listed),
        "lost: {:?}",
        acked.difference(&listed)
    );
    let next = r.submit(second, &["--hold", "--wrap", "true"]);
    assert!(
        next > *acked.iter().max().unwrap(),
        "id {next} handed out again"
    );
    acked.insert(next);

    // The old leader comes back as a follower, catches up, and may lead again.
    r.start_replica(leader);
    std::thread::sleep(Duration::from_secs(2));
    r.kill(second, Signal::SIGKILL);
    let (third, _) = r.leader(Duration::from_secs(30));
    assert_ne!(third, second);
    let listed = ids(&r.jobs(third));
    assert!(
        acked.is_subset(&listed),
        "lost: {:?}",
        acked.difference(&listed)
    );
    let last = r.submit(third, &["--hold", "--wrap", "true"]);
    assert!(last > next, "id {last} handed out again");
    println!("replicas restarted after losing the lead: {}", r.restarts());
    if std::env::var_os("YSCHED_SHOW_LOGS").is_some() {
        println!("{}", r.logs());
    }
}

/// Three replicas and an agent of node `n1` (2 GPUs) registered with the leader; the
/// leader.
fn with_an_agent() -> (Replicas, u64) {
    with_an_agent_of(2)
}

/// Three replicas and an agent of node `n1` with `gpus` GPUs registered with the leader; the
/// leader.
fn with_an_agent_of(gpus: u32) -> (Replicas, u64) {
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", gpus, "A100"));
    let (leader, _) = r.leader(Duration::from_secs(30));
    wait_until(Duration::from_secs(30), "the agent registers", || {
        let out = r.run(leader, "yctl", &["nodes", "--json"]);
        out.status.success() && stdout(&out).contains("\"n1\"")
    });
    (r, leader)
}

/// Job `id` as replica `n` lists it.
fn job(r: &Replicas, n: u64, id: u64) -> Option<serde_json::Value> {
    r.jobs(n).into_iter().find(|j| j["id"].as_u64() == Some(id))
}

#[test]
fn without_a_majority_submits_are_refused_and_running_jobs_keep_running() {
    let (mut r, leader) = with_an_agent();
    let pid_file = r.dir.path().join("job.pid");
    let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    let id = r.submit(leader, &["--wrap", &script]);
    wait_until(Duration::from_secs(30), "the job runs", || {
        pid_file.exists() && job(&r, leader, id).is_some_and(|j| j["state"] == "RUNNING")
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let followers: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
    for n in &followers {
        r.kill(*n, Signal::SIGKILL);
    }
    let out = r.run(leader, "ysub", &["--parsable", "--hold", "--wrap", "true"]);
    assert!(
        !out.status.success(),
        "a lone replica acknowledged a submit"
    );
    let err = stderr(&out);
    assert!(err.contains("no quorum"), "{err}");
    // Asked again while the majority is still away: refused, naming the reason.
    wait_until(Duration::from_secs(20), "the lone replica refuses", || {
        let out = r.run(leader, "yq", &[]);
        r.runs(leader) && !out.status.success() && stderr(&out).contains("no quorum")
    });
    // The job runs on meanwhile (its node fences only after node.fence_after_secs).
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the job was stopped\n{}",
        r.logs()
    );

    for n in followers {
        r.start_replica(n);
    }
    let (back, _) = r.leader(Duration::from_secs(30));
    // The refused submit was never acknowledged: it may have taken effect (it was in the
    // lone leader's log, which may lead again) or not; nothing else changed.
    let listed = r.jobs(back);
    assert!(listed.len() <= 2, "{listed:?}");
    let running = job(&r, back, id).expect("the running job");
    assert_eq!(running["state"], "RUNNING");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn a_hung_leader_is_replaced_and_when_it_wakes_launches_nothing() {
    let (mut r, leader) = with_an_agent();
    let pids = r.dir.path().join("pids");
    let script = format!("echo $$ >> {}; exec sleep 300", pids.display());
    let first = r.submit(leader, &["--wrap", &script]);
    wait_until(Duration::from_secs(30), "the job runs", || {
        job(&r, leader, first).is_some_and(|j| j["state"] == "RUNNING")
    });

    r.kill(leader, Signal::SIGSTOP);
    let stopped = std::time::Instant::now();
    let (second, _) = r.leader(Duration::from_secs(30));
    assert_ne!(second, leader);
    // The agent finds the new leader; a job submitted there runs.
    let next = r.submit(second, &["--wrap", &script]);
    wait_until(Duration::from_secs(60), "the new leader's job runs", || {
        job(&r, second, next).is_some_and(|j| j["state"] == "RUNNING")
    });
    // Hung for 20 s in all: long past the new leader's election, which meanwhile runs a job.
    std::thread::sleep(Duration::from_secs(20).saturating_sub(stopped.elapsed()));
    r.kill(leader, Signal::SIGCONT);
    // The old leader steps down and follows, without exiting. It learns it no longer leads
    // from Raft ("lost the lead"), from its lease ("heard from no majority"), or, when a
    // write it had queued fails to replicate first, from that failure.
    let log = r.dir.path().join(format!("replica-{leader}.log"));
    let stepped_down = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("stepped down: following")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !stepped_down() {
        // Every replica's log, to tell why (this waited in vain once in a loaded CI run).
        assert!(
            std::time::Instant::now() < deadline,
            "the old leader did not step down within 30 s of waking\n{}",
            r.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (now, _) = r.leader(Duration::from_secs(30));
    assert_ne!(now, leader, "the woken leader leads again");
    assert!(
        r.runs(leader) && r.restarts() == 0,
        "the old leader exited rather than follow\n{}",
        r.logs()
    );
    // It serves its socket's clients again, forwarding them to the leader.
    let out = r.run(leader, "yq", &["--json"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), r.logs());
    // Each job started once, and both still run.
    let started = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(started.lines().count(), 2, "{started}");
    for id in [first, next] {
        let j = job(&r, now, id).unwrap();
        assert_eq!(j["state"], "RUNNING", "{j}");
        assert_eq!(j["restart_count"], 0, "{j}");
    }
}

const NOBODY: u32 = 65534;

/// The row of replica `n` in a `yctl cluster --json` answer.
fn row(rows: &[serde_json::Value], n: u64) -> &serde_json::Value {
    rows.iter()
        .find(|r| r["replica"].as_u64() == Some(n))
        .unwrap_or_else(|| panic!("no row of replica {n} in {rows:?}"))
}

#[test]
fn yctl_cluster_answers_on_every_replica_and_shows_who_is_gone() {
    let (mut r, leader) = with_an_agent();
    for i in 0..3 {
        r.submit(
            leader,
            &["--hold", "-J", &format!("c{i}"), "--wrap", "true"],
        );
    }
    // Every replica answers, followers too, naming itself as the one that answered; once
    // the followers caught up, every lag is 0 and every log as long as the leader's.
    for n in 1..=3 {
        wait_until(
            Duration::from_secs(20),
            &format!("replica {n} shows all caught up"),
            || {
                let Some(rows) = r.cluster(n) else {
                    return false;
                };
                let last = row(&rows, leader)["last_log"].clone();
                rows.len() == 3
                    && rows
                        .iter()
                        .all(|x| x["lag"] == 0 && x["last_log"] == last && x["leader"] == leader)
            },
        );
        let rows = r.cluster(n).unwrap();
        for x in &rows {
            let m = x["replica"].as_u64().unwrap();
            assert_eq!(x["answering"], m == n, "{x}");
            let role = if m == leader { "leader" } else { "follower" };
            assert_eq!(x["role"], role, "{x}");
            assert!(x["term"].as_u64().unwrap() >= 1, "{x}");
            assert!(x["applied"].as_u64().unwrap() >= 3, "{x}");
            assert!(
                x["address"].as_str().unwrap().starts_with("127.0.0.1:"),
                "{x}"
            );
        }
    }
    let table = stdout(&r.run(leader, "yctl", &["cluster"]));
    assert!(
        table.starts_with("REPLICA") && table.contains("leader") && table.contains("follower"),
        "{table}"
    );

    // A follower killed: unreachable on the others, figures unknown.
    let (f1, f2) = {
        let f: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
        (f[0], f[1])
    };
    r.kill(f2, Signal::SIGKILL);
    let asked = std::time::Instant::now();
    let rows = r
        .cluster(f1)
        .expect("a follower answers with a replica gone");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    let gone = row(&rows, f2);
    assert_eq!(gone["role"], "unreachable", "{rows:?}");
    for field in ["term", "applied", "last_log", "lag", "leader"] {
        assert!(gone[field].is_null(), "{field}: {gone}");
    }
    assert_eq!(row(&rows, leader)["role"], "leader");
    assert!(stdout(&r.run(f1, "yctl", &["cluster"])).contains("unreachable"));

    // The leader killed too: no quorum, and the last replica still answers.
    r.kill(leader, Signal::SIGKILL);
    let rows = r.cluster(f1).expect("a lone replica answers");
    assert_eq!(row(&rows, leader)["role"], "unreachable", "{rows:?}");
    assert_eq!(row(&rows, f1)["answering"], true);
    wait_until(Duration::from_secs(10), "no leader is known", || {
        r.cluster(f1).is_some_and(|rows| {
            rows.iter()
                .all(|x| x["lag"].is_null() && x["role"] != "leader")
        })
    });
}

#[test]
fn a_follower_forwards_clients_to_the_leader_as_themselves() {
    let (mut r, leader) = with_an_agent();
    let follower = (1..=3).find(|n| *n != leader).unwrap();

    // nobody submits on a follower's socket: the leader takes it, as nobody's.
    let out = r.run_as(
        follower,
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "--hold", "-J", "theirs", "--wrap", "true"],
    );
    assert!(out.status.success(), "{}\n{}", stderr(&out), r.logs());
    let theirs: u64 = stdout(&out).trim().parse().unwrap();
    let j = job(&r, leader, theirs).expect("the forwarded job");
    assert_eq!(
        (j["user"].as_str(), j["uid"].as_u64()),
        (Some("nobody"), Some(65534)),
        "{j}"
    );
    // Listed through the follower too, for nobody and for root.
    let out = r.run_as(follower, NOBODY, NOBODY, "yq", &["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("\"id\":{theirs}")),
        "{}",
        stdout(&out)
    );
    let mine = r.submit(follower, &["--hold", "-J", "mine", "--wrap", "true"]);
    assert_eq!(job(&r, follower, mine).unwrap()["user"], "root");

    // nobody cannot touch root's job through the follower, nor name itself root there: the
    // caller metadata a client sends is not passed on.
    let out = r.run_as(follower, NOBODY, NOBODY, "ycancel", &[&mine.to_string()]);
    assert!(!out.status.success(), "nobody cancelled root's job");
    assert_eq!(job(&r, leader, mine).unwrap()["state"], "HELD");
    let forged = call_as(
        &r.socket(follower),
        NOBODY,
        NOBODY,
        |mut client| async move {
            let mut request = tonic::Request::new(ysched_proto::SubmitRequest {
                spec: Some(ysched_proto::JobSpec {
                    name: "forged".into(),
                    script: "#!/bin/sh\ntrue\n".into(),
                    workdir: "/tmp".into(),
                    hold: true,
                    ..Default::default()
                }),
            });
            let claim = ysched_proto::RelayedCaller {
                uid: 0,
                gid: 0,
                user: "root".into(),
                groups: vec!["root".into()],
                ..Default::default()
            };
            request.metadata_mut().insert_bin(
                ysched_common::identity::RELAYED_CALLER_METADATA,
                tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&claim)),
            );
            client.submit(request).await.map(|r| r.into_inner().job_id)
        },
    );
    let id = forged.expect("nobody's submit with a forged caller");
    let j = job(&r, leader, id).unwrap();
    assert_eq!(j["user"], "nobody", "a forged caller was believed: {j}");

    // Root on an agent's host, with that host's own certificate, cannot pass its users off
    // as forwarded by a replica (only replicas' certificates forward).
    let rows = r.cluster(leader).unwrap();
    let addr = row(&rows, leader)["address"].as_str().unwrap().to_string();
    let ca = r.dir.path().join("cluster-ca.crt");
    let identity = r.dir.path().join("spool/n1/identity");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = ysched_tests::host_link::host_channel(&addr, &ca, Some(&identity)).await;
        let mut client = ysched_proto::ysched_client::YschedClient::new(channel);
        for token in [Vec::new(), vec![0u8; 32]] {
            let claim = ysched_proto::RelayedCaller {
                uid: 0,
                gid: 0,
                user: "root".into(),
                groups: vec!["root".into()],
                relay_token: token,
                forwarded_by_replica: follower,
                ..Default::default()
            };
            let mut request = tonic::Request::new(ysched_proto::SharesRequest::default());
            request.metadata_mut().insert_bin(
                ysched_common::identity::RELAYED_CALLER_METADATA,
                tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&claim)),
            );
            let status = client.shares(request).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
            assert!(
                status.message().contains(
                    "names compute host 'n1': it may not send a request said to be forwarded"
                ),
                "{status:?}"
            );
        }
    });

    // Forwarding needs a leader: with the leader and the other follower gone, the last
    // replica first fails to reach the old leader (naming it), then says there is no quorum.
    let other = (1..=3).find(|n| *n != leader && *n != follower).unwrap();
    r.kill(other, Signal::SIGKILL);
    r.kill(leader, Signal::SIGKILL);
    let out = r.run(follower, "yq", &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("no quorum")
            || (err.contains("not the leader")
                && err.contains(&format!("replica {leader} at 127.0.0.1:"))),
        "{err}"
    );
    wait_until(
        Duration::from_secs(20),
        "the lone follower refuses: no quorum",
        || stderr(&r.run(follower, "yq", &[])).contains("no quorum"),
    );
}

/// Job `id`'s runs as the leader's history has them (`GetJob` on replica `n`, times in ms):
/// each from `scheduled` to the `exited` that follows, as the report charges them.
fn runs_of(r: &Replicas, n: u64, id: u64) -> Vec<(i64, i64)> {
    runs_in_history(&job_detail(&r.socket(n), id))
}

/// The lines of each job's start file (one line per start of the job).
fn starts(dir: &std::path::Path, names: &[String]) -> Vec<(String, usize)> {
    names
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            (name.clone(), text.lines().count())
        })
        .collect()
}

/// Submits `count` one-GPU jobs named `{prefix}{i}` whose script appends a line to
/// `starts/{prefix}{i}` and then runs `body(i)`; their ids.
fn submit_recorded(
    r: &mut Replicas,
    leader: u64,
    prefix: &str,
    count: usize,
    body: impl Fn(usize) -> String,
) -> (Vec<u64>, Vec<String>) {
    let dir = r.dir.path().join("starts");
    std::fs::create_dir_all(&dir).unwrap();
    let mut ids = Vec::new();
    let mut names = Vec::new();
    for i in 0..count {
        let name = format!("{prefix}{i}");
        let script = format!("echo $$ >> {}/{name}; {}", dir.display(), body(i));
        ids.push(r.submit(leader, &["-G", "1", "-J", &name, "--wrap", &script]));
        names.push(name);
    }
    (ids, names)
}

/// Whether every job of `ids` is in `state` as replica `n` lists them.
fn all_in(r: &Replicas, n: u64, ids: &[u64], state: &str) -> bool {
    let jobs = r.jobs(n);
    ids.iter().all(|id| {
        jobs.iter()
            .any(|j| j["id"].as_u64() == Some(*id) && j["state"] == state)
    })
}

#[test]
fn a_kill_9_of_the_leader_under_four_clients_and_sixteen_jobs_loses_and_disturbs_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let (mut r, leader) = with_an_agent_of(16);
    let (running, names) = submit_recorded(&mut r, leader, "run", 16, |_| "exec sleep 600".into());
    wait_until(Duration::from_secs(60), "the 16 jobs run", || {
        all_in(&r, leader, &running, "RUNNING")
            && starts(&r.dir.path().join("starts"), &names)
                .iter()
                .all(|(_, n)| *n == 1)
    });

    // Four clients submit in a loop, each on a replica's socket of its own (followers
    // forward), moving to the next replica when theirs fails.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4u64)
        .map(|c| {
            let (clients, stop) = (r.clients(), stop.clone());
            std::thread::spawn(move || {
                let mut acked: Vec<(u64, Instant)> = Vec::new();
                let mut n = c % 3 + 1;
                while !stop.load(Ordering::Relaxed) {
                    let out = clients.run_within(
                        n,
                        Duration::from_secs(10),
                        "ysub",
                        &[
                            "--parsable",
                            "--hold",
                            "-J",
                            &format!("client{c}"),
                            "--wrap",
                            "true",
                        ],
                    );
                    match stdout(&out).trim().parse::<u64>() {
                        Ok(id) if out.status.success() => {
                            acked.push((id, Instant::now()));
                            // A user's pace, not a busy loop: the suite runs tests side by
                            // side on few CPUs, and the replicas' election needs some.
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        _ => {
                            n = n % 3 + 1;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let killed = Instant::now();
    r.kill(leader, Signal::SIGKILL);
    let (second, took) = r.leader(Duration::from_secs(30));
    assert_ne!(second, leader);
    // The clients go on a while under the new leader.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let mut acked: Vec<(u64, Instant)> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("client thread"))
        .collect();
    acked.sort_by_key(|(_, at)| *at);
    let gap = acked
        .windows(2)
        .map(|w| w[1].1 - w[0].1)
        .max()
        .unwrap_or_default();
    println!(
        "kill -9 under load: {} submits acknowledged, a new leader served {took:?} after the \
         kill; the longest gap between two acknowledged submits: {gap:?}",
        acked.len()
    );
    assert!(
        acked.iter().any(|(_, at)| *at > killed + took),
        "no submit acknowledged after the failover\n{}",
        r.logs()
    );
    assert!(gap < Duration::from_secs(15), "gap {gap:?}\n{}", r.logs());

    // Nothing acknowledged lost, no id twice.
    let ids_acked: BTreeSet<u64> = acked.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids_acked.len(), acked.len(), "an id was handed out twice");
    let listed = ids(&r.jobs(second));
    assert!(
        ids_acked.is_subset(&listed),
        "lost: {:?}",
        ids_acked.difference(&listed)
    );
    assert!(ids_acked.is_disjoint(&running.iter().copied().collect()));
    // No job started twice, stopped or requeued (the agent re-registered with the new
    // leader meanwhile, at its next heartbeat).
    std::thread::sleep(Duration::from_secs(5));
    let jobs = r.jobs(second);
    for id in &running {
        let j = jobs.iter().find(|j| j["id"].as_u64() == Some(*id)).unwrap();
        assert_eq!(j["state"], "RUNNING", "{j}");
        assert_eq!(j["restart_count"], 0, "{j}");
    }
    let started = starts(&r.dir.path().join("starts"), &names);
    assert!(started.iter().all(|(_, n)| *n == 1), "{started:?}");
}

#[test]
fn a_rolling_restart_disturbs_no_job_and_charges_every_run_once() {
    let (mut r, leader) = with_an_agent_of(8);
    // Four jobs outlast the restarts; four end during them.
    let (long, mut names) = submit_recorded(&mut r, leader, "long", 4, |_| "sleep 40".into());
    let (short, short_names) = submit_recorded(&mut r, leader, "short", 4, |i| {
        format!("sleep {}", 3 + 3 * i)
    });
    names.extend(short_names);
    let all: Vec<u64> = long.iter().chain(&short).copied().collect();
    wait_until(Duration::from_secs(60), "the 8 jobs run", || {
        all_in(&r, leader, &all, "RUNNING")
    });

    // Followers first, the leader last; each back in the cluster, caught up, before the next.
    let order: Vec<u64> = (1..=3)
        .filter(|n| *n != leader)
        .chain(std::iter::once(leader))
        .collect();
    for n in order {
        r.stop(n);
        r.start_replica(n);
        wait_until(
            Duration::from_secs(60),
            &format!("replica {n} is back, caught up"),
            || {
                r.runs(n);
                r.cluster(n).is_some_and(|rows| {
                    let me = row(&rows, n);
                    me["lag"] == 0 && rows.iter().any(|x| x["role"] == "leader")
                })
            },
        );
    }
    let (now, _) = r.leader(Duration::from_secs(30));
    let jobs = r.jobs(now);
    for id in &long {
        let j = jobs.iter().find(|j| j["id"].as_u64() == Some(*id)).unwrap();
        assert_eq!(j["state"], "RUNNING", "{j}\n{}", r.logs());
        assert_eq!(j["restart_count"], 0, "{j}");
    }

    wait_until(Duration::from_secs(90), "every job completes", || {
        all_in(&r, now, &all, "COMPLETED")
    });
    let jobs = r.jobs(now);
    for id in &all {
        let j = jobs.iter().find(|j| j["id"].as_u64() == Some(*id)).unwrap();
        assert_eq!(j["restart_count"], 0, "{j}");
    }
    let started = starts(&r.dir.path().join("starts"), &names);
    assert!(started.iter().all(|(_, n)| *n == 1), "{started:?}");

    // Every end recorded once: one run each, and the report charges exactly those.
    let mut charged_ms = 0;
    for id in &all {
        let runs = runs_of(&r, now, *id);
        assert_eq!(runs.len(), 1, "job {id}: {runs:?}");
        charged_ms += runs.iter().map(|(s, e)| (e - s) as u64).sum::<u64>();
    }
    let out = r.run(
        now,
        "yctl",
        &["report", "--json", "--since", "1d", "--by", "user"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cluster"]["runs"], 8, "{report:#}");
    let root = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "root")
        .unwrap_or_else(|| panic!("{report:#}"));
    let reported_ms = (root["gpu_seconds"].as_f64().unwrap() * 1000.0).round() as u64;
    assert_eq!(reported_ms, charged_ms, "{root:#}");
    println!(
        "rolling restart: replicas restarted after losing the lead: {}",
        r.restarts()
    );
}

/// A follower whose state is lost (its state directory wiped) does not come back as a voter:
/// schedd refuses to start it, saying how to bring it back. Removed, started again, added and
/// promoted once caught up, it votes again and can lead, with every job and the running job
/// undisturbed.
#[test]
fn a_wiped_replica_is_refused_then_rejoins_as_a_learner_and_leads() {
    let (mut r, mut leader) = with_an_agent();
    let pids = r.dir.path().join("pids");
    let running = r.submit(
        leader,
        &[
            "--wrap",
            &format!("echo $$ >> {}; exec sleep 300", pids.display()),
        ],
    );
    let mut acked: BTreeSet<u64> = (0..30)
        .map(|i| {
            r.submit(
                leader,
                &["--hold", "-J", &format!("w{i}"), "--wrap", "true"],
            )
        })
        .collect();
    acked.insert(running);
    wait_until(Duration::from_secs(30), "the job runs", || {
        job(&r, leader, running).is_some_and(|j| j["state"] == "RUNNING")
    });

    let wiped = (1..=3).find(|n| *n != leader).unwrap();
    let addr = row(&r.cluster(leader).unwrap(), wiped)["address"]
        .as_str()
        .unwrap()
        .to_string();
    r.kill(wiped, Signal::SIGKILL);
    std::fs::remove_dir_all(r.dir.path().join(format!("state-{wiped}"))).unwrap();
    // Still a voter of the cluster: it refuses to start, and says what to do.
    let (status, err) = r.start_replica_refused(wiped);
    assert_eq!(status.code(), Some(78), "{err}");
    assert!(
        err.contains(&format!("yctl cluster remove {wiped}")) && err.contains("must not vote"),
        "{err}"
    );
    // The documented procedure: remove, start, add, promote once caught up.
    let admin = |r: &Replicas, args: &[&str]| {
        let out = r.run(leader, "yctl", &[&["cluster"], args].concat());
        assert!(
            out.status.success(),
            "yctl cluster {args:?}: {}",
            stderr(&out)
        );
        stdout(&out)
    };
    let place = wiped.to_string();
    admin(&r, &["remove", &place]);
    r.start_replica(wiped);
    let out = r.run(leader, "yctl", &["cluster", "promote", &place]);
    assert!(!out.status.success(), "a removed replica was promoted");
    assert!(stderr(&out).contains("add it first"), "{}", stderr(&out));
    admin(&r, &["add", &addr, "--id", &place]);
    wait_until(
        Duration::from_secs(60),
        "the wiped replica caught up as a learner",
        || {
            r.cluster(leader).is_some_and(|rows| {
                let me = row(&rows, wiped);
                me["membership"] == "learner"
                    && me["votes"] == false
                    && me["lag"] == 0
                    && me["applied"].as_u64().is_some_and(|a| a > 30)
            })
        },
    );
    admin(&r, &["promote", &place]);
    wait_until(Duration::from_secs(20), "it votes again", || {
        r.cluster(leader).is_some_and(|rows| {
            let me = row(&rows, wiped);
            me["membership"] == "voter" && me["votes"] == true
        })
    });

    // Until it leads: the leader is killed and restarted (as a follower) in turn; each
    // election is the wiped replica's about half the time.
    let mut rounds = 0;
    while leader != wiped {
        rounds += 1;
        assert!(rounds <= 12, "the wiped replica never led\n{}", r.logs());
        r.kill(leader, Signal::SIGKILL);
        let (next, _) = r.leader(Duration::from_secs(30));
        r.start_replica(leader);
        leader = next;
    }
    let listed = ids(&r.jobs(wiped));
    assert!(
        acked.is_subset(&listed),
        "lost: {:?}",
        acked.difference(&listed)
    );
    let next = r.submit(wiped, &["--hold", "--wrap", "true"]);
    assert!(
        next > *acked.iter().max().unwrap(),
        "id {next} handed out again"
    );
    let j = job(&r, wiped, running).unwrap();
    assert_eq!(
        (&j["state"], &j["restart_count"]),
        (&"RUNNING".into(), &0.into()),
        "{j}"
    );
    let started = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(started.lines().count(), 1, "{started}");
}

/// The disk-loss case that lost acknowledged submits: C down, submits acknowledged by A and
/// B, A down, B restarted with an empty store beside the stale C. B refuses to start (it
/// would vote with a log it no longer has), so C cannot be elected without the submits; once
/// A is back, every acknowledged submit is there and no id is handed out twice.
#[test]
fn a_wiped_replica_never_votes_so_no_acknowledged_submit_is_lost() {
    let (mut r, a) = with_an_agent();
    let b = (1..=3).find(|n| *n != a).unwrap();
    let c = (1..=3).find(|n| *n != a && *n != b).unwrap();
    r.kill(c, Signal::SIGKILL);
    let acked: BTreeSet<u64> = (0..10)
        .map(|i| r.submit(a, &["--hold", "-J", &format!("acked{i}"), "--wrap", "true"]))
        .collect();
    r.kill(a, Signal::SIGKILL);
    r.kill(b, Signal::SIGKILL);
    std::fs::remove_dir_all(r.dir.path().join(format!("state-{b}"))).unwrap();
    r.start_replica(c);
    let (status, err) = r.start_replica_refused(b);
    assert_eq!(status.code(), Some(78), "{err}");
    assert!(err.contains("counts it as a voter"), "{err}");
    // C alone leads nothing and hands out no id.
    std::thread::sleep(Duration::from_secs(3));
    let out = r.run(c, "ysub", &["--parsable", "--hold", "--wrap", "true"]);
    assert!(!out.status.success(), "a lone stale replica took a submit");
    // A is back: A and C elect A, which has every acknowledged submit.
    r.start_replica(a);
    let (leader, _) = r.leader(Duration::from_secs(30));
    let listed = ids(&r.jobs(leader));
    assert!(
        acked.is_subset(&listed),
        "lost: {:?}\n{}",
        acked.difference(&listed),
        r.logs()
    );
    let next = r.submit(leader, &["--hold", "--wrap", "true"]);
    assert!(
        next > *acked.iter().max().unwrap(),
        "id {next} handed out again"
    );
}

/// A new cluster forms with a majority: the first replica leads alone, the second joins and
/// votes once caught up, and a third started later (with an empty store, as at its first
/// start) joins as a learner and is made a voter once it has caught up, without an
/// administrator: it never voted, so it has nothing to forget.
#[test]
fn a_replica_started_after_the_cluster_formed_joins_and_votes_once_caught_up() {
    let mut r = Replicas::configure(3);
    r.start_replica(1);
    r.start_replica(2);
    let mut leader = 0;
    wait_until(
        Duration::from_secs(30),
        "two replicas form the cluster",
        || {
            let Some(rows) = r.cluster(1) else {
                return false;
            };
            let voters = rows.iter().filter(|x| x["membership"] == "voter").count();
            let leads = rows.iter().find(|x| x["role"] == "leader");
            leader = leads.and_then(|x| x["replica"].as_u64()).unwrap_or(0);
            voters == 2 && leader != 0
        },
    );
    let out = r.run(leader, "yctl", &["node", "enrol", "n9"]);
    assert!(
        out.status.success(),
        "a formed cluster of two serves: {}",
        stderr(&out)
    );
    std::thread::sleep(Duration::from_secs(2));
    r.start_replica(3);
    wait_until(Duration::from_secs(30), "replica 3 votes", || {
        r.cluster(3).is_some_and(|rows| {
            let three = row(&rows, 3);
            three["membership"] == "voter" && three["votes"] == true && three["lag"] == 0
        })
    });
    assert!(r.runs(3), "replica 3 refused to start\n{}", r.logs());
}

/// `ysub --wait` returns with the job's exit code through the leader's socket and a
/// follower's alike (it once waited forever with replicas: the leader announced a job's end
/// before its own store had it, and the watch read the earlier version there).
#[test]
fn ysub_wait_returns_the_exit_code_through_every_replica() {
    let (mut r, leader) = with_an_agent();
    for n in 1..=3u64 {
        let code = (n + 10).to_string();
        let out = r.run(
            n,
            "ysub",
            &["-G", "1", "--wait", "--wrap", &format!("exit {code}")],
        );
        assert_eq!(
            out.status.code(),
            Some(n as i32 + 10),
            "ysub --wait on replica {n} (leader {leader}): {}\n{}",
            stderr(&out),
            r.logs()
        );
    }
    let _ = r.leader(Duration::from_secs(5));
}

#[test]
fn a_wait_carries_on_across_a_failover_through_a_follower_an_agent_and_the_old_leader() {
    let (mut r, leader) = with_an_agent();
    let follower = (1..=3).find(|n| *n != leader).unwrap();
    // A job of nobody's on n1 lets n1's client socket relay nobody (a compute node relays
    // only the users with a job running on it).
    let anchor = r.run_as(
        leader,
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-D", "/tmp", "--wrap", "sleep 300"],
    );
    let anchor: u64 = stdout(&anchor).trim().parse().expect("the anchor job's id");
    wait_until(Duration::from_secs(30), "the anchor job runs", || {
        job(&r, leader, anchor).is_some_and(|j| j["state"] == "RUNNING")
    });
    let clients = r.clients();
    let waits: Vec<_> = [
        (leader, None, 21),
        (follower, None, 22),
        (follower, Some("n1"), 23),
    ]
    .into_iter()
    .map(|(n, agent, code)| {
        let clients = clients.clone();
        std::thread::spawn(move || {
            let script = format!("sleep 15; exit {code}");
            let args = ["--wait", "-D", "/tmp", "--wrap", &script];
            let timeout = Duration::from_secs(150);
            let out = clients.run_via_as(n, agent, Some(NOBODY), timeout, "ysub", &args);
            (n, agent, code, out)
        })
    })
    .collect();
    let start = std::time::Instant::now();
    loop {
        let jobs = r.jobs(follower);
        if jobs.iter().filter(|j| j["state"] == "RUNNING").count() == 4 {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let states: Vec<_> = jobs.iter().map(|j| (&j["id"], &j["state"])).collect();
            let ended: Vec<_> = waits
                .into_iter()
                .filter(|w| w.is_finished())
                .map(|w| {
                    let (n, agent, _, out) = w.join().unwrap();
                    format!("replica {n} agent {agent:?}: {}", stderr(&out))
                })
                .collect();
            panic!(
                "the waited jobs do not run: {states:?}; {ended:?}\n{}",
                r.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The leader dies while they run; they end under the next one. Its host comes back a
    // little later (its socket is gone meanwhile).
    r.kill(leader, Signal::SIGKILL);
    let (next, _) = r.leader(Duration::from_secs(30));
    assert_ne!(next, leader);
    std::thread::sleep(Duration::from_secs(2));
    r.start_replica(leader);
    for wait in waits {
        let (n, agent, code, out) = wait.join().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "ysub --wait through replica {n}'s socket (agent {agent:?}), the leader {leader} \
             killed: {}\n{}",
            stderr(&out),
            r.logs()
        );
    }
}

#[test]
fn a_down_replica_is_logged_once_then_rarely() {
    let (mut r, leader) = with_an_agent();
    let down = (1..=3).find(|n| *n != leader).unwrap();
    let log = r.dir.path().join(format!("replica-{leader}.log"));
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    let before = lines().lines().count();
    r.kill(down, Signal::SIGKILL);
    // Submits go on meanwhile (each a replication the down replica misses).
    for _ in 0..5 {
        r.submit(leader, &["--hold", "--wrap", "true"]);
        std::thread::sleep(Duration::from_secs(2));
    }
    let text = lines();
    // What an administrator sees by default (schedd logs warnings and errors).
    let since: Vec<&str> = text
        .lines()
        .skip(before)
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        since.len() <= 3,
        "{} warnings in 10 s about a down replica:\n{}",
        since.len(),
        since.join("\n")
    );
    assert!(
        since
            .iter()
            .any(|l| l.contains(&format!("replica {down}")) && l.contains("does not answer")),
        "the down replica is not named:\n{}",
        since.join("\n")
    );
    // It comes back: said once.
    r.start_replica(down);
    wait_until(
        Duration::from_secs(30),
        "the replica is said to answer again",
        || lines().contains(&format!("replica {down} answers again")),
    );
}

/// A dead replica's host replaced by a new one at another address, under submits: removed,
/// the new host (with the dead one's number) added as a learner, promoted once caught up; then the leader is killed and
/// the cluster, counting the new host in its majority, has every acknowledged submit.
#[test]
fn a_dead_host_replaced_by_a_new_one_under_load_loses_nothing() {
    let (mut r, leader) = with_an_agent();
    let running = r.submit(leader, &["--wrap", "sleep 300"]);
    let dead = (1..=3).find(|n| *n != leader).unwrap();
    let stay = (1..=3).find(|n| *n != leader && *n != dead).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let submitters: Vec<_> = [leader, stay]
        .into_iter()
        .map(|n| {
            let (clients, stop) = (r.clients(), stop.clone());
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let args = ["--parsable", "--hold", "--wrap", "true"];
                    let out = clients.run(n, "ysub", &args);
                    if out.status.success() {
                        acknowledged.push(stdout(&out).trim().parse::<u64>().unwrap());
                    } else {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                acknowledged
            })
        })
        .collect();
    r.kill(dead, Signal::SIGKILL);
    let removed = r.run(leader, "yctl", &["cluster", "remove", &dead.to_string()]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    // The new host takes the dead one's number, at its own address.
    let new = dead;
    let addr = r.configure_replacement(new);
    let added = r.run(
        leader,
        "yctl",
        &["cluster", "add", &addr, "--id", &new.to_string()],
    );
    assert!(added.status.success(), "{}\n{}", stderr(&added), r.logs());
    r.start_replica(new);
    wait_until(Duration::from_secs(60), "the new host catches up", || {
        r.cluster(leader).is_some_and(|rows| {
            rows.iter()
                .any(|x| x["replica"] == new && x["membership"] == "learner" && x["lag"] == 0)
        })
    });
    let promoted = r.run(leader, "yctl", &["cluster", "promote", &new.to_string()]);
    assert!(promoted.status.success(), "{}", stderr(&promoted));
    wait_until(Duration::from_secs(30), "the new host votes", || {
        r.cluster(new).is_some_and(|rows| {
            rows.iter()
                .any(|x| x["replica"] == new && x["membership"] == "voter" && x["votes"] == true)
        })
    });
    // Now a majority needs the new host: the leader dies, and the other two elect one.
    r.kill(leader, Signal::SIGKILL);
    let (next, _) = r.leader(Duration::from_secs(30));
    assert!(next == stay || next == new, "replica {next} leads");
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acknowledged: Vec<u64> = submitters
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    assert!(
        acknowledged.len() >= 5,
        "only {acknowledged:?} acknowledged"
    );
    let listed = ids(&r.jobs(next));
    let lost: Vec<&u64> = acknowledged
        .iter()
        .filter(|id| !listed.contains(id))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged and lost: {lost:?}\n{}",
        r.logs()
    );
    assert_eq!(
        job(&r, next, running).map(|j| j["state"].clone()),
        Some("RUNNING".into())
    );
}
