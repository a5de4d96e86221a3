//! Real jobs through the node's real supervisor (the built `noded` binary), real signals. The jobs'
//! containment (cgroups, process groups) has its own tests in `containment.rs`.

mod support;

use nix::unistd::User;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;
use ysched_noded::launch::{
    ArrayTaskParams, JobDir, JobEvent, JobParams, JobRecord, Recovery, Spool,
};

#[tokio::test]
async fn job_gets_environment_workdir_and_output() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let mut job = fx.job(
        101,
        "#!/bin/sh\n\
         echo \"pwd=$(pwd)\"\n\
         echo \"id=$YS_JOB_ID name=$YS_JOB_NAME node=$YS_NODE restarts=$YS_RESTART_COUNT\"\n\
         echo \"cuda=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER\"\n\
         echo \"nodes=$YS_NNODES rank=$YS_NODE_RANK list=$YS_NODELIST\"\n\
         echo \"ckpt=$YS_CHECKPOINT_DIR\"\n\
         test -d \"$YS_CHECKPOINT_DIR\" && echo ckpt-exists\n\
         echo \"foo=$FOO args=$*\"\n\
         echo to-stderr >&2\n\
         exit 3\n",
    );
    job.gpus = vec![1, 3];
    job.env = BTreeMap::from([("FOO".to_string(), "bar".to_string())]);
    job.args = vec!["a".into(), "b c".into()];
    let checkpoint_dir = fx.workdir().join("ck/deep/101");
    job.checkpoint_dir = checkpoint_dir.to_string_lossy().into_owned();
    launcher.launch(job).unwrap();

    let outcome = events.wait_for_end(101).await;
    let started = outcome.started.expect("JobStarted before JobFinished");
    assert!(started.pid > 1 && started.time_ms > 0);
    let finished = outcome.finished;
    assert_eq!(finished.exit_code, Some(3), "{finished:?}");
    assert_eq!(finished.signal, None);
    assert!(finished.error.is_empty(), "{finished:?}");
    assert!(!finished.timed_out && !finished.stop_requested && !finished.killed);
    assert!(finished.end_time_ms >= started.time_ms);

    let out = fx.output("ysched-101.out");
    let workdir = fx.workdir().display();
    assert!(out.contains(&format!("pwd={workdir}\n")), "{out}");
    assert!(
        out.contains("id=101 name=job101 node=n1 restarts=0\n"),
        "{out}"
    );
    assert!(out.contains("cuda=1,3 order=PCI_BUS_ID\n"), "{out}");
    assert!(out.contains("nodes=1 rank=0 list=n1\n"), "{out}");
    assert!(
        out.contains(&format!("ckpt={}\nckpt-exists\n", checkpoint_dir.display())),
        "{out}"
    );
    assert!(out.contains("foo=bar args=a b c\n"), "{out}");
    assert!(
        out.contains("to-stderr\n"),
        "stderr goes to the stdout file: {out}"
    );

    // Kept until schedd acknowledges it, then forgotten.
    let unacked = launcher.unacked_finished();
    assert_eq!(unacked, vec![finished]);
    assert!(launcher.running_jobs().is_empty());
    launcher.ack(101).unwrap();
    assert!(launcher.unacked_finished().is_empty());
    assert!(!fx.spool.path().join("jobs/101").exists());
}

#[tokio::test]
async fn script_without_interpreter_line_runs_under_sh_with_separate_stderr() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let mut job = fx.job(102, "echo out-$0\necho err >&2\n");
    job.stdout_path = "logs-%x-%u.%j.out".into();
    job.stderr_path = format!("{}/err-%j-%%.txt", fx.workdir().display());
    job.env = BTreeMap::from([("CUDA_VISIBLE_DEVICES".to_string(), "7".to_string())]);
    launcher.launch(job.clone()).unwrap();
    let finished = events.wait_for_end(102).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    let user = &job.user;
    let out = fx.output(&format!("logs-job102-{user}.102.out"));
    assert!(out.starts_with("out-"), "{out}");
    assert!(
        out.contains("/jobs/102/script"),
        "run as `sh <script>`: {out}"
    );
    assert_eq!(fx.output("err-102-%.txt"), "err\n");
}

