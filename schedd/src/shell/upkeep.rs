//! Keeping the state disk usable, off the state lock: the ballast, the audit log's retention
//! (see `store::upkeep`) and the history's (`scheduler.keep_finished`, `keep_usage`: see
//! `store::history`), once a minute and whenever the audit log has grown past its limit; and
//! the bound on how fast users' refused requests are audited. Each step of an expiry is
//! planned on the store and then written as one batch; with replicas, that batch is an entry
//! of the log like any change, so that every replica's store keeps the same history.

use super::durability::Failure;
use super::{lock, Cluster};
use crate::error::ApiResult;
use crate::state::Effects;
use crate::store;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Duration;
use ysched_common::time::now_ms;
use ysched_common::time::Millis;
use ysched_common::AuditRecord;
use ysched_common::Caller;

/// How often the upkeep runs when nothing wakes it.
const UPKEEP_EVERY: Duration = Duration::from_secs(60);
/// Audit entries removed per write: one small write at a time, the next after a pause.
const EXPIRE_BATCH: usize = 1000;
/// Finished jobs looked at per step of the history's expiry: each takes its record, events
/// and index key (four to five removals); small enough that requests meanwhile do not wait
/// behind a step (measured: 1,000 a step let a `ListJobs` wait 147 ms).
const EXPIRE_JOBS_BATCH: usize = 200;
/// The pause between two steps of a retention: sled's flusher and the requests get the
/// store between them.
const STEP_PAUSE: Duration = Duration::from_millis(10);

/// The upkeep thread's nice value (see [`lower_priority`]): 10, as `nice` gives by default,
/// about a tenth of the CPU a thread at 0 gets when both want it.
const UPKEEP_NICE: libc::c_int = 10;

/// The most refusals of one user's requests that are audited one by one per minute; more
/// are counted and recorded as one entry (see [`RefusalLimiter`]).
pub const REFUSALS_AUDITED_PER_MINUTE: u32 = 10;
const WINDOW_MS: i64 = 60_000;
/// Users remembered in one window; past it, a new window begins early.
const MOST_USERS: usize = 10_000;

/// Bounds how fast one user's refused requests (submits to a tier they may not use,
/// requeues of others' jobs) fill the audit log: per user and minute, the first
/// [`REFUSALS_AUDITED_PER_MINUTE`] are audited as they come, the rest counted and summed up
/// in one entry when the minute is over.
#[derive(Default)]
pub(super) struct RefusalLimiter {
    window_start: i64,
    /// Per uid: its name, refusals in this window, and those not audited one by one.
    users: HashMap<u32, (String, u32, u32)>,
}

impl RefusalLimiter {
    /// Whether this refusal by `uid` is audited; and the summaries of the window that ended,
    /// if one did, to be written first.
    pub(super) fn admit(&mut self, uid: u32, user: &str, now: Millis) -> (bool, Vec<AuditRecord>) {
        let summaries = self.take_summaries(now);
        let entry = self
            .users
            .entry(uid)
            .or_insert_with(|| (user.to_string(), 0, 0));
        entry.1 += 1;
        let audit = entry.1 <= REFUSALS_AUDITED_PER_MINUTE;
        if !audit {
            entry.2 += 1;
        }
        (audit, summaries)
    }

    /// When the window is over (or too many users were seen in it): one entry per user
    /// whose refusals were not all audited, and a new window.
    pub(super) fn take_summaries(&mut self, now: Millis) -> Vec<AuditRecord> {
        if now - self.window_start < WINDOW_MS && self.users.len() < MOST_USERS {
            return Vec::new();
        }
        let since = self.window_start;
        self.window_start = now;
        let mut summaries: Vec<AuditRecord> = self
            .users
            .drain()
            .filter(|(_, (_, _, left_out))| *left_out > 0)
            .map(|(uid, (user, _, left_out))| AuditRecord {
                time: now,
                user,
                uid,
                action: "refusals_not_recorded".into(),
                job_id: None,
                detail: format!(
                    "{left_out} more refused requests since {} were not recorded one by one \
                     (at most {REFUSALS_AUDITED_PER_MINUTE} a minute per user are)",
                    ysched_common::time::rfc3339(since)
                ),
                host: None,
            })
            .collect();
        summaries.sort_by_key(|r| r.uid);
        summaries
    }
}

