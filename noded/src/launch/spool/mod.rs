//! The spool: the node's journal, the jobs' scripts, and an older noded's files per job.
//!
//! | path                      | written by     | content                                  |
//! |---------------------------|----------------|------------------------------------------|
//! | `journal`                 | the supervisor | every job's launch ([`JobRecord`], its   |
//! |                           |                | environment included), start, stop       |
//! |                           |                | progress and end ([`FinishedRecord`]),   |
//! |                           |                | until schedd acknowledges it (see        |
//! |                           |                | [`super::journal`])                      |
//! | `jobs/<id>/script`        | noded          | the batch script, mode 0700, owned by    |
//! |                           |                | the job user; not synced                 |
//! | `jobs/<id>/group`         | the job's      | without cgroups: its process group,      |
//! |                           | first process  | recorded before anything that can block, |
//! |                           |                | so that a stop reaches a job that has    |
//! |                           |                | not exec'd yet                           |
//! | `lease`                   | the agent      | the node's fence lease (see              |
//! |                           |                | [`super::lease`])                        |
//! | `supervisor.sock`, `.lock`, `.log` | the supervisor | its socket, lock and diagnostics |
//!
//! A job of an older noded (which ran one process per job) keeps its files in `jobs/<id>/`
//! until schedd acknowledges its end: `state.json` ([`JobRecord`]), `pid`, `stopping` (a
//! stop began: its process waits for every process of the job), `exit.json` ([`ExitRecord`],
//! written by its process into a blank made before it started, in place) and
//! `finished.json` ([`FinishedRecord`]). A restarted noded adopts such jobs from those files
//! (see [`scan_spool`]); every JSON file is written atomically (temporary file, fsync,
//! rename, directory fsync).
//!
//! Jobs' scripts and environments are private: the root, `jobs/` and each `jobs/<id>/` are
//! mode 0711, owned by noded's user (root), so other users can neither list them nor create
//! anything in them, and every file is mode 0600 (root only) except `script`, which the job
//! user needs to run and only they may read. A spool left by an older noded with wider modes is
//! tightened when it is opened.

mod job_dir;
mod records;
#[cfg(test)]
mod tests;

pub use job_dir::JobDir;
pub use records::{ExitRecord, FinishedRecord, JobRecord, StopState};

use super::process::{find_old_job_process, is_old_job_process};
use serde::Serialize;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of `jobs/` and of each job's directory: job users must pass through to run their
/// script, but nobody may list them.
pub const DIR_MODE: u32 = 0o711;
/// Mode of every spool file but `script`: root (noded and the node's supervisor) only.
pub const FILE_MODE: u32 = 0o600;
/// Mode of `script`, owned by the job user.
pub const SCRIPT_MODE: u32 = 0o700;
/// The size of the blank `exit.json`: an exit record with its error cut to
/// [`EXIT_ERROR_MAX_BYTES`] fits, escaped, many times over.
pub const EXIT_RECORD_BYTES: usize = 16 * 1024;
/// The longest error an exit record keeps (in bytes).
pub const EXIT_ERROR_MAX_BYTES: usize = 2048;

/// The spool root; `<root>/jobs/<id>` are the [`JobDir`]s.
#[derive(Debug, Clone)]
pub struct Spool {
    root: PathBuf,
    jobs: PathBuf,
}

