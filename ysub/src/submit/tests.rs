//! Tests of ysub: options, directives, the job spec and the end of a wait.

use super::wait::{is_finished, spinner_message};
use super::*;
use crate::args::clap_error_message;
use anyhow::Result;
use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;
use ysched_common::array::DEFAULT_MAX_ARRAY_SIZE;
use ysched_proto::{JobInfo, JobSpec};

fn cli(args: &[&str]) -> YsubCli {
    YsubCli::try_parse_from(std::iter::once("ysub").chain(args.iter().copied())).unwrap()
}

fn context() -> SubmitContext {
    SubmitContext {
        cwd: PathBuf::from("/home/alice/proj"),
        env: vec![
            ("PATH".into(), "/bin".into()),
            ("HOME".into(), "/home/alice".into()),
        ],
        max_array_size: DEFAULT_MAX_ARRAY_SIZE,
    }
}

fn script(contents: &str) -> BatchScript {
    BatchScript {
        default_name: "train.sh".into(),
        contents: contents.into(),
        args: vec![],
    }
}

/// Resolves directives in `contents` and `args` like `resolve` does, without a file.
fn spec_for(contents: &str, args: &[&str]) -> Result<JobSpec> {
    let options = options_from_directives(contents, "train.sh")?.overridden_by(cli(args).options);
    build_spec(&options, script(contents), &context())
}

#[test]
fn options_after_the_script_belong_to_it() {
    let parsed = cli(&["-G", "2", "run.sh", "--epochs", "3", "-G", "x"]);
    assert_eq!(parsed.options.gpus, Some(2));
    assert_eq!(parsed.command, ["run.sh", "--epochs", "3", "-G", "x"]);
    let parsed = cli(&["--wrap", "echo hi", "-J", "w"]);
    assert_eq!(parsed.wrap.as_deref(), Some("echo hi"));
    assert_eq!(parsed.options.job_name.as_deref(), Some("w"));
}

#[test]
fn bad_numbers_are_refused_by_the_parser() {
    for bad in [
        &["-G", "-1", "s.sh"][..],
        &["-G", "x", "s.sh"],
        &["-c", "0", "s.sh"],
        &["--grace", "-5", "s.sh"],
        &["-N", "two", "s.sh"],
        &["-N", "0", "s.sh"],
        &["-G", "4294967296", "s.sh"],
    ] {
        let args = std::iter::once("ysub").chain(bad.iter().copied());
        assert!(YsubCli::try_parse_from(args).is_err(), "{bad:?} accepted");
    }
}

fn parse_error(args: &[&str]) -> String {
    let e =
        YsubCli::try_parse_from(std::iter::once("ysub").chain(args.iter().copied())).unwrap_err();
    clap_error_message(&e)
}

#[test]
fn numbers_out_of_range_name_the_flag_and_the_bound() {
    assert_eq!(
        parse_error(&["-G", "4294967296", "s.sh"]),
        "--gpus 4294967296 exceeds the maximum of 100000"
    );
    assert_eq!(
        parse_error(&["-G", "100001", "s.sh"]),
        "--gpus 100001 exceeds the maximum of 100000"
    );
    assert_eq!(
        parse_error(&["-N", "0", "s.sh"]),
        "--nodes must be at least 1 (got 0)"
    );
    assert_eq!(
        parse_error(&["--nodes=10001", "s.sh"]),
        "--nodes 10001 exceeds the maximum of 10000"
    );
    assert_eq!(
        parse_error(&["-c", "0", "s.sh"]),
        "--cpus must be at least 1 (got 0)"
    );
    assert_eq!(
        parse_error(&["--cpus-per-task", "99999999999999999999999", "s.sh"]),
        "--cpus 99999999999999999999999 exceeds the maximum of 100000"
    );
    assert_eq!(
        parse_error(&["--grace", "4294967296", "s.sh"]),
        "--grace 4294967296 exceeds the maximum of 4294967295"
    );
    assert_eq!(
        parse_error(&["-G", "-1", "s.sh"]),
        "invalid --gpus '-1': use a whole number from 0 to 100000"
    );
    let ok = cli(&[
        "-G", "100000", "-N", "10000", "-c", "100000", "--grace", "0", "s.sh",
    ]);
    assert_eq!(
        (
            ok.options.gpus,
            ok.options.nodes,
            ok.options.cpus,
            ok.options.grace
        ),
        (Some(100_000), Some(10_000), Some(100_000), Some(0))
    );
    // The same in a directive, which names the line.
    let err = spec_for("#YSUB -N 0\n", &[]).unwrap_err().to_string();
    assert_eq!(
        err,
        "train.sh: line 1: invalid #YSUB directive: --nodes must be at least 1 (got 0)"
    );
}

