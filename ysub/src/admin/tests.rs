//! Tests of yctl: its command line, drains, GPU resumes and the audit log.

use super::*;
use clap::Parser;
use ysched_common::JobTarget;
use ysched_proto::{AuditEntry, GpuResumed};

fn parse(args: &[&str]) -> Result<YctlCli, clap::Error> {
    YctlCli::try_parse_from(std::iter::once("yctl").chain(args.iter().copied()))
}

#[test]
fn subcommands() {
    assert!(matches!(
        parse(&["nodes", "-l"]).unwrap().command,
        Command::Nodes {
            long: true,
            json: false,
            topology: None
        }
    ));
    assert!(matches!(
        parse(&["nodes", "--topology", "gpu01"]).unwrap().command,
        Command::Nodes { topology: Some(name), .. } if name == "gpu01"
    ));
    match parse(&["show", "job", "12", "--json"]).unwrap().command {
        Command::Show {
            what: ShowCommand::Job { job, json: true },
        } => assert_eq!(job_ref(&job), job_ref(&JobTarget::parse("12").unwrap())),
        other => panic!("{other:?}"),
    }
    match parse(&["drain", "gpu01", "--reason", "bad fan"])
        .unwrap()
        .command
    {
        Command::Drain { nodes, reason, gpu } => assert_eq!(
            (nodes, reason.as_str(), gpu),
            (vec!["gpu01".to_string()], "bad fan", vec![])
        ),
        other => panic!("{other:?}"),
    }
    match parse(&["resume", "gpu01", "--gpu", "3,5"]).unwrap().command {
        Command::Resume { nodes, gpu } => {
            assert_eq!((nodes, gpu), (vec!["gpu01".to_string()], vec![3, 5]))
        }
        other => panic!("{other:?}"),
    }
    let command = parse(&["drain", "gpu01", "--gpu", "7", "--reason", "flaky"])
        .unwrap()
        .command;
    assert!(check_limits(&command).is_ok());
    assert!(matches!(command, Command::Drain { gpu, .. } if gpu == [7]));
    let two = parse(&["resume", "gpu01", "gpu02", "--gpu", "1"])
        .unwrap()
        .command;
    assert_eq!(
        check_limits(&two).unwrap_err().to_string(),
        "--gpu names GPUs of one node; give exactly one NODE"
    );
    assert!(parse(&["resume", "gpu01", "--gpu", "x"]).is_err());
    let names = |command: Command| -> Vec<String> {
        match command {
            Command::Hold { jobs } | Command::Release { jobs } | Command::Requeue { jobs } => {
                flatten_targets(&jobs)
                    .iter()
                    .map(ToString::to_string)
                    .collect()
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(names(parse(&["hold", "3,4"]).unwrap().command), ["3", "4"]);
    assert_eq!(
        names(parse(&["requeue", "7", "8,9"]).unwrap().command),
        ["7", "8", "9"]
    );
    assert!(parse(&["requeue"]).is_err());
    assert!(matches!(
        parse(&["shares", "--json"]).unwrap().command,
        Command::Shares { json: true }
    ));
}

#[test]
fn audit_rows_and_json() {
    let entries = [
        AuditEntry {
            time_ms: 1_767_225_600_000,
            user: "root".into(),
            action: "drain".into(),
            detail: "gpu01: bad fan".into(),
            ..Default::default()
        },
        AuditEntry {
            time_ms: 1_767_225_601_000,
            user: "schedd".into(),
            action: "preempt".into(),
            job_id: 12,
            detail: "for job 15".into(),
            ..Default::default()
        },
    ];
    let out = format_audit_table(&entries);
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[1],
        "2026-01-01T00:00:00Z  root    drain      -  gpu01: bad fan"
    );
    assert!(rows[2].contains("preempt   12  for job 15"), "{out}");
    let value = serde_json::to_value(audit_to_json(&entries[1])).unwrap();
    assert_eq!(value["job_id"], 12);
    assert_eq!(value["time"], "2026-01-01T00:00:01Z");
    assert_eq!(
        serde_json::to_value(audit_to_json(&entries[0])).unwrap()["job_id"],
        serde_json::Value::Null
    );
}

#[test]
fn audit_text_is_escaped() {
    let entry = AuditEntry {
        time_ms: 1_767_225_600_000,
        user: "eve\x1b[2J".into(),
        action: "submit-refused".into(),
        detail: "job name \"a\nb\"\u{202e}".into(),
        ..Default::default()
    };
    let out = format_audit_table(std::slice::from_ref(&entry));
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        !out.contains('\x1b') && !out.contains('\u{202e}'),
        "{out:?}"
    );
    assert!(
        out.contains("eve\\x1b[2J  submit-refused    -  job name \"a\\nb\"\\u{202e}"),
        "{out}"
    );
    assert_eq!(
        serde_json::to_value(audit_to_json(&entry)).unwrap()["user"],
        "eve\x1b[2J"
    );
}

#[test]
fn gpu_resumes_say_what_became_of_each_gpu() {
    let gpus = [
        GpuResumed {
            index: 3,
            confirmed: true,
            ..Default::default()
        },
        GpuResumed {
            index: 4,
            pending: "node n1 is DOWN; it is told when it registers again".into(),
            ..Default::default()
        },
    ];
    let (out, all_back) = format_gpu_resumes("n1", &gpus);
    assert!(all_back);
    assert_eq!(
        out,
        "GPU 3 of n1 is back in service\n\
             GPU 4 of n1 is back in service, not yet confirmed by its node (node n1 is DOWN; it \
             is told when it registers again): if the node still finds it failing, it goes out \
             of service again\n"
    );
    let failing = [GpuResumed {
        index: 2,
        still_failing: "pages pending retirement".into(),
        ..Default::default()
    }];
    let (out, all_back) = format_gpu_resumes("n1", &failing);
    assert!(!all_back);
    assert_eq!(
        out,
        "GPU 2 of n1 still reports: pages pending retirement; it is out of service again \
             (repair it, then resume it again)\n"
    );
}

#[test]
fn drain_reasons_must_be_printable() {
    assert!(check_drain_reason("fan replaced, Ünïcode ok").is_ok());
    assert_eq!(
        check_drain_reason("  ").unwrap_err().to_string(),
        "--reason must not be empty"
    );
    assert_eq!(
        check_drain_reason("bad\nfan").unwrap_err().to_string(),
        "drain reason \"bad\\nfan\" contains a control character (U+000A); reasons may \
             not contain control characters"
    );
    assert!(check_drain_reason("x\u{2029}").is_err());
}

#[test]
fn topology_needs_a_node_and_stands_alone() {
    assert!(parse(&["nodes", "--topology"]).is_err());
    assert!(parse(&["nodes", "--topology", "gpu01", "-l"]).is_err());
    assert!(parse(&["nodes", "--topology", "gpu01", "--json"]).is_err());
}

#[test]
fn nodes_are_found_by_exact_name() {
    let nodes = [NodeInfo {
        name: "gpu01".into(),
        ..Default::default()
    }];
    assert_eq!(find_node(&nodes, "gpu01").unwrap().name, "gpu01");
    assert_eq!(
        find_node(&nodes, "gpu1").unwrap_err().to_string(),
        "unknown node 'gpu1'"
    );
}

#[test]
fn job_commands_take_array_targets() {
    let refs = |args: &[&str]| -> Vec<(u64, String)> {
        match parse(args).unwrap().command {
            Command::Hold { jobs } | Command::Release { jobs } | Command::Requeue { jobs } => {
                flatten_targets(&jobs)
                    .iter()
                    .map(|t| {
                        let r = job_ref(t);
                        (r.job_id, r.target)
                    })
                    .collect()
            }
            other => panic!("{other:?}"),
        }
    };
    // A task is never sent as its array's id, which an older server would act on.
    assert_eq!(
        refs(&["hold", "12_[100-199],13", "12_7"]),
        [
            (0, "12_[100-199]".to_string()),
            (13, "13".to_string()),
            (0, "12_7".to_string())
        ]
    );
    assert_eq!(
        refs(&["release", "12_[1-3,9]"]),
        [(0, "12_[1-3,9]".to_string())]
    );
    assert_eq!(refs(&["requeue", "12_4"]), [(0, "12_4".to_string())]);
    match parse(&["show", "job", "12_7"]).unwrap().command {
        Command::Show {
            what: ShowCommand::Job { job, json: false },
        } => {
            let r = job_ref(&job);
            assert_eq!((r.job_id, r.target.as_str()), (0, "12_7"));
        }
        other => panic!("{other:?}"),
    }
    // One job at a time.
    let err = crate::args::clap_error_message(&parse(&["show", "job", "12_[1-5]"]).unwrap_err());
    assert!(err.contains("names 5 tasks"), "{err}");
    assert!(parse(&["show", "job", "12_[5]"]).is_ok());
    assert!(parse(&["hold", "12_"]).is_err());
}

#[test]
fn drain_needs_a_reason_and_ids_must_be_numbers() {
    assert!(parse(&["drain", "gpu01"]).is_err());
    assert!(parse(&["hold", "x"]).is_err());
    assert!(parse(&["release"]).is_err());
    assert!(parse(&["show", "job", "-3"]).is_err());
}
