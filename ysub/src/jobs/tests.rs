//! The job views on hand-made jobs: the ids users type, the `yq` tables and their folding of
//! array tasks, the JSON objects and the `yctl show job` text.

use super::*;
use ysched_proto::{JobDetail, JobEvent, JobSpec, NodeAlloc};

/// 2026-01-01T00:00:00Z
pub const T0: Millis = 1_767_225_600_000;

pub fn running_job() -> JobInfo {
    JobInfo {
        id: 17,
        name: "train".into(),
        user: "alice".into(),
        uid: 1000,
        gid: 1000,
        account: "ml".into(),
        tier: "high".into(),
        tier_value: 10_000,
        state: "RUNNING".into(),
        reason: String::new(),
        alloc: vec![
            NodeAlloc {
                node: "gpu01".into(),
                gpus: vec![0, 1],
                cpus: 8,
                mem_mib: 16384,
            },
            NodeAlloc {
                node: "gpu02".into(),
                gpus: vec![4, 5],
                cpus: 8,
                mem_mib: 16384,
            },
        ],
        restart_count: 1,
        exit_code: None,
        signal: None,
        submit_time_ms: T0,
        start_time_ms: T0 + 10_000,
        end_time_ms: 0,
        spec: Some(Box::new(JobSpec {
            name: "train".into(),
            gpus: 4,
            gpu_type: "A100".into(),
            cpus: 8,
            mem_mib: 16384,
            time_limit_secs: 3600,
            workdir: "/home/alice".into(),
            args: vec!["--lr".into(), "a b".into()],
            nodes: 2,
            constraints: vec!["ib".into()],
            ..Default::default()
        })),
        checkpoint_dir: "/ckpt/17".into(),
        grace_secs: 30,
        gpus_requested: 4,
        time_limit_secs: 3600,
        last_checkpoint_ms: T0 + 15_000,
        fair_share: None,
        queue_position: None,
        ..Default::default()
    }
}

