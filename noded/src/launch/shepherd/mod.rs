//! The shepherd: a small per-job supervisor, run as `noded __shepherd <job dir>`.
//!
//! noded starts it in its own session. It outlives noded restarts (systemd
//! `KillMode=process`), so running jobs do too.
//!
//! It reads the plan from `state.json`, forks the job (into the job's cgroups, new session, job
//! user, working directory, output files), records the job's pid in `pid`, tells noded the pid
//! on its stdout (a pipe noded may no longer be reading), and waits for the job's main process.
//! Everything the child does before exec may block (a hung network filesystem, an automount):
//! its first act is to join the job's cgroup and, without cgroups, to record its process group
//! in `group`, so that noded can stop it (a cancel, the time limit, a preemption) and the fence
//! can fence it at any moment, not only once it runs. Output files are opened so that they
//! cannot block: only regular files and `/dev/null` are accepted. Then it waits until *every*
//! process of the job is gone (its cgroup is empty, or without cgroups its process group): at
//! once, by killing them, when the job ended by itself; when noded is stopping the job (the
//! `stopping` notice in the job directory), the others keep their grace and noded kills what is
//! left at its end. Only then does it remove the job's cgroups and record the outcome in
//! `exit.json`, so that noded reports the job's end when its last process is gone. It is the
//! job's child subreaper: orphaned job processes become its children, and it reaps them.
//!
//! It also fences (the `fence` module): a watcher thread, started just before the job is
//! forked, reads the node's fence lease (`<spool>/lease`, see [`super::lease`]) every second,
//! and when `CLOCK_BOOTTIME` is past its deadline (the node has not heard from schedd for
//! `node.fence_after_secs`), it stops the job itself: the `stopping` notice as noded writes it,
//! SIGTERM to every process of the job, the job's grace, SIGKILL to what is left. That needs no
//! noded, so a job is stopped even while noded is stopped, hung or gone, and schedd may run it
//! elsewhere. `exit.json` then says `fenced`, with the time of that SIGTERM.
//!
//! It does no name-service lookups: noded resolved the user before starting it. Apart from
//! the fence's watcher, it is single-threaded. The watcher starts before the job is forked
//! (a job stuck before its exec must be fenced too); the forked child makes only
//! async-signal-safe system calls on data prepared before the fork (no allocation, no lock),
//! so forking beside that thread is safe.
//!
//! Its parts: `fence` (the lease watcher), `child` (what the job's forked child needs,
//! prepared before the fork, and what its failure means), and `sys`, which holds every
//! `unsafe` of the shepherd: its raw system calls and the code the child runs before exec.

// Everywhere else in the shepherd, `unsafe` is refused.
#![deny(unsafe_code)]

pub(super) mod child;
mod fence;
#[allow(unsafe_code)]
pub(super) mod sys;

use super::spool::{ExitRecord, JobDir, JobRecord};
use super::tracking::JobProcesses;
use super::ExecPlan;
use fence::Fence;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ysched_common::time::{now_ms, rfc3339};

/// After this long waiting for the job's last processes, the shepherd says so in its log.
const SLOW_END: Duration = Duration::from_secs(60);

/// Runs the shepherd for the job in `job_dir`; the process's whole life.
pub fn run(job_dir: &Path) -> ExitCode {
    sys::close_inherited_fds();
    sys::ignore_termination_signals();
    let dir = JobDir::new(job_dir);
    let exit = match dir.read_record() {
        Ok(JobRecord {
            plan: Some(plan),
            job,
            ..
        }) => run_job(&dir, &plan, job.grace_secs),
        Ok(_) => launch_failed("the job has no execution plan".into(), false),
        Err(e) => launch_failed(format!("cannot read the job's state: {e}"), true),
    };
    if let Some(error) = &exit.error {
        log(&format!("job did not start: {error}"));
    }
    match dir.write_exit(&exit) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&format!("cannot write {}: {e}", dir.exit().display()));
            ExitCode::FAILURE
        }
    }
}

