//! The fence lease (`node.fence_after_secs`, F): how long jobs may run without schedd.
//!
//! The agent keeps the file `<spool>/lease`, one line of text, mode 0600, right-aligned in a
//! fixed width ([`LEASE_LEN`] bytes) and rewritten in place: a renewal allocates nothing, so
//! it works on a full spool (on a file system that does not copy on write: not btrfs or ZFS).
//!
//! - `<ms>`: a deadline on `CLOCK_BOOTTIME`, in milliseconds (the clock counts time asleep
//!   and is never set, so neither a suspend nor an NTP step moves the deadline);
//! - `off`: this node does not fence (F = 0, or a login node).
//!
//! The node's supervisor reads it every second (see [`super::node_supervisor`]); once
//! `CLOCK_BOOTTIME` is past the deadline it stops every job (SIGTERM, each job's grace,
//! SIGKILL). It does so on its own, so a job is fenced even while noded is stopped, hung or
//! gone. A missing file, or one that cannot be read or understood, fences nothing. A read
//! that overlaps a rewrite may see part of each: the supervisor reads a deadline that has
//! passed a second time before it acts on it.
//!
//! The agent moves the deadline only forwards, to the time it *sent* the message schedd just
//! acknowledged plus F: the Register when `Registered` comes back, a heartbeat when its
//! `HeartbeatAck` does. schedd records a node's last contact when it *receives*, which is
//! later, so a node always fences no later than schedd's last contact with it plus F.

use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The lease file's name, in the spool's root.
pub const LEASE_FILE: &str = "lease";
/// Mode of the lease file: root's only, as every file in the spool (its readers, the
/// supervisor and an older noded's per-job processes, are root).
pub const LEASE_MODE: u32 = 0o600;
/// The lease file's size: the text right-aligned in 20 bytes (a `u64` in decimal), then a
/// newline.
pub const LEASE_LEN: usize = 21;

/// What the lease file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// This node does not fence.
    Off,
    /// Jobs stop once `CLOCK_BOOTTIME` is past this, in ms.
    Until(u64),
}

impl Lease {
    /// The file's content as [`Lease::to_text`] writes it; `None` for anything else.
    pub fn parse(text: &str) -> Option<Lease> {
        match text.trim() {
            "off" => Some(Lease::Off),
            deadline => deadline.parse().ok().map(Lease::Until),
        }
    }

    /// The file's content: always [`LEASE_LEN`] bytes.
    pub fn to_text(self) -> String {
        match self {
            Lease::Off => format!("{:>20}\n", "off"),
            Lease::Until(deadline_ms) => format!("{deadline_ms:>20}\n"),
        }
    }

    /// Reads the lease at `path`: `Ok(None)` when there is no file; an error of kind
    /// `InvalidData` when its content is no lease.
    pub fn read(path: &Path) -> io::Result<Option<Lease>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Lease::parse(&text).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a lease: {:?}", path.display(), text.trim()),
            )
        })
    }

    /// Writes the lease at `path` (created if missing), mode 0600, in place. Not synced to
    /// disk: the lease only matters to a running supervisor (or an older noded's per-job
    /// processes), which a crash of the host ends too.
    pub fn write(self, path: &Path) -> io::Result<()> {
        self.write_to(&open_lease_file(path)?)
    }

    /// Rewrites the open lease file in place: the same [`LEASE_LEN`] bytes, so nothing is
    /// allocated.
    fn write_to(self, file: &std::fs::File) -> io::Result<()> {
        file.write_all_at(self.to_text().as_bytes(), 0)?;
        // Only shrinks what an older agent may have left longer; never allocates.
        if file.metadata()?.len() > LEASE_LEN as u64 {
            file.set_len(LEASE_LEN as u64)?;
        }
        Ok(())
    }
}

/// Opens (creating) the lease file for rewriting in place, mode 0600, with its
/// [`LEASE_LEN`] bytes allocated. A new file says `off` (as a missing one means); one an
/// earlier agent left keeps its lease, rewritten in the fixed width.
fn open_lease_file(path: &Path) -> io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(LEASE_MODE)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(LEASE_MODE))?;
    let len = file.metadata()?.len();
    if len != LEASE_LEN as u64 {
        let mut text = vec![0u8; len.min(64) as usize];
        let n = file.read_at(&mut text, 0)?;
        let kept = std::str::from_utf8(&text[..n])
            .ok()
            .and_then(Lease::parse)
            .unwrap_or(Lease::Off);
        kept.write_to(&file)?;
    }
    allocate(&file)?;
    Ok(file)
}

/// Makes sure the file's bytes have disk blocks, so that rewriting them never needs any.
fn allocate(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate with mode 0 (allocate, keep the content) on a descriptor we own.
    let ret = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, LEASE_LEN as libc::off_t) };
    if ret == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        // Written bytes have their blocks already where fallocate is not supported.
        e if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
        e => Err(e),
    }
}

/// `CLOCK_BOOTTIME` in milliseconds: monotonic, counting time suspended, shared by every
/// process of the host (the agent and the supervisor compare their readings).
pub fn boottime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live local it is given.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if ret != 0 {
        // Never on Linux since 2.6.39; a clock of 0 would fence nothing.
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs * 1000 + nanos / 1_000_000
}