#[tokio::test]
async fn array_task_gets_its_variables_and_output_file() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let script = "#!/bin/sh\n\
                  echo \"job=$YS_JOB_ID array=${YS_ARRAY_JOB_ID-unset} task=${YS_ARRAY_TASK_ID-unset}\"\n\
                  echo \"count=${YS_ARRAY_TASK_COUNT-unset} min=${YS_ARRAY_TASK_MIN-unset} max=${YS_ARRAY_TASK_MAX-unset}\"\n";
    let mut task = fx.job(119, script);
    task.array = Some(ArrayTaskParams {
        array_job_id: 112,
        task_id: 7,
        task_count: 3,
        task_min: 1,
        task_max: 9,
    });
    task.env = BTreeMap::from([("YS_ARRAY_TASK_ID".to_string(), "99".to_string())]);
    launcher.launch(task).unwrap();
    // A plain job that exports the variables itself does not get them.
    let mut plain = fx.job(120, script);
    plain.stdout_path = "plain-%A_%a.out".into();
    plain.env = BTreeMap::from([("YS_ARRAY_JOB_ID".to_string(), "1".to_string())]);
    launcher.launch(plain).unwrap();
    assert_eq!(events.wait_for_end(119).await.finished.exit_code, Some(0));
    assert_eq!(events.wait_for_end(120).await.finished.exit_code, Some(0));

    assert_eq!(
        fx.output("ysched-112_7.out"),
        "job=119 array=112 task=7\ncount=3 min=1 max=9\n"
    );
    assert_eq!(
        fx.output("plain-120_0.out"),
        "job=120 array=unset task=unset\ncount=unset min=unset max=unset\n"
    );
}

#[tokio::test]
async fn time_limit_terminates_and_reports_timed_out() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let mut job = fx.job(401, "#!/bin/sh\nsleep 100\n");
    job.time_limit_secs = 1;
    job.grace_secs = 1;
    launcher.launch(job).unwrap();
    let outcome = events.wait_for_end(401).await;
    let finished = outcome.finished;
    assert!(finished.timed_out, "{finished:?}");
    assert!(!finished.stop_requested);
    assert_eq!(finished.signal, Some(libc::SIGTERM));
    let started = outcome.started.unwrap();
    assert!(
        finished.term_time_ms - started.time_ms >= 1000,
        "{finished:?} {started:?}"
    );
}

#[tokio::test]
async fn checkpoint_written_after_sigterm_is_reported_saved() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let mut job = fx.job(
        501,
        "#!/bin/sh\n\
         trap 'echo saved > \"$YS_CHECKPOINT_DIR/state\"; kill $! 2>/dev/null; exit 0' TERM\n\
         sh -c 'echo ready; exec sleep 100' &\n\
         wait\n",
    );
    // `ready` comes from the background helper once it has exec'd: a SIGTERM that reaches
    // the shell's forked child before its exec is caught by the trap the child inherited
    // and lost at the exec, and the `sleep` then lives to the end of the grace (the job
    // `killed`: seen in CI and under load here). The trap ends the helper too, as a job
    // saving its checkpoint would end its helpers.
    job.checkpoint_dir = fx.workdir().join("ck501").to_string_lossy().into_owned();
    launcher.launch(job).unwrap();
    events.wait_for_start(501).await;
    // Wait for the trap to be installed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fx.output("ysched-501.out").contains("ready") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(launcher.stop(501, 10));
    let finished = events.wait_for_end(501).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    assert!(
        finished.stop_requested && !finished.killed && finished.checkpoint_saved,
        "{finished:?}\noutput: {}\nsupervisor: {}",
        fx.output("ysched-501.out"),
        fx.supervisor_log()
    );
}

