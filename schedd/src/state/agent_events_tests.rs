//! Registration, starts, ends and silent nodes as pure events.

use super::agent_events::{AgentReport, Limits, Registration};
use super::history::JobEventKind;
use super::lifecycle::PartEnd;
use super::{AgentCommand, Records};
use crate::core::testkit::{JobBuilder, NodeBuilder, A100, T0};
use ysched_common::{JobId, JobState, StopReason, StopRequest};

const NOW: i64 = T0 + 10_000;
const LIMITS: Limits = Limits {
    max_requeues: 20,
    max_launch_attempts: 3,
};

fn registration(running: &[u64], finished: Vec<PartEnd>) -> Registration {
    let node = NodeBuilder::dgx("n1", 8, A100).build();
    Registration {
        name: "n1".into(),
        address: "10.0.0.1".into(),
        cpus: node.cpus,
        mem_mib: node.mem_mib,
        gpus: node.gpus.to_vec(),
        features: vec![],
        running_jobs: running.to_vec(),
        finished,
        login: false,
        fence_after_secs: 0,
        unhealthy_reason: None,
        gpu_faults: Vec::new(),
    }
}

fn commands(fx: &super::Effects) -> Vec<String> {
    fx.commands
        .iter()
        .map(|(node, c)| match c {
            AgentCommand::Stop { job_id, .. } => format!("{node}:stop {job_id}"),
            AgentCommand::Ack { job_id } => format!("{node}:ack {job_id}"),
            AgentCommand::Launch(o) => format!("{node}:launch {}", o.job.id),
            AgentCommand::Registered { .. } => format!("{node}:registered"),
            AgentCommand::HeartbeatAck { seq } => format!("{node}:heartbeat ack {seq}"),
            AgentCommand::ResumeGpu { index } => format!("{node}:resume gpu {index}"),
        })
        .collect()
}

#[test]
fn a_start_is_confirmed_once_and_resets_launch_attempts() {
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    job.launched = false;
    job.launch_attempts = 2;
    let mut rec = Records::with_jobs(vec![job]);
    let fx = rec.job_started("n1", 1, 4242, NOW);
    assert!(fx.jobs[0].launched);
    assert_eq!(fx.jobs[0].launch_attempts, 0);
    rec.commit(fx);
    assert!(rec.job_started("n1", 1, 4242, NOW).jobs.is_empty());
    assert!(
        rec.job_started("n2", 1, 4242, NOW).jobs.is_empty(),
        "wrong node"
    );
    assert!(
        rec.job_started("n1", 9, 1, NOW).jobs.is_empty(),
        "unknown job"
    );
}

#[test]
fn an_end_is_applied_and_acknowledged_even_when_it_is_stale() {
    let rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[0]).build()]);
    let end = PartEnd {
        job_id: 1,
        exit_code: Some(0),
        ..PartEnd::default()
    };
    let fx = rec.job_finished("n1", &end, LIMITS, NOW);
    assert_eq!(fx.jobs[0].state, JobState::Completed);
    assert_eq!(commands(&fx), ["n1:ack 1"]);
    // A report of an earlier run: acknowledged, nothing else.
    let stale = PartEnd {
        restart_count: 7,
        ..end
    };
    let fx = rec.job_finished("n1", &stale, LIMITS, NOW);
    assert!(fx.jobs.is_empty());
    assert_eq!(commands(&fx), ["n1:ack 1"]);
}

#[test]
fn registration_reconciles_what_the_agent_runs_with_the_records() {
    let mut cancelling = JobBuilder::new(2).running_on("n1", &[1]).build();
    cancelling.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    }));
    let mut unconfirmed = JobBuilder::new(3).running_on("n1", &[2]).build();
    unconfirmed.launched = false;
    let rec = Records::with_jobs(vec![
        JobBuilder::new(1).running_on("n1", &[0]).build(), // still running there
        cancelling,                                        // lost while being cancelled
        unconfirmed,                                       // launch never arrived
        JobBuilder::new(4).running_on("n1", &[3]).build(), // ended while away
        JobBuilder::new(5).running_on("n1", &[4]).build(), // lost after it started
        JobBuilder::new(6).running_on("n2", &[0]).build(), // elsewhere: untouched
    ]);
    let ended = PartEnd {
        job_id: 4,
        exit_code: Some(1),
        ..PartEnd::default()
    };
    // 77 ended here long ago (NODE_FAIL) but the agent still runs it.
    let (fx, kill) = rec.register(&registration(&[1, 77], vec![ended]), LIMITS, NOW);
    assert_eq!(kill, [77]);
    let node = &fx.nodes[0];
    assert!(node.connected && node.killing.contains(&77));
    assert!(!node.is_schedulable(), "leftovers fence the node");
    let state = |id: u64| fx.jobs.iter().find(|j| j.id == JobId(id)).map(|j| j.state);
    assert_eq!(state(1), None, "a job still running is not rewritten");
    assert_eq!(state(2), Some(JobState::Cancelled));
    assert_eq!(state(3), Some(JobState::Pending));
    assert_eq!(state(4), Some(JobState::Failed));
    assert_eq!(state(5), Some(JobState::NodeFail));
    assert_eq!(state(6), None);
    assert_eq!(commands(&fx), ["n1:ack 4"]);

    // The leftover's end frees the node again.
    let mut rec = rec;
    rec.commit(fx);
    let gone = PartEnd {
        job_id: 77,
        signal: Some(9),
        ..PartEnd::default()
    };
    let fx = rec.job_finished("n1", &gone, LIMITS, NOW);
    assert!(fx.nodes[0].killing.is_empty() && fx.nodes[0].is_schedulable());
    assert!(fx.wake);
}

