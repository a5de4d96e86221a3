//! The `history` group: a year of history. A store of `HISTORY_JOBS` (1,000,000)
//! finished jobs, written straight into the stopped schedd's store as the events that end
//! jobs write them (a record and an event each): 90 % ended 31 to 365 days ago (past the
//! default `keep_finished` of 30 days), 7 % over the 30 days before yesterday, 3 % (30,000)
//! in the last day, and 1,000 jobs queued. Measured: schedd's start to serving, `yq` (active jobs), `yq --all
//! --since 1d`, the expiry of the old 90 % with the longest `ListJobs` meanwhile, and the
//! store's size before and after.

use crate::figure::{median, Figure};
use crate::setup::{env_usize, A100};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ysched_common::{Job, JobId, JobSpec, JobState, Owner};
use ysched_tests::*;

const DAY_MS: i64 = 86_400_000;

fn job(id: u64, owner: &Arc<Owner>, spec: &Arc<JobSpec>, state: JobState, end: Option<i64>) -> Job {
    let submit = end.unwrap_or(ysched_common::time::now_ms()) - 3_600_000;
    Job {
        id: JobId(id),
        spec: Arc::clone(spec),
        owner: Arc::clone(owner),
        tier_value: 100,
        state,
        reason: String::new(),
        held_by: Default::default(),
        alloc: vec![],
        restart_count: 0,
        exit_code: end.map(|_| 0),
        signal: None,
        submit_time: submit,
        start_time: end.map(|e| e - 1_800_000),
        end_time: end,
        launched: end.is_some(),
        grace_secs: 30,
        checkpoint_dir: format!("/home/alice/.ysched/checkpoints/{id}"),
        stop: None,
        last_checkpoint: None,
        parts: Default::default(),
        launch_attempts: 0,
        queued_at: Some(submit),
        run_ms_before: 0,
        array: None,
    }
}

fn du_mib(dir: &std::path::Path) -> f64 {
    fn walk(p: &std::path::Path) -> u64 {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        if meta.is_dir() {
            std::fs::read_dir(p)
                .map(|rd| rd.flatten().map(|e| walk(&e.path())).sum())
                .unwrap_or(0)
        } else {
            use std::os::unix::fs::MetadataExt;
            meta.blocks() * 512
        }
    }
    walk(dir) as f64 / (1024.0 * 1024.0)
}

