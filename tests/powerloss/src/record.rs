//! What the power-loss shim records as durable, and how; shared with the tests' restore.
//!
//! The record directory holds `files/<key>`: a file's contents as of an fsync/fdatasync of it,
//! and `dirs/<hex of the directory's path>`: a directory's entries as of an fsync of it, one
//! line each, `<kind> <key> <hex of the name>` (`f` a regular file with its key, `d` a
//! directory with `-`). A file's key is its inode number and birth time, so that a reused
//! inode number is not taken for the file that had it before. Records are written to a
//! temporary name and renamed, so a reader never sees half of one.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

/// The directory tree whose syncs are recorded (files elsewhere are passed through untouched).
pub const ROOT_ENV: &str = "YS_POWERLOSS_ROOT";
/// Where the records go (must be outside the root).
pub const RECORD_ENV: &str = "YS_POWERLOSS_RECORD";

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inverse of [`hex`] (the tests' restore reads the records with it).
#[allow(dead_code)]
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A file's key: inode number and birth time (nanoseconds; 0 where the file system keeps none).
pub fn file_key(meta: &fs::Metadata) -> String {
    let birth = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{}-{birth}", meta.ino())
}

pub fn file_record(record: &Path, key: &str) -> PathBuf {
    record.join("files").join(key)
}

pub fn dir_record(record: &Path, dir: &Path) -> PathBuf {
    record.join("dirs").join(hex(dir.as_os_str().as_bytes()))
}

/// Writes `bytes` to `path` through a temporary name and a rename.
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!(
        "tmp{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path)
}

/// Records `file`'s contents as durable, read from `source` (the file itself, or its
/// `/proc/self/fd` link, which still reads it after a rename).
pub fn record_file(record: &Path, meta: &fs::Metadata, source: &Path) -> io::Result<()> {
    let bytes = fs::read(source)?;
    replace(&file_record(record, &file_key(meta)), &bytes)
}

/// Records `dir`'s entries (regular files and directories) as durable.
pub fn record_dir(record: &Path, dir: &Path) -> io::Result<()> {
    let mut lines = String::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue; // gone meanwhile
        };
        let name = hex(entry.file_name().as_bytes());
        if meta.is_dir() {
            lines.push_str(&format!("d - {name}\n"));
        } else if meta.is_file() {
            lines.push_str(&format!("f {} {name}\n", file_key(&meta)));
        }
    }
    replace(&dir_record(record, dir), lines.as_bytes())
}

/// Records everything under `root` as durable (a `sync()`, or the state before a test starts).
pub fn record_tree(record: &Path, root: &Path) -> io::Result<()> {
    record_dir(record, root)?;
    for entry in fs::read_dir(root)? {
        let path = entry?.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            record_tree(record, &path)?;
        } else if meta.is_file() {
            record_file(record, &meta, &path)?;
        }
    }
    Ok(())
}
