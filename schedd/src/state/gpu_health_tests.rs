//! GPUs out of service as pure events: a node's report of failing GPUs (the GPU out, its job
//! stopped and requeued by the usual rules), an administrator's drain and resume of GPUs, the
//! forget handshake, registrations, and the record surviving a restart of the store.

use super::agent_events::{Limits, Registration};
use super::gpu_health::GpuReport;
use super::history::JobEventKind;
use super::lifecycle::PartEnd;
use super::{AgentCommand, Effects, Records};
use crate::core::testkit::{alice, root, JobBuilder, NodeBuilder, A100, T0};
use crate::error::ApiError;
use crate::store::Store;
use ysched_common::{AuditRecord, JobId, JobState, StopReason, StopRequest, GPU_HEALTH_BY};

const NOW: i64 = T0 + 10_000;
const LATER: i64 = NOW + 60_000;
const XID79: &str = "XID 79: GPU has fallen off the bus";
const LIMITS: Limits = Limits {
    max_requeues: 20,
    max_launch_attempts: 3,
};

fn faults(list: &[(u32, &str)]) -> GpuReport {
    GpuReport {
        faults: list.iter().map(|(i, f)| (*i, f.to_string())).collect(),
        forgotten: Vec::new(),
    }
}

fn commands(fx: &Effects) -> Vec<String> {
    fx.commands
        .iter()
        .map(|(node, c)| match c {
            AgentCommand::Stop {
                job_id, grace_secs, ..
            } => format!("{node}:stop {job_id} grace {grace_secs}"),
            AgentCommand::ResumeGpu { index } => format!("{node}:resume gpu {index}"),
            AgentCommand::Ack { job_id } => format!("{node}:ack {job_id}"),
            other => format!("{node}:{other:?}"),
        })
        .collect()
}

/// The change of `fx` written to a fresh store, to read the history and the audit log back.
fn written(fx: &mut Effects) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.apply(&*fx).unwrap();
    (dir, store)
}

fn audit(store: &Store) -> Vec<(String, String, String)> {
    let mut log: Vec<AuditRecord> = store.audit_log(0).unwrap();
    log.reverse(); // oldest first
    log.into_iter()
        .map(|a| (a.user, a.action, a.detail))
        .collect()
}

