//! The shepherd: a small per-job supervisor, started by noded as `noded __shepherd <job dir>`
//! in its own session. It outlives noded restarts (systemd `KillMode=process`), so running
//! jobs do too.
//!
//! It reads the plan from `state.json`, forks the job (into the job's cgroups, new session,
//! job user, working directory, output files), records the job's pid in `pid`, tells noded
//! the pid on its stdout (a pipe noded may no longer be reading), and waits for the job's main
//! process. Everything the child does before exec may block (a hung network filesystem, an
//! automount): its first act is to join the job's cgroup and, without cgroups, to record its
//! process group in `group`, so that noded can stop it (a cancel, the time limit, a
//! preemption) and the fence can fence it at any moment, not only once it runs. Output files
//! are opened so that they cannot block: only regular files and `/dev/null` are accepted. Then it waits until *every* process of the job is gone (its cgroup is empty, or
//! without cgroups its process group): at once, by killing them, when the job ended by
//! itself; when noded is stopping the job (the `stopping` notice in the job directory), the
//! others keep their grace and noded kills what is left at its end. Only then does it remove
//! the job's cgroups and record the outcome in `exit.json`, so that noded reports the job's
//! end when its last process is gone. It is the job's child subreaper: orphaned job
//! processes become its children, and it reaps them.
//!
//! It also fences: once the job has started, a watcher thread reads the node's fence lease
//! (`<spool>/lease`, see [`super::lease`]) every second, and when `CLOCK_BOOTTIME` is past
//! its deadline (the node has not heard from schedd for `node.fence_after_secs`), it stops
//! the job itself: the `stopping` notice as noded writes it, SIGTERM to every process of the
//! job, the job's grace, SIGKILL to what is left. That needs no noded, so a job is stopped
//! even while noded is stopped, hung or gone, and schedd may run it elsewhere. `exit.json`
//! then says `fenced`, with the time of that SIGTERM.
//!
//! It does no name-service lookups: noded resolved the user before starting it. Apart from
//! the fence's watcher, it is single-threaded. The watcher starts before the job is forked
//! (a job stuck before its exec must be fenced too); the forked child makes only
//! async-signal-safe system calls on data prepared before the fork (no allocation, no lock),
//! so forking beside that thread is safe.

use super::cgroup::JobCgroup;
use super::lease::{boottime_ms, Lease};
use super::spool::{ExitRecord, JobDir, JobRecord};
use super::tracking::JobProcesses;
use super::ExecPlan;
use nix::sys::signal::{signal, SigHandler, Signal};
use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use ysched_common::time::{now_ms, rfc3339};

/// After this long waiting for the job's last processes, the shepherd says so in its log.
const SLOW_END: Duration = Duration::from_secs(60);
/// How often the fence's watcher reads the lease.
const LEASE_CHECK: Duration = Duration::from_secs(1);
/// After reading a deadline that has passed, the watcher reads the lease again this much
/// later before it fences: the agent rewrites the file in place, and a read overlapping a
/// rewrite may see part of each deadline.
const LEASE_RECHECK: Duration = Duration::from_millis(50);

/// Runs the shepherd for the job in `job_dir`; the process's whole life.
pub fn run(job_dir: &Path) -> ExitCode {
    close_inherited_fds();
    ignore_termination_signals();
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

/// Descriptors noded did not mean to pass on (a library's without close-on-exec) would
/// otherwise reach the job. Keeps stdin, stdout (the pipe to noded) and stderr (the log).
fn close_inherited_fds() {
    // SAFETY: close_range only closes descriptors; none above 2 is in use yet.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if closed < 0 {
        log(&format!("close_range: {}", io::Error::last_os_error()));
    }
}

/// noded's stop requests go to the job's processes, not here; a stray SIGTERM or SIGHUP (the
/// session of a terminal, a broad `kill`) must not orphan the job.
fn ignore_termination_signals() {
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        // SAFETY: installing SIG_IGN involves no handler code.
        if let Err(e) = unsafe { signal(sig, SigHandler::SigIgn) } {
            log(&format!("cannot ignore {sig}: {e}"));
        }
    }
}

