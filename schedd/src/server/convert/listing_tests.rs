//! A listing made from kept entries against the listing prost makes of each job.

use super::{add_expected_starts, add_queue_places, hide_others_usage, kept_listing, WireListing};
use crate::core::testkit::{alice, JobBuilder, T0};
use crate::core::ExpectedStart;
use crate::shell::Listing;
use prost::Message;
use ysched_common::{JobId, JobState, StopReason, StopRequest};
use ysched_proto as pb;

/// Jobs of every kind a listing shows: queued with and without a place and an expected
/// start, held, running, being cancelled, an array task, bob's, and an ended one.
fn listed_jobs() -> Vec<ysched_common::Job> {
    let mut cancelling = JobBuilder::new(6)
        .running_on("n1", &[2])
        .started(T0)
        .build();
    cancelling.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "alice".into() },
        at: T0 + 5,
        grace_secs: 30,
    }));
    let mut ended = JobBuilder::new(8).name("done").build();
    ended.state = JobState::Failed;
    ended.exit_code = Some(3);
    ended.end_time = Some(T0 + 90);
    let mut waiting = JobBuilder::new(1).gpus(2).time_limit(600).build();
    waiting.reason = "Resources".into();
    let bobs = |job: JobBuilder| {
        let mut job = job.user("bob").account("physics").build();
        std::sync::Arc::make_mut(&mut job.owner).uid = 1001;
        job
    };
    // Bob's job that ran and ended: what it used is hidden from alice when reports are
    // private, whether its entry comes from its record or from the history's index.
    let mut bobs_ended = bobs(JobBuilder::new(10).running_on("n2", &[0]).started(T0));
    bobs_ended.state = JobState::Completed;
    bobs_ended.exit_code = Some(0);
    bobs_ended.end_time = Some(T0 + 60);
    vec![
        waiting,
        JobBuilder::new(2).build(),
        JobBuilder::new(3).held().build(),
        JobBuilder::new(4)
            .running_on("n1", &[0, 1])
            .started(T0 + 10)
            .checkpointed(T0 + 20)
            .build(),
        bobs(JobBuilder::new(5).array(5, 7, 2)),
        cancelling,
        bobs(JobBuilder::new(7).running_on("n2", &[1]).started(T0)),
        ended,
        bobs(JobBuilder::new(9)),
        bobs_ended,
    ]
}

#[test]
fn a_listing_from_kept_entries_is_byte_for_byte_what_prost_makes_of_each_job() {
    let jobs = listed_jobs();
    let view = crate::fair_share::QueueView::new(
        Default::default(),
        crate::core::FairShare::new([("research".to_string(), 0.25)]),
        vec![(JobId(1), 100), (JobId(5), 100), (JobId(9), 100)],
    );
    let expected: std::collections::BTreeMap<JobId, ExpectedStart> = [
        (
            JobId(1),
            ExpectedStart {
                at: T0 + 3_600_000,
                nodes: vec!["n1".into(), "n2".into()],
            },
        ),
        (
            JobId(2),
            ExpectedStart {
                at: T0 + 60_000,
                nodes: vec!["n2".into()],
            },
        ),
        (
            JobId(9),
            ExpectedStart {
                at: T0 + 7_200_000,
                nodes: vec!["n1".into()],
            },
        ),
    ]
    .into();
    for public in [true, false] {
        let mut config = ysched_common::Config::default();
        config.scheduler.reports_public = public;
        let caller = alice();
        // As listings were made before: each job's `JobInfo`, then what the last pass
        // said, then what the caller may not see left out.
        let mut infos: Vec<pb::JobInfo> = jobs
            .iter()
            .map(ysched_common::convert::job_listing)
            .collect();
        add_queue_places(&mut infos, &view);
        add_expected_starts(&mut infos, &expected);
        hide_others_usage(&mut infos, &caller, &config);
        let before = pb::JobList {
            jobs: infos,
            next_after_id: 0,
        };

        let listing = WireListing::new(&caller, &config, &view, &expected);
        // Finished jobs made from their records, or (as listings by end time make them)
        // from what the history's index keeps; a page that says where the next goes on.
        for (kept_by_index, next_after) in [(false, None), (true, Some(JobId(42)))] {
            let entries = jobs
                .iter()
                .map(|job| match job.state.is_terminal() {
                    true if kept_by_index => listing
                        .finished_entry(&crate::store::FinishedEntry::of(job))
                        .expect("an entry from the bytes"),
                    true => listing.entry(job),
                    false => listing.kept_entry(job, &kept_listing(job)),
                })
                .collect();
            let encoded = listing.encode(entries, next_after).encode_to_vec();
            let before = pb::JobList {
                next_after_id: next_after.map_or(0, |id| id.0),
                ..before.clone()
            };
            assert_eq!(
                pb::JobList::decode(encoded.as_slice()).unwrap(),
                before,
                "reports_public = {public}, kept by the index: {kept_by_index}"
            );
            assert_eq!(encoded, before.encode_to_vec(), "reports_public = {public}");
        }
        // What the hiding takes is gone from bob's jobs when reports are private.
        assert_eq!(before.jobs[6].alloc.is_empty(), !public);
        assert_eq!(before.jobs[9].end_time_ms == 0, !public);
        assert_eq!(before.jobs[9].usage_private, !public);
        assert_eq!(before.jobs[8].queue_position, Some(3));
    }
}
