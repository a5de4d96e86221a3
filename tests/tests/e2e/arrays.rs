//! End-to-end job arrays, dependencies and backfill: the real daemons and CLIs, real
//! processes; what Slurm users script around (`sbatch --array`, `--dependency`,
//! `squeue --start`).

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn env_map(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every job `yq --all --json` lists that belongs to array `array`, by task id.
fn tasks_of(c: &TestCluster, array: u64) -> BTreeMap<u64, Value> {
    c.jobs()
        .into_iter()
        .filter(|j| j["array_job_id"] == array)
        .map(|j| (j["array_task_id"].as_u64().expect("task id"), j))
        .collect()
}

fn count_in(tasks: &BTreeMap<u64, Value>, state: &str) -> usize {
    tasks.values().filter(|j| j["state"] == state).count()
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

/// `GetJob` over the socket: the wire form, with times in milliseconds.
fn job_info(c: &TestCluster, id: u64) -> ysched_proto::JobInfo {
    job_detail(&c.socket(), id).job.expect("job")
}

#[test]
fn an_array_runs_at_most_n_tasks_at_once_with_its_environment_and_cancels_by_task_or_whole() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 4, A100),
        FakeNode::uniform("n2", 4, A100),
    ]);
    let work = c.work.display().to_string();
    // Tasks below 20 wait for `gate1`, the others for `gate2`, which never comes. Each
    // records when it started and ended, and its environment.
    let script = c.script(
        "task.sh",
        &format!(
            "#!/bin/sh\n\
             #YSUB --array 0-49%4\n\
             #YSUB -o {work}/out-%A_%a.txt\n\
             t=$YS_ARRAY_TASK_ID\n\
             echo \"start $t $(date +%s%N)\" >> {work}/intervals\n\
             trap 'echo \"end $t $(date +%s%N)\" >> {work}/intervals; exit 0' TERM\n\
             env > {work}/env-$t.txt\n\
             gate={work}/gate1; [ \"$t\" -ge 20 ] && gate={work}/gate2\n\
             while [ ! -f \"$gate\" ]; do sleep 0.05; done\n\
             echo \"task $t of $YS_ARRAY_JOB_ID\"\n\
             echo \"end $t $(date +%s%N)\" >> {work}/intervals\n"
        ),
    );
    let id = c.submit(&["-G", "1", script.to_str().unwrap()]);
    wait_until(SECS(20), "4 tasks running", || {
        count_in(&tasks_of(&c, id), "RUNNING") == 4
    });
    let tasks = tasks_of(&c, id);
    assert_eq!(tasks.len(), 50, "{tasks:?}");
    assert_eq!(count_in(&tasks, "PENDING"), 46);
    for t in 0..4 {
        assert_eq!(tasks[&t]["state"], "RUNNING", "task {t}: {}", tasks[&t]);
        assert_eq!(tasks[&t]["display_id"], format!("{id}_{t}"));
    }
    assert!(tasks.values().all(|j| j["restart_count"] == 0));
    // The pending tasks fold into one line, as squeue shows them; `--array` expands them.
    let listing = run_ok(&c, "yq", &[]);
    assert!(
        listing.contains(&format!("{id}_[4-49%4]")),
        "no folded line in:\n{listing}"
    );
    assert!(listing.contains(&format!("{id}_2 ")), "{listing}");
    let expanded = run_ok(&c, "yq", &["--array"]);
    assert!(expanded.contains(&format!("{id}_49 ")), "{expanded}");
    assert!(!expanded.contains(&format!("{id}_[")), "{expanded}");
    let limited = tasks.values().find(|j| j["state"] == "PENDING").unwrap();
    assert_eq!(limited["reason"], "JobArrayTaskLimit", "{limited}");

    // One running task cancelled: only it ends, and the next task takes its place.
    run_ok(&c, "ycancel", &[&format!("{id}_3")]);
    wait_until(SECS(10), "task 3 cancelled and task 4 running", || {
        let t = tasks_of(&c, id);
        t[&3]["state"] == "CANCELLED" && t[&4]["state"] == "RUNNING"
    });
    let t = tasks_of(&c, id);
    assert_eq!(count_in(&t, "RUNNING"), 4);
    assert_eq!(count_in(&t, "CANCELLED"), 1);
    // A pending one, by range syntax.
    run_ok(&c, "ycancel", &[&format!("{id}_[10]")]);
    assert_eq!(tasks_of(&c, id)[&10]["state"], "CANCELLED");

    // Tasks 0-19 may finish; 20-23 then run and wait for ever.
    std::fs::write(c.path("gate1"), "").unwrap();
    wait_until(SECS(60), "tasks 0-19 completed and 20-23 running", || {
        let t = tasks_of(&c, id);
        count_in(&t, "COMPLETED") == 18 && count_in(&t, "RUNNING") == 4
    });
    // The whole array: every task not yet ended.
    run_ok(&c, "ycancel", &[&id.to_string()]);
    wait_until(SECS(20), "the rest cancelled", || {
        let t = tasks_of(&c, id);
        count_in(&t, "CANCELLED") == 32 && count_in(&t, "COMPLETED") == 18
    });

    let t = tasks_of(&c, id);
    for (task, job) in &t {
        let completed = *task < 20 && *task != 3 && *task != 10;
        assert_eq!(
            job["state"],
            if completed { "COMPLETED" } else { "CANCELLED" },
            "task {task}: {job}"
        );
        if !completed {
            continue;
        }
        let env = env_map(&read_when_exists(
            &c.path(&format!("env-{task}.txt")),
            SECS(5),
        ));
        assert_eq!(env["YS_ARRAY_JOB_ID"], id.to_string());
        assert_eq!(env["YS_ARRAY_TASK_ID"], task.to_string());
        assert_eq!(env["YS_ARRAY_TASK_COUNT"], "50");
        assert_eq!(env["YS_ARRAY_TASK_MIN"], "0");
        assert_eq!(env["YS_ARRAY_TASK_MAX"], "49");
        // Each task is a job of its own.
        assert_eq!(env["YS_JOB_ID"], job["id"].to_string());
        let out = read_when_exists(&c.path(&format!("out-{id}_{task}.txt")), SECS(5));
        assert_eq!(out.trim(), format!("task {task} of {id}"));
    }
    // Never more than 4 at once, from the tasks' own clocks: a task logs its end before it
    // exits, and the next starts only after schedd heard of that exit. (The `date` a
    // cancelled task's trap runs is started after the stop's SIGTERM and must not get it.)
    let log = std::fs::read_to_string(c.path("intervals")).unwrap();
    let mut edges: Vec<(u128, i32)> = log
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "malformed line {l:?} in:\n{log}");
            let at: u128 = f[2].parse().unwrap();
            (at, if f[0] == "start" { 1 } else { -1 })
        })
        .collect();
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    assert_eq!(most, 4, "{log}");
}