#[test]
fn signal_before_the_time_limit_as_sbatch_takes_it() {
    let warn = |contents: &str, args: &[&str]| spec_for(contents, args).unwrap().warn_signal;
    assert_eq!(warn("#!/bin/sh\n", &[]), None);
    let w = warn("#!/bin/sh\n", &["--signal", "USR1@2"]).unwrap();
    assert_eq!((w.signal, w.secs, w.batch_only), (10, 2, false));
    // SECS defaults to 60; `B:` is the batch shell only; the command line wins.
    let w = warn("#YSUB --signal=B:SIGTERM\n", &[]).unwrap();
    assert_eq!((w.signal, w.secs, w.batch_only), (15, 60, true));
    let w = warn("#YSUB --signal=B:SIGTERM\n", &["--signal", "12@30"]).unwrap();
    assert_eq!((w.signal, w.secs, w.batch_only), (12, 30, false));
    let err = parse_error(&["--signal", "USR9", "s.sh"]);
    assert!(err.contains("unknown signal 'USR9'"), "{err}");
    let err = parse_error(&["--signal", "USR1@70000", "s.sh"]);
    assert!(err.contains("70000 seconds is out of range"), "{err}");
    let err = spec_for("#YSUB --signal USR1@x\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("train.sh: line 1: invalid #YSUB directive: invalid --signal"),
        "{err}"
    );
}