fn history(store: &Store, id: u64) -> Vec<(JobEventKind, String)> {
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

fn end_of(job_id: u64, exit_code: i32) -> PartEnd {
    PartEnd {
        job_id,
        exit_code: Some(exit_code),
        end_time_ms: LATER,
        ..PartEnd::default()
    }
}

#[test]
fn a_failing_gpu_goes_out_of_service_and_its_job_is_stopped_then_requeued() {
    let mut rec = Records::with_jobs(vec![
        JobBuilder::new(1)
            .gpus(2)
            .grace(30)
            .running_on("n1", &[2, 3])
            .build(),
        JobBuilder::new(2).gpus(1).running_on("n1", &[4]).build(),
        JobBuilder::new(3).gpus(1).running_on("n2", &[3]).build(),
    ]);
    let report = faults(&[(3, XID79)]);
    assert!(report.changes(&rec.nodes["n1"]));
    let mut fx = rec.gpu_report("n1", &report, LIMITS, NOW);
    // That GPU of that node, not the node.
    let node = fx.nodes.iter().find(|n| n.name == "n1").unwrap();
    let outage = &node.gpus_out_of_service[&3];
    assert_eq!(
        (outage.reason.as_str(), outage.since, outage.by.as_str()),
        (XID79, NOW, GPU_HEALTH_BY)
    );
    assert_eq!(node.gpus_out_of_service.len(), 1);
    assert!(node.is_schedulable() && node.drain_reason.is_none());
    // Job 1 holds GPU 3: stopped with its grace; job 2 (another GPU) and 3 (another node)
    // run on.
    assert_eq!(commands(&fx), ["n1:stop 1 grace 30"]);
    assert_eq!(fx.jobs.len(), 1);
    let job = &fx.jobs[0];
    assert_eq!(
        job.state,
        JobState::Running,
        "it holds its GPUs until it is gone"
    );
    assert_eq!(
        job.stop.as_ref().map(|s| &s.reason),
        Some(&StopReason::GpuFailed {
            node: "n1".into(),
            gpu: 3,
            fault: XID79.into()
        })
    );
    assert_eq!(job.reason, format!("stopping: GPU 3 of n1 failed: {XID79}"));
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        audit(&store),
        [(
            "noded".to_string(),
            "gpu_failed".to_string(),
            format!("node n1 GPU 3: {XID79}")
        )]
    );
    assert_eq!(
        history(&store, 1),
        [(
            JobEventKind::GpuFailed,
            format!(
                "GPU 3 of n1 failed: {XID79}; SIGTERM, SIGKILL after 30s; requeued once it \
                 has stopped"
            )
        )]
    );
    rec.commit(fx);

    // Every later heartbeat names it too: nothing more happens.
    assert!(!report.changes(&rec.nodes["n1"]));
    let again = rec.gpu_report("n1", &report, LIMITS, NOW + 1000);
    assert!(again.nodes.is_empty() && again.jobs.is_empty() && again.commands.is_empty());
    // Nor when the fault clears: only an administrator returns it.
    assert!(!faults(&[]).changes(&rec.nodes["n1"]));

    // The job ends in its grace (whatever its exit): requeued, counted as a restart.
    let mut fx = rec.job_finished("n1", &end_of(1, 0), LIMITS, LATER);
    let job = fx.jobs.iter().find(|j| j.id == JobId(1)).unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.restart_count, 1);
    assert!(job.alloc.is_empty() && job.stop.is_none());
    let (_dir, store) = written(&mut fx);
    let events = history(&store, 1);
    assert_eq!(
        events.last(),
        Some(&(
            JobEventKind::Requeued,
            format!("restart 1: GPU 3 of n1 failed: {XID79}")
        )),
        "{events:?}"
    );
}

#[test]
fn a_job_that_may_not_be_requeued_ends_node_fail() {
    let no_requeue = {
        let mut job = JobBuilder::new(1).running_on("n1", &[0]).build();
        std::sync::Arc::make_mut(&mut job.spec).no_requeue = true;
        job
    };
    let mut worn_out = JobBuilder::new(2).running_on("n1", &[1]).build();
    worn_out.restart_count = LIMITS.max_requeues;
    let mut rec = Records::with_jobs(vec![no_requeue, worn_out]);
    let mut fx = rec.gpu_report(
        "n1",
        &faults(&[(0, XID79), (1, "2 uncorrectable ECC errors")]),
        LIMITS,
        NOW,
    );
    assert_eq!(commands(&fx), ["n1:stop 1 grace 30", "n1:stop 2 grace 30"]);
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 1)[0].1,
        format!(
            "GPU 0 of n1 failed: {XID79}; SIGTERM, SIGKILL after 30s; it ends NODE_FAIL once \
             stopped (not requeued: the job was submitted with --no-requeue)"
        )
    );
    assert_eq!(audit(&store).len(), 2, "one entry per GPU");
    rec.commit(fx);

    let fx = rec.job_finished("n1", &end_of(1, 143), LIMITS, LATER);
    let job = &fx.jobs[0];
    assert_eq!(job.state, JobState::NodeFail);
    assert_eq!(
        job.reason,
        format!(
            "GPU 0 of n1 failed: {XID79} (not requeued: the job was submitted with --no-requeue)"
        )
    );
    let end = PartEnd {
        restart_count: LIMITS.max_requeues,
        ..end_of(2, 143)
    };
    let fx = rec.job_finished("n1", &end, LIMITS, LATER);
    let job = &fx.jobs[0];
    assert_eq!(job.state, JobState::NodeFail);
    assert_eq!(
        job.reason,
        "GPU 1 of n1 failed: 2 uncorrectable ECC errors (not requeued: it was requeued 20 \
         times already (scheduler.max_requeues = 20))"
    );
}

