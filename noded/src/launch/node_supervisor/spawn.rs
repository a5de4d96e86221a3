//! Every `unsafe` of creating a job's first process: the clone, and the child's code until
//! its exec.
//!
//! **Why a clone that shares memory.** The supervisor used to `fork` each job: the kernel
//! copied its page tables, and both processes then took copy-on-write faults on every page
//! either wrote (with TLB-shootdown interrupts, the supervisor having a second thread):
//! about 2 ms of the supervisor's CPU and 3 of the child's per job on a 2-core VM, more than
//! everything else the node does for a job. On x86-64 the child is now created with
//! `clone3(CLONE_VM)`: it runs in the supervisor's own memory, on a stack of its own, until
//! its exec gives it a memory of its own. Unlike `vfork` (`CLONE_VFORK`, which `posix_spawn`
//! uses), the supervisor is **not** suspended meanwhile: the child's setup may block (a hung
//! network file system, or the wait for the launch's record to be synced, see
//! [`ChildSetup::go`]) while the supervisor goes on watching every other job.
//!
//! What sharing memory asks of the child, and how it is kept:
//! - It may change nothing the parent uses. It writes only its own stack, and makes every
//!   system call itself ([`raw`]): libc's wrappers set `errno`, which lives in the parent
//!   thread's thread-local storage (the child has no other), and would change the parent's
//!   errno under it. No allocation, no lock, no libc call at all.
//! - What it reads (its [`ChildMemory`]: setup, exec arguments, stack) must outlive it: the
//!   parent holds it in a [`ChildInUse`] until the child has exec'd or ended, as told by its
//!   step pipe's end of file (its write end is closed by the exec or the exit only after the
//!   kernel has let go of the shared memory) or by its reaping; a `ChildInUse` dropped
//!   before that leaks rather than frees.
//! - The descriptors are not shared (no `CLONE_FILES`): the parent closes its copies at once.
//! - Signal handlers are not inherited (`CLONE_CLEAR_SIGHAND`): none can run in the child on
//!   the parent's memory. Dispositions set to ignore are, and the child resets those it must.
//! - A child switching to the job's user makes the shared memory non-dumpable (the kernel's
//!   rule for a uid change): no process of that user can trace it before its exec.
//!
//! Elsewhere (another architecture, or a kernel without such a `clone3`), the child is forked
//! as before and runs the same code on its own copy.
//!
//! On failure the child reports which step failed on a pipe (see [`Step`]).