#[test]
fn a_stop_still_wanted_is_resent_at_registration() {
    let job = JobBuilder::new(1)
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    let rec = Records::with_jobs(vec![job]);
    let (fx, kill) = rec.register(&registration(&[1], vec![]), LIMITS, NOW);
    assert!(kill.is_empty());
    assert_eq!(commands(&fx), ["n1:stop 1"]);
    assert!(fx.jobs.is_empty());
}

#[test]
fn jobs_on_silent_nodes_end_and_their_live_parts_are_stopped() {
    let mut gang = JobBuilder::new(1)
        .nodes(2)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    gang.parts.nodelist = vec!["n1".into(), "n2".into()];
    let mut cancelling = JobBuilder::new(2).running_on("n1", &[1]).build();
    cancelling.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    }));
    let rec = Records::with_jobs(vec![
        gang,
        cancelling,
        JobBuilder::new(3).running_on("n2", &[1]).build(),
    ]);
    let fx = rec.fail_silent(&["n1".to_string()].into(), 0, LIMITS, NOW);
    let states: Vec<(u64, JobState)> = fx.jobs.iter().map(|j| (j.id.0, j.state)).collect();
    assert_eq!(states, [(1, JobState::NodeFail), (2, JobState::Cancelled)]);
    assert_eq!(commands(&fx), ["n2:stop 1"]);
    assert!(fx.jobs[0].reason.contains("node n1 not responding"));
}

