//! Registration, starts, ends and silent nodes as pure events.

use super::agent_events::{AgentReport, Limits, Registration};
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
    cancelling.stop = Some(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    });
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
    cancelling.stop = Some(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    });
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
    use super::agent_events::CHECKPOINT_FUTURE_SLACK_MS;
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
