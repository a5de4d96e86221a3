//! Writing a report file whole or not at all, safe in a directory other users may write.

use anyhow::{anyhow, Context, Result};
use std::path::Path;

/// Writes `text` to `path` whole or not at all, safely in a directory other users may write
/// (`yctl report` often runs as root): a reader never sees half of it, and nothing another user
/// planted there is followed, written through, or left able to read the text.
///
/// The text goes to a new file in the same directory under a random name
/// (`.NAME.XXXXXX.tmp`), created exclusively (`O_CREAT|O_EXCL`: a file or symlink planted under
/// that name makes it pick another, it never opens one), then synced and renamed over `path`.
/// A rename replaces a symlink at `path` itself, never what it points to. The file gets the
/// mode of the regular file it replaces (set before the rename), or else a new file's mode
/// (0666 less the umask).
pub(super) fn write_whole(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("cannot write {}: not a file name", path.display()))?
        .to_string_lossy();
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // Only a regular file's mode is kept: a symlink's target is not looked at.
    let replaced_mode = std::fs::symlink_metadata(path)
        .ok()
        .filter(|meta| meta.file_type().is_file())
        .map(|meta| meta.mode() & 0o777);
    // Short enough that the random part and the suffix fit a file name's 255 bytes.
    let stem: String = name.chars().take(64).collect();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{stem}."))
        .suffix(".tmp")
        // Private until the text is whole; a new file's mode is what the umask leaves of 0666.
        .permissions(std::fs::Permissions::from_mode(
            if replaced_mode.is_some() {
                0o600
            } else {
                0o666
            },
        ))
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    let written = tmp
        .write_all(text.as_bytes())
        .and_then(|()| match replaced_mode {
            Some(mode) => tmp
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode)),
            None => Ok(()),
        })
        .and_then(|()| tmp.as_file().sync_all());
    // On error the temporary file is removed when `tmp` is dropped.
    written.with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}
