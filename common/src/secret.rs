//! Secret files (the cluster key, the cluster CA's key): read only when no one but their owner
//! may read or change them, as ssh refuses a private key that others can read. A key that
//! leaked through a loose mode lets anyone on the host register a node (and receive every
//! job's script and environment) or impersonate `schedd`: the daemons refuse to start on it
//! rather than run on a secret that may no longer be one.

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