fn run_job(dir: &JobDir, plan: &ExecPlan, grace_secs: u32) -> ExitRecord {
    sys::become_subreaper();
    let exit = start_and_wait(dir, plan, grace_secs);
    if let Some(cgroup) = &plan.cgroup {
        if let Err(e) = cgroup.remove() {
            log(&format!("cannot remove the job's cgroups: {e}"));
        }
    }
    exit
}

fn start_and_wait(dir: &JobDir, plan: &ExecPlan, grace_secs: u32) -> ExitRecord {
    let cgroup = plan.cgroup.as_ref();
    let (join, events) = match cgroup
        .map(|c| Ok::<_, io::Error>((c.open_procs_files()?, c.open_events()?)))
    {
        Some(Ok((join, events))) => (join, Some(events)),
        Some(Err(e)) => return launch_failed(format!("cannot use the job's cgroup: {e}"), true),
        None => (Vec::new(), None),
    };
    // Watching from before the fork: the job can block before its exec.
    let fence = Fence::watch(dir, plan.cgroup.clone(), grace_secs);
    let mut job = match child::start_job(dir, plan, join) {
        Ok(job) => job,
        Err(child::StartError { error, node_fault }) => {
            // Whatever the fence did stays known: a job it stopped may be requeued.
            return ExitRecord {
                error: Some(error),
                node_fault,
                end_time_ms: now_ms(),
                ..fence.end()
            };
        }
    };
    let pid = job.id();
    fence.job_started(pid);
    log(&format!("job started as pid {pid}"));
    if let Err(e) = dir.write_job_pid(pid) {
        log(&format!("cannot record the job pid: {e}"));
    }
    sys::announce_start(pid);

    let status = job.wait();
    let processes = JobProcesses::of(cgroup, Some(pid)).unwrap_or(JobProcesses::Group(pid));
    if dir.has_stop_notice() {
        // noded is stopping the job: the main process's end does not end the others' grace.
        log("main process ended during a stop; waiting for the job's other processes");
    } else if let Err(e) = processes.kill() {
        // Processes the job left behind die with it, as under slurmstepd.
        log(&format!("cannot kill what is left of the job: {e}"));
    }
    let waiting_since = Instant::now();
    let mut said_slow = false;
    let between = || {
        sys::reap_orphans();
        if !said_slow && waiting_since.elapsed() > SLOW_END {
            said_slow = true;
            log(
                "the job's processes are still alive a minute after its main process ended \
                 (unkillable, e.g. in uninterruptible I/O?)",
            );
        }
    };
    if let Err(e) = processes.wait_until_gone(events.as_ref(), between) {
        log(&format!("cannot wait for the job's other processes: {e}"));
    }
    sys::reap_orphans();
    let fenced = fence.end();
    let end_time_ms = now_ms();
    let out_of_memory = cgroup.is_some_and(|c| c.out_of_memory());
    if out_of_memory {
        log("the job went over its memory limit: the kernel killed at least one of its processes");
    }
    match status {
        Ok(status) => {
            log(&format!("job ended: {status}"));
            ExitRecord {
                exit_code: status.code(),
                signal: status.signal(),
                end_time_ms,
                error: None,
                out_of_memory,
                ..fenced
            }
        }
        Err(e) => ExitRecord {
            end_time_ms,
            error: Some(format!("lost track of the job: {e}")),
            out_of_memory,
            ..fenced
        },
    }
}

/// The job did not start: `error` says why, and `node_fault` whether it was for a reason of
/// the node's (another node may run it) rather than the job's.
pub(super) fn launch_failed(error: String, node_fault: bool) -> ExitRecord {
    ExitRecord {
        end_time_ms: now_ms(),
        error: Some(error),
        node_fault,
        ..Default::default()
    }
}

/// One line on the shepherd's stderr (its `shepherd.log`). A line that cannot be written (a
/// full spool) is dropped: `eprintln!` would panic, and the shepherd die without recording
/// the job's end.
pub(super) fn log(message: &str) {
    use std::io::Write;
    let line = format!(
        "{} shepherd[{}]: {message}\n",
        rfc3339(now_ms()),
        std::process::id()
    );
    let _ = io::stderr().lock().write_all(line.as_bytes());
}
