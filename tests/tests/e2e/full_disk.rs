//! End-to-end tests of full disks: a full disk degrades one node or refuses
//! requests, and never fails or kills jobs, wedges `schedd` or keeps it from starting. Real
//! daemons, small tmpfs file systems as the state directory or a node's spool, real jobs.

use std::path::Path;
use std::process::Output;
use std::time::Duration;
use ysched_tests::*;

const SECS: fn(u64) -> Duration = Duration::from_secs;
const MIB: u64 = 1024 * 1024;
const NOBODY: u32 = 65534;

/// Runs a CLI tool (as `uid`, 0: root) that must answer within `secs`.
fn run_within(c: &TestCluster, secs: u64, uid: u32, bin: &str, args: &[&str]) -> Output {
    c.run_within(SECS(secs), uid, bin, args)
}

fn log(c: &TestCluster, name: &str) -> String {
    std::fs::read_to_string(c.dir.path().join(format!("{name}.log"))).unwrap_or_default()
}

/// Bytes used on the file system holding `dir`.
fn used_bytes(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    (st.blocks() - st.blocks_free()) as u64 * st.fragment_size() as u64
}

/// A job script of about `bytes`, in comment lines: large, and valid.
fn big_script(c: &TestCluster, name: &str, bytes: usize) -> std::path::PathBuf {
    let line = format!("# {}\n", "a".repeat(1000));
    let mut text = String::from("#!/bin/sh\n");
    while text.len() + line.len() < bytes {
        text.push_str(&line);
    }
    text.push_str("true\n");
    c.script(name, &text)
}

fn ids(c: &TestCluster) -> Vec<u64> {
    c.jobs().iter().map(|j| j["id"].as_u64().unwrap()).collect()
}