use super::child::{Refused, Step};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// System calls made without libc, returning the result or the errno.
mod raw {
    /// One system call. On x86-64 it leaves `errno` alone (see the module's docs); elsewhere
    /// it goes through libc, and the child is forked (its errno is its own).
    ///
    /// # Safety
    /// The caller passes arguments that are valid for system call `nr`.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn syscall(nr: libc::c_long, args: [usize; 6]) -> Result<usize, i32> {
        let ret: isize;
        // SAFETY: the `syscall` instruction with the kernel's calling convention (number in
        // rax, arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11 clobbered); what the
        // arguments point to is the caller's contract.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => ret,
                in("rdi") args[0],
                in("rsi") args[1],
                in("rdx") args[2],
                in("r10") args[3],
                in("r8") args[4],
                in("r9") args[5],
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        if (-4095..0).contains(&ret) {
            Err(-ret as i32)
        } else {
            Ok(ret as usize)
        }
    }

    /// See the x86-64 version.
    ///
    /// # Safety
    /// As there.
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) unsafe fn syscall(nr: libc::c_long, args: [usize; 6]) -> Result<usize, i32> {
        // SAFETY: the caller's contract.
        let ret =
            unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) };
        if ret < 0 {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        } else {
            Ok(ret as usize)
        }
    }

    pub(super) fn write(fd: i32, bytes: &[u8]) -> Result<usize, i32> {
        // SAFETY: write(2) from a live slice, its length given.
        unsafe {
            syscall(
                libc::SYS_write,
                [fd as usize, bytes.as_ptr() as usize, bytes.len(), 0, 0, 0],
            )
        }
    }

    pub(super) fn read(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        // SAFETY: read(2) into a live slice, its length given.
        unsafe {
            syscall(
                libc::SYS_read,
                [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
            )
        }
    }

    pub(super) fn close(fd: i32) {
        // SAFETY: close(2) of a descriptor of the calling process.
        let _ = unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
    }

    /// A system call whose arguments are integers only.
    pub(super) fn plain(nr: libc::c_long, args: [usize; 3]) -> Result<usize, i32> {
        // SAFETY: callers pass system calls that take no pointer (setsid, getpid, setresuid,
        // setresgid, fcntl with integer commands, dup3, exit_group).
        unsafe { syscall(nr, [args[0], args[1], args[2], 0, 0, 0]) }
    }

    pub(super) fn chdir(path: &std::ffi::CStr) -> Result<usize, i32> {
        // SAFETY: chdir(2) of a live NUL-terminated path.
        unsafe { syscall(libc::SYS_chdir, [path.as_ptr() as usize, 0, 0, 0, 0, 0]) }
    }

    /// A system call on a path (relative to the working directory) and two integers:
    /// mkdirat, faccessat, openat.
    pub(super) fn at_path(
        nr: libc::c_long,
        path: &std::ffi::CStr,
        a: usize,
        b: usize,
    ) -> Result<usize, i32> {
        // SAFETY: the path is a live NUL-terminated string; the others are integers.
        unsafe {
            syscall(
                nr,
                [libc::AT_FDCWD as usize, path.as_ptr() as usize, a, b, 0, 0],
            )
        }
    }

    /// `stat` of a path (`fd` < 0) or of a descriptor, into `st`.
    pub(super) fn stat(fd: i32, path: &std::ffi::CStr, st: &mut libc::stat) -> Result<(), i32> {
        let st = st as *mut libc::stat as usize;
        // SAFETY: newfstatat/fstat into a live `struct stat` (the kernel's layout on the
        // 64-bit targets, which is libc's), of a live NUL-terminated path.
        unsafe {
            if fd < 0 {
                syscall(
                    libc::SYS_newfstatat,
                    [libc::AT_FDCWD as usize, path.as_ptr() as usize, st, 0, 0, 0],
                )
            } else {
                syscall(libc::SYS_fstat, [fd as usize, st, 0, 0, 0, 0])
            }
        }
        .map(|_| ())
    }

    /// The kernel's `struct sigaction` (64-bit: handler, flags, restorer, mask).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }

    /// Sets `sig`'s disposition to its default.
    pub(super) fn default_disposition(sig: i32) {
        let action = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: rt_sigaction from a live struct of the kernel's layout, with the kernel's
        // sigset size (8 bytes).
        let _ = unsafe {
            syscall(
                libc::SYS_rt_sigaction,
                [sig as usize, &action as *const _ as usize, 0, 8, 0, 0],
            )
        };
    }

    /// Unblocks the signals of `mask` (bit `n - 1` for signal `n`).
    pub(super) fn unblock(mask: u64) {
        // SAFETY: rt_sigprocmask from a live 8-byte set.
        let _ = unsafe {
            syscall(
                libc::SYS_rt_sigprocmask,
                [
                    libc::SIG_UNBLOCK as usize,
                    &mask as *const u64 as usize,
                    0,
                    8,
                    0,
                    0,
                ],
            )
        };
    }

    pub(super) fn sleep_ns(ns: i64) {
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: ns as _,
        };
        // SAFETY: nanosleep of a live timespec.
        let _ = unsafe {
            syscall(
                libc::SYS_nanosleep,
                [&pause as *const _ as usize, 0, 0, 0, 0, 0],
            )
        };
    }

    pub(super) fn exit(code: i32) -> ! {
        loop {
            let _ = plain(libc::SYS_exit_group, [code as usize, 0, 0]);
        }
    }
}

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