fn run_job(dir: &JobDir, plan: &ExecPlan, grace_secs: u32) -> ExitRecord {
    // Orphans of the job (a daemon's parent exiting, a double fork) become this process's
    // children instead of init's, so their zombies are reaped even where init does not.
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        log(&format!(
            "cannot become the job's subreaper: {}",
            io::Error::last_os_error()
        ));
    }
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
    let mut job = match start_job(dir, plan, join) {
        Ok(job) => job,
        Err(StartError { error, node_fault }) => {
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
    announce_start(pid);

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
        reap_orphans();
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
    reap_orphans();
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

/// The fence's watcher thread and what it did, shared with the main thread.
struct Fence {
    state: Arc<Mutex<FenceState>>,
}

#[derive(Debug, Default)]
struct FenceState {
    /// The job is over: the watcher does nothing more.
    over: bool,
    /// The job's pid, once its exec is done (before, its cgroup or the process group its
    /// first process recorded in `group` stand for it).
    job_pid: Option<u32>,
    fenced: bool,
    /// When the fence's stop began, ms since the epoch.
    term_time_ms: i64,
    /// The fence's SIGKILL found processes alive.
    killed: bool,
}

impl Fence {
    /// Starts the watcher of the lease of the job in `dir` (in `cgroup` if it has one), just
    /// before the job is forked.
    fn watch(dir: &JobDir, cgroup: Option<JobCgroup>, grace_secs: u32) -> Fence {
        let state = Arc::new(Mutex::new(FenceState::default()));
        let Some(lease) = dir.lease() else {
            log("no lease file beside the job directory: this job is never fenced");
            return Fence { state };
        };
        let watcher = FenceWatcher {
            dir: dir.clone(),
            lease,
            cgroup,
            grace_secs,
            state: state.clone(),
        };
        if let Err(e) = std::thread::Builder::new()
            .name("fence".into())
            .spawn(move || watcher.run())
        {
            log(&format!(
                "cannot start the fence's watcher, this job is never fenced: {e}"
            ));
        }
        Fence { state }
    }

    /// The job's exec is done: it is `pid`, and its process group.
    fn job_started(&self, pid: u32) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .job_pid = Some(pid);
    }

    /// The job is over (every process gone): stops the watcher acting, and returns what the
    /// fence did, as the fields of the exit record it owns.
    fn end(&self) -> ExitRecord {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.over = true;
        ExitRecord {
            fenced: state.fenced,
            term_time_ms: state.term_time_ms,
            killed: state.killed,
            ..Default::default()
        }
    }
}

struct FenceWatcher {
    dir: JobDir,
    lease: std::path::PathBuf,
    cgroup: Option<JobCgroup>,
    grace_secs: u32,
    state: Arc<Mutex<FenceState>>,
}

impl FenceWatcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the lease every second until it runs out (then fences, once) or the job is
    /// over.
    fn run(self) {
        let mut said_unreadable = false;
        loop {
            std::thread::sleep(LEASE_CHECK);
            if self.lock().over {
                return;
            }
            match Lease::read(&self.lease) {
                Ok(Some(Lease::Until(deadline))) => {
                    said_unreadable = false;
                    let now = boottime_ms();
                    // Without cgroups, a job not yet in its own process group cannot be
                    // fenced yet: looked at again a second later.
                    if now > deadline && self.processes().is_some() && self.still_out() {
                        return self.fence(now - deadline);
                    }
                }
                Ok(Some(Lease::Off) | None) => said_unreadable = false,
                Err(e) => {
                    if !said_unreadable {
                        said_unreadable = true;
                        log(&format!("cannot read the fence lease, not fencing: {e}"));
                    }
                }
            }
        }
    }

    /// The lease read a moment ago had run out: whether it still has on a second read (see
    /// [`LEASE_RECHECK`]).
    fn still_out(&self) -> bool {
        std::thread::sleep(LEASE_RECHECK);
        matches!(
            Lease::read(&self.lease),
            Ok(Some(Lease::Until(deadline))) if boottime_ms() > deadline
        )
    }

    /// The lease ran out `late_ms` ago: the node has lost schedd, which may run the job
    /// elsewhere now. Stops the job as noded would: the `stopping` notice (so the main
    /// process's end does not cut the others' grace), SIGTERM to every process, the grace,
    /// then SIGKILL to whatever is left.
    /// The job's processes: its cgroup, else its process group (its pid, or before its exec
    /// the group its first process recorded); `None` before that process has.
    fn processes(&self) -> Option<JobProcesses<'_>> {
        let pid = self.lock().job_pid.or_else(|| self.dir.read_job_group());
        JobProcesses::of(self.cgroup.as_ref(), pid)
    }

    fn fence(self, late_ms: u64) {
        let Some(processes) = self.processes() else {
            return;
        };
        let begun = self.dir.read_stop_notice();
        let now = now_ms();
        {
            let mut state = self.lock();
            if state.over || !processes.any_alive().unwrap_or(true) {
                return;
            }
            state.fenced = true;
            state.term_time_ms = match begun {
                Some(term) if term > 0 => term,
                _ => now,
            };
        }
        let grace_ms = i64::from(self.grace_secs) * 1000;
        let term_time_ms = match begun {
            // noded had begun stopping the job (and may be stopped itself since): that stop's
            // SIGTERM went out already; the fence makes sure its SIGKILL does too.
            Some(term) if term > 0 => {
                log(&format!(
                    "fence: the node's lease ran out {late_ms} ms ago, during a stop begun                      at {}: killing what is left at the end of its grace",
                    rfc3339(term)
                ));
                term
            }
            Some(_) => {
                log("fence: the node's lease ran out while noded was killing the job");
                now - grace_ms
            }
            None => {
                log(&format!(
                    "fence: the node's lease ran out {late_ms} ms ago (no word from schedd):                      stopping the job, SIGTERM now, SIGKILL after {}s",
                    self.grace_secs
                ));
                if let Err(e) = self.dir.write_stop_notice(now) {
                    log(&format!(
                        "cannot write the stop notice, so the main process's end will end                          the others' grace: {e}"
                    ));
                }
                if let Err(e) = processes.signal(Signal::SIGTERM) {
                    log(&format!("fence: cannot send SIGTERM to {processes}: {e}"));
                }
                now
            }
        };
        let wait_ms = u64::try_from(term_time_ms + grace_ms - now_ms()).unwrap_or(0);
        let until = Instant::now() + Duration::from_millis(wait_ms);
        while Instant::now() < until {
            if self.lock().over {
                return;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        {
            let mut state = self.lock();
            if state.over {
                return;
            }
            if processes.any_alive().unwrap_or(true) {
                state.killed = true;
            } else {
                return;
            }
        }
        log("fence: grace over, killing what is left of the job");
        if let Err(e) = processes.kill() {
            log(&format!("fence: cannot kill {processes}: {e}"));
        }
    }
}

/// Collects the exit status of every child that has ended (orphaned job processes the
/// shepherd inherited as their subreaper), without waiting.
fn reap_orphans() {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on any child, into a live local.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}

/// The job did not start: `error` says why, and `node_fault` whether it was for a reason of
/// the node's (another node may run it) rather than the job's.
fn launch_failed(error: String, node_fault: bool) -> ExitRecord {
    ExitRecord {
        end_time_ms: now_ms(),
        error: Some(error),
        node_fault,
        ..Default::default()
    }
}

/// Why the job could not be started (the message for `FinishedRecord::error`), and whether that
/// is the node's fault (see [`launch_failed`]).
struct StartError {
    error: String,
    node_fault: bool,
}

impl StartError {
    fn job(error: String) -> StartError {
        StartError {
            error,
            node_fault: false,
        }
    }
}

/// Tells noded the job's pid and start time: one line on stdout, then stdout is closed so
/// noded sees the end. A noded that is gone makes this fail with EPIPE, which is fine: it
/// reads the `pid` file when it comes back.
fn announce_start(pid: u32) {
    let line = format!("started {pid} {}\n", now_ms());
    // SAFETY: plain writes and dup2 on the standard descriptors this process owns.
    unsafe {
        libc::write(1, line.as_ptr().cast(), line.len());
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if devnull >= 0 {
            libc::dup2(devnull, 1);
            libc::close(devnull);
        }
    }
}

/// Setup steps done in the forked child; on failure the child reports which one on a pipe
/// (std's own pipe carries only the errno), with what it refused (a [`Refused`], 0: nothing,
/// the system call failed).
#[derive(Clone, Copy)]
#[repr(u8)]
enum Step {
    Cgroup = 1,
    Session,
    Groups,
    Gid,
    Uid,
    Workdir,
    Interpreter,
    CheckpointDir,
    Stdout,
    Stderr,
}

impl Step {
    fn from_byte(byte: u8) -> Option<Step> {
        [
            Step::Cgroup,
            Step::Session,
            Step::Groups,
            Step::Gid,
            Step::Uid,
            Step::Workdir,
            Step::Interpreter,
            Step::CheckpointDir,
            Step::Stdout,
            Step::Stderr,
        ]
        .into_iter()
        .find(|step| *step as u8 == byte)
    }

    /// A failure of this step is the node's, not the job's: it has nothing to do with the
    /// job's user, paths or program.
    fn is_node_fault(self) -> bool {
        matches!(self, Step::Cgroup | Step::Session)
    }

    fn describe(self, plan: &ExecPlan) -> String {
        let user = &plan.user;
        match self {
            Step::Cgroup => format!(
                "cannot move the job into its cgroup {}",
                plan.cgroup
                    .as_ref()
                    .map_or(Path::new(""), |c| c.dir.as_path())
                    .display()
            ),
            Step::Session => "cannot start a new session".to_string(),
            Step::Groups => format!("cannot set the supplementary groups of {user}"),
            Step::Gid => format!("cannot switch to gid {}", plan.gid),
            Step::Uid => format!("cannot switch to user {user} (uid {})", plan.uid),
            Step::Workdir => format!(
                "cannot enter working directory {} as {user}",
                plan.workdir.display()
            ),
            Step::Interpreter => format!(
                "cannot run the script's interpreter {} as {user}",
                plan.interpreter
                    .as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
            ),
            Step::CheckpointDir => format!(
                "cannot create checkpoint directory {} as {user}",
                plan.checkpoint_dir
                    .as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
            ),
            Step::Stdout => format!(
                "cannot open output file {} as {user}",
                plan.stdout.display()
            ),
            Step::Stderr => format!(
                "cannot open error file {} as {user}",
                plan.stderr.as_deref().unwrap_or(Path::new("")).display()
            ),
        }
    }

    /// The refusal of an output file that is no regular file (nor `/dev/null`).
    fn refusal(self, plan: &ExecPlan, refused: Refused) -> String {
        let (what, path) = match self {
            Step::Stderr => ("error", plan.stderr.as_deref().unwrap_or(Path::new(""))),
            _ => ("output", plan.stdout.as_path()),
        };
        format!(
            "{what} file {} is {}: -o and -e must name a regular file (or /dev/null)",
            path.display(),
            refused.describe()
        )
    }
}

/// What kind of file an output path named, when it was refused: anything but a regular file
/// and `/dev/null` could block the job before it starts (a FIFO nobody reads), hand its
/// output to another process, or write to a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Refused {
    Fifo = 1,
    Socket,
    CharDevice,
    BlockDevice,
    Other,
}