/// An exec refused with ETXTBSY (the file is open for writing somewhere: a process forked
/// while the script was being written holds a copy of the descriptor until its own exec) is
/// tried again for a while, not reported as a failed job. Here the job's interpreter is held
/// open for writing for 300 ms after the launch.
#[tokio::test]
async fn an_exec_refused_as_text_file_busy_is_tried_again() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let interpreter = fx.workdir().join("busy-sh");
    std::fs::copy("/bin/sh", &interpreter).unwrap();
    std::fs::set_permissions(&interpreter, std::fs::Permissions::from_mode(0o755)).unwrap();
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(&interpreter)
        .unwrap();
    let script = format!("#!{}\necho ran\n", interpreter.display());
    launcher.launch(fx.job(801, &script)).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(held);
    let outcome = events.wait_for_end(801).await;
    assert_eq!(
        (outcome.finished.exit_code, outcome.finished.error.as_str()),
        (Some(0), ""),
        "{:?}",
        outcome.finished
    );
    assert_eq!(fx.output("ysched-801.out"), "ran\n");
}

#[tokio::test]
async fn requeued_job_appends_to_its_earlier_output() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let script = "#!/bin/sh\necho run $YS_RESTART_COUNT\n";
    launcher.launch(fx.job(601, script)).unwrap();
    events.wait_for_end(601).await;
    launcher.ack(601).unwrap();
    let mut again = fx.job(601, script);
    again.restart_count = 1;
    launcher.launch(again).unwrap();
    events.wait_for_end(601).await;
    assert_eq!(fx.output("ysched-601.out"), "run 0\nrun 1\n");
    // A fresh run (restart_count 0) truncates.
    launcher.launch(fx.job(601, script)).unwrap();
    events.wait_for_end(601).await;
    assert_eq!(fx.output("ysched-601.out"), "run 0\n");
}

#[tokio::test]
async fn launch_failures_are_reported_with_a_clear_error() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();

    let mut bad_workdir = fx.job(701, "#!/bin/sh\ntrue\n");
    bad_workdir.workdir = "/nonexistent/workdir".into();
    let mut no_user = fx.job(702, "#!/bin/sh\ntrue\n");
    no_user.uid = 3_999_999_999;
    no_user.user = "ghost".into();
    let bad_interpreter = fx.job(703, "#!/nonexistent/interpreter\n");
    let mut bad_output = fx.job(704, "#!/bin/sh\ntrue\n");
    bad_output.stdout_path = "no-such-dir/out".into();
    for job in [&bad_workdir, &no_user, &bad_interpreter, &bad_output] {
        launcher.launch(job.clone()).unwrap();
    }
    let mut expect = vec![
        (701, "/nonexistent/workdir"),
        (702, "no such user"),
        (703, "interpreter /nonexistent/interpreter does not exist"),
        (704, "cannot open output file"),
    ];
    if is_root() {
        // Root could switch to any group: the job's gid must be one of the user's.
        let mut foreign_group = fx.job(
            705,
            "#!/bin/sh
true
",
        );
        foreign_group.gid = 3_999_999_999;
        launcher.launch(foreign_group).unwrap();
        expect.push((705, "is not a group of user"));
    }
    for &(job_id, message) in &expect {
        let outcome = events.wait_for_end(job_id).await;
        let finished = outcome.finished;
        assert!(
            finished.error.contains(message),
            "job {job_id}: {finished:?}"
        );
        assert_eq!(finished.exit_code, None);
        assert!(outcome.started.is_none(), "job {job_id} never started");
    }
    assert_eq!(launcher.unacked_finished().len(), expect.len());
}