/// The agent's side of the lease: the file and the deadline it last wrote, which only ever
/// moves forwards.
#[derive(Debug)]
pub struct LeaseKeeper {
    path: PathBuf,
    /// The lease file, open for rewriting in place.
    file: std::fs::File,
    /// F in ms; 0: the node does not fence.
    fence_after_ms: u64,
    /// The deadline this agent last wrote. What an earlier agent left in the file is not
    /// looked at: its deadline stands until this agent's first registration replaces it
    /// (after a reboot it would be meaningless anyway).
    deadline_ms: Option<u64>,
    /// The last write failed (said once, until a write succeeds again).
    failing: bool,
}

impl LeaseKeeper {
    /// The lease at `path` for a node fencing after `fence_after_secs` (0: never, and the
    /// file says `off` from now on, so that the supervisor, and an older noded's per-job
    /// processes, stop fencing too).
    /// The file is made (and its space taken) here, at start: renewals only rewrite it.
    pub fn new(path: PathBuf, fence_after_secs: u64) -> io::Result<LeaseKeeper> {
        let file = open_lease_file(&path)?;
        if fence_after_secs == 0 {
            Lease::Off.write_to(&file)?;
        }
        Ok(LeaseKeeper {
            path,
            file,
            fence_after_ms: fence_after_secs.saturating_mul(1000),
            deadline_ms: None,
            failing: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The deadline this agent last wrote.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms
    }

    /// schedd acknowledged a message sent at `sent_at_ms` (`CLOCK_BOOTTIME`): the deadline
    /// becomes that time plus F, unless it is already later.
    pub fn renew(&mut self, sent_at_ms: u64) {
        if self.fence_after_ms == 0 {
            return;
        }
        let deadline = sent_at_ms.saturating_add(self.fence_after_ms);
        if self.deadline_ms.is_some_and(|current| current >= deadline) {
            return;
        }
        match Lease::Until(deadline).write_to(&self.file) {
            Ok(()) => {
                self.deadline_ms = Some(deadline);
                if self.failing {
                    self.failing = false;
                    tracing::warn!("fence lease {} written again", self.path.display());
                }
            }
            Err(e) => {
                if !self.failing {
                    self.failing = true;
                    tracing::error!(
                        "cannot renew the fence lease {}: {e}; this node's jobs will be \
                         stopped when the last lease written runs out",
                        self.path.display()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn lease_text_round_trips() {
        for lease in [Lease::Off, Lease::Until(0), Lease::Until(123_456_789)] {
            assert_eq!(Lease::parse(&lease.to_text()), Some(lease));
        }
        assert_eq!(Lease::parse(" 42 \n"), Some(Lease::Until(42)));
        for garbage in ["", "soon", "-5", "12 34", "OFF"] {
            assert_eq!(Lease::parse(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn keeper_moves_the_deadline_only_forwards() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEASE_FILE);
        assert_eq!(Lease::read(&path).unwrap(), None);
        let mut keeper = LeaseKeeper::new(path.clone(), 30).unwrap();
        assert_eq!(
            Lease::read(&path).unwrap(),
            Some(Lease::Off),
            "a new file fences nothing until the first renewal"
        );
        keeper.renew(1_000);
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Until(31_000)));
        assert_eq!(
            std::fs::metadata(&path).unwrap().mode() & 0o7777,
            LEASE_MODE
        );
        keeper.renew(500);
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Until(31_000)));
        keeper.renew(2_000);
        assert_eq!(keeper.deadline_ms(), Some(32_000));
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Until(32_000)));

        assert_eq!(std::fs::metadata(&path).unwrap().len(), LEASE_LEN as u64);

        std::fs::write(&path, "garbage").unwrap();
        let err = Lease::read(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        // An earlier agent's lease (in the old, unpadded form) stands until the first
        // renewal, rewritten in the fixed width.
        std::fs::write(&path, "77000\n").unwrap();
        let mut keeper = LeaseKeeper::new(path.clone(), 30).unwrap();
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Until(77_000)));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LEASE_LEN as u64);
        keeper.renew(50_000);
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Until(80_000)));

        // Fencing off: the file says so at once, whatever it said, and stays so.
        let mut keeper = LeaseKeeper::new(path.clone(), 0).unwrap();
        keeper.renew(5_000);
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Off));
    }

    /// A renewal on a file system with no space left: rewriting in place needs none.
    #[test]
    fn renewals_need_no_space() {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("spool");
        std::fs::create_dir(&mount).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        assert!(mounted, "cannot mount a tmpfs (the suite runs as root)");
        let path = mount.join(LEASE_FILE);
        let result = std::panic::catch_unwind(|| {
            let mut keeper = LeaseKeeper::new(path.clone(), 30).unwrap();
            // Fill the file system to the last byte.
            let filler = mount.join("filler");
            let mut f = std::fs::File::create(&filler).unwrap();
            while std::io::Write::write_all(&mut f, &[0u8; 4096]).is_ok() {}
            assert!(
                std::fs::write(mount.join("x"), b"x").is_err(),
                "the disk is full"
            );
            for sent in [1_000, 2_000, 123_456_789_000] {
                keeper.renew(sent);
                assert_eq!(
                    Lease::read(&path).unwrap(),
                    Some(Lease::Until(sent + 30_000))
                );
            }
        });
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&mount)
            .status();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    #[test]
    fn boottime_advances() {
        let a = boottime_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = boottime_ms();
        assert!(a > 0 && b >= a + 20, "{a} {b}");
    }
}