/// Runs in the child, before exec: new session, user switch, directories, output. Makes no
/// libc call (see the module's docs). Returns the errno of the step that failed, reported.
fn setup_child(s: &ChildSetup) -> Result<(), i32> {
    let fail = |step: Step, errno: i32| -> i32 {
        report_step(s.step_report, step as u8, 0, errno);
        errno
    };
    let check =
        |step: Step, result: Result<usize, i32>| result.map(|_| ()).map_err(|e| fail(step, e));

    // The supervisor ignores these; ignored dispositions survive exec, the job needs defaults.
    // Reset before the child joins the job's cgroup: a stop that reaches it there before its
    // exec ends it (its SIGTERM is not lost on an ignored disposition).
    for sig in TERMINATION_SIGNALS {
        raw::default_disposition(sig);
    }
    // Blocked by the parent around the clone (see `BlockedTermination`): a stop sent
    // meanwhile ends the child here.
    raw::unblock(termination_mask());
    // Before anything that can block, while still root: from here on every process the job
    // starts is in its cgroups, and cannot leave them, and noded can stop it.
    for &procs in &s.join_cgroups {
        match raw::write(procs, b"0") {
            Ok(1) => {}
            Ok(_) => return Err(fail(Step::Cgroup, libc::EIO)),
            Err(e) => return Err(fail(Step::Cgroup, e)),
        }
    }
    // Own session and process group: killpg(job pid) reaches the whole job, not the
    // supervisor.
    check(Step::Session, raw::plain(libc::SYS_setsid, [0; 3]))?;
    if let Some(group) = s.group_file {
        // Without cgroups, the process group is what noded stops: recorded before anything
        // that can block. Best effort: if it cannot be written, stops wait for the exec.
        let pid = raw::plain(libc::SYS_getpid, [0; 3]).unwrap_or(0);
        let mut digits = [0u8; 20];
        let _ = raw::write(group, decimal(pid as u32, &mut digits));
    }
    if s.switch_user {
        // Groups first: after setuid the process may no longer change them. The system
        // calls themselves, never libc's wrappers: in a process with other threads those
        // make every thread change too, and the child is no thread libc knows of. Each call
        // changes this process's (only) thread, which is what the child needs.
        // SAFETY: setgroups(2) from a live slice of gid_t, its length given.
        let set = unsafe {
            raw::syscall(
                libc::SYS_setgroups,
                [s.groups.len(), s.groups.as_ptr() as usize, 0, 0, 0, 0],
            )
        };
        check(Step::Groups, set)?;
        let gid = s.gid as usize;
        check(Step::Gid, raw::plain(libc::SYS_setresgid, [gid, gid, gid]))?;
        let uid = s.uid as usize;
        check(Step::Uid, raw::plain(libc::SYS_setresuid, [uid, uid, uid]))?;
    }
    // From here on, the kernel checks every path as the job user.
    check(Step::Workdir, raw::chdir(&s.workdir))?;
    if let Some(interpreter) = &s.interpreter {
        check(
            Step::Interpreter,
            raw::at_path(libc::SYS_faccessat, interpreter, libc::X_OK as usize, 0),
        )?;
    }
    // The directory itself first: where its parents exist (every job of a user after the
    // first), one mkdir; `mkdir -p` of every ancestor only when one is missing.
    let mkdir = |dir: &CString| match raw::at_path(libc::SYS_mkdirat, dir, 0o755, 0) {
        Ok(_) | Err(libc::EEXIST) => Ok(()),
        Err(e) => Err(e),
    };
    if let Some(dir) = s.checkpoint_dirs.last() {
        if mkdir(dir).is_err() {
            for dir in &s.checkpoint_dirs {
                mkdir(dir).map_err(|e| fail(Step::CheckpointDir, e))?;
            }
        }
    }
    let out = open_output(&s.stdout, s.output_flags)
        .map_err(|(refused, e)| fail_output(s, Step::Stdout, refused, e))?;
    check(Step::Stdout, move_fd(out, 1))?;
    match &s.stderr {
        Some(path) => {
            let err = open_output(path, s.output_flags)
                .map_err(|(refused, e)| fail_output(s, Step::Stderr, refused, e))?;
            check(Step::Stderr, move_fd(err, 2))?;
        }
        None => check(Step::Stderr, raw::plain(libc::SYS_dup3, [1, 2, 0]))?,
    }
    Ok(())
}

