//! Secret files (the cluster key, the cluster CA's key) and private directories (`schedd`'s
//! state directory): used only when no one but their owner may read or change them, as ssh
//! refuses a private key that others can read. A key that leaked through a loose mode lets
//! anyone on the host register a node (and receive every job's script and environment) or
//! impersonate `schedd`; a state directory others may read hands them every user's scripts
//! and exported secrets. The daemons refuse to start on either rather than run on a secret
//! that may no longer be one.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why a secret file was refused or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "{what} {path} is mode {mode:04o}: it must be readable and writable by its owner only \
         (chmod 600 {path})"
    )]
    Mode {
        what: String,
        path: String,
        mode: u32,
    },
    #[error(
        "{what} {path} belongs to uid {owner}: it must belong to the user this daemon runs as \
         (uid {me}) or to root (chown {me} {path})"
    )]
    Owner {
        what: String,
        path: String,
        owner: u32,
        me: u32,
    },
    #[error(
        "{what} {path} is mode {mode:04o}: it must be readable, writable and searchable by its \
         owner only (chmod 700 {path})"
    )]
    DirMode {
        what: String,
        path: String,
        mode: u32,
    },
    #[error("{what} {path} is not a directory")]
    NotADirectory { what: String, path: String },
    #[error("cannot read {what} {path}: {source}")]
    Io {
        what: String,
        path: String,
        source: std::io::Error,
    },
}

/// The content of the secret file `path` (`what` names it in messages: "cluster key"), or
/// `None` when it does not exist. Refused when its mode lets group or others in
/// (`mode & 0o077 != 0`), or when it belongs to neither this process's user nor root. The
/// check is made on the opened file (a symlink to it is followed, as for any config file, and
/// what is checked is what is read).
pub fn read_private_file(path: &Path, what: &str) -> Result<Option<String>, SecretError> {
    let io = |source: std::io::Error| SecretError::Io {
        what: what.to_string(),
        path: path.display().to_string(),
        source,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    check_private(
        meta.uid(),
        meta.mode(),
        nix::unistd::geteuid().as_raw(),
        path,
        what,
    )?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    Ok(Some(text))
}

/// Makes every file and directory this process creates from now on private to its user
/// (umask 077): sled's files and whatever else a library creates under `schedd`'s state
/// directory get 0600 and 0700 without a mode of their own. What must be wider (the client
/// socket, the cluster CA's certificate) sets its mode explicitly. Call it first thing in
/// `main`: the umask is the process's, inherited by every thread and child.
pub fn restrict_umask() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// Creates the private directory `dir` (`what` names it in messages: "state directory") mode
/// 0700 with any missing parent (each made durable), or checks the one there: it must be a
/// directory (a symlink to one is followed) that belongs to this process's user or root and
/// that group and others may not use at all (`mode & 0o077 == 0`). Nothing in a refused
/// directory is opened or changed.
pub fn private_dir(dir: &Path, what: &str) -> Result<(), SecretError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source: std::io::Error| SecretError::Io {
        what: what.to_string(),
        path: dir.display().to_string(),
        source,
    };
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::durable::create_dir_all(dir).map_err(io)?;
            // Exactly 0700, whatever the umask.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
            return Ok(());
        }
        Err(e) => return Err(io(e)),
    };
    if !meta.is_dir() {
        return Err(SecretError::NotADirectory {
            what: what.to_string(),
            path: dir.display().to_string(),
        });
    }
    check_private_dir(
        meta.uid(),
        meta.mode(),
        nix::unistd::geteuid().as_raw(),
        dir,
        what,
    )
}

/// The check of [`private_dir`] on an existing directory's owner and mode.
fn check_private_dir(
    owner: u32,
    mode: u32,
    me: u32,
    dir: &Path,
    what: &str,
) -> Result<(), SecretError> {
    match check_private(owner, mode, me, dir, what) {
        Err(SecretError::Mode { what, path, mode }) => {
            Err(SecretError::DirMode { what, path, mode })
        }
        checked => checked,
    }
}

