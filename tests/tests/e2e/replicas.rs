//! schedd under Raft (issue 24): three replicas on loopback. A `kill -9` of the leader loses
//! no acknowledged submit and hands out no id twice; a new leader serves within seconds;
//! followers name the leader; a replica that comes back catches up and can lead.

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
    // A follower refuses, naming the leader.
    let follower = (1..=3).find(|n| *n != leader).unwrap();
    let out = r.run(follower, "yq", &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("not the leader") && err.contains(&format!("replica {leader} at 127.0.0.1:")),
        "{err}"
    );

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
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", 2, "A100"));
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
    let (second, _) = r.leader(Duration::from_secs(30));
    assert_ne!(second, leader);
    // The agent finds the new leader; a job submitted there runs.
    let next = r.submit(second, &["--wrap", &script]);
    wait_until(Duration::from_secs(60), "the new leader's job runs", || {
        job(&r, second, next).is_some_and(|j| j["state"] == "RUNNING")
    });
    r.kill(leader, Signal::SIGCONT);
    // The old leader steps down (it exits, and comes back as a follower).
    wait_until(Duration::from_secs(30), "the old leader steps down", || {
        std::fs::read_to_string(r.dir.path().join(format!("replica-{leader}.log")))
            .unwrap_or_default()
            .contains("lost the lead")
    });
    std::thread::sleep(Duration::from_secs(2));
    let (now, _) = r.leader(Duration::from_secs(30));
    assert_ne!(now, leader, "the woken leader leads again");
    // Each job started once, and both still run.
    let started = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(started.lines().count(), 2, "{started}");
    for id in [first, next] {
        let j = job(&r, now, id).unwrap();
        assert_eq!(j["state"], "RUNNING", "{j}");
        assert_eq!(j["restart_count"], 0, "{j}");
    }
}
