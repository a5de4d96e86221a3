//! The spool: one directory per job under `<spool>/jobs/<id>`, holding everything needed to
//! supervise the job across noded restarts and to report its end until schedd acknowledges it.
//!
//! | file            | written by | content                                                  |
//! |-----------------|------------|----------------------------------------------------------|
//! | `state.json`    | noded      | [`JobRecord`]: launch parameters, resolved plan, pids,   |
//! |                 |            | start time, stop/term state                              |
//! | `script`        | noded      | the batch script, mode 0755, owned by the job user       |
//! | `pid`           | shepherd   | the job's pid (= its process group id)                   |
//! | `exit.json`     | shepherd   | [`ExitRecord`]: how the job ended, or why it never began |
//! | `finished.json` | noded      | [`FinishedRecord`]: the report sent to schedd, until acked |
//! | `shepherd.log`  | shepherd   | the shepherd's own diagnostics                           |
//!
//! Every JSON file and `pid` is written atomically (temporary file + rename), so a reader
//! never sees half a file, whichever process crashes when.

use super::job::{ExecPlan, JobParams};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use ysched_proto as pb;

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
    pub fn exit(&self) -> PathBuf {
        self.path.join("exit.json")
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
        write_json_atomic(&self.state(), record, 0o600)
    }
    /// `Ok(None)` when the shepherd has not written it (yet).
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        read_json_if_exists(&self.exit())
    }
    pub fn write_exit(&self, exit: &ExitRecord) -> io::Result<()> {
        write_json_atomic(&self.exit(), exit, 0o644)
    }
    pub fn read_finished(&self) -> io::Result<Option<FinishedRecord>> {
        read_json_if_exists(&self.finished())
    }
    pub fn write_finished(&self, finished: &FinishedRecord) -> io::Result<()> {
        write_json_atomic(&self.finished(), finished, 0o644)
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
        write_atomic(&self.pid(), format!("{pid}\n").as_bytes(), 0o644)
    }
}

/// The spool root; `<root>/jobs/<id>` are the [`JobDir`]s.
#[derive(Debug, Clone)]
pub struct Spool {
    jobs: PathBuf,
}

impl Spool {
    /// Opens (creating if needed) the spool. Directories are 0755: job users must traverse
    /// them to run their script.
    /// The path is made absolute: shepherds are recognised by the job directory on their
    /// command line, which must not depend on noded's working directory.
    pub fn open(root: &Path) -> io::Result<Spool> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(root.join("jobs"))?;
        let root = root.canonicalize()?;
        let jobs = root.join("jobs");
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
        Ok(Spool { jobs })
    }

    pub fn job_dir(&self, job_id: u64) -> JobDir {
        JobDir::new(self.jobs.join(job_id.to_string()))
    }

    /// Creates a fresh, empty directory for a job, replacing any leftover of an earlier run.
    pub fn create_job_dir(&self, job_id: u64) -> io::Result<JobDir> {
        self.remove_job(job_id)?;
        let dir = self.job_dir(job_id);
        std::fs::DirBuilder::new().mode(0o755).create(dir.path())?;
        // The mode given to mkdir is filtered by the umask; the job user needs to search it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
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
}

/// How a job ended, written by its shepherd.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub end_time_ms: i64,
    /// Why the job never started (the shepherd could not set it up or exec it).
    pub error: Option<String>,
}

/// A `JobFinished` as kept in the spool until schedd acknowledges it.
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
}

impl From<&FinishedRecord> for pb::JobFinished {
    fn from(f: &FinishedRecord) -> Self {
        pb::JobFinished {
            job_id: f.job_id,
            exit_code: f.exit_code,
            signal: f.signal,
            end_time_ms: f.end_time_ms,
            timed_out: f.timed_out,
            stop_requested: f.stop_requested,
            term_time_ms: f.term_time_ms,
            killed: f.killed,
            error: f.error.clone(),
            checkpoint_saved: f.checkpoint_saved,
            restart_count: f.restart_count,
        }
    }
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
/// temporary file in the same directory, flushed to disk, renamed over the target.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
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
        assert_eq!(dir.read_exit().unwrap(), Some(exit));
        dir.write_job_pid(1234).unwrap();
        assert_eq!(dir.read_job_pid(), Some(1234));

        std::fs::write(dir.finished(), b"{not json").unwrap();
        let err = dir.read_finished().unwrap_err().to_string();
        assert!(err.contains("finished.json"), "{err}");

        spool.remove_job(42).unwrap();
        spool.remove_job(42).unwrap();
        assert_eq!(spool.job_ids().unwrap(), vec![7]);
    }
}
