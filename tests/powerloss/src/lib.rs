//! A power-loss simulator for tests: an `LD_PRELOAD` shim that records what syncs make durable.
//!
//! Loaded into a daemon with `YS_POWERLOSS_ROOT` (a directory tree) and `YS_POWERLOSS_RECORD`
//! (where the records go) set, it wraps `fsync`, `fdatasync`, `syncfs` and `sync`: before the
//! real call, it copies what the call makes durable into the record directory (see
//! [`record`]): a file's contents, or a directory's entries. `sync_file_range`, plain writes
//! and renames are passed through and recorded as nothing: they reach the page cache, which a
//! power loss takes away (`sync_file_range` neither flushes the device's cache nor commits the
//! file's size). The tests then "cut the power" by killing the daemon with SIGKILL and
//! rebuilding the tree from the records alone (tests/src/power_loss.rs): each directory as of
//! its last fsync, each file as of its last fsync, an unsynced new file empty. That is the
//! strict POSIX model (as LazyFS, used by Jepsen, keeps only what was synced): a rename or a
//! new file is durable only once its directory was fsynced.
//!
//! The copy is taken before the real sync: what a sync covers is what was written before it
//! began. Every record is taken under one lock, so two threads syncing one file at once leave
//! the later copy.

#![allow(clippy::missing_safety_doc)]

mod record;

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::os::raw::c_int;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

struct Settings {
    root: PathBuf,
    record: PathBuf,
}

/// The settings from the environment, or `None` (then every call only passes through).
fn settings() -> Option<&'static Settings> {
    static SETTINGS: OnceLock<Option<Settings>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            let root = PathBuf::from(std::env::var_os(record::ROOT_ENV)?);
            let record = PathBuf::from(std::env::var_os(record::RECORD_ENV)?);
            // /proc/self/fd names files by their canonical path.
            let root = std::fs::canonicalize(&root).unwrap_or(root);
            Some(Settings { root, record })
        })
        .as_ref()
}

static RECORDING: Mutex<()> = Mutex::new(());

type SyncFd = unsafe extern "C" fn(c_int) -> c_int;
type SyncAll = unsafe extern "C" fn();

/// The next definition of `name` (libc's), for calling through.
unsafe fn next(name: &CStr) -> *mut libc::c_void {
    let f = libc::dlsym(libc::RTLD_NEXT, name.as_ptr());
    if f.is_null() {
        // Without the real call there is nothing safe to do.
        libc::abort();
    }
    f
}

fn report(what: &str, path: &Path, e: std::io::Error) {
    eprintln!(
        "ysched-powerloss: cannot record {what} of {}: {e}",
        path.display()
    );
}

/// Records what a sync of `fd` makes durable, if it is under the root.
fn record_fd(fd: c_int) {
    let Some(s) = settings() else { return };
    let link = PathBuf::from(format!("/proc/self/fd/{fd}"));
    let Ok(path) = std::fs::read_link(&link) else {
        return;
    };
    if !path.starts_with(&s.root) {
        return;
    }
    // SAFETY: the descriptor stays the caller's: ManuallyDrop never closes it.
    let file = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let Ok(meta) = file.metadata() else { return };
    let _one_at_a_time = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    if meta.is_dir() {
        if let Err(e) = record::record_dir(&s.record, &path) {
            report("the entries", &path, e);
        }
    } else if meta.is_file() && meta.nlink() > 0 {
        if let Err(e) = record::record_file(&s.record, &meta, &link) {
            report("the contents", &path, e);
        }
    }
}

fn record_everything() {
    let Some(s) = settings() else { return };
    let _one_at_a_time = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = record::record_tree(&s.record, &s.root) {
        report("the tree", &s.root, e);
    }
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    static REAL: OnceLock<usize> = OnceLock::new();
    record_fd(fd);
    let real: SyncFd = std::mem::transmute(*REAL.get_or_init(|| next(c"fsync") as usize));
    real(fd)
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    static REAL: OnceLock<usize> = OnceLock::new();
    record_fd(fd);
    let real: SyncFd = std::mem::transmute(*REAL.get_or_init(|| next(c"fdatasync") as usize));
    real(fd)
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    static REAL: OnceLock<usize> = OnceLock::new();
    record_everything();
    let real: SyncFd = std::mem::transmute(*REAL.get_or_init(|| next(c"syncfs") as usize));
    real(fd)
}

#[no_mangle]
pub unsafe extern "C" fn sync() {
    static REAL: OnceLock<usize> = OnceLock::new();
    record_everything();
    let real: SyncAll = std::mem::transmute(*REAL.get_or_init(|| next(c"sync") as usize));
    real()
}