#[tokio::test]
async fn job_runs_as_nobody_when_root() {
    if !is_root() {
        skipped("not root: running jobs as another user needs root");
        return;
    }
    let Some(nobody) = User::from_name("nobody").unwrap() else {
        skipped("no user nobody here");
        return;
    };
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    let mut job = fx.job(801, "#!/bin/sh\necho \"uid=$(id -u) gid=$(id -g)\"\n");
    job.user = nobody.name.clone();
    job.uid = nobody.uid.as_raw();
    job.gid = nobody.gid.as_raw();
    let checkpoint_dir = fx.workdir().join("ck801");
    job.checkpoint_dir = checkpoint_dir.to_string_lossy().into_owned();
    launcher.launch(job).unwrap();
    let finished = events.wait_for_end(801).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    let out = fx.output("ysched-801.out");
    assert_eq!(out, format!("uid={} gid={}\n", nobody.uid, nobody.gid));
    let owner = |path: &Path| std::fs::metadata(path).unwrap().uid();
    assert_eq!(
        owner(&fx.workdir().join("ysched-801.out")),
        nobody.uid.as_raw()
    );
    assert_eq!(owner(&checkpoint_dir), nobody.uid.as_raw());

    // The output file is opened as the job user: a root-only place is refused.
    let mut sneaky = fx.job(802, "#!/bin/sh\ntrue\n");
    sneaky.user = nobody.name.clone();
    sneaky.uid = nobody.uid.as_raw();
    sneaky.gid = nobody.gid.as_raw();
    let root_only = tempfile::tempdir().unwrap();
    sneaky.stdout_path = root_only.path().join("out").to_string_lossy().into_owned();
    launcher.launch(sneaky).unwrap();
    let finished = events.wait_for_end(802).await.finished;
    assert!(
        finished.error.contains("cannot open output file"),
        "{finished:?}"
    );
    assert!(!root_only.path().join("out").exists());
}

#[tokio::test]
async fn jobs_survive_a_noded_restart() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    // Ends by itself after the restart.
    launcher
        .launch(fx.job(901, "#!/bin/sh\nsleep 2\nexit 7\n"))
        .unwrap();
    // Hits its time limit after the restart.
    let mut limited = fx.job(902, "#!/bin/sh\nsleep 100\n");
    limited.time_limit_secs = 3;
    limited.grace_secs = 1;
    launcher.launch(limited).unwrap();
    // Is stopped by the new noded.
    launcher
        .launch(fx.job(903, "#!/bin/sh\nsleep 100\n"))
        .unwrap();
    let mut pids = HashMap::new();
    for job_id in [901, 902, 903] {
        pids.insert(job_id, events.wait_for_start(job_id).await.pid);
    }

    // noded "restarts": the old launcher goes away, the supervisor and its jobs stay.
    drop(launcher);
    drop(events);
    let (launcher, mut events) = fx.launcher();
    let recovery = launcher.recover().await.unwrap();
    assert_eq!(
        recovery,
        Recovery {
            reattached: vec![901, 902, 903],
            ended: vec![]
        }
    );
    assert_eq!(launcher.running_jobs(), vec![901, 902, 903]);

    assert!(launcher.stop(903, 1));
    let stopped = events.wait_for_end(903).await.finished;
    assert_eq!(stopped.signal, Some(libc::SIGTERM), "{stopped:?}");
    assert!(stopped.stop_requested);

    let ended = events.wait_for_end(901).await.finished;
    assert_eq!(ended.exit_code, Some(7), "{ended:?}");
    assert!(ended.error.is_empty());

    let limited = events.wait_for_end(902).await.finished;
    assert!(limited.timed_out, "{limited:?}");
    assert_eq!(limited.signal, Some(libc::SIGTERM));

    for pid in pids.values() {
        assert_group_empties(*pid).await;
    }
    let mut reported: Vec<u64> = launcher
        .unacked_finished()
        .iter()
        .map(|f| f.job_id)
        .collect();
    reported.sort();
    assert_eq!(reported, vec![901, 902, 903]);
}