pub fn pending_job() -> JobInfo {
    JobInfo {
        id: 18,
        name: "eval".into(),
        user: "bob".into(),
        tier: "low".into(),
        state: "PENDING".into(),
        reason: "Resources".into(),
        submit_time_ms: T0,
        spec: Some(Box::new(JobSpec {
            gpus: 1,
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[test]
fn elapsed_time_by_state() {
    let now = T0 + 10_000 + 65_000;
    assert_eq!(elapsed_secs(&running_job(), now), 65);
    assert_eq!(elapsed_secs(&pending_job(), now), 0);
    let mut done = running_job();
    done.state = "COMPLETED".into();
    done.end_time_ms = T0 + 10_000 + 3_000;
    assert_eq!(elapsed_secs(&done, now), 3);
    // A requeued job keeps its old start time but is waiting again.
    let mut requeued = running_job();
    requeued.state = "PENDING".into();
    assert_eq!(elapsed_secs(&requeued, now), 0);
}

#[test]
fn table_rows() {
    let now = T0 + 10_000 + 3_725_000;
    let out = format_job_table(&[running_job(), pending_job()], now, true);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "JOBID",
            "NAME",
            "USER",
            "TIER",
            "STATE",
            "TIME",
            "GPUS",
            "NODELIST(REASON)"
        ]
    );
    assert_eq!(
        lines[1],
        [
            "17",
            "train",
            "alice",
            "high",
            "RUNNING",
            "1:02:05",
            "4",
            "gpu01,gpu02"
        ]
    );
    assert_eq!(
        lines[2],
        [
            "18",
            "eval",
            "bob",
            "low",
            "PENDING",
            "0:00",
            "1",
            "(Resources)"
        ]
    );
    assert_eq!(lines.len(), 3);
    // Columns line up: every row has its STATE at the header's offset.
    let state_at = out.lines().next().unwrap().find("STATE").unwrap();
    for line in out.lines().skip(1) {
        assert!(line[state_at..].starts_with(['R', 'P']), "{line}");
    }
    assert_eq!(format_job_table(&[], now, false), "");
    assert_eq!(format_job_table(&[], now, true).lines().count(), 1);
}

#[test]
fn table_escapes_control_characters_and_keeps_unicode() {
    let mut evil = running_job();
    evil.name = "x\x1b[2J\nforged".into();
    evil.alloc[1].node = "gpu\u{202e}20".into();
    let mut wide = pending_job();
    wide.name = "训练-é".into();
    wide.reason = "Held\r".into();
    let out = format_job_table(&[evil, wide], T0, true);
    assert!(
        !out.contains(|c: char| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{out:?}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[1].contains(" x\\x1b[2J\\nforged "), "{out}");
    assert!(lines[1].ends_with("gpu01,gpu\\u{202e}20"), "{out}");
    assert!(lines[2].contains(" 训练-é "), "{out}");
    assert!(lines[2].ends_with("(Held\\r)"), "{out}");
    // Widths count the escapes, so the columns still line up.
    let column = |line: &str, word: &str| line[..line.find(word).unwrap()].chars().count();
    let state = column(lines[0], "STATE");
    assert_eq!(column(lines[1], "RUNNING"), state, "{out}");
    assert_eq!(column(lines[2], "PENDING"), state, "{out}");
}

#[test]
fn detail_text_escapes_every_value() {
    let mut detail = detail();
    let job = detail.job.as_mut().unwrap();
    job.name = "n\x1b]0;t\x07".into();
    job.account = "acct\n".into();
    job.checkpoint_dir = "/ckpt/\u{2066}x".into();
    let spec = job.spec.as_mut().unwrap();
    spec.workdir = "/w\r".into();
    spec.stdout_path = "%x.out".into();
    spec.args = vec!["a\tb".into()];
    detail.events[0].detail = "tier\nhigh".into();
    let out = format_job_detail(&detail, T0 + 20_000);
    assert!(
        !out.contains(|c: char| (c.is_control() && c != '\n') || c == '\u{2066}'),
        "{out:?}"
    );
    for expected in [
        "JobName=n\\x1b]0;t\\x07",
        "Account=acct\\n",
        "CheckpointDir=/ckpt/\\u{2066}x",
        "WorkDir=/w\\r",
        "StdOut=n\\x1b]0;t\\x07.out",
        "Args='a\\tb'",
        "tier\\nhigh",
    ] {
        assert!(out.contains(expected), "missing {expected} in\n{out}");
    }
    assert_eq!(out.split_once("Events:\n").unwrap().1.lines().count(), 2);
}

#[test]
fn json_object() {
    let value = serde_json::to_value(job_to_json(&running_job())).unwrap();
    assert_eq!(value["id"], 17);
    assert_eq!(value["name"], "train");
    assert_eq!(value["user"], "alice");
    assert_eq!(value["account"], "ml");
    assert_eq!(value["tier"], "high");
    assert_eq!(value["tier_value"], 10_000);
    assert_eq!(value["state"], "RUNNING");
    assert_eq!(value["node"], "gpu01,gpu02");
    assert_eq!(value["gpus"], serde_json::json!([0, 1, 4, 5]));
    assert_eq!(value["nodes"][1]["node"], "gpu02");
    assert_eq!(value["nodes"][1]["gpus"], serde_json::json!([4, 5]));
    assert_eq!(value["restart_count"], 1);
    assert_eq!(value["exit_code"], serde_json::Value::Null);
    assert_eq!(value["submit_time"], "2026-01-01T00:00:00Z");
    assert_eq!(value["start_time"], "2026-01-01T00:00:10Z");
    assert_eq!(value["end_time"], serde_json::Value::Null);
    assert_eq!(value["reason"], "");
    assert_eq!(value["uid"], 1000);
    assert_eq!(value["time_limit"], 3600);
    assert_eq!(value["gpus_requested"], 4);
    assert_eq!(value["checkpoint_dir"], "/ckpt/17");
    assert_eq!(value["last_checkpoint"], "2026-01-01T00:00:15Z");
    assert_eq!(value["signal"], serde_json::Value::Null);

    let value = serde_json::to_value(job_to_json(&pending_job())).unwrap();
    assert_eq!(value["node"], serde_json::Value::Null);
    assert_eq!(value["gpus"], serde_json::json!([]));
    assert_eq!(value["start_time"], serde_json::Value::Null);
    assert_eq!(value["time_limit"], serde_json::Value::Null);
    assert_eq!(value["last_checkpoint"], serde_json::Value::Null);
    assert_eq!(value["reason"], "Resources");
    assert_eq!(value["queue_position"], serde_json::Value::Null);
    assert_eq!(value["fair_share"], serde_json::Value::Null);
    let value = serde_json::to_value(job_to_json(&placed_pending_job())).unwrap();
    assert_eq!(value["queue_position"], 3);
    assert_eq!(value["fair_share"], 0.25);
}

/// A pending job whose place the last pass gave.
fn placed_pending_job() -> JobInfo {
    JobInfo {
        account: "vision".into(),
        reason: "AccountLimit".into(),
        queue_position: Some(3),
        fair_share: Some(0.25),
        ..pending_job()
    }
}

#[test]
fn long_table_shows_account_place_and_fair_share() {
    let now = T0 + 10_000 + 3_725_000;
    let jobs = [running_job(), placed_pending_job(), pending_job()];
    let out = format_job_table_long(&jobs, now, true);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "JOBID",
            "NAME",
            "USER",
            "ACCOUNT",
            "TIER",
            "STATE",
            "TIME",
            "GPUS",
            "PLACE",
            "FAIRSHARE",
            "NODELIST(REASON)"
        ]
    );
    assert_eq!(
        lines[1],
        [
            "17",
            "train",
            "alice",
            "ml",
            "high",
            "RUNNING",
            "1:02:05",
            "4",
            "-",
            "-",
            "gpu01,gpu02"
        ]
    );
    assert_eq!(
        lines[2],
        [
            "18",
            "eval",
            "bob",
            "vision",
            "low",
            "PENDING",
            "0:00",
            "1",
            "3",
            "0.250",
            "(AccountLimit)"
        ]
    );
    // A job the last pass has not seen, with no account: the cells still line up.
    assert_eq!(lines[3].len(), 10, "{out}");
    let place_at = out.lines().next().unwrap().find("PLACE").unwrap() + "PLACE".len();
    for line in out.lines().skip(1) {
        assert!(
            line[..place_at].ends_with(['-', '3']),
            "PLACE is right-aligned: {line}"
        );
    }
}

/// Task `task` of array 12 (`12_[0-199%16]`, job ids 12 to 211) in `state`.
fn task(task: u32, state: &str, reason: &str) -> JobInfo {
    let mut job = if state == "RUNNING" {
        running_job()
    } else {
        pending_job()
    };
    job.id = 12 + u64::from(task);
    job.name = "sweep".into();
    job.state = state.into();
    job.reason = reason.into();
    job.display_id = format!("12_{task}");
    job.array_job_id = Some(12);
    job.array_task_id = Some(task);
    job.array_max_running = 16;
    job
}

fn first_cells(out: &str) -> Vec<&str> {
    out.lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect()
}

#[test]
fn pending_tasks_fold_into_one_line_running_ones_do_not() {
    let mut jobs: Vec<JobInfo> = (0..16).map(|t| task(t, "RUNNING", "")).collect();
    jobs.push(pending_job());
    jobs.extend((16..200).map(|t| task(t, "PENDING", "JobArrayTaskLimit")));
    let now = T0 + 20_000;
    let out = format_queue(&job_lines(&jobs, Fold::Waiting), now, true, false);
    let ids = first_cells(&out);
    assert_eq!(ids.len(), 1 + 16 + 1 + 1, "{out}");
    assert_eq!(ids[0], "JOBID");
    assert_eq!(ids[1], "12_0");
    assert_eq!(ids[16], "12_15");
    assert_eq!(ids[17], "18", "a plain job keeps its place");
    assert_eq!(ids[18], "12_[16-199%16]");
    let folded: Vec<&str> = out.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(
        folded,
        [
            "12_[16-199%16]",
            "sweep",
            "bob",
            "low",
            "PENDING",
            "0:00",
            "1",
            "(JobArrayTaskLimit)"
        ]
    );
    // Right-aligned JOBID column: every line as wide up to the NAME column.
    let name_at = out.lines().next().unwrap().find("NAME").unwrap();
    for line in out.lines().skip(1) {
        assert_eq!(&line[name_at - 2..name_at], "  ", "{line}");
    }

    // --array: one line per task, as the JSON has them.
    let out = format_queue(&job_lines(&jobs, Fold::Never), now, false, false);
    let ids = first_cells(&out);
    assert_eq!(ids.len(), 201);
    assert_eq!(ids[200], "12_199");
    assert!(!out.contains("12_["), "{out}");
    assert_eq!(
        format_job_table(&jobs, now, false),
        out,
        "the plain table never folds"
    );
}

#[test]
fn tasks_fold_by_state_and_reason() {
    let mut jobs = vec![
        task(40, "PENDING", "Priority"),
        task(41, "PENDING", "Dependency"),
        task(42, "PENDING", "Priority"),
        task(43, "HELD", "JobHeldUser"),
        task(45, "PENDING", "Priority"),
        task(44, "HELD", "JobHeldUser"),
        task(46, "COMPLETED", ""),
        task(47, "COMPLETED", ""),
        task(3, "RUNNING", ""),
    ];
    // An array without %N, and another array.
    let mut other = task(1, "PENDING", "Priority");
    other.id = 300;
    other.array_job_id = Some(299);
    other.display_id = "299_1".into();
    let mut other2 = other.clone();
    other2.id = 301;
    other2.array_task_id = Some(2);
    other2.display_id = "299_2".into();
    other.array_max_running = 0;
    other2.array_max_running = 0;
    jobs.extend([other, other2]);
    let lines = job_lines(&jobs, Fold::Waiting);
    let labels: Vec<String> = lines
        .iter()
        .map(|l| {
            l.label
                .clone()
                .unwrap_or_else(|| display_id(l.job).into_owned())
        })
        .collect();
    assert_eq!(
        labels,
        [
            "12_[40,42,45%16]",
            "12_41",
            "12_[43-44%16]",
            "12_46",
            "12_47",
            "12_3",
            "299_[1-2]"
        ]
    );
    // Finished and running tasks are never folded, and a folded line shows its state.
    assert_eq!(lines[2].job.state, "HELD");
}

#[test]
fn jobs_from_servers_without_display_ids_show_their_ids() {
    let mut job = task(7, "PENDING", "Priority");
    job.display_id.clear();
    let out = format_job_table(&[job.clone()], T0, false);
    assert!(out.starts_with("19  sweep"), "{out}");
    assert_eq!(display_id(&job), "19");
    let value = serde_json::to_value(job_to_json(&job)).unwrap();
    assert_eq!(value["display_id"], "19");
    // Long form too.
    let out = format_job_table_long(&[task(7, "RUNNING", "")], T0, true);
    assert_eq!(first_cells(&out), ["JOBID", "12_7"]);
    let pair = [
        task(1, "PENDING", "Priority"),
        task(2, "PENDING", "Priority"),
    ];
    let lines = job_lines(&pair, Fold::Waiting);
    let out = format_queue(&lines, T0, false, true);
    assert!(out.starts_with("12_[1-2%16]  sweep  bob"), "{out}");
}

#[test]
fn start_lists_pending_jobs_with_expected_times_and_nodes() {
    let mut reserved = pending_job();
    reserved.id = 30;
    reserved.display_id = "30".into();
    reserved.expected_start_ms = T0 + 1_800_000;
    reserved.expected_nodes = vec!["n1".into(), "n2".into()];
    let mut sooner = pending_job();
    sooner.id = 31;
    sooner.expected_start_ms = T0 + 600_000;
    sooner.expected_nodes = vec!["n3".into()];
    let unknown = pending_job();
    let mut tasks: Vec<JobInfo> = (0..4).map(|t| task(t, "PENDING", "Priority")).collect();
    tasks[0].expected_start_ms = T0 + 900_000;
    tasks[0].expected_nodes = vec!["n1".into()];
    let jobs: Vec<JobInfo> = [running_job(), unknown, reserved, sooner]
        .into_iter()
        .chain(tasks)
        .collect();
    let out = format_start_table(&jobs, true, Fold::Waiting);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "JOBID",
            "TIER",
            "NAME",
            "USER",
            "ST",
            "START_TIME",
            "SCHEDNODES",
            "REASON"
        ]
    );
    assert_eq!(
        rows[1],
        [
            "31",
            "low",
            "eval",
            "bob",
            "PD",
            "2026-01-01T00:10:00Z",
            "n3",
            "Resources"
        ]
    );
    assert_eq!(rows[2][0], "12_0");
    assert_eq!(rows[2][5..7], ["2026-01-01T00:15:00Z", "n1"]);
    assert_eq!(rows[3][0], "30");
    assert_eq!(rows[3][6], "n1,n2");
    // Unknown: N/A, last, in the order given; the running job is not listed.
    assert_eq!(
        rows[4],
        ["18", "low", "eval", "bob", "PD", "N/A", "N/A", "Resources"]
    );
    assert_eq!(rows[5][0], "12_[1-3%16]");
    assert_eq!(rows[5][5..], ["N/A", "N/A", "Priority"]);
    assert_eq!(rows.len(), 6, "{out}");
    // --array: every task on its own line.
    let out = format_start_table(&jobs, false, Fold::Never);
    assert_eq!(out.lines().count(), 7, "{out}");
    assert!(!out.contains("12_["), "{out}");
}