#[test]
fn reports_batched_into_one_event_do_what_they_do_one_by_one() {
    let mut starting = JobBuilder::new(1).running_on("n1", &[0]).build();
    starting.launched = false;
    let jobs = vec![
        starting,
        JobBuilder::new(2).running_on("n1", &[1]).build(),
        JobBuilder::new(3).running_on("n2", &[0]).build(),
    ];
    let mut leftover_node = NodeBuilder::dgx("n2", 8, A100).build();
    leftover_node.killing.insert(7);
    let end = |job_id, exit_code| PartEnd {
        job_id,
        exit_code: Some(exit_code),
        ..PartEnd::default()
    };
    let reports = vec![
        (
            "n1".to_string(),
            AgentReport::Started {
                job_id: 1,
                pid: 9,
                time: NOW,
            },
        ),
        ("n1".to_string(), AgentReport::Finished(end(1, 0))),
        ("n1".to_string(), AgentReport::Finished(end(2, 1))),
        ("n2".to_string(), AgentReport::Finished(end(7, 0))),
        ("n2".to_string(), AgentReport::Finished(end(3, 0))),
    ];
    let fresh = || {
        let mut rec = Records::with_jobs(jobs.clone());
        rec.nodes.insert("n2".into(), leftover_node.clone());
        rec
    };
    let mut batched = fresh();
    let fx = batched.agent_reports(&reports, LIMITS, NOW);
    assert_eq!(fx.jobs.len(), 3, "each job written once");
    let done = batched.commit(fx);
    let mut one_by_one = fresh();
    let mut acks = Vec::new();
    for report in &reports {
        let fx = one_by_one.agent_reports(std::slice::from_ref(report), LIMITS, NOW);
        acks.extend(one_by_one.commit(fx).commands);
    }
    assert_eq!(batched.jobs, one_by_one.jobs);
    assert!(batched.jobs.is_empty(), "all three ended");
    assert_eq!(batched.nodes, one_by_one.nodes);
    assert!(batched.nodes["n2"].killing.is_empty());
    let names = |c: &[(String, AgentCommand)]| {
        c.iter()
            .map(|(n, c)| format!("{n}:{c:?}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&done.commands),
        names(&acks),
        "every end acknowledged, in order"
    );
}

#[test]
fn heartbeat_checkpoints_are_kept_in_memory_for_jobs_of_that_node_only() {
    use super::heartbeat::CHECKPOINT_FUTURE_SLACK_MS;
    let mut rec = Records::with_jobs(vec![
        JobBuilder::new(1).running_on("n1", &[0]).build(),
        JobBuilder::new(2).running_on("n2", &[0]).build(),
        JobBuilder::new(3).build(), // pending
    ]);
    let refused = rec.note_checkpoints(
        "n1",
        &[
            (1, NOW - 60_000),
            (2, NOW - 1_000),
            (3, NOW - 1_000),
            (9, NOW),
        ],
        NOW,
    );
    assert!(refused.is_empty());
    assert_eq!(rec.jobs[&JobId(1)].last_checkpoint, Some(NOW - 60_000));
    assert_eq!(rec.jobs[&JobId(2)].last_checkpoint, None, "not n1's job");
    assert_eq!(rec.jobs[&JobId(3)].last_checkpoint, None, "not running");
    // Only ever later (the newest of a job's nodes wins); a little ahead is clock skew: now.
    rec.note_checkpoints("n1", &[(1, NOW - 120_000)], NOW);
    assert_eq!(rec.jobs[&JobId(1)].last_checkpoint, Some(NOW - 60_000));
    rec.note_checkpoints("n1", &[(1, NOW + 5_000)], NOW);
    assert_eq!(rec.jobs[&JobId(1)].last_checkpoint, Some(NOW));
    // Absurd times are refused, whatever they are, and change nothing.
    let absurd = [
        (1, 0),
        (1, -5),
        (1, i64::MIN),
        (1, NOW + CHECKPOINT_FUTURE_SLACK_MS + 1),
        (1, i64::MAX),
    ];
    assert_eq!(rec.note_checkpoints("n1", &absurd, NOW), absurd.to_vec());
    assert_eq!(rec.jobs[&JobId(1)].last_checkpoint, Some(NOW));
}

/// What an event writes: its change applied to a fresh store, to read the history and the
/// audit log back.
fn written(fx: &mut super::Effects) -> (tempfile::TempDir, crate::store::Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path()).unwrap();
    store.apply(&*fx).unwrap();
    (dir, store)
}

fn history(store: &crate::store::Store, id: u64) -> Vec<(JobEventKind, String)> {
    store
        .events(JobId(id))
        .unwrap()
        .into_iter()
        .map(|e| {
            let kind = JobEventKind::parse(&e.kind).expect("a kind this version writes");
            (kind, e.detail)
        })
        .collect()
}

/// `n1` fences after 60 s and was last heard from at `T0`.
fn fencing(jobs: Vec<ysched_common::Job>) -> Records {
    let mut rec = Records::with_jobs(jobs);
    for n in rec.nodes.values_mut() {
        n.fence_after_secs = 60;
        n.last_seen = T0;
    }
    rec
}

fn silent(nodes: &[&str]) -> std::collections::BTreeSet<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

/// When n1's fence (60 s after T0) and a 30 s grace are surely over.
const FENCE_DONE: i64 = T0 + 60_000 + 30_000 + super::lifecycle::FENCE_SLACK_MS;

#[test]
fn a_job_on_a_silent_fencing_node_waits_for_the_fence_then_is_requeued_at_the_boundary() {
    use ysched_common::time::rfc3339;
    let job = JobBuilder::new(1)
        .running_on("n1", &[0, 1])
        .submitted(T0 - 5_000)
        .build();
    assert_eq!(job.grace_secs, 30);
    let mut rec = fencing(vec![job]);
    let n1 = silent(&["n1"]);
    // The node timeout has passed, the fence not yet: it waits, holding n1's GPUs.
    let mut fx = rec.fail_silent(&n1, 0, LIMITS, T0 + 61_000);
    assert!(fx.commands.is_empty() && !fx.wake);
    let job = &fx.jobs[0];
    assert_eq!((job.state, job.alloc.len()), (JobState::Running, 1));
    let reason = format!(
        "node n1 not responding; requeued once its fence has stopped the job (at {})",
        rfc3339(FENCE_DONE)
    );
    assert_eq!(job.reason, reason);
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 1),
        [(
            JobEventKind::NodeSilent,
            format!(
                "node n1 not responding (n1 last heard from at {}, fences after 60s); the job \
                 is requeued at {}, once the fence and its grace are over",
                rfc3339(T0),
                rfc3339(FENCE_DONE)
            )
        )]
    );
    rec.commit(fx);
    // Every tick until the fence is done changes nothing, and writes nothing.
    for now in [T0 + 62_000, T0 + 90_000, FENCE_DONE - 1] {
        let fx = rec.fail_silent(&n1, 0, LIMITS, now);
        assert!(
            fx.jobs.is_empty() && fx.writes_nothing() && !fx.wake,
            "{now}"
        );
    }
    // At the boundary: back in the queue, in its place, for its next run.
    let mut fx = rec.fail_silent(&n1, 0, LIMITS, FENCE_DONE);
    assert!(fx.wake && fx.commands.is_empty());
    let job = &fx.jobs[0];
    assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
    assert!(job.alloc.is_empty() && job.stop.is_none() && job.end_time.is_none());
    assert_eq!(job.submit_time, T0 - 5_000);
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 1),
        [(
            JobEventKind::Requeued,
            format!(
                "restart 1: node n1 stopped responding and its fence stopped the job (by {})",
                rfc3339(FENCE_DONE)
            )
        )]
    );
    rec.commit(fx);
    assert!(rec
        .fail_silent(&n1, 0, LIMITS, FENCE_DONE + 1)
        .jobs
        .is_empty());
}

