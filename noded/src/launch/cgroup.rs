//! One job's cgroups, as recorded in its plan: joining, signalling, waiting, removing.
//!
//! A cgroup in the v2 hierarchy holds every process of the job (tracking, signals,
//! `cgroup.kill`, `cgroup.events`), and on hybrid hosts cgroups in v1 controller hierarchies
//! carry its limits. noded creates them (see [`super::containment`]); the job's first process
//! is born in the v2 one (or joins it) and joins the v1 ones before exec, but for the CPU
//! limit's, which the node's supervisor moves the job into just after (see
//! [`JobCgroup::join_after_exec`]); the supervisor waits for them to empty and removes them.
//!
//! Everything here works on paths recorded in the job's plan (journaled), so a noded that restarted finds
//! the job's processes without trusting any pid it remembers.

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Rounds of "list the cgroup, kill who is new" for SIGKILL without `cgroup.kill`: a
/// process forked after its parent was listed is caught by the next round.
const KILL_ROUNDS: usize = 8;

/// How long a signal waits for the job's cgroup to freeze (`frozen 1`). A process in
/// uninterruptible sleep holds the freeze up until it wakes; the signal is sent then anyway.
const FREEZE_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCgroup {
    /// The job's cgroup directory in the v2 hierarchy.
    pub dir: PathBuf,
    /// The same cgroup as `/proc/<pid>/cgroup` names it (`0::<name>`), to check that a pid
    /// read from `cgroup.procs` still belongs to the job before signalling it.
    pub name: String,
    /// The job's cgroups in v1 controller hierarchies (memory, cpu, pids on hybrid hosts);
    /// they carry limits only.
    #[serde(default)]
    pub v1_dirs: Vec<PathBuf>,
    /// Those of `v1_dirs` the node's supervisor moves the job into just after its exec
    /// (the CPU limit's, see [`super::containment`]), rather than its first process before
    /// it. Empty in the plans of an older noded: all were joined before the exec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub v1_joined_after_exec: Vec<PathBuf>,
}