#[test]
fn a_multi_node_run_on_a_failed_gpu_is_stopped_everywhere_and_requeued_once() {
    let gang = JobBuilder::new(1)
        .gpus(2)
        .nodes(2)
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .build();
    let mut rec = Records::with_jobs(vec![gang]);
    let fx = rec.gpu_report("n2", &faults(&[(0, XID79)]), LIMITS, NOW);
    assert_eq!(commands(&fx), ["n1:stop 1 grace 30", "n2:stop 1 grace 30"]);
    rec.commit(fx);
    // The first part's end leaves the run stopping; the last one requeues it.
    let fx = rec.job_finished("n1", &end_of(1, 143), LIMITS, LATER);
    assert_eq!(fx.jobs[0].state, JobState::Running);
    rec.commit(fx);
    let fx = rec.job_finished("n2", &end_of(1, 143), LIMITS, LATER);
    assert_eq!(fx.jobs[0].state, JobState::Pending);
    assert_eq!(fx.jobs[0].restart_count, 1);
}

#[test]
fn a_job_being_stopped_already_stops_as_it_was_going_to() {
    let mut cancelling = JobBuilder::new(1).running_on("n1", &[0]).build();
    cancelling.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "bob".into() },
        at: T0,
        grace_secs: 5,
    }));
    let rec = Records::with_jobs(vec![cancelling]);
    let mut fx = rec.gpu_report("n1", &faults(&[(0, XID79)]), LIMITS, NOW);
    assert!(fx.commands.is_empty());
    assert!(fx.jobs.is_empty(), "the job is not rewritten");
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        history(&store, 1),
        [(
            JobEventKind::GpuFailed,
            format!("GPU 0 of n1 failed: {XID79}; the job was being stopped already")
        )]
    );
}

#[test]
fn faults_of_gpus_the_node_does_not_have_are_ignored() {
    let rec = Records::with_jobs(vec![]);
    let report = faults(&[(42, XID79)]);
    assert!(!report.changes(&rec.nodes["n1"]));
    assert!(rec.gpu_report("n1", &report, LIMITS, NOW).nodes.is_empty());
    assert!(rec.gpu_report("nx", &report, LIMITS, NOW).nodes.is_empty());
}

#[test]
fn only_an_administrator_returns_a_gpu_and_the_node_confirms_the_forget() {
    let mut rec = Records::with_jobs(vec![]);
    rec.commit(rec.gpu_report("n1", &faults(&[(3, XID79), (5, XID79)]), LIMITS, NOW));

    let refused = rec.resume_gpus(&alice(), "n1", &[3], LATER).err().unwrap();
    assert!(
        matches!(&refused, ApiError::Denied(m) if m.starts_with("only administrators may take GPUs out of service or return them (alice is not one")),
        "{refused:?}"
    );
    let conflict = rec
        .resume_gpus(&root(), "n1", &[3, 4], LATER)
        .err()
        .unwrap();
    assert_eq!(
        conflict.to_string(),
        "GPU 4 of n1 is in service (not out of service)"
    );
    assert_eq!(
        rec.resume_gpus(&root(), "n1", &[9], LATER)
            .err()
            .unwrap()
            .to_string(),
        "GPU 9 of n1 does not exist (its GPUs: 0-7)"
    );
    assert!(matches!(
        rec.resume_gpus(&root(), "n9", &[3], LATER),
        Err(ApiError::NotFound(_))
    ));

    let mut fx = rec.resume_gpus(&root(), "n1", &[3], LATER).unwrap();
    assert_eq!(commands(&fx), ["n1:resume gpu 3"]);
    assert!(!fx.wake, "no job gets it before the node confirms");
    let node = &fx.nodes[0];
    assert!(!node.gpu_out_of_service(3) && node.gpu_out_of_service(5));
    assert!(node.gpus_forgetting.contains(&3));
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        audit(&store),
        [(
            "root".to_string(),
            "resume_gpu".to_string(),
            format!(
                "node n1 GPU 3 (was: {XID79}, since {}, by noded health)",
                ysched_common::time::rfc3339(NOW)
            )
        )]
    );
    rec.commit(fx);

    // A heartbeat sent before the agent forgot still names GPU 3: ignored.
    let stale = faults(&[(3, XID79), (5, XID79)]);
    assert!(!stale.changes(&rec.nodes["n1"]));
    // The agent forgot, and GPU 3 no longer fails: back for good.
    let confirmed = GpuReport {
        faults: vec![(5, XID79.to_string())],
        forgotten: vec![3],
    };
    assert!(confirmed.changes(&rec.nodes["n1"]));
    let fx = rec.gpu_report("n1", &confirmed, LIMITS, LATER + 1);
    assert!(fx.wake, "the GPU may take a job now");
    let node = &fx.nodes[0];
    assert!(node.gpus_forgetting.is_empty() && !node.gpu_out_of_service(3));
    rec.commit(fx);
    // A new fault of it later takes it out again.
    assert!(faults(&[(3, "XID 48: double-bit ECC error")]).changes(&rec.nodes["n1"]));
}