impl Refused {
    fn from_byte(byte: u8) -> Option<Refused> {
        [
            Refused::Fifo,
            Refused::Socket,
            Refused::CharDevice,
            Refused::BlockDevice,
            Refused::Other,
        ]
        .into_iter()
        .find(|r| *r as u8 == byte)
    }

    /// The kind of file `mode` (`st_mode`) is, unless it is one output may go to.
    fn of_mode(mode: libc::mode_t, rdev: libc::dev_t) -> Option<Refused> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => None,
            libc::S_IFCHR if rdev == DEV_NULL => None,
            libc::S_IFIFO => Some(Refused::Fifo),
            libc::S_IFSOCK => Some(Refused::Socket),
            libc::S_IFCHR => Some(Refused::CharDevice),
            libc::S_IFBLK => Some(Refused::BlockDevice),
            _ => Some(Refused::Other),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Refused::Fifo => "a FIFO",
            Refused::Socket => "a socket",
            Refused::CharDevice => "a character device",
            Refused::BlockDevice => "a block device",
            Refused::Other => "not a regular file",
        }
    }
}

/// `/dev/null`'s device number (1:3 on every Linux).
const DEV_NULL: libc::dev_t = libc::makedev(1, 3);

/// Everything the child needs, prepared before the fork so the child only makes syscalls.
struct ChildSetup {
    /// `cgroup.procs` of each of the job's cgroups, written "0" (this process) first thing.
    join_cgroups: Vec<OwnedFd>,
    switch_user: bool,
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
    workdir: CString,
    /// The script's `#!` program, checked for execute permission as the job user.
    interpreter: Option<CString>,
    /// The checkpoint directory and its ancestors, outermost first (`mkdir -p`).
    checkpoint_dirs: Vec<CString>,
    stdout: CString,
    stderr: Option<CString>,
    output_flags: libc::c_int,
    step_report: OwnedFd,
    /// The job directory's `group` file, where the child writes its pid (its process group)
    /// first thing; `None` with cgroups, which hold the job from its first instruction.
    group_file: Option<OwnedFd>,
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("path contains a NUL byte: {}", path.display()))
}