#[tokio::test]
async fn jobs_that_ended_while_noded_was_away_are_reported() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    launcher
        .launch(fx.job(1001, "#!/bin/sh\nsleep 1\nexit 5\n"))
        .unwrap();
    events.wait_for_start(1001).await;
    drop(launcher);
    drop(events);
    // The job ends while no noded watches (its supervisor records the end in the journal).
    let root = fx.spool.path().canonicalize().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ysched_noded::launch::journal::read_live(&root)
        .unwrap()
        .jobs[&1001]
        .ended
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the supervisor never recorded the end"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A job of an older noded whose process vanished without a word (pid 2^22+1 is beyond
    // pid_max's default).
    let spool = Spool::open(fx.spool.path()).unwrap();
    let dir: JobDir = spool.create_job_dir(1002).unwrap();
    let mut record = JobRecord::unreadable(1002);
    record.job = JobParams {
        job_id: 1002,
        ..Default::default()
    };
    record.old_process_pid = Some(4_194_305);
    dir.write_record(&record).unwrap();

    let (launcher, _events) = fx.launcher();
    let recovery = launcher.recover().await.unwrap();
    assert_eq!(recovery.reattached, Vec::<u64>::new());
    assert_eq!(recovery.ended, vec![1001, 1002]);
    let finished = launcher.unacked_finished();
    assert_eq!(finished.len(), 2);
    assert_eq!(finished[0].exit_code, Some(5), "{:?}", finished[0]);
    assert!(finished[0].error.is_empty());
    assert_eq!(finished[1].error, "lost: shepherd gone");
    assert!(launcher.running_jobs().is_empty());
}

/// `nobody`, when this test runs as root and the user exists; jobs as another user need root.
fn nobody() -> Option<User> {
    if !is_root() {
        skipped("not root: running jobs as another user needs root");
        return None;
    }
    let nobody = User::from_name("nobody").unwrap();
    if nobody.is_none() {
        skipped("no user nobody here");
    }
    nobody
}

fn as_user(mut job: JobParams, user: &User) -> JobParams {
    job.user = user.name.clone();
    job.uid = user.uid.as_raw();
    job.gid = user.gid.as_raw();
    job
}

#[tokio::test]
async fn root_jobs_are_refused_when_the_node_does_not_allow_them() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_refusing_root();
    // uid 0, whoever runs the test: the refusal comes before anything is resolved.
    let mut job = fx.job(1101, "#!/bin/sh\necho ran\n");
    job.user = "root".into();
    job.uid = 0;
    job.gid = 0;
    job.restart_count = 2;
    launcher.launch(job).unwrap();
    let outcome = events.wait_for_end(1101).await;
    assert!(outcome.started.is_none());
    let finished = outcome.finished;
    assert_eq!(
        finished.error,
        "node n1 refuses to run jobs as root (node.allow_root_jobs = false)"
    );
    assert_eq!(finished.restart_count, 2, "the refused run is named");
    assert_eq!(finished.exit_code, None);
    assert!(
        !fx.workdir().join("ysched-1101.out").exists(),
        "nothing ran"
    );
    assert!(!fx.spool.path().join("jobs/1101/script").exists());
    // Kept in the spool and reported until acknowledged, like any other end.
    assert_eq!(launcher.unacked_finished(), vec![finished]);
    launcher.ack(1101).unwrap();
    assert!(launcher.unacked_finished().is_empty());

    // Other users' jobs run as usual.
    let other = match nobody() {
        Some(nobody) => as_user(fx.job(1102, "#!/bin/sh\necho ran\n"), &nobody),
        None if !is_root() => fx.job(1102, "#!/bin/sh\necho ran\n"),
        None => return,
    };
    launcher.launch(other).unwrap();
    let finished = events.wait_for_end(1102).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    assert_eq!(fx.output("ysched-1102.out"), "ran\n");
}