/// Makes `fd` (opened close-on-exec) descriptor `target` of the job, kept across the exec.
fn move_fd(fd: RawFd, target: RawFd) -> Result<usize, i32> {
    if fd == target {
        // The descriptor was free (closed in the supervisor): already in place.
        return raw::plain(libc::SYS_fcntl, [fd as usize, libc::F_SETFD as usize, 0]);
    }
    let moved = raw::plain(libc::SYS_dup3, [fd as usize, target as usize, 0]);
    raw::close(fd);
    moved
}

fn fail_output(s: &ChildSetup, step: Step, refused: Option<Refused>, errno: i32) -> i32 {
    report_step(
        s.step_report,
        step as u8,
        refused.map_or(0, |r| r as u8),
        errno,
    );
    errno
}

/// The length of a failure report on the step pipe: the step (0: the exec itself), what was
/// refused (0: nothing), and the errno, little-endian.
pub(in crate::launch) const STEP_REPORT_LEN: usize = 6;

/// Writes a failure report (see [`STEP_REPORT_LEN`]) on the step pipe.
fn report_step(pipe: RawFd, step: u8, refused: u8, errno: i32) {
    let errno = errno.to_le_bytes();
    let bytes = [step, refused, errno[0], errno[1], errno[2], errno[3]];
    // One write of less than PIPE_BUF bytes arrives whole.
    let _ = raw::write(pipe, &bytes);
}

