//! The reactor: the one way an event goes through the state machine, in schedd's shell, in
//! ysim and in the state tests alike.
//!
//! One cycle: the clock is read once; the event (a closure over the records) returns its
//! [`Effects`]; the runs it ends are accounted ([`Records::account_runs`]); the durable
//! change goes to the [`Journal`] (schedd's writes sled, with the room check); only when that
//! succeeded are the records committed to memory, the books kept (fair share's
//! [`UsageBook`], the [`EndedTargets`] dependencies read), the [`Observer`] told (schedd's
//! metrics, ysim's outcomes) and the commands handed to the [`Outbox`]. A refused write
//! changes nothing. The outbox decides when commands leave: schedd's sends them only after
//! the flush that covers their change (group commit), ysim's delivers them at once.
//!
//! A submit's jobs enter memory only once their change is durable: the cycle counts them
//! against their owner's limits at once, and [`Reactor::submit_durable`] (or
//! [`Reactor::submit_lost`] when the flush failed) settles them.

use super::commands::AgentCommand;
use super::dependencies::EndedTargets;
use super::{Effects, Records};
use crate::core::PendingReason;
use crate::error::ApiResult;
use crate::fair_share::UsageBook;
pub use crate::store::Room;
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{Job, JobId, RunRecord};

/// Where an event's time comes from: read once per event.
pub trait Clock {
    fn now(&self) -> Millis;
}

/// A clock stopped at one instant: events that belong to one moment (one heartbeat's) share
/// it; ysim's virtual time.
#[derive(Debug, Clone, Copy)]
pub struct At(pub Millis);

impl Clock for At {
    fn now(&self) -> Millis {
        self.0
    }
}

/// Where an event's durable change goes before anything else happens: refused, the event
/// changes nothing.
pub trait Journal {
    /// Writes the durable part of `effects` (not yet durable: the flush that makes it so
    /// comes before any reply or command) if `room` allows it.
    fn write(&mut self, effects: &Effects, room: Room) -> ApiResult<()>;
}

/// A journal that drops every change (ysim; tests that need no store).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoJournal;

impl Journal for NoJournal {
    fn write(&mut self, _effects: &Effects, _room: Room) -> ApiResult<()> {
        Ok(())
    }
}

/// What watches the events go by (schedd's metrics, ysim's outcomes). Called only for
/// events whose change was written.
pub trait Observer {
    /// Before the records take the event: `rec` as they are, `jobs` the new versions.
    fn applying(&mut self, _rec: &Records, _jobs: &[Job]) {}
    /// Before the records take the event too: the pending jobs' new reasons (changed in
    /// memory only, not among `jobs`).
    fn reasons(&mut self, _rec: &Records, _reasons: &[(JobId, PendingReason)]) {}
    /// After the records took it: the runs the event ended.
    fn committed(&mut self, _runs: &[RunRecord]) {}
}

/// Watches nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// Where commands to agents go once their event is committed, in the order they must arrive.
pub trait Outbox {
    fn post(&mut self, commands: Vec<(String, AgentCommand)>);
}

/// Keeps the commands, in order (tests, and callers that deliver them afterwards).
impl Outbox for Vec<(String, AgentCommand)> {
    fn post(&mut self, commands: Vec<(String, AgentCommand)>) {
        self.extend(commands);
    }
}

/// The world one event runs against.
pub struct Ports<'a> {
    pub clock: &'a dyn Clock,
    pub journal: &'a mut dyn Journal,
    pub observer: &'a mut dyn Observer,
    pub outbox: &'a mut dyn Outbox,
}

/// What an event did, once committed.
#[derive(Debug)]
pub struct Done<T> {
    /// Jobs whose record changed, for watchers.
    pub changed: Vec<JobId>,
    /// The scheduler should look again.
    pub wake: bool,
    /// The event's time.
    pub now: Millis,
    /// A submit's jobs, written and counted but not yet in memory: settle them with
    /// [`Reactor::submit_durable`] or [`Reactor::submit_lost`].
    pub submitted: Vec<Job>,
    /// What the event returned besides its effects.
    pub out: T,
}

/// The books kept beside the records, and the one cycle every event goes through.
pub struct Reactor {
    /// Fair share's usage of ended runs, per account; each event's ended runs are added after
    /// its commit. Shared with a pass that copied it (copied on write).
    usage: Arc<UsageBook>,
    /// How the finished jobs that live dependencies name have ended (the core's
    /// `Snapshot::ended`), kept up to date before each commit.
    deps: EndedTargets,
}

impl Reactor {
    pub fn new(usage: UsageBook, deps: EndedTargets) -> Reactor {
        Reactor {
            usage: Arc::new(usage),
            deps,
        }
    }

    /// The usage book as of the last event, for a pass (shared, not copied).
    pub fn usage_book(&self) -> Arc<UsageBook> {
        Arc::clone(&self.usage)
    }

    pub fn ended_targets(&self) -> &EndedTargets {
        &self.deps
    }

    /// Whether jobs with dependencies have ended since the end states were last trimmed.
    pub fn ended_targets_due(&self) -> bool {
        self.deps.garbage_due()
    }