#[tokio::test]
async fn another_run_of_a_job_still_running_is_refused_and_reported() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    launcher
        .launch(fx.job(1201, "#!/bin/sh\nsleep 100\n"))
        .unwrap();
    events.wait_for_start(1201).await;
    // The same run again: ignored, nothing reported.
    assert!(launcher.launch(fx.job(1201, "true")).is_err());
    // A later run while the earlier one is still here: that run ends at once, with an error.
    let mut later = fx.job(1201, "true");
    later.restart_count = 1;
    launcher.launch(later).unwrap();
    let refused = |events: &Events| {
        events.seen.iter().find_map(|e| match e {
            JobEvent::Finished(f) if f.job_id == 1201 && f.restart_count == 1 => Some(f.clone()),
            _ => None,
        })
    };
    events
        .until("refusal of run 1", |events| refused(events).is_some())
        .await;
    let finished = refused(&events).unwrap();
    assert!(
        finished.error.contains("still runs run 0 of job 1201"),
        "{finished:?}"
    );
    assert_eq!(launcher.running_jobs(), vec![1201], "run 0 goes on");
    assert!(
        launcher.unacked_finished().is_empty(),
        "run 0's spool directory is left alone"
    );
    events.seen.clear();
    assert!(launcher.stop(1201, 1));
    let ended = events.wait_for_end(1201).await.finished;
    assert_eq!(ended.restart_count, 0);
    assert!(ended.stop_requested, "{ended:?}");
}

/// Runs `program args` as uid/gid 1 (`daemon` on most systems): another unprivileged user.
fn as_other_user(program: &str, args: &[&Path]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(program)
        .args(args)
        .uid(1)
        .gid(1)
        .output()
        .unwrap()
}

#[tokio::test]
async fn scripts_and_environments_in_the_spool_are_private() {
    let Some(nobody) = nobody() else { return };
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    // With an interpreter line (exec'd directly) and without (run by /bin/sh).
    let mut with_shebang = as_user(
        fx.job(1301, "#!/bin/sh\necho \"secret=$SECRET\"\nsleep 1\n"),
        &nobody,
    );
    with_shebang.env.insert("SECRET".into(), "hunter2".into());
    let without = as_user(fx.job(1302, "echo plain\nsleep 1\n"), &nobody);
    launcher.launch(with_shebang).unwrap();
    launcher.launch(without).unwrap();
    events.wait_for_start(1301).await;
    events.wait_for_start(1302).await;

    let jobs = fx.spool.path().join("jobs");
    let dir = jobs.join("1301");
    let journal = fx.spool.path().join("journal");
    for path in [dir.join("script"), journal.clone()] {
        let out = as_other_user("cat", &[&path]);
        assert!(
            !out.status.success(),
            "uid 1 read {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    for listed in [&jobs, &dir] {
        assert!(
            !as_other_user("ls", &[listed]).status.success(),
            "uid 1 listed {}",
            listed.display()
        );
    }
    let meta = std::fs::metadata(dir.join("script")).unwrap();
    assert_eq!(meta.uid(), nobody.uid.as_raw());
    assert_eq!(meta.mode() & 0o777, 0o700);
    let meta = std::fs::metadata(&journal).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));

    // And the jobs still run, as nobody, from their scripts.
    for job_id in [1301, 1302] {
        let finished = events.wait_for_end(job_id).await.finished;
        assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    }
    assert_eq!(fx.output("ysched-1301.out"), "secret=hunter2\n");
    assert_eq!(fx.output("ysched-1302.out"), "plain\n");
}