#[test]
fn a_silent_node_s_contact_is_not_before_schedd_started() {
    let rec = fencing(vec![JobBuilder::new(1).running_on("n1", &[0]).build()]);
    // schedd started 100 s after the node was last heard from: the fence may have fired
    // only 60 s after that.
    let since = T0 + 100_000;
    let fx = rec.fail_silent(&silent(&["n1"]), since, LIMITS, FENCE_DONE);
    assert_eq!(fx.jobs[0].state, JobState::Running);
    let fx = rec.fail_silent(&silent(&["n1"]), since, LIMITS, FENCE_DONE + 100_000);
    assert_eq!(fx.jobs[0].state, JobState::Pending);
}

#[test]
fn a_silent_node_s_jobs_end_node_fail_without_a_fence_or_a_requeue_left() {
    let late = FENCE_DONE + 3_600_000;
    let mut no_requeue = JobBuilder::new(2).running_on("n1", &[1]).build();
    std::sync::Arc::make_mut(&mut no_requeue.spec).no_requeue = true;
    let mut at_limit = JobBuilder::new(3).running_on("n1", &[2]).build();
    at_limit.restart_count = LIMITS.max_requeues;
    let mut cancelling = JobBuilder::new(4).running_on("n1", &[3]).build();
    cancelling.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    }));
    let mut rec = fencing(vec![no_requeue, at_limit, cancelling]);
    let mut fx = rec.fail_silent(&silent(&["n1"]), 0, LIMITS, T0 + 61_000);
    let ended: Vec<(u64, JobState, &str)> = fx
        .jobs
        .iter()
        .map(|j| (j.id.0, j.state, j.reason.as_str()))
        .collect();
    assert_eq!(
        ended,
        [
            (2, JobState::NodeFail, "node n1 not responding"),
            (3, JobState::NodeFail, "node n1 not responding"),
            (
                4,
                JobState::Cancelled,
                "cancelled by bob (node n1 not responding)"
            )
        ],
        "at once, not after the fence"
    );
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 2)[0].1,
        "node n1 not responding; not requeued: the job was submitted with --no-requeue"
    );
    assert_eq!(
        history(&store, 3)[0].1,
        "node n1 not responding; not requeued: it was requeued 20 times already \
         (scheduler.max_requeues = 20)"
    );

    // A node that does not fence: NODE_FAIL at once, however long it has been.
    rec.nodes.get_mut("n1").unwrap().fence_after_secs = 0;
    rec.jobs = [JobBuilder::new(5).running_on("n1", &[0]).build()]
        .into_iter()
        .map(|j| (j.id, std::sync::Arc::new(j)))
        .collect();
    let mut fx = rec.fail_silent(&silent(&["n1"]), 0, LIMITS, late);
    assert_eq!(fx.jobs[0].state, JobState::NodeFail);
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 5)[0].1,
        "node n1 not responding; not requeued: node n1 does not fence \
         (node.fence_after_secs = 0), so the job may still run there"
    );
}

