//! The fallback checkpoint directory, for users without a usable home directory.
//!
//! With the default `scheduler.checkpoint_root` (`~/.ysched/checkpoints`), a user whose home
//! is missing (`nobody`, home `/nonexistent`) could never run a job: its first process
//! cannot create the checkpoint directory. `schedd` then gives the job
//! `/var/tmp/ysched-checkpoints/<job id>` instead (`FALLBACK_CHECKPOINT_ROOT` in common's
//! config, shared with schedd's `checkpoint_dir`).
//!
//! `/var/tmp` is world-writable, so that directory is not left to the job user: noded (root)
//! keeps `/var/tmp/ysched-checkpoints` as a root-owned directory that no one else can write
//! (mode 0711: others may pass through but not list it), and creates in it the directory of
//! exactly the job it launches, owned by the job user with mode 0700. Nobody can claim another
//! job's directory in advance, plant files in it, or read it.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

pub use ysched_common::config::FALLBACK_CHECKPOINT_ROOT;

/// Mode of the fallback root: root may write, everyone may pass through, nobody may list.
const ROOT_MODE: u32 = 0o711;

/// When `dir` is the fallback checkpoint directory of job `job_id`, makes sure it exists and
/// belongs to `uid`:`gid` (see the module docs). Any other directory is left to the job's
/// first process, which creates it as the job user. The error is the message for
/// `FinishedRecord::error`.
pub fn prepare(dir: &Path, job_id: u64, uid: u32, gid: u32) -> Result<(), String> {
    prepare_in(Path::new(FALLBACK_CHECKPOINT_ROOT), dir, job_id, uid, gid)
}

/// [`prepare`] with another fallback root (for tests).
pub fn prepare_in(root: &Path, dir: &Path, job_id: u64, uid: u32, gid: u32) -> Result<(), String> {
    if dir != root.join(job_id.to_string()) {
        return Ok(());
    }
    let fail = |e: String| format!("cannot prepare checkpoint directory {}: {e}", dir.display());
    ensure_root(root).map_err(fail)?;
    ensure_job_dir(dir, uid, gid).map_err(fail)
}

/// The root exists, is a real directory, and only noded's own user (root) can change it.
fn ensure_root(root: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(ROOT_MODE).create(root) {
        Ok(()) => {
            // mkdir's mode is filtered by the umask.
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(ROOT_MODE))
                .map_err(|e| format!("{}: {e}", root.display()))?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", root.display())),
    }
    // Not following a symlink: /var/tmp is world-writable, anyone could have put one there
    // before noded first ran.
    let meta = std::fs::symlink_metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let me = nix::unistd::Uid::effective().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} must be a directory owned by uid {me} that no one else may write (found {}, \
             owner uid {}, mode {:o}); remove it and let noded create it",
            root.display(),
            if meta.file_type().is_symlink() {
                "a symlink"
            } else if meta.is_dir() {
                "a directory"
            } else {
                "a file"
            },
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The job's own directory: created for the job user (0700), or kept when an earlier run of
/// the same job left it, provided it is still the job user's.
fn ensure_job_dir(dir: &Path, uid: u32, gid: u32) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .and_then(|()| {
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                })
                .map_err(|e| e.to_string())?;
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
            if meta.is_dir() && meta.uid() == uid {
                Ok(())
            } else {
                Err(format!(
                    "it exists and is not a directory of uid {uid} (owner uid {})",
                    meta.uid()
                ))
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn creates_the_jobs_directory_for_its_user_only() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ck");
        let me = nix::unistd::Uid::effective().as_raw();
        let group = nix::unistd::Gid::effective().as_raw();
        // Another job's directory, or any other path, is left alone.
        prepare_in(&root, &root.join("8"), 7, me, group).unwrap();
        prepare_in(&root, Path::new("/elsewhere/7"), 7, me, group).unwrap();
        assert!(!root.exists());

        let dir = root.join("7");
        prepare_in(&root, &dir, 7, me, group).unwrap();
        assert_eq!(mode(&root), 0o711);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(std::fs::metadata(&dir).unwrap().uid(), me);
        // A later run of the same job keeps it (and what is in it).
        std::fs::write(dir.join("ck.pt"), b"x").unwrap();
        prepare_in(&root, &dir, 7, me, group).unwrap();
        assert!(dir.join("ck.pt").exists());

        // Someone else's directory (here: one of another uid) is refused.
        let err = prepare_in(&root, &dir, 7, me + 1, group).unwrap_err();
        assert!(err.contains("not a directory of uid"), "{err}");
    }

    #[test]
    fn refuses_a_root_others_may_write_or_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let me = nix::unistd::Uid::effective().as_raw();
        let group = nix::unistd::Gid::effective().as_raw();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = prepare_in(&open, &open.join("1"), 1, me, group).unwrap_err();
        assert!(err.contains("no one else may write"), "{err}");
        assert!(!open.join("1").exists());

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        let err = prepare_in(&link, &link.join("1"), 1, me, group).unwrap_err();
        assert!(err.contains("a symlink"), "{err}");
    }
}
