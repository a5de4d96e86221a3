//! What the session's heartbeats carry and how they are acknowledged.
//!
//! Each heartbeat of a session is numbered and remembered until schedd acknowledges it
//! ([`HeartbeatLog`]), so that the acknowledgement renews the fence lease from when it was
//! sent; and it carries the running jobs' newest checkpoint times ([`CheckpointWatch`]).

use crate::launch::checkpoint_scan::{scan_jobs, Newest, HEARTBEAT_SCAN};
use crate::launch::Launcher;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tokio::task::JoinHandle;
use ysched_proto as pb;

/// Heartbeats remembered until schedd acknowledges them; older ones are forgotten (an
/// acknowledgement of a later one renews the lease further anyway).
const UNACKED_BEATS: usize = 64;

/// The heartbeats of one session, numbered from 1, with when each was sent
/// (`CLOCK_BOOTTIME`), until schedd acknowledges them.
#[derive(Debug, Default)]
pub(super) struct HeartbeatLog {
    last_seq: u64,
    unacked: VecDeque<(u64, u64)>,
}

impl HeartbeatLog {
    /// A heartbeat goes out at `sent_at_ms`: its number.
    pub(super) fn sent(&mut self, sent_at_ms: u64) -> u64 {
        self.last_seq += 1;
        if self.unacked.len() >= UNACKED_BEATS {
            self.unacked.pop_front();
        }
        self.unacked.push_back((self.last_seq, sent_at_ms));
        self.last_seq
    }

    /// schedd acknowledged heartbeat `seq`: when it was sent, if it is remembered. Earlier
    /// ones are forgotten with it (schedd answers in order).
    pub(super) fn acked(&mut self, seq: u64) -> Option<u64> {
        while let Some(&(oldest, sent_at_ms)) = self.unacked.front() {
            if oldest > seq {
                break;
            }
            self.unacked.pop_front();
            if oldest == seq {
                return Some(sent_at_ms);
            }
        }
        None
    }
}

/// What the heartbeats say of the running jobs' checkpoints: the newest modification time
/// under each one's checkpoint directory, from a bounded scan (see
/// [`crate::launch::checkpoint_scan`]) on a blocking thread, started at most once per
/// heartbeat interval and never waited for: a heartbeat carries the last scan's results, and
/// a scan that finds something new is sent at once in an extra heartbeat.
#[derive(Debug, Default)]
pub(super) struct CheckpointWatch {
    /// Per job, what the last scan found.
    newest: BTreeMap<u64, i64>,
    /// What the last heartbeat of this session carried.
    sent: BTreeMap<u64, i64>,
    /// Jobs whose directory was too large to scan, already logged.
    too_large: BTreeSet<u64>,
}

pub(super) type CheckpointScan = JoinHandle<Vec<(u64, Newest)>>;

impl CheckpointWatch {
    /// A new session: its schedd knows of no checkpoint, so none counts as sent.
    pub(super) fn new_session(&mut self) {
        self.sent.clear();
    }

    /// Starts a scan of the jobs' directories, unless one is still running or there is
    /// nothing to scan (then the results are simply empty).
    pub(super) fn start_scan(&mut self, launcher: &Launcher, scan: &mut Option<CheckpointScan>) {
        if scan.is_some() {
            return;
        }
        let dirs = launcher.checkpoint_dirs();
        if dirs.is_empty() {
            self.take(Vec::new());
            return;
        }
        *scan = Some(tokio::task::spawn_blocking(move || {
            scan_jobs(dirs, HEARTBEAT_SCAN)
        }));
    }

    /// Takes a scan's results; `true` when a job's time is new since the last heartbeat.
    pub(super) fn take(&mut self, found: Vec<(u64, Newest)>) -> bool {
        let scanned: BTreeSet<u64> = found.iter().map(|(id, _)| *id).collect();
        self.too_large.retain(|id| scanned.contains(id));
        self.newest.clear();
        for (job_id, result) in found {
            match result {
                Newest::Complete(Some(time)) => {
                    self.newest.insert(job_id, time);
                }
                Newest::Complete(None) => {}
                Newest::TooLarge(_) => {
                    if self.too_large.insert(job_id) {
                        tracing::warn!(
                            "job {job_id}: its checkpoint directory has more than {} entries, \
                             too many to watch: its checkpoints are not reported (the victim \
                             cost counts its work since it started)",
                            HEARTBEAT_SCAN.max_entries
                        );
                    }
                }
            }
        }
        self.newest
            .iter()
            .any(|(id, time)| self.sent.get(id) != Some(time))
    }

    /// A heartbeat listing `running_jobs` and what the last scan found of them.
    pub(super) fn heartbeat(&mut self, running_jobs: Vec<u64>) -> pb::Heartbeat {
        let checkpoints = running_jobs
            .iter()
            .filter_map(|id| {
                let time = *self.newest.get(id)?;
                Some(pb::JobCheckpoint {
                    job_id: *id,
                    newest_mtime_ms: time,
                })
            })
            .collect();
        self.sent = self.newest.clone();
        pb::Heartbeat {
            running_jobs,
            checkpoints,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_are_numbered_and_remembered_until_acknowledged() {
        let mut log = HeartbeatLog::default();
        assert_eq!(log.sent(100), 1);
        assert_eq!(log.sent(200), 2);
        assert_eq!(log.sent(300), 3);
        assert_eq!(log.acked(2), Some(200));
        // 1 was forgotten with 2; a repeated or unknown acknowledgement renews nothing.
        assert_eq!(log.acked(1), None);
        assert_eq!(log.acked(2), None);
        assert_eq!(log.acked(9), None);
        assert!(log.unacked.is_empty());
        // Bounded: the oldest are forgotten.
        for i in 0..200 {
            log.sent(i);
        }
        assert_eq!(log.unacked.len(), UNACKED_BEATS);
        assert_eq!(log.acked(4), None);
        assert_eq!(log.acked(203), Some(199));
    }
}
