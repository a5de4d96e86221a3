//! The newest modification time under a job's checkpoint directory: what the agent reports
//! with each heartbeat (so that schedd's victim cost counts the work since the last
//! checkpoint, not since the start), and what tells whether a stopped job saved one.
//!
//! noded runs as root and the directory belongs to the job's user, who may put anything in
//! it. So the walk is bounded (entries visited, depth), never follows a symlink (each
//! directory is opened relative to its parent with `O_NOFOLLOW`, so one swapped for a link
//! mid-walk is not entered), stays on the directory's own filesystem, opens nothing but
//! directories, keeps at most one descriptor open per level, and turns every error into "not
//! seen". It blocks on the filesystem: call it off the async runtime's worker threads.

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// How much of a directory tree one scan may look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Entries read, over all directories; a tree with more is [`Newest::TooLarge`].
    pub max_entries: usize,
    /// Levels below the top directory that are entered (1: its own entries only).
    pub max_depth: usize,
}

/// The heartbeat's scan: a checkpoint directory holds a few files per save, not thousands.
pub const HEARTBEAT_SCAN: ScanLimits = ScanLimits {
    max_entries: 4096,
    max_depth: 8,
};

/// What a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newest {
    /// Every entry within the depth was seen: the newest modification time among them (ms
    /// since the epoch); `None` when there are none (or the directory cannot be read).
    Complete(Option<i64>),
    /// The tree has more entries than the limit: the newest of those seen before stopping.
    TooLarge(Option<i64>),
}