#[test]
fn a_chain_runs_in_order_and_a_job_whose_dependency_cannot_be_met_never_runs() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 4, A100)]);
    let gate = c.path("gate");
    let a = c.submit(&[
        "--wrap",
        &format!("while [ ! -f {} ]; do sleep 0.05; done", gate.display()),
    ]);
    let b = c.submit(&["-d", &format!("afterok:{a}"), "--wrap", "true"]);
    let cc = c.submit(&["-d", &format!("afternotok:{b}"), "--wrap", "true"]);
    c.wait_state(a, "RUNNING", SECS(15));
    // B waits for A, though the node has room.
    let jb = c.wait_waiting(b, SECS(15));
    assert_eq!(jb["reason"], "Dependency", "{jb}");
    assert_eq!(c.wait_waiting(cc, SECS(15))["reason"], "Dependency");

    std::fs::write(&gate, "").unwrap();
    let ja = c.wait_state(a, "COMPLETED", SECS(15));
    let jb = c.wait_state(b, "COMPLETED", SECS(15));
    assert!(
        jb["start_time"].as_str().unwrap() >= ja["end_time"].as_str().unwrap(),
        "B started before A ended: {ja} {jb}"
    );
    // B succeeded: C, which needs B to fail, can never run.
    // The pass that found it so left it waiting, and it never started.
    wait_until(SECS(10), "C never satisfied", || {
        c.job(cc)["reason"] == "DependencyNeverSatisfied"
    });
    let jc = c.wait_waiting(cc, SECS(15));
    assert!(jc["start_time"].is_null(), "{jc}");

    // Unknown jobs are refused, with a message naming them.
    let out = c.run("ysub", &["-d", "afterok:999999", "--wrap", "true"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("999999"), "{}", stderr(&out));

    // singleton: two jobs of one name and user run one after the other.
    let gate2 = c.path("gate2");
    let wait_gate2 = format!("while [ ! -f {} ]; do sleep 0.05; done", gate2.display());
    let s1 = c.submit(&["-J", "nightly", "-d", "singleton", "--wrap", &wait_gate2]);
    let s2 = c.submit(&["-J", "nightly", "-d", "singleton", "--wrap", &wait_gate2]);
    c.wait_state(s1, "RUNNING", SECS(15));
    let j2 = c.wait_waiting(s2, SECS(15));
    assert_eq!(j2["reason"], "Dependency", "{j2}");
    std::fs::write(&gate2, "").unwrap();
    let j1 = c.wait_state(s1, "COMPLETED", SECS(15));
    let j2 = c.wait_state(s2, "COMPLETED", SECS(15));
    assert!(j2["start_time"].as_str().unwrap() >= j1["end_time"].as_str().unwrap());
}

