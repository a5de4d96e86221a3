//! Process plumbing for noded: job process groups, and an older noded's per-job processes.
//!
//! A job's process group is signalled as a whole. An older noded ran one process per job
//! (`noded __shepherd <job dir>`, its "shepherd"); a restarted noded recognises those still
//! running by their command line, and learns of their exit as an event (pidfd).

use super::checkpoint_scan::CheckpointDir;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use tokio::io::unix::AsyncFd;

/// The hidden subcommand an older noded ran each job's process as.
const OLD_JOB_PROCESS_SUBCOMMAND: &str = "__shepherd";

/// Sends `signal` to the process group `pgid`. `Ok(false)` when the group no longer exists.
/// Group ids below 2 are refused: `killpg(0)` would hit noded's own group and 1 is init.
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<bool> {
    let pgid = i32::try_from(pgid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("bad pgid {pgid}")))?;
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::ESRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether `pid` is an older noded's live process of the job in `job_dir`, judged by its
/// command line (`<exe> __shepherd <job_dir>`), so a recycled pid is never mistaken for one.
pub fn is_old_job_process(pid: u32, job_dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|&b| b == 0).skip(1);
    args.next() == Some(OLD_JOB_PROCESS_SUBCOMMAND.as_bytes())
        && args.next() == Some(job_dir.as_os_str().as_encoded_bytes())
}

/// Looks through `/proc` for an older noded's process of the job in `job_dir`: the fallback
/// when that noded stopped between starting it and recording its pid.
pub fn find_old_job_process(job_dir: &Path) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| is_old_job_process(pid, job_dir))
}

/// The node supervisor's connection for one job, read line by line (see
/// [`super::node_supervisor`]'s protocol); its write half is the job's task's.
pub type Announcement = tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>;

/// The write half of a job's connection to the node's supervisor: the job's stop progress
/// goes there (`stop <json>`).
pub type SupervisorWriter = tokio::net::unix::OwnedWriteHalf;

/// Who runs a job, which noded waits on for the job's end.
pub enum JobOwner {
    /// The node's supervisor: its connection's end (read as the announcement, see the job's
    /// task) is the job's.
    NodeSupervisor,
    /// An older noded's process of the job, found after a restart (not our child): its pidfd
    /// becomes readable when it exits.
    OldJobProcess(AsyncFd<OwnedFd>),
}

impl JobOwner {
    /// Adopts an older noded's running process `pid` of a job. Fails when it is already gone.
    pub fn adopt(pid: u32) -> io::Result<JobOwner> {
        let pid = libc::pid_t::try_from(pid)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall just returned this fd, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: the OwnedFd moves into the AsyncFd and stays open as long as it lives.
        let pidfd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?;
        Ok(JobOwner::OldJobProcess(pidfd))
    }

    /// Resolves when an older noded's process of the job has exited; never for the node's
    /// supervisor (its connection's end says the job's).
    pub async fn exited(&mut self) {
        match self {
            JobOwner::NodeSupervisor => std::future::pending().await,
            JobOwner::OldJobProcess(pidfd) => {
                if let Err(e) = pidfd.readable().await {
                    tracing::warn!("waiting on pidfd {}: {e}", pidfd.get_ref().as_raw_fd());
                }
            }
        }
    }
}

/// The latest modification time under a job's checkpoint directory (recursively, not
/// following symlinks below it, with the job user's rights), in ms since the epoch; `None`
/// when there is nothing. Bounded so a huge tree cannot stall noded: past the bound, the
/// newest of what was seen.
pub fn newest_mtime_ms(dir: &CheckpointDir) -> Option<i64> {
    use super::checkpoint_scan::{newest_as, Newest, ScanLimits};
    const LIMITS: ScanLimits = ScanLimits {
        max_entries: 100_000,
        max_depth: 64,
    };
    match newest_as(dir, LIMITS) {
        Newest::Complete(newest) | Newest::TooLarge(newest) => newest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_dangerous_groups() {
        assert!(signal_group(0, Signal::SIGTERM).is_err());
        assert!(signal_group(1, Signal::SIGTERM).is_err());
    }

    #[test]
    fn this_process_is_no_old_job_process() {
        assert!(!is_old_job_process(std::process::id(), Path::new("/x")));
        assert!(find_old_job_process(Path::new("/nonexistent/jobs/1")).is_none());
    }

    #[test]
    fn newest_mtime_finds_nested_files() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = CheckpointDir {
            path: dir.path().to_owned(),
            scan_as: None,
        };
        assert_eq!(newest_mtime_ms(&ckpt), None);
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/f"), b"x").unwrap();
        let newest = newest_mtime_ms(&ckpt).unwrap();
        assert!(newest > ysched_common::time::now_ms() - 60_000);
    }
}
