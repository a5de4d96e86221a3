//! `yctl report` on a hand-made reply: dates, spans and windows, each rendering, the trace
//! export, the usage file, and writing a report file whole.

use super::trace::trace_secs;
use super::*;
use crate::admin::{Command, YctlCli};
use clap::Parser;
use std::path::Path;
use ysched_common::time::{Millis, DAY_MS};
use ysched_proto::{GroupUsage, OutcomeCount, ReportCluster, ReportDay, ReportGroup};
use ysched_proto::{ReportReply, TierWait, TraceReply};

const H: u64 = 3_600_000;
/// 2026-01-05T00:00:00Z.
const MON: Millis = 1_767_571_200_000;

fn reply() -> ReportReply {
    let wait = |tier: &str, p50, p95| TierWait {
        tier: tier.into(),
        starts: 4,
        wait_p50_ms: p50,
        wait_p95_ms: p95,
        wait_max_ms: p95,
    };
    ReportReply {
        from_ms: MON,
        to_ms: MON + 2 * DAY_MS,
        by: "account".into(),
        generated_ms: MON + 2 * DAY_MS,
        all_accounts: true,
        cluster: Some(ReportCluster {
            gpus: 16,
            capacity_gpu_ms: 16 * 48 * H,
            used_gpu_ms: 96 * H + 1,
            jobs: 5,
            runs: 6,
            running: 1,
            preemptions: 2,
            checkpoints_saved: 1,
            lost_gpu_ms: 2 * H,
            restarts: 2,
            start_latency: vec![wait("critical", 1_030, 2_500), wait("low", 60_000, 600_000)],
        }),
        groups: vec![
            ReportGroup {
                name: "vision".into(),
                gpu_ms: 64 * H + 1,
                cpu_ms: 128 * H,
                jobs: 3,
                runs: 4,
                running: 1,
                restarts: 2,
                preemptions_suffered: 2,
                preemptions_caused: 0,
                checkpoints_saved: 1,
                lost_gpu_ms: 2 * H,
                waits: vec![wait("low", 60_000, 600_000)],
                outcomes: vec![
                    OutcomeCount {
                        outcome: "COMPLETED".into(),
                        runs: 2,
                    },
                    OutcomeCount {
                        outcome: "REQUEUED".into(),
                        runs: 2,
                    },
                ],
            },
            ReportGroup {
                name: "nlp, \"research\" <team>".into(),
                gpu_ms: 32 * H,
                jobs: 2,
                runs: 2,
                preemptions_caused: 2,
                waits: vec![wait("critical", 1_030, 2_500)],
                ..Default::default()
            },
        ],
        days: vec![
            ReportDay {
                start_ms: MON,
                capacity_gpu_ms: 16 * 24 * H,
                used_gpu_ms: 40 * H,
                groups: vec![GroupUsage {
                    name: "vision".into(),
                    gpu_ms: 40 * H,
                }],
            },
            ReportDay {
                start_ms: MON + DAY_MS,
                capacity_gpu_ms: 16 * 24 * H,
                used_gpu_ms: 56 * H + 1,
                groups: vec![
                    GroupUsage {
                        name: "vision".into(),
                        gpu_ms: 24 * H + 1,
                    },
                    GroupUsage {
                        name: "nlp, \"research\" <team>".into(),
                        gpu_ms: 32 * H,
                    },
                ],
            },
        ],
    }
}

