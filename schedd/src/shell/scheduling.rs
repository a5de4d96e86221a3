//! The scheduling loop: node timeouts, then a pass of the core on a copy of the records,
//! applied for what still holds. Each pass orders every tier by fair share: the factors come
//! from the usage book (ended runs) and the running jobs, computed off the lock.

use super::{lock, Cluster, State};
use crate::core;
use crate::core::Policy;
use crate::core::Snapshot;
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::fair_share::share_table;
use crate::fair_share::QueueView;
use crate::fair_share::UsageBook;
use crate::state::expected::expect_preemptors;
use crate::store;
use crate::store::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use ysched_common::time::now_ms;
use ysched_common::Config;
use ysched_common::JobId;

/// The half-life of the usage fair share counts (`fair_share.half_life`).
pub fn usage_half_life_ms(config: &Config) -> i64 {
    // Validated with the config; the default only for a config built in code.
    const WEEK_MS: i64 = 7 * 24 * 3_600_000;
    config.fair_share_half_life_ms().unwrap_or(WEEK_MS)
}

/// The usage book at start: every run recorded so far, decayed to `now`.
pub(super) fn usage_book(config: &Config, store: &Store, now: i64) -> store::Result<UsageBook> {
    let mut book = UsageBook::new(usage_half_life_ms(config), now);
    // One at a time: a million recorded runs need not be in memory at once.
    store.scan_runs(0, i64::MAX, |run| book.add_run(&run))?;
    Ok(book)
}