impl Spool {
    /// Opens (creating if needed) the spool, and tightens the modes a spool of an older noded
    /// may have (see the module docs). The root and `jobs/` are 0711: job users pass through
    /// both to run their script, and nobody else lists or changes them (a root that group or
    /// others may read or write loses those bits).
    /// The path is made absolute: an older noded's per-job processes are recognised by the
    /// job directory on their command line, which must not depend on noded's working
    /// directory.
    pub fn open(root: &Path) -> io::Result<Spool> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(root.join("jobs"))?;
        let root = root.canonicalize()?;
        let jobs = root.join("jobs");
        set_mode(&jobs, DIR_MODE)?;
        let root_mode = std::fs::metadata(&root)?.mode() & 0o7777;
        if root_mode & 0o066 != 0 {
            set_mode(&root, root_mode & !0o066)?;
        }
        ysched_common::durable::sync_dir(&root)?;
        ysched_common::durable::sync_parent(&root)?;
        for dir in [root.as_path(), jobs.as_path()] {
            let mode = std::fs::metadata(dir)?.permissions().mode();
            if mode & 0o001 == 0 {
                tracing::warn!(
                    "spool directory {} is not searchable by others (mode {:o}): jobs of other \
                     users cannot read their script",
                    dir.display(),
                    mode & 0o7777
                );
            }
        }
        let spool = Spool { root, jobs };
        spool.tighten_job_dirs()?;
        Ok(spool)
    }

    /// Brings the job directories of an older noded (0755, files 0644, script 0755) to the
    /// current modes. Owners are kept: the script stays the job user's.
    fn tighten_job_dirs(&self) -> io::Result<()> {
        for job_id in self.job_ids()? {
            let dir = self.job_dir(job_id);
            let tighten = |path: &Path, mode: u32| match std::fs::symlink_metadata(path) {
                // Only what noded itself made: never follow a link out of the spool.
                Ok(meta) if !meta.file_type().is_symlink() && meta.mode() & 0o7777 != mode => {
                    if let Err(e) = set_mode(path, mode) {
                        tracing::warn!("cannot restrict {}: {e}", path.display());
                    }
                }
                _ => {}
            };
            tighten(dir.path(), DIR_MODE);
            let entries = match std::fs::read_dir(dir.path()) {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::warn!("cannot list {}: {e}", dir.path().display());
                    continue;
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path == dir.script() {
                    tighten(&path, SCRIPT_MODE);
                } else {
                    tighten(&path, FILE_MODE);
                }
            }
        }
        Ok(())
    }

    /// The spool's root directory (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The node's fence lease file (see [`super::lease`]).
    pub fn lease_path(&self) -> PathBuf {
        self.root.join(super::lease::LEASE_FILE)
    }

    pub fn job_dir(&self, job_id: u64) -> JobDir {
        JobDir::new(self.jobs.join(job_id.to_string()))
    }

    /// Creates a fresh, empty directory for a job (mode 0711, owned by noded's user),
    /// replacing any leftover of an earlier run.
    pub fn create_job_dir(&self, job_id: u64) -> io::Result<JobDir> {
        let dir = self.job_dir(job_id);
        let create = || std::fs::DirBuilder::new().mode(DIR_MODE).create(dir.path());
        // Almost always there is none; one left behind (an earlier run's) is replaced.
        if let Err(e) = create() {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
            self.remove_job(job_id)?;
            create()?;
        }
        // The mode given to mkdir is filtered by the umask; the job user needs to search it.
        set_mode(dir.path(), DIR_MODE)?;
        // Not synced: it holds only the job's script, which means nothing after a power loss
        // (the node's journal records the job as lost then).
        Ok(dir)
    }

    pub fn remove_job(&self, job_id: u64) -> io::Result<()> {
        let dir = self.job_dir(job_id);
        // A job's directory holds only its script (an older noded's per-job process's holds more):
        // two system calls instead of a walk of the directory, whenever they are enough.
        let _ = std::fs::remove_file(dir.script());
        match std::fs::remove_dir(dir.path()) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) => {}
        }
        match std::fs::remove_dir_all(dir.path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Ids of all job directories, ascending. Other entries are ignored.
    pub fn job_ids(&self) -> io::Result<Vec<u64>> {
        let mut ids: Vec<u64> = std::fs::read_dir(&self.jobs)?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }
}

/// A job of an older noded found in the spool at start: its record and its process, if one
/// still runs.
pub(super) struct FoundJob {
    pub job_id: u64,
    pub record: Result<JobRecord, String>,
    pub old_process_pid: Option<u32>,
}

/// The jobs of an older noded's per-job processes (a `state.json` in their directory) that are not
/// finished yet (no `finished.json`), each with its live process's pid when there is one.
/// The directories of this noded's jobs hold only their script: the node's journal has the
/// rest.
pub(super) fn scan_spool(spool: &Spool) -> std::io::Result<Vec<FoundJob>> {
    let mut found = Vec::new();
    for job_id in spool.job_ids()? {
        let dir = spool.job_dir(job_id);
        if !dir.state().exists() {
            continue;
        }
        match dir.read_finished() {
            Ok(Some(_)) => continue, // ended earlier, waiting for schedd's acknowledgement
            Ok(None) => {}
            Err(e) => {
                tracing::error!("job {job_id}: unreadable end record, skipped: {e}");
                continue;
            }
        }
        let record = dir.read_record().map_err(|e| e.to_string());
        let old_process_pid = match &record {
            Ok(JobRecord {
                old_process_pid: Some(pid),
                ..
            }) => Some(*pid).filter(|&pid| is_old_job_process(pid, dir.path())),
            // noded stopped before recording the pid (or the state): look for it.
            _ => find_old_job_process(dir.path()),
        };
        found.push(FoundJob {
            job_id,
            record,
            old_process_pid,
        });
    }
    Ok(found)
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<T> {
    let bytes = std::fs::read(path)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

pub(super) fn read_json_if_exists<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> io::Result<Option<T>> {
    match read_json(path) {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn write_json_atomic<T: Serialize>(path: &Path, value: &T, mode: u32) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(path, &bytes, mode)
}

/// Writes `bytes` to `path` so that readers see either the old or the new content, durably: a
/// temporary file in the same directory, flushed to disk, renamed over the target, and the
/// directory synced. The temporary file is named after the writing process: noded and an
/// older noded's per-job process (its fence) may write `stopping` at the same time.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    // Exactly `mode`, whatever the umask or a leftover temporary file had.
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    // The rename too: until its directory is synced, a power loss may undo it.
    ysched_common::durable::sync_parent(path)
}