#[tokio::test]
async fn paths_are_checked_as_the_job_user() {
    let Some(nobody) = nobody() else { return };
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    // A directory only root may enter, with something in it.
    let secret = fx.workdir().join("secret");
    std::fs::create_dir_all(secret.join("exists")).unwrap();
    std::fs::write(secret.join("exists/interp"), b"").unwrap();
    std::fs::set_permissions(
        secret.join("exists/interp"),
        PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&secret, PermissionsExt::from_mode(0o700)).unwrap();
    let existing = secret.join("exists");
    let missing = secret.join("missing");

    // The working directory.
    let mut ids = Vec::new();
    for (job_id, workdir) in [(1401, &existing), (1402, &missing)] {
        let mut job = as_user(fx.job(job_id, "#!/bin/sh\ntrue\n"), &nobody);
        job.workdir = workdir.to_string_lossy().into_owned();
        launcher.launch(job).unwrap();
        ids.push((job_id, workdir.clone()));
    }
    // The script's interpreter.
    for (job_id, interpreter) in [
        (1403, existing.join("interp")),
        (1404, missing.join("interp")),
    ] {
        let script = format!("#!{}\n", interpreter.display());
        launcher
            .launch(as_user(fx.job(job_id, &script), &nobody))
            .unwrap();
        ids.push((job_id, interpreter));
    }
    let mut errors = Vec::new();
    for (job_id, path) in ids {
        let outcome = events.wait_for_end(job_id).await;
        assert!(outcome.started.is_none());
        let error = outcome.finished.error;
        assert!(error.contains(&*path.to_string_lossy()), "{error}");
        errors.push(error.replace(&*path.to_string_lossy(), "PATH"));
    }
    assert_eq!(
        errors[0], errors[1],
        "an existing and a missing working directory look the same"
    );
    assert!(errors[0].contains("Permission denied"), "{}", errors[0]);
    assert_eq!(
        errors[2], errors[3],
        "an existing and a missing interpreter look the same"
    );
    assert!(errors[2].contains("Permission denied"), "{}", errors[2]);
}

#[tokio::test]
async fn fallback_checkpoint_directory_is_made_for_the_job_user() {
    let Some(nobody) = nobody() else { return };
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    // A job id no real cluster on this host is likely to have reached.
    let job_id = 9_000_000_000_000 + u64::from(std::process::id());
    let root = Path::new(ysched_noded::launch::FALLBACK_CHECKPOINT_ROOT);
    let dir = root.join(job_id.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let mut job = as_user(
        fx.job(
            job_id,
            "#!/bin/sh\necho \"ck=$YS_CHECKPOINT_DIR\" && echo x > \"$YS_CHECKPOINT_DIR/ck\"\n",
        ),
        &nobody,
    );
    job.checkpoint_dir = dir.to_string_lossy().into_owned();
    launcher.launch(job).unwrap();
    let finished = events.wait_for_end(job_id).await.finished;
    // A failed check is re-raised only after the directory is removed.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_eq!(finished.exit_code, Some(0), "{finished:?}");
        assert_eq!(
            fx.output(&format!("ysched-{job_id}.out")),
            format!("ck={}\n", dir.display())
        );
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.uid(), nobody.uid.as_raw());
        assert_eq!(meta.mode() & 0o7777, 0o700);
        let meta = std::fs::symlink_metadata(root).unwrap();
        assert_eq!(meta.uid(), 0);
        assert_eq!(meta.mode() & 0o022, 0, "only root writes the fallback root");
        assert!(!as_other_user("cat", &[&dir.join("ck")]).status.success());
    }));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A login node's launcher refuses every launch: reported as the job's end, never started.
#[tokio::test]
async fn a_login_node_runs_no_job() {
    let fx = Fixture::new();
    let (launcher, events) =
        ysched_noded::launch::Launcher::with_options(ysched_noded::launch::LauncherOptions {
            supervisor_program: std::path::PathBuf::from(env!("CARGO_BIN_EXE_noded")),
            runs_jobs: false,
            ..ysched_noded::launch::LauncherOptions::new(fx.spool.path(), NODE)
        })
        .unwrap();
    let mut events = Events::new(events);
    launcher
        .launch(fx.job(901, "#!/bin/sh\necho ran\n"))
        .unwrap();
    let outcome = events.wait_for_end(901).await;
    assert!(outcome.started.is_none());
    assert_eq!(
        outcome.finished.error,
        "node n1 is a login node: it runs no job"
    );
    assert!(!fx.workdir().join("ysched-901.out").exists());
    // Kept until schedd acknowledges it, like any end.
    assert_eq!(launcher.unacked_finished(), vec![outcome.finished]);
}

