//! End-to-end usage accounting and reports: "a scripted week in minutes". Short jobs of two
//! accounts end every way a run can (completed, failed, preempted with a checkpoint and
//! requeued, cancelled, preempted without one and not requeued); `yctl report --json` must
//! match, to the millisecond, the GPU time of every run as the jobs' own history records it
//! (each run from its `scheduled` event to its `exited` one), and the counts and the
//! checkpoint rate exactly. `--csv` and `--html` are produced, the HTML with its charts.
//! Usage survives `kill -9` of schedd, a job ending across the restart is charged once, and
//! nothing is charged twice after it. Imports are for administrators and idempotent, and with
//! `reports_public = false` a user sees only the accounts they may charge.
//! `--export-trace` writes the jobs as a CSV trace that ysim's own reader parses and replays:
//! one row per finished job, a job between runs at the window's end left out.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

/// Saves its step on SIGTERM and exits 0 (as in `preemption.rs`).
const TRAINER: &str = r#"#!/bin/sh
ck="$YS_CHECKPOINT_DIR/step"
step=0
[ -f "$ck" ] && step=$(cat "$ck")
echo "start restart=$YS_RESTART_COUNT step=$step"
trap 'echo "$step" > "$ck.tmp" && mv "$ck.tmp" "$ck"; echo "checkpointed step=$step"; exit 0' TERM
while true; do step=$((step+1)); sleep 0.05; done
"#;

/// Ignores SIGTERM: killed at the end of its grace, with no checkpoint.
const STUBBORN: &str = "#!/bin/sh\ntrap '' TERM\necho start\nwhile true; do sleep 0.05; done\n";

const ACCOUNTS: &str =
    "[accounts.vision]\nusers = [\"root\"]\n[accounts.nlp]\nusers = [\"root\"]\n";

/// One run of a job as its history records it: GPUs, start and end (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    gpus: u64,
    start: i64,
    end: i64,
}

/// The runs of job `id` from its history (`GetJob`, times in ms): each from `scheduled` to
/// the `exited` that follows.
fn runs_of(c: &TestCluster, id: u64, gpus: u64) -> Vec<Run> {
    runs_in_history(&job_detail(&c.socket(), id))
        .into_iter()
        .map(|(start, end)| Run { gpus, start, end })
        .collect()
}

fn gpu_ms(runs: &[Run]) -> u64 {
    runs.iter().map(|r| r.gpus * (r.end - r.start) as u64).sum()
}

fn report(c: &TestCluster, args: &[&str]) -> Value {
    let out = c.run("yctl", &[&["report", "--json"], args].concat());
    assert!(out.status.success(), "yctl report: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("report json")
}

fn group<'v>(r: &'v Value, name: &str) -> &'v Value {
    r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no group {name} in {r:#}"))
}

/// GPU time of a report line in ms (its `gpu_seconds`, which carries milliseconds).
fn ms(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

fn wait_output(c: &TestCluster, id: u64, text: &str) {
    let out = c.path(&format!("ysched-{id}.out"));
    wait_until(SECS(15), &format!("job {id} to print {text:?}"), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains(text))
    });
}

