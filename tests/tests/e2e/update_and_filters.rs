//! End-to-end `yctl update` (and scontrol's `KEY=VALUE` forms), `yq`'s tier and name filters
//! and `--format`, `ycancel`'s filters, and the rough edges a new user coming from Slurm hits: the
//! output-directory warning, failed jobs kept in a plain `yq`, COMPLETING in a cancel's grace,
//! `--wait`'s line for a TIMEOUT that exited 0, hold and release errors, expanded output paths
//! in `yctl show job --json`, and daemon logs without colour codes.

use serde_json::Value;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn cluster() -> TestCluster {
    TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)])
}

fn run_ok(c: &TestCluster, bin: &str, args: &[&str]) -> String {
    let out = c.run(bin, args);
    assert!(
        out.status.success(),
        "{bin} {args:?} failed: {}\n{}",
        stderr(&out),
        c.logs()
    );
    stdout(&out)
}

/// Runs a command that must fail with exit 1 and `wanted` in its error.
fn refused(c: &TestCluster, bin: &str, args: &[&str], wanted: &str) {
    let out = c.run(bin, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{bin} {args:?}: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(wanted),
        "{bin} {args:?}: wanted {wanted:?} in {}",
        stderr(&out)
    );
}

#[test]
fn update_changes_a_queued_job_and_refuses_what_it_may_not() {
    let c = cluster();
    let id = c.submit(&["--hold", "-t", "2:00:00", "-J", "first", "--wrap", "true"]);
    let job = id.to_string();
    let out = run_ok(
        &c,
        "yctl",
        &[
            "update", &job, "--time", "1:00:00", "-J", "second", "-p", "HIGH",
        ],
    );
    assert_eq!(
        out,
        format!(
            "Updated job {id}: tier high (was medium); time limit 1:00:00 (was 2:00:00); name \
             second (was first)\n"
        )
    );
    let j = c.job(id);
    assert_eq!(
        (&j["tier"], &j["time_limit"], &j["name"], &j["state"]),
        (
            &Value::from("high"),
            &Value::from(3600),
            &Value::from("second"),
            &Value::from("HELD")
        )
    );
    // scontrol's words, in any case, and --json.
    let out = run_ok(
        &c,
        "yctl",
        &[
            "update",
            &format!("jobid={id}"),
            "TimeLimit=30",
            "name=third",
            "--json",
        ],
    );
    let reply: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(reply["job"], job);
    assert_eq!(reply["changed"][0], "time limit 30:00 (was 1:00:00)");
    let detail = run_ok(&c, "yctl", &["show", "job", &job, "--json"]);
    let detail: Value = serde_json::from_str(&detail).unwrap();
    let kinds: Vec<&str> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "updated").count(),
        2,
        "{kinds:?}"
    );
    refused(
        &c,
        "yctl",
        &["update", &job, "Nodes=2"],
        "unknown key 'Nodes'",
    );
    refused(
        &c,
        "yctl",
        &["update", &job, "-p", "gold"],
        "unknown tier 'gold'",
    );

    // A dependency that would make a job wait for itself.
    let other = c.submit(&[
        "--hold",
        "--dependency",
        &format!("afterok:{id}"),
        "--wrap",
        "true",
    ]);
    refused(
        &c,
        "yctl",
        &["update", &job, "--dependency", &format!("afterok:{other}")],
        &format!("job {id} would wait for itself (through job {other})"),
    );

    // Holding a held job, releasing a pending one: errors that say so.
    refused(
        &c,
        "yctl",
        &["hold", &job],
        &format!("job {id} is already held"),
    );
    run_ok(&c, "yctl", &["update", &job, "--release"]);
    c.wait_state(id, "COMPLETED", SECS(20));
    refused(
        &c,
        "yctl",
        &["update", &job, "-J", "late"],
        "only a pending job can be updated",
    );
    let pending = c.submit(&[
        "--dependency",
        &format!("afterok:{other}"),
        "--wrap",
        "true",
    ]);
    refused(
        &c,
        "yctl",
        &["release", &pending.to_string()],
        &format!("job {pending} is not held"),
    );
    let audit = run_ok(&c, "yctl", &["audit", "--json"]);
    assert!(audit.contains("\"action\":\"update\""), "{audit}");
}