/// The job's program, arguments and environment as `execve` takes them, made before the child
/// is (it may not allocate).
pub(in crate::launch) struct ExecArgs {
    program: CString,
    /// Owns what `argv` and `envp` point into.
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
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

/// The size of the child's stack (while it shares the parent's memory): its setup takes a
/// few KiB, with no recursion.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// What the child reads until its exec: kept at one heap address (boxed) for its whole life.
pub(in crate::launch) struct ChildMemory {
    exec: ExecArgs,
    setup: ChildSetup,
    /// Its stack, when it shares the parent's memory: the allocation (capacity) of this
    /// empty vector, 16-byte aligned.
    stack: Vec<u128>,
}

impl ChildMemory {
    pub(in crate::launch) fn new(exec: ExecArgs, setup: ChildSetup) -> Box<ChildMemory> {
        Box::new(ChildMemory {
            exec,
            setup,
            stack: Vec::new(),
        })
    }
}

/// A [`ChildMemory`] a child may still be reading: released (freed) once the child has
/// exec'd or ended; dropped without that, it is leaked rather than freed under the child.
pub(in crate::launch) struct ChildInUse {
    memory: Option<Box<ChildMemory>>,
}

impl ChildInUse {
    /// The child has exec'd (its step pipe read end of file) or ended (reaped): it no longer
    /// reads this memory.
    pub(in crate::launch) fn release(mut self) {
        drop(self.memory.take());
    }
}

impl Drop for ChildInUse {
    fn drop(&mut self) {
        if let Some(memory) = self.memory.take() {
            // Not known to be unused by the child: never freed.
            std::mem::forget(memory);
        }
    }
}

/// Creates the job's first process, which runs [`setup_child`] and then execs the job;
/// returns its pid and pidfd at once. The parent never waits for the child's setup, which
/// may block (a hung network filesystem): the step pipe's end of file says the exec is
/// done, a report on it (see [`STEP_REPORT_LEN`]) that a step, or the exec itself, failed.
///
/// With `cgroup_dir` (the job's cgroup v2 directory, open), the child is born there
/// (`CLONE_INTO_CGROUP`): it writes no `cgroup.procs` of the v2 hierarchy (the first such
/// write per job cost 13-16 ms on an idle machine). An error for which
/// [`clone3_unsupported`] holds means the kernel has no such `clone3` (older than 5.7, or a
/// seccomp filter that refuses it): [`fork_job`] instead.
pub(in crate::launch) fn clone_job(
    mut memory: Box<ChildMemory>,
    cgroup_dir: Option<&OwnedFd>,
) -> io::Result<(u32, OwnedFd, ChildInUse)> {
    let shares_memory = cfg!(target_arch = "x86_64");
    if shares_memory && memory.stack.capacity() == 0 {
        // Room, not values: the child's frames are its own to write (zeroing 64 KiB per job
        // was 4 % of the supervisor's CPU).
        memory.stack = Vec::with_capacity(CHILD_STACK_BYTES / 16);
    }
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64 | CLONE_CLEAR_SIGHAND,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(dir) = cgroup_dir {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    if shares_memory {
        args.flags |= libc::CLONE_VM as u64;
        args.stack = memory.stack.as_mut_ptr() as u64;
        args.stack_size = (memory.stack.capacity() * 16) as u64;
    }
    let blocked = BlockedTermination::begin();
    let result = clone3(&mut args, &memory);
    drop(blocked);
    match result {
        Ok(pid) => {
            // SAFETY: the kernel just returned this descriptor for the child, and nothing
            // else owns it.
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            let in_use = ChildInUse {
                memory: Some(memory),
            };
            Ok((pid, pidfd, in_use))
        }
        // No child: the memory is nobody's but ours.
        Err(e) => Err(io::Error::from_raw_os_error(e)),
    }
}

/// `clone3` with a stack, whose child shares this process's memory and calls [`child_main`]
/// on that stack. Returns the child's pid.
#[cfg(target_arch = "x86_64")]
fn clone3(args: &mut CloneArgs, memory: &ChildMemory) -> Result<u32, i32> {
    let ret: isize;
    // SAFETY: clone3 with a valid `struct clone_args` of the size given. In the parent it
    // returns like any system call (rcx, r11 clobbered). In the child, which starts on its
    // own stack at the top the kernel set (16-byte aligned, as `call` needs), the stack has
    // nothing of this function: it calls `child_main` (callee-saved r12 and r13 hold its
    // argument and address across the syscall), which never returns.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            inout("rdi") args as *mut CloneArgs => _,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") memory as *const ChildMemory,
            in("r13") child_main as extern "C" fn(*const ChildMemory) -> !,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        Err(-ret as i32)
    } else {
        Ok(ret as u32)
    }
}

/// Elsewhere: `clone3` without a stack or `CLONE_VM`, a fork.
#[cfg(not(target_arch = "x86_64"))]
fn clone3(args: &mut CloneArgs, memory: &ChildMemory) -> Result<u32, i32> {
    // SAFETY: clone3 without CLONE_VM or a stack is a fork: the child gets a copy of this
    // process's memory, runs `child_main` (system calls only) and never returns.
    let pid = unsafe {
        raw::syscall(
            libc::SYS_clone3,
            [
                args as *mut CloneArgs as usize,
                std::mem::size_of::<CloneArgs>(),
                0,
                0,
                0,
                0,
            ],
        )
    }?;
    if pid == 0 {
        child_main(memory);
    }
    Ok(pid as u32)
}

/// The child's entry: its setup, then the job's exec.
extern "C" fn child_main(memory: *const ChildMemory) -> ! {
    // SAFETY: the parent keeps the memory alive and unchanged until this child has exec'd or
    // ended (see `ChildInUse`).
    let memory = unsafe { &*memory };
    run_child(&memory.exec, &memory.setup)
}

/// As [`clone_job`], with `fork` (the child joins every cgroup itself): where the kernel has
/// no `clone3` into a cgroup. Returns the child's pid.
pub(in crate::launch) fn fork_job(memory: &ChildMemory) -> io::Result<u32> {
    let blocked = BlockedTermination::begin();
    // SAFETY: the child runs only system calls on memory prepared before the fork
    // (run_child) and never returns into the parent's code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        run_child(&memory.exec, &memory.setup);
    }
    let error = io::Error::last_os_error();
    drop(blocked);
    if pid < 0 {
        return Err(error);
    }
    Ok(pid as u32)
}