#[test]
fn json_has_array_and_expected_start_fields() {
    let mut job = task(7, "PENDING", "JobArrayTaskLimit");
    job.expected_start_ms = T0 + 60_000;
    job.expected_nodes = vec!["n1".into()];
    let value = serde_json::to_value(job_to_json(&job)).unwrap();
    assert_eq!(value["id"], 19);
    assert_eq!(value["display_id"], "12_7");
    assert_eq!(value["array_job_id"], 12);
    assert_eq!(value["array_task_id"], 7);
    assert_eq!(value["expected_start"], "2026-01-01T00:01:00Z");
    assert_eq!(value["expected_nodes"], serde_json::json!(["n1"]));
    assert_eq!(value["reason"], "JobArrayTaskLimit");
    let value = serde_json::to_value(job_to_json(&running_job())).unwrap();
    assert_eq!(value["array_job_id"], serde_json::Value::Null);
    assert_eq!(value["array_task_id"], serde_json::Value::Null);
    assert_eq!(value["expected_start"], serde_json::Value::Null);
    assert_eq!(value["expected_nodes"], serde_json::json!([]));
}

#[test]
fn detail_of_an_array_task_with_a_dependency_and_an_expected_start() {
    let mut job = task(7, "PENDING", "Dependency");
    job.expected_start_ms = T0 + 3_600_000;
    job.expected_nodes = vec!["n1".into()];
    let spec = job.spec.as_mut().unwrap();
    spec.array = "0-199%16".into();
    spec.dependency = "afterok:5".into();
    spec.stderr_path = "logs/%x-%A_%a.err".into();
    let detail = JobDetail {
        job: Some(job),
        events: vec![],
    };
    let out = format_job_detail(&detail, T0);
    assert!(
        out.starts_with(
            "JobId=19 ArrayJobId=12 ArrayTaskId=7 ArrayTaskThrottle=16 JobName=sweep\n"
        ),
        "{out}"
    );
    for expected in [
        "   Dependency=afterok:5\n",
        "   ExpectedStart=2026-01-01T01:00:00Z on n1\n",
        "StdOut=ysched-12_7.out",
        "StdErr=logs/sweep-12_7.err",
    ] {
        assert!(out.contains(expected), "missing {expected} in\n{out}");
    }
    let value =
        serde_json::to_value(job_detail_to_json(detail.job.as_ref().unwrap(), &[], T0)).unwrap();
    assert_eq!(value["array"], "0-199%16");
    assert_eq!(value["array_max_running"], 16);
    assert_eq!(value["dependency"], "afterok:5");
    assert_eq!(value["display_id"], "12_7");
    assert_eq!(value["expected_start"], "2026-01-01T01:00:00Z");

    // A plain job: no array keys, Dependency=None, no ExpectedStart line.
    let out = format_job_detail(&super::tests::detail(), T0 + 20_000);
    assert!(out.contains("   Dependency=None\n"), "{out}");
    assert!(
        !out.contains("ExpectedStart") && !out.contains("Array"),
        "{out}"
    );
}

