//! End-to-end preemption: real trainers that checkpoint on SIGTERM, real signals, requeue and
//! resume from the checkpoint.

use serde_json::Value;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A trainer: counts steps, saves the step to `$YS_CHECKPOINT_DIR/step` on SIGTERM and exits 0;
/// on start it resumes from that file.
const TRAINER: &str = r#"#!/bin/sh
ck="$YS_CHECKPOINT_DIR/step"
step=0
[ -f "$ck" ] && step=$(cat "$ck")
echo "start restart=$YS_RESTART_COUNT step=$step"
trap 'echo "$step" > "$ck.tmp" && mv "$ck.tmp" "$ck"; echo "checkpointed step=$step"; exit 0' TERM
while true; do step=$((step+1)); sleep 0.05; done
"#;

/// Ignores SIGTERM: only SIGKILL at the end of its grace stops it.
const STUBBORN: &str = "#!/bin/sh\ntrap '' TERM\necho start\nwhile true; do sleep 0.05; done\n";

fn full_cluster(extra: &str) -> TestCluster {
    TestCluster::start_with_config(
        vec![
            FakeNode::uniform("n1", 8, A100),
            FakeNode::uniform("n2", 8, A100),
        ],
        extra,
    )
}

fn events(c: &TestCluster, id: u64) -> Vec<Value> {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["events"].as_array().unwrap().clone()
}

fn fill_with(c: &TestCluster, script: &str, extra: &[&str]) -> Vec<u64> {
    let path = c.script("trainer.sh", script);
    let ids: Vec<u64> = (0..4)
        .map(|_| c.submit(&[&["-p", "low", "-G", "4"], extra, &[path.to_str().unwrap()]].concat()))
        .collect();
    for id in &ids {
        c.wait_state(*id, "RUNNING", SECS(15));
        let out = c.path(&format!("ysched-{id}.out"));
        wait_until(SECS(10), "trainer started", || {
            std::fs::read_to_string(&out).is_ok_and(|s| s.contains("start"))
        });
    }
    ids
}

#[test]
fn a_critical_job_evicts_exactly_one_trainer_which_resumes_from_its_checkpoint() {
    let c = full_cluster("");
    let trainers = fill_with(&c, TRAINER, &["--grace", "10"]);
    std::thread::sleep(Duration::from_millis(500)); // let them make progress
    let critical = c.submit(&[
        "-p",
        "critical",
        "-G",
        "4",
        "--wrap",
        "echo critical on $CUDA_VISIBLE_DEVICES; sleep 1",
    ]);
    let j = c.wait_state(critical, "COMPLETED", SECS(30));
    assert!(j["node"].is_string());
    // Exactly one trainer was evicted: it restarted once; the others never did.
    let all = c.jobs();
    let restarted: Vec<&Value> = all
        .iter()
        .filter(|j| trainers.contains(&j["id"].as_u64().unwrap()) && j["restart_count"] == 1)
        .collect();
    assert_eq!(restarted.len(), 1, "{all:#?}");
    let victim = restarted[0]["id"].as_u64().unwrap();
    for id in &trainers {
        if *id != victim {
            assert_eq!(c.job(*id)["restart_count"], 0);
            assert_eq!(c.job(*id)["state"], "RUNNING");
        }
    }
    // The victim resumes from its checkpoint with YS_RESTART_COUNT=1 once GPUs are free.
    let v = c.wait_state(victim, "RUNNING", SECS(20));
    assert_eq!(v["restart_count"], 1);
    let out_path = c.path(&format!("ysched-{victim}.out"));
    wait_until(SECS(10), "victim restarted", || {
        std::fs::read_to_string(&out_path).is_ok_and(|s| s.contains("start restart=1"))
    });
    let out = std::fs::read_to_string(&out_path).unwrap();
    let saved: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("checkpointed step="))
        .expect("checkpoint line")
        .parse()
        .unwrap();
    assert!(saved > 0, "trainer made progress before eviction");
    assert!(
        out.contains(&format!("start restart=1 step={saved}")),
        "{out}"
    );
    // The eviction is recorded: preemptor, exited by itself within grace, checkpoint saved.
    let ev = events(&c, victim);
    let pre = ev
        .iter()
        .find(|e| e["kind"] == "preemption")
        .expect("preemption event");
    let detail = pre["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("preemptor={critical}")),
        "{detail}"
    );
    assert!(detail.contains("exited within grace"), "{detail}");
    assert!(detail.contains("checkpoint_saved=true"), "{detail}");
    // The preemption is in the audit log.
    let out = c.run("yctl", &["audit", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let audit: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a["action"] == "preempt" && a["job_id"] == victim),
        "{audit:#?}"
    );
}

