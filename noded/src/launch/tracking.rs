//! Every process of one job: its cgroup, or without cgroups its process group.
//!
//! A process can leave its process group (with `setsid`), not its cgroup. noded signals them on
//! a stop; the node's supervisor waits until they are all gone before the job is over.

use super::cgroup::JobCgroup;
use super::process::signal_group;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io;

#[derive(Debug, Clone, Copy)]
pub enum JobProcesses<'a> {
    /// Everything in the job's cgroup.
    Cgroup(&'a JobCgroup),
    /// The job's process group (its id is the job's pid).
    Group(u32),
}

impl<'a> JobProcesses<'a> {
    /// The job's processes: its cgroup if it has one, else its process group once its pid is
    /// known.
    pub fn of(cgroup: Option<&'a JobCgroup>, job_pid: Option<u32>) -> Option<JobProcesses<'a>> {
        match (cgroup, job_pid) {
            (Some(cgroup), _) => Some(JobProcesses::Cgroup(cgroup)),
            (None, Some(pgid)) => Some(JobProcesses::Group(pgid)),
            (None, None) => None,
        }
    }

    /// Sends `signal` once to every process of the job as of one instant (a process the job
    /// starts in answer, a trap's checkpoint command, is not signalled: see
    /// [`JobCgroup::signal_all`]; `kill(2)` on a process group is atomic in the same way).
    /// `Ok(false)`: none was left to signal.
    pub fn signal(&self, signal: Signal) -> io::Result<bool> {
        match self {
            JobProcesses::Cgroup(cgroup) => Ok(cgroup.signal_all(signal)? > 0),
            JobProcesses::Group(pgid) => signal_group(*pgid, signal),
        }
    }

    /// SIGKILLs every process of the job.
    pub fn kill(&self) -> io::Result<()> {
        match self {
            JobProcesses::Cgroup(cgroup) => cgroup.kill_all(),
            JobProcesses::Group(pgid) => signal_group(*pgid, Signal::SIGKILL).map(drop),
        }
    }

    /// Whether any process of the job is still alive.
    pub fn any_alive(&self) -> io::Result<bool> {
        match self {
            JobProcesses::Cgroup(cgroup) => cgroup.is_populated(),
            JobProcesses::Group(pgid) => Ok(group_exists(*pgid)),
        }
    }
}

impl std::fmt::Display for JobProcesses<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobProcesses::Cgroup(cgroup) => write!(f, "cgroup {}", cgroup.dir.display()),
            JobProcesses::Group(pgid) => write!(f, "process group {pgid}"),
        }
    }
}

/// Whether process group `pgid` has a member (zombies included, until reaped).
fn group_exists(pgid: u32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    match killpg(Pid::from_raw(pgid), None) {
        Ok(()) => true,
        // EPERM: a member we may not signal (a setuid program) is a member all the same.
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_that_never_existed_is_gone() {
        // Beyond pid_max's default: no such group.
        let gone = JobProcesses::Group(4_194_305);
        assert!(!gone.any_alive().unwrap());
        assert!(!gone.signal(Signal::SIGTERM).unwrap());
        assert!(JobProcesses::of(None, None).is_none());
    }
}
