//! The newest modification time under a job's checkpoint directory, scanned with bounds.
//!
//! It is what the agent reports
//! with each heartbeat (so that schedd's victim cost counts the work since the last
//! checkpoint, not since the start), and what tells whether a stopped job saved one.
//!
//! noded runs as root and the directory belongs to the job's user, who may put anything in
//! it, and whose path they chose: they may replace it with a symlink to a directory only
//! another user may read, whose newest time root would then report (`LastCheckpoint=`). So a
//! job's scan runs with the job user's rights ([`newest_as`]): on a thread of its own that
//! takes their uid, gid and groups (Linux credentials are per thread; the raw system calls
//! change only that thread, which ends with the scan; a heartbeat scans each user's jobs on
//! one such thread), it sees what the user could see and nothing more. The walk is bounded
//! (entries visited, depth), never follows a symlink below
//! the top (each directory is opened relative to its parent with `O_NOFOLLOW`, so one swapped
//! for a link mid-walk is not entered), stays on the directory's own filesystem, opens nothing
//! but directories, keeps at most one descriptor open per level, and turns every error into
//! "not seen". It blocks on the filesystem: call it off the async runtime's worker threads.

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

/// Whose rights a scan has: the job user's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScanAs {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// A job's checkpoint directory, and whose rights it is scanned with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointDir {
    pub path: PathBuf,
    /// The job user, when noded (root) runs jobs as other users; `None`: noded runs as the
    /// job's user itself.
    pub scan_as: Option<ScanAs>,
}

/// [`newest_under`] the job's directory, with the job user's rights (see the module docs).
/// A thread that cannot be started or cannot become the user sees nothing.
pub fn newest_as(dir: &CheckpointDir, limits: ScanLimits) -> Newest {
    let paths = [dir.path.as_path()];
    newest_of_each_as(dir.scan_as.as_ref(), &paths, limits)
        .pop()
        .unwrap_or(Newest::Complete(None))
}

/// [`newest_under`] each of `paths`, one after another, with `user`'s rights (`None`:
/// noded's own), on one thread that takes them (see the module docs): a heartbeat starts a
/// thread per user with running jobs, not per job. One result per path, in their order;
/// a thread that cannot be started or cannot become the user sees nothing.
fn newest_of_each_as(user: Option<&ScanAs>, paths: &[&Path], limits: ScanLimits) -> Vec<Newest> {
    let each = || -> Vec<Newest> { paths.iter().map(|p| newest_under(p, limits)).collect() };
    let nothing = || vec![Newest::Complete(None); paths.len()];
    let Some(user) = user else {
        return each();
    };
    std::thread::scope(|scope| {
        let scan = std::thread::Builder::new()
            .name("checkpoint-scan".into())
            .spawn_scoped(scope, || match become_on_this_thread(user) {
                Ok(()) => each(),
                Err(e) => {
                    tracing::warn!(
                        "cannot scan {} checkpoint directories as uid {}: {e}",
                        paths.len(),
                        user.uid
                    );
                    nothing()
                }
            });
        match scan {
            Ok(scan) => scan.join().unwrap_or_else(|_| nothing()),
            Err(e) => {
                tracing::warn!(
                    "cannot start a thread to scan {} checkpoint directories of uid {}: {e}",
                    paths.len(),
                    user.uid
                );
                nothing()
            }
        }
    })
}

