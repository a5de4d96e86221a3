//! A cluster of several hosts, on loopback: each agent stands for a host, with its own name
//! and client socket. Users run the CLIs on any host (a login node's agent, a compute node's,
//! from inside a job) and are who the kernel says they are there; root elsewhere is not an
//! administrator unless its host is trusted; a node cut off from schedd stops its jobs itself
//! (its fence), so that schedd can run them elsewhere without running them twice; and a
//! schedd restart loses no job and no end.

use serde_json::Value;
use std::time::{Duration, Instant};
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

fn detail(c: &TestCluster, id: u64) -> Value {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn events_of_kind(c: &TestCluster, id: u64, kind: &str) -> Vec<Value> {
    detail(c, id)["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

fn audit(c: &TestCluster) -> Vec<Value> {
    let out = c.run("yctl", &["audit", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}{}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

#[test]
fn users_submit_list_and_cancel_from_any_host_as_themselves() {
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 1, A100),
        FakeNode::uniform("n2", 1, A100),
    ]);
    c.start_login_agent("login1");
    // nobody on the login node: submit, list, cancel.
    let id: u64 = ok(&c.run_on(
        Some("login1"),
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-G", "1", "--wrap", "sleep 300"],
    ))
    .trim()
    .parse()
    .unwrap();
    let listed: Vec<Value> = serde_json::from_str(&ok(&c.run_on(
        Some("login1"),
        NOBODY,
        NOBODY,
        "yq",
        &["--json", "-j", &id.to_string()],
    )))
    .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["uid"], NOBODY, "{}", listed[0]);
    assert_eq!(listed[0]["user"], "nobody", "{}", listed[0]);
    let submitted = events_of_kind(&c, id, "submitted");
    assert!(
        submitted[0]["detail"]
            .as_str()
            .unwrap()
            .contains("from login1"),
        "{submitted:?}"
    );
    c.wait_state(id, "RUNNING", SECS(10));
    ok(&c.run_on(
        Some("login1"),
        NOBODY,
        NOBODY,
        "ycancel",
        &[&id.to_string()],
    ));
    let j = c.wait_state(id, "CANCELLED", SECS(20));
    assert!(j["reason"].as_str().unwrap().contains("nobody"), "{j}");
    // nobody may not cancel root's job through an agent either: the agent's own root
    // identity is not lent to its callers.
    let roots = c.submit(&["--hold", "--wrap", "true"]);
    let out = c.run_on(
        Some("login1"),
        NOBODY,
        NOBODY,
        "ycancel",
        &[&roots.to_string()],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("may only act on your own jobs"),
        "{}",
        stderr(&out)
    );
    // The audit log names the host each relayed request came from.
    let cancel = audit(&c)
        .into_iter()
        .find(|e| e["action"] == "cancel" && e["job_id"] == id)
        .expect("the cancel is audited");
    assert_eq!(cancel["user"], "nobody", "{cancel}");
    assert_eq!(cancel["host"], "login1", "{cancel}");

    // A job submits its follow-up from the compute node it runs on, as its own user.
    let ysub = c.bin_copy("ysub");
    let child_id_file = c.path("child.id");
    let script = format!(
        "{} --parsable -G 0 --wrap 'id -u > {}' > {}",
        ysub.display(),
        c.path("child.uid").display(),
        child_id_file.display()
    );
    let parent: u64 = ok(&c.run_on(
        Some("login1"),
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-G", "1", "--wrap", &script],
    ))
    .trim()
    .parse()
    .unwrap();
    let p = c.wait_state(parent, "COMPLETED", SECS(30));
    let parent_node = p["node"].as_str().unwrap().to_string();
    let child: u64 = read_when_exists(&child_id_file, SECS(5))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("no child id ({e}): {}", c.logs()));
    let j = c.wait_state(child, "COMPLETED", SECS(30));
    assert_eq!(
        j["uid"], NOBODY,
        "the child is nobody's, not the agent's: {j}"
    );
    let uid = read_when_exists(&c.path("child.uid"), SECS(5));
    assert_eq!(uid.trim(), NOBODY.to_string());
    let submitted = events_of_kind(&c, child, "submitted");
    assert!(
        submitted[0]["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("from {parent_node}")),
        "the job's own node relayed its submit: {submitted:?}"
    );
}

#[test]
fn relayed_root_administers_only_from_admin_hosts() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        "admin_hosts = [\"login2\"]",
        "",
    );
    c.start_login_agent("login1");
    c.start_login_agent("login2");
    let drain = ["drain", "n1", "--reason", "fan"];
    let out = c.run_on(Some("login1"), 0, 0, "yctl", &drain);
    assert!(!out.status.success(), "root@login1 drained n1");
    let err = stderr(&out);
    assert!(
        err.contains("only administrators") && err.contains("root@login1"),
        "{err}"
    );
    let out = c.run_on(Some("login1"), 0, 0, "yctl", &["audit"]);
    assert!(!out.status.success(), "root@login1 read the audit log");
    assert_eq!(c.nodes()[0]["state"], "IDLE");

    ok(&c.run_on(Some("login2"), 0, 0, "yctl", &drain));
    assert_eq!(c.nodes()[0]["state"], "DRAINED");
    let entry = audit(&c)
        .into_iter()
        .find(|e| e["action"] == "drain")
        .expect("the drain is audited");
    assert_eq!(entry["host"], "login2", "{entry}");
    // Root on schedd's own socket still is an administrator.
    ok(&c.run("yctl", &["resume", "n1"]));
    // Relayed root is not `root` of a tier's allow list either (the default `critical`).
    let out = c.run_on(
        Some("login1"),
        0,
        0,
        "ysub",
        &["-p", "critical", "--wrap", "true"],
    );
    assert!(
        !out.status.success(),
        "root@login1 submitted a critical job"
    );
    assert!(stderr(&out).contains("may not submit"), "{}", stderr(&out));
}