#[test]
fn output_paths_expand_like_noded_does() {
    let mut job = task(7, "RUNNING", "");
    job.user = "alice".into();
    assert_eq!(expand_output_path(&job, ""), "ysched-12_7.out");
    assert_eq!(
        expand_output_path(&job, "%x/%A_%a-%j-%u-%N-%%a-%"),
        "sweep/12_7-19-alice-%N-%a-%"
    );
    let plain = running_job();
    assert_eq!(expand_output_path(&plain, ""), "ysched-17.out");
    assert_eq!(expand_output_path(&plain, "o-%A_%a"), "o-17_0");
}

#[test]
fn job_lists_split_outside_brackets() {
    let names = |text: &str| -> Vec<String> {
        parse_target_list(text)
            .unwrap()
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(names("12"), ["12"]);
    assert_eq!(names("12,13_7"), ["12", "13_7"]);
    assert_eq!(names("12_[1-5,9],14"), ["12_[1-5,9]", "14"]);
    assert_eq!(names("12_[3]"), ["12_3"]);
    for bad in ["", "12,", ",12", "12_[1-5", "12_1-5]", "x", "12_[1-5],y"] {
        assert!(parse_target_list(bad).is_err(), "{bad:?} accepted");
    }
    assert!(parse_single_target("12_[1,2]").is_err());
    assert_eq!(parse_single_target("12_[2]").unwrap().to_string(), "12_2");
    let r = job_ref(&parse_single_target("12").unwrap());
    assert_eq!((r.job_id, r.target.as_str()), (12, "12"));
    let r = job_ref(&parse_single_target("12_2").unwrap());
    assert_eq!((r.job_id, r.target.as_str()), (0, "12_2"));
}

fn detail() -> JobDetail {
    JobDetail {
        job: Some(running_job()),
        events: vec![
            JobEvent {
                time_ms: T0,
                kind: "SUBMITTED".into(),
                detail: "tier high".into(),
            },
            JobEvent {
                time_ms: T0 + 10_000,
                kind: "STARTED".into(),
                detail: "gpu01,gpu02".into(),
            },
        ],
    }
}

#[test]
fn detail_json_extends_the_job_object() {
    let detail = detail();
    let value = serde_json::to_value(job_detail_to_json(
        detail.job.as_ref().unwrap(),
        &detail.events,
        T0 + 20_000,
    ))
    .unwrap();
    assert_eq!(value["id"], 17);
    assert_eq!(value["node"], "gpu01,gpu02");
    assert_eq!(value["grace"], 30);
    assert_eq!(value["gpu_type"], "A100");
    assert_eq!(value["nodes_requested"], 2);
    assert_eq!(value["elapsed"], 10);
    assert_eq!(value["args"], serde_json::json!(["--lr", "a b"]));
    assert_eq!(value["events"][1]["kind"], "STARTED");
    assert_eq!(value["events"][0]["time"], "2026-01-01T00:00:00Z");
}

#[test]
fn detail_text() {
    let out = format_job_detail(&detail(), T0 + 20_000);
    assert!(out.starts_with("JobId=17 JobName=train\n"), "{out}");
    for expected in [
        "UserId=alice(1000)",
        "JobState=RUNNING",
        "Reason=None",
        "ExitCode=-:0",
        "RunTime=0:10",
        "TimeLimit=1:00:00",
        "Grace=30",
        "NodeList=gpu01,gpu02",
        "GpuIndices=gpu01:0,1 gpu02:4,5",
        "CheckpointDir=/ckpt/17 LastCheckpoint=2026-01-01T00:00:15Z",
        "StdOut=ysched-17.out",
        "Args=--lr 'a b'",
        "Constraints=ib",
        "Mem=16G",
    ] {
        assert!(out.contains(expected), "missing {expected} in\n{out}");
    }
    let events = out.split_once("Events:\n").unwrap().1;
    assert_eq!(events.lines().count(), 2);
    assert!(events.lines().nth(1).unwrap().contains("STARTED"));
    assert!(out.contains("Grace=30 Signal=None\n"), "{out}");
}

#[test]
fn a_held_job_says_who_holds_it() {
    let mut detail = detail();
    let job = detail.job.as_mut().unwrap();
    job.state = "HELD".into();
    job.reason = "JobHeldAdmin".into();
    job.hold = "admin".into();
    job.alloc.clear();
    let out = format_job_detail(&detail, T0 + 20_000);
    assert!(
        out.contains("JobState=HELD Reason=JobHeldAdmin\n   HeldBy=admin\n"),
        "{out}"
    );
    let value = serde_json::to_value(job_to_json(detail.job.as_ref().unwrap())).unwrap();
    assert_eq!(value["reason"], "JobHeldAdmin");
    assert_eq!(value["hold"], "admin");
    // A job not held has no hold, and no line for it.
    let out = format_job_detail(&super::tests::detail(), T0 + 20_000);
    assert!(!out.contains("HeldBy"), "{out}");
    let value = serde_json::to_value(job_to_json(&pending_job())).unwrap();
    assert_eq!(value["hold"], serde_json::Value::Null);
}

/// `running_job` as schedd sends it to a user who may not see its usage.
fn private_running_job() -> JobInfo {
    JobInfo {
        alloc: Vec::new(),
        start_time_ms: 0,
        restart_count: 0,
        last_checkpoint_ms: 0,
        usage_private: true,
        ..running_job()
    }
}

#[test]
fn a_job_whose_usage_is_private_says_so_instead_of_showing_zeros() {
    let now = T0 + 20_000;
    let out = format_job_table_long(&[private_running_job()], now, false);
    let cells: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "17",
            "train",
            "alice",
            "ml",
            "high",
            "RUNNING",
            "-",
            "4",
            "-",
            "-",
            "(private)"
        ]
    );
    let value = serde_json::to_value(job_to_json(&private_running_job())).unwrap();
    assert_eq!(value["usage_private"], true);
    assert_eq!(value["node"], serde_json::Value::Null);
    assert_eq!(value["start_time"], serde_json::Value::Null);
    let plain = serde_json::to_value(job_to_json(&running_job())).unwrap();
    assert_eq!(plain["usage_private"], false);

    let detail = JobDetail {
        job: Some(private_running_job()),
        events: Vec::new(),
    };
    let out = format_job_detail(&detail, now);
    for expected in [
        "Restarts=private",
        "RunTime=private",
        "StartTime=private EndTime=private",
        "NodeList=private GpuIndices=private",
        "LastCheckpoint=private",
        "JobState=RUNNING",
        "GPUs=4",
    ] {
        assert!(out.contains(expected), "missing {expected} in\n{out}");
    }
    assert!(
        out.ends_with("Events:\n   (private: reports are not public here)\n"),
        "{out}"
    );
}