/// `clone3`'s `CLONE_INTO_CGROUP` (Linux 5.7): the child is born in the cgroup given.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `clone3`'s `CLONE_CLEAR_SIGHAND` (Linux 5.5): the child has no signal handler.
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// The kernel's `struct clone_args`, as far as its `cgroup` field (88 bytes, "version 2").
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Whether a `clone3` error says the kernel cannot do it (so a fork is tried instead).
pub(in crate::launch) fn clone3_unsupported(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG)
    )
}

/// How often, and how far apart, an exec that failed with ETXTBSY is tried again (1 s).
const EXEC_BUSY_TRIES: u32 = 50;
const EXEC_BUSY_PAUSE_NS: i64 = 20_000_000;

/// The child: its setup, then the job's exec.
fn run_child(exec: &ExecArgs, setup: &ChildSetup) -> ! {
    if setup_child(setup).is_ok() && wait_for_go(setup.go) {
        let mut busy_tries = 0;
        let errno = loop {
            // SAFETY: NUL-terminated arrays of pointers into CStrings `exec` owns.
            let result = unsafe {
                raw::syscall(
                    libc::SYS_execve,
                    [
                        exec.program.as_ptr() as usize,
                        exec.argv.as_ptr() as usize,
                        exec.envp.as_ptr() as usize,
                        0,
                        0,
                        0,
                    ],
                )
            };
            let errno = result.err().unwrap_or(libc::EIO);
            // ETXTBSY: the script is still open for writing somewhere. noded closed it
            // before the launch, but a process forked meanwhile by noded (or by whatever
            // wrote it) holds a copy of that descriptor until its own exec, for
            // microseconds to milliseconds. Waiting a little is all it takes (as Go's
            // os/exec learned); a script really held open for writing still fails, after
            // a second.
            if errno != libc::ETXTBSY || busy_tries == EXEC_BUSY_TRIES {
                break errno;
            }
            busy_tries += 1;
            raw::sleep_ns(EXEC_BUSY_PAUSE_NS);
        };
        report_step(setup.step_report, 0, 0, errno);
    }
    raw::exit(127)
}

/// In the child: waits for the byte that says its launch is recorded (see
/// [`ChildSetup::go`]); `false` on end of file or an error.
fn wait_for_go(go: Option<RawFd>) -> bool {
    let Some(go) = go else {
        return true;
    };
    let mut byte = [0u8; 1];
    loop {
        match raw::read(go, &mut byte) {
            Ok(1) => return true,
            Err(libc::EINTR) => continue,
            _ => return false,
        }
    }
}

/// The signals the supervisor ignores and a job must get with their default action.
const TERMINATION_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGPIPE,
];

/// [`TERMINATION_SIGNALS`] as the kernel's signal set.
fn termination_mask() -> u64 {
    TERMINATION_SIGNALS
        .iter()
        .fold(0, |mask, &sig| mask | 1 << (sig - 1))
}

/// The termination signals blocked in the supervisor while a job's child is created: a
/// child born in the job's cgroup (`clone3`) can be sent a stop's SIGTERM before it has
/// reset the dispositions it inherited (ignored): blocked, the signal is kept pending rather
/// than discarded, and ends the child once it unblocks them with their defaults (see
/// [`setup_child`]).
struct BlockedTermination {
    old: libc::sigset_t,
}

impl BlockedTermination {
    fn begin() -> BlockedTermination {
        // SAFETY: sigset operations on live locals; sigprocmask on this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in TERMINATION_SIGNALS {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            BlockedTermination { old }
        }
    }
}

