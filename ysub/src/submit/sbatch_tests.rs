//! Tests of sbatch's options applied to ysub's: every Slurm form of the translated options,
//! refusals with their alternatives, precedence, Slurm's flags on ysub's command line and
//! sbatch's own command line.

use super::sbatch::{parse_sbatch_command_line, resolve_sbatch, translate_sbatch_args};
use crate::slurm::slurm_flag_message;
use crate::slurm::table::{Action, Takes, SBATCH_OPTIONS};
use crate::submit::{build_spec, options_from_directives, SubmitContext, YsubCli};
use clap::Parser;
use std::path::PathBuf;
use ysched_common::array::DEFAULT_MAX_ARRAY_SIZE;
use ysched_proto::JobSpec;

fn words(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn context() -> SubmitContext {
    SubmitContext {
        cwd: PathBuf::from("/home/alice/proj"),
        env: vec![("PATH".into(), "/bin".into())],
        max_array_size: DEFAULT_MAX_ARRAY_SIZE,
    }
}

/// The spec a script's directives and ysub's command line `args` make.
fn spec(contents: &str, args: &[&str]) -> Result<JobSpec, String> {
    let cli = YsubCli::try_parse_from(std::iter::once("ysub").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    let options = options_from_directives(contents, "job.sh")
        .map_err(|e| e.to_string())?
        .overridden_by(cli.options);
    let script = crate::submit::BatchScript {
        default_name: "job.sh".into(),
        contents: contents.into(),
        args: vec![],
    };
    build_spec(&options, script, &context()).map_err(|e| e.to_string())
}

/// The spec of a script with these `#SBATCH` lines.
fn sbatch(lines: &[&str]) -> Result<JobSpec, String> {
    let mut contents = String::from("#!/bin/bash\n");
    for line in lines {
        contents.push_str(&format!("#SBATCH {line}\n"));
    }
    contents.push_str("python train.py\n");
    spec(&contents, &[])
}

/// The spec sbatch's command line `args` make (a `--wrap` job).
fn sbatch_cli(args: &[&str]) -> Result<JobSpec, String> {
    let options = translate_sbatch_args(&words(args)).map_err(|e| e.to_string())?;
    build_spec(
        &options,
        crate::submit::BatchScript::wrap("true"),
        &context(),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn every_time_limit_form() {
    for (form, secs) in [
        ("90", 5400),
        ("90:30", 5430),
        ("1:00:00", 3600),
        ("2-12", 2 * 86_400 + 12 * 3600),
        ("2-12:30", 2 * 86_400 + 12 * 3600 + 1800),
        ("1-00:00:01", 86_401),
        ("UNLIMITED", 0),
        ("infinite", 0),
    ] {
        assert_eq!(
            sbatch(&[&format!("-t {form}")]).unwrap().time_limit_secs,
            secs,
            "{form}"
        );
        assert_eq!(
            sbatch(&[&format!("--time={form}")])
                .unwrap()
                .time_limit_secs,
            secs,
            "{form}"
        );
    }
    let err = sbatch(&["-t 1:99:99"]).unwrap_err();
    assert!(
        err.starts_with("job.sh: line 2: #SBATCH -t: invalid time limit"),
        "{err}"
    );
}

#[test]
fn gpus_in_every_slurm_form() {
    let gpus = |lines: &[&str]| {
        let s = sbatch(lines).unwrap();
        (s.gpus, s.gpu_type, s.nodes)
    };
    assert_eq!(gpus(&["--gres=gpu:2"]), (2, String::new(), 0));
    assert_eq!(gpus(&["--gres=gpu"]), (1, String::new(), 0));
    assert_eq!(gpus(&["--gres=gpu:a100:4", "-N 2"]), (8, "a100".into(), 2));
    assert_eq!(gpus(&["--gres gpu:h100"]), (1, "h100".into(), 0));
    assert_eq!(gpus(&["--gpus=3"]), (3, String::new(), 0));
    assert_eq!(gpus(&["-G a100:2", "-N2"]), (2, "a100".into(), 2));
    assert_eq!(
        gpus(&["--gpus-per-node=4", "--nodes=3"]),
        (12, String::new(), 3)
    );
    assert_eq!(gpus(&["--gpus-per-node=h100:8"]), (8, "h100".into(), 0));
    // The later form wins, as any later option does.
    assert_eq!(gpus(&["--gres=gpu:2", "--gpus=5"]), (5, String::new(), 0));
    for (bad, wanted) in [
        (
            "--gres=shard:2",
            "ysched schedules GPUs only ('shard' is not gpu)",
        ),
        ("--gres=gpu:2,nvme:1", "give one resource"),
        ("--gres=gpu:a:b:c", "use gpu[:TYPE][:N]"),
        ("--gres=gpu:100001", "exceeds the maximum of 100000"),
        ("--gpus=x", "invalid --gpus 'x'"),
    ] {
        let err = sbatch(&[bad]).unwrap_err();
        assert!(err.contains(wanted), "{bad}: {err}");
        assert!(err.starts_with("job.sh: line 2: #SBATCH --"), "{err}");
    }
    let err = sbatch(&["--gpus-per-node=100000", "-N 2"]).unwrap_err();
    assert!(err.contains("200000 GPUs; the most is 100000"), "{err}");
}

#[test]
fn memory_in_slurm_and_submitit_units() {
    let mem = |line: &str| sbatch(&[line]).map(|s| s.mem_mib);
    assert_eq!(mem("--mem=4GB"), Ok(4096));
    assert_eq!(mem("--mem=4G"), Ok(4096));
    assert_eq!(mem("--mem 512MB"), Ok(512));
    assert_eq!(mem("--mem=2048"), Ok(2048));
    assert_eq!(mem("--mem=1TB"), Ok(1024 * 1024));
    assert_eq!(mem("--mem=1048576KB"), Ok(1024));
    let err = mem("--mem=0").unwrap_err();
    assert!(
        err.contains("--mem=0 (all of a node's memory) is not supported: give --exclusive"),
        "{err}"
    );
    assert!(mem("--mem=4XB")
        .unwrap_err()
        .contains("invalid memory size"));
}

#[test]
fn cpus_per_task_times_tasks_per_node() {
    let shape = |lines: &[&str]| {
        let s = sbatch(lines).unwrap();
        (s.cpus, s.nodes, s.ntasks_per_node)
    };
    assert_eq!(shape(&["-c 8"]), (8, 0, 0));
    assert_eq!(
        shape(&["--cpus-per-task=8", "--ntasks-per-node=4"]),
        (32, 0, 4)
    );
    assert_eq!(shape(&["-c 4", "-n 8", "-N 2"]), (16, 2, 4));
    assert_eq!(shape(&["-n 16", "--ntasks-per-node=8"]), (0, 2, 8));
    assert_eq!(shape(&["--ntasks=1"]), (0, 0, 0));
    assert_eq!(shape(&["-N 4", "-n 4"]), (0, 4, 0));
    assert_eq!(shape(&["-n 4"]), (0, 0, 4));
    assert_eq!(shape(&["--mincpus=6"]), (6, 0, 0));
    for (lines, wanted) in [
        (&["-n 5", "-N 2"][..], "does not divide over 2 nodes"),
        (
            &["-n 8", "-N 2", "--ntasks-per-node=3"],
            "is not --nodes 2 × --ntasks-per-node 3",
        ),
        (
            &["-n 7", "--ntasks-per-node=2"],
            "not a multiple of --ntasks-per-node 2",
        ),
        (&["-c 0"], "--cpus-per-task must be at least 1"),
        (
            &["-c 100000", "--ntasks-per-node=2"],
            "200000 CPUs per node; the most is 100000",
        ),
    ] {
        let err = sbatch(lines).unwrap_err();
        assert!(err.contains(wanted), "{lines:?}: {err}");
    }
    // ysub's own -c is CPUs per node, and wins over #SBATCH.
    let s = spec("#SBATCH -c 4 --ntasks-per-node=2\n", &["-c", "3"]).unwrap();
    assert_eq!(s.cpus, 3);
}

#[test]
fn nodes_and_node_lists() {
    let s = sbatch(&["-N 2-2"]).unwrap();
    assert_eq!(s.nodes, 2);
    let err = sbatch(&["--nodes=2-4"]).unwrap_err();
    assert!(err.contains("exactly N nodes: give one number"), "{err}");
    let s = sbatch(&["-w node[1-3]", "-x gpu07"]).unwrap();
    assert_eq!(s.nodelist, ["node1", "node2", "node3"]);
    assert_eq!(s.exclude, ["gpu07"]);
    assert_eq!(s.nodes, 3, "the node count defaults to the list's length");
    let s = sbatch(&["--nodelist=a,b", "--gpus-per-node=2"]).unwrap();
    assert_eq!((s.nodes, s.gpus), (2, 4));
    let err = sbatch(&["-w n[1-20000]"]).unwrap_err();
    assert!(err.contains("more than 10000"), "{err}");
    let err = spec("#!/bin/sh\n", &["--exclude", "x\u{1b}y"]).unwrap_err();
    assert!(err.contains("control character"), "{err}");
}

#[test]
fn output_patterns_take_the_letters_ysched_expands() {
    let s = sbatch(&["-o %x-%j.out", "-e err-%A_%a-%N-%u-100%%.txt"]).unwrap();
    assert_eq!(s.stdout_path, "%x-%j.out");
    assert_eq!(s.stderr_path, "err-%A_%a-%N-%u-100%%.txt");
    for (bad, wanted) in [
        (
            "-o out-%t.log",
            "'%t' (task id) in 'out-%t.log' has no ysched meaning: use %j %x %A %a %N %u or %%",
        ),
        ("--output=%J.out", "'%J' (job id.step id)"),
        ("-e %4a.err", "'%4a': padding is not supported; write %a"),
        ("-o %q", "'%q' in '%q' has no ysched meaning"),
    ] {
        let err = sbatch(&[bad]).unwrap_err();
        assert!(err.contains(wanted), "{bad}: {err}");
    }
}

#[test]
fn the_rest_of_the_translations() {
    let s = sbatch(&[
        "-J x -A proj",
        "--array=0-9%2",
        "-d afterok:12",
        "--signal=B:USR1@90",
        "--no-requeue",
        "--export=NONE,A=1",
        "-D /scratch/run",
        "-C ib&nvme",
        "-p gpu",
        "--qos=normal",
        "--exclusive",
        "--begin=now+1hour",
        "--mail-type=END,fail",
        "--mail-user=a@b.c",
        "--open-mode=append",
        "--wckey=proj7",
        "-H",
        "--parsable",
    ])
    .unwrap();
    assert_eq!((s.name.as_str(), s.account.as_str()), ("x", "proj"));
    assert_eq!(
        (s.array.as_str(), s.dependency.as_str()),
        ("0-9%2", "afterok:12")
    );
    let w = s.warn_signal.unwrap();
    assert_eq!((w.signal, w.secs, w.batch_only), (10, 90, true));
    assert!(s.no_requeue && s.hold && s.exclusive && s.open_append);
    assert_eq!(s.env.len(), 1);
    assert_eq!(s.workdir, "/scratch/run");
    assert_eq!(s.constraints, ["ib", "nvme"]);
    assert_eq!(
        (s.partition.as_str(), s.qos.as_str(), s.tier.as_str()),
        ("gpu", "normal", ""),
        "-p in #SBATCH is the partition, not the tier"
    );
    let now = ysched_common::time::now_ms() as u64 / 1000;
    assert!((now + 3590..=now + 3610).contains(&s.begin_unix_secs));
    assert_eq!(s.mail_types, ["END", "FAIL"]);
    assert_eq!(s.mail_user, "a@b.c");
    assert_eq!(s.comment, "wckey=proj7");
    // --comment wins over --wckey; --requeue cancels an earlier --no-requeue.
    let s = sbatch(&["--wckey=k --comment=note", "--no-requeue", "--requeue"]).unwrap();
    assert_eq!(s.comment, "note");
    assert!(!s.no_requeue);
    for (bad, wanted) in [
        ("-C a|b", "'|' is not supported"),
        ("--exclusive=user", "'user' is not supported"),
        (
            "--mail-type=STAGE_OUT",
            "'STAGE_OUT' is not one of NONE, BEGIN",
        ),
        ("--mail-type=NONE,END", "NONE cannot be combined"),
        ("--open-mode=sometimes", "invalid value 'sometimes'"),
        ("--begin=someday", "invalid --begin 'someday'"),
        ("--signal=R:USR1", "invalid --signal"),
        ("-d aftercorr:1", "unknown type 'aftercorr'"),
        ("--comment=", "--comment is empty"),
        ("-p ''", "--partition is empty"),
    ] {
        let err = sbatch(&[bad]).unwrap_err();
        assert!(err.contains(wanted), "{bad}: {err}");
    }
    let long = "x".repeat(1025);
    let err = sbatch(&[&format!("--comment={long}")]).unwrap_err();
    assert!(
        err.contains("comment is 1025 bytes; the limit is 1024"),
        "{err}"
    );
    // NONE alone is no mail at all.
    assert!(sbatch(&["--mail-type=none"]).unwrap().mail_types.is_empty());
}

#[test]
fn refused_options_name_the_line_and_the_alternative() {
    let err = spec(
        "#!/bin/bash\n#SBATCH -J x\n\n#SBATCH --mem-per-gpu=8G\nrun\n",
        &[],
    )
    .unwrap_err();
    assert_eq!(
        err,
        "job.sh: line 4: #SBATCH --mem-per-gpu is not supported: give --mem (memory per node) instead"
    );
    for (line, wanted) in [
        (
            "--reservation=maint",
            "line 2: #SBATCH --reservation is not supported: ysched has no reservations",
        ),
        ("-s", "#SBATCH -s is not supported: ysched never shares"),
        ("-Hk", "#SBATCH -k is not supported"),
        (
            "--frobnicate",
            "line 2: #SBATCH --frobnicate is not an sbatch option",
        ),
        ("-j 4", "#SBATCH -j is not an sbatch option"),
        ("hetjob", "#SBATCH hetjob: ysched has no heterogeneous jobs"),
        ("-J", "#SBATCH -J needs a value"),
        ("--hold=yes", "#SBATCH --hold takes no value"),
        (
            "--wrap=true",
            "#SBATCH --wrap is not supported: --wrap belongs on the command line",
        ),
        ("-J a stray", "#SBATCH stray: not an option"),
    ] {
        let err = sbatch(&[line]).unwrap_err();
        assert!(err.contains(wanted), "{line}: {err}");
    }
    // Harmless options are accepted and change nothing.
    let mut harmless = sbatch(&["-Q -v --ignore-pbs --wait-all-nodes=1"]).unwrap();
    let plain = sbatch(&[]).unwrap();
    harmless.script = plain.script.clone();
    assert_eq!(harmless, plain);
}

#[test]
fn ysub_lines_win_over_sbatch_lines_and_the_command_line_over_both() {
    let contents = "#!/bin/bash\n\
                    #SBATCH -J from-sbatch --gres=gpu:2 -t 30 -p gpu\n\
                    #YSUB -J from-ysub\n\
                    #SBATCH --mem=4GB -o %x.out\n\
                    #YSUB -G 1\n\
                    echo hi\n";
    let s = spec(contents, &[]).unwrap();
    assert_eq!(s.name, "from-ysub");
    assert_eq!(s.gpus, 1, "#YSUB -G replaces #SBATCH --gres");
    assert_eq!((s.time_limit_secs, s.mem_mib), (1800, 4096));
    assert_eq!((s.partition.as_str(), s.tier.as_str()), ("gpu", ""));
    assert_eq!(s.stdout_path, "%x.out");
    let s = spec(
        contents,
        &["-J", "cli", "-p", "high", "--gpus-per-node", "4"],
    )
    .unwrap();
    assert_eq!((s.name.as_str(), s.gpus), ("cli", 4));
    assert_eq!((s.partition.as_str(), s.tier.as_str()), ("gpu", "high"));
    // Directives after the first command are not read, as sbatch does not read them.
    let s = spec("#!/bin/sh\necho\n#SBATCH --mem-per-gpu=1G\n", &[]).unwrap();
    assert_eq!(s.mem_mib, 0);
}

#[test]
fn ysub_takes_the_translated_flags_on_its_command_line() {
    let s = spec(
        "#!/bin/sh\n",
        &[
            "-w",
            "n[1-2]",
            "-x",
            "n3",
            "--exclusive",
            "-b",
            "now+60",
            "--mail-type",
            "ALL",
            "--mail-user",
            "me",
            "--ntasks-per-node",
            "8",
            "--partition",
            "gpu",
            "-q",
            "high",
            "--slurm-env",
            "--open-mode",
            "append",
            "--comment",
            "c",
            "--gres",
            "gpu:a100:2",
            "-H",
            "-C",
            "ib",
        ],
    )
    .unwrap();
    assert_eq!(s.nodelist, ["n1", "n2"]);
    assert_eq!((s.nodes, s.gpus, s.gpu_type.as_str()), (2, 4, "a100"));
    assert!(s.exclusive && s.slurm_env && s.open_append && s.hold);
    assert_eq!(
        (s.ntasks_per_node, s.mail_types.clone()),
        (8, vec!["ALL".to_string()])
    );
    assert_eq!((s.partition.as_str(), s.qos.as_str()), ("gpu", "high"));
    assert_eq!((s.comment.as_str(), s.mail_user.as_str()), ("c", "me"));
    assert_eq!(s.constraints, ["ib"]);
    let err = spec("#!/bin/sh\n", &["-G", "2", "--gres", "gpu:1"]).unwrap_err();
    assert!(err.contains("give the GPUs once"), "{err}");
    let err = spec(
        "#!/bin/sh\n",
        &["--gpu-type", "H100", "--gres", "gpu:a100:1"],
    )
    .unwrap_err();
    assert!(err.contains("name different GPU models"), "{err}");
    let err = spec("#!/bin/sh\n", &["--ntasks-per-node", "0"]).unwrap_err();
    assert!(
        err.contains("--ntasks-per-node must be at least 1"),
        "{err}"
    );
    // --no-requeue then --requeue: the last wins.
    let s = spec("#YSUB --no-requeue\n", &["--requeue"]).unwrap();
    assert!(!s.no_requeue);
}

/// What ysub prints for a command line clap refuses.
fn ysub_refusal(args: &[&str]) -> String {
    use clap::CommandFactory;
    let error =
        YsubCli::try_parse_from(std::iter::once("ysub").chain(args.iter().copied())).unwrap_err();
    let own = slurm_flag_message(&error);
    let text = crate::args::clap_error_text("ysub", &YsubCli::command(), &error);
    match own {
        Some(own) => format!("ysub: error: {own}"),
        None => text,
    }
}

#[test]
fn slurm_flags_on_the_command_line_get_the_tables_word() {
    assert_eq!(
        ysub_refusal(&["--reservation", "maint", "job.sh"]),
        "ysub: error: --reservation is not supported: ysched has no reservations: ask your \
         administrator for a tier, or give --begin"
    );
    assert_eq!(
        ysub_refusal(&["--mem-per-gpu=8G", "job.sh"]),
        "ysub: error: --mem-per-gpu is not supported: give --mem (memory per node) instead"
    );
    assert!(ysub_refusal(&["-n", "4", "job.sh"]).contains("-n is taken in #SBATCH lines (tasks in all); on ysub's command line give --ntasks-per-node N"));
    assert!(
        ysub_refusal(&["-Q", "job.sh"]).contains("-Q is Slurm's; ysub takes it in #SBATCH lines")
    );
    // A typo that is no Slurm option keeps clap's tip.
    assert!(
        ysub_refusal(&["--job-nam", "x"]).contains("tip: a similar argument exists: '--job-name'")
    );
    // The flags clap once misread are ysub's own now.
    for flags in [
        &["--nodelist", "n1"][..],
        &["--mail-type", "END"],
        &["--requeue"],
        &["--begin", "now"],
    ] {
        let args = std::iter::once("ysub")
            .chain(flags.iter().copied())
            .chain(["job.sh"]);
        assert!(YsubCli::try_parse_from(args).is_ok(), "{flags:?}");
    }
}

#[test]
fn the_full_text_of_a_refusal_keeps_usage_and_drops_the_tip() {
    use clap::CommandFactory;
    let error = YsubCli::try_parse_from(["ysub", "--reservation", "x", "job.sh"]).unwrap_err();
    let text = crate::args::clap_error_text_with_hook(
        "ysub",
        &YsubCli::command(),
        &error,
        slurm_flag_message,
    );
    assert!(
        text.starts_with("ysub: error: --reservation is not supported: "),
        "{text}"
    );
    assert!(!text.contains("tip:"), "{text}");
    assert!(text.contains("Usage: ysub [OPTIONS] SCRIPT"), "{text}");
}

#[test]
fn the_sbatch_command_line_takes_p_as_the_partition() {
    let s = sbatch_cli(&["-p", "gpu", "--gres=gpu:1", "-t", "10", "--parsable"]).unwrap();
    assert_eq!(
        (s.partition.as_str(), s.tier.as_str(), s.gpus),
        ("gpu", "", 1)
    );
    assert_eq!(s.time_limit_secs, 600);
    let line =
        parse_sbatch_command_line(&words(&["-J", "x", "--wrap", "echo hi", "--", "ignored"]))
            .unwrap();
    assert_eq!(line.wrap.as_deref(), Some("echo hi"));
    assert_eq!(line.command, ["ignored"]);
    let line = parse_sbatch_command_line(&words(&["-N2", "run.sh", "-p", "x"])).unwrap();
    assert_eq!(line.options.nodes, Some(2));
    assert_eq!(
        line.command,
        ["run.sh", "-p", "x"],
        "options after the script are its own"
    );
    assert_eq!(
        translate_sbatch_args(&words(&["--mem-per-cpu=1G"]))
            .unwrap_err()
            .to_string(),
        "--mem-per-cpu is not supported: give --mem (memory per node) instead"
    );
    assert!(translate_sbatch_args(&words(&["run.sh"])).is_err());
    let (options, script) = resolve_sbatch(
        parse_sbatch_command_line(&words(&["-J", "cli"])).unwrap(),
        Some("#!/bin/sh\n#SBATCH -J script -t 5\nrun\n".into()),
    )
    .unwrap();
    assert_eq!(options.job_name.as_deref(), Some("cli"));
    assert_eq!(options.time.as_deref(), Some("5"));
    assert_eq!(script.default_name, "sbatch");
}

#[test]
fn every_option_the_table_sends_on_is_ysubs() {
    for option in SBATCH_OPTIONS {
        if let Action::Same(ysub) = option.action {
            // ysub has the option the table sends the value to.
            let value = match option.takes {
                Takes::Nothing => vec![format!("--{ysub}")],
                _ => vec![format!("--{ysub}=1")],
            };
            let err = super::options::OptionWords::try_parse_from(&value).err();
            assert!(
                err.as_ref()
                    .is_none_or(|e| e.kind() != clap::error::ErrorKind::UnknownArgument),
                "{}: ysub has no --{ysub}",
                option.long
            );
        }
    }
}