impl Cluster {
    /// Audits a refusal of `caller`'s request (`record`), durably, unless the caller has had
    /// [`REFUSALS_AUDITED_PER_MINUTE`] refusals audited in this minute already (then it is
    /// counted, and recorded in a summary).
    pub(super) async fn audit_refusal(
        &self,
        caller: &Caller,
        record: AuditRecord,
    ) -> ApiResult<()> {
        let (audit, summaries) =
            lock_refusals(&self.refusals).admit(caller.owner.uid, &caller.owner.user, record.time);
        if !audit && summaries.is_empty() {
            return Ok(());
        }
        self.run_event(|_, _| {
            let mut effects = Effects::default();
            for summary in summaries {
                effects.audit(summary);
            }
            if audit {
                effects.audit(record);
            }
            Ok((effects, ()))
        })?;
        self.commit().await
    }

    /// Runs the upkeep now and then every [`UPKEEP_EVERY`] (or half of a shorter
    /// `scheduler.keep_finished`, at least a second apart, so that a finished job is gone
    /// soon after its time), or sooner when woken (the audit log grew past its limit).
    pub(super) async fn upkeep_loop(self: Arc<Self>) {
        let every = match self.config.keep_finished_ms().ok().flatten() {
            Some(keep) => UPKEEP_EVERY.min(Duration::from_millis((keep / 2).max(1000) as u64)),
            None => UPKEEP_EVERY,
        };
        loop {
            self.upkeep().await;
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = self.upkeep_wake.notified() => {}
            }
        }
    }

    async fn upkeep(&self) {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.keep_ballast()).await {
            Ok(Ok(true)) => tracing::info!(
                "state disk: ballast of {} MiB in place ({})",
                store::BALLAST_BYTES >> 20,
                store::BALLAST_FILE
            ),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!("state disk: cannot create the ballast: {e}"),
            Err(e) => tracing::warn!("state disk: ballast task failed: {e}"),
        }
        let summaries = lock_refusals(&self.refusals).take_summaries(now_ms());
        if !summaries.is_empty() {
            let written = self.run_event(|_, _| {
                let mut effects = Effects::default();
                for summary in summaries {
                    effects.audit(summary);
                }
                Ok((effects, ()))
            });
            if let Err(e) = written {
                tracing::warn!("cannot audit the refusals not recorded one by one: {e}");
            }
        }
        self.expire_audit().await;
        self.expire_history().await;
    }

    /// Removes finished jobs past `scheduler.keep_finished` and usage records past
    /// `scheduler.keep_usage`, [`EXPIRE_JOBS_BATCH`] jobs (or [`EXPIRE_BATCH`] usage records)
    /// at a time with a pause between, never under the state lock. The end states live
    /// dependencies need are kept.
    async fn expire_history(&self) {
        // Validated with the config.
        let keep_finished = self.config.keep_finished_ms().ok().flatten();
        let keep_usage = self.config.keep_usage_ms().ok().flatten();
        let mut jobs = 0;
        if let Some(keep) = keep_finished {
            let cutoff = now_ms().saturating_sub(keep);
            let needed = lock(&self.state).reactor.ended_targets().needed();
            // Entries kept (needed, or their array still has queued tasks) are passed over in
            // this round and looked at again in the next.
            let resume: Option<Vec<u8>> = None;
            jobs = self
                .in_steps(
                    "history retention",
                    (needed, resume),
                    move |store, (needed, resume)| {
                        let (done, removals) = store.plan_expiry(
                            cutoff,
                            EXPIRE_JOBS_BATCH,
                            needed,
                            resume.as_deref(),
                        )?;
                        *resume = done.resume.filter(|_| done.examined > 0);
                        Ok(resume.is_some().then_some((done.jobs, removals)))
                    },
                )
                .await;
        }
        let mut runs = 0;
        if let Some(keep) = keep_usage {
            let cutoff = now_ms().saturating_sub(keep);
            runs = self
                .in_steps("usage retention", (), move |store, ()| {
                    let (n, removals) = store.plan_usage_expiry(cutoff, EXPIRE_BATCH)?;
                    Ok((n > 0).then_some((n, removals)))
                })
                .await;
        }
        if jobs + runs > 0 {
            self.flushes.soon();
            tracing::info!(
                "history: removed {jobs} finished jobs (scheduler.keep_finished = {}) and \
                 {runs} usage records (scheduler.keep_usage = {})",
                self.config.scheduler.keep_finished,
                self.config.scheduler.keep_usage
            );
        }
    }

    /// Removes audit entries past `scheduler.audit_keep_days` or `scheduler.audit_max_mib`,
    /// [`EXPIRE_BATCH`] at a time.
    async fn expire_audit(&self) {
        let scheduler = &self.config.scheduler;
        let keep_ms = i64::try_from(scheduler.audit_keep_days)
            .unwrap_or(i64::MAX / 86_400_000)
            .saturating_mul(86_400_000);
        let max_bytes = scheduler.audit_max_mib.saturating_mul(1024 * 1024);
        if keep_ms == 0 && max_bytes == 0 {
            return;
        }
        let cutoff = if keep_ms == 0 { 0 } else { now_ms() - keep_ms };
        let removed = self
            .in_steps("audit log retention", (), move |store, ()| {
                let (n, removals) = store.plan_audit_expiry(cutoff, max_bytes, EXPIRE_BATCH)?;
                Ok((n > 0).then_some((n, removals)))
            })
            .await;
        if removed > 0 {
            self.flushes.soon();
            tracing::info!(
                "audit log: removed {removed} entries (scheduler.audit_keep_days = {}, \
                 scheduler.audit_max_mib = {})",
                scheduler.audit_keep_days,
                scheduler.audit_max_mib
            );
        }
    }

    /// Runs `step` on a thread of its own at a lower CPU priority (see [`lower_priority`]),
    /// again after a short pause, until it says it is done (`Ok(None)`) or fails; returns
    /// what its steps removed. Each step plans what to remove (keys every replica holds
    /// alike) and the thread writes it: to the store, or, with replicas, as an entry of the
    /// log like any change, so that every replica's store removes the same (the next step is
    /// planned once a majority has it and this replica applied it). `state` goes from one
    /// step to the next. A full store pauses the work until the next round (`what` names it
    /// in the log); a failed write is fatal, as any store write's, and a failed replication
    /// as any change's.
    ///
    /// Why a thread of its own: the expiry of 900,000 finished jobs is minutes of steps, and
    /// on a machine of two cores each step competed with the requests as an equal (a
    /// `ListJobs` of the active jobs took up to 124 ms meanwhile, `bench history`). The
    /// priority is the thread's for good, so it cannot be a thread of tokio's blocking pool,
    /// which serves requests' reads and writes too.
    async fn in_steps<S: Send + 'static>(
        &self,
        what: &str,
        mut state: S,
        step: impl Fn(&store::Store, &mut S) -> store::Result<Option<(usize, store::Batch)>>
            + Send
            + 'static,
    ) -> usize {
        if self.durability.failure().is_some() {
            return 0;
        }
        let store = self.store.clone();
        let durability = Arc::clone(&self.durability);
        let runtime = tokio::runtime::Handle::current();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("upkeep".into())
            .spawn(move || {
                lower_priority();
                let mut removed = 0;
                let outcome = loop {
                    let (n, removals) = match step(&store, &mut state) {
                        Ok(Some(planned)) => planned,
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(Failure::Refused(e)),
                    };
                    if !removals.is_empty() {
                        if let Err(e) = durability.write_alone(removals, &runtime) {
                            break Err(e);
                        }
                    }
                    removed += n;
                    // No one waits any more: schedd is stopping (the rest is done at its
                    // next start).
                    if done_tx.is_closed() {
                        break Ok(());
                    }
                    std::thread::sleep(STEP_PAUSE);
                };
                // The receiver is gone only when schedd is stopping.
                let _ = done_tx.send((removed, outcome));
            });
        if let Err(e) = spawned {
            tracing::warn!("{what} not run: cannot start its thread: {e}");
            return 0;
        }
        match done_rx.await {
            Ok((removed, Ok(()))) => removed,
            Ok((removed, Err(Failure::Refused(e)))) => {
                tracing::warn!("{what} paused: {e}");
                removed
            }
            Ok((removed, Err(Failure::Lost(why)))) => {
                self.durability.fail(format!("{what}: {why}"));
                removed
            }
            Err(_) => {
                tracing::warn!("{what} failed: its thread ended without an answer");
                0
            }
        }
    }

    /// After a write with audit entries: wakes the upkeep if the log is past its limit.
    pub(super) fn audit_written(&self) {
        let max_bytes = self
            .config
            .scheduler
            .audit_max_mib
            .saturating_mul(1024 * 1024);
        if max_bytes > 0 && self.store.audit_bytes() > max_bytes {
            self.upkeep_wake.notify_one();
        }
    }
}