/// `start <node> <time>` and `stop <node> <time>` lines the job writes itself.
fn run_log(path: &std::path::Path) -> Vec<(String, String, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((
                parts.next()?.to_string(),
                parts.next()?.to_string(),
                parts.next()?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn a_hung_agents_job_is_fenced_then_requeued_elsewhere_never_running_twice() {
    use nix::sys::signal::Signal::{SIGCONT, SIGSTOP};
    let c = TestCluster::start_with(
        vec![
            FakeNode::uniform("n1", 1, A100),
            FakeNode::uniform("n2", 1, A100),
        ],
        "node_timeout_secs = 8",
        "fence_after_secs = 5",
    );
    let log = c.path("runs.log");
    let body = format!(
        "#!/bin/bash\n\
         echo \"start $YS_NODE $(date +%s.%N)\" >> {log}\n\
         trap 'echo \"stop $YS_NODE $(date +%s.%N)\" >> {log}; exit 0' TERM\n\
         while true; do sleep 0.2; done\n",
        log = log.display()
    );
    let script = c.script("fenced.sh", &body);
    let id = c.submit(&["-G", "1", "--grace", "2", script.to_str().unwrap()]);
    let j = c.wait_state(id, "RUNNING", SECS(10));
    let first = j["node"].as_str().unwrap().to_string();
    let other = if first == "n1" { "n2" } else { "n1" };
    wait_until(SECS(10), "first start logged", || run_log(&log).len() == 1);

    // The agent hangs: it sends nothing, renews nothing, stops nothing.
    c.signal_agent(&first, SIGSTOP);
    let hung_at = Instant::now();
    wait_until(
        SECS(20),
        "the fence stops the job while its agent hangs",
        || run_log(&log).iter().any(|(what, _, _)| what == "stop"),
    );
    let fenced_after = hung_at.elapsed();
    // Meanwhile schedd waits for the fence and the grace to be surely over.
    let waiting = c.job(id);
    assert_eq!(waiting["restart_count"], 0, "{waiting}");
    wait_until(SECS(40), "the job requeued and running again", || {
        let j = c.job(id);
        j["restart_count"] == 1 && j["state"] == "RUNNING"
    });
    let j = c.job(id);
    assert_eq!(j["node"], other, "requeued elsewhere: {j}");
    assert_eq!(j["restart_count"], 1, "{j}");
    wait_until(SECS(10), "second start logged", || run_log(&log).len() == 3);
    let runs = run_log(&log);
    assert_eq!(runs[0].0, "start");
    assert_eq!(runs[0].1, first);
    assert_eq!(runs[1].0, "stop");
    assert_eq!(runs[1].1, first);
    assert_eq!(runs[2].0, "start");
    assert_eq!(runs[2].1, other);
    assert!(
        runs[2].2 >= runs[1].2,
        "the job ran on {other} before it stopped on {first}: {runs:?}"
    );
    assert!(
        fenced_after < SECS(15),
        "fenced only after {fenced_after:?}"
    );
    let requeued = events_of_kind(&c, id, "requeued");
    assert_eq!(requeued.len(), 1, "{requeued:?}");

    // The agent wakes up and reconnects: the job stays where it is, requeued once.
    c.signal_agent(&first, SIGCONT);
    c.wait_nodes_up(2);
    std::thread::sleep(SECS(3));
    let j = c.job(id);
    assert_eq!(j["state"], "RUNNING", "{j}");
    assert_eq!(j["node"], other, "{j}");
    assert_eq!(j["restart_count"], 1, "{j}");
    assert_eq!(run_log(&log).len(), 3, "{:?}", run_log(&log));
    ok(&c.run("ycancel", &[&id.to_string()]));
    c.wait_state(id, "CANCELLED", SECS(20));
}

#[test]
fn jobs_of_a_silent_node_that_does_not_fence_end_node_fail() {
    use nix::sys::signal::Signal::{SIGCONT, SIGSTOP};
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        "node_timeout_secs = 6",
        "fence_after_secs = 0",
    );
    let id = c.submit(&["-G", "1", "--wrap", "sleep 300"]);
    c.wait_state(id, "RUNNING", SECS(10));
    c.signal_agent("n1", SIGSTOP);
    let j = c.wait_state(id, "NODE_FAIL", SECS(30));
    assert!(j["reason"].as_str().unwrap().contains("n1"), "{j}");
    c.signal_agent("n1", SIGCONT);
}

#[test]
fn a_schedd_outage_loses_no_job_and_records_every_end_once() {
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 1, A100),
        FakeNode::uniform("n2", 1, A100),
        FakeNode::uniform("n3", 1, A100),
    ]);
    // Three end while schedd is away, three more run after it is back.
    let ids: Vec<u64> = (0..6)
        .map(|i| {
            let secs = if i < 3 { 6 } else { 2 };
            c.submit(&["-G", "1", "--wrap", &format!("sleep {secs}")])
        })
        .collect();
    for id in &ids[..3] {
        c.wait_state(*id, "RUNNING", SECS(10));
    }
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    std::thread::sleep(SECS(20));
    c.start_schedd();
    for id in &ids {
        c.wait_state(*id, "COMPLETED", SECS(60));
    }
    for id in &ids {
        let exits = events_of_kind(&c, *id, "exited");
        assert_eq!(exits.len(), 1, "job {id}: {exits:?}");
        assert_eq!(c.job(*id)["restart_count"], 0);
    }
}