#[test]
fn with_kill_invalid_depend_a_job_whose_dependency_failed_is_cancelled() {
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 2, A100)],
        "kill_invalid_depend = true",
        "",
    );
    let a = c.submit(&["--wrap", "exit 3"]);
    let b = c.submit(&["-d", &format!("afterok:{a}"), "--wrap", "true"]);
    c.wait_state(a, "FAILED", SECS(15));
    let jb = c.wait_state(b, "CANCELLED", SECS(15));
    assert_eq!(jb["reason"], "DependencyNeverSatisfied", "{jb}");
    assert!(jb["start_time"].is_null(), "{jb}");
}

#[test]
fn a_short_job_backfills_only_where_it_cannot_delay_the_reserved_head_job() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 4, A100),
        FakeNode::uniform("n2", 4, A100),
    ]);
    let sleeper = "sleep 3000";
    // One node full for an hour, three GPUs of the other for half an hour.
    let full = c.submit(&["-p", "low", "-G", "4", "-t", "1:00:00", "--wrap", sleeper]);
    let full_node = c.wait_state(full, "RUNNING", SECS(15))["node"]
        .as_str()
        .unwrap()
        .to_string();
    let part = c.submit(&["-p", "low", "-G", "3", "-t", "30:00", "--wrap", sleeper]);
    let other = c.wait_state(part, "RUNNING", SECS(15))["node"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(full_node, other);
    // The head job needs a whole node: medium may not preempt, so it gets a reservation on
    // the node that frees first.
    let head = c.submit(&["-p", "medium", "-G", "4", "--wrap", "true"]);
    // Two hours on the free GPU would delay it; ten minutes would not.
    let long = c.submit(&["-p", "low", "-G", "1", "-t", "2:00:00", "--wrap", sleeper]);
    let short = c.submit(&["-p", "low", "-G", "1", "-t", "10:00", "--wrap", sleeper]);
    let js = c.wait_state(short, "RUNNING", SECS(15));
    assert_eq!(js["node"], other.as_str());
    // The pass that started the short job left the long one and the head waiting.
    c.wait_waiting(long, SECS(15));
    c.wait_waiting(head, SECS(15));

    // The head's expected start: when the half-hour job's limit runs out, on its node.
    let part_info = job_info(&c, part);
    let head_info = job_info(&c, head);
    let limit_end = part_info.start_time_ms + 30 * 60 * 1000;
    assert!(
        (head_info.expected_start_ms - limit_end).abs() <= 1000,
        "expected start {} vs the running job's limit {limit_end}",
        head_info.expected_start_ms
    );
    assert_eq!(head_info.expected_nodes, vec![other.clone()]);
    let start = run_ok(&c, "yq", &["--start"]);
    let line = start
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&head.to_string()))
        .unwrap_or_else(|| panic!("head job not in yq --start:\n{start}"));
    assert!(line.contains(&other), "{line}");
    assert!(!line.contains("N/A"), "{line}");
    let json = run_ok(&c, "yq", &["--json", "-j", &head.to_string()]);
    let v: Vec<Value> = serde_json::from_str(&json).unwrap();
    assert!(v[0]["expected_start"].is_string(), "{}", v[0]);
}

#[test]
fn a_preempted_array_task_is_requeued_alone_and_keeps_its_task_id() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 8, A100)]);
    let work = c.work.display().to_string();
    let script = c.script(
        "trainer.sh",
        &format!(
            "#!/bin/sh\n\
             echo \"run $YS_ARRAY_TASK_ID $YS_RESTART_COUNT\" >> {work}/runs\n\
             trap 'exit 0' TERM\n\
             while true; do sleep 0.05; done\n"
        ),
    );
    let id = c.submit(&[
        "-p",
        "low",
        "-G",
        "2",
        "--array",
        "0-3",
        "--grace",
        "5",
        script.to_str().unwrap(),
    ]);
    wait_until(SECS(20), "4 tasks running", || {
        count_in(&tasks_of(&c, id), "RUNNING") == 4
    });
    // RUNNING is schedd's word that a task was started; each script's first line says it
    // really runs. A task preempted before that would leave no line of its first run.
    wait_until(SECS(20), "4 tasks' first lines", || {
        let runs = std::fs::read_to_string(c.path("runs")).unwrap_or_default();
        runs.lines().count() == 4
    });
    let urgent = c.submit(&["-p", "high", "-G", "2", "--wrap", "sleep 1"]);
    c.wait_state(urgent, "COMPLETED", SECS(30));
    // Exactly one task went back to the queue and ran again, under its own task id.
    wait_until(SECS(20), "all 4 running again", || {
        count_in(&tasks_of(&c, id), "RUNNING") == 4
    });
    let tasks = tasks_of(&c, id);
    let requeued: Vec<u64> = tasks
        .iter()
        .filter(|(_, j)| j["restart_count"] == 1)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(requeued.len(), 1, "{tasks:?}");
    let victim = requeued[0];
    assert!(tasks
        .iter()
        .all(|(t, j)| *t == victim || j["restart_count"] == 0));
    assert_eq!(tasks[&victim]["display_id"], format!("{id}_{victim}"));
    // The requeued task's script writes its line a moment after it shows RUNNING.
    let mut runs = String::new();
    wait_until(SECS(10), "the requeued task's line in runs", || {
        runs = std::fs::read_to_string(c.path("runs")).unwrap_or_default();
        runs.lines().count() >= 5
    });
    assert!(
        runs.lines().any(|l| l == format!("run {victim} 1")),
        "{runs}"
    );
    assert_eq!(runs.lines().count(), 5, "{runs}");
    run_ok(&c, "ycancel", &[&id.to_string()]);
}

