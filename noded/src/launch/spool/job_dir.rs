//! One job's directory in the spool: where its files are, and reading and writing them.
//!
//! The files are listed in the table of the spool's docs.

use super::{
    read_json, read_json_if_exists, write_atomic, write_json_atomic, ExitRecord, FinishedRecord,
    JobRecord, EXIT_ERROR_MAX_BYTES, EXIT_RECORD_BYTES, FILE_MODE,
};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
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
    /// The log of an older noded's process of the job.
    pub fn old_process_log(&self) -> PathBuf {
        self.path.join("shepherd.log")
    }

    pub fn read_record(&self) -> io::Result<JobRecord> {
        read_json(&self.state())
    }
    pub fn write_record(&self, record: &JobRecord) -> io::Result<()> {
        // Private: it holds the job's environment.
        write_json_atomic(&self.state(), record, FILE_MODE)
    }
    /// `Ok(None)` when an older noded's process of the job has not written it (yet): no file,
    /// or the blank noded made.
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

    /// Makes the blank `exit.json` an older noded's process of the job writes into (see
    /// [`JobDir::write_exit`]): [`EXIT_RECORD_BYTES`] spaces, on disk before that process
    /// starts.
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
    /// The job's pid as an older noded's process of the job recorded it.
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
    /// Tells an older noded's process of the job that the job is being stopped (SIGTERM at
    /// `term_time_ms`, 0 for an immediate kill): when the main process exits, the others keep
    /// their grace. Written before the first signal, so that process finds it whenever the
    /// signal ends the main process.
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
        Some(root.join(crate::launch::lease::LEASE_FILE))
    }
}