#[test]
fn a_multi_node_run_with_a_live_part_is_stopped_once_the_fence_is_done_then_requeued() {
    let mut gang = JobBuilder::new(1)
        .nodes(2)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    gang.parts.nodelist = vec!["n1".into(), "n2".into()];
    let mut rec = fencing(vec![gang]);
    let n1 = silent(&["n1"]);
    // Waiting: the live part runs on.
    let fx = rec.fail_silent(&n1, 0, LIMITS, T0 + 61_000);
    assert!(fx.commands.is_empty());
    assert_eq!(fx.jobs[0].alloc.len(), 2);
    rec.commit(fx);
    // The fence is done: n1's part counts as ended, n2's is stopped with the job's grace.
    let mut fx = rec.fail_silent(&n1, 0, LIMITS, FENCE_DONE);
    assert!(matches!(
        &fx.commands[..],
        [(node, AgentCommand::Stop { job_id: 1, grace_secs: 30, reason })]
            if node == "n2" && reason == "node fenced"
    ));
    let job = &fx.jobs[0];
    assert_eq!(job.state, JobState::Running);
    let nodes: Vec<&str> = job.alloc.iter().map(|a| a.node.as_str()).collect();
    assert_eq!(nodes, ["n2"]);
    assert_eq!(job.parts.ended[0].node, "n1");
    assert!(matches!(
        &job.stop.as_ref().unwrap().reason,
        StopReason::Requeue { by } if by == "schedd (node n1 fenced)"
    ));
    let (_dir, store) = written(&mut fx);
    assert_eq!(history(&store, 1)[0].0, JobEventKind::Stopping);
    rec.commit(fx);
    // Nothing more to do on n1; n2's part ends: requeued.
    assert!(rec
        .fail_silent(&n1, 0, LIMITS, FENCE_DONE + 1)
        .jobs
        .is_empty());
    let end = PartEnd {
        job_id: 1,
        signal: Some(15),
        ..PartEnd::default()
    };
    let fx = rec.job_finished("n2", &end, LIMITS, FENCE_DONE + 2_000);
    assert_eq!(
        (fx.jobs[0].state, fx.jobs[0].restart_count),
        (JobState::Pending, 1)
    );
    rec.commit(fx);
    // n1 comes back and reports the fenced part of the old run: acknowledged, ignored.
    let mut reg = registration(&[], vec![]);
    reg.fence_after_secs = 60;
    reg.finished = vec![PartEnd {
        job_id: 1,
        signal: Some(9),
        fenced: true,
        ..PartEnd::default()
    }];
    let (fx, _) = rec.register(&reg, LIMITS, FENCE_DONE + 10_000);
    assert!(fx.jobs.is_empty());
    assert_eq!(commands(&fx), ["n1:ack 1"]);
}

#[test]
fn a_node_back_before_its_fence_runs_its_jobs_on_or_reports_them_fenced() {
    let mut rec = fencing(vec![
        JobBuilder::new(1).running_on("n1", &[0]).build(),
        JobBuilder::new(2).running_on("n1", &[1]).build(),
    ]);
    let fx = rec.fail_silent(&silent(&["n1"]), 0, LIMITS, T0 + 61_000);
    assert_eq!(fx.jobs.len(), 2);
    rec.commit(fx);
    // Job 1 still runs; job 2 was stopped by the fence (schedd was unreachable, not the
    // node).
    let fenced = PartEnd {
        job_id: 2,
        signal: Some(15),
        fenced: true,
        ..PartEnd::default()
    };
    let mut reg = registration(&[1], vec![fenced]);
    reg.fence_after_secs = 60;
    let (mut fx, kill) = rec.register(&reg, LIMITS, T0 + 70_000);
    assert!(kill.is_empty());
    let job = |id: u64| fx.jobs.iter().find(|j| j.id == JobId(id)).unwrap().clone();
    let (one, two) = (job(1), job(2));
    assert_eq!((one.state, one.reason.as_str()), (JobState::Running, ""));
    assert_eq!((two.state, two.restart_count), (JobState::Pending, 1));
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 1),
        [(
            JobEventKind::NodeBack,
            "node n1 is back and still runs the job".to_string()
        )]
    );
    let kinds: Vec<JobEventKind> = history(&store, 2).into_iter().map(|e| e.0).collect();
    assert_eq!(kinds, [JobEventKind::Exited, JobEventKind::Requeued]);
}