fn lock_refusals(m: &Mutex<RefusalLimiter>) -> MutexGuard<'_, RefusalLimiter> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_refusals_past_the_limit_are_summed_up_when_the_minute_is_over() {
        let mut limiter = RefusalLimiter::default();
        let t0 = 1_000_000;
        let mut audited = 0;
        for i in 0..25 {
            let (audit, summaries) = limiter.admit(1000, "alice", t0 + i);
            assert!(summaries.is_empty());
            audited += u32::from(audit);
        }
        assert_eq!(audited, REFUSALS_AUDITED_PER_MINUTE);
        // Another user has a budget of their own.
        assert!(limiter.admit(1001, "bob", t0 + 30).0);
        assert!(
            limiter.take_summaries(t0 + 100).is_empty(),
            "the minute is not over"
        );
        let summaries = limiter.take_summaries(t0 + WINDOW_MS + 1);
        assert_eq!(summaries.len(), 1, "{summaries:?}");
        assert_eq!(
            (summaries[0].uid, summaries[0].user.as_str()),
            (1000, "alice")
        );
        assert!(
            summaries[0]
                .detail
                .starts_with("15 more refused requests since "),
            "{}",
            summaries[0].detail
        );
        // A new minute: audited again.
        assert!(limiter.admit(1000, "alice", t0 + WINDOW_MS + 2).0);
    }
}

