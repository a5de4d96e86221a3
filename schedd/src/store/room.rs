//! The state disk's reserve: a write is refused before sled sees it when it would leave less
//! free than whose write it is may use.

use super::{Error, Result, Store};

/// Whose write it is, which decides how much of the state disk's reserve
/// (`scheduler.state_reserve_mib`) it may use (see `store::Store::check_room`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// A client's request (a submit, a cancel, an audited refusal): refused once the free
    /// space is below the reserve.
    Request,
    /// The cluster's own bookkeeping (agents' registrations and reports, placements, nodes'
    /// health): it may use three quarters of the reserve, so that requests filling the disk
    /// never keep jobs from being started, ended and acknowledged, nor agents from
    /// registering.
    Cluster,
}

/// How many bytes of disk a write of one byte may take: the value, and the log's pages
/// around it (see [`Store::check_room`]).
const WRITE_AMPLIFICATION: u64 = 2;

impl Store {
    /// Refuses (with [`Error::Full`]) a write of about `bytes` (see [`super::Batch::bytes`]) that
    /// would leave the file system with less free than `room` may use up to: called before
    /// anything that writes, so a full disk refuses requests instead of breaking sled
    /// (after ENOSPC in the middle of a write, sled never finishes another write or flush).
    /// sled writes a value about once (a large one as a file of its own) plus the log's
    /// pages around it: twice the batch's size is counted. With no reserve, nothing is
    /// checked.
    pub fn check_room(&self, bytes: u64, room: Room) -> Result<()> {
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Injected);
        }
        if self.reserve_bytes == 0 {
            return Ok(());
        }
        let free = self.free_bytes()?;
        let kept = match room {
            Room::Request => self.reserve_bytes,
            Room::Cluster => self.reserve_bytes / 4,
        };
        let change = bytes.saturating_mul(WRITE_AMPLIFICATION);
        if free >= kept.saturating_add(change) {
            return Ok(());
        }
        let size = ysched_common::parse::format_size;
        let reserve_mib = self.reserve_bytes / (1024 * 1024);
        let kept_text = match room {
            Room::Request => format!("the reserve of {reserve_mib} MiB"),
            Room::Cluster => format!(
                "{} (a quarter of the reserve of {reserve_mib} MiB, which the cluster's own \
                 writes may use)",
                size(kept)
            ),
        };
        let dir = self.dir.display();
        Err(Error::Full(if free < kept || change < 1024 * 1024 {
            format!(
                "{dir} has {} free, below {kept_text} (scheduler.state_reserve_mib)",
                size(free)
            )
        } else {
            format!(
                "{dir} has {} free, and this change of {} would leave less than {kept_text} \
                 (scheduler.state_reserve_mib)",
                size(free),
                size(bytes)
            )
        }))
    }

    /// Free space on the store's file system, for unprivileged use (bytes).
    pub(super) fn free_bytes(&self) -> Result<u64> {
        let st = nix::sys::statvfs::statvfs(&self.dir).map_err(|source| Error::Statvfs {
            dir: self.dir.display().to_string(),
            source,
        })?;
        Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
    }
}