/// Takes group and others' bits off every file and directory under `dir` (not `dir`
/// itself, not following links) that belongs to this process's user: what an older version
/// left 0644 in a state directory that is private now. Returns how many it changed.
pub fn tighten_private_tree(dir: &Path) -> std::io::Result<usize> {
    use std::os::unix::fs::PermissionsExt;
    let me = nix::unistd::geteuid().as_raw();
    let mut changed = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        for entry in std::fs::read_dir(&next)? {
            let entry = entry?;
            let meta = entry.metadata()?; // of the entry itself, links not followed
            if meta.is_dir() {
                todo.push(entry.path());
            }
            let mode = meta.mode() & 0o7777;
            if meta.file_type().is_symlink() || meta.uid() != me || mode & 0o077 == 0 {
                continue;
            }
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode & !0o077))?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// The check of [`read_private_file`] on the file's owner and mode, for a process of uid `me`.
fn check_private(
    owner: u32,
    mode: u32,
    me: u32,
    path: &Path,
    what: &str,
) -> Result<(), SecretError> {
    if owner != me && owner != 0 {
        return Err(SecretError::Owner {
            what: what.to_string(),
            path: path.display().to_string(),
            owner,
            me,
        });
    }
    let mode = mode & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Mode {
            what: what.to_string(),
            path: path.display().to_string(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_an_owner_only_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("cluster.key");
        assert!(read_private_file(&key, "cluster key").unwrap().is_none());
        std::fs::write(&key, "secret\n").unwrap();
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                read_private_file(&key, "cluster key").unwrap().as_deref(),
                Some("secret\n")
            );
        }
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = read_private_file(&key, "cluster key")
                .unwrap_err()
                .to_string();
            let expected = format!(
                "cluster key {} is mode {mode:04o}: it must be readable and writable by its \
                 owner only (chmod 600 {})",
                key.display(),
                key.display()
            );
            assert_eq!(err, expected);
        }
        // Through a symlink, the file itself is checked.
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        assert!(read_private_file(&link, "cluster key")
            .unwrap_err()
            .to_string()
            .contains("mode 0602"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_private_file(&link, "cluster key").unwrap().is_some());
    }

    #[test]
    fn a_private_dir_is_made_0700_and_a_loose_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("lib/ysched");
        private_dir(&state, "state directory").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&state), 0o700);
        // Made already: checked, and accepted as it is.
        private_dir(&state, "state directory").unwrap();
        std::fs::write(state.join("db"), "x").unwrap();
        for loose in [0o755, 0o750, 0o705, 0o711, 0o770, 0o707, 0o701] {
            std::fs::set_permissions(&state, std::fs::Permissions::from_mode(loose)).unwrap();
            let err = private_dir(&state, "state directory")
                .unwrap_err()
                .to_string();
            let d = state.display();
            assert_eq!(
                err,
                format!(
                    "state directory {d} is mode {loose:04o}: it must be readable, writable and \
                     searchable by its owner only (chmod 700 {d})"
                )
            );
            // Refused as it is: nothing changed.
            assert_eq!(mode(&state), loose);
        }
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Through a symlink, the directory itself is checked.
        let link = tmp.path().join("state-link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        private_dir(&link, "state directory").unwrap();
        let file = state.join("db");
        assert_eq!(
            private_dir(&file, "state directory")
                .unwrap_err()
                .to_string(),
            format!("state directory {} is not a directory", file.display())
        );
        let err = check_private_dir(65534, 0o40700, 0, &state, "state directory")
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to uid 65534"), "{err}");
    }

    #[test]
    fn what_an_older_version_left_open_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("db");
        std::fs::create_dir(&db).unwrap();
        std::fs::write(db.join("conf"), "x").unwrap();
        std::fs::write(tmp.path().join("ballast"), "x").unwrap();
        std::fs::write(tmp.path().join("mine"), "x").unwrap();
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        set(&db, 0o755);
        set(&db.join("conf"), 0o644);
        set(&tmp.path().join("ballast"), 0o666);
        set(&tmp.path().join("mine"), 0o600);
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("link")).unwrap();
        assert_eq!(tighten_private_tree(tmp.path()).unwrap(), 3);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&db), 0o700);
        assert_eq!(mode(&db.join("conf")), 0o600);
        assert_eq!(mode(&tmp.path().join("ballast")), 0o600);
        assert_eq!(mode(Path::new("/etc/passwd")), 0o644, "a link was followed");
        assert_eq!(tighten_private_tree(tmp.path()).unwrap(), 0);
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        let path = Path::new("/etc/ysched/cluster.key");
        // Its own user's, or root's (a daemon run as a service user may be given a key
        // root installed), at an owner-only mode.
        check_private(1000, 0o100600, 1000, path, "cluster key").unwrap();
        check_private(0, 0o100400, 1000, path, "cluster key").unwrap();
        check_private(0, 0o100600, 0, path, "cluster key").unwrap();
        let err = check_private(65534, 0o100600, 0, path, "cluster key")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "cluster key /etc/ysched/cluster.key belongs to uid 65534: it must belong to the \
             user this daemon runs as (uid 0) or to root (chown 0 /etc/ysched/cluster.key)"
        );
        // The file type bits are no part of the mode shown.
        let err = check_private(0, 0o100644, 0, path, "cluster CA key")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cluster CA key /etc/ysched/cluster.key is mode 0644"),
            "{err}"
        );
    }
}
