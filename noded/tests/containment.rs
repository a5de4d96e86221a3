//! The job is its whole process tree: a stop gives every process of the job its grace, the
//! job ends when its last process is gone, and what a job leaves behind dies with it. Each
//! test runs with what noded detects on this host (cgroups where a cgroup v2 hierarchy is
//! writable, and the test checks that noded chose them) and, where the behaviour is meant to
//! hold without cgroups too, with process groups only (`node.cgroup_root = "none"`).

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;
use ysched_noded::launch::{LaunchError, LimitSource};

/// One test per mode: `name::detected` and `name::process_groups`.
macro_rules! in_both_modes {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn detected() {
                super::$name(super::Mode::Detected, 0).await
            }
            #[tokio::test]
            async fn process_groups() {
                super::$name(super::Mode::ProcessGroups, 1).await
            }
        }
    };
}

/// The job's main process as the test saw it, and a job-unique name for files.
fn file_for(job_id: u64, what: &str) -> String {
    format!("{what}-{job_id}")
}

/// Jobs run with the default PATH; python3 must be in it (scripts/test.sh installs it).
fn require_python3() {
    let found = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join("python3").exists());
    assert!(
        found,
        "python3 is needed in /usr/local/bin, /usr/bin or /bin (scripts/test.sh installs it)"
    );
}

/// A trainer as users write them: it handles SIGTERM by finishing its step, takes a second to
/// save a checkpoint, and exits; its two workers die of the SIGTERM.
const TRAINER: &str = r#"
import os, signal, sys, time
stop = False
def on_term(signum, frame):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
workers = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while True:
            time.sleep(1)
    workers.append(pid)
with open(sys.argv[1], "w") as f:
    f.write(" ".join(str(p) for p in [os.getppid(), os.getpid()] + workers) + "\n")
while not stop:
    time.sleep(0.02)
time.sleep(1)  # saving takes a while
ck = os.environ["YS_CHECKPOINT_DIR"]
with open(os.path.join(ck, "ck.tmp"), "w") as f:
    f.write("step 42\n")
os.replace(os.path.join(ck, "ck.tmp"), os.path.join(ck, "ck"))
for worker in workers:
    os.waitpid(worker, 0)
"#;

in_both_modes!(trainer_without_exec_saves_its_checkpoint);
async fn trainer_without_exec_saves_its_checkpoint(mode: Mode, offset: u64) {
    require_python3();
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    let cgroups = check_containment(&launcher, mode);
    let job_id = 2000 + offset;
    std::fs::write(fx.workdir().join("train.py"), TRAINER).unwrap();
    let pids_file = file_for(job_id, "pids");
    // No `exec`: bash stays the main process, and dies of the SIGTERM at once.
    let mut job = fx.job(
        job_id,
        &format!("#!/bin/bash\npython3 train.py {pids_file}\necho \"trainer exited $?\"\n"),
    );
    let checkpoint_dir = fx.workdir().join(format!("ck{job_id}"));
    job.checkpoint_dir = checkpoint_dir.to_string_lossy().into_owned();
    launcher.launch(job).unwrap();
    let started = events.wait_for_start(job_id).await;
    let pids = pids_in(&fx, &pids_file, 4).await;
    assert_eq!(pids[0], started.pid, "bash is the main process");
    let cgroup = fx.job_cgroup(job_id);
    assert_eq!(cgroup.is_some(), cgroups);
    if let Some(cgroup) = &cgroup {
        let members = cgroup.pids().unwrap();
        assert!(pids.iter().all(|p| members.contains(p)), "{members:?}");
    }

    let stop_time = Instant::now();
    assert!(launcher.stop(job_id, 5));
    let finished = events.wait_for_end(job_id).await.finished;
    let took = stop_time.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "reported before the trainer saved: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "waited for the grace: {took:?}"
    );
    assert_eq!(finished.signal, Some(libc::SIGTERM), "bash: {finished:?}");
    assert!(finished.stop_requested && !finished.killed, "{finished:?}");
    assert!(finished.checkpoint_saved, "{finished:?}");
    assert!(!finished.out_of_memory);
    assert_eq!(
        std::fs::read_to_string(checkpoint_dir.join("ck")).unwrap(),
        "step 42\n"
    );
    assert!(!fx
        .output(&format!("ysched-{job_id}.out"))
        .contains("trainer exited"));
    assert_all_gone(&pids, cgroup.as_ref());
}

