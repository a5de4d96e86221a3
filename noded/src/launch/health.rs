//! Whether this node can take jobs: its spool's health and recent launch faults.
//!
//! A node takes no job while its spool cannot be written (a write failed, or the probe at
//! each heartbeat fails or finds less than `node.spool_reserve_mib` free), nor for
//! [`LAUNCH_FAULT_HOLD`] after a launch failed for a reason of the node's (its cgroups,
//! forking). A change is logged and emitted as a [`JobEvent::Health`]; ends that could not be
//! written to the spool are written once it can be again.

use super::supervisor_client::record_end;
use super::{FinishedRecord, JobEvent, Shared};
use std::io;
use std::sync::MutexGuard;

/// Why this node cannot take jobs, if it cannot.
#[derive(Debug, Default)]
pub(super) struct Health {
    problem: Option<Problem>,
}

#[derive(Debug, Clone)]
struct Problem {
    reason: String,
    kind: ProblemKind,
    /// When it was found (`Instant`): a launch fault is kept for [`LAUNCH_FAULT_HOLD`].
    since: std::time::Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProblemKind {
    /// The spool could not be written, or has less than the reserve free.
    Spool,
    /// A launch failed for a reason of the node's other than its spool.
    Launch,
}

/// How long a launch that failed for a reason of the node's (its cgroups, forking) keeps the
/// node from taking jobs, at least: the probe cannot tell whether that is over, so it is
/// given a minute, after which the next launch tries again.
pub(super) const LAUNCH_FAULT_HOLD: std::time::Duration = std::time::Duration::from_secs(60);
/// Longest reason sent to schedd (it ends up in a drain reason).
const REASON_MAX_BYTES: usize = 200;
/// The probe's file in the spool's root, written, synced and removed at each check.
const PROBE_FILE: &str = ".probe";
/// Bytes the probe writes.
const PROBE_BYTES: usize = 4096;

impl Shared {
    fn health(&self) -> MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets (or clears) the node's problem; a change is logged and emitted.
    fn set_problem(&self, problem: Option<Problem>) {
        let mut health = self.health();
        let before = health.problem.as_ref().map(|p| p.reason.clone());
        let after = problem.as_ref().map(|p| p.reason.clone());
        health.problem = problem;
        if before == after {
            return;
        }
        drop(health);
        match &after {
            Some(reason) => tracing::error!("node takes no job: {reason}"),
            None => tracing::warn!(
                "node takes jobs again (was: {})",
                before.unwrap_or_default()
            ),
        }
        self.emit(JobEvent::Health(after));
    }

    /// A write to the spool failed with `error`.
    pub(super) fn spool_write_failed(&self, error: &io::Error) {
        self.set_problem(Some(Problem {
            reason: spool_reason(error),
            kind: ProblemKind::Spool,
            since: std::time::Instant::now(),
        }));
    }

    /// A launch failed for a reason of the node's: `error`.
    pub(super) fn launch_fault(&self, error: &str) {
        let current = self.health().problem.clone();
        // A spool problem says more (and is what the probe clears).
        if current.is_some_and(|p| p.kind == ProblemKind::Spool) {
            return;
        }
        self.set_problem(Some(Problem {
            reason: bounded(format!("launch failed: {error}")),
            kind: ProblemKind::Launch,
            since: std::time::Instant::now(),
        }));
    }

    /// Why this node cannot take jobs now, if it cannot (see
    /// [`super::Launcher::unhealthy_reason`]).
    pub(super) fn unhealthy_reason(&self) -> Option<String> {
        self.health().problem.as_ref().map(|p| p.reason.clone())
    }
}

/// What a failed spool write says to schedd: `spool full: No space left on device` (or
/// `Disk quota exceeded`), `spool unwritable: Read-only file system`, ...
fn spool_reason(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match text.find(" (os error ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let what = match error.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => "spool full",
        _ => "spool unwritable",
    };
    bounded(format!("{what}: {text}"))
}

/// `reason` cut to [`REASON_MAX_BYTES`].
fn bounded(mut reason: String) -> String {
    if reason.len() > REASON_MAX_BYTES {
        let mut end = REASON_MAX_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

impl Shared {
    /// See [`super::Launcher::check_health`].
    pub(super) fn check_health(&self) -> Option<String> {
        if !self.runs_jobs {
            return None; // a login node takes no job anyway
        }
        let shared = self;
        let current = shared.health().problem.clone();
        let root = shared.spool.root().to_path_buf();
        let reserve = shared.spool_reserve_bytes;
        // Once short of space, the spool must have a margin over the reserve again (a
        // quarter of it, at least a MiB: also with no reserve, after a write failed for
        // want of space) before the node counts as able to take jobs, so that it does not
        // drain and resume with every job's files.
        let was_short = current
            .as_ref()
            .is_some_and(|p| p.kind == ProblemKind::Spool);
        let needed = if was_short {
            reserve + (reserve / 4).max(1024 * 1024)
        } else {
            reserve
        };
        let short_of_space = (needed > 0)
            .then(|| free_bytes(&root))
            .flatten()
            .filter(|free| *free < needed)
            .map(|_| match &current {
                // Still short: said as before.
                Some(problem) if was_short => problem.reason.clone(),
                _ => format!(
                    "spool full: less than {} MiB free in {} (node.spool_reserve_mib)",
                    reserve.div_ceil(1024 * 1024),
                    root.display()
                ),
            });
        let problem = match short_of_space {
            Some(reason) => Some(Problem {
                reason,
                kind: ProblemKind::Spool,
                since: std::time::Instant::now(),
            }),
            None => match probe_write(&root.join(PROBE_FILE)) {
                Err(e) => Some(Problem {
                    reason: spool_reason(&e),
                    kind: ProblemKind::Spool,
                    since: std::time::Instant::now(),
                }),
                Ok(()) => current.filter(|p| {
                    p.kind == ProblemKind::Launch && p.since.elapsed() < LAUNCH_FAULT_HOLD
                }),
            },
        };
        // Keep the time it was first found.
        let problem = match (problem, &shared.health().problem) {
            (Some(new), Some(old)) if new.reason == old.reason => Some(old.clone()),
            (new, _) => new,
        };
        if problem.is_none() {
            self.write_unwritten_ends();
        }
        shared.set_problem(problem);
        shared.health().problem.as_ref().map(|p| p.reason.clone())
    }

    /// Records the ends kept in memory, now that the spool can be written: in the node's
    /// journal through a running supervisor (none running: tried at the next probe), or for
    /// an older noded's per-job process in its `finished.json`.
    fn write_unwritten_ends(&self) {
        let ends: Vec<FinishedRecord> = self.unwritten_ends().values().cloned().collect();
        for end in ends {
            let dir = self.spool.job_dir(end.job_id);
            let written = if dir.state().exists() {
                dir.write_finished(&end)
            } else {
                self.running_supervisor()
                    .and_then(|connection| record_end(connection, &end))
            };
            match written {
                Ok(()) => {
                    self.unwritten_ends().remove(&end.job_id);
                    self.recorded_ends().insert(end.job_id, end);
                }
                Err(e) => tracing::debug!("job {}: end still not written: {e}", end.job_id),
            }
        }
    }
}

/// Free bytes on the file system holding `path`, for unprivileged use; `None` if unknown.
fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// Writes [`PROBE_BYTES`] to `path`, syncs and removes it.
fn probe_write(path: &std::path::Path) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(&[b'.'; PROBE_BYTES])?;
        file.sync_all()
    })();
    let _ = std::fs::remove_file(path);
    written
}
