//! Every `unsafe` of creating a job's first process: the clone, and the system calls the
//! child makes until its exec (its code, which has none, is [`super::in_child`]).
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
//! [`ChildSetup::go`](super::child::ChildSetup::go)) while the supervisor goes on watching
//! every other job.
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

use super::child::{ChildSetup, ExecArgs};
use super::in_child::{self, TERMINATION_SIGNALS};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// System calls made without libc, returning the result or the errno: all the child calls.
pub(super) mod raw {
    use super::super::child::ExecArgs;

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

    pub(in crate::launch::node_supervisor) fn write(fd: i32, bytes: &[u8]) -> Result<usize, i32> {
        // SAFETY: write(2) from a live slice, its length given.
        unsafe {
            syscall(
                libc::SYS_write,
                [fd as usize, bytes.as_ptr() as usize, bytes.len(), 0, 0, 0],
            )
        }
    }

    pub(in crate::launch::node_supervisor) fn read(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        // SAFETY: read(2) into a live slice, its length given.
        unsafe {
            syscall(
                libc::SYS_read,
                [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
            )
        }
    }

    pub(in crate::launch::node_supervisor) fn close(fd: i32) {
        // SAFETY: close(2) of a descriptor of the calling process.
        let _ = unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
    }

    /// A system call whose arguments are integers only.
    pub(in crate::launch::node_supervisor) fn plain(
        nr: libc::c_long,
        args: [usize; 3],
    ) -> Result<usize, i32> {
        // SAFETY: callers pass system calls that take no pointer (setsid, getpid, setresuid,
        // setresgid, fcntl with integer commands, dup3, exit_group).
        unsafe { syscall(nr, [args[0], args[1], args[2], 0, 0, 0]) }
    }

    pub(in crate::launch::node_supervisor) fn chdir(path: &std::ffi::CStr) -> Result<usize, i32> {
        // SAFETY: chdir(2) of a live NUL-terminated path.
        unsafe { syscall(libc::SYS_chdir, [path.as_ptr() as usize, 0, 0, 0, 0, 0]) }
    }

    /// A system call on a path (relative to the working directory) and two integers:
    /// mkdirat, faccessat, openat.
    pub(in crate::launch::node_supervisor) fn at_path(
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

    /// `stat` of a path (`fd` < 0) or of a descriptor.
    pub(in crate::launch::node_supervisor) fn stat(
        fd: i32,
        path: &std::ffi::CStr,
    ) -> Result<libc::stat, i32> {
        // SAFETY: a `struct stat` is plain integers, valid zeroed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let out = &mut st as *mut libc::stat as usize;
        // SAFETY: newfstatat/fstat into a live `struct stat` (the kernel's layout on the
        // 64-bit targets, which is libc's), of a live NUL-terminated path.
        unsafe {
            if fd < 0 {
                syscall(
                    libc::SYS_newfstatat,
                    [
                        libc::AT_FDCWD as usize,
                        path.as_ptr() as usize,
                        out,
                        0,
                        0,
                        0,
                    ],
                )
            } else {
                syscall(libc::SYS_fstat, [fd as usize, out, 0, 0, 0, 0])
            }
        }
        .map(|_| st)
    }

    /// Sets this thread's supplementary groups (the child's only thread: see its caller).
    pub(in crate::launch::node_supervisor) fn setgroups(
        groups: &[libc::gid_t],
    ) -> Result<usize, i32> {
        // SAFETY: setgroups(2) from a live slice of gid_t, its length given.
        unsafe {
            syscall(
                libc::SYS_setgroups,
                [groups.len(), groups.as_ptr() as usize, 0, 0, 0, 0],
            )
        }
    }

    /// Execs the job's program: returns only if that failed, with the errno.
    pub(in crate::launch::node_supervisor) fn execve(exec: &ExecArgs) -> i32 {
        // SAFETY: NUL-terminated arrays of pointers into CStrings `exec` owns.
        let result = unsafe {
            syscall(
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
        result.err().unwrap_or(libc::EIO)
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
    pub(in crate::launch::node_supervisor) fn default_disposition(sig: i32) {
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
    pub(in crate::launch::node_supervisor) fn unblock(mask: u64) {
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

    pub(in crate::launch::node_supervisor) fn sleep_ns(ns: i64) {
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

    pub(in crate::launch::node_supervisor) fn exit(code: i32) -> ! {
        loop {
            let _ = plain(libc::SYS_exit_group, [code as usize, 0, 0]);
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

/// Creates the job's first process, which runs [`in_child::run`]: its setup, then the job's exec;
/// returns its pid and pidfd at once. The parent never waits for the child's setup, which
/// may block (a hung network filesystem): the step pipe's end of file says the exec is
/// done, a report on it (see [`STEP_REPORT_LEN`](super::child::STEP_REPORT_LEN)) that a
/// step, or the exec itself, failed.
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
    in_child::run(&memory.exec, &memory.setup)
}

/// As [`clone_job`], with `fork` (the child joins every cgroup itself): where the kernel has
/// no `clone3` into a cgroup. Returns the child's pid.
pub(in crate::launch) fn fork_job(memory: &ChildMemory) -> io::Result<u32> {
    let blocked = BlockedTermination::begin();
    // SAFETY: the child runs only system calls on memory prepared before the fork
    // (in_child::run) and never returns into the parent's code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        in_child::run(&memory.exec, &memory.setup);
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

/// The termination signals blocked in the supervisor while a job's child is created: a
/// child born in the job's cgroup (`clone3`) can be sent a stop's SIGTERM before it has
/// reset the dispositions it inherited (ignored): blocked, the signal is kept pending rather
/// than discarded, and ends the child once it unblocks them with their defaults (see
/// [`in_child`]).
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

#[cfg(test)]
mod tests;
