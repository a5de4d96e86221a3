//! A job's detail as `GetJob` answers it (the wire form, times in milliseconds), and the runs
//! its history records.

use std::path::Path;

/// `GetJob` of job `id` over the client socket `socket`.
pub fn job_detail(socket: &Path, id: u64) -> ysched_proto::JobDetail {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = ysub::client::connect(socket).await.unwrap();
        client
            .get_job(ysched_proto::JobRef {
                job_id: id,
                target: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
    })
}

/// The runs a job's history records, as reports charge them: each from `scheduled` to the
/// `exited` that follows (milliseconds).
pub fn runs_in_history(detail: &ysched_proto::JobDetail) -> Vec<(i64, i64)> {
    let mut runs = Vec::new();
    let mut start = None;
    for e in &detail.events {
        match e.kind.as_str() {
            "scheduled" => start = Some(e.time_ms),
            "exited" => runs.push((start.take().expect("exited after scheduled"), e.time_ms)),
            _ => {}
        }
    }
    runs
}

/// Writes `n` finished jobs (ids 1 to `n`, ended over the last `n` seconds) straight into the
/// stopped schedd's store, as the events that end jobs write them, then starts schedd again:
/// a long history in seconds. Each job's listing entry is about `entry_bytes` long (its
/// checkpoint directory makes up the length, up to the 4 KiB a path may have), so that a
/// listing of them weighs what the test needs. The cluster must not have submitted a job yet.
pub fn seed_finished_jobs(c: &mut crate::TestCluster, n: u64, entry_bytes: usize) {
    use std::sync::Arc;
    use ysched_common::{Job, JobId, JobSpec, JobState, Owner};
    let nodes = c.nodes().len();
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    {
        let store = ysched_schedd::store::Store::open(&c.state_dir()).expect("open the store");
        let owner = Arc::new(Owner {
            uid: 4242,
            gid: 4242,
            user: "history".into(),
            groups: vec!["history".into()],
        });
        let spec = Arc::new(JobSpec {
            name: "h".repeat(ysched_common::limits::JOB_NAME.max as usize),
            tier: "low".into(),
            workdir: "/tmp".into(),
            gpus: 1,
            ..JobSpec::default()
        });
        let now = ysched_common::time::now_ms();
        let path_len = entry_bytes
            .saturating_sub(400)
            .clamp(1, ysched_common::limits::PATH.max as usize - 8);
        let mut batch = ysched_schedd::store::Batch::default();
        for id in 1..=n {
            let end = now - 1_000 * (n - id) as i64 - 1_000;
            let job = Job {
                id: JobId(id),
                spec: Arc::clone(&spec),
                owner: Arc::clone(&owner),
                tier_value: 100,
                state: JobState::Completed,
                reason: String::new(),
                held_by: Default::default(),
                alloc: vec![],
                restart_count: 0,
                exit_code: Some(0),
                signal: None,
                submit_time: end - 60_000,
                start_time: Some(end - 30_000),
                end_time: Some(end),
                launched: true,
                grace_secs: 30,
                checkpoint_dir: format!("/{}/{id}", "c".repeat(path_len)),
                stop: None,
                last_checkpoint: None,
                parts: Default::default(),
                launch_attempts: 0,
                queued_at: Some(end - 60_000),
                run_ms_before: 0,
                array: None,
            };
            batch.put_job(&job);
            batch.event(JobId(id), end, "completed", "exit 0");
            if id.is_multiple_of(500) {
                store.apply(std::mem::take(&mut batch)).expect("write jobs");
            }
        }
        batch.set_next_job_id(n + 1);
        store.apply(batch).expect("write jobs");
        rt.block_on(store.flush()).expect("flush");
    }
    // sled's flusher may hold the store's lock a moment after it is dropped.
    std::thread::sleep(std::time::Duration::from_secs(2));
    c.start_schedd();
    c.wait_nodes_up(nodes);
}
