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
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", 2, "A100"));
    let (leader, _) = r.leader(Duration::from_secs(30));
    wait_until(
        Duration::from_secs(30),
        "the agent registers with the leader",
        || {
            r.run(leader, "yctl", &["nodes", "--json"])
                .stdout
                .windows(4)
                .any(|w| w == b"\"n1\"")
        },
    );
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
