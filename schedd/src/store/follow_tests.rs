//! What a follower keeps warm ([`Store::follow`]) is what [`Store::recover`] reads: random
//! histories of submits (single jobs and arrays), starts, ends, cancels of whole arrays and
//! node registrations, compared after each batch; and the runs handed over are the ones a
//! start-up's usage book reads.

use super::tests::job;
use super::*;
use crate::core::testkit::{NodeBuilder, RunBuilder};
use crate::fair_share::UsageBook;
use crate::state::submission::NewJob;
use crate::state::Records;
use proptest::prelude::*;
use ysched_common::{ArraySpec, Job, JobId, JobSpec, JobState, Owner};

/// One step of a made-up history; `pick` chooses among the jobs it may apply to.
#[derive(Debug, Clone)]
enum Step {
    Submit,
    SubmitArray { tasks: u32 },
    Start { pick: usize },
    End { pick: usize },
    CancelArray { pick: usize },
    Register { node: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Submit),
        1 => (1u32..12).prop_map(|tasks| Step::SubmitArray { tasks }),
        3 => any::<usize>().prop_map(|pick| Step::Start { pick }),
        3 => any::<usize>().prop_map(|pick| Step::End { pick }),
        1 => any::<usize>().prop_map(|pick| Step::CancelArray { pick }),
        1 => (0u8..4).prop_map(|node| Step::Register { node }),
    ]
}

fn array_spec(tasks: u32) -> JobSpec {
    JobSpec {
        name: "sweep".into(),
        tier: "low".into(),
        account: "ml".into(),
        gpus: 1,
        array: Some(ArraySpec::parse(&format!("0-{}", tasks - 1), 10_001).unwrap()),
        ..JobSpec::default()
    }
}

/// The batch of `step` on the state `now` (as recovered), at time `t`.
fn batch_of(step: &Step, now: &Recovered, t: i64) -> Batch {
    let mut b = Batch::default();
    let nth = |pick: usize, want: &dyn Fn(&Job) -> bool| -> Option<Job> {
        let fit: Vec<&Job> = now.active_jobs.values().filter(|j| want(j)).collect();
        (!fit.is_empty()).then(|| fit[pick % fit.len()].clone())
    };
    match step {
        Step::Submit => {
            let id = now.next_job_id;
            b.put_job(&job(id, JobState::Pending));
            b.event(JobId(id), t, "submitted", "");
            b.set_next_job_id(id + 1);
        }
        Step::SubmitArray { tasks } => {
            let rec = Records::new(
                Default::default(),
                Default::default(),
                now.next_job_id,
                Default::default(),
            );
            let dir = |id: JobId| format!("/ckpt/{id}");
            let fx = rec.submit(
                NewJob {
                    owner: Owner {
                        uid: 1000,
                        gid: 1000,
                        user: "alice".into(),
                        groups: vec![],
                    },
                    from_host: None,
                    spec: array_spec(*tasks),
                    payload: Payload::default(),
                    grace_secs: 30,
                    tier_value: 100,
                    checkpoint_dir: &dir,
                },
                t,
            );
            b = Batch::from(&fx);
        }
        Step::Start { pick } => {
            if let Some(mut j) = nth(*pick, &|j| j.state == JobState::Pending) {
                j.state = JobState::Running;
                j.start_time = Some(t);
                j.launched = true;
                b.put_job(&j);
            }
        }
        Step::End { pick } => {
            if let Some(mut j) = nth(*pick, &|_| true) {
                if j.state == JobState::Running {
                    j.state = JobState::Completed;
                    b.put_run(&RunBuilder::new(j.id.0, j.start_time.unwrap_or(t), t).build());
                } else {
                    j.state = JobState::Cancelled;
                }
                j.end_time = Some(t);
                b.put_job(&j);
                b.event(j.id, t, "ended", "");
            }
        }
        Step::CancelArray { pick } => {
            if let Some(first) = nth(*pick, &|j| j.array.is_some()) {
                let array = first.array.map(|a| a.array_id);
                for j in now.active_jobs.values() {
                    if j.array.map(|a| a.array_id) == array && j.state == JobState::Pending {
                        let mut j = j.clone();
                        j.state = JobState::Cancelled;
                        j.end_time = Some(t);
                        b.put_job(&j);
                    }
                }
            }
        }
        Step::Register { node } => {
            let mut n = NodeBuilder::new(&format!("node-{node}")).build();
            n.connected = true;
            n.last_seen = t;
            b.put_node(&n);
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn followed_state_is_what_recovery_reads(steps in prop::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut warm = store.recover_read_only().unwrap();
        let mut book = UsageBook::new(3_600_000, 0);
        for (i, step) in steps.iter().enumerate() {
            let t = 1_000 * (i as i64 + 1);
            let batch = batch_of(step, &warm, t);
            let batch = store.apply_replicated(Some(batch), vec![]).unwrap();
            store
                .follow(&batch, &mut warm, |run| book.add_run(&run.to_record()))
                .unwrap();
            let read = store.recover_read_only().unwrap();
            prop_assert_eq!(&warm, &read, "after step {} ({:?})", i, step);
        }
        // The runs handed over are the ones recorded: the same book as start-up's.
        let end = 1_000 * (steps.len() as i64 + 1);
        let mut cold = UsageBook::new(3_600_000, end);
        store.scan_runs(0, i64::MAX, |run| cold.add_run(&run)).unwrap();
        book.advance(end);
        for account in ["research", "ml"] {
            let (warm_raw, warm_decayed) = book.usage(account, end);
            let (cold_raw, cold_decayed) = cold.usage(account, end);
            prop_assert!((warm_raw - cold_raw).abs() < 1e-9);
            prop_assert!((warm_decayed - cold_decayed).abs() <= 1e-9 * cold_decayed.max(1.0));
        }
    }
}
