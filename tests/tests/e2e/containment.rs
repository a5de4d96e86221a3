//! End-to-end containment: a job is its whole process tree, in its own cgroup on this
//! machine. A memory limit that is exceeded ends the job OUT_OF_MEMORY; a warning signal
//! before the time limit lets a job save and requeue itself (`yctl requeue`); a preempted job
//! whose script does not `exec` its trainer still gets its whole grace to checkpoint; and a
//! process that escapes into its own session is still killed at the end of a cancel's grace.

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn one_node(gpus: u32) -> TestCluster {
    TestCluster::start(vec![FakeNode::uniform("n1", gpus, A100)])
}

/// `yctl show job ID --json`.
fn detail(c: &TestCluster, id: u64) -> Value {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn events(c: &TestCluster, id: u64) -> Vec<Value> {
    detail(c, id)["events"].as_array().unwrap().clone()
}

fn audit(c: &TestCluster) -> Vec<Value> {
    let out = c.run("yctl", &["audit", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Pids of live (not zombie) processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        if alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// The process exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn a_job_over_its_memory_limit_ends_out_of_memory_and_its_neighbour_completes() {
    let c = one_node(2);
    let neighbour = c.submit(&["--wrap", "sleep 3; echo neighbour done"]);
    c.wait_state(neighbour, "RUNNING", SECS(20));
    // 500 MB of real (written) memory against a 100M limit.
    let hog = c.submit(&[
        "--mem",
        "100M",
        "--wrap",
        "python3 -c \"b = b'x' * (500 * 1024 * 1024); print(len(b))\"",
    ]);
    let j = c.wait_state(hog, "OUT_OF_MEMORY", SECS(60));
    let reason = j["reason"].as_str().unwrap();
    assert_eq!(
        reason, "out of memory: the job exceeded its memory limit (--mem 100M) on n1",
        "{j}"
    );
    assert!(j["end_time"].is_string(), "{j}");
    // `yctl show job` says the same, in text and JSON, and the history has the exit.
    let out = c.run("yctl", &["show", "job", &hog.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("JobState=OUT_OF_MEMORY"), "{text}");
    assert!(text.contains("(--mem 100M) on n1"), "{text}");
    let d = detail(&c, hog);
    assert_eq!(d["state"], "OUT_OF_MEMORY");
    assert_eq!(d["mem_mib"], 100);
    let exited = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "exited")
        .expect("exited event")
        .clone();
    assert!(
        exited["detail"].as_str().unwrap().contains("out of memory"),
        "{exited}"
    );
    // `yq -t OOM` finds it.
    let out = c.run("yq", &["-t", "OOM", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(listed.iter().any(|j| j["id"] == hog), "{listed:?}");
    // The job next to it and the agent are unaffected.
    c.wait_state(neighbour, "COMPLETED", SECS(30));
    assert!(read(&c.path(&format!("ysched-{neighbour}.out"))).contains("neighbour done"));
    let after = c.submit(&["--mem", "100M", "--wrap", "echo fine"]);
    c.wait_state(after, "COMPLETED", SECS(30));
    assert!(c.nodes().iter().all(|n| n["state"] != "DOWN"));
}

#[test]
fn a_job_warned_before_its_time_limit_requeues_itself_and_runs_again() {
    let c = one_node(2);
    let yctl = bin_dir().join("yctl");
    let script = c.script(
        "warned.sh",
        &format!(
            r#"#!/bin/bash
#YSUB --signal USR1@2
#YSUB -t 0:05
cd "{work}"
if [ "$YS_RESTART_COUNT" = "1" ]; then
  echo "second run restart=$YS_RESTART_COUNT" > "second-$YS_JOB_ID"
  exit 0
fi
echo "$EPOCHREALTIME" > "start-$YS_JOB_ID"
# The warning goes to every process of the job, a child the trap starts meanwhile included:
# the time is taken with builtins, and the request is tried again if USR1 cut it short.
trap 'echo "$EPOCHREALTIME" > "usr1-$YS_JOB_ID"
      for try in 1 2 3 4 5; do "{yctl}" requeue "$YS_JOB_ID" && break; sleep 0.2; done' USR1
while true; do sleep 0.1; done
"#,
            work = c.work.display(),
            yctl = yctl.display()
        ),
    );
    let id = c.submit(&[script.to_str().unwrap()]);
    // `yctl show job` shows the warning it asked for.
    let out = c.run("yctl", &["show", "job", &id.to_string()]);
    assert!(stdout(&out).contains("Signal=USR1@2"), "{}", stdout(&out));
    assert_eq!(detail(&c, id)["warn_signal"], "USR1@2");
    // The second run marks its file and completes.
    let j = c.wait_state(id, "COMPLETED", SECS(60));
    assert_eq!(j["restart_count"], 1);
    let second = read_when_exists(&c.path(&format!("second-{id}")), SECS(5));
    assert_eq!(second.trim(), "second run restart=1");
    // SIGUSR1 came about 2 s before the 5 s limit: not at the start, not at the limit. The
    // script starts a little after the agent starts its clock, and on a loaded 2-core machine
    // the signal and the trap's clock read can each lag by a second, hence the wide window.
    let secs = |name: &str| -> f64 {
        let text = read(&c.path(&format!("{name}-{id}")));
        text.trim()
            .replace(',', ".")
            .parse()
            .unwrap_or_else(|_| panic!("{name}-{id} not written: {text:?}"))
    };
    let after_start = secs("usr1") - secs("start");
    let before_limit = 5.0 - after_start;
    assert!(
        (0.4..=3.5).contains(&before_limit),
        "SIGUSR1 {after_start:.2}s after start, {before_limit:.2}s before the limit"
    );
    // The history has the request and the requeue; the audit log has who asked.
    let kinds: Vec<String> = events(&c, id)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    let at = |kind: &str| kinds.iter().position(|k| k == kind);
    let (asked, requeued) = (
        at("requeue").expect("requeue"),
        at("requeued").expect("requeued"),
    );
    assert!(asked < requeued, "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "started").count(),
        2,
        "{kinds:?}"
    );
    assert!(
        audit(&c)
            .iter()
            .any(|a| a["action"] == "requeue" && a["job_id"] == id && a["user"] == "root"),
        "{:?}",
        audit(&c)
    );
}

#[test]
fn requeue_is_refused_for_queued_no_requeue_and_other_users_jobs() {
    let c = one_node(2);
    let held = c.submit(&["--hold", "--wrap", "true"]);
    let out = c.run("yctl", &["requeue", &held.to_string()]);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out).trim(),
        format!("yctl: error: job {held} is HELD: only a RUNNING job can be requeued")
    );
    let out = c.run("yctl", &["requeue", "9999"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("invalid job id 9999: no such job"),
        "{}",
        stderr(&out)
    );

    let pinned = c.submit(&["--no-requeue", "--wrap", "sleep 30"]);
    let running = c.submit(&["--wrap", "sleep 30"]);
    c.wait_state(pinned, "RUNNING", SECS(20));
    c.wait_state(running, "RUNNING", SECS(20));
    let out = c.run("yctl", &["requeue", &pinned.to_string()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("was submitted with --no-requeue: it is never requeued"),
        "{}",
        stderr(&out)
    );
    // nobody may not requeue root's job; the refusal is audited.
    let out = c.run_as(65534, 65534, "yctl", &["requeue", &running.to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("belongs to root"), "{}", stderr(&out));
    assert_eq!(c.job(running)["state"], "RUNNING");
    assert!(
        audit(&c)
            .iter()
            .any(|a| a["action"] == "requeue_refused" && a["job_id"] == running),
        "{:?}",
        audit(&c)
    );
    let out = c.run("ycancel", &[&pinned.to_string(), &running.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A trainer like a real one: two worker processes, a SIGTERM handler that needs a second to
/// save (a slow `torch.save`), and resuming from the checkpoint on a restart. The first
/// argument is a marker put in every process's argv, to find them with `ps`.
const TRAIN_PY: &str = r#"import os, signal, subprocess, sys, time

marker = sys.argv[1]
if sys.argv[2:] == ["--worker"]:
    while True:
        time.sleep(0.05)

ck_dir = os.environ["YS_CHECKPOINT_DIR"]
ck = os.path.join(ck_dir, "step")
step = 0
if int(os.environ.get("YS_RESTART_COUNT", "0")) > 0 and os.path.exists(ck):
    with open(ck) as f:
        step = int(f.read())
    print(f"resumed from step={step}", flush=True)
workers = [subprocess.Popen([sys.executable, __file__, marker, "--worker"]) for _ in range(2)]
print(f"trainer started restart={os.environ['YS_RESTART_COUNT']} workers={len(workers)}", flush=True)

def save(signum, frame):
    time.sleep(1.0)
    os.makedirs(ck_dir, exist_ok=True)
    with open(ck + ".tmp", "w") as f:
        f.write(str(step))
    os.rename(ck + ".tmp", ck)
    print(f"checkpointed step={step}", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, save)
while True:
    step += 1
    time.sleep(0.05)
"#;

#[test]
fn a_preempted_bash_wrapper_without_exec_still_checkpoints_and_resumes() {
    let c = one_node(2);
    let train = c.path("train.py");
    std::fs::write(&train, TRAIN_PY).unwrap();
    // The commonest job script: bash runs python, no `exec`. bash dies of the SIGTERM at once;
    // the trainer needs a second more.
    let script = c.script(
        "wrapper.sh",
        &format!(
            "#!/bin/bash\necho \"wrapper restart=$YS_RESTART_COUNT\"\n\
             python3 {} \"ystrainer-$YS_JOB_ID-run$YS_RESTART_COUNT\"\n\
             echo \"wrapper: trainer exited $?\"\n",
            train.display()
        ),
    );
    let victim = c.submit(&[
        "-p",
        "low",
        "-G",
        "2",
        "--grace",
        "10",
        script.to_str().unwrap(),
    ]);
    c.wait_state(victim, "RUNNING", SECS(20));
    let out_path = c.path(&format!("ysched-{victim}.out"));
    wait_until(SECS(20), "trainer started", || {
        read(&out_path).contains("trainer started restart=0 workers=2")
    });
    let first_run = format!("ystrainer-{victim}-run0");
    wait_until(SECS(10), "trainer and its two workers", || {
        processes_with(&first_run).len() == 3
    });
    std::thread::sleep(Duration::from_millis(500)); // some steps
    let critical = c.submit(&[
        "-p",
        "critical",
        "-G",
        "2",
        "--wrap",
        "echo critical; sleep 1",
    ]);
    c.wait_state(critical, "COMPLETED", SECS(60));
    // The victim saved its checkpoint within its grace, though its shell was gone at once.
    let ev = events(&c, victim);
    let pre = ev
        .iter()
        .find(|e| e["kind"] == "preemption")
        .unwrap_or_else(|| panic!("no preemption event: {ev:?}"));
    let detail_text = pre["detail"].as_str().unwrap();
    assert!(
        detail_text.contains("checkpoint_saved=true"),
        "{detail_text}"
    );
    assert!(detail_text.contains("exited within grace"), "{detail_text}");
    assert!(ev.iter().any(|e| e["kind"] == "requeued"), "{ev:?}");
    // It resumes from the step it saved.
    wait_until(SECS(30), "victim resumed", || {
        read(&out_path).contains("resumed from step=")
    });
    let out = read(&out_path);
    let saved: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("checkpointed step="))
        .unwrap_or_else(|| panic!("no checkpoint line in\n{out}"))
        .parse()
        .unwrap();
    assert!(saved > 0, "the trainer made progress before the eviction");
    assert!(out.contains(&format!("resumed from step={saved}")), "{out}");
    let j = c.job(victim);
    assert_eq!(j["restart_count"], 1, "{j}");
    assert_eq!(j["state"], "RUNNING", "{j}");
    // Nothing of the first run is left: not the trainer, not a worker.
    assert_eq!(processes_with(&first_run), Vec::<i32>::new());
    let out = c.run("ycancel", &[&victim.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_setsid_child_ignoring_sigterm_is_killed_only_at_the_end_of_the_cancel_grace() {
    let c = one_node(2);
    let script = c.script(
        "escape.sh",
        &format!(
            r#"#!/bin/bash
cd "{work}"
setsid bash -c 'trap "" TERM; echo $$ > "stubborn-$YS_JOB_ID.pid"; while true; do sleep 0.1; done' &
while [ ! -s "stubborn-$YS_JOB_ID.pid" ]; do sleep 0.05; done
echo escaped
sleep 1000
"#,
            work = c.work.display()
        ),
    );
    let id = c.submit(&["--grace", "4", script.to_str().unwrap()]);
    c.wait_state(id, "RUNNING", SECS(20));
    let pid: i32 = c
        .read_job_file(id, &format!("stubborn-{id}.pid"), SECS(20))
        .trim()
        .parse()
        .expect("pid");
    wait_until(SECS(10), "the stubborn child running", || alive(pid));
    // In its own session, yet still the job's.
    let sid = |pid: i32| nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).ok();
    assert_eq!(sid(pid), Some(nix::unistd::Pid::from_raw(pid)));
    let t0 = Instant::now();
    let out = c.run("ycancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Within the grace it lives on, and the job is not over: every look that ended within 4 s
    // of the cancel fell inside the grace, and there must be such a look (a machine too slow
    // for one fails the test rather than skip the check).
    let mut looks_within_grace = 0;
    while t0.elapsed() < SECS(4) {
        let (child_alive, state) = (alive(pid), c.job(id)["state"].clone());
        if t0.elapsed() < SECS(4) {
            assert!(child_alive, "killed before the grace ended");
            assert_eq!(state, "RUNNING", "ended before the grace did");
            looks_within_grace += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        looks_within_grace > 0,
        "no look at the job within its grace: the machine is too slow for this test"
    );
    let j = c.wait_state(id, "CANCELLED", SECS(30));
    assert!(
        t0.elapsed() >= SECS(4),
        "cancelled after {:?}, before the grace ended",
        t0.elapsed()
    );
    assert!(
        !alive(pid),
        "the job ended CANCELLED with its child still alive"
    );
    assert_eq!(j["reason"], "cancelled by root");
    let ev = events(&c, id);
    let exited = ev.iter().find(|e| e["kind"] == "exited").expect("exited");
    assert!(
        exited["detail"]
            .as_str()
            .unwrap()
            .contains("SIGKILL after grace"),
        "{exited}"
    );
}