in_both_modes!(escaped_process_is_killed_after_the_grace);
async fn escaped_process_is_killed_after_the_grace(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    let cgroups = check_containment(&launcher, mode);
    let job_id = 2100 + offset;
    let escaped_file = file_for(job_id, "escaped");
    let script = format!(
        "#!/bin/bash\n\
         setsid bash -c 'trap \"\" TERM; echo $$ > {escaped_file}; exec sleep 1000' &\n\
         sleep 1000\n"
    );
    launcher.launch(fx.job(job_id, &script)).unwrap();
    let started = events.wait_for_start(job_id).await;
    let escaped = pids_in(&fx, &escaped_file, 1).await[0];
    let session = std::fs::read_to_string(format!("/proc/{escaped}/stat")).unwrap();
    let session: u32 = session
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(4)
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(
        session, started.pid,
        "it left the job's session and process group"
    );
    let cgroup = fx.job_cgroup(job_id);

    let stop_time = Instant::now();
    assert!(launcher.stop(job_id, 2));
    if !cgroups {
        // Without cgroups, what leaves the process group escapes the stop: the job is over
        // when its group is, and the escaped process lives on.
        let finished = events.wait_for_end(job_id).await.finished;
        assert!(
            stop_time.elapsed() < Duration::from_millis(1900),
            "{finished:?}"
        );
        assert!(!finished.killed, "{finished:?}");
        assert!(alive(escaped), "process groups cannot reach it");
        kill(Pid::from_raw(escaped as i32), Signal::SIGKILL).unwrap();
        return;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(alive(escaped), "killed before the grace ended");
    assert!(!alive(started.pid), "the main process died of the SIGTERM");
    assert_eq!(
        launcher.running_jobs(),
        vec![job_id],
        "not over while a process lives"
    );
    let finished = events.wait_for_end(job_id).await.finished;
    assert!(
        !alive(escaped),
        "reported ended while a process of it was alive"
    );
    let took = stop_time.elapsed();
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert_eq!(finished.signal, Some(libc::SIGTERM), "bash: {finished:?}");
    assert!(finished.killed, "a process had to be killed: {finished:?}");
    assert_all_gone(&[started.pid, escaped], cgroup.as_ref());
}

in_both_modes!(what_a_job_leaves_behind_dies_at_once);
async fn what_a_job_leaves_behind_dies_at_once(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    let cgroups = check_containment(&launcher, mode);
    let job_id = 2200 + offset;
    let left_file = file_for(job_id, "left");
    // With cgroups, even a daemon in a session of its own is part of the job.
    let daemon = if cgroups {
        format!("setsid sleep 100 &\necho $! >> {left_file}\n")
    } else {
        String::new()
    };
    let script = format!("#!/bin/sh\nsleep 100 &\necho $! >> {left_file}\n{daemon}exit 0\n");
    launcher.launch(fx.job(job_id, &script)).unwrap();
    let start = Instant::now();
    let outcome = events.wait_for_end(job_id).await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        outcome.finished.exit_code,
        Some(0),
        "{:?}",
        outcome.finished
    );
    assert!(!outcome.finished.killed && !outcome.finished.stop_requested);
    let left = pids_in(&fx, &left_file, if cgroups { 2 } else { 1 }).await;
    assert_all_gone(&left, fx.job_cgroup(job_id).as_ref());
}