#[test]
fn dates_are_rfc3339_or_plain_days_in_utc() {
    assert_eq!(parse_date("2026-01-05").unwrap(), MON);
    assert_eq!(parse_date("2026-01-05T00:00:00Z").unwrap(), MON);
    assert_eq!(
        parse_date("2026-01-05T08:30:00Z").unwrap(),
        MON + 30_600_000
    );
    assert_eq!(parse_date("2026-01-05 08:30").unwrap(), MON + 30_600_000);
    assert_eq!(
        parse_date("2026-01-05T10:30:00+02:00").unwrap(),
        MON + 30_600_000
    );
    assert_eq!(parse_date("2026-01-04T22:00:00-02:00").unwrap(), MON);
    assert_eq!(parse_date("2026-01-05T00:00:01.5Z").unwrap(), MON + 1_500);
    assert_eq!(parse_date("1970-01-01").unwrap(), 0);
    assert_eq!(parse_date("2024-02-29").unwrap(), 1_709_164_800_000);
    for bad in [
        "2026-02-29",
        "2026-13-01",
        "26-01-05",
        "2026-01-05T25:00Z",
        "yesterday",
        "",
    ] {
        let e = parse_date(bad).unwrap_err().to_string();
        assert!(e.contains("YYYY-MM-DD or RFC 3339"), "{bad}: {e}");
    }
}

#[test]
fn spans_and_windows() {
    assert_eq!(parse_span("7d").unwrap(), 7 * DAY_MS);
    assert_eq!(parse_span("1d12h").unwrap(), 36 * 3_600_000);
    assert_eq!(parse_span("2w").unwrap(), 14 * DAY_MS);
    assert_eq!(parse_span("90m").unwrap(), 5_400_000);
    for bad in ["7", "d", "0d", "7x", "-1d", ""] {
        assert!(parse_span(bad).is_err(), "{bad}");
    }
    let args = |a: &[&str]| match YctlCli::try_parse_from(
        ["yctl", "report"].iter().chain(a.iter()).copied(),
    ) {
        Ok(YctlCli {
            command: Command::Report(r),
        }) => Ok(r),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    };
    let now = MON + 10 * DAY_MS;
    assert_eq!(
        window(&args(&[]).unwrap(), now).unwrap(),
        (0, 0),
        "schedd's default"
    );
    assert_eq!(
        window(&args(&["--since", "2d"]).unwrap(), now).unwrap(),
        (now - 2 * DAY_MS, now)
    );
    assert_eq!(
        window(
            &args(&["--from", "2026-01-05", "--to", "2026-01-12"]).unwrap(),
            now
        )
        .unwrap(),
        (MON, MON + 7 * DAY_MS)
    );
    assert!(window(
        &args(&["--from", "2026-01-12", "--to", "2026-01-05"]).unwrap(),
        now
    )
    .is_err());
    assert!(args(&["--since", "7d", "--from", "2026-01-05"]).is_err());
    assert!(args(&["--json", "--csv"]).is_err());
    assert!(args(&["--csv", "--html", "x.html"]).is_err());
    assert!(args(&["--by", "node"]).is_err());
    assert_eq!(args(&["--by", "tier"]).unwrap().by, "tier");
    assert_eq!(args(&[]).unwrap().by, "account");
    assert!(matches!(
        YctlCli::try_parse_from(["yctl", "usage", "import", "runs.json"]).unwrap().command,
        Command::Usage { command: UsageCommand::Import { file } } if file == Path::new("runs.json")
    ));
}