/// The newest modification time of any entry under `dir` (files, directories, symlinks
/// themselves; not `dir` itself), within `limits`. `dir` itself may be reached through a
/// symlink (it is the path the job was given); nothing below it is.
pub fn newest_under(dir: &Path, limits: ScanLimits) -> Newest {
    const DIR_FLAGS: OFlag = OFlag::O_RDONLY
        .union(OFlag::O_DIRECTORY)
        .union(OFlag::O_CLOEXEC)
        .union(OFlag::O_NONBLOCK);
    let Ok(top) = Dir::open(dir, DIR_FLAGS, Mode::empty()) else {
        return Newest::Complete(None);
    };
    let Ok(top_stat) = fstat(&top) else {
        return Newest::Complete(None);
    };
    let device = top_stat.st_dev;
    let mut newest: Option<i64> = None;
    let mut seen = 0usize;
    // Directories still to enter: the parent (open) and the name in it, and the depth of the
    // entries they hold. Depth-first, so the parents kept open are those on one path.
    let mut pending: Vec<(Rc<Dir>, CString, usize)> = Vec::new();
    let mut next: Option<(Dir, usize)> = Some((top, 1));
    loop {
        let (mut current, depth) = match next.take() {
            Some(dir) => dir,
            None => {
                let Some((parent, name, depth)) = pending.pop() else {
                    break;
                };
                let Ok(child) = Dir::openat(
                    &*parent,
                    name.as_c_str(),
                    DIR_FLAGS | OFlag::O_NOFOLLOW,
                    Mode::empty(),
                ) else {
                    continue;
                };
                // What was opened may not be what was looked at (swapped meanwhile).
                match fstat(&child) {
                    Ok(st) if st.st_dev == device && is_dir(&st) => (child, depth),
                    _ => continue,
                }
            }
        };
        let mut names = Vec::new();
        for entry in current.iter() {
            let Ok(entry) = entry else {
                break;
            };
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            seen += 1;
            if seen > limits.max_entries {
                return Newest::TooLarge(newest);
            }
            names.push(name.to_owned());
        }
        let current = Rc::new(current);
        for name in names {
            let Ok(st) = fstatat(&*current, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue; // gone meanwhile
            };
            newest = newest.max(mtime_ms(&st));
            if is_dir(&st) && st.st_dev == device && depth < limits.max_depth {
                pending.push((current.clone(), name, depth + 1));
            }
        }
    }
    Newest::Complete(newest)
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

/// (`time_t` and the nanoseconds are 64 bits wide on the targets noded runs on.)
fn mtime_ms(st: &FileStat) -> Option<i64> {
    st.st_mtime
        .checked_mul(1000)?
        .checked_add(st.st_mtime_nsec / 1_000_000)
}

/// One heartbeat's scan of the running jobs' checkpoint directories, job by job.
pub fn scan_jobs(dirs: Vec<(u64, PathBuf)>, limits: ScanLimits) -> Vec<(u64, Newest)> {
    dirs.into_iter()
        .map(|(job_id, dir)| (job_id, newest_under(&dir, limits)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    const SMALL: ScanLimits = ScanLimits {
        max_entries: 10,
        max_depth: 3,
    };

    fn set_mtime(path: &Path, secs_ago: u64) {
        let file = std::fs::File::options()
            .write(true)
            .open(path)
            .or_else(|_| std::fs::File::open(path))
            .unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
            .unwrap();
    }

    fn ms_ago(newest: Option<i64>) -> i64 {
        ysched_common::time::now_ms() - newest.expect("a time")
    }

    #[test]
    fn finds_the_newest_entry_at_any_depth_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_under(dir.path(), SMALL), Newest::Complete(None));
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("old"), b"x").unwrap();
        std::fs::write(dir.path().join("a/b/new"), b"x").unwrap();
        set_mtime(&dir.path().join("old"), 3600);
        set_mtime(&dir.path().join("a/b"), 3600);
        set_mtime(&dir.path().join("a"), 3600);
        set_mtime(&dir.path().join("a/b/new"), 60);
        let Newest::Complete(newest) = newest_under(dir.path(), SMALL) else {
            panic!("complete scan expected");
        };
        let ago = ms_ago(newest);
        assert!((59_000..120_000).contains(&ago), "{ago}");
        // One level less does not see a/b/new.
        let shallow = ScanLimits {
            max_depth: 2,
            ..SMALL
        };
        let Newest::Complete(newest) = newest_under(dir.path(), shallow) else {
            panic!("complete scan expected");
        };
        assert!(ms_ago(newest) >= 3_599_000);
    }

    #[test]
    fn a_tree_with_more_entries_than_the_limit_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        for i in 0..SMALL.max_entries {
            std::fs::write(dir.path().join(format!("sub/{i}")), b"x").unwrap();
        }
        // 1 directory + 10 files: one over.
        assert!(matches!(
            newest_under(dir.path(), SMALL),
            Newest::TooLarge(_)
        ));
        std::fs::remove_file(dir.path().join("sub/0")).unwrap();
        assert!(matches!(
            newest_under(dir.path(), SMALL),
            Newest::Complete(Some(_))
        ));
        // The heartbeat's bound: a directory with 5,000 files is skipped.
        let big = tempfile::tempdir().unwrap();
        for i in 0..5000 {
            std::fs::write(big.path().join(i.to_string()), b"").unwrap();
        }
        assert!(matches!(
            newest_under(big.path(), HEARTBEAT_SCAN),
            Newest::TooLarge(_)
        ));
    }

    #[test]
    fn symlinks_are_not_followed_below_the_top() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        for i in 0..2 * SMALL.max_entries {
            std::fs::write(elsewhere.path().join(i.to_string()), b"x").unwrap();
        }
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).unwrap();
        // Followed, the link would lead to more entries than the limit: only the link counts.
        assert!(matches!(
            newest_under(dir.path(), SMALL),
            Newest::Complete(Some(_))
        ));
        // The top itself may be a link (a user's ~/.ysched pointing to scratch space).
        assert!(matches!(
            newest_under(&dir.path().join("link"), SMALL),
            Newest::TooLarge(_)
        ));
    }

    #[test]
    fn missing_or_unreadable_directories_are_empty() {
        assert_eq!(
            newest_under(Path::new("/nonexistent/ysched-ckpt"), SMALL),
            Newest::Complete(None)
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(newest_under(file.path(), SMALL), Newest::Complete(None));
    }
}
