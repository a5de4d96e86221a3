//! The spool: one directory per job under `<spool>/jobs/<id>`, holding everything needed to
//! supervise the job across noded restarts and to report its end until schedd acknowledges it.
//!
//! | file            | written by | content                                                  |
//! |-----------------|------------|----------------------------------------------------------|
//! | `state.json`    | noded      | [`JobRecord`]: launch parameters (environment included), |
//! |                 |            | resolved plan, pids, start time, stop/term state         |
//! | `script`        | noded      | the batch script, mode 0700, owned by the job user       |
//! | `pid`           | shepherd   | the job's pid (= its process group id)                   |
//! | `group`         | the job's  | without cgroups: its process group, recorded before      |
//! |                 | first      | anything that can block, so that a stop reaches a job    |
//! |                 | process    | that has not exec'd yet                                  |
//! | `stopping`      | noded,     | present once a stop began (noded's, or the shepherd's    |
//! |                 | shepherd   | fence): the shepherd then waits for every process of the |
//! |                 |            | job, not only the main one                               |
//! | `exit.json`     | noded,     | [`ExitRecord`]: how the job ended, or why it never began;|
//! |                 | shepherd   | noded makes it blank before starting the shepherd, which |
//! |                 |            | rewrites it in place (no space needed on a full spool)   |
//! | `finished.json` | noded      | [`FinishedRecord`]: the report sent to schedd, until acked |
//! | `shepherd.log`  | shepherd   | the shepherd's own diagnostics                           |
//!
//! Beside `jobs/`, the spool's root holds `lease`, the node's fence lease (see
//! [`super::lease`]), which the agent writes and every shepherd reads.
//!
//! Jobs' scripts and environments are private: `jobs/` and each `jobs/<id>/` are mode 0711,
//! owned by noded's user (root), so other users can neither list them nor create anything in
//! them, and every file is mode 0600 (root only) except `script`, which the job user needs
//! to run and only they may read. A spool left by an older noded with wider modes is
//! tightened when it is opened.
//!
//! Every JSON file and `pid` is written atomically (temporary file + rename), so a reader
//! never sees half a file, whichever process crashes when; except `exit.json`, which the
//! shepherd writes once, in place, into the blank noded made before starting it, and which
//! noded reads only once the shepherd is gone. So a job's end is recorded even on a spool
//! with no space left; if `finished.json` cannot be written then, noded keeps the report in
//! memory until schedd acknowledges it (see [`super::Launcher::unacked_finished`]), and a
//! restarted noded rebuilds it from `exit.json`.

use super::job::{ExecPlan, JobParams};
use super::process::{find_shepherd, is_shepherd_of};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The per-job files of one job directory.
#[derive(Debug, Clone)]
pub struct JobDir {
    path: PathBuf,
}

impl JobDir {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JobDir { path: path.into() }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn state(&self) -> PathBuf {
        self.path.join("state.json")
    }
    pub fn script(&self) -> PathBuf {
        self.path.join("script")
    }
    pub fn pid(&self) -> PathBuf {
        self.path.join("pid")
    }
    pub fn group(&self) -> PathBuf {
        self.path.join("group")
    }
    pub fn exit(&self) -> PathBuf {
        self.path.join("exit.json")
    }
    pub fn stop_notice(&self) -> PathBuf {
        self.path.join("stopping")
    }
    pub fn finished(&self) -> PathBuf {
        self.path.join("finished.json")
    }
    pub fn shepherd_log(&self) -> PathBuf {
        self.path.join("shepherd.log")
    }