impl Drop for BlockedTermination {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `begin` on the same thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Opens an output file of the job (in the child, as the job user) so that it cannot block:
/// non-blocking (a FIFO without a reader fails at once), then checked to be a regular file or
/// `/dev/null`, then made blocking again. Symlinks are followed: they are the user's own, and
/// the path is opened with the user's rights. The error says what was refused, if anything.
fn open_output(path: &CString, flags: libc::c_int) -> Result<RawFd, (Option<Refused>, i32)> {
    let fd = match raw::at_path(libc::SYS_openat, path, flags as usize, 0o644) {
        Ok(fd) => fd as RawFd,
        Err(errno) => {
            // ENXIO: a FIFO nobody has open for reading, or a socket; say which.
            // SAFETY: a `struct stat` is plain integers, valid zeroed.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            let refused = (errno == libc::ENXIO && raw::stat(-1, path, &mut st).is_ok())
                .then(|| Refused::of_mode(st.st_mode, st.st_rdev).unwrap_or(Refused::Other));
            return Err((refused, errno));
        }
    };
    let fail = |refused: Option<Refused>, errno: i32| {
        raw::close(fd);
        Err((refused, errno))
    };
    // SAFETY: as above.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if let Err(errno) = raw::stat(fd, path, &mut st) {
        return fail(None, errno);
    }
    if let Some(refused) = Refused::of_mode(st.st_mode, st.st_rdev) {
        return fail(Some(refused), libc::EINVAL);
    }
    let blocking =
        raw::plain(libc::SYS_fcntl, [fd as usize, libc::F_GETFL as usize, 0]).and_then(|status| {
            raw::plain(
                libc::SYS_fcntl,
                [
                    fd as usize,
                    libc::F_SETFL as usize,
                    status & !(libc::O_NONBLOCK as usize),
                ],
            )
        });
    match blocking {
        Ok(_) => Ok(fd),
        Err(errno) => fail(None, errno),
    }
}

