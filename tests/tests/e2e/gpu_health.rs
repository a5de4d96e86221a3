//! End-to-end: GPUs that fail are taken out of service by themselves. Real `schedd` and
//! `noded` processes; the GPUs are fake (`noded --fake-gpus`), and a GPU fails when the test
//! rewrites the agent's inventory file with a `fault` (an event, such as an XID error: reported
//! until an administrator returns the GPU) or a `failing` (a state, such as pages pending
//! retirement: reported while it lasts). The agents poll their GPUs' health every second.

use serde_json::Value;
use std::io::{Read, Write};
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const XID79: &str = "XID 79: GPU has fallen off the bus";
const NOBODY: u32 = 65534;
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A cluster of `nodes` whose agents poll their GPUs' health every second.
fn cluster(nodes: Vec<FakeNode>, scheduler_toml: &str) -> TestCluster {
    TestCluster::start_with(nodes, scheduler_toml, "gpu_health_secs = 1")
}

fn node(c: &TestCluster, name: &str) -> Value {
    c.nodes()
        .into_iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("node {name} not listed"))
}

/// The GPU indices of node `name` out of service, as `yctl nodes --json` lists them.
fn out_of_service(c: &TestCluster, name: &str) -> Vec<u64> {
    node(c, name)["gpus_out_of_service"]
        .as_array()
        .expect("gpus_out_of_service")
        .iter()
        .map(|o| o["index"].as_u64().unwrap())
        .collect()
}

