//! The `array` group: the time to submit a large array until every task is durable.

use crate::figure::{median, Figure};
use crate::setup::{env_usize, held_spec, real_cluster, A100};
use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

/// A 10,000-task array (`BENCH_ARRAY_TASKS`) submitted through the API to a real schedd: the
/// time from the call to the reply, which comes once every task is durable (one batch, one
/// flush). Held, so that no pass competes; the median of five arrays.
pub fn array(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let n = env_usize("BENCH_ARRAY_TASKS", 10_000);
    let c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    let work = c.work.display().to_string();
    let mut took = Vec::new();
    let mut cancels = Vec::new();
    let mut array_ids = Vec::new();
    let rss = rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        for _ in 0..5 {
            let mut spec = held_spec(&work);
            spec.array = format!("0-{}", n - 1);
            let t = Instant::now();
            let reply = client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap()
                .into_inner();
            took.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(reply.array_task_count as usize, n);
            array_ids.push(reply.job_id);
        }
        let rss = rss_mib(c.schedd_pid().unwrap());
        // Each whole array cancelled while queued (`ycancel ID`), once the pass the last
        // change woke has run.
        for id in array_ids {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let t = Instant::now();
            let reply = client
                .cancel(pb::CancelRequest {
                    targets: vec![id.to_string()],
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            cancels.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(reply.cancelled.len(), n);
        }
        rss
    });
    let rounded = |v: &[f64]| {
        v.iter()
            .map(|t| (t * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    };
    println!(
        "  (array submits: {:?} ms; cancels: {:?} ms; schedd RSS with {} held tasks: {rss:.1} MiB)",
        rounded(&took),
        rounded(&cancels),
        5 * n,
    );
    let per_task = pending_task_bytes(rt, n);
    vec![
        Figure {
            name: "10,000-task array: submit to durable reply (median)",
            value: median(&mut took),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "10,000 queued tasks cancelled: to durable reply (median)",
            value: median(&mut cancels),
            unit: "ms",
            target: 150.0,
            higher_is_better: false,
        },
        Figure {
            name: "schedd RSS per queued (PENDING) array task",
            value: per_task,
            unit: "B",
            target: 1024.0,
            higher_is_better: false,
        },
    ]
}

/// What a queued array task costs schedd: on a fresh cluster whose only node is taken by a
/// long job, five arrays of `n` one-GPU tasks that stay PENDING (waiting for resources: in
/// the records, the scheduler's copy and the queue's view, with their reason), listed once
/// (as `yq` would, so that each has its kept listing entry), after two passes; schedd's RSS
/// then, less its RSS before the first, per task, in bytes.
fn pending_task_bytes(rt: &tokio::runtime::Runtime, n: usize) -> f64 {
    let c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    let blocker = c.submit(&["--gpus", "8", "--wrap", "sleep 3600"]);
    c.wait_state(blocker, "RUNNING", Duration::from_secs(30));
    let work = c.work.display().to_string();
    let pid = c.schedd_pid().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let before = rss_mib(pid);
    let tasks = 5 * n;
    rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        for _ in 0..5 {
            let mut spec = held_spec(&work);
            spec.hold = false;
            spec.gpus = 1;
            spec.array = format!("0-{}", n - 1);
            client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap();
        }
        // Two passes over them (one a second at most while they keep changing).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // Page after page, as `yq` follows them (a reply holds at most
        // `limits::JOBS_PER_REPLY` jobs).
        let (mut listed, mut after_id) = (0, 0);
        loop {
            let page = client
                .list_jobs(pb::ListJobsRequest {
                    after_id,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            listed += page.jobs.len();
            if page.next_after_id == 0 {
                break;
            }
            after_id = page.next_after_id;
        }
        assert!(listed > tasks, "{listed} listed");
    });
    // Measured with no client connected, as after `yq` (a reply's buffers go with its
    // connection), and after a quiet second (schedd hands freed memory back then).
    std::thread::sleep(Duration::from_millis(2500));
    let after = rss_mib(pid);
    let bytes = (after - before) * 1024.0 * 1024.0 / tasks as f64;
    println!(
        "  (schedd RSS {before:.1} MiB with one running job, {after:.1} MiB with {tasks} \
         PENDING array tasks besides: {bytes:.0} bytes a task)"
    );
    bytes
}