/// Hands the memory freed since the last call back to the OS: glibc keeps it in its arenas
/// otherwise, and RSS stays at the peak of whatever allocated it (a burst of requests, the
/// copy of every job a `yctl show job` replays).
pub(super) fn release_freed_memory() {
    // SAFETY: malloc_trim only walks and shrinks the allocator's own free lists.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The most jobs in memory and nodes for which a scheduling pass plans on a runtime worker
/// (see [`Cluster::schedule_once`]).
const PLANNED_ON_THE_RUNTIME: (usize, usize) = (64, 128);

/// How often, at most, the end states kept for dependencies are trimmed (a walk over every
/// job in memory, under the lock).
const COLLECT_ENDED_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

impl State {
    /// Forgets the end states no live dependency needs any more, when jobs with dependencies
    /// have ended and the last time is long enough ago.
    pub(super) fn collect_ended_targets(&mut self) {
        if self.reactor.ended_targets_due() && self.deps_collected.elapsed() >= COLLECT_ENDED_EVERY
        {
            self.reactor.collect_ended_targets(&self.rec);
            self.deps_collected = std::time::Instant::now();
        }
    }
}

impl Cluster {
    /// Passes run on events (submit, job end, node join). Conditions that change with time
    /// alone (a victim passing its tier's `min_runtime`) are caught by a pass at least every
    /// `RECHECK`.
    pub(super) async fn schedule_loop(self: Arc<Self>) {
        const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);
        let mut store_full: Option<String> = None;
        loop {
            if tokio::time::timeout(RECHECK, self.wake.notified())
                .await
                .is_err()
            {
                // A quiet second: hand memory freed after a burst of requests back to the OS.
                release_freed_memory();
            }
            let silent = self.fail_silent_nodes().await;
            let started = std::time::Instant::now();
            ysched_common::stamp::stamp("d.pass", 0);
            let res = self.schedule_once().await;
            let took = started.elapsed();
            ysched_common::stamp::stamp("d.pass_done", 0);
            self.metrics.pass(took);
            let full = match (&silent, &res) {
                (Err(ApiError::Unavailable(m)), _) | (_, Err(ApiError::Unavailable(m))) => {
                    Some(m.clone())
                }
                _ => None,
            };
            // A full store pauses scheduling; say so once, and once when it is back.
            match (&full, &store_full) {
                (Some(m), None) => tracing::error!("scheduling paused: {m}"),
                (None, Some(_)) => tracing::warn!("state store writable again: scheduling resumed"),
                _ => {}
            }
            store_full = full;
            match &silent {
                Err(e) if store_full.is_none() => {
                    tracing::error!("node timeout check failed: {e:?}")
                }
                _ => {}
            }
            match res {
                Ok(changed) if !changed.is_empty() && self.commit().await.is_ok() => {
                    self.changed(changed)
                }
                Err(e) if store_full.is_none() => tracing::error!("scheduling pass failed: {e:?}"),
                _ => {}
            }
            // Under a burst of events, passes would run back to back and hold the state lock
            // most of the time. Resting as long as the pass took caps them at half the time;
            // on a small queue a pass takes microseconds, so an idle cluster still starts a job
            // at once. Events during the rest are not lost: `Notify` keeps one permit.
            tokio::time::sleep(took.min(std::time::Duration::from_millis(100))).await;
        }
    }

    /// Jobs on a node not heard from for longer than `node_timeout_secs` (no heartbeat,
    /// whether or not its connection is still open: a hung agent's may be) are requeued once
    /// the node's fence has surely stopped them, or end NODE_FAIL (see
    /// [`Records::fail_silent`]). (If the agent comes back still running one, registration
    /// tells it to kill it: schedd no longer counts it as running.) A silent node's session
    /// is ended: what it says later comes on a new registration.
    async fn fail_silent_nodes(&self) -> ApiResult<()> {
        let timeout_ms = self.config.scheduler.node_timeout_secs as i64 * 1000;
        // A connection still open is given at least three heartbeats: a timeout configured
        // near the heartbeat interval must not fail a node that is merely between two.
        let open_timeout_ms =
            timeout_ms.max(3 * self.config.scheduler.heartbeat_secs as i64 * 1000);
        let mut silent = BTreeSet::new();
        let (changed, wake, ()) = self.run_cluster_event(|rec, now| {
            silent = rec
                .nodes()
                .values()
                .filter(|n| {
                    let quiet = now - n.last_seen.max(self.started);
                    quiet
                        > if n.connected {
                            open_timeout_ms
                        } else {
                            timeout_ms
                        }
                })
                .map(|n| n.name.clone())
                .collect();
            let limits = self.limits();
            Ok((rec.fail_silent(&silent, self.started, limits, now), ()))
        })?;
        for name in &silent {
            self.end_silent_session(name);
        }
        if changed.is_empty() {
            return Ok(());
        }
        self.settle(changed, wake).await
    }

    /// Runs the core on the scheduler's copy of the records, without the lock (requests are
    /// answered while it runs), then applies what of its plan still holds. Returns the jobs
    /// whose state changed.
    pub async fn schedule_once(self: &Arc<Self>) -> ApiResult<Vec<JobId>> {
        let now = now_ms();
        // One pass at a time holds the view, and a `yctl show job` waits for it rather than
        // making a second copy: `touched` can bring only one copy up to date.
        let mut view = Arc::clone(&self.scheduler_view).lock_owned().await;
        let under_lock = std::time::Instant::now();
        let (nodes, book, ended) = {
            let mut st = lock(&self.state);
            st.rec.refresh_copy(&mut view.copy);
            st.collect_ended_targets();
            (
                st.rec.nodes().clone(),
                st.reactor.usage_book(),
                st.reactor.ended_targets().ended(),
            )
        };
        let refresh_took = under_lock.elapsed();
        ysched_common::stamp::stamp("d.pass_copied", 0);
        let n_jobs = view.copy.jobs.len();
        let small = n_jobs <= PLANNED_ON_THE_RUNTIME.0 && nodes.len() <= PLANNED_ON_THE_RUNTIME.1;
        let cluster = Arc::clone(self);
        let kill_invalid = self.config.scheduler.kill_invalid_depend;
        let plan_pass = move || {
            let held = &mut *view;
            let snap = Snapshot {
                jobs: &held.copy.jobs,
                nodes: &nodes,
                ended: &ended,
            };
            let config = &cluster.config;
            let table = share_table(&book, &config.accounts, &held.copy.jobs, now);
            let factors = table.factors();
            let policy = Policy {
                tiers: &config.tiers,
                fair_share: &factors,
                backfill: cluster.backfill(),
            };
            let (mut plan, queue) =
                core::schedule_with_queue(&snap, &policy, now, &mut held.topologies);
            let queue_view = QueueView::new(table, factors, queue);
            let mut expected = std::mem::take(&mut plan.expected_starts);
            expect_preemptors(&mut expected, &held.copy.jobs, &plan, now);
            // With `kill_invalid_depend`, every job whose dependency can never be met is
            // cancelled: all of them, not only those whose reason changed (a cancel that
            // failed is tried again by the next pass).
            let never = if kill_invalid {
                std::mem::take(&mut plan.never_satisfied)
            } else {
                Vec::new()
            };
            (plan, queue_view, expected, never, view)
        };
        // A small queue on a small cluster is planned in microseconds: on this worker, rather
        // than waking a blocking thread for it (a hand-off of 0.1-0.9 ms on an idle machine, in
        // every idle job's submit-to-start). Anything larger, off the runtime's workers.
        let (plan, queue_view, expected, never, mut view) = if small {
            plan_pass()
        } else {
            tokio::task::spawn_blocking(plan_pass)
                .await
                .map_err(|e| ApiError::Internal(format!("scheduling pass failed: {e}")))?
        };
        ysched_common::stamp::stamp("d.pass_planned", 0);
        // The old views are dropped after the lock (a queue of 100,000 places).
        let old = {
            let mut st = lock(&self.state);
            (
                std::mem::replace(&mut st.queue_view, Arc::new(queue_view)),
                std::mem::replace(&mut st.expected, Arc::new(expected)),
            )
        };
        drop(old);
        let payload = |id: JobId| match self.store.payload(id) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                tracing::error!(job = %id, "cannot read job payload: {e}");
                None
            }
        };
        let mut stale = false;
        let apply_started = std::time::Instant::now();
        let applied = self.run_cluster_event(|rec, now| {
            let (plan, dropped) = rec.still_valid(plan);
            stale = dropped;
            Ok((rec.apply_plan(&plan, &payload, now), ()))
        });
        ysched_common::stamp::stamp("d.pass_applied", 0);
        if applied.is_ok() {
            // The jobs the plan changed (their reasons, at least) are the records' own now,
            // and the copy still holds the ones it shared before: it takes the new ones at
            // once rather than at the next pass, which may be long in coming to a queue that
            // waits, so that each job is held once (a PENDING array task's memory).
            let mut st = lock(&self.state);
            st.rec.refresh_copy(&mut view.copy);
        }
        drop(view);
        let (mut changed, _, ()) = applied?;
        if !never.is_empty() {
            // A separate event after the plan's: refused (a full store), the jobs stay
            // pending with their reason, and the next pass tries again.
            match self.run_event(|rec, now| Ok((rec.cancel_never_satisfied(&never, now), ()))) {
                Ok((killed, wake, ())) => {
                    if !killed.is_empty() {
                        tracing::info!(
                            jobs = killed.len(),
                            "cancelled jobs whose dependency can never be satisfied \
                             (scheduler.kill_invalid_depend)"
                        );
                    }
                    if wake {
                        // Their dependents may be decided now (afternotok, afterany).
                        self.wake.notify_one();
                    }
                    changed.extend(killed);
                }
                Err(e) => tracing::warn!(
                    "cancelling jobs whose dependency can never be satisfied failed: {e}"
                ),
            }
        }
        tracing::debug!(
            refresh = ?refresh_took,
            apply = ?apply_started.elapsed(),
            jobs = n_jobs,
            "scheduling pass: time under the lock"
        );
        if stale {
            // Some decisions no longer held: decide again with what is true now.
            self.wake.notify_one();
        }
        Ok(changed)
    }
}