#[test]
fn json_has_stable_names_hours_seconds_and_rates() {
    let v = serde_json::to_value(report_json(&reply())).unwrap();
    assert_eq!(v["from"], "2026-01-05T00:00:00Z");
    assert_eq!(v["by"], "account");
    let c = &v["cluster"];
    assert_eq!(c["gpus"], 16);
    assert_eq!(c["capacity_gpu_hours"], 768.0);
    assert_eq!(c["used_gpu_seconds"], 345_600.001);
    assert_eq!(
        c["utilization"].as_f64().unwrap(),
        (96.0 * H as f64 + 1.0) / (768.0 * H as f64)
    );
    assert_eq!(c["checkpoint_rate"], 0.5);
    assert_eq!(c["start_latency"][1]["wait_p95_secs"], 600.0);
    let g = &v["groups"][0];
    assert_eq!(g["name"], "vision");
    assert_eq!(g["gpu_seconds"], 230_400.001);
    assert_eq!(
        g["capacity_share"].as_f64().unwrap(),
        (64.0 * H as f64 + 1.0) / (768.0 * H as f64)
    );
    // The SHARE column: of the GPU-hours used, not of the capacity.
    assert_eq!(
        g["share_of_used"].as_f64().unwrap(),
        (64.0 * H as f64 + 1.0) / (96.0 * H as f64 + 1.0)
    );
    assert_eq!(c["start_latency"][0]["wait_p50_secs"], 1.03);
    assert_eq!(g["checkpoint_rate"], 0.5);
    assert_eq!(g["lost_gpu_hours"], 2.0);
    assert_eq!(g["outcomes"]["REQUEUED"], 2);
    assert_eq!(v["groups"][1]["checkpoint_rate"], serde_json::Value::Null);
    assert_eq!(v["days"][1]["date"], "2026-01-06");
    assert_eq!(v["days"][0]["groups"]["vision"], 40.0);
    // It reads back as what it is.
    let back: ReportJson = serde_json::from_value(v).unwrap();
    assert_eq!(back, report_json(&reply()));
}

#[test]
fn waits_are_never_rounded_up() {
    use super::text::wait_text;
    for (ms, text) in [
        (1_030, "1.03s"),
        (0, "0.00s"),
        (-5, "0.00s"),
        (400, "0.40s"),
        (59_999, "59.99s"),
        (60_000, "1:00"),
        (61_999, "1:01"),
        (4_331_000, "1:12:11"),
    ] {
        assert_eq!(wait_text(ms), text, "{ms} ms");
    }
}

#[test]
fn the_table_shows_the_cluster_then_a_row_per_group() {
    let out = format_report(&reply());
    assert!(
        out.starts_with("Usage from 2026-01-05T00:00:00Z to 2026-01-07T00:00:00Z, by account\n"),
        "{out}"
    );
    assert!(
        out.contains("Cluster: 16 GPUs, capacity 768.0 GPU-hours, used 96.0 (12.5%)"),
        "{out}"
    );
    assert!(
        out.contains("Preemptions: 2, checkpoint saved in 1 (50.0%), 2.00 GPU-hours lost"),
        "{out}"
    );
    assert!(
        out.contains(
            "Start latency p50/p95 (starts): critical 1.03s/2.50s (4), low 1:00/10:00 (4)"
        ),
        "{out}"
    );
    assert!(
        out.contains("Daily GPU utilization: 01-05 10.4%, 01-06 14.6%"),
        "{out}"
    );
    let rows: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("NAME")).collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(
        rows[1].starts_with("vision") && rows[1].contains("1/2 (50.0%)"),
        "{out}"
    );
    // SHARE is of the GPU-hours used (64 of 96), not of the capacity (8.3%).
    let share = rows[0].find("SHARE").unwrap();
    assert_eq!(
        rows[1][..share + 5].split_whitespace().last(),
        Some("66.7%")
    );
    assert!(rows[2].contains("critical 1.03s/2.50s (4)"), "{out}");
    let empty = ReportReply {
        groups: vec![],
        ..reply()
    };
    assert!(format_report(&empty).contains("(no usage in this window)"));
}

#[test]
fn csv_quotes_names_and_ends_with_the_cluster() {
    let out = report_csv(&reply()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("by,name,gpu_hours,gpu_seconds,capacity_share,"));
    assert!(lines[0].ends_with(",starts_critical,wait_p50_secs_critical,wait_p95_secs_critical,starts_low,wait_p50_secs_low,wait_p95_secs_low"), "{}", lines[0]);
    assert!(
        lines[1].starts_with("account,vision,64.000000,230400.001,"),
        "{}",
        lines[1]
    );
    assert!(lines[1].ends_with(",0,,,4,60,600"), "{}", lines[1]);
    assert!(
        lines[2].starts_with("account,\"nlp, \"\"research\"\" <team>\",32.000000,"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].starts_with("cluster,,96.000000,345600.001,0.125000,"),
        "{}",
        lines[3]
    );
    let columns = lines[0].split(',').count();
    assert_eq!(lines[3].split(',').count(), columns);
    assert_eq!(lines[1].split(',').count(), columns);
}