#[test]
fn a_warning_signal_and_out_of_memory_are_shown() {
    let mut detail = detail();
    let job = detail.job.as_mut().unwrap();
    job.state = "OUT_OF_MEMORY".into();
    job.reason = "out of memory: the job exceeded its memory limit (--mem 16G) on gpu01".into();
    job.spec.as_mut().unwrap().warn_signal = Some(ysched_proto::WarnSignal {
        signal: 10,
        secs: 60,
        batch_only: false,
    });
    let out = format_job_detail(&detail, T0 + 20_000);
    assert!(out.contains("Signal=USR1@60"), "{out}");
    assert!(out.contains("JobState=OUT_OF_MEMORY"), "{out}");
    assert!(out.contains("(--mem 16G) on gpu01"), "{out}");
    let job = detail.job.as_mut().unwrap();
    job.spec
        .as_mut()
        .unwrap()
        .warn_signal
        .as_mut()
        .unwrap()
        .batch_only = true;
    let value = serde_json::to_value(job_detail_to_json(job, &[], T0)).unwrap();
    assert_eq!(value["warn_signal"], "B:USR1@60");
    assert_eq!(value["state"], "OUT_OF_MEMORY");
    let value = serde_json::to_value(job_detail_to_json(&pending_job(), &[], T0)).unwrap();
    assert_eq!(value["warn_signal"], serde_json::Value::Null);
}