in_both_modes!(stop_reaches_every_process);
async fn stop_reaches_every_process(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    check_containment(&launcher, mode);
    let job_id = 2300 + offset;
    launcher
        .launch(fx.job(job_id, "#!/bin/sh\nsleep 100 & sleep 100 & wait\n"))
        .unwrap();
    let started = events.wait_for_start(job_id).await;
    assert!(matches!(
        launcher.launch(fx.job(job_id, "true")),
        Err(LaunchError::AlreadyRunning {
            restart_count: 0,
            ..
        })
    ));
    assert_eq!(launcher.running_jobs(), vec![job_id]);
    // Let the shell start both sleeps.
    let deadline = Instant::now() + Duration::from_secs(10);
    while live_members(started.pid).len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let members = live_members(started.pid);
    assert_eq!(members.len(), 3, "sh and two sleeps in the job's group");

    let before = ysched_common::time::now_ms();
    assert!(launcher.stop(job_id, 5));
    assert!(launcher.stop(job_id, 5), "stopping twice is harmless");
    let finished = events.wait_for_end(job_id).await.finished;
    assert_eq!(finished.signal, Some(libc::SIGTERM), "{finished:?}");
    assert!(finished.stop_requested && !finished.killed && !finished.timed_out);
    assert!(finished.term_time_ms >= before);
    assert!(!finished.checkpoint_saved);
    assert_all_gone(&members, fx.job_cgroup(job_id).as_ref());
    assert!(!launcher.stop(job_id, 5), "no longer running");
    assert!(!launcher.stop(999, 5), "unknown job");
}

in_both_modes!(what_a_trap_starts_in_answer_to_the_stop_is_not_signalled);
/// The commonest way to save a checkpoint from a job script: a TERM trap that runs a command.
/// The stop's SIGTERM reaches every process of the job as of one instant, so the command the
/// trap starts in answer (here `sleep 1`, standing for `python save.py`) runs its course.
/// Many processes make the signalling take a while, time in which the trap starts its command.
async fn what_a_trap_starts_in_answer_to_the_stop_is_not_signalled(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    check_containment(&launcher, mode);
    let job_id = 2800 + offset;
    let saved = file_for(job_id, "saved");
    launcher
        .launch(fx.job(
            job_id,
            &format!(
                "#!/bin/sh
                 trap 'sleep 1 && echo saved > {saved}; exit 0' TERM
                 for i in $(seq 300); do sleep 1000 & done
                 echo ready
                 wait
"
            ),
        ))
        .unwrap();
    let started = events.wait_for_start(job_id).await;
    fx.wait_for_output(&format!("ysched-{job_id}.out"), "ready")
        .await;
    // Every `sleep` has replaced its forked shell: a shell between fork and exec still has
    // the trap, and a SIGTERM caught there is lost at the exec.
    let sleeping = || {
        live_members(started.pid)
            .iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c == "sleep\n")
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeping() < 300 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sleeping(), 300);
    assert!(launcher.stop(job_id, 10));
    let finished = events.wait_for_end(job_id).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    assert!(finished.stop_requested && !finished.killed, "{finished:?}");
    assert_eq!(
        fx.output(&saved),
        "saved\n",
        "the trap's command was killed by the stop's SIGTERM"
    );
    if let Some(cgroup) = fx.job_cgroup(job_id) {
        assert!(
            !cgroup.dir.exists(),
            "the job's cgroup is removed at its end"
        );
    }
}

in_both_modes!(job_ignoring_sigterm_is_killed_after_the_grace);
async fn job_ignoring_sigterm_is_killed_after_the_grace(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    check_containment(&launcher, mode);
    let job_id = 2400 + offset;
    launcher
        .launch(fx.job(
            job_id,
            "#!/bin/sh\ntrap '' TERM\necho trapped\nwhile :; do sleep 1; done\n",
        ))
        .unwrap();
    let started = events.wait_for_start(job_id).await;
    // Its start is told once it has exec'd: the shell may not have read its trap yet.
    fx.wait_for_output(&format!("ysched-{job_id}.out"), "trapped")
        .await;
    let stop_time = Instant::now();
    assert!(launcher.stop(job_id, 1));
    let finished = events.wait_for_end(job_id).await.finished;
    assert!(
        stop_time.elapsed() >= Duration::from_millis(900),
        "SIGKILL only after the grace"
    );
    assert_eq!(finished.signal, Some(libc::SIGKILL), "{finished:?}");
    assert!(finished.killed && finished.stop_requested);
    assert!(finished.term_time_ms > 0);
    assert_group_empties(started.pid).await;
}