#[test]
fn a_changed_inventory_drains_the_node_only_while_jobs_run_there() {
    use crate::core::{schedule, Policy, Snapshot};
    use ysched_common::config::default_tiers;
    let smaller = || {
        let mut reg = registration(&[1], vec![]);
        reg.gpus.pop();
        reg
    };
    let change = "GPU inventory changed while jobs ran: 8 x NVIDIA A100-SXM4-80GB -> \
                  7 x NVIDIA A100-SXM4-80GB (GPU 7 gone); check the node, then yctl resume";
    // A job holds GPU 7, which the node no longer reports.
    let rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[6, 7]).build()]);
    let (mut fx, _) = rec.register(&smaller(), LIMITS, NOW);
    let node = fx.nodes[0].clone();
    assert_eq!(node.gpus.len(), 7, "the new inventory is taken");
    assert_eq!(node.drain_reason.as_deref(), Some(change));
    let (_dir, store) = written(&mut fx);
    let audit = store.audit_log(0).unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (audit[0].user.as_str(), audit[0].action.as_str()),
        ("schedd", "drain")
    );
    assert_eq!(audit[0].detail, format!("node n1: {change}"));
    // Nothing minds the allocation naming a GPU that is gone.
    let mut rec = rec;
    rec.commit(fx);
    let view = super::views::node_view(&rec.nodes["n1"], &rec.jobs);
    assert_eq!(view.gpu_holders, [0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(view.state, "DRAINING");
    rec.nodes.get_mut("n1").unwrap().drain_reason = None;
    rec.insert_job(JobBuilder::new(2).gpus(7).build());
    let tiers = default_tiers();
    let snap = Snapshot::new(&rec.jobs, &rec.nodes);
    let plan = schedule(&snap, &Policy::new(&tiers), NOW);
    assert_eq!(plan.placements.len(), 1);
    assert_eq!(plan.placements[0].alloc[0].node, "n2", "n1 has 6 GPUs free");

    // Drained already: the administrator's reason stays, the change after it; the same
    // change again is not repeated.
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[0]).build()]);
    rec.nodes.get_mut("n1").unwrap().drain_reason = Some("maintenance".into());
    let (fx, _) = rec.register(&smaller(), LIMITS, NOW);
    let both = format!("maintenance; {change}");
    assert_eq!(fx.nodes[0].drain_reason.as_deref(), Some(both.as_str()));
    rec.commit(fx);
    let mut reg = smaller();
    reg.gpus
        .push(NodeBuilder::dgx("n1", 8, A100).build().gpus[7].clone());
    let (fx, _) = rec.register(&reg, LIMITS, NOW);
    assert!(fx.nodes[0].drain_reason.as_ref().unwrap().ends_with(
        "7 x NVIDIA A100-SXM4-80GB -> 8 x NVIDIA A100-SXM4-80GB (GPU 7 new); check the node, \
         then yctl resume"
    ));

    // No job there: taken silently. The same inventory: nothing to say either.
    let rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n2", &[0]).build()]);
    let (mut fx, _) = rec.register(&smaller(), LIMITS, NOW);
    assert_eq!(fx.nodes[0].gpus.len(), 7);
    assert_eq!(fx.nodes[0].drain_reason, None);
    let (_dir, store) = written(&mut fx);
    assert!(store.audit_log(0).unwrap().is_empty());
    let rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[0]).build()]);
    let (fx, _) = rec.register(&registration(&[1], vec![]), LIMITS, NOW);
    assert_eq!(fx.nodes[0].drain_reason, None);
    assert!(std::sync::Arc::ptr_eq(
        &fx.nodes[0].gpus,
        &rec.nodes["n1"].gpus
    ));
}