#[test]
fn huge_time_limits_and_sizes_are_refused_not_wrapped() {
    let err = spec_for("#!/bin/sh\n", &["-t", "307445734561825861"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "time limit '307445734561825861' exceeds the maximum of 365 days (365-00:00:00)"
    );
    assert!(spec_for("#!/bin/sh\n", &["-t", "999999999999999999"]).is_err());
    assert!(spec_for("#YSUB -t 366-00\n", &[]).is_err());
    assert_eq!(
        spec_for("#!/bin/sh\n", &["-t", "365-00:00:00"])
            .unwrap()
            .time_limit_secs,
        365 * 86_400
    );
    let err = spec_for("#!/bin/sh\n", &["--mem", "17179869184T"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("exceeds the maximum of 1024T"), "{err}");
}

#[test]
fn names_and_accounts_must_be_printable() {
    let err = spec_for("#!/bin/sh\n", &["-J", "bad\nname"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "job name \"bad\\nname\" contains a control character (U+000A); names may not \
             contain control characters"
    );
    let err = spec_for("#YSUB -J \"\x1b[2J\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("(U+001B)"), "{err}");
    let err = spec_for("#!/bin/sh\n", &["-A", "ml\u{2066}"])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("account \"ml\\u{2066}\""), "{err}");
    // The script's file name is the default name: it must be printable too.
    let mut bad_file = script("#!/bin/sh\n");
    bad_file.default_name = "run\r.sh".into();
    assert!(build_spec(&JobOptions::default(), bad_file, &context()).is_err());
    // Printable Unicode is fine.
    let spec = spec_for("#!/bin/sh\n", &["-J", "训练-é 🚀", "-A", "équipe"]).unwrap();
    assert_eq!(
        (spec.name.as_str(), spec.account.as_str()),
        ("训练-é 🚀", "équipe")
    );
}

#[test]
fn empty_and_odd_values_are_refused_with_what_to_give() {
    for (args, wanted) in [
        (
            &["-p", ""][..],
            "-p/--priority is empty: give a tier, or leave -p out",
        ),
        (&["--gpu-type", ""], "--gpu-type is empty"),
        (&["--constraint", ""], "--constraint is empty"),
        (
            &["--constraint", "ib,,nvme"],
            "an empty feature in --constraint",
        ),
        (&["-D", ""], "-D/--chdir is empty"),
        (&["-A", " "], "-A/--account is empty"),
        (&["-J", ""], "-J/--job-name is empty"),
        (&["--mem", "0"], "--mem 0 asks for no memory"),
        (&["-t", "1:99:99"], "minutes must be 0 to 59 (got 99)"),
        (&["-t", "00:60"], "seconds must be 0 to 59 (got 60)"),
    ] {
        let err = spec_for("#!/bin/sh\n", args).unwrap_err().to_string();
        assert!(err.contains(wanted), "{args:?}: {err}");
    }
}

#[test]
fn every_text_is_bounded_before_anything_is_sent() {
    let config = Config::default();
    let long = |n: usize| "x".repeat(n);
    for (args, wanted) in [
        (
            vec!["-J".to_string(), long(100_000)],
            "job name is 100000 bytes; the limit is 256 (fixed)",
        ),
        (
            vec!["-A".to_string(), long(129)],
            "account is 129 bytes; the limit is 128 (fixed)",
        ),
        (
            vec!["-p".to_string(), long(65)],
            "tier is 65 bytes; the limit is 64 (fixed)",
        ),
        (
            vec!["--gpu-type".to_string(), long(65)],
            "GPU model is 65 bytes; the limit is 64 (fixed)",
        ),
        (
            vec!["--constraint".to_string(), long(65)],
            "feature is 65 bytes; the limit is 64 (fixed)",
        ),
        (
            vec!["-D".to_string(), format!("/{}", long(5000))],
            "working directory: path is 5001 bytes; the limit is 4096 (fixed)",
        ),
        (vec!["-o".to_string(), long(4090)], "output file: path is"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = match spec_for("#!/bin/sh\n", &args) {
            Err(e) => e.to_string(),
            Ok(spec) => check_payload_size(&spec, &config).unwrap_err().to_string(),
        };
        assert!(err.contains(wanted), "{wanted}: {err}");
        assert!(err.len() < 200, "{err}");
    }
}

#[test]
fn payload_size_is_checked_like_schedd_does() {
    let config = Config::default();
    let limit = config.max_script_bytes() as usize;
    let mut spec = spec_for("#!/bin/sh\n", &["--export=NONE"]).unwrap();
    spec.script = "x".repeat(limit);
    assert!(check_payload_size(&spec, &config).is_ok());
    spec.script.push('x');
    assert_eq!(
        check_payload_size(&spec, &config).unwrap_err().to_string(),
        "script is 4.1 MiB; the limit is 4 MiB (scheduler.max_script_mib)"
    );
    spec.script = "x".repeat(50_001_719);
    assert_eq!(
        check_payload_size(&spec, &config).unwrap_err().to_string(),
        "script is 47.7 MiB; the limit is 4 MiB (scheduler.max_script_mib)"
    );
    // The environment counts names, values and 2 bytes per variable.
    spec.script = "#!/bin/sh\n".into();
    spec.env.insert("BIG".into(), "v".repeat(limit - 5));
    assert!(check_payload_size(&spec, &config).is_ok());
    spec.env.insert("A".into(), String::new());
    assert_eq!(
        check_payload_size(&spec, &config).unwrap_err().to_string(),
        "environment is 4.1 MiB; the limit is 4 MiB (scheduler.max_script_mib)"
    );
}

#[test]
fn a_non_utf8_variable_is_refused_only_when_exported() {
    use std::os::unix::ffi::OsStringExt;
    let mut context = context();
    context
        .env
        .push(("LATIN1".into(), OsString::from_vec(b"caf\xe9".to_vec())));
    let options = |args: &[&str]| cli(args).options;
    let err = build_spec(&options(&[]), script("#!/bin/sh\n"), &context)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("environment variable LATIN1 is not valid UTF-8; "),
        "{err}"
    );
    for export in [
        "--export=NONE",
        "--export=PATH,X=1",
        "--export=ALL,LATIN1=x",
    ] {
        let spec = build_spec(&options(&[export]), script("#!/bin/sh\n"), &context)
            .unwrap_or_else(|e| panic!("{export}: {e}"));
        assert_ne!(
            spec.env.get("LATIN1").map(String::as_str),
            Some("caf\u{fffd}")
        );
    }
}

#[test]
fn malformed_time_and_size_are_errors() {
    let err = spec_for("#!/bin/sh\n", &["-t", "1:2:3:4"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid time limit '1:2:3:4'"), "{err}");
    let err = spec_for("#!/bin/sh\n", &["--mem", "12Q"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid memory size '12Q'"), "{err}");
    let err = spec_for("#!/bin/sh\n#YSUB --time=soon\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid time limit 'soon'"), "{err}");
}

#[test]
fn defaults() {
    let spec = spec_for("#!/bin/sh\necho hi\n", &[]).unwrap();
    assert_eq!(spec.name, "train.sh");
    assert_eq!(spec.workdir, "/home/alice/proj");
    assert_eq!(spec.env.len(), 2);
    assert_eq!(
        (
            spec.gpus,
            spec.cpus,
            spec.nodes,
            spec.mem_mib,
            spec.time_limit_secs
        ),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(spec.grace_secs, None);
    assert_eq!(spec.script, "#!/bin/sh\necho hi\n");
    assert!(spec.tier.is_empty() && spec.stdout_path.is_empty() && !spec.hold);
}

#[test]
fn directives_set_options_and_the_command_line_overrides_them() {
    let contents = "#!/bin/bash\n\
                        #YSUB -J \"my job\" -G 4 --gpu-type 'A100|H100'\n\
                        #YSUB -t 2:00:00 --mem 16G -p low\n\
                        #YSUB --constraint ib --constraint nvme,fast\n\
                        #YSUB --hold -o logs/%j.out\n\
                        python train.py\n\
                        #YSUB -G 99\n";
    let spec = spec_for(contents, &[]).unwrap();
    assert_eq!(spec.name, "my job");
    assert_eq!(spec.gpus, 4);
    assert_eq!(spec.gpu_type, "A100|H100");
    assert_eq!(spec.time_limit_secs, 7200);
    assert_eq!(spec.mem_mib, 16384);
    assert_eq!(spec.tier, "low");
    assert_eq!(spec.constraints, ["ib", "nvme", "fast"]);
    assert!(spec.hold);
    assert_eq!(spec.stdout_path, "logs/%j.out");

    let spec = spec_for(
        contents,
        &["-G", "2", "-J", "cli", "-p", "high", "--constraint", "x"],
    )
    .unwrap();
    assert_eq!(
        (spec.gpus, spec.name.as_str(), spec.tier.as_str()),
        (2, "cli", "high")
    );
    assert_eq!(spec.constraints, ["x"]);
    assert_eq!(spec.time_limit_secs, 7200, "untouched by the command line");
}

#[test]
fn array_and_dependency_from_directives_and_the_command_line() {
    let contents = "#!/bin/sh\n#YSUB --array 0-99%4\n#YSUB -d afterok:12\necho $YS_ARRAY_TASK_ID\n";
    let spec = spec_for(contents, &[]).unwrap();
    assert_eq!(spec.array, "0-99%4");
    assert_eq!(spec.dependency, "afterok:12");
    // Short forms, `=` forms, and the command line winning.
    let spec = spec_for("#YSUB -a 1,5,9-12\n#YSUB --dependency=singleton\n", &[]).unwrap();
    assert_eq!(
        (spec.array.as_str(), spec.dependency.as_str()),
        ("1,5,9-12", "singleton")
    );
    let spec = spec_for(
        contents,
        &[
            "-a",
            "0-199:2%16",
            "--dependency",
            "afterany:12_7?afternotok:13_[1-3]",
        ],
    )
    .unwrap();
    assert_eq!(spec.array, "0-199:2%16");
    assert_eq!(spec.dependency, "afterany:12_7?afternotok:13_[1-3]");
    // A later line overrides an earlier one.
    let spec = spec_for("#YSUB --array 0-9\n#YSUB --array=3-4\n", &[]).unwrap();
    assert_eq!(spec.array, "3-4");
    // Neither: not an array, no dependency.
    let spec = spec_for("#!/bin/sh\n", &[]).unwrap();
    assert!(spec.array.is_empty() && spec.dependency.is_empty());
    let parsed = cli(&["-a", "0-3", "-d", "after:5", "s.sh"]);
    assert_eq!(parsed.options.array.as_deref(), Some("0-3"));
    assert_eq!(parsed.options.dependency.as_deref(), Some("after:5"));
}

#[test]
fn bad_arrays_and_dependencies_are_refused_before_submitting() {
    assert_eq!(
        parse_error(&["--array", "5-1", "s.sh"]),
        "--array '5-1': range '5-1' goes backwards"
    );
    assert!(parse_error(&["-a", "0-9%0", "s.sh"]).contains("%0 would never run a task"));
    assert!(parse_error(&["-a", "x", "s.sh"]).contains("'x' is not a task index"));
    assert!(parse_error(&["-d", "afterwards:12", "s.sh"]).contains("unknown type 'afterwards'"));
    assert!(parse_error(&["-d", "afterok:12,afterany:3?after:4", "s.sh"]).contains("not both"));
    assert!(parse_error(&["-d", "afterok:x", "s.sh"]).contains("is not a job id"));
    // In a directive, the line is named.
    let err = spec_for("#!/bin/sh\n#YSUB --array 0-9:0\n", &[])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "train.sh: line 2: invalid #YSUB directive: --array '0-9:0': a step of 0"
    );
    let err = spec_for("#YSUB -d afterok\n", &[]).unwrap_err().to_string();
    assert!(
        err.starts_with("train.sh: line 1: invalid #YSUB directive: --dependency 'afterok'"),
        "{err}"
    );
}

#[test]
fn array_indices_must_be_below_the_configured_limit() {
    let options = |args: &[&str]| cli(args).options;
    let mut context = context();
    context.max_array_size = 100;
    assert!(build_spec(&options(&["-a", "0-99"]), script("#!/bin/sh\n"), &context).is_ok());
    let err = build_spec(&options(&["-a", "0-100"]), script("#!/bin/sh\n"), &context)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "--array '0-100': index 100 is above the largest allowed, 99 \
             (scheduler.max_array_size = 100)"
    );
    // Past any configuration's limit, the parser leaves the message to the check that
    // knows the cluster's limit.
    let parsed = options(&["-a", "0-4000000000%2"]);
    let err = build_spec(&parsed, script("#!/bin/sh\n"), &self::context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("(scheduler.max_array_size = 10001)"), "{err}");
}

#[test]
fn an_array_waits_for_every_task_and_exits_with_the_highest_code() {
    let task = |id: u64, task: u32, state: &str, exit: Option<i32>| {
        JobInfo {
            display_id: format!("12_{task}"),
            array_job_id: Some(12),
            array_task_id: Some(task),
            ..finished(state, exit, None)
        }
        .with_id(id)
    };
    let all_ok = [
        task(12, 0, "COMPLETED", Some(0)),
        task(13, 1, "COMPLETED", Some(0)),
    ];
    assert_eq!(array_exit_code(&all_ok), 0);
    assert_eq!(
        array_summary(12, &all_ok, 0),
        "Array 12: 2 tasks ended, 2 COMPLETED (exit 0)"
    );
    let mixed = [
        task(12, 0, "COMPLETED", Some(0)),
        task(13, 1, "FAILED", Some(3)),
        task(14, 2, "FAILED", Some(2)),
        task(15, 3, "CANCELLED", None),
    ];
    assert_eq!(array_exit_code(&mixed), 3);
    assert_eq!(
        array_summary(12, &mixed, 3),
        "Array 12: 4 tasks ended, 1 COMPLETED, 2 FAILED, 1 CANCELLED (exit 3)"
    );
    assert_eq!(final_line(&mixed[1], 3), "Job 12_1 FAILED (exit 3)");
    assert_eq!(array_exit_code(&[]), 0);
    assert_eq!(
        spinner_message(&mixed[1], Some((1, 4))),
        "Job 12_1 FAILED, 1 of 4 tasks ended"
    );
}

trait WithId {
    fn with_id(self, id: u64) -> Self;
}

impl WithId for JobInfo {
    fn with_id(mut self, id: u64) -> Self {
        self.id = id;
        self
    }
}

#[test]
fn later_directive_lines_override_earlier_ones() {
    let spec = spec_for("#YSUB -G 1\n#YSUB -G 3\n", &[]).unwrap();
    assert_eq!(spec.gpus, 3);
}

#[test]
fn bad_directives_name_the_line() {
    let err = spec_for("#!/bin/sh\n\n#YSUB --bogus\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("train.sh: line 3: invalid #YSUB directive: "),
        "{err}"
    );
    assert!(err.contains("--bogus"), "{err}");
    let err = spec_for("#YSUB -G x\n", &[]).unwrap_err().to_string();
    assert!(err.contains("line 1") && err.contains("'x'"), "{err}");
    assert!(spec_for("#YSUB stray.sh\n", &[]).is_err());
}

#[test]
fn workdir_is_made_absolute() {
    let spec = spec_for("#!/bin/sh\n", &["-D", "./runs/../out"]).unwrap();
    assert_eq!(spec.workdir, "/home/alice/proj/runs/../out");
    let spec = spec_for("#!/bin/sh\n", &["-D", "/scratch/x/"]).unwrap();
    assert_eq!(spec.workdir, "/scratch/x");
}

#[test]
fn export_option_selects_the_environment() {
    let spec = spec_for("#!/bin/sh\n", &["--export", "NONE"]).unwrap();
    assert!(spec.env.is_empty());
    let spec = spec_for("#!/bin/sh\n", &["--export=PATH,EPOCHS=3"]).unwrap();
    assert_eq!(spec.env.len(), 2);
    assert_eq!(spec.env["PATH"], "/bin");
    assert_eq!(spec.env["EPOCHS"], "3");
    assert!(spec_for("#!/bin/sh\n", &["--export", "9X"]).is_err());
}

#[test]
fn wrap_builds_a_shell_script() {
    let (options, script) = resolve(cli(&["--wrap", "nvidia-smi -L", "-G", "1"])).unwrap();
    let spec = build_spec(&options, script, &context()).unwrap();
    assert_eq!(spec.name, "wrap");
    assert_eq!(spec.script, "#!/bin/sh\nnvidia-smi -L\n");
    assert_eq!(spec.gpus, 1);
    assert!(resolve(cli(&["--wrap", "x", "s.sh"])).is_err());
    assert!(resolve(cli(&[])).is_err());
}

#[test]
fn script_files_are_read_with_their_arguments() {
    let path = std::env::temp_dir().join(format!("ysub-test-{}.sh", std::process::id()));
    std::fs::write(&path, "#!/bin/sh\n#YSUB -G 2\necho \"$@\"\n").unwrap();
    let path_text = path.to_str().unwrap();
    let (options, script) = resolve(cli(&["-t", "5", path_text, "a", "--b"])).unwrap();
    std::fs::remove_file(&path).unwrap();
    let spec = build_spec(&options, script, &context()).unwrap();
    assert_eq!(spec.name, path.file_name().unwrap().to_str().unwrap());
    assert_eq!(spec.args, ["a", "--b"]);
    assert_eq!((spec.gpus, spec.time_limit_secs), (2, 300));

    let err = resolve(cli(&["/nonexistent/job.sh"])).unwrap_err();
    assert!(
        format!("{err:#}").contains("'/nonexistent/job.sh'"),
        "{err:#}"
    );
}

fn finished(state: &str, exit_code: Option<i32>, signal: Option<i32>) -> JobInfo {
    JobInfo {
        id: 7,
        state: state.into(),
        exit_code,
        signal,
        ..Default::default()
    }
}

#[test]
fn wait_exit_codes() {
    assert_eq!(wait_exit_code(&finished("COMPLETED", Some(0), None)), 0);
    assert_eq!(wait_exit_code(&finished("FAILED", Some(3), None)), 3);
    assert_eq!(wait_exit_code(&finished("FAILED", None, Some(9))), 137);
    assert_eq!(wait_exit_code(&finished("FAILED", None, None)), 1);
    assert_eq!(wait_exit_code(&finished("CANCELLED", Some(0), None)), 1);
    assert_eq!(wait_exit_code(&finished("CANCELLED", None, Some(15))), 143);
    assert_eq!(wait_exit_code(&finished("TIMEOUT", None, None)), 1);
    assert_eq!(wait_exit_code(&finished("NODE_FAIL", None, None)), 1);
    assert_eq!(wait_exit_code(&finished("PREEMPTED", Some(2), None)), 2);
    assert_eq!(wait_exit_code(&finished("FAILED", Some(256), None)), 1);
}

#[test]
fn final_lines() {
    assert_eq!(
        final_line(&finished("COMPLETED", Some(0), None), 0),
        "Job 7 COMPLETED (exit 0)"
    );
    let mut job = finished("FAILED", None, Some(9));
    job.reason = "killed".into();
    assert_eq!(
        final_line(&job, 137),
        "Job 7 FAILED (exit 137, signal 9): killed"
    );
}

#[test]
fn only_terminal_states_end_the_wait() {
    assert!(!is_finished(&finished("PENDING", None, None)));
    assert!(!is_finished(&finished("PREEMPTING", None, None)));
    assert!(is_finished(&finished("TIMEOUT", None, None)));
}

#[test]
fn mail_user_is_an_address_or_a_user_name() {
    for hostile in ["|/tmp/x", "/etc/passwd", "-oQ/tmp", "a@b -oQ/tmp"] {
        let err = spec_for("#!/bin/sh\n", &[&format!("--mail-user={hostile}")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            ysched_common::mail_address::check_mail_user(hostile).unwrap_err()
        );
    }
    // In a script's directives too.
    let err = spec_for("#!/bin/sh\n#YSUB --mail-user=|/bin/evil\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("it contains '|'"), "{err}");
    for fine in ["alice", "ops@example.org"] {
        let spec = spec_for("#!/bin/sh\n", &["--mail-user", fine]).unwrap();
        assert_eq!(spec.mail_user, fine);
    }
}

#[test]
fn the_new_options_refuse_empty_values_and_name_their_bounds() {
    for (args, wanted) in [
        (&["--mail-user", ""][..], "--mail-user is empty"),
        (&["--partition", " "], "--partition is empty"),
        (&["--qos", ""], "--qos is empty"),
        (&["--comment", ""], "--comment is empty"),
        (&["--wckey", ""], "--wckey is empty"),
    ] {
        let err = spec_for("#!/bin/sh\n", args).unwrap_err().to_string();
        assert!(err.contains(wanted), "{args:?}: {err}");
    }
    for (args, wanted) in [
        (&["-w", ""][..], "--nodelist '' has an empty name"),
        (&["-x", "a,"], "--exclude 'a,' has an empty name"),
        (&["--begin", ""], "invalid --begin ''"),
        (&["--mail-type", ""], "invalid --mail-type ''"),
        (
            &["--ntasks-per-node", "10001"],
            "--ntasks-per-node 10001 exceeds the maximum of 10000",
        ),
        (
            &["--gpus-per-node", "100001"],
            "--gpus-per-node 100001 exceeds the maximum of 100000",
        ),
        (&["--gres", "gpu:"], "invalid --gres 'gpu:'"),
        (
            &["--open-mode", ""],
            "a value is required for '--open-mode <MODE>'",
        ),
    ] {
        let err = parse_error(&[args, &["s.sh"]].concat());
        assert!(err.contains(wanted), "{args:?}: {err}");
    }
    let long = |n: usize| "x".repeat(n);
    for (flag, n, wanted) in [
        ("--partition", 65, "partition is 65 bytes; the limit is 64"),
        ("--qos", 65, "QOS is 65 bytes; the limit is 64"),
        (
            "--mail-user",
            257,
            "mail address is 257 bytes; the limit is 256",
        ),
        (
            "--comment",
            1025,
            "comment is 1025 bytes; the limit is 1024",
        ),
        ("-w", 256, "node name is 256 bytes"),
    ] {
        let value = long(n);
        let err = spec_for("#!/bin/sh\n", &[flag, &value])
            .unwrap_err()
            .to_string();
        assert!(err.contains(wanted), "{flag}: {err}");
    }
}
