//! Creating a job's first process: with `clone3` (into its cgroup, where it has one) while
//! the kernel allows it, else with fork; and ending one whose launch could not be recorded.

use super::child::{self, StartError};
use super::spawn::{self, ChildInUse, ChildMemory};
use super::{log, sys};
use crate::launch::spool::{JobDir, JobRecord};
use crate::launch::ExecPlan;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// How jobs are created: `clone3` (into their cgroup, with one) until the kernel refuses it
/// once (then fork and `cgroup.procs` writes, for the rest of this supervisor's life).
/// Said once in the log, either way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CloneMode {
    Untried,
    Clone3,
    Fork,
}

static CLONE_MODE: std::sync::Mutex<CloneMode> = std::sync::Mutex::new(CloneMode::Untried);

fn clone_mode() -> CloneMode {
    *CLONE_MODE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn set_clone_mode(mode: CloneMode, why: &str) {
    let mut current = CLONE_MODE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *current != mode {
        *current = mode;
        log(why);
    }
}

/// Creates the job planned as `plan`: its pid, pidfd, step pipe and `cgroup.events`. The
/// child is created with `clone3` (see [`spawn::clone_job`]): with a cgroup, born in its v2
/// cgroup, joining only its v1 ones (limits, on hybrid hosts). Where the kernel has no such
/// `clone3`, it is forked and joins them all.
pub(super) fn create(
    dir: &JobDir,
    plan: &ExecPlan,
    go: Option<OwnedFd>,
) -> Result<Forked, StartError> {
    let cgroup_fault = |e: io::Error| StartError {
        error: format!("cannot use the job's cgroup: {e}"),
        node_fault: true,
    };
    let go_raw = go.as_ref().map(AsRawFd::as_raw_fd);
    if clone_mode() != CloneMode::Fork {
        let (join, events, cgroup_dir) = match &plan.cgroup {
            Some(cgroup) => (
                // The v2 cgroup's `cgroup.procs` is the first; the child is born there.
                cgroup
                    .open_procs_files()
                    .map_err(cgroup_fault)?
                    .into_iter()
                    .skip(1)
                    .collect(),
                Some(cgroup.open_events().map_err(cgroup_fault)?),
                Some(cgroup.open_dir().map_err(cgroup_fault)?),
            ),
            None => (Vec::new(), None, None),
        };
        let mut prepared = child::prepare(dir, plan, join)?;
        prepared.setup.go = go_raw;
        let memory = ChildMemory::new(child::exec_args(plan)?, prepared.setup);
        match spawn::clone_job(memory, cgroup_dir.as_ref()) {
            Ok((pid, pidfd, in_use)) => {
                set_clone_mode(
                    CloneMode::Clone3,
                    "jobs are created with clone3 (born in their cgroup where they have one), \
                     in the supervisor's memory until their exec (CLONE_VM, x86-64)",
                );
                // The parent's copies of the child's descriptors (its step pipe's write end
                // among them, so that the pipe reads end of file once the child has exec'd).
                drop(prepared.parent_copies);
                drop(go);
                return Ok(Forked {
                    pid,
                    pidfd,
                    step_pipe: prepared.step_read,
                    events,
                    child: Some(in_use),
                });
            }
            Err(e) if spawn::clone3_unsupported(&e) => set_clone_mode(
                CloneMode::Fork,
                &format!("clone3 refused ({e}): jobs are forked and join their cgroups themselves"),
            ),
            Err(e) => return Err(child::failure(plan, &[], e)),
        }
    }
    let (join, events) = match &plan.cgroup {
        Some(cgroup) => (
            cgroup.open_procs_files().map_err(cgroup_fault)?,
            Some(cgroup.open_events().map_err(cgroup_fault)?),
        ),
        None => (Vec::new(), None),
    };
    let mut prepared = child::prepare(dir, plan, join)?;
    prepared.setup.go = go_raw;
    let memory = ChildMemory::new(child::exec_args(plan)?, prepared.setup);
    let pid = spawn::fork_job(&memory).map_err(|e| child::failure(plan, &[], e))?;
    // The child has its own copy of the memory and descriptors: the parent's are let go.
    drop((memory, prepared.parent_copies, go));
    let pidfd = sys::pidfd_open(pid).map_err(|e| StartError {
        error: format!("pidfd_open: {e}"),
        node_fault: true,
    })?;
    Ok(Forked {
        pid,
        pidfd,
        step_pipe: prepared.step_read,
        events,
        child: None,
    })
}

/// A job forked early whose launch could not be recorded: its child, still waiting for
/// the word (or already ended), is killed and collected, and its cgroups removed. Nothing
/// of the job ran.
pub(super) fn end_early(record: &JobRecord, early: Early) {
    if early.status.is_none() {
        sys::kill_and_collect(early.forked.pid);
    }
    if let Some(child) = early.forked.child {
        child.release();
    }
    if let Some(cgroup) = record.plan.as_ref().and_then(|plan| plan.cgroup.as_ref()) {
        if let Err(e) = cgroup.remove() {
            log(&format!("cannot remove the job's cgroups: {e}"));
        }
    }
}

/// A job's first process, created: its pid, pidfd, step pipe and `cgroup.events`.
pub(super) struct Forked {
    pub(super) pid: u32,
    pub(super) pidfd: OwnedFd,
    pub(super) step_pipe: OwnedFd,
    pub(super) events: Option<File>,
    /// What the child reads until its exec, when it shares this process's memory: released
    /// once it has exec'd or ended.
    pub(super) child: Option<ChildInUse>,
}

/// A job forked before its launch was recorded, waiting (before its exec) for the word.
pub(super) struct Early {
    pub(super) forked: Forked,
    /// The write end of the child's `go` pipe (see `sys::ChildSetup::go`).
    pub(super) go: OwnedFd,
    /// Its wait status, if the child ended (reaped) before the launch was recorded: it
    /// failed a setup step, or was killed.
    pub(super) status: Option<libc::c_int>,
}