#[test]
fn html_is_one_self_contained_file_with_three_charts() {
    let html = report_html(&reply()).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 3, "three charts");
    assert!(html.contains("Daily GPU utilization (%)"));
    assert!(html.contains("GPU-hours per account and day"));
    // Waits of 1 s and of 10 min on one log axis, p50 and p95 named in the legend; the
    // table's waits as the text report shows them.
    assert!(html.contains("Wait to start by tier (minutes, log scale)"));
    let lines: Vec<&str> = html.lines().map(str::trim).collect();
    assert!(lines.contains(&"p50") && lines.contains(&"p95"), "legend");
    assert!(html.contains("critical 1.03s/2.50s (4)"));
    assert!(html.contains("Share of GPU-hours used"));
    assert!(html.contains("2026-01-06"), "day labels");
    assert!(
        html.contains("nlp, &quot;research&quot; &lt;team&gt;"),
        "names escaped"
    );
    assert!(!html.contains("<team>"));
    for external in ["http:", "https:", "<script", "<link", "@import", "url("] {
        assert!(!html.contains(external), "{external} in the HTML");
    }
    // An empty report still draws (empty) charts.
    let empty = ReportReply {
        cluster: None,
        groups: vec![],
        days: vec![],
        ..reply()
    };
    assert_eq!(report_html(&empty).unwrap().matches("<svg").count(), 3);
}

#[test]
fn usage_files_take_runs_with_defaults_and_refuse_unknown_fields() {
    let runs = parse_usage_file(
        r#"[{"job_id": 7, "account": "vision", "user": "bob", "tier": "high", "gpus": 8,
             "start": 1000, "end": 5000},
            {"job_id": 8, "restart_count": 1, "account": "nlp", "user": "eve", "uid": 1002,
             "tier": "low", "gpus": 2, "cpus": 8, "queued_at": 10, "start": 20, "end": 30,
             "outcome": "REQUEUED", "preempted_by": 7, "preemptor_account": "vision",
             "checkpoint_saved": true, "lost_gpu_secs": 0}]"#,
    )
    .unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(
        (
            runs[0].queued_at_ms,
            runs[0].outcome.as_str(),
            runs[0].preempted_by
        ),
        (1000, "COMPLETED", 0)
    );
    assert_eq!(
        (
            runs[1].preempted_by,
            runs[1].preemptor_account.as_str(),
            runs[1].checkpoint_saved
        ),
        (7, "vision", true)
    );
    let e = parse_usage_file(r#"[{"job_id": 1, "acount": "x"}]"#).unwrap_err();
    assert!(format!("{e:#}").contains("unknown field `acount`"), "{e:#}");
    assert!(parse_usage_file("{}").is_err());
}

fn trace_reply() -> TraceReply {
    let job = |id: &str| ysched_proto::TraceJob {
        job_id: id.into(),
        submit_ms: MON + 1_500,
        tier: "low".into(),
        account: "vision".into(),
        user: "ana".into(),
        gpus: 8,
        duration_ms: 5_400_000,
        outcome: "COMPLETED".into(),
        restarts: 0,
        spec_known: true,
        gpu_types: vec!["A100".into(), "H100".into()],
        nodes: Some(2),
        cpus: 16,
        mem_mib: 65_536,
        time_limit_secs: Some(86_400),
        grace_secs: Some(120),
    };
    TraceReply {
        from_ms: MON,
        to_ms: MON + 7 * DAY_MS,
        generated_ms: MON + 7 * DAY_MS,
        all_accounts: true,
        jobs: vec![
            job("41"),
            ysched_proto::TraceJob {
                // Names a CSV must quote: commas, quotes.
                account: "r&d, \"core\"".into(),
                user: "o,brien".into(),
                duration_ms: 2_250,
                outcome: "TIMEOUT".into(),
                restarts: 2,
                ..job("12_7")
            },
            ysched_proto::TraceJob {
                // Imported runs: no spec.
                spec_known: false,
                gpu_types: vec![],
                nodes: None,
                cpus: 4,
                mem_mib: 0,
                time_limit_secs: None,
                grace_secs: None,
                duration_ms: 1,
                ..job("900001")
            },
        ],
        unfinished: 3,
    }
}

