//! The shell with a real store and no network: an array's submit end to end (timed), names
//! of tasks in requests, dependencies at submit, `kill_invalid_depend`, and the trace export
//! (`yctl report --export-trace`) with specs from the store and private reports.

use super::*;
use crate::core::testkit::{alice, caller};
use crate::state::agent_events::Registration;
use crate::submit;
use std::time::{Duration, Instant};
use ysched_common::{RunRecord, SubmitRequest};

fn spec(array: &str, dependency: &str, hold: bool) -> SubmitRequest {
    SubmitRequest {
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: "/tmp".into(),
        cpus: 1,
        hold,
        array: array.into(),
        dependency: dependency.into(),
        ..Default::default()
    }
}

/// A cluster on a fresh store with one 4-CPU node; the agent's messages are dropped.
async fn cluster(config: Config) -> (Arc<Cluster>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let cluster = Cluster::start(config, store).unwrap();
    let (tx, mut agent) = mpsc::unbounded_channel();
    tokio::spawn(async move { while agent.recv().await.is_some() {} });
    let node = Registration {
        name: "n1".into(),
        cpus: 4,
        mem_mib: 1024,
        ..Default::default()
    };
    cluster.register_node(node, "test", tx, None).await.unwrap();
    (cluster, dir)
}

async fn submit(
    c: &Arc<Cluster>,
    array: &str,
    dependency: &str,
    hold: bool,
) -> ApiResult<Submitted> {
    let valid = submit::validate(spec(array, dependency, hold), &alice(), c.config())?;
    c.submit_jobs(alice(), None, valid).await
}

fn named(text: &str) -> Named {
    Named::from_ref(0, text).unwrap()
}

