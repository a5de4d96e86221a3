//! The `cluster` group: API and CLI latencies and throughput on a small cluster of real agents.

use crate::figure::{median, percentile, Figure};
use crate::setup::{env_usize, held_spec, real_cluster, submit_all, A100};
use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

pub fn cluster(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let n_api = env_usize("BENCH_JOBS", 10_000);
    let mut figures = Vec::new();
    let c = real_cluster(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ]);
    let work = c.work.display().to_string();
    println!(
        "  (schedd RSS idle: {:.1} MiB)",
        rss_mib(c.schedd_pid().unwrap())
    );

    // 1. Submit-to-start on an idle cluster: from the submit call to the job's first instruction.
    let mut lat = Vec::new();
    rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        for i in 0..30 {
            let stamp = c.work.join(format!("start-{i}"));
            let mut spec = held_spec(&work);
            spec.hold = false;
            spec.script = format!(
                "#!/bin/sh\ndate +%s%N > {}.tmp && mv {0}.tmp {0}\n",
                stamp.display()
            );
            let t0 = std::time::SystemTime::now();
            client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap();
            while !stamp.exists() {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            let ns: u128 = std::fs::read_to_string(&stamp)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let t0ns = t0.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            lat.push((ns.saturating_sub(t0ns)) as f64 / 1e6);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let p95 = percentile(&mut lat.clone(), 0.95);
    figures.push(Figure {
        name: "submit-to-start latency, idle cluster (median)",
        value: median(&mut lat),
        unit: "ms",
        target: 20.0,
        higher_is_better: false,
    });
    println!("  (submit-to-start p95: {p95:.1} ms)");

    // Diagnostic: one client submitting sequentially through the API (flush cost per submit).
    rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        let t = Instant::now();
        for _ in 0..200 {
            client
                .submit(pb::SubmitRequest {
                    spec: Some(held_spec(&work)),
                })
                .await
                .unwrap();
        }
        println!(
            "  (sequential API submits, one client: {:.0}/s)",
            200.0 / t.elapsed().as_secs_f64()
        );
    });

    // 2. Sequential `ysub` submits per second (each a new process, like a user's shell loop).
    let n_seq = 300;
    let t = Instant::now();
    for _ in 0..n_seq {
        let out = c.run("ysub", &["--hold", "--wrap", "true"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    figures.push(Figure {
        name: "sequential ysub submits",
        value: n_seq as f64 / t.elapsed().as_secs_f64(),
        unit: "/s",
        target: 300.0,
        higher_is_better: true,
    });

    // 3. Concurrent submits through the API (64 clients), until 10,000 jobs are queued.
    let already = rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        client
            .list_jobs(pb::ListJobsRequest::default())
            .await
            .unwrap()
            .get_ref()
            .jobs
            .len()
    });
    let todo = n_api.saturating_sub(already);
    let t = Instant::now();
    let held = work.clone();
    submit_all(rt, &c, todo, move |_| held_spec(&held));
    figures.push(Figure {
        name: "concurrent API submits (64 clients)",
        value: todo as f64 / t.elapsed().as_secs_f64(),
        unit: "/s",
        target: 5000.0,
        higher_is_better: true,
    });

    // 4. yq with 10,000 queued jobs.
    let queued = c
        .run("yq", &["--noheader"])
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let mut yq = Vec::new();
    let mut yq_json = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let out = c.run("yq", &[]);
        assert!(out.status.success());
        yq.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let out = c.run("yq", &["--json"]);
        assert!(out.status.success());
        yq_json.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "  ({queued} jobs queued; yq --json median {:.1} ms)",
        median(&mut yq_json)
    );
    let mut rpc = Vec::new();
    rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        for _ in 0..15 {
            let t = Instant::now();
            let r = client
                .list_jobs(pb::ListJobsRequest::default())
                .await
                .unwrap();
            assert!(r.get_ref().jobs.len() >= n_api.min(10_000) - 1);
            rpc.push(t.elapsed().as_secs_f64() * 1e3);
        }
    });
    println!(
        "  (ListJobs RPC alone, in-process client: median {:.1} ms)",
        median(&mut rpc)
    );
    figures.push(Figure {
        name: "yq latency with 10,000 queued jobs (median)",
        value: median(&mut yq),
        unit: "ms",
        target: 30.0,
        higher_is_better: false,
    });

    // 4b. One job by id among them: a lookup, not a scan of the store.
    let mut by_id = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let out = c.run("yq", &["--all", "--json", "-j", "5"]);
        assert!(out.status.success());
        by_id.push(t.elapsed().as_secs_f64() * 1e3);
    }
    figures.push(Figure {
        name: "yq -a -j ID with 10,000 jobs in the store (median)",
        value: median(&mut by_id),
        unit: "ms",
        target: 10.0,
        higher_is_better: false,
    });

    // 5. schedd memory with 10,000 queued jobs.
    figures.push(Figure {
        name: "schedd RSS with 10,000 queued jobs",
        value: rss_mib(c.schedd_pid().unwrap()),
        unit: "MiB",
        target: 60.0,
        higher_is_better: false,
    });

    figures
}
