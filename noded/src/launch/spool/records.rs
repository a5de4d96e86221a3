//! What the journal's records hold: a job's record, its exit, and its reported end.
//!
//! The job's [`JobRecord`] (an older noded's `state.json`), how it ended as its supervisor
//! saw it ([`ExitRecord`], an older noded's per-job process's `exit.json`), and the end
//! reported to schedd ([`FinishedRecord`], an older noded's `finished.json`). Fields marked `serde(default)`
//! are newer than the first records: they read as their default from older records.

use crate::launch::job::{ExecPlan, JobParams};
use serde::{Deserialize, Serialize};

/// What noded keeps about a job it supervises: enough to resume after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: JobParams,
    /// How the supervisor runs it; `None` when it could not be planned (launch error).
    pub plan: Option<ExecPlan>,
    /// The pid of an older noded's process of the job (it ran one per job, and called it the
    /// job's shepherd, as its records still do); `None` for jobs started through the node's
    /// supervisor.
    #[serde(rename = "shepherd_pid")]
    pub old_process_pid: Option<u32>,
    /// The job was handed to the node's supervisor (see
    /// [`crate::launch::node_supervisor`]); false in older records.
    #[serde(default)]
    pub supervised: bool,
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
            old_process_pid: None,
            supervised: false,
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

/// How a job ended, as its supervisor (or an older noded's per-job process) saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub end_time_ms: i64,
    /// Why the job never started (its setup or exec failed).
    pub error: Option<String>,
    /// The kernel killed a process of the job for going over its memory limit.
    #[serde(default)]
    pub out_of_memory: bool,
    /// The fence stopped the job: the node's lease ran out (see
    /// [`crate::launch::lease`]).
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
    /// The fence stopped it (the node had lost schedd for `fence_after_secs`).
    #[serde(default)]
    pub fenced: bool,
    /// It did not start for a reason of the node's (see [`ExitRecord::node_fault`]).
    #[serde(default)]
    pub node_fault: bool,
}