/// Splits one RFC 4180 record (no newline inside): the reference the writer must agree with.
fn split_rfc4180(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let (mut quoted, mut chars) = (false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') => quoted = true,
            (false, ',') => fields.push(String::new()),
            (_, c) => fields.last_mut().unwrap().push(c),
        }
    }
    assert!(!quoted, "unterminated quote in {line}");
    fields
}

#[test]
fn the_trace_csv_has_ysims_columns_and_quotes_as_rfc_4180() {
    let csv = trace_csv(&trace_reply());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert_eq!(
        lines[0],
        "job_id,submit_time,tier,account,user,gpus,gpu_type,nodes,cpus,mem,duration,\
         time_limit,checkpoint_interval,checkpoint_write,grace,outcome,restarts"
    );
    assert_eq!(
        lines[1],
        "41,2026-01-05T00:00:01.500Z,low,vision,ana,8,A100|H100,2,16,65536,5400,86400,,,120,\
         COMPLETED,0"
    );
    // Quoted where it must be, and only there.
    assert_eq!(
        lines[2],
        "12_7,2026-01-05T00:00:01.500Z,low,\"r&d, \"\"core\"\"\",\"o,brien\",8,A100|H100,2,16,\
         65536,2.25,86400,,,120,TIMEOUT,2"
    );
    let header = split_rfc4180(lines[0]);
    for line in &lines[1..] {
        assert_eq!(split_rfc4180(line).len(), header.len(), "{line}");
    }
    let row = split_rfc4180(lines[2]);
    assert_eq!(row[3], "r&d, \"core\"");
    assert_eq!(row[4], "o,brien");
    // No spec: its columns empty, the runs' CPUs.
    assert_eq!(
        lines[3],
        "900001,2026-01-05T00:00:01.500Z,low,vision,ana,8,,,4,,0.001,,,,,COMPLETED,0"
    );
    assert_eq!(trace_secs(61_010), "61.01");
    assert_eq!(trace_secs(0), "0");
}

#[test]
fn the_trace_summary_says_what_was_left_out() {
    let mut r = trace_reply();
    let s = trace_summary(&r, "out.csv");
    assert_eq!(
        s,
        "exported 3 jobs that ended from 2026-01-05T00:00:00Z to 2026-01-12T00:00:00Z to \
         out.csv; 3 jobs requeued and not over at the window's end left out"
    );
    r.jobs.truncate(1);
    r.unfinished = 0;
    r.all_accounts = false;
    assert_eq!(
        trace_summary(&r, "-"),
        "exported 1 job that ended from 2026-01-05T00:00:00Z to 2026-01-12T00:00:00Z to - \
         (only the accounts you may charge)"
    );
}

#[test]
fn export_trace_takes_the_window_and_no_other_output() {
    let args = |a: &[&str]| {
        YctlCli::try_parse_from(["yctl", "report"].iter().chain(a.iter()).copied()).map(|c| match c
            .command
        {
            Command::Report(r) => r,
            other => panic!("{other:?}"),
        })
    };
    let r = args(&["--since", "30d", "--export-trace", "last-month.csv"]).unwrap();
    assert_eq!(r.export_trace.as_deref(), Some(Path::new("last-month.csv")));
    assert_eq!(window(&r, MON).unwrap(), (MON - 30 * DAY_MS, MON));
    let r = args(&["--from", "2026-01-05", "--export-trace", "-"]).unwrap();
    assert_eq!(r.export_trace.as_deref(), Some(Path::new("-")));
    for other in [
        &["--json"][..],
        &["--csv"],
        &["--html", "x.html"],
        &["--by", "user"],
    ] {
        let mut a = vec!["--export-trace", "t.csv"];
        a.extend_from_slice(other);
        assert!(args(&a).is_err(), "{a:?}");
    }
}

