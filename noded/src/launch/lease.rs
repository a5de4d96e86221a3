//! The fence lease: how long this node's jobs may keep running without news from schedd
//! (`node.fence_after_secs`, F).
//!
//! The agent keeps the file `<spool>/lease`, one line of text, mode 0644, replaced atomically
//! (temporary file + rename):
//!
//! - `<ms>`: a deadline on `CLOCK_BOOTTIME`, in milliseconds (the clock counts time asleep
//!   and is never set, so neither a suspend nor an NTP step moves the deadline);
//! - `off`: this node does not fence (F = 0, or a login node).
//!
//! Each job's shepherd reads it every second (see [`super::shepherd`]); once `CLOCK_BOOTTIME`
//! is past the deadline it stops its job (SIGTERM, the job's grace, SIGKILL). It does so on
//! its own, so a job is fenced even while noded is stopped, hung or gone. A missing file, or
//! one that cannot be read or understood, fences nothing.
//!
//! The agent moves the deadline only forwards, to the time it *sent* the message schedd just
//! acknowledged plus F: the Register when `Registered` comes back, a heartbeat when its
//! `HeartbeatAck` does. schedd records a node's last contact when it *receives*, which is
//! later, so a node always fences no later than schedd's last contact with it plus F.

use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The lease file's name, in the spool's root.
pub const LEASE_FILE: &str = "lease";
/// Mode of the lease file: anyone may see when this node fences.
pub const LEASE_MODE: u32 = 0o644;

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

    pub fn to_text(self) -> String {
        match self {
            Lease::Off => "off\n".to_string(),
            Lease::Until(deadline_ms) => format!("{deadline_ms}\n"),
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

    /// Replaces the lease at `path` atomically, mode 0644. Not synced to disk: the lease
    /// only matters to running shepherds, which a crash of the host ends too.
    pub fn write(self, path: &Path) -> io::Result<()> {
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".tmp");
        let tmp = path.with_file_name(tmp_name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(LEASE_MODE)
            .open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(LEASE_MODE))?;
        file.write_all(self.to_text().as_bytes())?;
        drop(file);
        std::fs::rename(&tmp, path)
    }
}

/// `CLOCK_BOOTTIME` in milliseconds: monotonic, counting time suspended, shared by every
/// process of the host (the agent and the shepherds compare their readings).
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
    /// file says `off` from now on, so that shepherds of earlier runs stop fencing too).
    pub fn new(path: PathBuf, fence_after_secs: u64) -> io::Result<LeaseKeeper> {
        if fence_after_secs == 0 {
            Lease::Off.write(&path)?;
        }
        Ok(LeaseKeeper {
            path,
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
        match Lease::Until(deadline).write(&self.path) {
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
            None,
            "written at first renewal"
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

        std::fs::write(&path, "garbage").unwrap();
        let err = Lease::read(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        // Fencing off: the file says so at once, whatever it said, and stays so.
        let mut keeper = LeaseKeeper::new(path.clone(), 0).unwrap();
        keeper.renew(5_000);
        assert_eq!(Lease::read(&path).unwrap(), Some(Lease::Off));
    }

    #[test]
    fn boottime_advances() {
        let a = boottime_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = boottime_ms();
        assert!(a > 0 && b >= a + 20, "{a} {b}");
    }
}
