//! Applying plans, and submits, as pure events.

use super::submission::NewJob;
use super::{AgentCommand, Records};
use crate::core::testkit::{JobBuilder, T0};
use crate::core::{Eviction, PendingReason, Placement, Plan};
use crate::store::Payload;
use std::sync::Arc;
use ysched_common::{JobId, JobSpec, JobState, NodeAlloc, Owner, StopReason};

const NOW: i64 = T0 + 5_000;

fn alloc(node: &str, gpus: &[u32]) -> NodeAlloc {
    NodeAlloc {
        node: node.into(),
        gpus: gpus.to_vec(),
        cpus: 1,
        mem_mib: 0,
    }
}

fn payload(_: JobId) -> Option<Arc<Payload>> {
    Some(Arc::new(Payload {
        script: "#!/bin/sh\n".into(),
        env: Default::default(),
    }))
}

/// A pending reason stays typed until the records take it: what a job's record keeps (which
/// the store writes and listings send) is the reason's text of today, for every kind of
/// reason; and a reason a job already holds changes nothing.
#[test]
fn the_records_keep_each_pending_reason_as_its_text_of_today() {
    let table = crate::core::every_reason_as_rendered();
    let ids = || (1..=table.len() as u64).map(JobId);
    let mut rec = Records::with_jobs(ids().map(|id| JobBuilder::new(id.0).build()).collect());
    let plan = Plan {
        pending_reasons: ids().zip(table.iter().map(|(r, _)| r.clone())).collect(),
        ..Plan::default()
    };
    let fx = rec.apply_plan(&plan, &payload, NOW);
    assert!(fx.writes_nothing());
    assert_eq!(fx.reasons.len(), table.len());
    rec.commit(fx);
    for (id, (reason, text)) in ids().zip(&table) {
        let job = &rec.jobs()[&id];
        assert_eq!(job.reason, *text, "{reason:?}");
        assert_eq!(ysched_common::convert::job_listing(job).reason, *text);
    }
    // The same plan again: every job already holds its reason.
    assert!(rec.apply_plan(&plan, &payload, NOW).reasons.is_empty());
}

#[test]
fn evictions_stop_victims_and_placements_launch_every_part() {
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).running_on("n1", &[0]).grace(20).build(),
        JobBuilder::new(2).critical().gpus(1).build(),
        JobBuilder::new(3).gpus(2).nodes(2).build(),
        JobBuilder::new(4).gpus(2).nodes(2).build(),
        JobBuilder::new(5).build(),
    ]);
    let plan = Plan {
        evictions: vec![Eviction {
            victim: JobId(1),
            preemptor: JobId(2),
            node: "n1".into(),
            grace_secs: 20,
        }],
        placements: vec![
            Placement {
                job: JobId(3),
                alloc: vec![alloc("n2", &[0]), alloc("n1", &[1])],
            },
            Placement {
                job: JobId(4),
                alloc: vec![alloc("n2", &[1]), alloc("n1", &[2])],
            },
        ],
        pending_reasons: [(JobId(5), PendingReason::Resources)].into(),
        expected_starts: Default::default(),
        never_satisfied: Vec::new(),
    };
    let fx = rec.apply_plan(&plan, &payload, NOW);
    let victim = &fx.jobs[0];
    assert_eq!(victim.state, JobState::Preempting);
    assert!(matches!(
        victim.stop.as_ref().unwrap().reason,
        StopReason::Preempt { by: JobId(2) }
    ));
    let launches: Vec<(String, u64, u32, u32)> = fx
        .commands
        .iter()
        .filter_map(|(node, c)| match c {
            AgentCommand::Launch(o) => Some((node.clone(), o.job.id.0, o.rank, o.master_port)),
            _ => None,
        })
        .collect();
    assert_eq!(launches.len(), 4);
    assert_eq!((launches[0].0.as_str(), launches[0].2), ("n2", 0));
    assert_eq!((launches[1].0.as_str(), launches[1].2), ("n1", 1));
    // Two runs with rank 0 on n2 in one plan get different rendezvous ports.
    assert_ne!(launches[0].3, launches[2].3);
    assert!(matches!(&fx.commands[0], (n, AgentCommand::Stop { job_id: 1, .. }) if n == "n1"));
    let placed = fx.jobs.iter().find(|j| j.id == JobId(3)).unwrap();
    assert_eq!(placed.state, JobState::Running);
    assert_eq!(placed.parts.nodelist, ["n2", "n1"]);
    // Reasons change memory only: nothing is written for them.
    assert_eq!(fx.reasons, [(JobId(5), PendingReason::Resources)]);
    let mut rec = rec;
    let done = rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(5)].reason, "Resources");
    assert!(done.changed.contains(&JobId(5)));
}

