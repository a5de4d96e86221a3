//! Client requests that change state: each is an event of the state machine, run by the shell.

use super::*;
use crate::state::client_events::refusal;

impl Cluster {
    /// Persists and acknowledges a checked submit (see `submit::validate`) if some node could
    /// ever run it. The id is returned only once the job is durable.
    pub async fn submit(
        &self,
        caller: Caller,
        home: Option<std::path::PathBuf>,
        submitted: ValidSubmit,
    ) -> ApiResult<JobId> {
        let began = std::time::Instant::now();
        // Looked at before the lock: a home on a hanging automount must stall only this caller.
        let home_exists = home.as_deref().is_some_and(std::path::Path::is_dir);
        let ValidSubmit {
            spec,
            payload,
            grace_secs,
        } = submitted;
        let tier_value = self.config.tier(&spec.tier).map(|t| t.value).unwrap_or(0);
        let (job, done) = {
            let mut st = lock(&self.state);
            let st = &mut *st;
            core::check_satisfiable_with(&spec, &st.rec.nodes, &mut st.topologies)
                .map_err(ApiError::Invalid)?;
            let checkpoint_dir = |id: JobId| {
                submit::checkpoint_dir_with(
                    &spec,
                    id.0,
                    &self.config.scheduler.checkpoint_root,
                    home.as_deref(),
                    |_| home_exists,
                )
            };
            let new = NewJob {
                owner: caller.owner,
                from_host: caller.host,
                tier_value,
                spec: spec.clone(),
                payload,
                grace_secs,
                checkpoint_dir: &checkpoint_dir,
            };
            let (mut effects, job) = st.rec.submit(new, now_ms());
            self.store.check_room()?;
            self.store.apply(std::mem::take(&mut effects.batch))?;
            // The id is taken now; the job enters memory once it is durable.
            let done = st.rec.commit(effects);
            (job, done)
        };
        self.commit().await?;
        let id = job.id;
        self.metrics.submitted(&job, began.elapsed());
        lock(&self.state).rec.insert_job(job);
        if done.wake {
            self.wake.notify_one();
        }
        self.changed(done.changed);
        Ok(id)
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
        self.run_event(|_| {
            let mut effects = Effects::default();
            effects.audit(record);
            Ok((effects, ()))
        })?;
        self.commit().await
    }

    /// Cancels jobs (see [`Records::cancel`]).
    pub async fn cancel(&self, caller: &Caller, ids: &[u64], user: &str) -> ApiResult<Vec<JobId>> {
        let finished = |id: JobId| self.store.job(id).map_err(ApiError::from);
        let (changed, wake, cancelled) =
            self.run_event(|rec| rec.cancel(caller, ids, user, &finished, now_ms()))?;
        self.settle(changed, wake).await?;
        Ok(cancelled)
    }

    pub async fn hold(&self, caller: &Caller, id: JobId, hold: bool) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec| Ok((rec.hold(caller, id, hold, now_ms())?, ())))?;
        self.settle(changed, wake).await
    }

    /// Requeues a running job (see [`Records::requeue`]). A refusal for want of permission is
    /// recorded in the audit log, durably, before it is reported.
    pub async fn requeue(&self, caller: &Caller, id: JobId) -> ApiResult<()> {
        let finished = |id: JobId| self.store.job(id).map_err(ApiError::from);
        match self.run_event(|rec| Ok((rec.requeue(caller, id, &finished, now_ms())?, ()))) {
            Ok((changed, wake, ())) => self.settle(changed, wake).await,
            Err(ApiError::Denied(why)) => {
                let refused = refusal(caller, "requeue_refused", Some(id), &why, now_ms());
                self.run_event(|_| Ok((refused, ())))?;
                self.commit().await?;
                Err(ApiError::Denied(why))
            }
            Err(e) => Err(e),
        }
    }

    pub fn audit_log(&self, caller: &Caller, limit: usize) -> ApiResult<Vec<AuditRecord>> {
        if !caller.is_admin() {
            return Err(ApiError::Denied(
                "only administrators may read the audit log (root on the schedd host, \
                 scheduler.admin_group, root on scheduler.admin_hosts)"
                    .into(),
            ));
        }
        Ok(self.store.audit_log(limit)?)
    }

    pub async fn drain(
        &self,
        caller: &Caller,
        name: &str,
        reason: Option<String>,
    ) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec| Ok((rec.drain(caller, name, reason, now_ms())?, ())))?;
        self.settle(changed, wake).await
    }
}