/// Waits until `check` holds of job `id` (a pass or two).
async fn wait_for(c: &Cluster, id: JobId, check: impl Fn(&Job) -> bool) -> Job {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let job = c.job(id).unwrap();
        if check(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} is still {job:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submits that come together run in rounds of the submit loop, one store write a round:
/// each still gets its own id and its own refusal (a job no node could ever run is refused
/// while the others of its round are taken), and every acknowledged one is in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submits_that_come_together_are_each_taken_or_refused_and_durable() {
    let (c, _dir) = cluster(Config::default()).await;
    let mut sent = Vec::new();
    {
        for i in 0..64u32 {
            let c = c.clone();
            sent.push(tokio::spawn(async move {
                let mut request = spec("", "", true);
                // More CPUs than the one node has: refused, under the lock.
                request.cpus = if i % 8 == 7 { 8 } else { 1 };
                let valid = submit::validate(request, &alice(), c.config()).unwrap();
                (i, c.submit_jobs(alice(), None, valid).await)
            }));
        }
    }
    let mut ids = BTreeSet::new();
    for task in sent {
        let (i, outcome) = task.await.unwrap();
        match outcome {
            Ok(submitted) => {
                assert_ne!(i % 8, 7, "submit {i} should have been refused");
                assert!(ids.insert(submitted.id), "id {} given twice", submitted.id);
            }
            Err(e) => {
                assert_eq!(i % 8, 7, "submit {i} refused: {e}");
                assert!(matches!(e, ApiError::Invalid(_)), "{e:?}");
            }
        }
    }
    assert_eq!(ids.len(), 56);
    for id in &ids {
        let stored = c
            .store()
            .job(*id)
            .unwrap()
            .expect("an acknowledged job is stored");
        assert_eq!(stored.state, JobState::Held);
        let events = c.store().job_events(&stored).unwrap();
        assert_eq!(events.len(), 1, "job {id}: {events:?}");
    }
    assert_eq!(c.store().recover().unwrap().next_job_id, 57);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_of_ten_thousand_is_submitted_named_and_cancelled() {
    let mut config = Config::default();
    // One job besides the array: over the default of 10,000 per user.
    config.scheduler.max_jobs_per_user = 10_001;
    let (c, _dir) = cluster(config).await;
    // Warm the store up.
    submit(&c, "", "", true).await.unwrap();
    let began = Instant::now();
    let done = submit(&c, "0-9999", "", true).await.unwrap();
    let took = began.elapsed();
    println!("10,000-task array: submit to durable reply in {took:?}");
    assert_eq!(
        done,
        Submitted {
            id: JobId(2),
            array_tasks: 10_000
        }
    );
    let task = c.job(JobId(2 + 7)).unwrap();
    assert_eq!(
        (task.display_id(), task.state),
        ("2_7".to_string(), JobState::Held)
    );

    // Names: one task, a range, the whole array, and mistakes.
    assert_eq!(
        c.resolve_one(&named("2_7"), "show").await.unwrap(),
        JobId(9)
    );
    assert!(matches!(
        c.resolve_one(&named("2"), "show").await,
        Err(ApiError::Invalid(m)) if m.contains("array of 10000 tasks")
    ));
    assert_eq!(
        c.resolve_targets(&["2_[1-3]".into(), "1".into()], 0)
            .unwrap(),
        [1, 3, 4, 5].map(JobId).into_iter().collect()
    );
    assert!(matches!(
        c.resolve_targets(&["2_10000".into()], 0),
        Err(ApiError::NotFound(m)) if m.contains("job 2_10000 not found")
    ));
    assert!(matches!(
        c.resolve_targets(&["2_x".into()], 0),
        Err(ApiError::Invalid(_))
    ));
    let detail = c.job_detail(JobId(9)).await.unwrap();
    assert_eq!(detail.events[0].kind, "submitted", "{:?}", detail.events);

    // Release a range; it is scheduled as any job is.
    c.hold_named(&alice(), &named("2_[0-1]"), false)
        .await
        .unwrap();
    wait_for(&c, JobId(2), |j| j.state != JobState::Held).await;
    assert_eq!(c.job(JobId(4)).unwrap().state, JobState::Held);

    // Cancel the whole array: one request, every task.
    let began = Instant::now();
    let cancelled = c
        .cancel_named(&alice(), &[], &["2".into()], "")
        .await
        .unwrap();
    println!("10,000-task array: cancelled in {:?}", began.elapsed());
    assert_eq!(cancelled.len(), 10_000);
    assert_eq!(cancelled[7], (JobId(9), "2_7".to_string()));
    assert_eq!(c.job(JobId(9)).unwrap().state, JobState::Cancelled);
    let audit = c.store.audit_log(0).unwrap();
    assert_eq!(
        audit.iter().filter(|a| a.action == "cancel").count(),
        1,
        "one audit entry for the array: {audit:?}"
    );
    assert!(matches!(
        c.cancel_named(&alice(), &[], &["2_5".into()], "").await,
        Err(ApiError::Conflict(m)) if m.contains("every task has finished")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_that_can_never_be_met_is_cancelled_with_kill_invalid_depend() {
    let mut config = Config::default();
    config.scheduler.kill_invalid_depend = true;
    let (c, _dir) = cluster(config).await;
    let target = submit(&c, "", "", true).await.unwrap().id;
    assert!(matches!(
        submit(&c, "", "afterok:999", false).await,
        Err(ApiError::Invalid(m)) if m.contains("dependency on unknown job 999")
    ));
    let dependent = submit(&c, "0-2", &format!("afterok:{target}"), false)
        .await
        .unwrap();
    let job = wait_for(&c, dependent.id, |j| j.reason == "Dependency").await;
    assert_eq!(job.state, JobState::Pending);
    let dep = job.spec.dependency.as_ref().unwrap();
    assert_eq!(dep.clauses[0].jobs, [target]);
    // The target is cancelled: afterok can never be met, and schedd cancels the dependents.
    c.cancel(&alice(), &[target.0], "").await.unwrap();
    for i in 0..3 {
        let job = wait_for(&c, JobId(dependent.id.0 + i), |j| j.state.is_terminal()).await;
        assert_eq!(job.state, JobState::Cancelled);
        assert_eq!(job.reason, "DependencyNeverSatisfied");
    }
    let audit = c.store.audit_log(0).unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.user == "schedd" && a.job_id == Some(dependent.id)),
        "{audit:?}"
    );
    // A dependency on a finished job is known at submit.
    let late = submit(&c, "", &format!("afterok:{target}"), false)
        .await
        .unwrap();
    let job = wait_for(&c, late.id, |j| j.state.is_terminal()).await;
    assert_eq!(job.reason, "DependencyNeverSatisfied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_kill_invalid_depend_the_job_waits() {
    let (c, _dir) = cluster(Config::default()).await;
    let target = submit(&c, "", "", true).await.unwrap().id;
    c.cancel(&alice(), &[target.0], "").await.unwrap();
    let dependent = submit(&c, "", &format!("afterok:{target}"), false)
        .await
        .unwrap();
    let job = wait_for(&c, dependent.id, |j| j.reason == "DependencyNeverSatisfied").await;
    assert_eq!(job.state, JobState::Pending);
    // afternotok on the same job is met: it runs.
    let other = submit(&c, "", &format!("afternotok:{target}"), false)
        .await
        .unwrap();
    wait_for(&c, other.id, |j| j.state == JobState::Running).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.job(dependent.id).unwrap().state, JobState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_pass_s_expected_starts_are_kept_for_pending_jobs() {
    let (c, _dir) = cluster(Config::default()).await;
    let whole = |hold| SubmitRequest {
        cpus: 4,
        time_limit_secs: 3600,
        ..spec("", "", hold)
    };
    let submit_spec = |s: SubmitRequest| async {
        let valid = submit::validate(s, &alice(), c.config()).unwrap();
        c.submit(alice(), None, valid).await.unwrap()
    };
    let running = submit_spec(whole(false)).await;
    let started = wait_for(&c, running, |j| j.state == JobState::Running).await;
    let waiting = submit_spec(whole(false)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let expected = loop {
        if let Some(e) = c.expected_starts().get(&waiting).cloned() {
            break e;
        }
        assert!(Instant::now() < deadline, "no expected start for {waiting}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(expected.nodes, ["n1"]);
    assert_eq!(expected.at, started.start_time.unwrap() + 3_600_000);
    // In listings, for the pending job only.
    let filter = JobFilter::default();
    let mut infos = c
        .list_jobs(&filter, ysched_common::convert::job_listing)
        .unwrap();
    crate::server::convert::listing::add_expected_starts(&mut infos, &c.expected_starts());
    let info = |id: JobId| infos.iter().find(|j| j.id == id.0).unwrap();
    assert_eq!(info(waiting).expected_start_ms, expected.at);
    assert_eq!(info(waiting).expected_nodes, ["n1"]);
    assert_eq!(info(running).expected_start_ms, 0);
}

fn user(name: &str, uid: u32) -> Caller {
    caller(name, uid, &[name])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_s_trace_export_takes_specs_from_the_store_and_keeps_to_visible_accounts() {
    let mut config = Config::default();
    config.scheduler.reports_public = false;
    let (c, _dir) = cluster(config).await;
    // An array of alice's, held: task 0 gets a record of its own (cancelled), task 2 stays
    // as submitted (only the array's record holds it).
    let mut wire = spec("0-2", "", true);
    wire.mem_mib = 512;
    wire.time_limit_secs = 5400;
    let valid = submit::validate(wire, &alice(), c.config()).unwrap();
    let array = c.submit_jobs(alice(), None, valid).await.unwrap().id;
    c.cancel_named(&alice(), &[], &[format!("{array}_0")], "")
        .await
        .unwrap();
    wait_for(&c, array, |j| j.state.is_terminal()).await;
    assert_eq!(c.job(JobId(array.0 + 2)).unwrap().state, JobState::Held);
    // Their runs, and one of bob's in an account alice may not charge, as if recorded.
    let now = now_ms();
    let run = |job: u64, account: &str, user: &str, outcome: &str| RunRecord {
        job_id: JobId(job),
        restart_count: 0,
        account: account.into(),
        user: user.into(),
        uid: 1000,
        tier: "low".into(),
        gpus: 0,
        cpus: 3,
        queued_at: now - 60_000,
        start: now - 50_000,
        end: now - 20_000,
        outcome: outcome.into(),
        preempted_by: None,
        preemptor_account: None,
        checkpoint_saved: false,
        lost_gpu_secs: 0,
    };
    let root = user("root", 0);
    let runs = vec![
        run(array.0, "alice", "alice", "COMPLETED"),
        run(array.0 + 2, "alice", "alice", "TIMEOUT"),
        run(900_000, "vision", "bob", "FAILED"),
        run(900_001, "vision", "bob", "REQUEUED"),
    ];
    assert_eq!(c.import_usage(&root, runs).await.unwrap(), 4);

    // root sees every account.
    let all = c.export_trace(&root, 0, 0).await.unwrap();
    assert!(all.all_accounts);
    assert_eq!(all.trace.unfinished, 1);
    let ids: Vec<&str> = all
        .trace
        .rows
        .iter()
        .map(|r| r.display_id.as_str())
        .collect();
    let (t0, t2) = (format!("{array}_0"), format!("{array}_2"));
    assert_eq!(ids, [t0.as_str(), t2.as_str(), "900000"]);
    for r in &all.trace.rows[..2] {
        let s = r.spec.as_ref().expect("the array's spec");
        assert_eq!((s.mem_mib, s.time_limit_secs, s.cpus), (512, Some(5400), 1));
    }
    assert_eq!(all.trace.rows[0].duration_ms, 30_000);
    assert_eq!(
        all.trace.rows[1].duration_ms, 5_400_000,
        "a TIMEOUT needed its limit"
    );
    assert_eq!(all.trace.rows[2].spec, None, "imported: no record");
    assert_eq!(all.trace.rows[2].run_cpus, 3);

    // alice sees her account only; carol, who charges none of them, is refused.
    let mine = c.export_trace(&alice(), 0, 0).await.unwrap();
    assert!(!mine.all_accounts);
    assert_eq!(mine.trace.rows.len(), 2);
    assert!(mine.trace.rows.iter().all(|r| r.account == "alice"));
    let refused = c.export_trace(&user("carol", 1002), 0, 0).await;
    assert!(
        matches!(&refused, Err(ApiError::Denied(m)) if m.contains("reports_public = false")),
        "{refused:?}"
    );
    // A window with nothing in it is an empty trace, not a refusal.
    let empty = c
        .export_trace(&user("carol", 1002), now - 7_200_000, now - 3_600_000)
        .await
        .unwrap();
    assert!(empty.trace.rows.is_empty());
}

/// A resume of a GPU waits for its node's word: confirmed, still failing (out again), or, for
/// a node that is down, not confirmed yet; faults reported before the node's confirmation are
/// ignored, and the GPU takes no job until it comes. The outage is in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_resume_waits_for_the_node_s_word() {
    use crate::state::gpu_health::GpuReport;
    use std::sync::Mutex as StdMutex;
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(Config::default(), Store::open(dir.path()).unwrap()).unwrap();
    let (tx, mut agent) = mpsc::unbounded_channel();
    let gpus = (0..2)
        .map(|index| ysched_common::Gpu {
            index,
            uuid: format!("GPU-{index}"),
            model: "NVIDIA A10".into(),
            ..Default::default()
        })
        .collect();
    let node = Registration {
        name: "n1".into(),
        cpus: 4,
        mem_mib: 1024,
        gpus,
        ..Default::default()
    };
    let session = c.register_node(node, "test", tx, None).await.unwrap();
    let fault = |faults: &[(u32, &str)], forgotten: &[u32]| GpuReport {
        faults: faults.iter().map(|(i, f)| (*i, f.to_string())).collect(),
        forgotten: forgotten.to_vec(),
    };
    let beat = |report: &GpuReport| c.heartbeat("n1", session, 1, &[], &[], None, report);
    beat(&fault(&[(1, "XID 79")], &[]));
    let out = |c: &Cluster| -> Vec<u32> {
        let st = lock(&c.state);
        st.rec.nodes()["n1"]
            .gpus_out_of_service
            .keys()
            .copied()
            .collect()
    };
    assert_eq!(out(&c), [1]);

    // The agent: answers each forget with the faults the test scripts.
    let still: Arc<StdMutex<Vec<(u32, String)>>> = Arc::default();
    let answering = Arc::clone(&c);
    let script = Arc::clone(&still);
    tokio::spawn(async move {
        while let Some(command) = agent.recv().await {
            if let AgentCommand::ResumeGpu { index } = command {
                // A heartbeat sent before the forget: ignored.
                let stale = GpuReport {
                    faults: vec![(index, "XID 79".into())],
                    forgotten: vec![],
                };
                answering.heartbeat("n1", session, 2, &[], &[], None, &stale);
                assert!(lock(&answering.state).rec.nodes()["n1"]
                    .unusable_gpus()
                    .any(|i| i == index));
                let report = GpuReport {
                    faults: script.lock().unwrap().clone(),
                    forgotten: vec![index],
                };
                answering.heartbeat("n1", session, 3, &[], &[], None, &report);
            }
        }
    });
    let root = crate::core::testkit::root();
    let resumed = c.resume_gpus(&root, "n1", &[1]).await.unwrap();
    assert_eq!(resumed, [(1, GpuResumeOutcome::Confirmed)]);
    assert!(out(&c).is_empty());

    beat(&fault(&[(0, "pages pending retirement")], &[]));
    *still.lock().unwrap() = vec![(0, "pages pending retirement".into())];
    let resumed = c.resume_gpus(&root, "n1", &[0]).await.unwrap();
    assert_eq!(
        resumed,
        [(
            0,
            GpuResumeOutcome::StillFailing("pages pending retirement".into())
        )]
    );
    assert_eq!(out(&c), [0]);

    // A node that is down cannot say: in service, unconfirmed (no job gets it meanwhile).
    c.node_disconnected("n1", session);
    let resumed = c.resume_gpus(&root, "n1", &[0]).await.unwrap();
    assert_eq!(
        resumed,
        [(
            0,
            GpuResumeOutcome::Pending("node n1 is DOWN; it is told when it registers again".into())
        )]
    );
    let node = lock(&c.state).rec.nodes()["n1"].clone();
    assert!(node.gpus_out_of_service.is_empty() && node.gpus_forgetting.contains(&0));
    // What the store has is what memory has.
    let stored = c.store().recover().unwrap().nodes["n1"].clone();
    assert_eq!(
        (stored.gpus_out_of_service, stored.gpus_forgetting),
        (node.gpus_out_of_service, node.gpus_forgetting)
    );
}

/// A listing of ids, from records only.
struct Ids;

impl Listing for Ids {
    type Entry = JobId;
    fn entry(&self, job: &Job) -> JobId {
        job.id
    }
}

/// A listing of ids that takes a finished job's from the history's index when it can.
struct IdsFromIndex;

impl Listing for IdsFromIndex {
    type Entry = JobId;
    fn entry(&self, job: &Job) -> JobId {
        job.id
    }
    fn finished_entry(&self, finished: &store::FinishedEntry) -> Option<JobId> {
        Some(finished.id)
    }
}

/// Every page of `filter`'s listing, `limit` jobs a page, with `between` run after each.
async fn all_pages<L: Listing<Entry = JobId>>(
    c: &Arc<Cluster>,
    filter: &JobFilter,
    listing: &L,
    limit: usize,
    mut between: impl FnMut(usize) -> Option<JobId>,
) -> Vec<JobId> {
    let mut listed = Vec::new();
    let mut after = None;
    for page_no in 0.. {
        let page = c
            .list_jobs_with(
                &JobFilter {
                    after,
                    limit,
                    ..filter.clone()
                },
                listing,
            )
            .unwrap();
        assert!(page.entries.len() <= limit, "page {page_no}: {page:?}");
        listed.extend(page.entries);
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
        if let Some(id) = between(page_no) {
            c.cancel_named(&alice(), &[id.0], &[], "").await.unwrap();
        }
    }
    listed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_list_every_job_once_while_jobs_end_between_them() {
    let (c, _dir) = cluster(Config::default()).await;
    let mut ids = Vec::new();
    for _ in 0..14 {
        ids.push(submit(&c, "", "", true).await.unwrap().id);
    }
    // Some ended before the listing, one task array ended whole (kept in its record).
    for id in [ids[0], ids[5], ids[6]] {
        c.cancel_named(&alice(), &[id.0], &[], "").await.unwrap();
    }
    let array = submit(&c, "0-19", "", true).await.unwrap().id;
    c.cancel_named(&alice(), &[array.0], &[], "").await.unwrap();
    let mut every: Vec<JobId> = ids.clone();
    every.extend((0..20).map(|i| JobId(array.0 + i)));
    let all = JobFilter {
        all: true,
        ..Default::default()
    };
    let window = JobFilter {
        all: true,
        since: Some(1),
        ..Default::default()
    };
    // Between pages, a job behind the cut and one ahead of it end.
    let mut to_end = vec![ids[1], ids[12], ids[2], ids[13]].into_iter();
    let listed = all_pages(&c, &all, &Ids, 4, |_| to_end.next()).await;
    assert_eq!(listed, every, "all jobs, each once, in id order");
    for listing in [true, false] {
        let listed = if listing {
            all_pages(&c, &window, &IdsFromIndex, 5, |_| None).await
        } else {
            all_pages(&c, &window, &Ids, 5, |_| None).await
        };
        assert_eq!(listed, every, "by end time (from the index: {listing})");
    }
    // A page as large as the listing says that was all.
    let page = c
        .list_jobs_with(
            &JobFilter {
                limit: 1_000,
                ..window.clone()
            },
            &IdsFromIndex,
        )
        .unwrap();
    assert_eq!((page.entries.len(), page.next_after), (every.len(), None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_by_end_time_hides_what_others_jobs_used_when_reports_are_private() {
    let mut config = Config::default();
    config.scheduler.reports_public = false;
    let (c, _dir) = cluster(config).await;
    let bob = user("bob", 1001);
    let valid = submit::validate(spec("", "", true), &bob, c.config()).unwrap();
    let bobs = c.submit(bob.clone(), None, valid).await.unwrap();
    let mine = submit(&c, "", "", true).await.unwrap().id;
    for (who, id) in [(&bob, bobs), (&alice(), mine)] {
        c.cancel_named(who, &[id.0], &[], "").await.unwrap();
    }
    let window = JobFilter {
        all: true,
        since: Some(1),
        ..Default::default()
    };
    let (view, expected) = (c.queue_view(), c.expected_starts());
    let me = alice();
    let listing =
        crate::server::convert::listing::WireListing::new(&me, c.config(), &view, &expected);
    let page = c.list_jobs_with(&window, &listing).unwrap();
    let reply = listing.encode(page.entries, page.next_after);
    let bytes = prost::Message::encode_to_vec(&reply);
    let decoded = <ysched_proto::JobList as prost::Message>::decode(bytes.as_slice()).unwrap();
    let of = |id: JobId| decoded.jobs.iter().find(|j| j.id == id.0).unwrap();
    assert!(
        of(bobs).usage_private && of(bobs).end_time_ms == 0,
        "{:?}",
        of(bobs)
    );
    assert!(
        !of(mine).usage_private && of(mine).end_time_ms > 0,
        "{:?}",
        of(mine)
    );
}

/// A listing of ids that weighs each entry 100 bytes.
struct HundredBytes;

impl Listing for HundredBytes {
    type Entry = JobId;
    fn entry(&self, job: &Job) -> JobId {
        job.id
    }
    fn finished_entry(&self, finished: &store::FinishedEntry) -> Option<JobId> {
        Some(finished.id)
    }
    fn size(&self, _entry: &JobId) -> usize {
        100
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_bounded_in_bytes_list_every_job_once_active_and_finished() {
    let (c, _dir) = cluster(Config::default()).await;
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(submit(&c, "", "", true).await.unwrap().id);
    }
    for id in [ids[0], ids[3], ids[4]] {
        c.cancel_named(&alice(), &[id.0], &[], "").await.unwrap();
    }
    let array = submit(&c, "0-9", "", true).await.unwrap().id;
    c.cancel_named(&alice(), &[array.0], &[], "").await.unwrap();
    let mut every: Vec<JobId> = ids.clone();
    every.extend((0..10).map(|i| JobId(array.0 + i)));
    let bounded = |filter: JobFilter| JobFilter {
        max_bytes: 350,
        ..filter
    };
    for filter in [
        JobFilter {
            all: true,
            ..Default::default()
        },
        JobFilter {
            since: Some(1),
            ..Default::default()
        },
        JobFilter {
            ids: every.iter().copied().collect(),
            ..Default::default()
        },
    ] {
        let filter = bounded(filter);
        let listed = all_pages(&c, &filter, &HundredBytes, 1_000, |_| None).await;
        assert_eq!(listed, every, "{filter:?}");
        // Three entries of 100 bytes fit in 350, whatever the limit in jobs.
        let page = c
            .list_jobs_with(
                &JobFilter {
                    limit: 1_000,
                    ..filter.clone()
                },
                &HundredBytes,
            )
            .unwrap();
        assert_eq!(page.entries, every[..3], "{filter:?}");
        assert_eq!(page.next_after, Some(every[2]));
    }
}