#[test]
fn time_counts_every_run_and_a_cancelling_job_is_completing() {
    let mut job = running_job();
    job.run_ms_before = 95_000;
    let now = T0 + 20_000;
    // 95 s of earlier runs and 10 s of this one.
    assert_eq!(total_run_secs(&job, now), 105);
    assert_eq!(elapsed_secs(&job, now), 10);
    let table = format_job_table(std::slice::from_ref(&job), now, false);
    assert!(table.contains(" 1:45 "), "{table}");
    assert!(table.contains("RUNNING"), "{table}");
    let value = serde_json::to_value(job_to_json_at(&job, now)).unwrap();
    assert_eq!(value["run_secs_total"], 105);
    assert_eq!(value["run_secs_last"], 10);
    assert_eq!(value["cancelling"], false);
    job.cancelling = true;
    assert_eq!(
        (shown_state(&job), compact_state(&job)),
        ("COMPLETING", "CG")
    );
    let table = format_job_table(std::slice::from_ref(&job), now, false);
    assert!(table.contains("COMPLETING"), "{table}");
    let value = serde_json::to_value(job_to_json_at(&job, now)).unwrap();
    assert_eq!(value["state"], "RUNNING", "the wire's state is kept");
    assert_eq!(value["cancelling"], true);
}

#[test]
fn detail_json_expands_output_paths_and_keeps_the_patterns() {
    let mut job = running_job();
    if let Some(spec) = job.spec.as_mut() {
        spec.stdout_path = "logs/%x-%j.out".into();
    }
    let value = serde_json::to_value(job_detail_to_json(&job, &[], T0)).unwrap();
    assert_eq!(value["stdout_path"], "logs/train-17.out");
    assert_eq!(value["stderr_path"], "logs/train-17.out", "the output file");
    assert_eq!(value["stdout_pattern"], "logs/%x-%j.out");
    assert_eq!(value["stderr_pattern"], "");
}
