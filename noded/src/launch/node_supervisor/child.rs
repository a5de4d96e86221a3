//! Starting the job: its first process's setup and exec arguments, prepared before it is
//! created, and what its failures mean.
//!
//! Everything the child needs is resolved here (the child itself only runs
//! [`in_child`](super::in_child)); when it fails, the step it reports says what the failure
//! means: whose fault it is (the node's or the job's), and the message for the job's end.

use crate::launch::spool::JobDir;
use crate::launch::ExecPlan;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Why the job could not be started (the message for `FinishedRecord::error`), and whether that
/// is the node's fault (another node may run the job).
pub(in crate::launch) struct StartError {
    pub(in crate::launch) error: String,
    pub(in crate::launch) node_fault: bool,
}

impl StartError {
    fn job(error: String) -> StartError {
        StartError {
            error,
            node_fault: false,
        }
    }
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("path contains a NUL byte: {}", path.display()))
}

/// What creating the job's first process needs, prepared: the child's setup, the parent's
/// copies of the descriptors it names (closed once the child exists), and the read end of
/// its step pipe.
pub(in crate::launch) struct Prepared {
    pub(in crate::launch) setup: ChildSetup,
    pub(in crate::launch) parent_copies: ParentCopies,
    pub(in crate::launch) step_read: OwnedFd,
}

/// Resolves everything the job's child needs before it is created.
pub(in crate::launch) fn prepare(
    dir: &JobDir,
    plan: &ExecPlan,
    join_cgroups: Vec<OwnedFd>,
) -> Result<Prepared, StartError> {
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
    let mut parent_copies = ParentCopies::default();
    let join_cgroups = join_cgroups
        .into_iter()
        .map(|fd| parent_copies.keep(fd))
        .collect();
    let step_report = parent_copies.keep(step_write);
    let group_file = group_file.map(|fd| parent_copies.keep(fd));
    let setup = ChildSetup {
        join_cgroups,
        switch_user: plan.switch_user,
        uid: plan.uid,
        gid: plan.gid,
        groups: plan.groups.clone(),
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
        step_report,
        group_file,
        go: None,
    };
    Ok(Prepared {
        setup,
        parent_copies,
        step_read,
    })
}

/// The job's program, arguments and environment for `execve` (the environment is the plan's
/// only: nothing of the supervisor's).
pub(in crate::launch) fn exec_args(plan: &ExecPlan) -> Result<ExecArgs, StartError> {
    let text = |s: &str| CString::new(s).map_err(|_| StartError::job(format!("NUL byte in {s:?}")));
    let program = c_path(&plan.program).map_err(StartError::job)?;
    let args = plan
        .args
        .iter()
        .map(|a| text(a))
        .collect::<Result<_, _>>()?;
    let env = plan
        .env
        .iter()
        .map(|(k, v)| text(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    Ok(ExecArgs::new(program, args, env))
}

/// What a failed start means: `report` is what the child wrote on its step pipe (empty when
/// no step failed), `e` the error of the fork or the exec.
pub(in crate::launch) fn failure(plan: &ExecPlan, report: &[u8], e: io::Error) -> StartError {
    let step = Step::from_byte(report.first().copied().unwrap_or(0))
        .filter(|_| report.len() == STEP_REPORT_LEN);
    if let (Some(step), Some(refused)) = (step, report.get(1).and_then(|&b| Refused::from_byte(b)))
    {
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
}

/// The error a failure report (see [`STEP_REPORT_LEN`]) carries.
pub(in crate::launch) fn reported_error(report: &[u8]) -> io::Error {
    match report.get(2..STEP_REPORT_LEN) {
        Some(errno) => {
            io::Error::from_raw_os_error(i32::from_le_bytes(errno.try_into().expect("4 bytes")))
        }
        None => io::Error::other("the job's first process ended before its exec"),
    }
}

/// Setup steps done in the forked child; on failure the child reports which one on a pipe
/// (std's own pipe carries only the errno), with what it refused (a [`Refused`], 0: nothing,
/// the system call failed).
#[derive(Clone, Copy)]
#[repr(u8)]
pub(super) enum Step {
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
pub(super) enum Refused {
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
    pub(super) fn of_mode(mode: libc::mode_t, rdev: libc::dev_t) -> Option<Refused> {
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

/// Everything the child needs, prepared before it is created so that it only makes system
/// calls. Descriptors are numbers here: the parent's copies are closed once the child has
/// its own (see [`ParentCopies`]).
pub(in crate::launch) struct ChildSetup {
    /// `cgroup.procs` of each cgroup the job's first process joins itself, written "0"
    /// first thing.
    pub(super) join_cgroups: Vec<RawFd>,
    pub(super) switch_user: bool,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) groups: Vec<libc::gid_t>,
    pub(super) workdir: CString,
    /// The script's `#!` program, checked for execute permission as the job user.
    pub(super) interpreter: Option<CString>,
    /// The checkpoint directory and its ancestors, outermost first (`mkdir -p`).
    pub(super) checkpoint_dirs: Vec<CString>,
    pub(super) stdout: CString,
    pub(super) stderr: Option<CString>,
    pub(super) output_flags: libc::c_int,
    pub(super) step_report: RawFd,
    /// The job directory's `group` file, where the child writes its pid (its process group)
    /// first thing; `None` with cgroups, which hold the job from its first instruction.
    pub(super) group_file: Option<RawFd>,
    /// A pipe's read end the child waits on, after its setup and before its exec, for the
    /// supervisor's word that the job's launch is recorded (one byte): the setup overlaps
    /// the journal's sync, and nothing of the job runs before it. End of file (the
    /// supervisor gone) ends the child.
    pub(super) go: Option<RawFd>,
}

/// The parent's copies of the descriptors a [`ChildSetup`] names: closed once the child is
/// created (the step pipe's write end among them, so that its end of file means the child's
/// exec or end).
#[derive(Default)]
pub(in crate::launch) struct ParentCopies(pub(super) Vec<OwnedFd>);

impl ParentCopies {
    /// Keeps `fd` open until the child is created; its number is for the child.
    pub(super) fn keep(&mut self, fd: OwnedFd) -> RawFd {
        let raw = fd.as_raw_fd();
        self.0.push(fd);
        raw
    }
}

/// The job's program, arguments and environment as `execve` takes them, made before the child
/// is (it may not allocate).
pub(in crate::launch) struct ExecArgs {
    pub(super) program: CString,
    /// Owns what `argv` and `envp` point into.
    _strings: Vec<CString>,
    pub(super) argv: Vec<*const libc::c_char>,
    pub(super) envp: Vec<*const libc::c_char>,
}

impl ExecArgs {
    pub(in crate::launch) fn new(
        program: CString,
        args: Vec<CString>,
        env: Vec<CString>,
    ) -> ExecArgs {
        let argc = args.len();
        let mut strings = Vec::with_capacity(1 + argc + env.len());
        strings.push(program.clone());
        strings.extend(args);
        strings.extend(env);
        let pointers = |range: &[CString]| -> Vec<*const libc::c_char> {
            range
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        // The CStrings' heap buffers do not move when the Vec holding them does.
        let argv = pointers(&strings[..1 + argc]);
        let envp = pointers(&strings[1 + argc..]);
        ExecArgs {
            program,
            _strings: strings,
            argv,
            envp,
        }
    }
}

/// The length of a failure report on the step pipe: the step (0: the exec itself), what was
/// refused (0: nothing), and the errno, little-endian.
pub(in crate::launch) const STEP_REPORT_LEN: usize = 6;