fn show_job(c: &TestCluster, id: u64) -> Value {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until job `id` runs again after a requeue (restart 1) and returns it.
fn wait_rerun(c: &TestCluster, id: u64) -> Value {
    let mut job = Value::Null;
    wait_until(
        SECS(30),
        "the job to run again after its GPU failed",
        || {
            job = c.job(id);
            job["state"] == "RUNNING" && job["restart_count"] == 1
        },
    );
    job
}

/// schedd's metrics as text (`GET /metrics`).
fn metrics(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    s.set_read_timeout(Some(SECS(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

fn audit(c: &TestCluster) -> Vec<Value> {
    let out = c.run("yctl", &["audit", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_gpu_failing_under_a_job_is_taken_out_of_service_and_the_job_runs_again_on_another() {
    let port = free_port();
    let mut c = cluster(
        vec![FakeNode::uniform("n1", 4, A100)],
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
    );
    let victim = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let bystander = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let failed = job_gpus(&c.wait_state(victim, "RUNNING", SECS(20)))[0];
    let kept = job_gpus(&c.wait_state(bystander, "RUNNING", SECS(20)))[0];

    // The victim's GPU falls off the bus.
    let fault = format!("fault = \"{XID79}\"");
    c.set_gpu_faults("n1", &[(failed as u32, &fault)]);
    let rerun = wait_rerun(&c, victim);
    let moved_to = job_gpus(&rerun)[0];
    assert_ne!(moved_to, failed, "placed again on the GPU that failed");

    // What the job's owner sees: why it ended, in its history.
    let detail = show_job(&c, victim);
    let events: Vec<(String, String)> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap().to_string();
            (text("kind"), text("detail"))
        })
        .collect();
    let why = format!("GPU {failed} of n1 failed: {XID79}");
    assert!(
        events
            .iter()
            .any(|(k, d)| k == "gpu_failed" && d.starts_with(&why)),
        "{events:?}"
    );
    assert!(
        events.contains(&("requeued".to_string(), format!("restart 1: {why}"))),
        "{events:?}"
    );
    let text = stdout(&c.run("yctl", &["show", "job", &victim.to_string()]));
    assert!(text.contains(&format!("restart 1: {why}")), "{text}");

    // The other GPUs ran on and take new jobs; that GPU takes none.
    let b = c.job(bystander);
    assert_eq!(
        (b["state"].as_str(), b["restart_count"].as_u64()),
        (Some("RUNNING"), Some(0))
    );
    assert_eq!(job_gpus(&b), [kept]);
    let newcomer = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let newcomer_gpus = job_gpus(&c.wait_state(newcomer, "RUNNING", SECS(20)));
    assert_ne!(newcomer_gpus, [failed]);
    let waiting = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let out_of_service_reason = format!("(GPU {failed} out of service)");
    wait_until(SECS(15), "the waiting job's reason", || {
        let w = show_job(&c, waiting);
        assert_eq!(w["state"], "PENDING", "{w}");
        w["reason"]
            .as_str()
            .unwrap()
            .contains(&out_of_service_reason)
    });

    // The node is up, the GPU is out: in `yctl nodes`, `show node`, their JSON.
    let n1 = node(&c, "n1");
    assert_eq!(n1["state"], "ALLOCATED", "{n1}");
    let outage = &n1["gpus_out_of_service"][0];
    assert_eq!(outage["index"], failed);
    assert_eq!(outage["reason"], XID79);
    assert_eq!(outage["by"], "noded health");
    assert!(outage["since"].as_str().unwrap().ends_with('Z'));
    assert_eq!(n1["gpus"][failed as usize]["in_service"], false);
    let table = stdout(&c.run("yctl", &["nodes"]));
    assert!(table.contains("4x A100-SXM4-80GB (1 out)"), "{table}");
    assert!(table.contains(&format!("gpu{failed}: {XID79}")), "{table}");
    let shown = stdout(&c.run("yctl", &["show", "node", "n1"]));
    assert!(
        shown.contains(&format!("out of service: {XID79}"))
            && shown.contains(&format!("gpu{failed}  since "))
            && shown.contains(&format!("by noded health: {XID79}")),
        "{shown}"
    );

    // Audited, with the node as actor; counted in the metrics.
    let log = audit(&c);
    let entry = log
        .iter()
        .find(|e| e["action"] == "gpu_failed")
        .unwrap_or_else(|| panic!("no gpu_failed entry: {log:?}"));
    assert_eq!(entry["user"], "noded");
    assert_eq!(entry["host"], "n1");
    assert_eq!(entry["detail"], format!("node n1 GPU {failed}: {XID79}"));
    let scraped = metrics(port);
    assert!(
        scraped.contains(&format!(
            "ysched_gpus_out_of_service{{node=\"n1\",model=\"{A100}\"}} 1\n"
        )) && scraped.contains("ysched_gpu_failures_total{node=\"n1\"} 1\n"),
        "{scraped}"
    );

    // Only an administrator returns it.
    let gpu = failed.to_string();
    let refused = c.run_as(NOBODY, NOBODY, "yctl", &["resume", "n1", "--gpu", &gpu]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused)
            .contains("only administrators may take GPUs out of service or return them"),
        "{}",
        stderr(&refused)
    );

    // It stays out across a kill -9 of schedd.
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    c.wait_nodes_up(1);
    assert_eq!(out_of_service(&c, "n1"), [failed]);
    assert_eq!(c.job(victim)["state"], "RUNNING");

    // Repaired (the file no longer says it; the event stays until forgotten), then returned.
    c.set_gpu_faults("n1", &[]);
    std::thread::sleep(SECS(2));
    assert_eq!(
        out_of_service(&c, "n1"),
        [failed],
        "a repair needs an admin's word"
    );
    let out = c.run("yctl", &["resume", "n1", "--gpu", &gpu]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("GPU {failed} of n1 is back in service\n")
    );
    assert!(out_of_service(&c, "n1").is_empty());
    let started = c.wait_state(waiting, "RUNNING", SECS(20));
    assert_eq!(job_gpus(&started), [failed]);
    // The forgotten event does not take it out again.
    std::thread::sleep(SECS(3));
    assert!(out_of_service(&c, "n1").is_empty(), "{}", c.logs());
    let resumed = audit(&c)
        .into_iter()
        .find(|e| e["action"] == "resume_gpu")
        .expect("resume_gpu audited");
    assert_eq!(resumed["user"], "root");
    assert!(
        resumed["detail"]
            .as_str()
            .unwrap()
            .starts_with(&format!("node n1 GPU {failed} (was: {XID79}, since ")),
        "{resumed}"
    );
}

#[test]
fn a_lasting_fault_outlives_a_resume_and_an_admin_may_take_a_gpu_out_under_a_job() {
    let c = cluster(vec![FakeNode::uniform("n1", 2, A100)], "");
    let runner = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let first = job_gpus(&c.wait_state(runner, "RUNNING", SECS(20)))[0];
    let first_arg = first.to_string();

    // An administrator's suspicion: no new job there, the one running runs on.
    let out = c.run(
        "yctl",
        &["drain", "n1", "--gpu", &first_arg, "--reason", "fan noise"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let n1 = node(&c, "n1");
    assert_eq!(n1["gpus_out_of_service"][0]["by"], "root");
    assert_eq!(n1["gpus_out_of_service"][0]["reason"], "fan noise");

    // A job that may not be requeued gets the other GPU, which then fails for good.
    let fragile = c.submit(&["--no-requeue", "-G", "1", "--wrap", "sleep 600"]);
    let second = job_gpus(&c.wait_state(fragile, "RUNNING", SECS(20)))[0];
    assert_ne!(second, first);
    c.set_gpu_faults(
        "n1",
        &[(second as u32, "failing = \"pages pending retirement\"")],
    );
    let ended = c.wait_state(fragile, "NODE_FAIL", SECS(30));
    assert_eq!(
        ended["reason"],
        format!(
            "GPU {second} of n1 failed: pages pending retirement (not requeued: the job was \
             submitted with --no-requeue)"
        )
    );
    // Every GPU is out: the node takes no job, and says why.
    let n1 = node(&c, "n1");
    assert_eq!(n1["state"], "DRAINING", "{n1}");
    assert_eq!(n1["reason"], "all 2 GPUs out of service");

    // Resumed while the node still finds it failing: out again, and said so (exit 1).
    let second_arg = second.to_string();
    let out = c.run("yctl", &["resume", "n1", "--gpu", &second_arg]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "GPU {second} of n1 still reports: pages pending retirement; it is out of service \
             again (repair it, then resume it again)\n"
        )
    );
    assert!(out_of_service(&c, "n1").contains(&second));
    // Repaired: back.
    c.set_gpu_faults("n1", &[]);
    let out = c.run("yctl", &["resume", "n1", "--gpu", &second_arg]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(out_of_service(&c, "n1"), [first]);

    // The drained GPU's job ran on all along; a mistyped GPU is refused by name.
    let r = c.job(runner);
    assert_eq!(
        (r["state"].as_str(), r["restart_count"].as_u64()),
        (Some("RUNNING"), Some(0))
    );
    let out = c.run("yctl", &["resume", "n1", "--gpu", "5"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "yctl: error: GPU 5 of n1 does not exist (its GPUs: 0,1)"
    );
    let out = c.run("yctl", &["resume", "n1", "--gpu", &first_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out_of_service(&c, "n1").is_empty());
    let actions: Vec<String> = audit(&c)
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect();
    for action in ["drain_gpu", "gpu_failed", "resume_gpu"] {
        assert!(actions.iter().any(|a| a == action), "{action}: {actions:?}");
    }
}