#[test]
fn a_large_write_near_a_full_state_disk_is_refused_or_ends_schedd_and_never_wedges_it() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, "A100")],
        "state_reserve_mib = 16",
        "",
    );
    let _mounted = c.move_state_to_tmpfs("64m");
    let state_dir = c.dir.path().join("state");
    let big = big_script(&c, "big.sh", (3 * MIB + MIB / 2) as usize);
    let big = big.to_str().unwrap();
    let held = c.submit(&["--hold", "--wrap", "true"]);

    // Room for small writes above the reserve, not for 3.5 MiB (which sled writes at once
    // as a file of its own: the write that used to fail with ENOSPC inside sled, after
    // which every later request hung).
    let filler = fill_leaving(&state_dir, 19 * MIB);
    let out = run_within(&c, 20, 0, "ysub", &[big]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("state store full") && err.contains("this change of 3."),
        "{err}"
    );
    // Everything else goes on as before.
    let out = run_within(&c, 20, 0, "ysub", &["--parsable", "--wrap", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let small: u64 = stdout(&out).trim().parse().unwrap();
    let out = run_within(&c, 20, 0, "ycancel", &[&held.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(small, "COMPLETED", SECS(20));
    c.wait_state(held, "CANCELLED", SECS(10));
    std::fs::remove_file(&filler).unwrap();
    let out = run_within(&c, 20, 0, "ysub", &["--parsable", big]);
    assert!(out.status.success(), "{}", stderr(&out));
    let big_id: u64 = stdout(&out).trim().parse().unwrap();
    c.wait_state(big_id, "COMPLETED", SECS(20));
    assert_eq!(big_id, small + 1, "the refused submit used up no id");

    // Without a reserve (scheduler.state_reserve_mib = 0: no check), the same write fails
    // inside sled: schedd exits 75 at once, with a log line, and the request gets an error
    // instead of waiting forever. Restarted, it has everything it acknowledged.
    let text = std::fs::read_to_string(&c.conf).unwrap();
    std::fs::write(
        &c.conf,
        text.replace("state_reserve_mib = 16", "state_reserve_mib = 0"),
    )
    .unwrap();
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    c.start_schedd();
    c.wait_nodes_up(1);
    let acknowledged = c.submit(&["--hold", "--wrap", "true"]);
    let filler = fill_leaving(&state_dir, 2 * MIB);
    let out = run_within(&c, 30, 0, "ysub", &[big]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let status = c.wait_schedd_exit(SECS(30)).expect("schedd exits");
    assert_eq!(status.code(), Some(75), "{}", c.logs());
    assert!(
        log(&c, "schedd").contains("state store write failed"),
        "{}",
        c.logs()
    );
    std::fs::remove_file(&filler).unwrap();
    c.start_schedd();
    c.wait_nodes_up(1);
    assert_eq!(ids(&c), [held, small, big_id, acknowledged]);
    let next = c.submit(&["--wrap", "true"]);
    assert_eq!(next, acknowledged + 1);
    c.wait_state(next, "COMPLETED", SECS(20));
}

#[test]
fn refused_submits_cannot_fill_the_state_disk_and_schedd_starts_on_a_full_one() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, "A100")],
        "state_reserve_mib = 16",
        "[tiers.medium]\nvalue = 1000\n[tiers.private]\nvalue = 2000\nallow_users = [\"root\"]\n",
    );
    let _mounted = c.move_state_to_tmpfs("64m");
    let state_dir = c.dir.path().join("state");
    let done = c.submit(&["--wrap", "true"]);
    let held = c.submit(&["--hold", "--wrap", "true"]);
    c.wait_state(done, "COMPLETED", SECS(20));

    // Refusals that quote megabytes of the request (an account of 1 MiB), and plain ones,
    // as fast as `nobody` can send them.
    let account = "a".repeat(MIB as usize);
    let huge = c.script(
        "huge-account.sh",
        &format!("#!/bin/sh\n#YSUB -A {account}\ntrue\n"),
    );
    let before = used_bytes(&state_dir);
    for _ in 0..12 {
        let out = run_within(&c, 20, NOBODY, "ysub", &[huge.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).len() < 4096, "the error echoes the input");
        let out = run_within(&c, 20, NOBODY, "ysub", &["-p", "private", "--wrap", "true"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("may not submit to tier 'private'"));
    }
    let grown = used_bytes(&state_dir).saturating_sub(before);
    assert!(
        grown < 4 * MIB,
        "24 refusals took {grown} bytes of the state disk"
    );
    let out = c.run("yctl", &["audit", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let audit: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let refused: Vec<&serde_json::Value> = audit
        .iter()
        .filter(|e| e["action"] == "submit_refused" && e["uid"] == NOBODY)
        .collect();
    assert!(
        !refused.is_empty() && refused.len() <= 10,
        "one user's refusals are audited one by one at most 10 a minute: {}",
        refused.len()
    );
    for entry in &audit {
        let detail = entry["detail"].as_str().unwrap();
        assert!(
            detail.len() <= 1100,
            "an audit entry of {} bytes",
            detail.len()
        );
    }
    // Another user's submits are untouched.
    let other = c.submit(&["--wrap", "true"]);
    c.wait_state(other, "COMPLETED", SECS(20));

    // The state disk full to the last byte (something else filled it) and schedd killed:
    // it starts again, serves reads, refuses writes with a clear error, and takes them
    // again once space is back, with nothing it acknowledged lost.
    let filler = fill(&state_dir);
    assert_eq!(free_bytes(&state_dir), 0);
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    assert!(
        log(&c, "schedd").contains("released the 8 MiB ballast"),
        "{}",
        c.logs()
    );
    let listed = run_within(&c, 20, 0, "yq", &["--all", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_eq!(ids(&c), [done, held, other]);
    let out = run_within(&c, 20, 0, "ysub", &["--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("state store full"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(&filler).unwrap();
    c.wait_nodes_up(1);
    let out = run_within(&c, 20, 0, "yctl", &["release", &held.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(held, "COMPLETED", SECS(20));
    let last = c.submit(&["--wrap", "true"]);
    assert_eq!(last, other + 1, "ids go on where they were");
    c.wait_state(last, "COMPLETED", SECS(20));
}

fn node<'a>(nodes: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    nodes.iter().find(|n| n["name"] == name).unwrap()
}

fn yctl(c: &TestCluster, args: &[&str]) {
    let out = c.run("yctl", args);
    assert!(out.status.success(), "yctl {args:?}: {}", stderr(&out));
}

fn history(c: &TestCluster, id: u64) -> Vec<(String, String)> {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let detail: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (text("kind"), text("detail"))
        })
        .collect()
}

#[test]
fn a_full_spool_drains_its_node_and_never_fails_or_kills_a_job() {
    // Fencing after 5 s: a lease that could not be renewed would stop n1's running job.
    let mut c = TestCluster::start_with(
        vec![
            FakeNode::uniform("n1", 8, "A100"),
            FakeNode::uniform("n2", 8, "A100"),
        ],
        "",
        "spool_reserve_mib = 0\nfence_after_secs = 5\n",
    );
    // n1's spool on a small file system of its own.
    c.stop_agent("n1", nix::sys::signal::Signal::SIGTERM);
    let spool = c.dir.path().join("spool/n1");
    let _mounted = mount_tmpfs(&spool, "4m");
    c.start_agent("n1");
    c.wait_nodes_up(2);
    wait_until(SECS(20), "n1 back", || {
        node(&c.nodes(), "n1")["state"] == "IDLE"
    });
    yctl(&c, &["drain", "n2", "--reason", "elsewhere"]);
    let started = c.path("running-started");
    let wrap = format!("echo up > {}; sleep 12; echo done", started.display());
    let running = c.submit(&["-G", "4", "--wrap", &wrap]);
    assert_eq!(c.wait_state(running, "RUNNING", SECS(20))["node"], "n1");
    // Started on the node (its launch recorded there), not only sent to it.
    read_when_exists(&started, SECS(20));

    // Room for the node's probe of 4 KiB, not for a launch's files (its script, of 64 KiB:
    // the node's journal keeps room for its records ahead).
    let almost = fill_leaving(&spool, 8 * 1024);
    let placed_script = c.script(
        "placed.sh",
        &format!(
            "#!/bin/sh\n{}echo placed ran\n",
            format!("# {}\n", "a".repeat(1000)).repeat(64)
        ),
    );
    let placed = c.submit(&["-G", "4", placed_script.to_str().unwrap()]);
    wait_until(SECS(20), "n1 drained by its agent", || {
        node(&c.nodes(), "n1")["reason"] == "spool full: No space left on device (noded)"
    });
    // The launch failed for the node's reason: queued again, not failed.
    let j = c.wait_state(placed, "PENDING", SECS(20));
    assert_eq!(j["restart_count"], 1, "{j}");
    let events = history(&c, placed);
    assert!(
        events.iter().any(|(kind, detail)| kind == "requeued"
            && detail.contains("launch on n1 failed for a fault of the node's: cannot write")
            && detail.contains("No space left on device")),
        "{events:?}"
    );
    // Full to the last byte now; another node is back: every job runs there.
    let full = fill(&spool);
    yctl(&c, &["resume", "n2"]);
    let more: Vec<u64> = (0..4).map(|_| c.submit(&["--wrap", "true"])).collect();
    for id in [placed].iter().chain(&more) {
        let j = c.wait_state(*id, "COMPLETED", SECS(30));
        assert_eq!(j["node"], "n2", "{j}");
    }
    assert_eq!(
        read_when_exists(&c.path(&format!("ysched-{placed}.out")), SECS(5)),
        "placed ran\n"
    );
    // The job running on n1 was not stopped, and its end was not lost.
    let j = c.wait_state(running, "COMPLETED", SECS(30));
    assert_eq!(j["restart_count"], 0, "{j}");
    assert_eq!(
        read_when_exists(&c.path(&format!("ysched-{running}.out")), SECS(5)),
        "done\n"
    );
    assert_eq!(node(&c.nodes(), "n1")["state"], "DRAINED");

    // Room again: n1 resumes by itself and runs jobs.
    std::fs::remove_file(full).unwrap();
    std::fs::remove_file(almost).unwrap();
    wait_until(SECS(20), "n1 resumed by its agent", || {
        node(&c.nodes(), "n1")["state"] == "IDLE"
    });
    let out = c.run("yctl", &["audit", "--json"]);
    let audit: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let n1: Vec<&str> = audit
        .iter()
        .rev()
        .filter(|e| e["user"] == "noded" && e["host"] == "n1")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(n1, ["drain", "resume"]);
    yctl(&c, &["drain", "n2", "--reason", "elsewhere"]);
    let last = c.submit(&["-G", "8", "--wrap", "true"]);
    assert_eq!(c.wait_state(last, "COMPLETED", SECS(20))["node"], "n1");
}
