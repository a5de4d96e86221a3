//! Making file system changes survive a power loss: what `fsync` of a file does not cover.
//!
//! A file's fsync makes its contents durable, not its name: a new file, a rename or a removal
//! is durable only once the directory holding it is fsynced too (POSIX; ext4 and XFS lose
//! them otherwise). Every daemon that creates a file it relies on after a restart (the
//! cluster key, the CA, the store's files, a node's journal) calls [`sync_dir`] on its
//! directory after the file's own sync.

use std::fs::File;
use std::io;
use std::path::Path;

/// fsyncs directory `dir`: the entries created, renamed or removed in it so far are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// fsyncs the directory holding `path` (the current directory for a bare name).
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => sync_dir(Path::new(".")),
    }
}

/// Creates `dir` and any missing parents like `create_dir_all`, and makes each one created
/// durable (its parent fsynced).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_all(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => sync_parent(dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// As [`create_dir_all`], each directory it creates set to exactly `mode` (not filtered by
/// the umask): for directories others must enter, made by a daemon whose umask is 077 (the
/// client socket's, the cluster CA certificate's).
pub fn create_dir_all_with_mode(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_all_with_mode(parent, mode)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
            sync_parent(dir)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn directories_made_with_a_mode_get_exactly_that_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let existing = tmp.path().join("a");
        std::fs::create_dir(&existing).unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o700)).unwrap();
        let dir = existing.join("b/c");
        create_dir_all_with_mode(&dir, 0o755).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o755);
        assert_eq!(mode(&existing.join("b")), 0o755);
        // What was there is left as it was.
        assert_eq!(mode(&existing), 0o700);
    }
}