/// Forks and execs the job.
fn start_job(
    dir: &JobDir,
    plan: &ExecPlan,
    join_cgroups: Vec<OwnedFd>,
) -> Result<std::process::Child, StartError> {
    let (step_read, step_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| StartError {
            error: format!("cannot create a pipe: {e}"),
            node_fault: true,
        })?;
    let checkpoint_dirs = match &plan.checkpoint_dir {
        Some(dir) => {
            let mut ancestors: Vec<&Path> = dir
                .ancestors()
                .filter(|p| !p.as_os_str().is_empty() && *p != Path::new("/"))
                .collect();
            ancestors.reverse();
            ancestors
                .into_iter()
                .map(c_path)
                .collect::<Result<_, _>>()
                .map_err(StartError::job)?
        }
        None => Vec::new(),
    };
    let output_mode = if plan.append_output {
        libc::O_APPEND
    } else {
        libc::O_TRUNC
    };
    let group_file = match plan.cgroup {
        Some(_) => None,
        None => Some(
            // A spool that cannot take this small file is the node's fault (a full disk).
            dir.create_group_file().map_err(|e| StartError {
                error: format!("cannot create {}: {e}", dir.group().display()),
                node_fault: true,
            })?,
        ),
    };
    let setup = ChildSetup {
        join_cgroups,
        switch_user: plan.switch_user,
        uid: Uid::from_raw(plan.uid),
        gid: Gid::from_raw(plan.gid),
        groups: plan.groups.iter().copied().map(Gid::from_raw).collect(),
        workdir: c_path(&plan.workdir).map_err(StartError::job)?,
        interpreter: plan
            .interpreter
            .as_deref()
            .map(c_path)
            .transpose()
            .map_err(StartError::job)?,
        checkpoint_dirs,
        stdout: c_path(&plan.stdout).map_err(StartError::job)?,
        stderr: plan
            .stderr
            .as_deref()
            .map(c_path)
            .transpose()
            .map_err(StartError::job)?,
        // Non-blocking: a FIFO nobody reads fails at once (ENXIO) instead of blocking the
        // job until someone does; cleared once the file is known to be a regular one. No
        // controlling terminal from a terminal device either (refused anyway).
        output_flags: libc::O_WRONLY
            | libc::O_CREAT
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | libc::O_NOCTTY
            | output_mode,
        step_report: step_write,
        group_file,
    };

    let mut command = Command::new(&plan.program);
    command
        .args(&plan.args)
        .env_clear()
        .envs(&plan.env)
        .stdin(Stdio::null());
    // SAFETY: the closure only makes async-signal-safe syscalls on data prepared above.
    unsafe {
        command.pre_exec(move || setup_child(&setup));
    }
    let spawned = command.spawn();
    // The closure (and its copy of the pipe's write end) lives in `command`: drop it, so that
    // reading sees end-of-file once the child has exec'd or died.
    drop(command);
    let mut failed_step = [0u8; 2];
    let reported = std::fs::File::from(step_read)
        .read(&mut failed_step)
        .unwrap_or(0);

    spawned.map_err(|e| {
        let step = Step::from_byte(failed_step[0]).filter(|_| reported == 2);
        if let (Some(step), Some(refused)) = (step, Refused::from_byte(failed_step[1])) {
            return StartError::job(step.refusal(plan, refused));
        }
        if let (Some(Step::Interpreter), Some(interpreter)) = (step, &plan.interpreter) {
            if e.kind() == io::ErrorKind::NotFound {
                return StartError::job(format!(
                    "the script's interpreter {} does not exist on this node",
                    interpreter.display()
                ));
            }
        }
        let (what, node_fault) = match step {
            Some(step) => (step.describe(plan), step.is_node_fault()),
            // No step failed: the fork itself (out of processes or memory: the node's), or
            // the exec (the job's program).
            None => (
                format!("cannot execute {}", plan.program.display()),
                matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM)),
            ),
        };
        StartError {
            error: format!("{what}: {e}"),
            node_fault,
        }
    })
}

