//! End-to-end tests of policies an unprivileged user (`nobody`) tries to get around, against
//! the real daemons: a tier's GPU quota with `--exclusive`, and an administrator's hold.

use serde_json::Value;
use std::process::Output;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

fn as_nobody(c: &TestCluster, bin: &str, args: &[&str]) -> Output {
    c.run_as(NOBODY, NOBODY, bin, args)
}

fn submit_as_nobody(c: &TestCluster, args: &[&str]) -> u64 {
    let out = as_nobody(c, "ysub", &[&["--parsable"], args].concat());
    assert!(out.status.success(), "ysub {args:?}: {}", stderr(&out));
    stdout(&out).trim().parse().expect("job id")
}

fn refused(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what} was accepted: {}",
        stdout(out)
    );
    stderr(out)
}

#[test]
fn exclusive_jobs_cannot_take_whole_nodes_past_a_gpu_quota() {
    let c = TestCluster::start_with(
        vec![
            FakeNode::uniform("n1", 8, A100),
            FakeNode::uniform("n2", 8, A100),
        ],
        "default_tier = \"low\"",
        "[tiers.high]\nvalue = 10000\nmax_gpus_per_user = 2\nmax_gpus_per_account = 2\n\
         [tiers.low]\nvalue = 100\n",
    );
    c.wait_nodes_up(2);
    // The attack: `--exclusive -G 0` asks for no GPU and would hold a whole 8-GPU node.
    for gpus in ["0", "1"] {
        let out = as_nobody(
            &c,
            "ysub",
            &[
                "-p",
                "high",
                "--exclusive",
                "-G",
                gpus,
                "--wrap",
                "sleep 300",
            ],
        );
        let err = refused(&out, "an exclusive job over the quota");
        assert!(
            err.contains("would hold at least 8 GPUs")
                && err.contains("tier 'high'")
                && err.contains("(2, tiers.high.max_gpus_per_account)"),
            "{err}"
        );
    }
    // Nothing was queued, and a job within the quota runs beside where it would have been.
    assert!(c.jobs().is_empty(), "{:?}", c.jobs());
    let normal = submit_as_nobody(&c, &["-p", "high", "-G", "2", "--wrap", "sleep 300"]);
    let running = c.wait_state(normal, "RUNNING", SECS(15));
    assert_eq!(
        running["gpus"].as_array().map(Vec::len),
        Some(2),
        "{running}"
    );
    // The quota is full now: one more GPU waits for it, whatever the free room.
    let over = submit_as_nobody(&c, &["-p", "high", "-G", "1", "--wrap", "true"]);
    wait_until(SECS(10), "AccountLimit shown", || {
        c.job(over)["reason"] == "AccountLimit"
    });
    assert_eq!(c.job(over)["state"], "PENDING");
    // Another tier, without a quota, still takes whole nodes.
    let low = submit_as_nobody(&c, &["-p", "low", "--exclusive", "--wrap", "sleep 300"]);
    let whole = c.wait_state(low, "RUNNING", SECS(15));
    assert_eq!(whole["gpus"].as_array().map(Vec::len), Some(8), "{whole}");
    assert_eq!(c.job(normal)["state"], "RUNNING");
}

/// `job`'s state, reason and hold as `yq --json` lists them to `nobody`.
fn held_as_seen_by_nobody(c: &TestCluster, job: u64) -> (String, String, Value) {
    let out = as_nobody(c, "yq", &["--json", "-j", &job.to_string()]);
    assert!(out.status.success(), "yq: {}", stderr(&out));
    let jobs: Vec<Value> = serde_json::from_slice(&out.stdout).expect("yq json");
    let j = &jobs[0];
    (
        j["state"].as_str().unwrap_or_default().to_string(),
        j["reason"].as_str().unwrap_or_default().to_string(),
        j["hold"].clone(),
    )
}

#[test]
fn a_user_cannot_release_an_administrators_hold_but_releases_her_own() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 8, A100)]);
    c.wait_nodes_up(1);
    // root's job fills the node, so that nobody's jobs wait (its checkpoint directory apart:
    // nobody's jobs create theirs under the checkpoint root).
    let blocker = c.submit(&[
        "-G",
        "8",
        "--checkpoint-dir",
        "root-ckpt",
        "--wrap",
        "sleep 600",
    ]);
    c.wait_state(blocker, "RUNNING", SECS(15));
    let job = submit_as_nobody(&c, &["-G", "1", "--wrap", "true"]);
    let id = job.to_string();
    c.wait_waiting(job, SECS(10));

    // root holds nobody's job: an administrator's hold.
    let out = c.run("yctl", &["hold", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let admin_held = (
        "HELD".to_string(),
        "JobHeldAdmin".to_string(),
        Value::from("admin"),
    );
    assert_eq!(held_as_seen_by_nobody(&c, job), admin_held);

    // nobody's release is refused, every way she may ask, and changes nothing.
    let message =
        format!("job {id} is held by an administrator: only an administrator may release it");
    let out = as_nobody(&c, "yctl", &["release", &id]);
    let err = refused(&out, "nobody's release of root's hold");
    assert!(err.contains(&message), "{err}");
    let out = as_nobody(&c, "yctl", &["update", &id, "--release"]);
    let err = refused(&out, "nobody's update --release of root's hold");
    assert!(err.contains(&message), "{err}");
    // Nor may she make it her own hold by holding it again.
    let out = as_nobody(&c, "yctl", &["hold", &id]);
    let err = refused(&out, "nobody's hold of a job root holds");
    assert!(err.contains("already held by an administrator"), "{err}");
    assert_eq!(held_as_seen_by_nobody(&c, job), admin_held);
    // `yctl show job` says who holds it; squeue gives Slurm's reason.
    let out = as_nobody(&c, "yctl", &["show", "job", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("JobState=HELD Reason=JobHeldAdmin") && shown.contains("HeldBy=admin"),
        "{shown}"
    );
    let out = as_nobody(&c, "yslurm", &["squeue", "-h", "-j", &id, "-o", "%i %T %r"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("{id} PENDING JobHeldAdmin"));
    // The refusals are in the audit log, as nobody's.
    let out = c.run("yctl", &["audit", "--json"]);
    let audit: Vec<Value> = serde_json::from_slice(&out.stdout).expect("audit json");
    let refusals: Vec<&Value> = audit
        .iter()
        .filter(|e| e["action"] == "release_refused" || e["action"] == "update_refused")
        .collect();
    assert_eq!(refusals.len(), 2, "{audit:?}");
    assert!(
        refusals
            .iter()
            .all(|e| e["user"] == "nobody" && e["job_id"] == job),
        "{refusals:?}"
    );

    // nobody holds and releases her own job as she pleases.
    let own = submit_as_nobody(&c, &["-G", "1", "--wrap", "true"]);
    c.wait_waiting(own, SECS(10));
    let out = as_nobody(&c, "yctl", &["hold", &own.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        held_as_seen_by_nobody(&c, own),
        (
            "HELD".to_string(),
            "JobHeldUser".to_string(),
            Value::from("user")
        )
    );
    let out = as_nobody(&c, "yctl", &["release", &own.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.job(own)["state"], "PENDING");
    assert_eq!(c.job(own)["hold"], Value::Null);

    // root releases its hold; once the node is free, both run.
    let out = c.run("yctl", &["release", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.job(job)["state"], "PENDING");
    let out = c.run("ycancel", &[&blocker.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(job, "COMPLETED", SECS(20));
    c.wait_state(own, "COMPLETED", SECS(20));
}