/// Everything a `WatchJob` of `target` streams, until it ends.
fn watch_all(c: &TestCluster, target: u64) -> Vec<ysched_proto::JobInfo> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        let mut stream = client
            .watch_job(ysched_proto::JobRef {
                job_id: target,
                target: target.to_string(),
            })
            .await
            .expect("a watch of an array")
            .into_inner();
        let mut seen = Vec::new();
        while let Some(job) = stream.message().await.expect("the stream goes on") {
            seen.push(job);
        }
        seen
    })
}

#[test]
fn ysub_wait_follows_a_whole_array_in_one_watch_and_exits_with_its_worst_task() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 4, A100)]);
    // Task 3 fails with 4, task 0 ends last: the watch sees tasks end out of their order.
    let out = c.run(
        "ysub",
        &[
            "--wait",
            "--parsable",
            "-a",
            "0-5",
            "--wrap",
            "case $YS_ARRAY_TASK_ID in 0) sleep 1;; 3) exit 4;; esac; true",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}\n{}", c.logs());
    let id: u64 = stdout(&out).trim().parse().expect("the array's id");
    assert_eq!(
        err,
        format!(
            "Job {id}_3 FAILED (exit 4): exit code 4\nArray {id}: 6 tasks ended, 5 COMPLETED, 1 FAILED (exit 4)\n"
        )
    );
    // The array's name, watched once every task has ended: each task once, in task order,
    // without its spec, and the stream ends.
    let seen = watch_all(&c, id);
    let ids: Vec<u64> = seen.iter().map(|t| t.id).collect();
    assert_eq!(ids, (id..id + 6).collect::<Vec<_>>());
    assert!(seen.iter().all(|t| t.spec.is_none()));
    let failed: Vec<u32> = seen
        .iter()
        .filter(|t| t.state == "FAILED")
        .filter_map(|t| t.array_task_id)
        .collect();
    assert_eq!(failed, [3]);
    // An array longer than what schedd looks at in one go: waited for whole, then watched
    // again once ended, every task once and in order.
    let out = c.run(
        "ysub",
        &["--wait", "--parsable", "-a", "0-299", "--wrap", "true"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let big: u64 = stdout(&out).trim().parse().expect("the array's id");
    assert_eq!(
        err,
        format!("Array {big}: 300 tasks ended, 300 COMPLETED (exit 0)\n")
    );
    let seen: Vec<u64> = watch_all(&c, big).iter().map(|t| t.id).collect();
    assert_eq!(seen, (big..big + 300).collect::<Vec<_>>());
}

#[test]
fn ysub_wait_on_an_array_goes_on_through_a_schedd_restart() {
    use std::io::BufRead;
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 4, A100)]);
    let mut waiting = c.spawn_as(
        0,
        0,
        "ysub",
        &[
            "--wait",
            "--parsable",
            "-a",
            "0-3",
            "--wrap",
            "sleep 2; [ $YS_ARRAY_TASK_ID = 2 ] && exit 5; true",
        ],
    );
    let mut first_line = String::new();
    std::io::BufReader::new(waiting.stdout.take().expect("piped"))
        .read_line(&mut first_line)
        .expect("ysub says the array's id");
    let id: u64 = first_line.trim().parse().expect("the array's id");
    wait_until(SECS(20), "every task running", || {
        count_in(&tasks_of(&c, id), "RUNNING") == 4
    });
    // Killed while the tasks run: they end while schedd is away, and the wait goes on with
    // the restarted one.
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    let out = waiting.wait_with_output().expect("ysub --wait ends");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}\n{}", c.logs());
    assert!(
        err.ends_with(&format!(
            "Array {id}: 4 tasks ended, 3 COMPLETED, 1 FAILED (exit 5)\n"
        )),
        "{err}"
    );
}
