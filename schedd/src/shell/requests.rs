//! Client requests that change state: each is an event of the state machine, run by the shell.

use super::{lock, Cluster, Named};
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::state::client_events::audit_record;
use crate::state::targets::{parse_targets, plain_target};
use crate::store::Store;
use crate::submit::ValidSubmit;
use std::collections::BTreeMap;
use std::sync::Arc;
use ysched_common::array::merge_targets;
use ysched_common::time::now_ms;
use ysched_common::AuditRecord;
use ysched_common::Caller;
use ysched_common::Job;
use ysched_common::JobId;
use ysched_common::JobState;
use ysched_common::{DependencyRequest, JobTarget};

/// Jobs and job states read from the store before a request takes the lock (see
/// [`Cluster::read_finished`]); what is not among them is read when asked for (a job that
/// ended meanwhile).
#[derive(Default)]
pub(super) struct Prefetched {
    /// Each job looked for: its record, or `None` when the store had none.
    jobs: BTreeMap<JobId, Option<Job>>,
    states: BTreeMap<JobId, Option<JobState>>,
}

impl Prefetched {
    pub(super) fn job(&self, id: JobId, store: &Store) -> ApiResult<Option<Job>> {
        match self.jobs.get(&id) {
            Some(job) => Ok(job.clone()),
            None => Ok(store.job(id)?),
        }
    }

    pub(super) fn state(&self, id: JobId, store: &Store) -> ApiResult<Option<JobState>> {
        match self.states.get(&id) {
            Some(state) => Ok(*state),
            None => Ok(store.job_state(id)?),
        }
    }
}

impl Cluster {
    /// [`Cluster::submit_jobs`], returning the id (an array's: its first task's).
    pub async fn submit(
        self: &Arc<Self>,
        caller: Caller,
        home: Option<std::path::PathBuf>,
        submitted: ValidSubmit,
    ) -> ApiResult<JobId> {
        Ok(self.submit_jobs(caller, home, submitted).await?.id)
    }

    /// Cancels the jobs `ids` name (an array's id: all its tasks) and, with `user`, all of
    /// that user's (see [`Cluster::cancel_named`]).
    pub async fn cancel(
        self: &Arc<Self>,
        caller: &Caller,
        ids: &[u64],
        user: &str,
    ) -> ApiResult<Vec<JobId>> {
        let done = self.cancel_named(caller, ids, &[], user).await?;
        Ok(done.into_iter().map(|(id, _)| id).collect())
    }

    /// Holds (`hold`) or releases job `id` (see [`Cluster::hold_named`]).
    pub async fn hold(self: &Arc<Self>, caller: &Caller, id: JobId, hold: bool) -> ApiResult<()> {
        self.hold_named(caller, &Named::Id(id), hold).await
    }

    /// Requeues running job `id` (see [`Cluster::requeue_named`]).
    pub async fn requeue(self: &Arc<Self>, caller: &Caller, id: JobId) -> ApiResult<()> {
        self.requeue_named(caller, &Named::Id(id)).await
    }
}

impl Cluster {
    /// What the store holds of the jobs a dependency names (see [`Prefetched`]): read
    /// without the lock, which is taken only to tell which of them are in memory.
    pub(super) fn read_dependency(&self, request: &DependencyRequest) -> ApiResult<Prefetched> {
        let targets: Vec<JobTarget> = request
            .clauses
            .iter()
            .flat_map(|c| c.targets.iter().cloned())
            .collect();
        let mut read = self.read_finished(targets.iter().map(|t| t.id))?;
        // The jobs they stand for (an unknown name is refused later, under the lock).
        let ids: Vec<JobId> = {
            let st = lock(&self.state);
            let finished = |id: JobId| Ok(read.jobs.get(&id).cloned().flatten());
            let mut ids = Vec::new();
            for target in merge_targets(&targets) {
                if let Ok(resolved) = st.rec.resolve(&target, &finished) {
                    ids.extend(
                        resolved
                            .ids
                            .into_iter()
                            .filter(|id| !st.rec.jobs().contains_key(id)),
                    );
                }
                // Beyond its limit the dependency is refused anyway (under the lock).
                if ids.len() as u64 > st.rec.limits().dependency_jobs {
                    break;
                }
            }
            ids
        };
        for id in ids {
            read.states.insert(id, self.store.job_state(id)?);
        }
        Ok(read)
    }