/// Lowers the calling thread's CPU priority to [`UPKEEP_NICE`], so that the requests and
/// passes win the CPU over a long retention (or a bulk read of the history, see `bulk`). Best
/// effort: on Linux a nice value is per thread (`setpriority` on the thread's id); where it
/// cannot be set (a seccomp filter, an odd kernel) the work runs at the priority it has, which
/// is only slower for others.
pub(super) fn lower_priority() {
    // SAFETY: gettid has no arguments; setpriority reads its three integer arguments only.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, UPKEEP_NICE)
    };
    if rc != 0 {
        tracing::debug!(
            "upkeep thread: cannot lower its priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod priority_tests {
    use super::{lower_priority, UPKEEP_NICE};

    /// The nice value of the calling thread.
    fn thread_nice() -> libc::c_int {
        // SAFETY: gettid has no arguments; getpriority reads its integer arguments only.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    /// The upkeep's thread runs at nice 10 (or stays where it was, when that was lower
    /// still and raising it back is not allowed), and only that thread: the caller's is as
    /// it was. It never fails.
    #[test]
    fn only_the_upkeep_thread_runs_at_a_lower_priority() {
        let caller_before = thread_nice();
        let (before, after) = std::thread::spawn(|| {
            let before = thread_nice();
            lower_priority();
            (before, thread_nice())
        })
        .join()
        .expect("the thread does not panic");
        assert!(
            after == UPKEEP_NICE || (after == before && before > UPKEEP_NICE),
            "nice {before} -> {after}"
        );
        assert_eq!(thread_nice(), caller_before);
    }
}