#[test]
fn a_node_that_cannot_take_jobs_drains_itself_and_resumes_only_its_own_drain() {
    use crate::core::{schedule, Policy, Snapshot};
    use ysched_common::config::default_tiers;
    let full = "spool full: No space left on device";
    let mut rec = Records::with_jobs(vec![]);
    assert!(
        rec.node_health("n1", None, NOW).writes_nothing(),
        "healthy: nothing"
    );
    let mut fx = rec.node_health("n1", Some(full), NOW);
    let node = &fx.nodes[0];
    assert_eq!(
        node.drain_reason.as_deref(),
        Some("spool full: No space left on device (noded)")
    );
    assert!(node.drained_by_node && !fx.wake);
    let (_dir, store) = written(&mut fx);
    let audit = store.audit_log(0).unwrap();
    assert_eq!(
        (
            audit[0].user.as_str(),
            audit[0].action.as_str(),
            audit[0].host.as_deref()
        ),
        ("noded", "drain", Some("n1"))
    );
    assert_eq!(
        audit[0].detail,
        "node n1: spool full: No space left on device (noded)"
    );
    rec.commit(fx);
    // Nothing is placed there meanwhile.
    rec.insert_job(JobBuilder::new(1).gpus(8).build());
    rec.insert_job(JobBuilder::new(2).gpus(8).build());
    let tiers = default_tiers();
    let plan = schedule(
        &Snapshot::new(&rec.jobs, &rec.nodes),
        &Policy::new(&tiers),
        NOW,
    );
    let nodes: Vec<&str> = plan
        .placements
        .iter()
        .map(|p| p.alloc[0].node.as_str())
        .collect();
    assert_eq!(nodes, ["n2"]);
    // The same word again changes nothing; another reason replaces its own.
    assert!(rec.node_health("n1", Some(full), NOW).writes_nothing());
    let fx = rec.node_health("n1", Some("spool unwritable: Read-only file system"), NOW);
    assert_eq!(
        fx.nodes[0].drain_reason.as_deref(),
        Some("spool unwritable: Read-only file system (noded)")
    );
    rec.commit(fx);
    // It can again: resumed, and the scheduler woken.
    let mut fx = rec.node_health("n1", None, NOW);
    assert_eq!(fx.nodes[0].drain_reason, None);
    assert!(!fx.nodes[0].drained_by_node && fx.wake);
    let (_dir, store) = written(&mut fx);
    assert_eq!(store.audit_log(0).unwrap()[0].action, "resume");
    rec.commit(fx);

    // An administrator's drain is theirs: the node's word neither replaces nor ends it.
    let admin = ysched_common::Caller::local(ysched_common::Owner {
        uid: 0,
        gid: 0,
        user: "root".into(),
        groups: vec![],
    });
    let fx = rec
        .drain(&admin, "n1", Some("maintenance".into()), NOW)
        .unwrap();
    rec.commit(fx);
    assert!(rec.node_health("n1", Some(full), NOW).writes_nothing());
    assert!(rec.node_health("n1", None, NOW).writes_nothing());
    // An administrator's drain over the node's own takes it over; their resume ends both.
    let fx = rec.drain(&admin, "n1", None, NOW).unwrap();
    rec.commit(fx);
    let fx = rec.node_health("n1", Some(full), NOW);
    rec.commit(fx);
    let fx = rec
        .drain(&admin, "n1", Some("replace PSU".into()), NOW)
        .unwrap();
    assert!(!fx.nodes[0].drained_by_node);
    rec.commit(fx);
    assert!(rec.node_health("n1", None, NOW).writes_nothing());
    assert_eq!(rec.nodes["n1"].drain_reason.as_deref(), Some("replace PSU"));
    assert!(
        rec.node_health("n7", Some(full), NOW).writes_nothing(),
        "unknown node"
    );
}

#[test]
fn a_registration_says_whether_the_node_can_take_jobs() {
    let full = "spool full: No space left on device";
    let rec = Records::with_jobs(vec![]);
    let mut reg = registration(&[], vec![]);
    reg.unhealthy_reason = Some(full.into());
    let (fx, _) = rec.register(&reg, LIMITS, NOW);
    assert_eq!(
        fx.nodes[0].drain_reason.as_deref(),
        Some("spool full: No space left on device (noded)")
    );
    assert!(fx.nodes[0].drained_by_node);
    let mut rec = rec;
    rec.commit(fx);
    let (fx, _) = rec.register(&registration(&[], vec![]), LIMITS, NOW);
    assert_eq!(fx.nodes[0].drain_reason, None, "back with room: resumed");
    assert!(!fx.nodes[0].drained_by_node);

    // A drain schedd adds (the GPU inventory changed under a job) is not the node's to end.
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[0]).build()]);
    let fx = rec.node_health("n1", Some(full), NOW);
    rec.commit(fx);
    let mut smaller = registration(&[1], vec![]);
    smaller.gpus.pop();
    smaller.unhealthy_reason = Some(full.into());
    let (fx, _) = rec.register(&smaller, LIMITS, NOW);
    assert!(!fx.nodes[0].drained_by_node);
    rec.commit(fx);
    smaller.unhealthy_reason = None;
    let (fx, _) = rec.register(&smaller, LIMITS, NOW);
    assert!(fx.nodes[0]
        .drain_reason
        .as_deref()
        .is_some_and(|r| r.contains("GPU inventory changed")));
}