pub fn history(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let n_jobs = env_usize("HISTORY_JOBS", 1_000_000) as u64;
    let queued = 1_000u64;
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ]);
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let state = c.dir.path().join("state");
    let now = ysched_common::time::now_ms();
    let recent = n_jobs / 10;
    let t = Instant::now();
    {
        let store = ysched_schedd::store::Store::open(&state).expect("open the store");
        let owner = Arc::new(Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec!["root".into()],
        });
        let spec = Arc::new(JobSpec {
            name: "train".into(),
            tier: "low".into(),
            account: "vision".into(),
            workdir: "/home/alice/run".into(),
            gpus: 1,
            cpus: 8,
            mem_mib: 32 * 1024,
            time_limit_secs: Some(86_400),
            ..JobSpec::default()
        });
        let mut batch = ysched_schedd::store::Batch::default();
        for i in 0..n_jobs {
            let id = i + 1;
            // The oldest first, as they ended: 90 % over days 365..31 back, 7 % over days
            // 30..1, 3 % (30,000 of a million) in the last day.
            let old = n_jobs - recent;
            let month = recent * 7 / 10;
            let span = |k: u64, of: u64, from: i64, to: i64| {
                from + (k as i64) * (to - from) / of.max(1) as i64
            };
            let end = if i < old {
                span(i, old, now - 365 * DAY_MS, now - 31 * DAY_MS)
            } else if i < old + month {
                span(i - old, month, now - 30 * DAY_MS, now - DAY_MS - 60_000)
            } else {
                span(
                    i - old - month,
                    recent - month,
                    now - DAY_MS + 60_000,
                    now - 60_000,
                )
            };
            batch.put_job(&job(id, &owner, &spec, JobState::Completed, Some(end)));
            batch.event(JobId(id), end, "completed", "exit 0");
            if id.is_multiple_of(20_000) {
                store.apply(std::mem::take(&mut batch)).expect("write jobs");
            }
        }
        for q in 0..queued {
            let id = n_jobs + 1 + q;
            batch.put_job(&job(id, &owner, &spec, JobState::Held, None));
        }
        batch.set_next_job_id(n_jobs + queued + 1);
        store.apply(batch).expect("write jobs");
        rt.block_on(store.flush()).expect("flush");
    }
    let written = t.elapsed().as_secs_f64();
    // sled's flusher may hold the lock a moment after the store is dropped.
    std::thread::sleep(Duration::from_secs(2));
    let size_before = du_mib(&state);
    println!(
        "  ({n_jobs} finished jobs and {queued} queued written in {written:.1} s; store \
         {size_before:.0} MiB)"
    );

    // Start to serving: the first `yq` answered.
    let t = Instant::now();
    c.start_schedd();
    loop {
        if c.run("yq", &["--json"]).status.success() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "schedd never served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let startup = t.elapsed().as_secs_f64();
    let first_log = std::fs::read_to_string(c.dir.path().join("schedd.log")).unwrap_or_default();
    for line in first_log.lines().filter(|l| {
        l.contains("state store opened") || l.contains("schedd ready") || l.contains("may open")
    }) {
        println!("  | {line}");
    }

    // While the expiry runs (it starts with schedd): the longest `ListJobs` of the active
    // jobs, over the API, every 50 ms; then `yq` and `yq --since 1d` timed through the CLI.
    let log = c.dir.path().join("schedd.log");
    let expired_done = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("history: removed")
    };
    let t = Instant::now();
    let mut longest = 0f64;
    let mut calls = 0;
    let socket = c.socket();
    rt.block_on(async {
        let mut client = ysub::client::connect(&socket).await.unwrap();
        while !expired_done() {
            let s = Instant::now();
            let jobs = client
                .list_jobs(ysched_proto::ListJobsRequest::default())
                .await
                .expect("ListJobs")
                .into_inner()
                .jobs;
            longest = longest.max(s.elapsed().as_secs_f64() * 1e3);
            calls += 1;
            assert_eq!(jobs.len() as u64, queued);
            assert!(
                t.elapsed() < Duration::from_secs(1200),
                "expiry never ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let expiry = t.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let removed = text
        .lines()
        .find_map(|l| l.split("history: removed ").nth(1))
        .unwrap_or("?")
        .to_string();
    let mut yq = Vec::new();
    let mut since = Vec::new();
    let mut rpc = Vec::new();
    let mut matched = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let out = c.run("yq", &["--json"]);
        yq.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(out.status.success(), "yq: {}", stderr(&out));
        let t = Instant::now();
        let n = rt.block_on(async {
            let mut client = ysub::client::connect(&socket).await.unwrap();
            client
                .list_jobs(ysched_proto::ListJobsRequest {
                    since_ms: ysched_common::time::now_ms() - DAY_MS,
                    states: vec!["COMPLETED".into()],
                    ..Default::default()
                })
                .await
                .expect("ListJobs --since")
                .into_inner()
                .jobs
                .len()
        });
        rpc.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(n > 0);
        let t = Instant::now();
        let out = c.run("yq", &["--all", "--since", "1d", "--json", "-t", "CD"]);
        since.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(out.status.success(), "yq --since: {}", stderr(&out));
        matched = serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
            .unwrap()
            .len();
    }
    // A restart with the expired history gone.
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    std::thread::sleep(Duration::from_secs(1));
    let size_after = du_mib(&state);
    let t = Instant::now();
    c.start_schedd();
    while !c.run("yq", &["--json"]).status.success() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let startup_after = t.elapsed().as_secs_f64();
    println!(
        "  (start to serving {startup:.2} s, after the expiry {startup_after:.2} s; expiry \
         {expiry:.0} s: removed {removed}; {calls} ListJobs meanwhile, the longest \
         {longest:.0} ms; yq {:.0} / {:.0} / {:.0} ms; yq --since 1d ({matched} jobs) {:.0} / \
         {:.0} / {:.0} ms, its ListJobs alone {:.0} / {:.0} / {:.0} ms; store {size_before:.0} → \
         {size_after:.0} MiB)",
        yq[0], yq[1], yq[2], since[0], since[1], since[2], rpc[0], rpc[1], rpc[2]
    );
    vec![
        Figure {
            name: "history: start to serving, 1,000,000 finished",
            value: startup,
            unit: "s",
            target: 2.0,
            higher_is_better: false,
        },
        Figure {
            name: "history: yq --since 1d (~30,000 jobs), median",
            value: median(&mut since),
            unit: "ms",
            target: 300.0,
            higher_is_better: false,
        },
        Figure {
            name: "history: longest ListJobs during expiry",
            value: longest,
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
    ]
}