/// Runs in the forked child, before exec: new session, user switch, directories, output.
fn setup_child(s: &ChildSetup) -> io::Result<()> {
    let report = |step: Step, refused: Option<Refused>| {
        let bytes = [step as u8, refused.map_or(0, |r| r as u8)];
        // SAFETY: write(2) of two bytes from a live local to a pipe fd we own; one write of
        // less than PIPE_BUF bytes arrives whole.
        unsafe { libc::write(s.step_report.as_raw_fd(), bytes.as_ptr().cast(), 2) };
    };
    let fail = |step: Step, error: io::Error| -> io::Error {
        report(step, None);
        error
    };
    let check = |step: Step, ret: libc::c_int| -> io::Result<()> {
        if ret < 0 {
            Err(fail(step, io::Error::last_os_error()))
        } else {
            Ok(())
        }
    };

    // The shepherd ignores these; ignored dispositions survive exec, the job needs defaults.
    // Reset before the child joins the job's cgroup: a stop that reaches it there before its
    // exec ends it (its SIGTERM is not lost on an ignored disposition).
    for sig in [
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGPIPE,
    ] {
        // SAFETY: resetting a disposition to SIG_DFL is async-signal-safe.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // Before anything that can block, while still root: from here on every process the job
    // starts is in its cgroups, and cannot leave them, and noded can stop it.
    for procs in &s.join_cgroups {
        // SAFETY: write(2) of one byte from a static to a descriptor opened before the fork.
        let written = unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        check(Step::Cgroup, if written == 1 { 0 } else { -1 })?;
    }
    // Own session and process group: killpg(job pid) reaches the whole job, not the shepherd.
    nix::unistd::setsid().map_err(|e| fail(Step::Session, e.into()))?;
    if let Some(group) = &s.group_file {
        // Without cgroups, the process group is what noded stops: recorded before anything
        // that can block. Best effort: if it cannot be written, stops wait for the exec.
        let mut digits = [0u8; 20];
        let text = decimal(std::process::id(), &mut digits);
        // SAFETY: write(2) from a live local to a descriptor opened before the fork.
        unsafe { libc::write(group.as_raw_fd(), text.as_ptr().cast(), text.len()) };
    }
    if s.switch_user {
        // Groups first: after setuid the process may no longer change them.
        nix::unistd::setgroups(&s.groups).map_err(|e| fail(Step::Groups, e.into()))?;
        nix::unistd::setgid(s.gid).map_err(|e| fail(Step::Gid, e.into()))?;
        nix::unistd::setuid(s.uid).map_err(|e| fail(Step::Uid, e.into()))?;
    }
    // From here on, the kernel checks every path as the job user.
    // SAFETY: chdir/mkdir/open/dup2/close on NUL-terminated strings prepared before fork.
    unsafe {
        check(Step::Workdir, libc::chdir(s.workdir.as_ptr()))?;
        if let Some(interpreter) = &s.interpreter {
            check(
                Step::Interpreter,
                libc::access(interpreter.as_ptr(), libc::X_OK),
            )?;
        }
        for dir in &s.checkpoint_dirs {
            if libc::mkdir(dir.as_ptr(), 0o755) < 0 {
                let error = io::Error::last_os_error();
                if error.raw_os_error() != Some(libc::EEXIST) {
                    return Err(fail(Step::CheckpointDir, error));
                }
            }
        }
        let out = open_output(&s.stdout, s.output_flags)
            .map_err(|(refused, e)| fail_output(Step::Stdout, refused, e, &report))?;
        check(Step::Stdout, libc::dup2(out, 1))?;
        libc::close(out);
        match &s.stderr {
            Some(path) => {
                let err = open_output(path, s.output_flags)
                    .map_err(|(refused, e)| fail_output(Step::Stderr, refused, e, &report))?;
                check(Step::Stderr, libc::dup2(err, 2))?;
                libc::close(err);
            }
            None => check(Step::Stderr, libc::dup2(1, 2))?,
        }
    }
    Ok(())
}

fn fail_output(
    step: Step,
    refused: Option<Refused>,
    error: io::Error,
    report: &impl Fn(Step, Option<Refused>),
) -> io::Error {
    report(step, refused);
    error
}

/// Opens an output file of the job (in the child, as the job user) so that it cannot block:
/// non-blocking (a FIFO without a reader fails at once), then checked to be a regular file or
/// `/dev/null`, then made blocking again. Symlinks are followed: they are the user's own, and
/// the path is opened with the user's rights. The error says what was refused, if anything.
///
/// # Safety
/// Async-signal-safe: open, fstat, stat, fcntl and close only.
unsafe fn open_output(
    path: &CString,
    flags: libc::c_int,
) -> Result<libc::c_int, (Option<Refused>, io::Error)> {
    let fd = libc::open(path.as_ptr(), flags, 0o644);
    if fd < 0 {
        let error = io::Error::last_os_error();
        // ENXIO: a FIFO nobody has open for reading, or a socket; say which.
        let mut st: libc::stat = std::mem::zeroed();
        let refused = (error.raw_os_error() == Some(libc::ENXIO)
            && libc::stat(path.as_ptr(), &mut st) == 0)
            .then(|| Refused::of_mode(st.st_mode, st.st_rdev).unwrap_or(Refused::Other));
        return Err((refused, error));
    }
    let mut st: libc::stat = std::mem::zeroed();
    if libc::fstat(fd, &mut st) < 0 {
        let error = io::Error::last_os_error();
        libc::close(fd);
        return Err((None, error));
    }
    if let Some(refused) = Refused::of_mode(st.st_mode, st.st_rdev) {
        libc::close(fd);
        return Err((Some(refused), io::Error::from_raw_os_error(libc::EINVAL)));
    }
    let status = libc::fcntl(fd, libc::F_GETFL);
    if status < 0 || libc::fcntl(fd, libc::F_SETFL, status & !libc::O_NONBLOCK) < 0 {
        let error = io::Error::last_os_error();
        libc::close(fd);
        return Err((None, error));
    }
    Ok(fd)
}

/// `n` in decimal, in `buf` (async-signal-safe: no allocation).
fn decimal(mut n: u32, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

/// One line on the shepherd's stderr (its `shepherd.log`). A line that cannot be written (a
/// full spool) is dropped: `eprintln!` would panic, and the shepherd die without recording
/// the job's end.
fn log(message: &str) {
    use std::io::Write;
    let line = format!(
        "{} shepherd[{}]: {message}\n",
        rfc3339(now_ms()),
        std::process::id()
    );
    let _ = io::stderr().lock().write_all(line.as_bytes());
}
