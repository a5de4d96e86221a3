//! Checkpoint-aware eviction, end to end: the agent reports the newest file in each running
//! job's checkpoint directory with its heartbeats, `yctl show job` shows it, and of two
//! otherwise equal victims the one that saved a checkpoint recently is evicted.

use serde_json::Value;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn show(c: &TestCluster, id: u64) -> Value {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn show_text(c: &TestCluster, id: u64) -> String {
    let out = c.run("yctl", &["show", "job", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn of_two_equal_victims_the_one_that_just_checkpointed_is_evicted() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    let go = c.path("go");
    // A saves a checkpoint when told to; B never does. Submitted first, A is the older of
    // the two: without its checkpoint, it would be the one kept.
    let saver = c.script(
        "saver.sh",
        &format!(
            "#!/bin/sh\necho start\nwhile [ ! -e {go} ]; do sleep 0.1; done\n\
             echo saved > \"$YS_CHECKPOINT_DIR/step\"\necho saved\n\
             while true; do sleep 0.1; done\n",
            go = go.display()
        ),
    );
    let runner = c.script(
        "runner.sh",
        "#!/bin/sh\necho start\nwhile true; do sleep 0.1; done\n",
    );
    let a = c.submit(&["-p", "low", "-G", "1", saver.to_str().unwrap()]);
    let b = c.submit(&["-p", "low", "-G", "1", runner.to_str().unwrap()]);
    for id in [a, b] {
        c.wait_state(id, "RUNNING", SECS(30));
        let out = c.path(&format!("ysched-{id}.out"));
        wait_until(SECS(30), "job started", || {
            std::fs::read_to_string(&out).is_ok_and(|s| s.contains("start"))
        });
    }
    assert!(show(&c, a)["last_checkpoint"].is_null());
    // B has now run at least 3 s longer than A will have run since its checkpoint: whatever
    // the load, B has more work to lose.
    std::thread::sleep(SECS(3));
    std::fs::write(&go, "").unwrap();
    let out = c.path(&format!("ysched-{a}.out"));
    wait_until(SECS(30), "A saved its checkpoint", || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains("saved"))
    });
    // The agent's next heartbeats (every 2 s here) carry it.
    wait_until(SECS(30), "A's LastCheckpoint", || {
        show(&c, a)["last_checkpoint"].is_string()
    });
    let shown = show(&c, a);
    let start = shown["start_time"].as_str().unwrap();
    let saved = shown["last_checkpoint"].as_str().unwrap();
    assert!(
        saved >= start,
        "checkpoint {saved} before the start {start}"
    );
    let text = show_text(&c, a);
    assert!(text.contains(&format!("LastCheckpoint={saved}")), "{text}");
    assert!(show(&c, b)["last_checkpoint"].is_null());
    assert!(
        show_text(&c, b).contains("LastCheckpoint=None"),
        "{}",
        show_text(&c, b)
    );

    let critical = c.submit(&["-p", "critical", "-G", "1", "--wrap", "sleep 60"]);
    c.wait_state(critical, "RUNNING", SECS(60));
    let evicted = show(&c, a);
    assert_eq!(
        evicted["restart_count"], 1,
        "A was not the victim: {evicted}"
    );
    let events = evicted["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["kind"] == "preemption"
            && e["detail"]
                .as_str()
                .is_some_and(|d| d.contains(&format!("preemptor={critical}")))),
        "{events:#?}"
    );
    let kept = c.job(b);
    assert_eq!(kept["state"], "RUNNING", "{kept}");
    assert_eq!(kept["restart_count"], 0, "{kept}");
}