/// Gives the calling thread, and only it, `user`'s groups, gid and uid, for good (it keeps
/// no capability): the raw system calls, since glibc's wrappers change every thread of the
/// process. Only for a thread that ends afterwards.
fn become_on_this_thread(user: &ScanAs) -> std::io::Result<()> {
    let check = |ret: libc::c_long| {
        if ret == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let groups: Vec<libc::gid_t> = user.groups.clone();
    // SAFETY: system calls with integer arguments and a pointer to a live vector of
    // `groups.len()` gids.
    unsafe {
        check(libc::syscall(
            libc::SYS_setgroups,
            groups.len(),
            groups.as_ptr(),
        ))?;
        check(libc::syscall(
            libc::SYS_setresgid,
            user.gid,
            user.gid,
            user.gid,
        ))?;
        check(libc::syscall(
            libc::SYS_setresuid,
            user.uid,
            user.uid,
            user.uid,
        ))
    }
}

/// One heartbeat's scan of the running jobs' checkpoint directories, each with its user's
/// rights: the jobs of one user together, on one thread (see [`newest_of_each_as`]), users
/// one after another. Results in the jobs' order.
pub fn scan_jobs(dirs: Vec<(u64, CheckpointDir)>, limits: ScanLimits) -> Vec<(u64, Newest)> {
    let mut found = vec![Newest::Complete(None); dirs.len()];
    // Each user's jobs, by their place in `dirs`.
    let mut by_user: std::collections::BTreeMap<Option<&ScanAs>, Vec<usize>> =
        std::collections::BTreeMap::new();
    for (place, (_, dir)) in dirs.iter().enumerate() {
        by_user.entry(dir.scan_as.as_ref()).or_default().push(place);
    }
    for (user, places) in &by_user {
        let paths: Vec<&Path> = places.iter().map(|&i| dirs[i].1.path.as_path()).collect();
        for (&place, newest) in places.iter().zip(newest_of_each_as(*user, &paths, limits)) {
            found[place] = newest;
        }
    }
    dirs.iter().map(|(job_id, _)| *job_id).zip(found).collect()
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

    /// A directory holding one file, with `mode`; the tests that use it need root (noded's
    /// user), which they check.
    fn dir_with_a_file(mode: u32) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        assert!(
            nix::unistd::geteuid().is_root(),
            "run as root (noded's user)"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        dir
    }

    #[test]
    fn a_scan_as_the_job_user_sees_only_what_they_may() {
        use std::os::unix::fs::PermissionsExt;
        // Needs root, as noded: a directory only root may read, and a user's scan of it.
        let private = dir_with_a_file(0o700);
        let nobody = ScanAs {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let as_nobody = |path: &Path| CheckpointDir {
            path: path.to_owned(),
            scan_as: Some(nobody.clone()),
        };
        // Root sees the file; nobody, even through a symlink of theirs, sees nothing.
        assert!(matches!(
            newest_under(private.path(), SMALL),
            Newest::Complete(Some(_))
        ));
        assert_eq!(
            newest_as(&as_nobody(private.path()), SMALL),
            Newest::Complete(None)
        );
        let mine = tempfile::tempdir().unwrap();
        std::fs::set_permissions(mine.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = mine.path().join("ckpt");
        std::os::unix::fs::symlink(private.path(), &link).unwrap();
        assert_eq!(newest_as(&as_nobody(&link), SMALL), Newest::Complete(None));
        // What nobody may read is seen, through their symlink too.
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            newest_as(&as_nobody(&link), SMALL),
            Newest::Complete(Some(_))
        ));
        // The scan changed nothing of this thread's (or the process's) identity.
        assert!(nix::unistd::geteuid().is_root());
        assert!(nix::unistd::getuid().is_root());
    }

    #[test]
    fn a_heartbeat_scans_each_job_with_its_own_users_rights() {
        // A private directory and an open one; jobs of nobody, of a second user and of
        // noded's own, interleaved: each sees what its user may, in the jobs' order.
        let private = dir_with_a_file(0o700);
        let open = dir_with_a_file(0o755);
        let user = |uid: u32| {
            Some(ScanAs {
                uid,
                gid: uid,
                groups: vec![uid],
            })
        };
        let job = |id: u64, path: &Path, scan_as: Option<ScanAs>| {
            (
                id,
                CheckpointDir {
                    path: path.to_owned(),
                    scan_as,
                },
            )
        };
        let found = scan_jobs(
            vec![
                job(5, private.path(), user(65534)),
                job(3, open.path(), user(65534)),
                job(9, private.path(), None),
                job(7, private.path(), user(65533)),
                job(8, open.path(), user(65533)),
            ],
            SMALL,
        );
        let ids: Vec<u64> = found.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [5, 3, 9, 7, 8]);
        let seen: Vec<bool> = found
            .iter()
            .map(|(_, newest)| matches!(newest, Newest::Complete(Some(_))))
            .collect();
        assert_eq!(seen, [false, true, true, false, true]);
        assert!(nix::unistd::geteuid().is_root());
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
