//! The reactor's cycle: a refused write changes nothing; a written event reaches memory,
//! the books, the observer and the outbox; the clock is read once; a submit's jobs are
//! counted at once and enter memory only when settled.

use super::agent_events::Limits;
use super::lifecycle::PartEnd;
use super::reactor::testing::{self, Kept};
use super::reactor::{Clock, NoJournal, NoObserver, Ports};
use super::submission::NewJob;
use super::Records;
use crate::core::testkit::{JobBuilder, T0};
use crate::store::{Payload, Room};
use std::cell::Cell;
use ysched_common::{JobId, JobSpec, JobState, Owner};

const NOW: i64 = T0 + 60_000;
const LIMITS: Limits = Limits {
    max_requeues: 20,
    max_launch_attempts: 3,
};

fn running() -> Records {
    Records::with_jobs(vec![JobBuilder::new(1)
        .gpus(2)
        .submitted(T0 - 5_000)
        .account("vision")
        .running_on("n1", &[0, 1])
        .build()])
}

fn end_of_1() -> PartEnd {
    PartEnd {
        job_id: 1,
        exit_code: Some(0),
        end_time_ms: T0 + 5_000,
        ..PartEnd::default()
    }
}

#[test]
fn a_refused_write_changes_nothing() {
    let mut rec = running();
    let before = (rec.jobs.clone(), rec.recount_active());
    let mut reactor = testing::reactor();
    let mut kept = Kept::default();
    kept.journal.refuse = true;
    let refused = testing::run(&mut reactor, &mut rec, &mut kept, NOW, |rec, now| {
        Ok((rec.job_finished("n1", &end_of_1(), LIMITS, now), ()))
    });
    assert!(refused.is_err());
    assert_eq!((rec.jobs.clone(), rec.recount_active()), before);
    assert!(kept.runs.0.is_empty() && kept.commands.is_empty());
    assert_eq!(reactor.usage_book().usage("vision", NOW).0, 0.0);
}

#[test]
fn a_written_event_reaches_memory_the_books_the_observer_and_the_outbox() {
    let mut rec = running();
    let mut reactor = testing::reactor();
    let mut kept = Kept::default();
    let done = testing::run(&mut reactor, &mut rec, &mut kept, NOW, |rec, now| {
        Ok((rec.job_finished("n1", &end_of_1(), LIMITS, now), "out"))
    })
    .unwrap();
    assert_eq!(done.out, "out");
    assert_eq!(done.now, NOW);
    assert!(done.wake && done.changed == [JobId(1)]);
    assert!(!rec.jobs.contains_key(&JobId(1)), "ended: out of memory");
    assert_eq!(kept.journal.batches.len(), 1);
    assert_eq!(kept.runs.0.len(), 1, "the run it ended");
    assert_eq!(kept.runs.0[0].outcome, "COMPLETED");
    assert!(
        reactor.usage_book().usage("vision", NOW).0 > 0.0,
        "fair share charged"
    );
    assert!(
        matches!(kept.commands[..], [(ref node, super::AgentCommand::Ack { job_id: 1 })] if node == "n1"),
        "{:?}",
        kept.commands
    );
}

/// A clock that counts how often it is read.
struct Counting(Cell<u32>);

impl Clock for Counting {
    fn now(&self) -> i64 {
        self.0.set(self.0.get() + 1);
        NOW
    }
}

#[test]
fn the_clock_is_read_once_per_event() {
    let mut rec = running();
    let clock = Counting(Cell::new(0));
    let mut outbox = Vec::new();
    let ports = Ports {
        clock: &clock,
        journal: &mut NoJournal,
        observer: &mut NoObserver,
        outbox: &mut outbox,
    };
    let done = testing::reactor()
        .run(&mut rec, ports, Room::Cluster, |rec, now| {
            Ok((rec.job_finished("n1", &end_of_1(), LIMITS, now), ()))
        })
        .unwrap();
    assert_eq!((clock.0.get(), done.now), (1, NOW));
}

#[test]
fn a_submit_counts_at_once_and_enters_memory_when_durable_or_never() {
    let owner = Owner {
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        groups: vec![],
    };
    let dir = |_: JobId| String::new();
    for durable in [true, false] {
        let mut rec = Records::with_jobs(vec![]);
        let mut reactor = testing::reactor();
        let mut outbox = Vec::new();
        let ports = Ports {
            clock: &super::reactor::At(NOW),
            journal: &mut NoJournal,
            observer: &mut NoObserver,
            outbox: &mut outbox,
        };
        let new = NewJob {
            owner: owner.clone(),
            from_host: None,
            spec: JobSpec {
                tier: "normal".into(),
                gpus: 1,
                ..JobSpec::default()
            },
            payload: Payload::default(),
            grace_secs: 5,
            tier_value: 100,
            checkpoint_dir: &dir,
        };
        let done = reactor
            .run(&mut rec, ports, Room::Request, |rec, now| {
                Ok((rec.submit(new, now), ()))
            })
            .unwrap();
        assert_eq!(done.submitted.len(), 1);
        assert_eq!(rec.next_job_id, 11, "the id is taken");
        assert!(rec.jobs.is_empty(), "not in memory before it is durable");
        assert_eq!(rec.active_jobs_of(1000).total, 1, "but counted");
        if durable {
            reactor.submit_durable(&mut rec, done.submitted);
            assert_eq!(rec.jobs[&JobId(10)].state, JobState::Pending);
            assert_eq!(rec.active_jobs_of(1000).total, 1);
        } else {
            reactor.submit_lost(&mut rec, &done.submitted);
            assert!(rec.jobs.is_empty());
            assert_eq!(rec.active_jobs_of(1000).total, 0);
        }
        assert_eq!(rec.recount_active(), *rec.kept_active_counts());
    }
}
