//! End-to-end tests of the foundation: real schedd, real noded agents, real CLIs, real jobs.

use std::collections::BTreeSet;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn two_nodes() -> TestCluster {
    TestCluster::start(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ])
}

fn env_of(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} not in output:\n{text}"))
        .to_string()
}

#[test]
fn jobs_run_on_disjoint_gpus_with_their_environment_and_output() {
    let c = two_nodes();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(c.submit(&[
            "-J",
            &format!("envjob{i}"),
            "-G",
            "4",
            "--wrap",
            "env | sort; pwd; sleep 1",
        ]));
    }
    let mut seen = BTreeSet::new();
    for id in &ids {
        let j = c.wait_state(*id, "COMPLETED", SECS(30));
        assert_eq!(j["exit_code"], 0);
        let out = read_when_exists(&c.path(&format!("ysched-{id}.out")), SECS(5));
        assert_eq!(env_of(&out, "YS_JOB_ID"), id.to_string());
        assert_eq!(
            env_of(&out, "YS_JOB_NAME"),
            format!("envjob{}", id - ids[0])
        );
        assert_eq!(env_of(&out, "YS_RESTART_COUNT"), "0");
        assert_eq!(env_of(&out, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
        let node = env_of(&out, "YS_NODE");
        assert_eq!(j["node"], node.as_str());
        let ckpt = env_of(&out, "YS_CHECKPOINT_DIR");
        assert_eq!(ckpt, c.path(&format!("ckpt/{id}")).display().to_string());
        assert!(
            std::path::Path::new(&ckpt).is_dir(),
            "checkpoint dir created"
        );
        assert!(
            out.contains(&c.work.display().to_string()),
            "ran in the workdir"
        );
        let gpus = env_of(&out, "CUDA_VISIBLE_DEVICES");
        assert_eq!(gpus.split(',').count(), 4);
        let held: Vec<String> = j["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.to_string())
            .collect();
        assert_eq!(held.join(","), gpus);
        for g in gpus.split(',') {
            assert!(
                seen.insert(format!("{node}:{g}")),
                "GPU {node}:{g} given twice"
            );
        }
    }
    assert_eq!(seen.len(), 16);
}

#[test]
fn output_options_and_ysub_directives() {
    let c = two_nodes();
    let script = c.script(
        "directives.sh",
        "#!/bin/sh\n#YSUB -J from-directive\n#YSUB -G 2\n#YSUB -o dir-%j.log\n#YSUB -t 5\necho \"args:$*\"\necho oops >&2\n",
    );
    let id = c.submit(&[script.to_str().unwrap(), "a", "b"]);
    let j = c.wait_state(id, "COMPLETED", SECS(20));
    assert_eq!(j["name"], "from-directive");
    assert_eq!(j["gpus"].as_array().unwrap().len(), 2);
    let out = read_when_exists(&c.path(&format!("dir-{id}.log")), SECS(5));
    assert!(out.contains("args:a b"), "{out}");
    assert!(
        out.contains("oops"),
        "stderr joins stdout by default: {out}"
    );
    // Command-line options override directives; -e splits stderr.
    let id = c.submit(&[
        "-J",
        "cli-name",
        "-e",
        "err-%j.txt",
        script.to_str().unwrap(),
    ]);
    let j = c.wait_state(id, "COMPLETED", SECS(20));
    assert_eq!(j["name"], "cli-name");
    assert_eq!(
        read_when_exists(&c.path(&format!("err-{id}.txt")), SECS(5)).trim(),
        "oops"
    );
}

#[test]
fn hold_release_and_wait_exit_code() {
    let c = two_nodes();
    let id = c.submit(&["--hold", "--wrap", "exit 3"]);
    let j = c.job(id);
    assert_eq!(j["state"], "HELD");
    // A job submitted after it starts and ends: the passes that saw the held one left it.
    let after = c.submit(&["--wrap", "true"]);
    c.wait_state(after, "COMPLETED", SECS(20));
    assert_eq!(c.job(id)["state"], "HELD", "a held job never starts");
    let out = c.run("yctl", &["release", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j = c.wait_state(id, "FAILED", SECS(20));
    assert_eq!(j["exit_code"], 3);
    // Holding a running job is refused with a reason.
    let id = c.submit(&["--wrap", "sleep 30"]);
    c.wait_state(id, "RUNNING", SECS(10));
    let out = c.run("yctl", &["hold", &id.to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("RUNNING"), "{}", stderr(&out));
    // --wait returns the job's exit code.
    let out = c.run("ysub", &["--wait", "--wrap", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
}

fn pids_in_group(pgid: i32) -> Vec<i32> {
    let mut res = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) {
            // Fields after the command name: state ppid pgrp ...
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" {
                    res.push(pid);
                }
            }
        }
    }
    res
}

#[test]
fn cancel_kills_the_whole_process_group() {
    let c = two_nodes();
    let id = c.submit(&[
        "-G",
        "1",
        "--wrap",
        "sleep 300 & sleep 300 & echo pgid=$(ps -o pgid= $$ | tr -d ' ') ; echo ready; wait",
    ]);
    c.wait_state(id, "RUNNING", SECS(10));
    let out_path = c.path(&format!("ysched-{id}.out"));
    wait_until(SECS(10), "job ready", || {
        std::fs::read_to_string(&out_path).is_ok_and(|s| s.contains("ready"))
    });
    let text = std::fs::read_to_string(&out_path).unwrap();
    let pgid: i32 = env_of(&text, "pgid").parse().unwrap();
    assert!(
        pids_in_group(pgid).len() >= 3,
        "shell and two sleeps run in one group"
    );
    let out = c.run("ycancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j = c.wait_state(id, "CANCELLED", SECS(20));
    assert!(j["end_time"].is_string());
    wait_until(SECS(5), "process group gone", || {
        pids_in_group(pgid).is_empty()
    });
    // A pending job is cancelled at once; a finished one cannot be cancelled again.
    let out = c.run("ycancel", &[&id.to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("finished"), "{}", stderr(&out));
}

#[test]
fn time_limit_ends_in_timeout() {
    let c = two_nodes();
    // 1 minute limit is the smallest Slurm format; use seconds form MM:SS.
    let id = c.submit(&[
        "-t",
        "0:02",
        "--grace",
        "1",
        "--wrap",
        "trap '' TERM; sleep 300",
    ]);
    let j = c.wait_state(id, "TIMEOUT", SECS(20));
    let started = j["start_time"].as_str().unwrap().to_string();
    let ended = j["end_time"].as_str().unwrap().to_string();
    assert_ne!(started, ended);
}

#[test]
fn bad_input_is_refused_with_a_clear_message_and_changes_nothing() {
    let c = two_nodes();
    let before = c.jobs().len();
    let cases: &[(&[&str], &str)] = &[
        (&["-p", "urgent", "--wrap", "true"], "unknown tier"),
        (&["-G", "-1", "--wrap", "true"], "-1"),
        (&["-G", "two", "--wrap", "true"], "two"),
        (&["-c", "-4", "--wrap", "true"], "-4"),
        (&["-t", "1:2:3:4", "--wrap", "true"], "time"),
        (&["-t", "soon", "--wrap", "true"], "soon"),
        (&["--mem", "12Q", "--wrap", "true"], "12Q"),
        (&["--mem", "lots", "--wrap", "true"], "lots"),
        (&["-G", "16", "--wrap", "true"], "16 GPUs"),
        (&["-G", "1", "--gpu-type", "H100", "--wrap", "true"], "H100"),
        (&["--grace", "301", "--wrap", "true"], "grace"),
        (&["no-such-script.sh"], "no-such-script.sh"),
    ];
    for (args, needle) in cases {
        let out = c.run("ysub", args);
        assert!(!out.status.success(), "ysub {args:?} was accepted");
        let err = stderr(&out);
        assert!(
            err.contains(needle),
            "ysub {args:?}: message {err:?} does not name {needle:?}"
        );
    }
    let out = c.run("ycancel", &["999999"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("999999"), "{}", stderr(&out));
    let out = c.run("yctl", &["show", "job", "999999"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("999999"));
    let out = c.run("yq", &["-t", "sleeping"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("sleeping"));
    assert_eq!(c.jobs().len(), before, "a refused request changes nothing");
    // Cancelling someone else's job: nobody (65534) may not cancel root's job.
    let id = c.submit(&["--hold", "--wrap", "true"]);
    let out = c.run_as(65534, 65534, "ycancel", &[&id.to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("belongs to root"), "{}", stderr(&out));
    assert_eq!(c.job(id)["state"], "HELD");
    // The daemon survived all of it.
    assert_eq!(c.nodes().len(), 2);
}

#[test]
fn jobs_run_as_the_submitting_user() {
    let c = two_nodes();
    let out = c.run_as(
        65534,
        65534,
        "ysub",
        &["--parsable", "--wrap", "id -u; id -g"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    let j = c.wait_state(id, "COMPLETED", SECS(20));
    assert_eq!(j["user"], "nobody");
    let out = read_when_exists(&c.path(&format!("ysched-{id}.out")), SECS(5));
    assert_eq!(out.lines().collect::<Vec<_>>(), ["65534", "65534"]);
    // nobody may cancel their own jobs, but not with -u for someone else.
    let out = c.run_as(65534, 65534, "ycancel", &["-u", "root"]);
    assert!(!out.status.success());
}

#[test]
fn kill_9_after_a_burst_of_acknowledged_submits_loses_none_and_reuses_no_id() {
    let mut c = two_nodes();
    let mut acked = Vec::new();
    for _ in 0..40 {
        acked.push(c.submit(&["--hold", "--wrap", "true"]));
    }
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    let listed: BTreeSet<u64> = c.jobs().iter().map(|j| j["id"].as_u64().unwrap()).collect();
    for id in &acked {
        assert!(listed.contains(id), "acknowledged job {id} lost");
    }
    let next = c.submit(&["--hold", "--wrap", "true"]);
    assert!(next > *acked.iter().max().unwrap(), "id {next} reused");
}

#[test]
fn an_agent_restart_keeps_its_running_job() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    let id = c.submit(&["-G", "1", "--wrap", "sleep 3; echo survived"]);
    c.wait_state(id, "RUNNING", SECS(10));
    std::thread::sleep(Duration::from_millis(500));
    c.stop_agent("n1", nix::sys::signal::Signal::SIGKILL);
    c.start_agent("n1");
    c.wait_nodes_up(1);
    assert_eq!(c.job(id)["state"], "RUNNING");
    let j = c.wait_state(id, "COMPLETED", SECS(30));
    assert_eq!(j["exit_code"], 0);
    let out = read_when_exists(&c.path(&format!("ysched-{id}.out")), SECS(5));
    assert!(out.contains("survived"));
}

#[test]
fn schedd_restart_keeps_queue_and_running_jobs() {
    let mut c = two_nodes();
    let running = c.submit(&["-G", "1", "--wrap", "sleep 3"]);
    let held = c.submit(&["--hold", "--wrap", "true"]);
    c.wait_state(running, "RUNNING", SECS(10));
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    c.wait_nodes_up(2);
    assert_eq!(c.job(held)["state"], "HELD");
    c.wait_state(running, "COMPLETED", SECS(30));
}

#[test]
fn drain_and_resume() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    let out = c.run("yctl", &["drain", "n1", "--reason", "maintenance"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = &c.nodes()[0];
    assert_eq!(n["state"], "DRAINED");
    assert_eq!(n["reason"], "maintenance");
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_waiting(id, SECS(15));
    let out = c.run("yctl", &["resume", "n1"]);
    assert!(out.status.success());
    c.wait_state(id, "COMPLETED", SECS(20));
    // Only root drains.
    let out = c.run_as(65534, 65534, "yctl", &["drain", "n1", "--reason", "x"]);
    assert!(!out.status.success());
}

#[test]
fn show_job_lists_the_event_history() {
    let c = two_nodes();
    let id = c.submit(&["--wrap", "true"]);
    c.wait_state(id, "COMPLETED", SECS(20));
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in ["submitted", "scheduled", "started", "exited"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
}

#[test]
fn an_agent_with_a_wrong_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let bad_conf = c.dir.path().join("bad.toml");
    let text = std::fs::read_to_string(&c.conf)
        .unwrap()
        .replace("cluster.key", "wrong.key");
    std::fs::write(&bad_conf, text).unwrap();
    let wrong_key = c.dir.path().join("wrong.key");
    std::fs::write(&wrong_key, "not-the-key\n").unwrap();
    // Private, as noded demands: refused for being wrong, not for its mode.
    std::fs::set_permissions(&wrong_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let gpus = c.dir.path().join("n1-gpus.toml");
    let mut child = std::process::Command::new(bin_dir().join("noded"))
        .args(["--name", "intruder", "--fake-gpus"])
        .arg(&gpus)
        .arg("--spool-dir")
        .arg(c.dir.path().join("spool-intruder"))
        .env("YSCHED_CONF", &bad_conf)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let _ = child.wait();
    let names: Vec<String> = c
        .nodes()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["n1"], "the intruder never registered");
}

#[test]
fn a_node_silent_past_its_timeout_fails_its_jobs_and_the_agent_kills_them_on_return() {
    // Without fencing (`fence_after_secs = 0`): the job may still run, so it is not requeued.
    let mut c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 2, A100)],
        "fence_after_secs = 0",
    )
    .with_node_timeout(2);
    let id = c.submit(&[
        "-G",
        "1",
        "--wrap",
        "echo pgid=$(ps -o pgid= $$ | tr -d ' '); sleep 300",
    ]);
    c.wait_state(id, "RUNNING", SECS(10));
    let out_path = c.path(&format!("ysched-{id}.out"));
    wait_until(SECS(10), "job output", || {
        std::fs::read_to_string(&out_path).is_ok_and(|s| s.contains("pgid="))
    });
    let pgid: i32 = env_of(&std::fs::read_to_string(&out_path).unwrap(), "pgid")
        .parse()
        .unwrap();
    c.stop_agent("n1", nix::sys::signal::Signal::SIGKILL);
    let j = c.wait_state(id, "NODE_FAIL", SECS(15));
    assert!(j["reason"].as_str().unwrap().contains("n1"), "{j}");
    assert!(
        !pids_in_group(pgid).is_empty(),
        "the job outlived its agent"
    );
    // The agent returns still running the job: schedd no longer counts it, so it is killed.
    c.start_agent("n1");
    c.wait_nodes_up(1);
    wait_until(SECS(10), "orphaned job killed", || {
        pids_in_group(pgid).is_empty()
    });
    assert_eq!(c.job(id)["state"], "NODE_FAIL");
}

#[test]
fn a_schedd_started_while_the_last_one_still_holds_the_store_waits_for_it() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let id = c.submit(&["--hold", "--wrap", "true"]);
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    // The store's lock held a while longer, as by a schedd still stopping.
    let holder = ysched_schedd::store::Store::open(&c.state_dir()).unwrap();
    let released = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        drop(holder);
    });
    c.start_schedd();
    released.join().unwrap();
    let logs = c.logs();
    assert!(
        logs.contains("is in use by another process") && logs.contains("was let go after"),
        "{logs}"
    );
    assert_eq!(c.job(id)["state"], "HELD");
}
