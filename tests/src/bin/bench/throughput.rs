//! The `throughput` group: jobs run end to end per second on two real agents.

use crate::figure::Figure;
use crate::setup::{env_usize, held_spec, real_cluster, submit_all, A100};
use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

/// End-to-end throughput on two real `noded` agents: `THROUGHPUT_JOBS` (2,000) jobs running
/// `true` (no GPUs), submitted by 64 API clients, counted until every one has ended
/// COMPLETED. Each is a real shepherd and a real job process with their spool records.
pub fn throughput(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let n = env_usize("THROUGHPUT_JOBS", 2_000);
    let c = real_cluster(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ]);
    let work = c.work.display().to_string();
    let t = Instant::now();
    submit_all(rt, &c, n, move |_| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec
    });
    let completed = || {
        rt.block_on(async {
            let mut client = ysub::client::connect(&c.socket()).await.unwrap();
            let listing = client
                .list_jobs(pb::ListJobsRequest {
                    states: vec!["COMPLETED".into()],
                    ..Default::default()
                })
                .await
                .unwrap();
            listing.into_inner().jobs.len()
        })
    };
    wait_until(Duration::from_secs(600), "every job completes", || {
        std::thread::sleep(Duration::from_millis(100));
        completed() >= n
    });
    let rate = n as f64 / t.elapsed().as_secs_f64();
    vec![Figure {
        name: "2 real agents: `true` jobs submitted, run, ended /s",
        value: rate,
        unit: "/s",
        target: 1000.0,
        higher_is_better: true,
    }]
}