#[test]
fn yq_filters_and_formats_and_ycancel_cancels_what_its_filters_pick() {
    let c = cluster();
    let a = c.submit(&["--hold", "-p", "high", "-J", "alpha", "--wrap", "true"]);
    let b = c.submit(&["--hold", "-p", "low", "-J", "beta", "--wrap", "true"]);
    let b2 = c.submit(&["--hold", "-p", "low", "-J", "beta", "--wrap", "true"]);
    let ids = |text: &str| -> Vec<u64> {
        text.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    };
    assert_eq!(ids(&run_ok(&c, "yq", &["-p", "HIGH"])), [a]);
    assert_eq!(ids(&run_ok(&c, "yq", &["-n", "beta"])), [b, b2]);
    assert_eq!(
        ids(&run_ok(&c, "yq", &["-p", "low,high", "-n", "alpha,beta"])),
        [a, b, b2]
    );
    let out = run_ok(&c, "yq", &["-n", "alpha", "-o", "%.6i|%j|%t|%P|%l"]);
    assert_eq!(
        out,
        format!(" JOBID|NAME|ST|TIER|TIME_LIMIT\n{a:>6}|alpha|PD|high|UNLIMITED\n")
    );
    let out = run_ok(&c, "yq", &["-n", "alpha", "--noheader", "-o", "name,State"]);
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["alpha", "HELD"]
    );
    refused(&c, "yq", &["-o", "%i %z"], "unknown field %z");
    refused(&c, "yq", &["-o", "id,colour"], "unknown column 'colour'");

    // Filters alone: your own jobs that match, each printed.
    let out = run_ok(&c, "ycancel", &["-n", "beta", "-p", "low"]);
    assert_eq!(out, format!("Cancelled job {b}\nCancelled job {b2}\n"));
    assert_eq!(c.job(a)["state"], "HELD");
    assert_eq!(c.job(b)["state"], "CANCELLED");
    // With an id: both must hold.
    let out = run_ok(
        &c,
        "ycancel",
        &["-t", "HELD", "-n", "nothing", &a.to_string()],
    );
    assert_eq!(out, "");
    assert_eq!(c.job(a)["state"], "HELD");
}

#[test]
fn the_rough_edges_a_new_user_hit() {
    let c = cluster();
    // An output directory that is not there: a warning at submit, and the job submitted.
    let out = c.run(
        "ysub",
        &[
            "--parsable",
            "-o",
            "nowhere/%x-%j.out",
            "-J",
            "lost",
            "--wrap",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "warning: the output directory 'nowhere' does not exist here; the job will fail at \
             launch unless it exists on the node"
        ),
        "{}",
        stderr(&out)
    );
    let id: u64 = stdout(&out).trim().parse().unwrap();
    // Its launch fails: a plain yq still shows it, FAILED, for a few minutes.
    let failed = c.wait_state(id, "FAILED", SECS(20));
    assert!(
        failed["reason"].as_str().unwrap().contains("launch failed"),
        "{failed}"
    );
    let listing = run_ok(&c, "yq", &[]);
    assert!(
        listing
            .lines()
            .any(|l| l.contains(&id.to_string()) && l.contains("FAILED")),
        "{listing}"
    );
    // A completed job is not kept.
    let done = c.submit(&["--wrap", "true"]);
    c.wait_state(done, "COMPLETED", SECS(20));
    assert!(!run_ok(&c, "yq", &[]).contains(&format!(" {done} ")));

    // `yctl show job --json` expands the output path; the pattern is kept beside it.
    let detail: Value = serde_json::from_str(&run_ok(
        &c,
        "yctl",
        &["show", "job", &id.to_string(), "--json"],
    ))
    .unwrap();
    assert_eq!(detail["stdout_path"], format!("nowhere/lost-{id}.out"));
    assert_eq!(detail["stdout_pattern"], "nowhere/%x-%j.out");

    // In a cancel's grace a job is COMPLETING, not RUNNING.
    let work = c.work.display().to_string();
    let slow = c.submit(&[
        "--grace",
        "30",
        "--wrap",
        // `up` once the trap is set and the background helper has exec'd (a SIGTERM
        // reaching a forked child before its exec is caught by the inherited trap and lost).
        &format!("trap 'sleep 3; exit 0' TERM; sh -c 'touch {work}/up; exec sleep 300' & wait"),
    ]);
    c.wait_state(slow, "RUNNING", SECS(20));
    wait_until(SECS(10), "the job's trap is set", || c.path("up").exists());
    run_ok(&c, "ycancel", &[&slow.to_string()]);
    let listing = run_ok(&c, "yq", &["-j", &slow.to_string()]);
    assert!(listing.contains("COMPLETING"), "{listing}");
    let compact = run_ok(
        &c,
        "yq",
        &["-j", &slow.to_string(), "--noheader", "-o", "%t"],
    );
    assert_eq!(compact, "CG\n");
    let json = c.job(slow);
    assert_eq!(
        (&json["state"], &json["cancelling"]),
        (&Value::from("RUNNING"), &Value::from(true))
    );
    c.wait_state(slow, "CANCELLED", SECS(20));

    // `ysub -W` of a job that ends TIMEOUT after exiting 0 in its grace says both codes.
    let out = c.run(
        "ysub",
        &[
            "-W",
            "-t",
            "0:02",
            "--grace",
            "10",
            "--wrap",
            "trap 'exit 0' TERM; sleep 300 & wait",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("TIMEOUT (job exit code 0, ysub exits 1)"),
        "{}",
        stderr(&out)
    );

    // The daemons write their logs to files here: plain text, no colour codes.
    let logs = c.logs();
    assert!(!logs.is_empty());
    assert!(!logs.contains('\x1b'), "{logs}");
}