/// Jobs reach schedd through their node's client socket: `YSCHED_SOCKET` names it.
#[tokio::test]
async fn jobs_get_the_client_socket_of_their_node() {
    let fx = Fixture::new();
    let (launcher, events) =
        ysched_noded::launch::Launcher::with_options(ysched_noded::launch::LauncherOptions {
            supervisor_program: std::path::PathBuf::from(env!("CARGO_BIN_EXE_noded")),
            client_socket: Some("/run/ysched/test-noded.sock".into()),
            ..ysched_noded::launch::LauncherOptions::new(fx.spool.path(), NODE)
        })
        .unwrap();
    let mut events = Events::new(events);
    let mut job = fx.job(902, "#!/bin/sh\necho \"socket=$YSCHED_SOCKET\"\n");
    job.env = BTreeMap::from([("YSCHED_SOCKET".to_string(), "/elsewhere".to_string())]);
    launcher.launch(job).unwrap();
    let finished = events.wait_for_end(902).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    assert_eq!(
        fx.output("ysched-902.out"),
        "socket=/run/ysched/test-noded.sock\n"
    );
}

/// A spool whose supervisor socket's path is too long for a Unix socket's address (108
/// bytes): the supervisor is reached through the open spool directory, and jobs run, end
/// and are found again after a restart as on any spool.
#[tokio::test]
async fn a_spool_too_deep_for_a_socket_address_still_runs_jobs() {
    let fx = Fixture::new();
    let deep = fx
        .spool
        .path()
        .join("a-spool-directory-whose-path-is-long")
        .join("enough-that-its-supervisor-socket-does-not-fit-in-sun-path")
        .join("of-a-unix-socket-address");
    assert!(deep.join("supervisor.sock").as_os_str().len() > 108);
    let launcher = |spool: &Path| {
        let (launcher, events) =
            ysched_noded::launch::Launcher::with_options(ysched_noded::launch::LauncherOptions {
                supervisor_program: std::path::PathBuf::from(env!("CARGO_BIN_EXE_noded")),
                ..ysched_noded::launch::LauncherOptions::new(spool, NODE)
            })
            .unwrap();
        (launcher, Events::new(events))
    };
    let (first, mut events) = launcher(&deep);
    first.launch(fx.job(3101, "#!/bin/sh\nexit 4\n")).unwrap();
    let finished = events.wait_for_end(3101).await.finished;
    assert_eq!(finished.exit_code, Some(4), "{finished:?}");
    first
        .launch(fx.job(3102, "#!/bin/sh\nsleep 1\nexit 6\n"))
        .unwrap();
    events.wait_for_start(3102).await;
    drop(first);
    drop(events);

    let (again, mut events) = launcher(&deep);
    let recovery = again.recover().await.unwrap();
    assert_eq!(recovery.ended, [3101]);
    assert_eq!(recovery.reattached, [3102]);
    let finished = events.wait_for_end(3102).await.finished;
    assert_eq!(finished.exit_code, Some(6), "{finished:?}");
}

/// schedd's acknowledgements reach the node's supervisor (on the connection noded holds
/// open to it): after a restart, only the end that was not acknowledged is reported again.
#[tokio::test]
async fn acknowledged_ends_are_not_reported_again_after_a_restart() {
    let fx = Fixture::new();
    let launcher = || {
        let (launcher, events) =
            ysched_noded::launch::Launcher::with_options(ysched_noded::launch::LauncherOptions {
                supervisor_program: std::path::PathBuf::from(env!("CARGO_BIN_EXE_noded")),
                ..ysched_noded::launch::LauncherOptions::new(fx.spool.path(), NODE)
            })
            .unwrap();
        (launcher, Events::new(events))
    };
    let (first, mut events) = launcher();
    for job_id in [3201, 3202, 3203] {
        first.launch(fx.job(job_id, "#!/bin/sh\nexit 0\n")).unwrap();
        events.wait_for_end(job_id).await;
    }
    first.ack(3201).unwrap();
    first.ack(3203).unwrap();
    // The acknowledgements are written by the task holding the connection.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(first);
    drop(events);

    let (again, _events) = launcher();
    let recovery = again.recover().await.unwrap();
    assert_eq!(recovery.ended, [3202]);
    assert!(recovery.reattached.is_empty());
}