#[test]
fn a_scripted_week_in_minutes_is_reported_exactly_and_survives_kill_9() {
    let mut c = TestCluster::start_with_config(vec![FakeNode::uniform("n1", 4, A100)], ACCOUNTS);
    let trainer = c.script("trainer.sh", TRAINER);
    let stubborn = c.script("stubborn.sh", STUBBORN);
    let (trainer, stubborn) = (trainer.to_str().unwrap(), stubborn.to_str().unwrap());

    // Monday to Wednesday: short jobs of both accounts, one failing.
    let j1 = c.submit(&["-A", "vision", "-p", "low", "-G", "2", "--wrap", "sleep 1"]);
    let j2 = c.submit(&["-A", "vision", "-p", "low", "-G", "1", "--wrap", "sleep 1"]);
    let j3 = c.submit(&["-A", "nlp", "-p", "medium", "-G", "1", "--wrap", "sleep 2"]);
    let j4 = c.submit(&["-A", "nlp", "-p", "low", "-G", "1", "--wrap", "exit 3"]);
    for id in [j1, j2, j3] {
        c.wait_state(id, "COMPLETED", SECS(30));
    }
    c.wait_state(j4, "FAILED", SECS(30));

    // Thursday: a critical job preempts a trainer, which saves its checkpoint and is
    // requeued; it runs again and is cancelled.
    let t1 = c.submit(&[
        "-A", "vision", "-p", "low", "-G", "4", "--grace", "10", trainer,
    ]);
    c.wait_state(t1, "RUNNING", SECS(15));
    wait_output(&c, t1, "start restart=0");
    let c1 = c.submit(&[
        "-A", "nlp", "-p", "critical", "-G", "4", "--wrap", "sleep 1",
    ]);
    c.wait_state(c1, "COMPLETED", SECS(30));
    let t = c.wait_state(t1, "RUNNING", SECS(20));
    assert_eq!(t["restart_count"], 1);
    wait_output(&c, t1, "start restart=1");
    let out = c.run("ycancel", &[&t1.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(t1, "CANCELLED", SECS(20));

    // Friday: one that ignores SIGTERM is killed after its grace, with no checkpoint, and is
    // not requeued.
    let t2 = c.submit(&[
        "-A",
        "vision",
        "-p",
        "low",
        "-G",
        "4",
        "--grace",
        "1",
        "--no-requeue",
        stubborn,
    ]);
    c.wait_state(t2, "RUNNING", SECS(15));
    wait_output(&c, t2, "start");
    let c2 = c.submit(&[
        "-A", "nlp", "-p", "critical", "-G", "4", "--wrap", "sleep 1",
    ]);
    c.wait_state(t2, "PREEMPTED", SECS(30));
    c.wait_state(c2, "COMPLETED", SECS(30));

    // What the jobs' histories say.
    let vision_runs: Vec<Run> = [(j1, 2), (j2, 1), (t1, 4), (t2, 4)]
        .iter()
        .flat_map(|&(id, g)| runs_of(&c, id, g))
        .collect();
    let nlp_runs: Vec<Run> = [(j3, 1), (j4, 1), (c1, 4), (c2, 4)]
        .iter()
        .flat_map(|&(id, g)| runs_of(&c, id, g))
        .collect();
    assert_eq!(
        (vision_runs.len(), nlp_runs.len()),
        (5, 4),
        "runs per account"
    );
    // The history agrees with what `yq --json` shows of each job's last run (to the second).
    for (id, g) in [(j1, 2), (j3, 1), (c2, 4)] {
        let job = c.job(id);
        let run = *runs_of(&c, id, g).last().unwrap();
        let secs = |v: &Value| {
            let text = v.as_str().unwrap();
            humantime_secs(text)
        };
        assert!(
            (secs(&job["start_time"]) - run.start / 1000).abs() <= 1,
            "{job}"
        );
        assert!(
            (secs(&job["end_time"]) - run.end / 1000).abs() <= 1,
            "{job}"
        );
    }
    let t2_run = runs_of(&c, t2, 4)[0];
    let lost_t2 = 4 * (t2_run.end - t2_run.start) as u64 / 1000;

    let check = |r: &Value, running_vision: u64| {
        let v = group(r, "vision");
        let n = group(r, "nlp");
        assert_eq!(
            ms(&v["gpu_seconds"]),
            gpu_ms(&vision_runs),
            "vision GPU time: {v:#}"
        );
        assert_eq!(
            ms(&n["gpu_seconds"]),
            gpu_ms(&nlp_runs),
            "nlp GPU time: {n:#}"
        );
        assert_eq!(
            (
                v["jobs"].as_u64(),
                v["runs"].as_u64(),
                v["restarts"].as_u64()
            ),
            (Some(4), Some(5), Some(1)),
            "{v:#}"
        );
        assert_eq!(v["running"], running_vision);
        assert_eq!(
            (
                v["preemptions_suffered"].as_u64(),
                v["checkpoints_saved"].as_u64(),
                v["preemptions_caused"].as_u64()
            ),
            (Some(2), Some(1), Some(0)),
            "{v:#}"
        );
        assert_eq!(v["checkpoint_rate"], 0.5);
        assert_eq!(ms(&v["lost_gpu_seconds"]), lost_t2 * 1000, "{v:#}");
        let outcomes: BTreeMap<String, u64> =
            serde_json::from_value(v["outcomes"].clone()).unwrap();
        assert_eq!(
            outcomes,
            BTreeMap::from([
                ("CANCELLED".to_string(), 1),
                ("COMPLETED".to_string(), 2),
                ("PREEMPTED".to_string(), 1),
                ("REQUEUED".to_string(), 1),
            ])
        );
        assert_eq!(
            (
                n["jobs"].as_u64(),
                n["runs"].as_u64(),
                n["preemptions_caused"].as_u64()
            ),
            (Some(4), Some(4), Some(2)),
            "{n:#}"
        );
        assert_eq!(n["outcomes"]["FAILED"], 1);
        assert_eq!(n["preemptions_suffered"], 0);
        assert_eq!(n["checkpoint_rate"], Value::Null);
        let critical = n["waits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["tier"] == "critical")
            .expect("critical waits");
        assert_eq!(critical["starts"], 2);
        let cl = &r["cluster"];
        assert_eq!(cl["gpus"], 4);
        assert_eq!(
            (cl["preemptions"].as_u64(), cl["checkpoints_saved"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(cl["checkpoint_rate"], 0.5);
        assert!(cl["start_latency"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["tier"] == "critical" && w["starts"] == 2));
        assert!(!r["days"].as_array().unwrap().is_empty());
    };
    let before = report(&c, &["--since", "1d"]);
    check(&before, 0);
    assert_eq!(before["cluster"]["runs"], 9);
    assert_eq!(before["cluster"]["jobs"], 8);
    assert_eq!(
        ms(&before["cluster"]["used_gpu_seconds"]),
        gpu_ms(&vision_runs) + gpu_ms(&nlp_runs)
    );
    // By tier and by user too.
    let by_tier = report(&c, &["--since", "1d", "--by", "tier"]);
    assert_eq!(by_tier["by"], "tier");
    assert_eq!(group(&by_tier, "critical")["preemptions_caused"], 2);
    assert_eq!(group(&by_tier, "low")["preemptions_suffered"], 2);
    let by_user = report(&c, &["--since", "1d", "--by", "user"]);
    assert_eq!(
        ms(&group(&by_user, "root")["gpu_seconds"]),
        gpu_ms(&vision_runs) + gpu_ms(&nlp_runs)
    );

    // CSV and HTML.
    let out = c.run("yctl", &["report", "--since", "1d", "--csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = stdout(&out);
    assert!(csv.starts_with("by,name,gpu_hours,gpu_seconds,"), "{csv}");
    assert!(
        csv.lines().any(|l| l.starts_with("account,vision,")),
        "{csv}"
    );
    assert!(csv.lines().last().unwrap().starts_with("cluster,"), "{csv}");
    let html_path = c.work.join("report.html");
    let out = c.run(
        "yctl",
        &[
            "report",
            "--since",
            "1d",
            "--html",
            html_path.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert_eq!(html.matches("<svg").count(), 3, "three charts");
    assert!(html.contains("Daily GPU utilization") && html.contains("vision"));
    assert!(!html.contains("http") && !html.contains("<script"));
    let out = c.run("yctl", &["report", "--since", "1d"]);
    assert!(
        stdout(&out).contains("Preemptions: 2, checkpoint saved in 1 (50.0%)"),
        "{}",
        stdout(&out)
    );

    // Saturday: a job runs across a kill -9 of schedd; it is charged so far while it runs,
    // and once when it ends.
    let j5 = c.submit(&["-A", "vision", "-p", "low", "-G", "1", "--wrap", "sleep 4"]);
    c.wait_state(j5, "RUNNING", SECS(15));
    let during = report(&c, &["--since", "1d"]);
    assert_eq!(group(&during, "vision")["running"], 1);
    assert!(ms(&group(&during, "vision")["gpu_seconds"]) > gpu_ms(&vision_runs));
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    // Reports are private from now on: a user sees only the accounts they may charge.
    let conf = std::fs::read_to_string(&c.conf).unwrap();
    let conf = conf.replacen("[scheduler]\n", "[scheduler]\nreports_public = false\n", 1);
    std::fs::write(&c.conf, conf).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    c.start_schedd();
    c.wait_nodes_up(1);
    c.wait_state(j5, "COMPLETED", SECS(30));
    let j5_runs = runs_of(&c, j5, 1);
    assert_eq!(j5_runs.len(), 1);
    let all_vision: Vec<Run> = vision_runs.iter().chain(&j5_runs).copied().collect();
    // Nothing lost, nothing twice: again after another kill -9 and restart.
    for round in 0..2 {
        let after = report(&c, &["--since", "1d"]);
        let v = group(&after, "vision");
        assert_eq!(
            ms(&v["gpu_seconds"]),
            gpu_ms(&all_vision),
            "round {round}: {v:#}\nj5 {j5_runs:?}\n{}",
            c.logs()
        );
        assert_eq!((v["runs"].as_u64(), v["jobs"].as_u64()), (Some(6), Some(5)));
        assert_eq!(ms(&group(&after, "nlp")["gpu_seconds"]), gpu_ms(&nlp_runs));
        assert_eq!(after["cluster"]["runs"], 10);
        assert_eq!(after["all_accounts"], true, "root sees every account");
        c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
        c.start_schedd();
        c.wait_nodes_up(1);
    }
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "yctl",
        &["report", "--json", "--since", "1d"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let private: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(private["all_accounts"], false);
    assert_eq!(
        private["groups"],
        Value::Array(vec![]),
        "nobody charges no account"
    );
    assert_eq!(
        private["cluster"]["runs"], 10,
        "the cluster's lines are whole"
    );

    // Sunday: a migration imports runs from elsewhere; only root may, and twice is once.
    let now = ysched_common::time::now_ms();
    let file = c.work.join("old-runs.json");
    let hour = 3_600_000;
    std::fs::write(
        &file,
        serde_json::to_string(&serde_json::json!([
            {"job_id": 900001, "account": "legacy", "user": "carol", "tier": "high",
             "gpus": 2, "start": now - 3 * hour, "end": now - 2 * hour},
            {"job_id": 900002, "account": "legacy", "user": "carol", "tier": "low",
             "gpus": 1, "queued_at": now - 5 * hour, "start": now - 4 * hour,
             "end": now - 3 * hour, "outcome": "REQUEUED", "preempted_by": 900001,
             "preemptor_account": "legacy", "checkpoint_saved": false, "lost_gpu_secs": 60},
        ]))
        .unwrap(),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = c.run_as(NOBODY, NOBODY, "yctl", &["usage", "import", file]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("only administrators may import usage"),
        "{}",
        stderr(&out)
    );
    let out = c.run("yctl", &["usage", "import", file]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("imported 2 runs"), "{}", stdout(&out));
    let out = c.run("yctl", &["usage", "import", file]);
    assert!(stdout(&out).contains("imported 0 runs"), "{}", stdout(&out));
    let r = report(&c, &["--since", "1d"]);
    let legacy = group(&r, "legacy");
    assert_eq!(ms(&legacy["gpu_seconds"]), (2 * hour + hour) as u64);
    assert_eq!(
        (
            legacy["runs"].as_u64(),
            legacy["preemptions_suffered"].as_u64(),
            legacy["preemptions_caused"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(ms(&legacy["lost_gpu_seconds"]), 60_000);
    let out = c.run("yctl", &["audit", "--json"]);
    let audit: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        audit.iter().any(|a| a["action"] == "usage_import"),
        "{audit:#?}"
    );
}

/// Seconds since the epoch of an RFC 3339 time as `yq --json` prints it (`...Z`).
fn humantime_secs(text: &str) -> i64 {
    ysub::report::parse_date(text).unwrap() / 1000
}

/// Runs the trace export (`yctl report --since 1d --export-trace FILE`) and returns its rows
/// as ysim reads them, and the raw records (with the columns ysim ignores), by `job_id`.
fn export_trace(
    c: &TestCluster,
    file: &str,
) -> (
    ysim::Workload,
    BTreeMap<String, BTreeMap<String, String>>,
    String,
) {
    let out = c.run("yctl", &["report", "--since", "1d", "--export-trace", file]);
    assert!(
        out.status.success(),
        "yctl report --export-trace: {}",
        stderr(&out)
    );
    let path = c.work.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let nodes = ysim::workload::csv::uniform_cluster(1, 8, A100);
    let workload = ysim::workload::csv::read_jobs(&path, nodes)
        .unwrap_or_else(|e| panic!("ysim cannot read the trace: {e:#}\n{text}"));
    let records = ysim::workload::csv::records(&text)
        .unwrap()
        .into_iter()
        .map(|(_, r)| (r["job_id"].clone(), r))
        .collect();
    (workload, records, stdout(&out))
}

#[test]
fn an_exported_trace_is_read_and_replayed_by_ysim() {
    let c = TestCluster::start_with_config(vec![FakeNode::uniform("n1", 4, A100)], ACCOUNTS);
    // Two short jobs and a two-task array, side by side.
    let a = c.submit(&["-A", "vision", "-p", "low", "-G", "2", "--wrap", "sleep 2"]);
    let b = c.submit(&["-A", "nlp", "-p", "medium", "-G", "1", "--wrap", "sleep 1"]);
    let arr = c.submit(&[
        "-A", "nlp", "-p", "medium", "--array", "0-1", "--wrap", "sleep 1",
    ]);
    for id in [a, b] {
        c.wait_state(id, "COMPLETED", SECS(30));
    }
    wait_until(SECS(30), "the array's tasks to complete", || {
        let done = c
            .jobs()
            .into_iter()
            .filter(|j| j["array_job_id"] == arr && j["state"] == "COMPLETED")
            .count();
        done == 2
    });
    // One that ignores SIGTERM is preempted by a critical job: killed after its grace with
    // no checkpoint (its first run's work is lost), requeued, and runs its 4 s again.
    let v = c.submit(&[
        "-A",
        "vision",
        "-p",
        "low",
        "-G",
        "4",
        "--grace",
        "1",
        "--wrap",
        "trap '' TERM; sleep 4",
    ]);
    c.wait_state(v, "RUNNING", SECS(15));
    std::thread::sleep(Duration::from_millis(1500));
    let crit = c.submit(&[
        "-A", "nlp", "-p", "critical", "-G", "4", "--wrap", "sleep 1",
    ]);
    c.wait_state(crit, "COMPLETED", SECS(30));
    let again = c.wait_state(v, "RUNNING", SECS(20));
    assert_eq!(again["restart_count"], 1);

    // While it runs again, it is left out: it was not over at the window's end.
    let (during, records, said) = export_trace(&c, "during.csv");
    assert!(
        c.job(v)["state"] == "RUNNING",
        "the export must run while job {v} runs its second time; too slow a machine?"
    );
    assert!(!records.contains_key(&v.to_string()), "{records:#?}");
    assert_eq!(during.jobs.len(), 5, "{records:#?}");
    assert!(
        said.contains("1 job requeued and not over at the window's end left out"),
        "{said}"
    );

    c.wait_state(v, "COMPLETED", SECS(30));
    let (trace, records, said) = export_trace(&c, "out.csv");
    assert!(said.contains("exported 6 jobs"), "{said}");
    let text = std::fs::read_to_string(c.work.join("out.csv")).unwrap();
    println!("{text}");
    assert!(
        text.starts_with(
            "job_id,submit_time,tier,account,user,gpus,gpu_type,nodes,cpus,mem,duration,\
             time_limit,checkpoint_interval,checkpoint_write,grace,outcome,restarts\n"
        ),
        "{text}"
    );
    assert_eq!(trace.jobs.len(), 6, "{text}");
    let job = |id: &str| {
        trace
            .jobs
            .iter()
            .find(|j| j.name == id)
            .unwrap_or_else(|| panic!("no job {id} in\n{text}"))
    };
    // (id, tier, account, GPUs, seconds it slept)
    let expected = [
        (a.to_string(), "low", "vision", 2, 2),
        (b.to_string(), "medium", "nlp", 1, 1),
        (format!("{arr}_0"), "medium", "nlp", 0, 1),
        (format!("{arr}_1"), "medium", "nlp", 0, 1),
        (v.to_string(), "low", "vision", 4, 4),
        (crit.to_string(), "critical", "nlp", 4, 1),
    ];
    for (id, tier, account, gpus, secs) in &expected {
        let j = job(id);
        assert_eq!(
            (j.tier.as_str(), j.account.as_str(), j.user.as_str(), j.gpus),
            (*tier, *account, "root", *gpus),
            "{id}: {j:?}"
        );
        // Its sleep, and the little it takes to start and stop a process; for the preempted
        // one, its first run's work counts as lost (at most a quarter second is left of it:
        // the work lost is whole GPU-seconds).
        let secs_ms = *secs as i64 * 1000;
        assert!(
            j.duration_ms >= secs_ms && j.duration_ms < secs_ms + 1500,
            "{id}: duration {} ms for a sleep of {secs} s\n{text}",
            j.duration_ms
        );
        assert_eq!(j.nodes, 1);
        assert!(j.time_limit_secs.is_none() && j.gpu_types.is_empty());
    }
    assert_eq!(job(&v.to_string()).grace_secs, Some(1));
    assert_eq!(job(&a.to_string()).grace_secs, None, "the tier's default");
    let vr = &records[&v.to_string()];
    assert_eq!(
        (vr["outcome"].as_str(), vr["restarts"].as_str()),
        ("COMPLETED", "1")
    );
    // Submit times keep their order: the preemptor came last.
    assert_eq!(trace.jobs.last().unwrap().name, crit.to_string());

    // `-` writes it to stdout, the same.
    let out = c.run("yctl", &["report", "--since", "1d", "--export-trace", "-"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), text);
    assert!(stderr(&out).contains("exported 6 jobs"), "{}", stderr(&out));

    // ysim replays it, here under the cluster's own config, on one node of 8 GPUs: every job
    // completes, and the one that needed 4 GPUs for 4 s ran that long.
    let policy = ysim::policy::from_file(&c.conf, &BTreeMap::new()).unwrap();
    let (results, outcome) = ysim::run_simulation(&trace, &policy);
    assert_eq!(outcome.jobs.len(), 6);
    for (i, o) in outcome.jobs.iter().enumerate() {
        assert_eq!(
            o.final_state.as_deref(),
            Some("COMPLETED"),
            "{}: {o:?}",
            trace.jobs[i].name
        );
    }
    assert_eq!((results.jobs, results.completed), (6, 6));
    // And so does the binary, as the admin guide's pipeline runs it.
    let ysim_bin = bin_dir().join("ysim");
    if ysim_bin.exists() {
        let out = std::process::Command::new(&ysim_bin)
            .args([
                "--trace",
                "out.csv",
                "--nodes",
                "1",
                "--gpus-per-node",
                "8",
                "-q",
            ])
            .current_dir(&c.work)
            .output()
            .unwrap();
        assert!(out.status.success(), "ysim: {}", stderr(&out));
        assert!(
            stdout(&out).contains("out.csv: 1 nodes, 8 GPUs, 6 jobs"),
            "{}",
            stdout(&out)
        );
    }
}

/// The weekly report of a cluster that is minutes old, from runs a migration brought: its
/// capacity counts from when its node registered (not seven days of it), SHARE is each
/// team's part of the GPU-hours used (not 0.0% of a capacity it never had), a 1.03 s wait
/// reads 1.03 s everywhere, and the HTML draws the waits on a log scale with a legend.
#[test]
fn a_young_cluster_s_weekly_report_counts_from_its_nodes_and_shares_what_was_used() {
    let began = ysched_common::time::now_ms();
    let c = TestCluster::start_with_config(vec![FakeNode::uniform("n1", 4, A100)], ACCOUNTS);
    let now = ysched_common::time::now_ms();
    let hour = 3_600_000;
    let file = c.work.join("migrated.json");
    std::fs::write(
        &file,
        serde_json::to_string(&serde_json::json!([
            {"job_id": 910001, "account": "vision", "user": "ana", "tier": "low",
             "gpus": 3, "start": now - 3 * hour, "end": now - 2 * hour},
            {"job_id": 910002, "account": "nlp", "user": "bo", "tier": "critical",
             "gpus": 1, "queued_at": now - 2 * hour - 1_030, "start": now - 2 * hour,
             "end": now - hour},
        ]))
        .unwrap(),
    )
    .unwrap();
    let out = c.run("yctl", &["usage", "import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));

    let r = report(&c, &["--since", "7d"]);
    let cl = &r["cluster"];
    // 4 GPUs since the node registered (after `began`), not 4 x 168 GPU-hours.
    let lived_hours = (ysched_common::time::now_ms() - began) as f64 / hour as f64;
    let capacity = cl["capacity_gpu_hours"].as_f64().unwrap();
    assert!(
        capacity > 0.0 && capacity <= 4.0 * lived_hours,
        "capacity {capacity} GPU-hours after {lived_hours} h: {cl:#}"
    );
    let days = r["days"].as_array().unwrap();
    assert_eq!(
        days.iter()
            .filter(|d| d["capacity_gpu_hours"].as_f64().unwrap() > 0.0)
            .count(),
        if began / ysched_common::time::DAY_MS == now / ysched_common::time::DAY_MS {
            1
        } else {
            2
        },
        "only the days the node was there: {days:#?}"
    );
    // Shares of the 4 GPU-hours used: 3 and 1.
    assert_eq!(group(&r, "vision")["share_of_used"], 0.75);
    assert_eq!(group(&r, "nlp")["share_of_used"], 0.25);
    let critical = &group(&r, "nlp")["waits"][0];
    assert_eq!(
        (
            critical["tier"].as_str(),
            critical["wait_p50_secs"].as_f64()
        ),
        (Some("critical"), Some(1.03))
    );

    let out = c.run("yctl", &["report", "--since", "7d"]);
    let text = stdout(&out);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row: {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("vision")[2], "75.0%", "{text}");
    assert_eq!(row("nlp")[2], "25.0%", "{text}");
    assert!(text.contains("critical 1.03s/1.03s (1)"), "{text}");
    let out = c.run("yctl", &["report", "--since", "7d", "--csv"]);
    let csv = stdout(&out);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let nlp: Vec<&str> = csv
        .lines()
        .find(|l| l.starts_with("account,nlp,"))
        .unwrap()
        .split(',')
        .collect();
    let field = |name: &str| nlp[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(field("wait_p50_secs_critical"), "1.03", "{csv}");
    assert_eq!(field("share_of_used"), "0.250000", "{csv}");
    let html_path = c.work.join("young.html");
    let out = c.run(
        "yctl",
        &[
            "report",
            "--since",
            "7d",
            "--html",
            html_path.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.contains("log scale"), "the wait chart's axis");
    let lines: Vec<&str> = html.lines().map(str::trim).collect();
    assert!(lines.contains(&"p50") && lines.contains(&"p95"), "legend");
    assert!(html.contains("critical 1.03s/1.03s (1)"));
}