    pub fn read_record(&self) -> io::Result<JobRecord> {
        read_json(&self.state())
    }
    pub fn write_record(&self, record: &JobRecord) -> io::Result<()> {
        // Private: it holds the job's environment.
        write_json_atomic(&self.state(), record, FILE_MODE)
    }
    /// `Ok(None)` when the shepherd has not written it (yet): no file, or the blank noded
    /// made.
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        match std::fs::read(self.exit()) {
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(None),
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", self.exit().display()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Makes the blank `exit.json` the shepherd will write into (see [`JobDir::write_exit`]):
    /// [`EXIT_RECORD_BYTES`] spaces, on disk before the shepherd starts.
    pub fn prepare_exit(&self) -> io::Result<()> {
        write_atomic(&self.exit(), &[b' '; EXIT_RECORD_BYTES], FILE_MODE)
    }

    /// Records how the job ended: into the blank noded made, in place, so that no space is
    /// needed (its error cut to fit); else (no blank: a job dir of an older noded) as any
    /// other file.
    pub fn write_exit(&self, exit: &ExitRecord) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut exit = exit.clone();
        if let Some(error) = &mut exit.error {
            if error.len() > EXIT_ERROR_MAX_BYTES {
                let mut end = EXIT_ERROR_MAX_BYTES;
                while !error.is_char_boundary(end) {
                    end -= 1;
                }
                error.truncate(end);
                error.push('…');
            }
        }
        let mut bytes = serde_json::to_vec(&exit).map_err(io::Error::other)?;
        let blank = std::fs::OpenOptions::new().write(true).open(self.exit());
        match blank {
            Ok(file) if file.metadata()?.len() >= bytes.len() as u64 => {
                bytes.resize(file.metadata()?.len() as usize, b' ');
                file.write_all_at(&bytes, 0)?;
                file.sync_data()
            }
            Ok(_) => write_atomic(&self.exit(), &bytes, FILE_MODE),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                write_atomic(&self.exit(), &bytes, FILE_MODE)
            }
            Err(e) => Err(e),
        }
    }
    pub fn read_finished(&self) -> io::Result<Option<FinishedRecord>> {
        read_json_if_exists(&self.finished())
    }
    pub fn write_finished(&self, finished: &FinishedRecord) -> io::Result<()> {
        write_json_atomic(&self.finished(), finished, FILE_MODE)
    }
    /// The job's pid as the shepherd recorded it.
    pub fn read_job_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pid())
            .ok()?
            .trim()
            .parse()
            .ok()
    }
    pub fn write_job_pid(&self, pid: u32) -> io::Result<()> {
        write_atomic(&self.pid(), format!("{pid}\n").as_bytes(), FILE_MODE)
    }
    /// Creates `group` empty (root only) for the job's first process to write its pid to.
    pub fn create_group_file(&self) -> io::Result<std::os::fd::OwnedFd> {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.group())
            .map(Into::into)
    }
    /// The process group the job's first process recorded (without cgroups), once it has.
    pub fn read_job_group(&self) -> Option<u32> {
        std::fs::read_to_string(self.group())
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|&pgid| pgid > 1)
    }
    /// Tells the shepherd that the job is being stopped (SIGTERM at `term_time_ms`, 0 for an
    /// immediate kill): when the main process exits, the others keep their grace. Written
    /// before the first signal, so the shepherd finds it whenever the signal ends the main
    /// process.
    pub fn write_stop_notice(&self, term_time_ms: i64) -> io::Result<()> {
        write_atomic(
            &self.stop_notice(),
            format!("{term_time_ms}\n").as_bytes(),
            FILE_MODE,
        )
    }
    pub fn has_stop_notice(&self) -> bool {
        self.stop_notice().exists()
    }
    /// When the stop began (the SIGTERM time, 0 for an immediate kill), if one has.
    pub fn read_stop_notice(&self) -> Option<i64> {
        let text = std::fs::read_to_string(self.stop_notice()).ok()?;
        Some(text.trim().parse().unwrap_or(0))
    }
    /// The node's fence lease, in the spool root two levels up (`<spool>/jobs/<id>`).
    pub fn lease(&self) -> Option<PathBuf> {
        let root = self.path.parent()?.parent()?;
        Some(root.join(super::lease::LEASE_FILE))
    }
}

