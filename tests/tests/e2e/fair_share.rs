//! End-to-end fair share and tier quotas: real jobs charged to accounts, the order they start
//! in, `yq --long`/`--json` places, `yctl shares`, and a tier's GPU quota per account.

use serde_json::Value;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn json(c: &TestCluster, tool: &str, args: &[&str]) -> Value {
    let out = c.run(tool, args);
    assert!(out.status.success(), "{tool} {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `yctl shares --json`'s line for `account`.
fn share(shares: &Value, account: &str) -> Value {
    shares["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["account"] == account)
        .unwrap_or_else(|| panic!("no line for {account}: {shares}"))
        .clone()
}

#[test]
fn the_light_accounts_job_starts_before_the_heavy_accounts_older_one() {
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 2, A100)],
        "fair_share_half_life = \"2h\"",
        "[accounts.heavy]\nshares = 1\n[accounts.light]\nshares = 1\n",
    );
    // `heavy` uses both GPUs for a few seconds: recorded when the run ends.
    let used = c.submit(&["-A", "heavy", "-G", "2", "--wrap", "sleep 3"]);
    c.wait_state(used, "COMPLETED", SECS(20));
    // It fills the node again, and while that runs, `heavy` queues first, `light` after.
    let blocker = c.submit(&["-A", "heavy", "-G", "2", "--wrap", "sleep 4"]);
    c.wait_state(blocker, "RUNNING", SECS(10));
    let older = c.submit(&["-A", "heavy", "-G", "2", "--wrap", "sleep 30"]);
    std::thread::sleep(Duration::from_millis(50));
    let newer = c.submit(&["-A", "light", "-G", "2", "--wrap", "sleep 30"]);

    // While they wait, `yq` shows the order and the factors of the last pass.
    let mut places = (Value::Null, Value::Null);
    wait_until(SECS(5), "both places shown", || {
        let jobs = json(&c, "yq", &["--json"]);
        let find = |id: u64| {
            jobs.as_array()
                .unwrap()
                .iter()
                .find(|j| j["id"] == id)
                .cloned()
                .unwrap()
        };
        places = (find(older), find(newer));
        !places.0["queue_position"].is_null() && !places.1["queue_position"].is_null()
    });
    let (heavy_job, light_job) = places;
    assert_eq!(light_job["queue_position"], 1, "{light_job}");
    assert_eq!(heavy_job["queue_position"], 2, "{heavy_job}");
    assert_eq!(light_job["fair_share"], 1.0);
    let heavy_factor = heavy_job["fair_share"].as_f64().unwrap();
    assert!(heavy_factor < 0.5, "heavy used everything: {heavy_job}");
    let long = stdout(&c.run("yq", &["--long"]));
    let light_line = long
        .lines()
        .find(|l| l.trim_start().starts_with(&newer.to_string()))
        .unwrap();
    let cells: Vec<&str> = light_line.split_whitespace().collect();
    assert_eq!(cells[3], "light", "{long}");
    assert_eq!(&cells[8..10], ["1", "1.000"], "{long}");

    // `yctl shares`: `heavy` has all the usage, `light` none.
    let shares = json(&c, "yctl", &["shares", "--json"]);
    assert_eq!(shares["half_life_secs"], 7_200);
    let (heavy, light) = (share(&shares, "heavy"), share(&shares, "light"));
    assert_eq!(heavy["norm_shares"], 0.5);
    // 2 GPUs x 3 s ended, and the blocker's running seconds.
    assert!(
        heavy["raw_gpu_hours"].as_f64().unwrap() >= 6.0 / 3600.0,
        "{heavy}"
    );
    assert!(
        heavy["decayed_gpu_hours"].as_f64().unwrap() > 0.0,
        "{heavy}"
    );
    assert_eq!(heavy["effective_usage"], 1.0);
    assert_eq!(light["raw_gpu_hours"], 0.0);
    assert_eq!(light["fair_share"], 1.0);
    let text = stdout(&c.run("yctl", &["shares"]));
    assert!(text.starts_with("ACCOUNT"), "{text}");
    assert!(text.contains("half-life of 2h"), "{text}");

    // The blocker ends: the younger job of the light account starts, the heavy one waits.
    c.wait_state(newer, "RUNNING", SECS(20));
    assert_eq!(c.job(older)["state"], "PENDING");
    // Next in line from the pass after.
    wait_until(SECS(5), "the heavy job is next", || {
        c.job(older)["queue_position"] == 1
    });

    // Usage survives `kill -9` of schedd, and a restart charges nothing twice.
    let out = c.run("ycancel", &[&older.to_string(), &newer.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(newer, "CANCELLED", SECS(20));
    let raw = |shares: &Value| {
        ["heavy", "light"].map(|a| share(shares, a)["raw_gpu_hours"].as_f64().unwrap())
    };
    let mut before = [0.0; 2];
    wait_until(SECS(5), "the cancelled run counted", || {
        before = raw(&json(&c, "yctl", &["shares", "--json"]));
        before[1] > 0.0
    });
    let mut c = c;
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    c.wait_nodes_up(1);
    wait_until(SECS(10), "shares after the restart", || {
        json(&c, "yctl", &["shares", "--json"])["as_of"].is_string()
    });
    let after = raw(&json(&c, "yctl", &["shares", "--json"]));
    for (b, a) in before.iter().zip(after) {
        assert!((b - a).abs() < 1e-9, "before {before:?}, after {after:?}");
    }
}

#[test]
fn the_17th_gpu_of_a_team_at_high_waits_while_another_teams_job_starts() {
    let c = TestCluster::start_with(
        vec![
            FakeNode::uniform("n1", 8, A100),
            FakeNode::uniform("n2", 8, A100),
            FakeNode::uniform("n3", 8, A100),
        ],
        "default_tier = \"low\"",
        "[tiers.high]\nvalue = 10000\nmay_preempt = true\nmax_gpus_per_account = 16\n\
         [tiers.low]\nvalue = 100\n\
         [accounts.ml]\n[accounts.vision]\n",
    );
    let ml: Vec<u64> = (0..2)
        .map(|_| c.submit(&["-p", "high", "-A", "ml", "-G", "8", "--wrap", "sleep 60"]))
        .collect();
    for id in &ml {
        c.wait_state(*id, "RUNNING", SECS(15));
    }
    // The 17th GPU of `ml` at high waits; `vision`, submitted after it, starts.
    let over = c.submit(&["-p", "high", "-A", "ml", "-G", "1", "--wrap", "sleep 60"]);
    let other = c.submit(&[
        "-p", "high", "-A", "vision", "-G", "4", "--wrap", "sleep 60",
    ]);
    c.wait_state(other, "RUNNING", SECS(15));
    wait_until(SECS(10), "AccountLimit shown", || {
        c.job(over)["reason"] == "AccountLimit"
    });
    assert_eq!(c.job(over)["state"], "PENDING");
    // `ml` may still use another tier.
    let low = c.submit(&["-p", "low", "-A", "ml", "-G", "2", "--wrap", "sleep 60"]);
    c.wait_state(low, "RUNNING", SECS(15));
    // A job larger than the quota by itself is refused at submit.
    let out = c.run(
        "ysub",
        &[
            "-p", "high", "-A", "vision", "-G", "24", "-N", "3", "--wrap", "true",
        ],
    );
    assert!(!out.status.success(), "a 24-GPU job at high was accepted");
    assert!(
        stderr(&out).contains("max_gpus_per_account"),
        "{}",
        stderr(&out)
    );
    // When one of the team's jobs ends, its quota frees up and the waiting job starts.
    let out = c.run("ycancel", &[&ml[0].to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(over, "RUNNING", SECS(20));
}