    /// Runs `work` (store reads that may wait for the disk, file system calls) on tokio's
    /// blocking pool: never on a runtime worker, which every other request shares.
    pub async fn off_runtime<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Cluster) -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        let cluster = Arc::clone(self);
        tokio::task::spawn_blocking(move || work(&cluster))
            .await
            .map_err(|e| ApiError::Internal(format!("a blocking read failed: {e}")))?
    }

    /// [`Cluster::read_finished`] on the blocking pool.
    pub(super) async fn read_finished_off_runtime(
        self: &Arc<Self>,
        ids: impl IntoIterator<Item = JobId>,
    ) -> ApiResult<Prefetched> {
        let ids: Vec<JobId> = ids.into_iter().collect();
        self.off_runtime(move |cluster| cluster.read_finished(ids))
            .await
    }

    /// The records of the jobs of `ids` not in memory now, read from the store without the
    /// lock: a request's names are then resolved under the lock without reading the store
    /// (a finished job's record never changes).
    pub(super) fn read_finished(
        &self,
        ids: impl IntoIterator<Item = JobId>,
    ) -> ApiResult<Prefetched> {
        let missing: Vec<JobId> = {
            let st = lock(&self.state);
            ids.into_iter()
                .filter(|id| !st.rec.jobs().contains_key(id))
                .collect()
        };
        let mut read = Prefetched::default();
        for id in missing {
            if let std::collections::btree_map::Entry::Vacant(e) = read.jobs.entry(id) {
                e.insert(self.store.job(id)?);
            }
        }
        Ok(read)
    }

    /// Records, durably, a submit refused for want of permission (a tier's allow-list), before
    /// the refusal is reported.
    pub async fn submit_refused(
        &self,
        caller: &Caller,
        wanted_tier: &str,
        why: &str,
    ) -> ApiResult<()> {
        let detail = format!("submit to tier '{wanted_tier}': {why}");
        let record = audit_record(caller, "submit_refused", None, detail, now_ms());
        self.audit_refusal(caller, record).await
    }

    /// Records, durably, an update refused for want of permission (a tier's allow-list),
    /// before the refusal is reported.
    pub async fn update_refused(&self, caller: &Caller, job: JobId, why: &str) -> ApiResult<()> {
        let record = audit_record(
            caller,
            "update_refused",
            Some(job),
            why.to_string(),
            now_ms(),
        );
        self.audit_refusal(caller, record).await
    }

    /// Cancels the jobs `ids` and `targets` name (an array's id: all its tasks) and, with
    /// `user`, all of that user's (see [`Records::cancel_targets`]). Returns each cancelled
    /// job with its display id (`12_7` for a task).
    pub async fn cancel_named(
        self: &Arc<Self>,
        caller: &Caller,
        ids: &[u64],
        targets: &[String],
        user: &str,
    ) -> ApiResult<Vec<(JobId, String)>> {
        let mut all: Vec<JobTarget> = ids.iter().map(|&id| plain_target(id)).collect();
        all.extend(parse_targets(targets, ids.len())?);
        let read = self
            .read_finished_off_runtime(all.iter().map(|t| t.id))
            .await?;
        let finished = |id: JobId| read.job(id, &self.store);
        let (changed, wake, cancelled) =
            self.run_event(|rec, now| rec.cancel_targets(caller, &all, user, &finished, now))?;
        self.settle(changed, wake).await?;
        Ok(cancelled)
    }

    /// Holds (`hold`) or releases what `name` names: one job, or tasks of an array (every
    /// one in the right state; see [`Records::hold_targets`]). A refusal for want of
    /// permission (another's job, an administrator's hold) is recorded in the audit log,
    /// durably, before it is reported.
    pub async fn hold_named(
        self: &Arc<Self>,
        caller: &Caller,
        name: &Named,
        hold: bool,
    ) -> ApiResult<()> {
        let read = self.read_finished_off_runtime([name.job_id()]).await?;
        let finished = |id: JobId| read.job(id, &self.store);
        let outcome = self.run_event(|rec, now| {
            let resolved = name.resolve(rec, &finished)?;
            Ok((rec.hold_targets(caller, &resolved, hold, now)?, ()))
        });
        match outcome {
            Ok((changed, wake, ())) => self.settle(changed, wake).await,
            Err(ApiError::Denied(why)) => {
                let action = if hold {
                    "hold_refused"
                } else {
                    "release_refused"
                };
                let record =
                    audit_record(caller, action, Some(name.job_id()), why.clone(), now_ms());
                self.audit_refusal(caller, record).await?;
                Err(ApiError::Denied(why))
            }
            Err(e) => Err(e),
        }
    }

    /// Changes a queued job, or the queued tasks of an array (see [`Records::update_job`]);
    /// returns what changed. A dependency is resolved as at submit, its targets read from
    /// the store first. A refusal for want of permission is recorded in the audit log,
    /// durably, before it is reported.
    pub async fn update_named(
        self: &Arc<Self>,
        caller: &Caller,
        name: &Named,
        update: crate::update::ValidUpdate,
    ) -> ApiResult<Vec<String>> {
        let read = {
            let dependency = update.dependency.clone().flatten();
            let job = name.job_id();
            self.off_runtime(move |cluster| {
                let mut read = match &dependency {
                    Some(request) => cluster.read_dependency(request)?,
                    None => Prefetched::default(),
                };
                if let std::collections::btree_map::Entry::Vacant(e) = read.jobs.entry(job) {
                    if !lock(&cluster.state).rec.jobs().contains_key(&job) {
                        e.insert(cluster.store.job(job)?);
                    }
                }
                Ok(read)
            })
            .await?
        };
        let finished = |id: JobId| read.job(id, &self.store);
        let state_of = |id: JobId| read.state(id, &self.store);
        let crate::update::ValidUpdate {
            tier,
            time_limit_secs,
            name: new_name,
            dependency,
            hold,
        } = update;
        let outcome = self.run_event(|rec, now| {
            let resolved = name.resolve(rec, &finished)?;
            let dependency = match &dependency {
                None => None,
                Some(None) => Some(None),
                Some(Some(request)) => {
                    Some(Some(rec.resolve_dependency(request, &finished, &state_of)?))
                }
            };
            let update = crate::state::update::JobUpdate {
                tier: tier.clone(),
                time_limit_secs,
                name: new_name.clone(),
                dependency,
                hold,
            };
            rec.update_job(caller, &resolved, &update, &finished, now)
        });
        match outcome {
            Ok((changed, wake, what)) => {
                self.settle(changed, wake).await?;
                Ok(what)
            }
            Err(ApiError::Denied(why)) => {
                let record = audit_record(
                    caller,
                    "update_refused",
                    Some(name.job_id()),
                    why.clone(),
                    now_ms(),
                );
                self.audit_refusal(caller, record).await?;
                Err(ApiError::Denied(why))
            }
            Err(e) => Err(e),
        }
    }

    /// Requeues a running job (see [`Records::requeue`]); a name of several tasks is refused.
    /// A refusal for want of permission is recorded in the audit log, durably, before it is
    /// reported.
    pub async fn requeue_named(self: &Arc<Self>, caller: &Caller, name: &Named) -> ApiResult<()> {
        let id = self.resolve_one(name, "requeue").await?;
        let read = self.read_finished_off_runtime([id]).await?;
        let finished = |id: JobId| read.job(id, &self.store);
        match self.run_event(|rec, now| Ok((rec.requeue(caller, id, &finished, now)?, ()))) {
            Ok((changed, wake, ())) => self.settle(changed, wake).await,
            Err(ApiError::Denied(why)) => {
                let record =
                    audit_record(caller, "requeue_refused", Some(id), why.clone(), now_ms());
                self.audit_refusal(caller, record).await?;
                Err(ApiError::Denied(why))
            }
            Err(e) => Err(e),
        }
    }

    /// A page of the audit log, for administrators (see [`Store::audit_page`]).
    pub fn audit_page(
        &self,
        caller: &Caller,
        before: Option<u64>,
        limit: usize,
        max_bytes: usize,
    ) -> ApiResult<(Vec<AuditRecord>, Option<u64>)> {
        if !caller.is_admin() {
            return Err(ApiError::Denied(
                "only administrators may read the audit log (root on the schedd host, \
                 scheduler.admin_group, root on scheduler.admin_hosts)"
                    .into(),
            ));
        }
        Ok(self.store.audit_page(before, limit, max_bytes)?)
    }

    pub async fn drain(
        &self,
        caller: &Caller,
        name: &str,
        reason: Option<String>,
    ) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec, now| Ok((rec.drain(caller, name, reason, now)?, ())))?;
        self.settle(changed, wake).await
    }

    /// An administrator takes GPUs of a node out of service (see [`Records::drain_gpus`]).
    pub async fn drain_gpus(
        &self,
        caller: &Caller,
        name: &str,
        gpus: &[u32],
        reason: &str,
    ) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec, now| Ok((rec.drain_gpus(caller, name, gpus, reason, now)?, ())))?;
        self.settle(changed, wake).await
    }

    /// An administrator returns GPUs of a node to service (see [`Records::resume_gpus`]);
    /// once that is durable, waits up to [`GPU_CONFIRM_WAIT`] for the node to confirm that it
    /// forgot their faults, and says what became of each: confirmed, still failing (out of
    /// service again), or not confirmed yet.
    pub async fn resume_gpus(
        &self,
        caller: &Caller,
        name: &str,
        gpus: &[u32],
    ) -> ApiResult<Vec<(u32, GpuResumeOutcome)>> {
        let (changed, wake, resumed_at) =
            self.run_event(|rec, now| Ok((rec.resume_gpus(caller, name, gpus, now)?, now)))?;
        self.settle(changed, wake).await?;
        let deadline = tokio::time::Instant::now() + GPU_CONFIRM_WAIT;
        loop {
            let notified = self.gpu_reports.notified();
            tokio::pin!(notified);
            // Registered before looking, so that a report in between is not missed.
            notified.as_mut().enable();
            let waiting = {
                let st = lock(&self.state);
                st.rec.nodes().get(name).is_some_and(|n| {
                    n.connected && gpus.iter().any(|i| n.gpus_forgetting.contains(i))
                })
            };
            if !waiting || tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let st = lock(&self.state);
        let node = st.rec.nodes().get(name);
        let outcome = |index: &u32| {
            let Some(node) = node else {
                return GpuResumeOutcome::Pending(format!("node {name} is gone"));
            };
            if node.gpus_forgetting.contains(index) {
                return GpuResumeOutcome::Pending(if node.connected {
                    format!(
                        "node {name} did not answer within {} s",
                        GPU_CONFIRM_WAIT.as_secs()
                    )
                } else {
                    format!("node {name} is DOWN; it is told when it registers again")
                });
            }
            match node.gpus_out_of_service.get(index) {
                Some(outage) if outage.failed() && outage.since >= resumed_at => {
                    GpuResumeOutcome::StillFailing(outage.reason.clone())
                }
                _ => GpuResumeOutcome::Confirmed,
            }
        };
        Ok(gpus.iter().map(|i| (*i, outcome(i))).collect())
    }
}

/// How long `yctl resume NODE --gpu N` waits for the node to confirm that it forgot the GPU's
/// faults: the agent polls its monitor at once when told, which takes milliseconds.
pub const GPU_CONFIRM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What became of a GPU an administrator returned to service, as far as its node said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuResumeOutcome {
    /// The node forgot its past faults and does not find it failing: it is in service.
    Confirmed,
    /// It is in service, but the node has not confirmed yet (why); if the node still finds
    /// it failing when it does, it goes out of service again.
    Pending(String),
    /// The node still finds it failing after forgetting its past faults (a lasting fault):
    /// it is out of service again, for this fault.
    StillFailing(String),
}