/// Mode of `jobs/` and of each job's directory: job users must pass through to run their
/// script, but nobody may list them.
pub const DIR_MODE: u32 = 0o711;
/// Mode of every spool file but `script`: root (noded and the shepherd) only.
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
    /// may have (see the module docs). The root is created 0755 and `jobs/` 0711: job users
    /// pass through both to run their script.
    /// The path is made absolute: shepherds are recognised by the job directory on their
    /// command line, which must not depend on noded's working directory.
    pub fn open(root: &Path) -> io::Result<Spool> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(root.join("jobs"))?;
        let root = root.canonicalize()?;
        let jobs = root.join("jobs");
        set_mode(&jobs, DIR_MODE)?;
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
        self.remove_job(job_id)?;
        let dir = self.job_dir(job_id);
        std::fs::DirBuilder::new()
            .mode(DIR_MODE)
            .create(dir.path())?;
        // The mode given to mkdir is filtered by the umask; the job user needs to search it.
        set_mode(dir.path(), DIR_MODE)?;
        Ok(dir)
    }

    pub fn remove_job(&self, job_id: u64) -> io::Result<()> {
        match std::fs::remove_dir_all(self.job_dir(job_id).path()) {
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

/// What noded keeps about a job it supervises: enough to resume after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: JobParams,
    /// How the shepherd runs it; `None` when it could not be planned (launch error).
    pub plan: Option<ExecPlan>,
    pub shepherd_pid: Option<u32>,
    /// The job's pid, which is also its process group id (it runs in its own session).
    pub job_pid: Option<u32>,
    pub start_time_ms: i64,
    /// When noded began to launch the job: its time limit counts from here until it has
    /// started (a launch stuck before its exec times out too); 0 in older records.
    #[serde(default)]
    pub launch_time_ms: i64,
    pub stop: StopState,
}

impl JobRecord {
    /// Stands in for a record that could not be read: only the job id is known.
    pub fn unreadable(job_id: u64) -> JobRecord {
        JobRecord {
            job: JobParams {
                job_id,
                ..Default::default()
            },
            plan: None,
            shepherd_pid: None,
            job_pid: None,
            start_time_ms: 0,
            launch_time_ms: 0,
            stop: StopState::default(),
        }
    }
}

/// Stop and termination progress of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopState {
    /// A StopJob (or a kill at registration) reached the job.
    pub stop_requested: bool,
    /// The agent sent SIGTERM because the time limit ran out.
    pub timed_out: bool,
    /// When SIGTERM was sent; 0 if never.
    pub term_time_ms: i64,
    /// When SIGKILL is due, once SIGTERM has been sent.
    pub kill_at_ms: Option<i64>,
    pub kill_sent: bool,
    /// Processes of the job were still alive when the SIGKILL was sent (the main process may
    /// have ended already: the grace covers every process).
    #[serde(default)]
    pub kill_found_processes: bool,
    /// The job's `warn_signal` was sent (it is sent once).
    #[serde(default)]
    pub warn_sent: bool,
}

/// How a job ended, written by its shepherd.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub end_time_ms: i64,
    /// Why the job never started (the shepherd could not set it up or exec it).
    pub error: Option<String>,
    /// The kernel killed a process of the job for going over its memory limit.
    #[serde(default)]
    pub out_of_memory: bool,
    /// The shepherd's fence stopped the job: the node's lease ran out (see
    /// [`super::lease`]).
    #[serde(default)]
    pub fenced: bool,
    /// When the fence's stop began (its SIGTERM, or the stop noded had begun already), ms
    /// since the epoch; 0 without a fence.
    #[serde(default)]
    pub term_time_ms: i64,
    /// The fence's SIGKILL at the end of the grace found processes of the job still alive.
    #[serde(default)]
    pub killed: bool,
    /// The job did not start for a reason of the node's, not its own (its cgroup could not
    /// be used, no process could be forked): another node may run it.
    #[serde(default)]
    pub node_fault: bool,
}