#[test]
fn a_gpu_that_still_fails_after_the_forget_goes_out_again() {
    let mut rec = Records::with_jobs(vec![]);
    rec.commit(rec.gpu_report(
        "n1",
        &faults(&[(2, "pages pending retirement")]),
        LIMITS,
        NOW,
    ));
    rec.commit(rec.resume_gpus(&root(), "n1", &[2], LATER).unwrap());
    let still = GpuReport {
        faults: vec![(2, "pages pending retirement".into())],
        forgotten: vec![2],
    };
    let mut fx = rec.gpu_report("n1", &still, LIMITS, LATER + 5);
    let node = &fx.nodes[0];
    assert_eq!(node.gpus_out_of_service[&2].since, LATER + 5);
    assert!(node.gpus_forgetting.is_empty());
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        audit(&store)[0].2,
        "node n1 GPU 2 still fails after it was returned to service: pages pending retirement"
    );
}

#[test]
fn an_administrator_takes_a_gpu_out_and_its_job_runs_on_until_it_fails() {
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).running_on("n1", &[6]).build()]);
    assert!(matches!(
        rec.drain_gpus(&alice(), "n1", &[6], "flaky", NOW),
        Err(ApiError::Denied(_))
    ));
    assert_eq!(
        rec.drain_gpus(&root(), "n1", &[8], "flaky", NOW)
            .err()
            .unwrap()
            .to_string(),
        "node n1 has no GPU 8 (its GPUs: 0-7)"
    );
    let mut fx = rec
        .drain_gpus(&root(), "n1", &[6], "fan noise, to check", NOW)
        .unwrap();
    assert!(
        fx.jobs.is_empty() && fx.commands.is_empty(),
        "the job runs on"
    );
    let outage = &fx.nodes[0].gpus_out_of_service[&6];
    assert_eq!(
        (outage.reason.as_str(), outage.by.as_str()),
        ("fan noise, to check", "root")
    );
    let (_dir, store) = written(&mut fx);
    assert_eq!(
        audit(&store),
        [(
            "root".to_string(),
            "drain_gpu".to_string(),
            "node n1 GPU 6: fan noise, to check".to_string()
        )]
    );
    rec.commit(fx);
    // Then it fails: a failure is more than a suspicion. The job is stopped.
    let fx = rec.gpu_report("n1", &faults(&[(6, XID79)]), LIMITS, LATER);
    assert!(fx.nodes[0].gpus_out_of_service[&6].failed());
    assert_eq!(commands(&fx), ["n1:stop 1 grace 30"]);
    rec.commit(fx);
    // A failed GPU is not drained over.
    let err = rec
        .drain_gpus(&root(), "n1", &[6], "x", LATER)
        .err()
        .unwrap();
    assert!(
        err.to_string().starts_with(&format!(
            "GPU 6 of n1 is out of service already: it failed ({XID79}"
        )),
        "{err}"
    );
}

