//! Tests of creating a job's first process: sharing memory, waiting for the word, failures.

use super::super::child::{ChildSetup, ExecArgs, ParentCopies, Step, STEP_REPORT_LEN};
use super::super::in_child::{termination_mask, TERMINATION_SIGNALS};
use super::{clone_job, fork_job, raw, ChildInUse, ChildMemory};
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};

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