/// `n` in decimal, in `buf` (no allocation).
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;

    /// A child's setup running `program` with its output in `out`, waiting for the word on
    /// `go`; returns what the parent keeps (the step pipe's read end, the go pipe's write end).
    fn setup(
        program: &str,
        args: &[&str],
        out: &std::path::Path,
        checkpoint_dirs: Vec<CString>,
    ) -> (Box<ChildMemory>, ParentCopies, OwnedFd, OwnedFd) {
        let cstr = |s: &str| CString::new(s).unwrap();
        let (step_read, step_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut parent = ParentCopies::default();
        let setup = ChildSetup {
            join_cgroups: Vec::new(),
            switch_user: false,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            workdir: cstr("/"),
            interpreter: None,
            checkpoint_dirs,
            stdout: CString::new(out.as_os_str().as_encoded_bytes()).unwrap(),
            stderr: None,
            output_flags: libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NONBLOCK,
            step_report: parent.keep(step_write),
            group_file: None,
            go: Some(parent.keep(go_read)),
        };
        let exec = ExecArgs::new(
            cstr(program),
            args.iter().map(|a| cstr(a)).collect(),
            vec![cstr("PATH=/usr/bin:/bin")],
        );
        (ChildMemory::new(exec, setup), parent, step_read, go_write)
    }

    /// Reads the step pipe to its end: the child's failure report, empty after an exec.
    /// Raw reads: std's `read_to_end` probes the pipe's size (`lseek`: ESPIPE in errno).
    fn step_report(step_read: OwnedFd) -> Vec<u8> {
        let mut report = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            match raw::read(step_read.as_raw_fd(), &mut buf) {
                Ok(0) => return report,
                Ok(n) => report.extend_from_slice(&buf[..n]),
                Err(libc::EINTR) => {}
                Err(e) => panic!("reading the step pipe: errno {e}"),
            }
        }
    }

    fn wait(pid: u32) -> libc::c_int {
        let mut status = 0;
        // SAFETY: waitpid of our own child into a live local.
        assert_eq!(
            unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) },
            pid as libc::pid_t
        );
        status
    }

    /// The child reported that `step` failed with `errno`, and ended (status 127).
    fn assert_failed_and_ended(report: &[u8], step: u8, errno: i32, in_use: ChildInUse, pid: u32) {
        assert_eq!(report.len(), STEP_REPORT_LEN);
        assert_eq!(report[0], step);
        assert_eq!(i32::from_le_bytes(report[2..6].try_into().unwrap()), errno);
        in_use.release();
        assert_eq!(libc::WEXITSTATUS(wait(pid)), 127);
    }

    fn errno_location() -> *mut libc::c_int {
        // SAFETY: glibc's pointer to this thread's errno.
        unsafe { libc::__errno_location() }
    }

    #[test]
    fn a_child_runs_its_program_with_its_output_once_told() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (memory, parent, step_read, go) =
            setup("/bin/sh", &["-c", "echo started"], &out, Vec::new());
        let (pid, _pidfd, in_use) = clone_job(memory, None).unwrap();
        drop(parent);
        // Set up and waiting: nothing of the program has run.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
        File::from(go).write_all(&[1]).unwrap();
        assert_eq!(step_report(step_read), b"");
        in_use.release();
        let status = wait(pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "started\n");
    }

    /// The child shares this thread's memory, its errno included: its failing system calls
    /// (here the exec's) must not change the parent's errno under it.
    #[test]
    fn a_child_sharing_memory_leaves_the_parents_errno_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (memory, parent, step_read, go) = setup(
            "/nonexistent/program",
            &[],
            &dir.path().join("out"),
            Vec::new(),
        );
        let (pid, _pidfd, in_use) = clone_job(memory, None).unwrap();
        drop(parent);
        // SAFETY: this thread's errno, written before the child's exec fails.
        unsafe { *errno_location() = 4242 };
        // Raw system calls from here on: nothing of the parent's own sets errno.
        raw::write(go.as_raw_fd(), &[1]).unwrap();
        let report = step_report(step_read);
        // SAFETY: as above.
        assert_eq!(unsafe { *errno_location() }, 4242);
        // Step 0: the exec itself failed.
        assert_failed_and_ended(&report, 0, libc::ENOENT, in_use, pid);
        drop(go);
    }

    #[test]
    fn a_failed_step_is_reported_with_its_errno() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        // A checkpoint directory under a regular file: ENOTDIR.
        let under_file = CString::new(file.join("sub").as_os_str().as_encoded_bytes()).unwrap();
        let (memory, parent, step_read, go) =
            setup("/bin/true", &[], &dir.path().join("out"), vec![under_file]);
        let (pid, _pidfd, in_use) = clone_job(memory, None).unwrap();
        drop(parent);
        let report = step_report(step_read);
        let step = Step::CheckpointDir as u8;
        assert_failed_and_ended(&report, step, libc::ENOTDIR, in_use, pid);
        drop(go);
    }

    #[test]
    fn a_forked_child_runs_the_same_setup() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (memory, parent, step_read, go) =
            setup("/bin/sh", &["-c", "echo forked"], &out, Vec::new());
        let pid = fork_job(&memory).unwrap();
        drop((memory, parent));
        File::from(go).write_all(&[1]).unwrap();
        assert_eq!(step_report(step_read), b"");
        assert_eq!(libc::WEXITSTATUS(wait(pid)), 0);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "forked\n");
    }

    #[test]
    fn the_termination_mask_has_each_signal_at_its_bit() {
        let mask = termination_mask();
        assert_eq!(mask.count_ones() as usize, TERMINATION_SIGNALS.len());
        assert_ne!(mask & (1 << (libc::SIGTERM - 1)), 0);
        assert_eq!(mask & (1 << (libc::SIGKILL - 1)), 0);
    }
}