#[test]
fn a_node_whose_every_gpu_failed_takes_no_job_and_shows_drained() {
    let mut rec = Records::with_jobs(vec![]);
    let all: Vec<(u32, &str)> = (0..8).map(|i| (i, XID79)).collect();
    rec.commit(rec.gpu_report("n1", &faults(&all), LIMITS, NOW));
    let node = &rec.nodes["n1"];
    assert!(!node.is_schedulable());
    let view = super::views::node_view(node, &rec.jobs);
    assert_eq!(
        (view.state, view.reason.as_str()),
        ("DRAINED", "all 8 GPUs out of service")
    );
    // One in service again: the node takes jobs (on that GPU once the node confirms).
    rec.commit(rec.resume_gpus(&root(), "n1", &[0], LATER).unwrap());
    assert!(rec.nodes["n1"].is_schedulable());
    assert_eq!(
        rec.nodes["n1"].unusable_gpus().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7, 0]
    );
    let view = super::views::node_view(&rec.nodes["n1"], &rec.jobs);
    assert_eq!((view.state, view.reason.as_str()), ("IDLE", ""));
}

#[test]
fn a_registration_keeps_outages_asks_again_to_forget_and_stops_jobs_on_failed_gpus() {
    let mut rec = Records::with_jobs(vec![
        JobBuilder::new(1).running_on("n1", &[6]).build(),
        JobBuilder::new(2).running_on("n1", &[1]).build(),
    ]);
    rec.commit(rec.gpu_report("n1", &faults(&[(3, XID79), (4, XID79)]), LIMITS, NOW));
    rec.commit(rec.resume_gpus(&root(), "n1", &[4], NOW).unwrap());
    let node = NodeBuilder::dgx("n1", 8, A100).build();
    let registration = Registration {
        name: "n1".into(),
        address: "10.0.0.1".into(),
        cpus: node.cpus,
        mem_mib: node.mem_mib,
        gpus: node.gpus.to_vec(),
        running_jobs: vec![1, 2],
        // GPU 6 failed while schedd was away; 4's fault predates the forget (ignored).
        gpu_faults: vec![(6, XID79.into()), (4, XID79.into())],
        ..Registration::default()
    };
    let (fx, kill) = rec.register(&registration, LIMITS, LATER);
    assert!(kill.is_empty());
    let node = fx.nodes.iter().find(|n| n.name == "n1").unwrap();
    let out: Vec<u32> = node.gpus_out_of_service.keys().copied().collect();
    assert_eq!(out, [3, 6]);
    assert!(node.gpus_forgetting.contains(&4));
    assert_eq!(commands(&fx), ["n1:resume gpu 4", "n1:stop 1 grace 30"]);
    assert_eq!(fx.jobs.len(), 1, "job 2 runs on");
}

#[test]
fn outages_and_forgets_survive_a_restart_of_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Records::with_jobs(vec![]);
    {
        let store = Store::open(dir.path()).unwrap();
        for fx in [
            rec.gpu_report("n1", &faults(&[(1, XID79), (2, XID79)]), LIMITS, NOW),
            rec.drain_gpus(&root(), "n2", &[7], "flaky", NOW).unwrap(),
        ] {
            store.apply(&fx).unwrap();
            rec.commit(fx);
        }
        let fx = rec.resume_gpus(&root(), "n1", &[2], LATER).unwrap();
        store.apply(&fx).unwrap();
        rec.commit(fx);
    }
    let store = crate::store::tests::reopen(dir.path());
    let recovered = store.recover().unwrap();
    let n1 = &recovered.nodes["n1"];
    assert_eq!(n1.gpus_out_of_service, rec.nodes["n1"].gpus_out_of_service);
    assert_eq!(n1.gpus_out_of_service.len(), 1);
    assert!(n1.gpus_forgetting.contains(&2));
    assert_eq!(recovered.nodes["n2"].gpus_out_of_service[&7].by, "root");
}