#[test]
fn a_submit_takes_the_next_id_and_enters_memory_only_when_committed() {
    let rec = Records::with_jobs(vec![]);
    let owner = Owner {
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        groups: vec![],
    };
    let spec = JobSpec {
        tier: "low".into(),
        hold: true,
        ..JobSpec::default()
    };
    let dir = |id: JobId| format!("/ckpt/{id}");
    let new = NewJob {
        owner,
        from_host: None,
        spec,
        payload: Payload::default(),
        grace_secs: 30,
        tier_value: 100,
        checkpoint_dir: &dir,
    };
    let fx = rec.submit(new, NOW);
    let jobs = fx.submitted.clone();
    let [job] = jobs.as_slice() else {
        panic!("one job: {jobs:?}")
    };
    assert_eq!(job.id, JobId(10));
    assert_eq!(job.state, JobState::Held);
    assert_eq!(job.checkpoint_dir, "/ckpt/10");
    assert!(!fx.wake, "a held job needs no pass");
    assert!(fx.jobs.is_empty());
    let mut rec = rec;
    rec.commit(fx);
    assert_eq!(rec.next_job_id, 11);
    assert!(rec.jobs.is_empty());
}

#[test]
fn a_plan_from_an_older_copy_keeps_only_what_still_holds() {
    let older = Records::with_jobs(vec![
        JobBuilder::new(1).gpus(1).build(),
        JobBuilder::new(2).gpus(1).build(),
        JobBuilder::new(3).gpus(1).build(),
        JobBuilder::new(4).running_on("n2", &[0]).build(),
        JobBuilder::new(5).running_on("n2", &[1]).build(),
    ]);
    let plan = Plan {
        placements: vec![
            Placement {
                job: JobId(1),
                alloc: vec![alloc("n1", &[0])],
            },
            Placement {
                job: JobId(2),
                alloc: vec![alloc("n1", &[1])],
            },
            Placement {
                job: JobId(3),
                alloc: vec![alloc("n1", &[2])],
            },
        ],
        evictions: vec![
            Eviction {
                victim: JobId(4),
                preemptor: JobId(9),
                node: "n2".into(),
                grace_secs: 5,
            },
            Eviction {
                victim: JobId(5),
                preemptor: JobId(9),
                node: "n2".into(),
                grace_secs: 5,
            },
        ],
        pending_reasons: [(JobId(2), PendingReason::Resources)].into(),
        expected_starts: Default::default(),
        never_satisfied: Vec::new(),
    };
    // Meanwhile: job 2 was cancelled, another job took GPU 2 of n1, job 5 ended.
    let mut now = older.clone();
    now.jobs.remove(&JobId(2));
    now.jobs.remove(&JobId(5));
    let taker = JobBuilder::new(7).running_on("n1", &[2]).build();
    now.jobs.insert(taker.id, std::sync::Arc::new(taker));
    let (kept, dropped) = now.still_valid(plan.clone());
    assert!(dropped);
    let placed: Vec<u64> = kept.placements.iter().map(|p| p.job.0).collect();
    assert_eq!(placed, [1]);
    let evicted: Vec<u64> = kept.evictions.iter().map(|e| e.victim.0).collect();
    assert_eq!(evicted, [4]);
    assert!(kept.pending_reasons.is_empty());
    // Nothing changed: the plan is kept whole.
    let (same, dropped) = older.still_valid(plan.clone());
    assert!(!dropped);
    assert_eq!(same, plan);
    // A drained node takes nothing.
    let mut drained = older.clone();
    drained.nodes.get_mut("n1").unwrap().drain_reason = Some("x".into());
    assert!(drained.still_valid(plan).0.placements.is_empty());
}
