//! File systems for disk-full tests: a tmpfs mounted for one test, free space, and filling it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A file system mounted for one test, unmounted (lazily) when dropped.
pub struct Mounted(pub PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Mounts a tmpfs of `size` (e.g. `"64m"`) on `dir`, created if missing (the suite runs as
/// root).
pub fn mount_tmpfs(dir: &Path, size: &str) -> Mounted {
    std::fs::create_dir_all(dir).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(
        ok.success(),
        "cannot mount a tmpfs (the suite runs as root)"
    );
    Mounted(dir.to_path_buf())
}

/// Free bytes on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    st.blocks_available() as u64 * st.fragment_size() as u64
}

/// Fills the file system holding `dir` until it has no space left; returns the filler.
pub fn fill(dir: &Path) -> PathBuf {
    fill_leaving(dir, 0)
}

/// Fills the file system holding `dir` until about `leave` bytes are free (none: until it
/// has no space left); returns the filler, `dir/filler` (or `filler.2`, ... if taken).
pub fn fill_leaving(dir: &Path, leave: u64) -> PathBuf {
    use std::io::Write;
    let mut path = dir.join("filler");
    for i in 2.. {
        if !path.exists() {
            break;
        }
        path = dir.join(format!("filler.{i}"));
    }
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0x55u8; 1 << 16];
    loop {
        let free = free_bytes(dir);
        if free <= leave {
            break;
        }
        let n = (free - leave).min(block.len() as u64) as usize;
        if f.write_all(&block[..n]).is_err() {
            break;
        }
        let _ = f.flush();
    }
    let _ = f.sync_all();
    path
}
