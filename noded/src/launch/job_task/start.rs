//! Starting a new job: its spool directory, plan, script, cgroups, then the node's supervisor
//! records its launch in the node's journal and starts it.
//!
//! The planning runs on a blocking thread (it looks users up and writes files). The job's
//! spool directory holds only its script, which is not synced: after a power loss the
//! journal says the job was lost, and nothing runs the script again. A failure
//! says whose fault it is ([`LaunchFailure`]): the node's (its spool, cgroups, processes:
//! the node is marked unhealthy and schedd places the job elsewhere) or the job's.

use super::JobTask;
use crate::launch::checkpoint;
use crate::launch::containment::JobLimits;
use crate::launch::job::{plan_job, write_script};
use crate::launch::node_protocol::Request;
use crate::launch::process::{Announcement, JobOwner};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Why a job could not be started: the message for `FinishedRecord::error`, and whether the
/// reason is the node's (its spool, cgroups, processes), so that another node may run it,
/// rather than the job's (its user, paths, program).
pub(super) struct LaunchFailure {
    pub(super) error: String,
    pub(super) node_fault: bool,
}

impl LaunchFailure {
    fn job(error: String) -> LaunchFailure {
        LaunchFailure {
            error,
            node_fault: false,
        }
    }

    fn node(error: String) -> LaunchFailure {
        LaunchFailure {
            error,
            node_fault: true,
        }
    }
}

impl From<String> for LaunchFailure {
    /// A failure of the job's own (see [`LaunchFailure::job`]).
    fn from(error: String) -> Self {
        LaunchFailure::job(error)
    }
}

impl JobTask {
    /// Prepares the spool directory and hands the job to the node's supervisor. A failure to
    /// write the spool also marks the node unhealthy (see
    /// [`crate::launch::Shared::spool_write_failed`]).
    pub(super) async fn start(&mut self) -> Result<(JobOwner, Announcement), LaunchFailure> {
        let shared = self.shared.clone();
        let mut job = self.record.job.clone();
        // The node's default, for the plan only: the record keeps what schedd sent.
        job.slurm_env |= shared.slurm_env;
        let plan = tokio::task::spawn_blocking(move || -> Result<_, LaunchFailure> {
            let spool_failure = |what: &str, e: std::io::Error| {
                shared.spool_write_failed(&e);
                LaunchFailure::node(format!("cannot write {what}: {e}"))
            };
            let dir = shared
                .spool
                .create_job_dir(job.job_id)
                .map_err(|e| spool_failure("the job's spool directory", e))?;
            // A login node runs nothing, whatever schedd sends.
            if !shared.runs_jobs {
                return Err(LaunchFailure::job(format!(
                    "node {} is a login node: it runs no job",
                    shared.node_name
                )));
            }
            // Before anything else is looked at: no message from schedd starts a root process
            // on a node that refuses them.
            if job.uid == 0 && !shared.allow_root_jobs {
                // Logged (as "job N: cannot start: ...") and reported by `launch`.
                return Err(LaunchFailure::job(format!(
                    "node {} refuses to run jobs as root (node.allow_root_jobs = false)",
                    shared.node_name
                )));
            }
            let plan = plan_job(
                &job,
                &shared.node_name,
                &dir.script(),
                shared.client_socket.as_deref(),
            )?;
            if let Some(checkpoint_dir) = &plan.checkpoint_dir {
                checkpoint::prepare(checkpoint_dir, job.job_id, plan.uid, plan.gid)?;
            }
            write_script(&dir.script(), &job, &plan)
                .map_err(|e| spool_failure("the job script", e))?;
            // Last: nothing after it can fail and leave the cgroup behind unrecorded.
            let mut plan = plan;
            plan.cgroup = shared
                .containment
                .layout()
                .map(|layout| {
                    let limits = JobLimits {
                        mem_bytes: job.mem_bytes,
                        cpus: job.cpus,
                    };
                    layout.create_job_cgroup(job.job_id, &shared.cgroup_instance, limits)
                })
                .transpose()
                .map_err(|e| {
                    shared.launch_fault(&e);
                    LaunchFailure::node(e)
                })?;
            Ok(plan)
        })
        .await
        .map_err(|e| LaunchFailure::node(format!("internal error preparing the job: {e}")))??;
        ysched_common::stamp::stamp("n.planned", self.job_id());
        // From now on the heartbeat's scan watches it.
        if let Some(handle) = self.shared.jobs().get_mut(&self.job_id()) {
            if handle.restart_count == self.record.job.restart_count {
                handle.checkpoint_dir = plan.checkpoint();
            }
        }
        self.record.plan = Some(plan);
        // The plan holds the job's whole environment, made from the request's: nothing reads
        // the request's copy again, and without it the launch line the supervisor parses and
        // journals is half as long.
        self.record.job.env.clear();

        let connection = self.hand_to_supervisor().await.map_err(|e| {
            let error = format!("cannot hand the job to the node's supervisor: {e}");
            self.shared.launch_fault(&error);
            LaunchFailure::node(error)
        })?;
        Ok((JobOwner::NodeSupervisor, connection))
    }

    /// Asks the node's supervisor (started if none runs) to record the job's launch in the
    /// node's journal and start it; its connection then says when the job has started and
    /// how it ended.
    async fn hand_to_supervisor(&mut self) -> std::io::Result<Announcement> {
        let stream = self.shared.connect_supervisor(true).await?;
        ysched_common::stamp::stamp("n.connected", self.job_id());
        let (read, mut write) = stream.into_split();
        let launch = Request::Launch(Box::new(self.record.clone())).to_line();
        write
            .write_all(launch.map_err(std::io::Error::other)?.as_bytes())
            .await?;
        ysched_common::stamp::stamp("n.handed", self.job_id());
        self.link = Some(write);
        Ok(BufReader::new(read).lines())
    }
}