/// The process's umask, from `/proc/self/status` (reading it with umask(2) would change it).
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Every name in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_report_file_is_written_whole_through_no_planted_file_or_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let report = dir.path().join("report.html");
    // What another user could plant in a shared directory: the old fixed temporary names as
    // a symlink to a file of the report's writer and as a world-writable file of their own.
    std::os::unix::fs::symlink(&victim, dir.path().join("report.html.tmp")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join(".report.html.tmp")).unwrap();
    let planted = dir.path().join("report.tmp");
    std::fs::write(&planted, "").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();

    write_whole(&report, "<html>the report</html>").unwrap();
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "<html>the report</html>"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "");
    // A new file's mode: what the umask leaves of 0666.
    assert_eq!(mode_of(&report), 0o666 & !umask());
    // Nothing else was left behind.
    assert_eq!(
        names_in(dir.path()),
        [
            ".report.html.tmp",
            "report.html",
            "report.html.tmp",
            "report.tmp",
            "victim"
        ]
    );

    // A report written again keeps the mode its file was given.
    std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o640)).unwrap();
    write_whole(&report, "second").unwrap();
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "second");
    assert_eq!(mode_of(&report), 0o640);

    // A symlink at the report's own name is replaced, not followed.
    let linked = dir.path().join("linked.csv");
    std::os::unix::fs::symlink(&victim, &linked).unwrap();
    write_whole(&linked, "a,b\n").unwrap();
    assert!(std::fs::symlink_metadata(&linked).unwrap().is_file());
    assert_eq!(std::fs::read_to_string(&linked).unwrap(), "a,b\n");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(mode_of(&victim), 0o600);

    // A directory in the way is an error, and leaves no temporary file.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    let before = names_in(dir.path());
    let err = write_whole(&taken, "x").unwrap_err().to_string();
    assert!(
        err.contains("cannot write") && err.contains("taken"),
        "{err}"
    );
    assert_eq!(names_in(dir.path()), before);
}

#[test]
fn the_csv_is_rfc_4180_to_the_byte() {
    // An account with a comma, quotes and a `<`: one quoted field, its quotes doubled; every
    // other field as before the csv crate wrote it.
    assert_eq!(
        report_csv(&reply()).unwrap(),
        "by,name,gpu_hours,gpu_seconds,capacity_share,cpu_hours,jobs,runs,running,restarts,\
         preemptions_suffered,preemptions_caused,checkpoints_saved,checkpoint_rate,\
         lost_gpu_hours,share_of_used,starts_critical,wait_p50_secs_critical,\
         wait_p95_secs_critical,starts_low,wait_p50_secs_low,wait_p95_secs_low\n\
         account,vision,64.000000,230400.001,0.083333,128.000000,3,4,1,2,2,0,1,0.500000,\
         2.000000,0.666667,0,,,4,60,600\n\
         account,\"nlp, \"\"research\"\" <team>\",32.000000,115200.000,0.041667,0.000000,2,2,\
         0,0,0,2,0,,0.000000,0.333333,4,1.03,2.5,0,,\n\
         cluster,,96.000000,345600.001,0.125000,,5,6,1,2,2,2,1,0.500000,2.000000,1.000000,4,\
         1.03,2.5,4,60,600\n"
    );
    let out = report_csv(&reply()).unwrap();
    let row = split_rfc4180(out.lines().nth(2).unwrap());
    assert_eq!(row[1], "nlp, \"research\" <team>");
    assert_eq!(row.len(), 22);
}