#[test]
fn a_victim_ignoring_sigterm_is_killed_at_the_end_of_its_grace() {
    let c = full_cluster("");
    let trainers = fill_with(&c, STUBBORN, &["--grace", "2"]);
    let t0 = std::time::Instant::now();
    let critical = c.submit(&["-p", "critical", "-G", "4", "--wrap", "sleep 30"]);
    // The victim is PREEMPTING during its grace; the critical job waits with a reason.
    wait_until(SECS(5), "a victim preempting", || {
        c.jobs().iter().any(|j| j["state"] == "PREEMPTING")
    });
    let reason = c.job(critical)["reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with("Preempting "), "{reason}");
    c.wait_state(critical, "RUNNING", SECS(20));
    assert!(
        t0.elapsed() >= SECS(2),
        "preemptor started before the grace ended"
    );
    let victim = c
        .jobs()
        .into_iter()
        .find(|j| trainers.contains(&j["id"].as_u64().unwrap()) && j["restart_count"] == 1)
        .expect("one victim requeued");
    let ev = events(&c, victim["id"].as_u64().unwrap());
    let pre = ev.iter().find(|e| e["kind"] == "preemption").unwrap();
    let detail = pre["detail"].as_str().unwrap();
    assert!(detail.contains("killed after grace"), "{detail}");
    assert!(detail.contains("checkpoint_saved=false"), "{detail}");
}

#[test]
fn no_requeue_victims_end_preempted() {
    let c = full_cluster("");
    let trainers = fill_with(&c, TRAINER, &["--no-requeue", "--grace", "5"]);
    let critical = c.submit(&["-p", "critical", "-G", "4", "--wrap", "sleep 1"]);
    c.wait_state(critical, "COMPLETED", SECS(30));
    let preempted: Vec<Value> = c
        .jobs()
        .into_iter()
        .filter(|j| trainers.contains(&j["id"].as_u64().unwrap()) && j["state"] == "PREEMPTED")
        .collect();
    assert_eq!(preempted.len(), 1);
    assert_eq!(preempted[0]["restart_count"], 0);
}

#[test]
fn min_runtime_protects_a_young_job_until_it_has_run_long_enough() {
    let c = full_cluster(
        "[tiers.critical]\nvalue = 1000000\npreemptible = false\nmay_preempt = true\n\
         [tiers.high]\nvalue = 10000\nmay_preempt = true\n\
         [tiers.medium]\nvalue = 1000\n\
         [tiers.low]\nvalue = 100\nmin_runtime = 5\n",
    );
    // The trainers start after t0: none may be evicted before t0 + 5 s. Every look that ended
    // by then must find the critical job waiting and no trainer stopping, and there must be
    // such a look (a machine too slow for one fails the test rather than skip the check).
    let t0 = std::time::Instant::now();
    let trainers = fill_with(&c, TRAINER, &[]);
    let critical = c.submit(&["-p", "critical", "-G", "4", "--wrap", "sleep 1"]);
    let mut looks_while_young = 0;
    while t0.elapsed() < SECS(5) {
        let jobs = c.jobs();
        if t0.elapsed() < SECS(5) {
            for j in &jobs {
                let id = j["id"].as_u64().unwrap();
                if id == critical {
                    assert_eq!(j["state"], "PENDING", "started before min_runtime: {j}");
                } else if trainers.contains(&id) {
                    assert_eq!(
                        j["state"], "RUNNING",
                        "evicted a job younger than min_runtime"
                    );
                }
            }
            looks_while_young += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        looks_while_young > 0,
        "no look within min_runtime: the machine is too slow for this test"
    );
    c.wait_state(critical, "RUNNING", SECS(20));
    assert!(t0.elapsed() >= SECS(5));
}

#[test]
fn a_permitted_and_a_refused_critical_submit() {
    // critical is open to the group `nogroup` (gid 65534): `nobody` may, `daemon` (uid 1) may not.
    let c = full_cluster(
        "[tiers.critical]\nvalue = 1000000\npreemptible = false\nmay_preempt = true\nallow_groups = [\"nogroup\"]\n\
         [tiers.high]\nvalue = 10000\nmay_preempt = true\n[tiers.medium]\nvalue = 1000\n[tiers.low]\nvalue = 100\n",
    );
    let out = c.run_as(
        65534,
        65534,
        "ysub",
        &["--parsable", "-p", "critical", "--wrap", "true"],
    );
    assert!(
        out.status.success(),
        "permitted submit refused: {}",
        stderr(&out)
    );
    let out = c.run_as(1, 1, "ysub", &["-p", "critical", "--wrap", "true"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("critical") && err.contains("nogroup"),
        "message says who may: {err}"
    );
    let out = c.run("yctl", &["audit", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let audit: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let refused = audit
        .iter()
        .find(|a| a["action"] == "submit_refused")
        .expect("audited");
    assert_eq!(refused["user"], "daemon");
    assert!(refused["detail"].as_str().unwrap().contains("critical"));
    // A --grace above the tier's max_grace is refused, not clamped.
    let out = c.run("ysub", &["-p", "low", "--grace", "301", "--wrap", "true"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("300"), "{}", stderr(&out));
    // A job is charged only to an account its submitter belongs to: nobody is in `nogroup`,
    // not in `daemon`; the refusal is audited.
    let out = c.run_as(
        65534,
        65534,
        "ysub",
        &["-A", "nogroup", "--hold", "--wrap", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.run_as(65534, 65534, "ysub", &["-A", "daemon", "--wrap", "true"]);
    assert!(!out.status.success(), "charged a foreign account");
    assert!(
        stderr(&out).contains("may not charge account 'daemon'"),
        "{}",
        stderr(&out)
    );
    let out = c.run("yctl", &["audit", "--json"]);
    let audit: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        audit.iter().any(|a| a["action"] == "submit_refused"
            && a["user"] == "nobody"
            && a["detail"].as_str().unwrap().contains("account 'daemon'")),
        "{audit:?}"
    );
}
