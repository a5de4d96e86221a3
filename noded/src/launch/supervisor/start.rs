//! Starting a new job: its spool directory, plan, script, cgroups, then its shepherd.
//!
//! The planning runs on a blocking thread (it looks users up and writes files). A failure
//! says whose fault it is ([`LaunchFailure`]): the node's (its spool, cgroups, processes:
//! the node is marked unhealthy and schedd places the job elsewhere) or the job's.

use super::Supervisor;
use crate::launch::checkpoint;
use crate::launch::containment::JobLimits;
use crate::launch::job::{plan_job, write_script};
use crate::launch::process::{Announcement, Shepherd};
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

impl Supervisor {
    /// Prepares the spool directory and starts the shepherd. A failure to write the spool
    /// also marks the node unhealthy (see [`crate::launch::Shared::spool_write_failed`]).
    pub(super) async fn start(&mut self) -> Result<(Shepherd, Announcement), LaunchFailure> {
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
            // Where the shepherd records the job's end, made now so that it needs no space
            // then.
            dir.prepare_exit()
                .map_err(|e| spool_failure("the job's exit record", e))?;
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
        // From now on the heartbeat's scan watches it.
        if let Some(handle) = self.shared.jobs().get_mut(&self.job_id()) {
            if handle.restart_count == self.record.job.restart_count {
                handle.checkpoint_dir = plan.checkpoint();
            }
        }
        self.record.plan = Some(plan);
        // The shepherd reads its plan from here, so this write must succeed.
        if let Err(e) = self.dir.write_record(&self.record) {
            self.shared.spool_write_failed(&e);
            return Err(LaunchFailure::node(format!(
                "cannot write the job state: {e}"
            )));
        }

        let connection = self.hand_to_supervisor().await.map_err(|e| {
            let error = format!("cannot hand the job to the node's supervisor: {e}");
            self.shared.launch_fault(&error);
            LaunchFailure::node(error)
        })?;
        Ok((Shepherd::Supervised, connection))
    }

    /// Asks the node's supervisor (started if none runs) to start the job; its connection
    /// then says when the job has started and, by its end, when it is over.
    async fn hand_to_supervisor(&mut self) -> std::io::Result<Announcement> {
        let mut stream = self.shared.connect_supervisor(true).await?;
        // Recorded before the request: a noded that stops now asks the supervisor about the
        // job after its restart, and never looks for a shepherd.
        self.record.supervised = true;
        self.persist();
        let request = format!("start {}\n", self.dir.path().display());
        stream.write_all(request.as_bytes()).await?;
        Ok(BufReader::new(stream).lines())
    }
}