/// How a job ended, as reported to schedd (its `JobFinished`, see [`crate::convert`]) and
/// kept in the spool until schedd acknowledges it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedRecord {
    pub job_id: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub end_time_ms: i64,
    pub timed_out: bool,
    pub stop_requested: bool,
    pub term_time_ms: i64,
    pub killed: bool,
    pub error: String,
    pub checkpoint_saved: bool,
    /// Which run of the job ended, so schedd never takes an old run's late report for a newer
    /// run of the same job.
    #[serde(default)]
    pub restart_count: u32,
    #[serde(default)]
    pub out_of_memory: bool,
    /// Its shepherd's fence stopped it (the node had lost schedd for `fence_after_secs`).
    #[serde(default)]
    pub fenced: bool,
    /// It did not start for a reason of the node's (see [`ExitRecord::node_fault`]).
    #[serde(default)]
    pub node_fault: bool,
}

/// A job found in the spool at start: its record and its shepherd, if one still runs.
pub(super) struct FoundJob {
    pub job_id: u64,
    pub record: Result<JobRecord, String>,
    pub shepherd_pid: Option<u32>,
}

/// The spool's jobs that are not finished yet (no `finished.json`), each with its live
/// shepherd's pid when there is one.
pub(super) fn scan_spool(spool: &Spool) -> std::io::Result<Vec<FoundJob>> {
    let mut found = Vec::new();
    for job_id in spool.job_ids()? {
        let dir = spool.job_dir(job_id);
        match dir.read_finished() {
            Ok(Some(_)) => continue, // ended earlier, waiting for schedd's acknowledgement
            Ok(None) => {}
            Err(e) => {
                tracing::error!("job {job_id}: unreadable end record, skipped: {e}");
                continue;
            }
        }
        let record = dir.read_record().map_err(|e| e.to_string());
        let shepherd_pid = match &record {
            Ok(JobRecord {
                shepherd_pid: Some(pid),
                ..
            }) => Some(*pid).filter(|&pid| is_shepherd_of(pid, dir.path())),
            // noded stopped before recording the pid (or the state): look for it.
            _ => find_shepherd(dir.path()),
        };
        found.push(FoundJob {
            job_id,
            record,
            shepherd_pid,
        });
    }
    Ok(found)
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<T> {
    let bytes = std::fs::read(path)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

fn read_json_if_exists<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match read_json(path) {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn write_json_atomic<T: Serialize>(path: &Path, value: &T, mode: u32) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(path, &bytes, mode)
}

/// Writes `bytes` to `path` so that readers see either the old or the new content: a
/// temporary file in the same directory, flushed to disk, renamed over the target. The
/// temporary file is named after the writing process: noded and a shepherd's fence may write
/// `stopping` at the same time.
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
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_ids_list() {
        let root = tempfile::tempdir().unwrap();
        let spool = Spool::open(root.path()).unwrap();
        let dir = spool.create_job_dir(42).unwrap();
        std::fs::create_dir(root.path().join("jobs/not-a-job")).unwrap();
        spool.create_job_dir(7).unwrap();
        assert_eq!(spool.job_ids().unwrap(), vec![7, 42]);

        assert_eq!(dir.read_exit().unwrap(), None);
        let exit = ExitRecord {
            exit_code: Some(3),
            end_time_ms: 5,
            ..Default::default()
        };
        dir.write_exit(&exit).unwrap();
        assert_eq!(dir.read_exit().unwrap(), Some(exit.clone()));
        // Into a blank, in place: the blank reads as nothing, the record fills its start.
        dir.prepare_exit().unwrap();
        assert_eq!(dir.read_exit().unwrap(), None);
        let failed = ExitRecord {
            error: Some("x".repeat(100_000)),
            node_fault: true,
            ..exit.clone()
        };
        dir.write_exit(&failed).unwrap();
        assert_eq!(
            std::fs::metadata(dir.exit()).unwrap().len(),
            EXIT_RECORD_BYTES as u64
        );
        let read = dir.read_exit().unwrap().unwrap();
        assert!(read.node_fault);
        assert_eq!(
            read.error.unwrap().len(),
            EXIT_ERROR_MAX_BYTES + '…'.len_utf8()
        );
        dir.write_exit(&exit).unwrap();
        dir.write_job_pid(1234).unwrap();
        assert_eq!(dir.read_job_pid(), Some(1234));
        assert!(!dir.has_stop_notice());
        assert_eq!(dir.read_stop_notice(), None);
        dir.write_stop_notice(77).unwrap();
        assert!(dir.has_stop_notice());
        assert_eq!(dir.read_stop_notice(), Some(77));
        assert_eq!(dir.lease(), Some(spool.lease_path()));
        assert_eq!(
            spool.lease_path(),
            root.path().canonicalize().unwrap().join("lease")
        );
        // An exit record of an older shepherd (without the fence's fields) still reads.
        std::fs::write(
            dir.exit(),
            br#"{"exit_code":1,"signal":null,"end_time_ms":9,"error":null}"#,
        )
        .unwrap();
        let old_exit = dir.read_exit().unwrap().unwrap();
        assert!(!old_exit.fenced && !old_exit.killed && old_exit.term_time_ms == 0);
        // A state file of an older noded (without the newer fields) still reads.
        let mut old: serde_json::Value = serde_json::to_value(JobRecord::unreadable(42)).unwrap();
        for key in ["kill_found_processes", "warn_sent"] {
            old["stop"].as_object_mut().unwrap().remove(key);
        }
        std::fs::write(dir.state(), old.to_string()).unwrap();
        assert_eq!(dir.read_record().unwrap().stop, StopState::default());

        std::fs::write(dir.finished(), b"{not json").unwrap();
        let err = dir.read_finished().unwrap_err().to_string();
        assert!(err.contains("finished.json"), "{err}");

        spool.remove_job(42).unwrap();
        spool.remove_job(42).unwrap();
        assert_eq!(spool.job_ids().unwrap(), vec![7]);
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn files_are_private_and_an_old_spool_is_tightened() {
        let root = tempfile::tempdir().unwrap();
        let spool = Spool::open(root.path()).unwrap();
        assert_eq!(mode(&root.path().join("jobs")), DIR_MODE);
        let dir = spool.create_job_dir(3).unwrap();
        assert_eq!(mode(dir.path()), DIR_MODE);
        dir.write_record(&JobRecord::unreadable(3)).unwrap();
        dir.write_exit(&ExitRecord::default()).unwrap();
        dir.write_finished(&FinishedRecord::default()).unwrap();
        dir.write_job_pid(99).unwrap();
        dir.write_stop_notice(1).unwrap();
        let files = [
            dir.state(),
            dir.exit(),
            dir.finished(),
            dir.pid(),
            dir.stop_notice(),
        ];
        for file in files {
            assert_eq!(mode(&file), FILE_MODE, "{}", file.display());
        }

        // As an older noded left it: everything readable by everyone.
        let open = |path: &Path, m: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).unwrap()
        };
        std::fs::write(dir.script(), b"#!/bin/sh\n").unwrap();
        std::fs::write(dir.shepherd_log(), b"log\n").unwrap();
        open(&root.path().join("jobs"), 0o755);
        open(dir.path(), 0o755);
        open(&dir.script(), 0o755);
        for file in [dir.state(), dir.exit(), dir.shepherd_log()] {
            open(&file, 0o644);
        }
        // A link is never followed (nor changed).
        let outside = root.path().join("outside");
        std::fs::write(&outside, b"x").unwrap();
        open(&outside, 0o644);
        std::os::unix::fs::symlink(&outside, dir.path().join("link")).unwrap();

        let spool = Spool::open(root.path()).unwrap();
        let dir = spool.job_dir(3);
        assert_eq!(mode(&root.path().join("jobs")), DIR_MODE);
        assert_eq!(mode(dir.path()), DIR_MODE);
        assert_eq!(mode(&dir.script()), SCRIPT_MODE);
        for file in [dir.state(), dir.exit(), dir.shepherd_log()] {
            assert_eq!(mode(&file), FILE_MODE, "{}", file.display());
        }
        assert_eq!(mode(&outside), 0o644);
    }
}