in_both_modes!(a_stop_keeps_its_grace_across_a_noded_restart);
async fn a_stop_keeps_its_grace_across_a_noded_restart(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    check_containment(&launcher, mode);
    let job_id = 2500 + offset;
    // The saver is a background child: the main shell dies of the SIGTERM at once.
    let mut job = fx.job(
        job_id,
        "#!/bin/sh\n\
         sh -c 'trap \"sleep 1; echo saved > \\\"$YS_CHECKPOINT_DIR/ck\\\"; exit 0\" TERM; \
         echo ready; while :; do sleep 0.1; done' &\n\
         sleep 1000\n",
    );
    job.checkpoint_dir = fx
        .workdir()
        .join(format!("ck{job_id}"))
        .to_string_lossy()
        .into_owned();
    launcher.launch(job.clone()).unwrap();
    events.wait_for_start(job_id).await;
    fx.wait_for_output(&format!("ysched-{job_id}.out"), "ready")
        .await;
    assert!(launcher.stop(job_id, 5));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // noded restarts in the middle of the grace, after the main process is gone; as if it
    // had stopped while signalling the job, the job's cgroup is left frozen.
    drop(launcher);
    drop(events);
    if let Some(cgroup) = fx.job_cgroup(job_id) {
        std::fs::write(cgroup.dir.join("cgroup.freeze"), "1").unwrap();
    }
    let (launcher, mut events) = fx.launcher_in(mode);
    let recovery = launcher.recover().await.unwrap();
    assert_eq!(recovery.reattached, vec![job_id]);
    let finished = events.wait_for_end(job_id).await.finished;
    assert!(finished.stop_requested && !finished.killed, "{finished:?}");
    assert!(finished.checkpoint_saved, "{finished:?}");
    let checkpoint = Path::new(&job.checkpoint_dir).join("ck");
    assert_eq!(std::fs::read_to_string(checkpoint).unwrap(), "saved\n");
}