    /// Forgets the end states no live dependency of `rec` needs any more.
    pub fn collect_ended_targets(&mut self, rec: &Records) {
        self.deps.collect_garbage(&rec.jobs);
    }

    /// Runs one event: see the module docs. Returns the event's error, or the journal's
    /// refusal, with nothing changed.
    pub fn run<T>(
        &mut self,
        rec: &mut Records,
        ports: Ports<'_>,
        room: Room,
        event: impl FnOnce(&Records, Millis) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<Done<T>> {
        let now = ports.clock.now();
        let (mut effects, out) = event(rec, now)?;
        rec.account_runs(&mut effects, now);
        // After the event's own checks, so bad input is refused for what it is.
        ports.journal.write(&effects, room)?;
        ports.observer.applying(rec, &effects.jobs);
        if !effects.reasons.is_empty() {
            ports.observer.reasons(rec, &effects.reasons);
        }
        // Written; nothing after the journal reads them from the effects (no copy of a
        // 10,000-task array under the lock).
        let submitted = std::mem::take(&mut effects.submitted);
        self.deps
            .observe(&effects, submitted.first().map(|job| job.id));
        let done = rec.commit(effects);
        // The ids are taken; the jobs enter memory once they are durable, but count against
        // their owner's limit already.
        rec.reserve_active(&submitted);
        if !done.runs.is_empty() {
            Arc::make_mut(&mut self.usage).add_runs(&done.runs);
        }
        ports.observer.committed(&done.runs);
        if !done.commands.is_empty() {
            ports.outbox.post(done.commands);
        }
        Ok(Done {
            changed: done.changed,
            wake: done.wake,
            now,
            submitted,
            out,
        })
    }

    /// A submit's jobs (from [`Done::submitted`]) are durable: they enter memory.
    pub fn submit_durable(&mut self, rec: &mut Records, jobs: Vec<Job>) {
        let Some(first) = jobs.first().map(|job| job.id) else {
            return;
        };
        rec.insert_reserved_jobs(jobs);
        self.deps.settled(first);
    }

    /// A submit's jobs could not be made durable (the flush failed): they are counted out
    /// again, and never enter memory.
    pub fn submit_lost(&mut self, rec: &mut Records, jobs: &[Job]) {
        let Some(first) = jobs.first().map(|job| job.id) else {
            return;
        };
        self.deps.settled(first);
        rec.release_reserved(jobs);
    }
}

/// The reactor as the state tests drive it: no store (the batches kept), the runs and
/// commands kept.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A journal that keeps what it is given, encoded as the store would write it, or
    /// refuses everything.
    #[derive(Default)]
    pub(crate) struct KeptBatches {
        pub batches: Vec<crate::store::Batch>,
        pub refuse: bool,
    }

    impl Journal for KeptBatches {
        fn write(&mut self, effects: &Effects, _room: Room) -> ApiResult<()> {
            if self.refuse {
                return Err(crate::error::ApiError::Unavailable("refused".into()));
            }
            self.batches.push(effects.into());
            Ok(())
        }
    }

    /// An observer that keeps the runs committed.
    #[derive(Default)]
    pub(crate) struct KeptRuns(pub Vec<RunRecord>);

    impl Observer for KeptRuns {
        fn committed(&mut self, runs: &[RunRecord]) {
            self.0.extend_from_slice(runs);
        }
    }

    /// What went out of one or more events.
    #[derive(Default)]
    pub(crate) struct Kept {
        pub journal: KeptBatches,
        pub runs: KeptRuns,
        pub commands: Vec<(String, AgentCommand)>,
    }

    /// A reactor with empty books (fair share's half-life a week).
    pub(crate) fn reactor() -> Reactor {
        Reactor::new(
            UsageBook::new(7 * 24 * 3_600_000, 0),
            EndedTargets::default(),
        )
    }

    /// Runs `event` through `reactor` at `now`, a submit's jobs made durable at once; what
    /// the journal, the observer and the outbox got is added to `kept`.
    pub(crate) fn run<T>(
        reactor: &mut Reactor,
        rec: &mut Records,
        kept: &mut Kept,
        now: Millis,
        event: impl FnOnce(&Records, Millis) -> ApiResult<(Effects, T)>,
    ) -> ApiResult<Done<T>> {
        let ports = Ports {
            clock: &At(now),
            journal: &mut kept.journal,
            observer: &mut kept.runs,
            outbox: &mut kept.commands,
        };
        let mut done = reactor.run(rec, ports, Room::Cluster, event)?;
        reactor.submit_durable(rec, std::mem::take(&mut done.submitted));
        Ok(done)
    }

    /// [`run`] for an event already computed, with a reactor of its own.
    pub(crate) fn apply(rec: &mut Records, effects: Effects, now: Millis) -> Kept {
        let mut kept = Kept::default();
        run(&mut reactor(), rec, &mut kept, now, |_, _| {
            Ok((effects, ()))
        })
        .expect("the kept journal takes everything");
        kept
    }
}
