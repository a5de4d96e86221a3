//! Submits: each validated request runs as an event in a round of the submit loop (one hold
//! of the lock and one store transaction for every submit of the round), and is acknowledged
//! only after the flush that covers it.

use super::requests::Prefetched;
use super::{lock, Cluster, QueuedSubmit, State, SubmitEvent, WallClock};
use crate::core;
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::state::reactor;
use crate::state::submission::NewJob;
use crate::store;
use crate::submit;
use crate::submit::ValidSubmit;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use ysched_common::Caller;
use ysched_common::JobId;

/// What a submit queued: the job's id (an array's: its first task's) and, for an array, how
/// many tasks it has (0: a plain job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    pub id: JobId,
    pub array_tasks: u32,
}

impl Cluster {
    /// Persists and acknowledges a checked submit (see `submit::validate`) if some node could
    /// ever run it: one job, or every task of an array, in one write. Its dependency is
    /// resolved against the jobs known now (an unknown one is refused). The id is returned
    /// only once the jobs are durable.
    pub async fn submit_jobs(
        self: &Arc<Self>,
        caller: Caller,
        home: Option<std::path::PathBuf>,
        submitted: ValidSubmit,
    ) -> ApiResult<Submitted> {
        let began = std::time::Instant::now();
        let ValidSubmit {
            spec,
            payload,
            grace_secs,
            dependency,
        } = submitted;
        let tier_value = self.config.tier(&spec.tier).map(|t| t.value).unwrap_or(0);
        // Before the lock and off the runtime's workers: whether the home exists (a home on a
        // hanging automount must stall only this caller), and what the dependency needs from
        // the store: its targets' records and the states of the jobs they stand for (a
        // finished array's ten thousand tasks). What the lock then finds is only what ended
        // in between.
        // A submit that needs none of it (or only a home seen lately) takes no such hand-off.
        let needs_home = submit::needs_owner_home(&spec, &self.config.scheduler.checkpoint_root)
            && home.is_some();
        let home_known = needs_home
            && home
                .as_deref()
                .is_some_and(ysched_common::identity::known_home_dir);
        let wants_mail = !spec.mail_types.is_empty();
        let (home_exists, read) =
            if !wants_mail && dependency.is_none() && (!needs_home || home_known) {
                (home_known, Prefetched::default())
            } else {
                let home = home.clone();
                let dependency = dependency.clone();
                self.off_runtime(move |cluster| {
                    if wants_mail {
                        super::mail::check_sendmail(&cluster.config.notify)
                            .map_err(ApiError::Invalid)?;
                    }
                    let home_exists = needs_home
                        && home
                            .as_deref()
                            .is_some_and(ysched_common::identity::home_is_dir);
                    let read = match &dependency {
                        Some(request) => cluster.read_dependency(request)?,
                        None => Prefetched::default(),
                    };
                    Ok((home_exists, read))
                })
                .await?
            };
        let array = spec.array.is_some();
        let event: SubmitEvent = Box::new(move |st: &mut State, cluster: &Cluster| {
            let finished = |id: JobId| read.job(id, &cluster.store);
            let state_of = |id: JobId| read.state(id, &cluster.store);
            let count = spec.array.as_ref().map_or(1, |a| u64::from(a.count));
            st.rec.check_jobs_per_user(&caller, &spec.tier, count)?;
            core::check_satisfiable_with(&spec, st.rec.nodes(), &mut st.topologies)
                .map_err(ApiError::Invalid)?;
            let config = &cluster.config;
            if let Some(tier) = config.tier(&spec.tier) {
                let quota = core::TierQuota::of(&spec.tier, tier);
                core::check_quota_reachable(&spec, &quota, st.rec.nodes(), &mut st.topologies)
                    .map_err(ApiError::Invalid)?;
            }
            st.run(cluster, store::Room::Request, &WallClock, |rec, now| {
                // Resolved under the lock, with the submit: a target that ends meanwhile is
                // seen ending (its end is recorded for this job's dependency).
                let mut spec = spec;
                let mut targets = Vec::new();
                if let Some(request) = &dependency {
                    let (resolved, states) =
                        rec.resolve_dependency(request, &finished, &state_of)?;
                    spec.dependency = Some(resolved);
                    targets = states;
                }
                let checkpoint_dir = |id: JobId| {
                    submit::checkpoint_dir_with(
                        &spec,
                        id.0,
                        &config.scheduler.checkpoint_root,
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
                let mut effects = rec.submit(new, now);
                effects.dependency_targets = targets;
                Ok((effects, ()))
            })
        });
        let done = self.run_submit_event(event).await?;
        let jobs = done.submitted;
        let first = jobs[0].id;
        if let Err(e) = self.commit().await {
            let mut st = lock(&self.state);
            let st = &mut *st;
            st.reactor.submit_lost(&mut st.rec, &jobs);
            return Err(e);
        }
        let submitted = Submitted {
            id: first,
            array_tasks: if array { jobs.len() as u32 } else { 0 },
        };
        self.metrics.submitted_jobs(&jobs, began.elapsed());
        ysched_common::stamp::stamp("d.submit_durable", first.0);
        {
            let mut st = lock(&self.state);
            let st = &mut *st;
            st.reactor.submit_durable(&mut st.rec, jobs);
        }
        if done.wake {
            self.wake.notify_one();
        }
        self.changed(done.changed);
        Ok(submitted)
    }

    /// Runs a submit's event in the submit loop (see [`Cluster::submit_loop`]): written, not
    /// yet durable.
    async fn run_submit_event(&self, event: SubmitEvent) -> ApiResult<reactor::Done<()>> {
        let (reply, answer) = oneshot::channel();
        self.submits_tx
            .send(QueuedSubmit { event, reply })
            .map_err(|_| ApiError::Unavailable("schedd is shutting down".into()))?;
        // The loop ends only when this schedd steps down.
        answer.await.map_err(|_| match self.refuse_if_retired() {
            Err(retired) => retired,
            Ok(()) => ApiError::Internal("the submit loop stopped".into()),
        })?
    }

    /// Runs the submits' events that came since its last round together, under one hold of
    /// the lock, each as it would run alone (its checks, its ids, its refusal: a refused
    /// submit changes nothing and the others go on), and writes what they changed in one
    /// store transaction before the lock is let go. sled 0.34 writes its log buffer out, and
    /// wakes its IO threads, at every transaction: sixty-four clients submitting at once
    /// made sixty-four such writes for each flush that covered them, most of schedd's CPU
    /// per job. Memory takes a submit's change before its write here, within the hold: a
    /// write that fails refuses every submit of the round and the reservations are undone
    /// (sled failing for good ends schedd, as any failed write does), and nothing is
    /// acknowledged before the flush that follows (see [`Cluster::submit_jobs`]).
    pub(super) async fn submit_loop(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<QueuedSubmit>,
    ) {
        /// Enough for every client of a busy moment.
        const MOST_AT_ONCE: usize = 256;
        /// How long a round may hold the lock before it writes what it ran and lets the lock
        /// go, the rest of its submits waiting for the next round: a round of many large
        /// arrays must not keep other requests from the lock longer than a few submits would
        /// one after the other (a listing waited over a second behind a round of fuzzed
        /// arrays in a debug build). A round runs at least one submit.
        const ROUND_HOLDS_LOCK: std::time::Duration = std::time::Duration::from_millis(5);
        let mut queued = std::collections::VecDeque::with_capacity(MOST_AT_ONCE);
        loop {
            if queued.is_empty() {
                match rx.recv().await {
                    Some(submit) => queued.push_back(submit),
                    None => return,
                }
            }
            while queued.len() < MOST_AT_ONCE {
                match rx.try_recv() {
                    Ok(submit) => queued.push_back(submit),
                    Err(_) => break,
                }
            }
            let mut answers = Vec::with_capacity(queued.len());
            {
                let mut st = lock(&self.state);
                let st = &mut *st;
                let began = std::time::Instant::now();
                st.unwritten.round = Some(Vec::new());
                while let Some(QueuedSubmit { event, reply }) = queued.pop_front() {
                    // A bug in one submit's event must not stop the loop every later submit
                    // waits on: it fails that submit alone, as it would have failed its
                    // request's task before.
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        event(&mut *st, &self)
                    }))
                    .unwrap_or_else(|_| {
                        Err(ApiError::Internal(
                            "the submit failed (a bug in schedd)".into(),
                        ))
                    });
                    answers.push((done, reply));
                    if began.elapsed() >= ROUND_HOLDS_LOCK {
                        break;
                    }
                }
                if let Err(e) = self.durability.write_held(&mut st.unwritten) {
                    for (done, _) in &mut answers {
                        if let Ok(done) = done {
                            st.reactor.submit_lost(&mut st.rec, &done.submitted);
                        }
                        *done = Err(e.clone());
                    }
                }
            }
            for (done, reply) in answers {
                let _ = reply.send(done);
            }
        }
    }
}