#[tokio::test]
async fn memory_limit_kills_only_its_job_and_says_so() {
    require_python3();
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    if !check_containment(&launcher, Mode::Detected) {
        skipped("no cgroups here: memory limits are not enforced");
        return;
    }
    let layout = launcher.containment().layout().unwrap().clone();
    if let LimitSource::Unavailable(why) = &layout.memory {
        skipped(&format!("cgroups without a memory controller ({why})"));
        return;
    }

    // A neighbour with room, running while the other job goes over its limit.
    let mut neighbour = fx.job(2601, "#!/bin/sh\nsleep 2\necho survived\n");
    neighbour.mem_bytes = 1 << 30;
    neighbour.cpus = 2;
    launcher.launch(neighbour).unwrap();
    events.wait_for_start(2601).await;
    let cgroup = fx.job_cgroup(2601).unwrap();
    let limit_file = |source: &LimitSource, v2: &str, v1: &str| match source {
        LimitSource::V2 => Some(cgroup.dir.join(v2)),
        LimitSource::V1(base) => Some(base.join(cgroup.dir.file_name().unwrap()).join(v1)),
        LimitSource::Unavailable(_) => None,
    };
    let read = |path: Option<std::path::PathBuf>| path.map(|p| std::fs::read_to_string(p).unwrap());
    let memory = read(limit_file(
        &layout.memory,
        "memory.max",
        "memory.limit_in_bytes",
    ));
    assert_eq!(memory.unwrap().trim(), (1u64 << 30).to_string());
    if let Some(quota) = read(limit_file(&layout.cpu, "cpu.max", "cpu.cfs_quota_us")) {
        assert!(quota.starts_with("200000"), "2 CPUs a period: {quota}");
    }
    if let LimitSource::V1(base) = &layout.cpu {
        // The CPU limit's v1 cgroup is joined just after the exec, by the node's supervisor:
        // every process of the job is in it soon after the start.
        let cpu_procs = base
            .join(cgroup.dir.file_name().unwrap())
            .join("cgroup.procs");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let in_job = cgroup.pids().unwrap();
            let in_cpu: Vec<u32> = std::fs::read_to_string(&cpu_procs)
                .unwrap()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if !in_job.is_empty() && in_job.iter().all(|pid| in_cpu.contains(pid)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the job's processes {in_job:?} are not all in its CPU cgroup: {in_cpu:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let mut greedy = fx.job(
        2602,
        "#!/bin/sh\n\
         python3 -c 'b = bytearray(500 * 1024 * 1024); print(\"allocated\", len(b))'\n\
         echo \"python exit $?\"\n",
    );
    greedy.mem_bytes = 100 << 20;
    launcher.launch(greedy).unwrap();
    let finished = events.wait_for_end(2602).await.finished;
    assert!(finished.out_of_memory, "{finished:?}");
    assert_eq!(
        finished.exit_code,
        Some(0),
        "the shell goes on: {finished:?}"
    );
    let out = fx.output("ysched-2602.out");
    assert!(
        out.ends_with("python exit 137\n"),
        "killed by the kernel: {out:?}"
    );

    let finished = events.wait_for_end(2601).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");
    assert!(!finished.out_of_memory);
    assert_eq!(fx.output("ysched-2601.out"), "survived\n");
    assert_all_gone(&[], Some(&cgroup));
    // And the launcher goes on launching.
    launcher
        .launch(fx.job(2603, "#!/bin/sh\necho fine\n"))
        .unwrap();
    assert_eq!(events.wait_for_end(2603).await.finished.exit_code, Some(0));
}

in_both_modes!(warning_signal_comes_before_the_time_limit);
async fn warning_signal_comes_before_the_time_limit(mode: Mode, offset: u64) {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    check_containment(&launcher, mode);
    // The batch shell and a child both note a SIGUSR1 (with the time, for the shell).
    let job = |job_id: u64, batch_only: bool| {
        let warned = file_for(job_id, "warned");
        let mut job = fx.job(
            job_id,
            &format!(
                "#!/bin/bash\n\
                 trap 'echo \"main $(date +%s%3N)\" >> {warned}' USR1\n\
                 bash -c 'trap \"echo child >> {warned}\" USR1; while :; do sleep 0.1; done' &\n\
                 while :; do sleep 0.1; done\n"
            ),
        );
        job.time_limit_secs = 5;
        job.grace_secs = 1;
        job.warn_signal = libc::SIGUSR1;
        job.warn_secs = 2;
        job.warn_batch_only = batch_only;
        job
    };
    let (every, batch) = (2700 + 10 * offset, 2701 + 10 * offset);
    launcher.launch(job(every, false)).unwrap();
    launcher.launch(job(batch, true)).unwrap();
    for (job_id, expected) in [(every, vec!["child", "main"]), (batch, vec!["main"])] {
        let outcome = events.wait_for_end(job_id).await;
        let finished = outcome.finished;
        assert!(finished.timed_out, "{finished:?}");
        let warned = fx.output(&file_for(job_id, "warned"));
        let mut lines: Vec<&str> = warned.lines().collect();
        lines.sort();
        let kinds: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(kinds, expected, "job {job_id}: {warned:?}");
        let main_at: i64 = lines
            .last()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let after_start = main_at - outcome.started.unwrap().time_ms;
        assert!(
            // Due 3000 ms after the start; the trap runs when a `sleep 0.1` ends, on a
            // machine that may be busy.
            (2900..4300).contains(&after_start),
            "SIGUSR1 {after_start} ms after the start, the limit is at 5000"
        );
    }
}

#[tokio::test]
async fn job_cgroup_names_skip_live_ones_and_reuse_leftovers() {
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher();
    if !check_containment(&launcher, Mode::Detected) {
        skipped("no cgroups here: no cgroup names to choose");
        return;
    }
    let root = launcher.containment().layout().unwrap().root.clone();
    let tag = launcher.cgroup_instance().to_string();
    // Ids no other test (or noded on this host) uses.
    let leftover_id = 9_100_000_000 + 10 * u64::from(std::process::id());
    let taken_id = leftover_id + 1;
    // Left by a supervisor killed with its job long ago: empty, old.
    let leftover = root.join(format!("job_{leftover_id}.{tag}"));
    let _ = std::fs::create_dir(&leftover);
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(&leftover)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    // Just made by another noded on this host, which is about to start its job there.
    let taken = root.join(format!("job_{taken_id}.{tag}"));
    let _ = std::fs::create_dir(&taken);
    for job_id in [leftover_id, taken_id] {
        launcher
            .launch(fx.job(job_id, "#!/bin/sh\ntrue\n"))
            .unwrap();
    }
    let mut dirs = Vec::new();
    for job_id in [leftover_id, taken_id] {
        let finished = events.wait_for_end(job_id).await.finished;
        assert_eq!(finished.exit_code, Some(0), "{finished:?}");
        dirs.push(fx.job_cgroup(job_id).unwrap().dir);
    }
    let _ = std::fs::remove_dir(&taken);
    assert_eq!(dirs[0], leftover, "the leftover is reused");
    assert_eq!(dirs[1], root.join(format!("job_{taken_id}.{tag}-2")));
    assert!(
        !leftover.exists() && !dirs[1].exists(),
        "removed after the job"
    );
}

in_both_modes!(the_supervisor_says_when_a_process_group_is_gone);
/// Without cgroups a job's processes are its process group, known by its number, which a new
/// group may take once the job's is empty. The node's supervisor says `gone` as soon as it
/// sees the group empty, before the end (which waits for the journal's sync, and for a look
/// at the checkpoint directory after a stop): from then on noded signals that number no more.
/// A cgroup is the job's until removed, so nothing is said for it.
async fn the_supervisor_says_when_a_process_group_is_gone(mode: Mode, offset: u64) {
    use std::io::{BufRead, BufReader, Write};
    let fx = Fixture::new();
    let (launcher, mut events) = fx.launcher_in(mode);
    let cgroups = check_containment(&launcher, mode);
    let job_id = 5200 + offset;
    let release = fx.workdir().join(file_for(job_id, "release"));
    let script = format!(
        "#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.02; done\n",
        release.display()
    );
    launcher.launch(fx.job(job_id, &script)).unwrap();
    events.wait_for_start(job_id).await;

    // A second follower of the job, as a restarted noded would be: what it is told.
    let socket = fx.spool.path().join("supervisor.sock");
    let told = tokio::task::spawn_blocking(move || {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        writeln!(stream, "attach {job_id}").unwrap();
        let mut lines = BufReader::new(stream).lines();
        let attached = lines.next().unwrap().unwrap();
        std::fs::write(&release, "").unwrap();
        let rest: Vec<String> = lines.map(Result::unwrap).collect();
        (attached, rest)
    })
    .await
    .unwrap();
    let finished = events.wait_for_end(job_id).await.finished;
    assert_eq!(finished.exit_code, Some(0), "{finished:?}");

    let (attached, rest) = told;
    assert_eq!(attached, "attached");
    let words: Vec<&str> = rest
        .iter()
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    let expected = if cgroups {
        vec!["ended"]
    } else {
        vec!["gone", "ended"]
    };
    assert_eq!(words, expected, "{rest:?}");
}