#[test]
fn a_launch_that_failed_for_its_node_is_placed_again_elsewhere() {
    let fault = |restart_count| PartEnd {
        job_id: 1,
        error: "cannot write the job script: No space left on device".into(),
        node_fault: true,
        restart_count,
        ..PartEnd::default()
    };
    let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
    job.launched = false;
    let mut rec = Records::with_jobs(vec![job]);
    let mut fx = rec.job_finished("n1", &fault(0), LIMITS, NOW);
    let job = &fx.jobs[0];
    assert_eq!(job.state, JobState::Pending, "{}", job.reason);
    assert!(job.alloc.is_empty());
    assert_eq!((job.restart_count, job.launch_attempts), (1, 1));
    assert_eq!(commands(&fx), ["n1:ack 1"]);
    assert!(fx.wake);
    let (_dir, store) = written(&mut fx);
    let events = history(&store, 1);
    assert_eq!(events[1].0, JobEventKind::Requeued);
    assert!(
        events[1].1.contains(
            "launch on n1 failed for a fault of the node's: cannot write the job script: No \
             space left on device (attempt 1 of 3)"
        ),
        "{events:?}"
    );
    rec.commit(fx);
    // A late copy of the same report (resent at a registration) ends nothing.
    let mut again = ysched_common::Job::clone(&rec.jobs[&JobId(1)]);
    again.state = JobState::Running;
    again.alloc = JobBuilder::new(1).running_on("n1", &[0]).build().alloc;
    rec.jobs.insert(JobId(1), std::sync::Arc::new(again));
    assert!(rec
        .job_finished("n1", &fault(0), LIMITS, NOW)
        .jobs
        .is_empty());
    // Failing on node after node in a row: FAILED at the limit, not before.
    let fx = rec.job_finished("n1", &fault(1), LIMITS, NOW);
    assert_eq!(fx.jobs[0].state, JobState::Pending);
    rec.commit(fx);
    let mut third = ysched_common::Job::clone(&rec.jobs[&JobId(1)]);
    third.state = JobState::Running;
    third.alloc = JobBuilder::new(1).running_on("n2", &[0]).build().alloc;
    rec.jobs.insert(JobId(1), std::sync::Arc::new(third));
    let fx = rec.job_finished("n2", &fault(2), LIMITS, NOW);
    let job = &fx.jobs[0];
    assert_eq!(job.state, JobState::Failed);
    assert!(
        job.reason
            .ends_with("(3 of 3 launch attempts in a row, scheduler.max_launch_attempts)"),
        "{}",
        job.reason
    );

    // Being cancelled: CANCELLED, not FAILED.
    let mut cancelling = JobBuilder::new(1).running_on("n1", &[0]).build();
    cancelling.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    }));
    let rec = Records::with_jobs(vec![cancelling]);
    let fx = rec.job_finished("n1", &fault(0), LIMITS, NOW);
    assert_eq!(fx.jobs[0].state, JobState::Cancelled);

    // The job's own launch failure (its working directory) fails it, as before.
    let rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[0]).build()]);
    let own = PartEnd {
        node_fault: false,
        error: "cannot enter working directory /x as alice: Permission denied".into(),
        ..fault(0)
    };
    let fx = rec.job_finished("n1", &own, LIMITS, NOW);
    assert_eq!(fx.jobs[0].state, JobState::Failed);
}

#[test]
fn a_multi_node_part_that_failed_for_its_node_stops_the_others_then_requeues() {
    let mut job = JobBuilder::new(1)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    job.parts.nodelist = vec!["n1".into(), "n2".into()];
    let mut rec = Records::with_jobs(vec![job]);
    let fault = PartEnd {
        job_id: 1,
        error: "cannot create the job's cgroup: No space left on device".into(),
        node_fault: true,
        ..PartEnd::default()
    };
    let fx = rec.job_finished("n1", &fault, LIMITS, NOW);
    assert_eq!(commands(&fx), ["n2:stop 1", "n1:ack 1"]);
    assert!(fx.jobs[0]
        .reason
        .starts_with("requeueing: launch on n1 failed"));
    rec.commit(fx);
    let stopped = PartEnd {
        job_id: 1,
        signal: Some(15),
        ..PartEnd::default()
    };
    let fx = rec.job_finished("n2", &stopped, LIMITS, NOW);
    let job = &fx.jobs[0];
    assert_eq!(job.state, JobState::Pending, "{}", job.reason);
    assert_eq!(job.restart_count, 1);
}

#[test]
fn a_node_keeps_its_first_registration_time_which_an_older_store_did_not_know() {
    let mut rec = Records::new(
        Default::default(),
        Default::default(),
        1,
        Default::default(),
    );
    let (fx, _) = rec.register(&registration(&[], vec![]), LIMITS, NOW);
    assert_eq!(fx.nodes[0].registered_at, NOW, "first seen now");
    rec.commit(fx);
    let (fx, _) = rec.register(&registration(&[], vec![]), LIMITS, NOW + 86_400_000);
    assert_eq!(
        fx.nodes[0].registered_at, NOW,
        "kept when it registers again"
    );
    // A node stored by a schedd from before the field: not known (0), and it stays so
    // rather than pretending the node joined at the upgrade.
    let mut json = serde_json::to_value(&fx.nodes[0]).unwrap();
    json.as_object_mut().unwrap().remove("registered_at");
    let old: ysched_common::Node = serde_json::from_value(json).unwrap();
    assert_eq!(old.registered_at, 0);
    let rec = Records::new(
        Default::default(),
        [(old.name.clone(), old)].into_iter().collect(),
        1,
        Default::default(),
    );
    let (fx, _) = rec.register(&registration(&[], vec![]), LIMITS, NOW);
    assert_eq!(fx.nodes[0].registered_at, 0);
}