impl JobCgroup {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The pids in the job's cgroup; none once it is removed.
    pub fn pids(&self) -> io::Result<Vec<u32>> {
        match std::fs::read_to_string(self.file("cgroup.procs")) {
            Ok(text) => Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Whether any process of the job is alive (`populated 1` in `cgroup.events`). A removed
    /// cgroup holds nobody.
    pub fn is_populated(&self) -> io::Result<bool> {
        match std::fs::read_to_string(self.file("cgroup.events")) {
            Ok(text) => Ok(parse_populated(&text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sends `signal` once to every process of the job as of one instant, as `kill(2)` does
    /// to a process group: the cgroup is frozen while it is listed and signalled (as Slurm's
    /// proctrack/cgroup does), so no process forks in between and escapes, and it is thawed
    /// before any signal is handled. A process the job starts *in answer* to the signal (a
    /// bash trap saving a checkpoint, `python save.py`) is started after the thaw and is
    /// not signalled: it must be free to do its work in the grace. Returns how many
    /// processes were signalled.
    pub fn signal_all(&self, signal: Signal) -> io::Result<usize> {
        let _frozen = Freeze::begin(self);
        self.signal_rounds(signal, 1)
    }

    /// Thaws the job's cgroup if it is frozen: a noded that stopped between freezing the job
    /// to signal it and thawing it left it frozen (ysched freezes jobs for nothing else).
    pub fn thaw(&self) -> io::Result<()> {
        match std::fs::read_to_string(self.file("cgroup.freeze")) {
            Ok(text) if text.trim() == "1" => write_setting(&self.dir, "cgroup.freeze", "0"),
            _ => Ok(()),
        }
    }

    fn signal_rounds(&self, signal: Signal, rounds: usize) -> io::Result<usize> {
        let mut signalled = BTreeSet::new();
        for _ in 0..rounds {
            let fresh: Vec<u32> = self
                .pids()?
                .into_iter()
                .filter(|pid| !signalled.contains(pid))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                signalled.insert(pid);
                // A process that is gone by now needs no signal.
                if let Err(e) = signal_member(pid, &self.name, signal) {
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(signalled.len())
    }

    /// SIGKILLs every process of the job at once (`cgroup.kill`, Linux 5.14+; before that,
    /// each process in turn).
    pub fn kill_all(&self) -> io::Result<()> {
        match std::fs::write(self.file("cgroup.kill"), b"1") {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => Ok(()),
            // Before Linux 5.14: kill who is there, and who they fork meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.signal_rounds(Signal::SIGKILL, KILL_ROUNDS).map(drop)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel's OOM killer killed a process of the job because of its memory
    /// limit: `oom_kill` in v2's `memory.events`, or in v1's `memory.oom_control` (before
    /// Linux 4.13, which has no such counter there: the v1 `memory.failcnt`, which counts
    /// every time the limit was hit).
    pub fn out_of_memory(&self) -> bool {
        let counter = |path: PathBuf, key: &str| -> Option<u64> {
            let text = std::fs::read_to_string(path).ok()?;
            keyed_value(&text, key)
        };
        if counter(self.file("memory.events"), "oom_kill").is_some_and(|n| n > 0) {
            return true;
        }
        // A v1 directory without `memory.oom_control` is another controller's (cpu, pids):
        // nothing more to read there.
        self.v1_dirs.iter().any(|dir| {
            let Ok(control) = std::fs::read_to_string(dir.join("memory.oom_control")) else {
                return false;
            };
            match keyed_value(&control, "oom_kill") {
                Some(kills) => kills > 0,
                None => std::fs::read_to_string(dir.join("memory.failcnt"))
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .is_some_and(|n| n > 0),
            }
        })
    }

    /// Removes the job's cgroups (they must be empty). Ones already gone are fine.
    pub fn remove(&self) -> io::Result<()> {
        let mut first_error = None;
        for dir in self.v1_dirs.iter().chain(std::iter::once(&self.dir)) {
            match std::fs::remove_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    first_error.get_or_insert(io::Error::new(
                        e.kind(),
                        format!("cannot remove {}: {e}", dir.display()),
                    ));
                }
                _ => {}
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The `cgroup.procs` files the job's first process writes "0" to before exec, so that it
    /// and everything it starts are in the job's cgroups from the first instruction (all but
    /// those joined after the exec, see [`JobCgroup::join_after_exec`]). Opened by the
    /// supervisor (root) before the fork: the child may no longer be root when it writes.
    pub fn open_procs_files(&self) -> io::Result<Vec<OwnedFd>> {
        std::iter::once(&self.dir)
            .chain(
                self.v1_dirs
                    .iter()
                    .filter(|dir| !self.v1_joined_after_exec.contains(dir)),
            )
            .map(|dir| {
                let path = dir.join("cgroup.procs");
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
            })
            .collect()
    }

    /// Moves every process of the job into its cgroups joined after the exec
    /// ([`JobCgroup::v1_joined_after_exec`]): rounds of "list the v2 cgroup, move who is
    /// new", as a process forked before its parent moved was born outside, while one forked
    /// after is born inside. A process is moved only while the v2 cgroup holds it (so a pid
    /// reused by someone else is left alone); one gone meanwhile needs nothing.
    pub fn join_after_exec(&self) -> io::Result<()> {
        if self.v1_joined_after_exec.is_empty() {
            return Ok(());
        }
        let mut moved = BTreeSet::new();
        for _ in 0..KILL_ROUNDS {
            let fresh: Vec<u32> = self
                .pids()?
                .into_iter()
                .filter(|pid| moved.insert(*pid))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                let Ok(raw) = libc::pid_t::try_from(pid) else {
                    continue;
                };
                for dir in &self.v1_joined_after_exec {
                    if !in_cgroup(raw, &self.name) {
                        break;
                    }
                    let procs = dir.join("cgroup.procs");
                    match std::fs::write(&procs, pid.to_string()) {
                        Ok(()) => {}
                        // Gone meanwhile, or the job is over and its cgroups removed.
                        Err(e)
                            if e.raw_os_error() == Some(libc::ESRCH)
                                || e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(io::Error::new(
                                e.kind(),
                                format!("cannot write {pid} to {}: {e}", procs.display()),
                            ))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The job's v2 cgroup directory, open (for `clone3`'s `CLONE_INTO_CGROUP`).
    pub fn open_dir(&self) -> io::Result<OwnedFd> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.dir)
            .map(OwnedFd::from)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.dir.display())))
    }

    /// `cgroup.events`, for [`wait_until_empty`].
    pub fn open_events(&self) -> io::Result<File> {
        File::open(self.file("cgroup.events"))
    }
}

/// A job's cgroup frozen for as long as this lives (`cgroup.freeze`, Linux 5.2+). Best
/// effort: where the cgroup cannot be frozen (an older kernel, a cgroup frozen by someone
/// else, which is left as it is) nothing happens, and a signal reaches the processes listed
/// at one moment, without the guarantee that none forked meanwhile.
struct Freeze<'a> {
    cgroup: Option<&'a JobCgroup>,
}

impl<'a> Freeze<'a> {
    fn begin(cgroup: &'a JobCgroup) -> Freeze<'a> {
        let not_frozen = std::fs::read_to_string(cgroup.file("cgroup.freeze"))
            .is_ok_and(|text| text.trim() == "0");
        if !not_frozen || write_setting(&cgroup.dir, "cgroup.freeze", "1").is_err() {
            return Freeze { cgroup: None };
        }
        let deadline = std::time::Instant::now() + FREEZE_WAIT;
        while std::time::Instant::now() < deadline {
            let frozen = std::fs::read_to_string(cgroup.file("cgroup.events"))
                .map(|text| keyed_value(&text, "frozen") == Some(1))
                .unwrap_or(true);
            if frozen {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Freeze {
            cgroup: Some(cgroup),
        }
    }
}

impl Drop for Freeze<'_> {
    fn drop(&mut self) {
        if let Some(cgroup) = self.cgroup {
            // A cgroup removed meanwhile needs no thaw.
            let _ = write_setting(&cgroup.dir, "cgroup.freeze", "0");
        }
    }
}

/// Waits until the cgroup whose `cgroup.events` is `events` holds no process. The kernel
/// marks a change of that file as a priority event for poll(2), so this sleeps until a
/// process leaves; `between` runs after each wake-up (where a subreaper reaps its zombies).
pub fn wait_until_empty(events: &File, mut between: impl FnMut()) -> io::Result<()> {
    // A safety net only: every change of `populated` wakes poll at once.
    const RECHECK: Duration = Duration::from_secs(5);
    loop {
        // Reading re-arms the notification: a change after this read wakes the poll below.
        let mut text = String::new();
        let mut reader = events;
        reader.seek(SeekFrom::Start(0))?;
        reader.read_to_string(&mut text)?;
        if !parse_populated(&text) {
            return Ok(());
        }
        let mut pollfd = libc::pollfd {
            fd: events.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one pollfd on a descriptor `events` keeps open.
        let ready = unsafe { libc::poll(&mut pollfd, 1, RECHECK.as_millis() as libc::c_int) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
        between();
    }
}

/// Whether the cgroup whose `cgroup.events` is open as `events` has a process, read through
/// that descriptor: the read re-arms its poll notification (`POLLPRI` on the next change).
pub fn read_populated(events: &File) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    // One `pread` for the whole file ("populated N\nfrozen N\n"), read at every wake-up of
    // the supervisor's loop for a draining job; a longer one is read the long way.
    let mut buf = [0u8; 256];
    let read = events.read_at(&mut buf, 0)?;
    if read < buf.len() {
        return Ok(parse_populated(&String::from_utf8_lossy(&buf[..read])));
    }
    let mut text = String::new();
    let mut reader = events;
    reader.seek(SeekFrom::Start(0))?;
    reader.read_to_string(&mut text)?;
    Ok(parse_populated(&text))
}

fn parse_populated(events: &str) -> bool {
    keyed_value(events, "populated").is_some_and(|n| n > 0)
}

/// The number after `key` in a flat-keyed cgroup file (`key value` per line).
fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Signals `pid` if it is in the v2 cgroup `name`. The pid is pinned with a pidfd before its
/// membership is checked, so a pid that was reused by an unrelated process after the cgroup
/// was listed is never signalled.
fn signal_member(pid: u32, name: &str, signal: Signal) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall just returned this fd, and nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if !in_cgroup(pid, name) {
        return Ok(());
    }
    // SAFETY: pidfd_send_signal on a pidfd we own, without siginfo.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `/proc/<pid>/cgroup` puts `pid` in the v2 cgroup `name`.
pub fn in_cgroup(pid: libc::pid_t, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|text| v2_path(&text) == Some(name))
        .unwrap_or(false)
}

/// The v2 line (`0::<path>`) of a `/proc/<pid>/cgroup`.
pub fn v2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
}

/// Writes `value` to the cgroup file `dir/name`, naming both in the error.
pub fn write_setting(dir: &Path, name: &str, value: &str) -> io::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot write {value:?} to {}: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cgroup_files() {
        assert!(parse_populated("populated 1\nfrozen 0\n"));
        assert!(!parse_populated("populated 0\nfrozen 0\n"));
        assert!(!parse_populated(""));
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed_value(events, "oom_kill"), Some(1));
        assert_eq!(keyed_value(events, "oom"), Some(2));
        assert_eq!(keyed_value(events, "nope"), None);
        assert_eq!(
            v2_path("9:name=systemd:/\n4:memory:/a/b\n0::/ysched/job_1\n"),
            Some("/ysched/job_1")
        );
        assert_eq!(v2_path("4:memory:/a\n"), None);
    }

    #[test]
    fn a_removed_cgroup_is_empty_and_harmless() {
        let gone = JobCgroup {
            dir: PathBuf::from("/nonexistent/ysched/job_1"),
            name: "/ysched/job_1".into(),
            v1_dirs: vec![PathBuf::from("/nonexistent/memory/job_1")],
            v1_joined_after_exec: Vec::new(),
        };
        assert_eq!(gone.pids().unwrap(), Vec::<u32>::new());
        assert!(!gone.is_populated().unwrap());
        assert_eq!(gone.signal_all(Signal::SIGTERM).unwrap(), 0);
        gone.kill_all().unwrap();
        gone.remove().unwrap();
        assert!(!gone.out_of_memory());
    }

    #[test]
    fn this_process_is_in_its_own_cgroup_only() {
        let me = std::process::id() as libc::pid_t;
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if let Some(path) = v2_path(&own) {
            assert!(in_cgroup(me, path));
        }
        assert!(!in_cgroup(me, "/surely/not/this/one"));
    }
}
