//! `bench`: measures ysched on this machine and prints the figures (see docs/benchmarks.md).
//! Run with `cargo run --release -p ysched-tests --bin bench` after `cargo build --release --bins`.
//! It starts a real cluster (schedd + agents with fake GPUs) in a temp dir, like the e2e tests.

use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";

struct Figure {
    name: &'static str,
    value: f64,
    unit: &'static str,
    target: f64,
    higher_is_better: bool,
}

impl Figure {
    fn met(&self) -> bool {
        if self.higher_is_better {
            self.value >= self.target
        } else {
            self.value <= self.target
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A cluster with real agents; `BENCH_NODE_TOML` (e.g. `cgroup_root = "none"`) is added to
/// their `[node]` table, to compare settings.
fn real_cluster(nodes: Vec<FakeNode>) -> TestCluster {
    let node_toml = std::env::var("BENCH_NODE_TOML").unwrap_or_default();
    TestCluster::start_with(nodes, "", &node_toml)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn held_spec(workdir: &str) -> pb::JobSpec {
    pb::JobSpec {
        name: "bench".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: workdir.into(),
        hold: true,
        env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
        ..Default::default()
    }
}

fn cluster(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
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

/// A count from the environment, else `default`.
fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Starts `n_nodes` simulated 8-GPU agents against `c`'s schedd and waits until all have
/// registered; jobs without `YS_SIM_DURATION_MS` run for `default_duration`.
fn start_fleet(
    rt: &tokio::runtime::Runtime,
    c: &TestCluster,
    n_nodes: usize,
    default_duration: Duration,
) -> std::sync::Arc<ysched_tests::fleet::FleetStats> {
    let read = |f: &str| std::fs::read_to_string(c.dir.path().join(f)).unwrap();
    let config = ysched_tests::fleet::FleetConfig {
        schedd: format!("127.0.0.1:{}", c.port),
        ca_cert_pem: read("cluster-ca.crt"),
        cluster_key: read("cluster.key").trim().to_string(),
        nodes: n_nodes,
        gpus_per_node: 8,
        default_duration,
        heartbeat: Duration::from_secs(2),
    };
    let stats = rt.block_on(async { ysched_tests::fleet::start(config) });
    wait_until(Duration::from_secs(120), "the fleet registers", || {
        stats.registered.load(std::sync::atomic::Ordering::Relaxed) >= n_nodes as u64
    });
    stats
}

/// The fleet: `FLEET_NODES` (1,000) simulated 8-GPU agents in this process against a real
/// schedd; `FLEET_JOBS` (20,000) one-GPU jobs of zero duration submitted through the API by 64
/// clients, counted until every end is acknowledged; API latencies sampled meanwhile.
fn fleet(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use std::sync::atomic::Ordering;
    let (n_nodes, n_jobs) = (
        env_usize("FLEET_NODES", 1000),
        env_usize("FLEET_JOBS", 20_000),
    );
    let c = TestCluster::start(vec![]);
    let t = Instant::now();
    let stats = start_fleet(rt, &c, n_nodes, Duration::from_millis(0));
    let registered = t.elapsed().as_secs_f64();
    println!("  ({n_nodes} simulated agents registered in {registered:.1} s)");
    let work = c.work.to_string_lossy().into_owned();
    let t = Instant::now();
    let submit_ms = submit_all(rt, &c, n_jobs, move |_| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec.gpus = 1;
        spec
    });
    let mut submit_ms = submit_ms;
    while stats.finished.load(Ordering::Relaxed) < n_jobs as u64 {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "only {} of {n_jobs} jobs ended",
            stats.finished.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let throughput = n_jobs as f64 / t.elapsed().as_secs_f64();
    vec![
        Figure {
            name: "fleet: jobs submitted, run and ended per second",
            value: throughput,
            unit: "/s",
            target: 2000.0,
            higher_is_better: true,
        },
        Figure {
            name: "fleet: API submit latency while busy (p99)",
            value: percentile(&mut submit_ms, 0.99),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
    ]
}

/// A schedd outage under load (issue 10): `RESTART_NODES` (100) simulated agents, every GPU
/// busy with 20 s jobs and as many queued behind them; schedd is killed (`SIGKILL`) and
/// restarted after `RESTART_DOWN_SECS` (30), while about half the jobs end. Every job must
/// still run once and end once: none lost, none started twice, every end acknowledged.
fn restart(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use std::sync::atomic::Ordering;
    let n_nodes = env_usize("RESTART_NODES", 100);
    let down = Duration::from_secs(env_usize("RESTART_DOWN_SECS", 30) as u64);
    let mut c = TestCluster::start(vec![]);
    let stats = start_fleet(rt, &c, n_nodes, Duration::from_secs(20));
    let n_jobs = n_nodes * 8 * 2;
    let work = c.work.to_string_lossy().into_owned();
    submit_all(rt, &c, n_jobs, move |_| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec.gpus = 1;
        spec
    });
    wait_until(Duration::from_secs(120), "every GPU busy", || {
        stats.started.load(Ordering::Relaxed) >= (n_nodes * 8) as u64
    });
    let sessions_before = stats.registered.load(Ordering::Relaxed);
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    std::thread::sleep(down);
    let t = Instant::now();
    c.start_schedd();
    wait_until(Duration::from_secs(120), "every agent back", || {
        stats.registered.load(Ordering::Relaxed) >= sessions_before + n_nodes as u64
    });
    let back = t.elapsed().as_secs_f64();
    wait_until(Duration::from_secs(300), "every end acknowledged", || {
        stats.finished.load(Ordering::Relaxed) >= n_jobs as u64
    });
    let all_done = t.elapsed().as_secs_f64();
    let listed: Vec<serde_json::Value> =
        serde_json::from_slice(&c.run("yq", &["--all", "--json"]).stdout).unwrap();
    let completed = listed
        .iter()
        .filter(|j| j["state"] == "COMPLETED" && j["restart_count"] == 0)
        .count();
    let started = stats.started.load(Ordering::Relaxed) as usize;
    println!(
        "  ({n_nodes} agents back {back:.1} s after the restart, all {n_jobs} jobs ended \
         {all_done:.1} s after it; {completed} COMPLETED once, {started} starts)"
    );
    vec![
        Figure {
            name: "restart: agents re-registered after schedd is back",
            value: back,
            unit: "s",
            target: 10.0,
            higher_is_better: false,
        },
        Figure {
            name: "restart: jobs lost or not ended COMPLETED once",
            value: (n_jobs - completed.min(n_jobs)) as f64,
            unit: "",
            target: 0.0,
            higher_is_better: false,
        },
        Figure {
            name: "restart: jobs started more than once",
            value: started.saturating_sub(n_jobs) as f64,
            unit: "",
            target: 0.0,
            higher_is_better: false,
        },
    ]
}

/// Submits `n` jobs made by `spec(i)` through the API from 64 clients at once; returns each
/// submit's latency (ms).
fn submit_all(
    rt: &tokio::runtime::Runtime,
    c: &TestCluster,
    n: usize,
    spec: impl Fn(usize) -> pb::JobSpec + Send + Sync + 'static,
) -> Vec<f64> {
    let spec = std::sync::Arc::new(spec);
    rt.block_on(async {
        let per = n.div_ceil(64);
        let mut tasks = Vec::new();
        for k in 0..64 {
            let sock = c.socket();
            let spec = spec.clone();
            tasks.push(tokio::spawn(async move {
                let mut client = ysub::client::connect(&sock).await.unwrap();
                let mut latencies_ms = Vec::new();
                for i in k * per..((k + 1) * per).min(n) {
                    let spec = spec(i);
                    let t = Instant::now();
                    client
                        .submit(pb::SubmitRequest { spec: Some(spec) })
                        .await
                        .unwrap();
                    latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                latencies_ms
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    })
}

/// The loaded cluster of issue 8: `FLEET_NODES` (1,000) simulated 8-GPU agents kept full by
/// one-GPU jobs that end and are replaced (20–120 s each), and `LOADED_PENDING` (100,000)
/// pending jobs of two tiers and several shapes behind them, so that every job end starts a
/// pass over the whole queue. Measured meanwhile: what users wait for.
fn loaded(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use std::sync::atomic::Ordering;
    let (n_nodes, n_pending) = (
        env_usize("FLEET_NODES", 1000),
        env_usize("LOADED_PENDING", 100_000),
    );
    let c = TestCluster::start(vec![]);
    let stats = start_fleet(rt, &c, n_nodes, Duration::from_secs(60));
    let work = c.work.to_string_lossy().into_owned();
    let job = move |tier: &str, gpus: u32, nodes: u32, duration_ms: usize| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec.tier = tier.into();
        spec.gpus = gpus;
        spec.nodes = nodes;
        spec.env
            .insert("YS_SIM_DURATION_MS".into(), duration_ms.to_string());
        spec
    };
    let t = Instant::now();
    let fill = n_nodes * 8;
    let filler = job.clone();
    submit_all(rt, &c, fill, move |i| {
        filler("low", 1, 1, 20_000 + (i * 7919) % 100_000)
    });
    wait_until(Duration::from_secs(600), "the cluster fills", || {
        stats.started.load(Ordering::Relaxed) >= fill as u64
    });
    println!(
        "  ({n_nodes} nodes full with {fill} jobs in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let queued = job.clone();
    submit_all(rt, &c, n_pending, move |i| {
        let (gpus, nodes) = match i % 50 {
            0 => (16, 2),
            k if k % 7 == 0 => (8, 1),
            k if k % 3 == 0 => (4, 1),
            k if k % 2 == 0 => (2, 1),
            _ => (1, 1),
        };
        queued(
            if i % 3 == 0 { "medium" } else { "low" },
            gpus,
            nodes,
            30_000,
        )
    });
    println!(
        "  ({n_pending} jobs queued behind them in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    // Another user's few jobs, for `yq -u`.
    for _ in 0..5 {
        let out = c.run_as(
            65534,
            65534,
            "ysub",
            &["--hold", "--wrap", "true", "-D", "/tmp"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let submit_ms = rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        let mut lat = Vec::new();
        for _ in 0..200 {
            let spec = job("medium", 1, 1, 30_000);
            let t = Instant::now();
            client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lat
    });
    let timed = |args: &[&str]| {
        let t = Instant::now();
        let out = c.run("yq", args);
        assert!(out.status.success(), "{}", stderr(&out));
        t.elapsed().as_secs_f64() * 1e3
    };
    let mut yq_ms: Vec<f64> = (0..30).map(|_| timed(&["-u", "nobody"])).collect();
    // The job at the end of the queue: explaining it replays the whole queue ahead of it.
    let last = c.submit(&["--hold", "--wrap", "true"]);
    let hold_release = c.run("yctl", &["release", &last.to_string()]);
    assert!(hold_release.status.success(), "{}", stderr(&hold_release));
    let mut show_ms: Vec<f64> = (0..30)
        .map(|_| {
            let t = Instant::now();
            let out = c.run("yctl", &["show", "job", &last.to_string()]);
            assert!(out.status.success(), "{}", stderr(&out));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let rss = rss_mib(c.schedd_pid().unwrap());
    println!(
        "  (meanwhile {} jobs ended; submit p50 {:.1} ms; yq -u p50 {:.1} ms; show job p50 {:.1} ms)",
        stats.finished.load(Ordering::Relaxed),
        percentile(&mut submit_ms.clone(), 0.5),
        percentile(&mut yq_ms.clone(), 0.5),
        percentile(&mut show_ms.clone(), 0.5),
    );
    let mut submit_ms = submit_ms;
    vec![
        Figure {
            name: "loaded: one API submit (p99)",
            value: percentile(&mut submit_ms, 0.99),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
        Figure {
            name: "loaded: `yq -u USER` (p99)",
            value: percentile(&mut yq_ms, 0.99),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "loaded: `yctl show job`, last in queue (p99)",
            value: percentile(&mut show_ms, 0.99),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "loaded: schedd RSS",
            value: rss,
            unit: "MiB",
            target: 300.0,
            higher_is_better: false,
        },
    ]
}

/// End-to-end throughput on two real `noded` agents: `THROUGHPUT_JOBS` (2,000) jobs running
/// `true` (no GPUs), submitted by 64 API clients, counted until every one has ended
/// COMPLETED. Each is a real shepherd and a real job process with their spool records.
fn throughput(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
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

/// A 10,000-task array (`BENCH_ARRAY_TASKS`) submitted through the API to a real schedd: the
/// time from the call to the reply, which comes once every task is durable (one batch, one
/// flush). Held, so that no pass competes; the median of five arrays.
fn array(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
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
    ]
}

/// The fuzz test at length: `BENCH_FUZZ_SECS` (default 60) of arbitrary requests to every
/// client RPC from `nobody` (`fuzz-client`, seed `BENCH_FUZZ_SEED`) against a schedd limited to
/// 1 GiB of address space, while another client's listing is timed every 50 ms.
fn fuzz(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let secs = env_usize("BENCH_FUZZ_SECS", 60);
    let seed = env_usize("BENCH_FUZZ_SEED", 1);
    let mut c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    c.restart_schedd_with_memory_limit(1 << 30);
    let socket = c.socket().display().to_string();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let (done, socket) = (done.clone(), c.socket());
        rt.spawn(async move {
            let mut client = ysub::client::connect(&socket).await.unwrap();
            let mut answers = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                let answered = client.list_jobs(pb::ListJobsRequest::default()).await;
                answers.push(if answered.is_ok() {
                    t.elapsed().as_secs_f64() * 1e3
                } else {
                    f64::INFINITY
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        })
    };
    let fuzzer = c.spawn_as(
        65534,
        65534,
        "fuzz-client",
        &[
            "--socket",
            &socket,
            "--seconds",
            &secs.to_string(),
            "--seed",
            &seed.to_string(),
        ],
    );
    let out = fuzzer.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers = rt.block_on(probe).unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let alive = c.schedd_alive();
    println!(
        "  (fuzz, {secs} s, seed {seed}: {} requests, schedd {}; another client's answers p99 \
         {:.0} ms)",
        stats["requests"],
        if alive { "alive" } else { "DEAD" },
        percentile(&mut answers.clone(), 0.99)
    );
    vec![Figure {
        name: "another client's slowest answer while fuzzed",
        value: if alive {
            answers.iter().cloned().fold(0.0, f64::max)
        } else {
            f64::INFINITY
        },
        unit: "ms",
        target: 1000.0,
        higher_is_better: false,
    }]
}

/// `bench [cluster|preempt|core|fleet|loaded|throughput|restart|report|array|fuzz]...`: the named groups of
/// figures; `cluster`, `preempt` and `core` by default.
fn main() {
    let groups: Vec<String> = std::env::args().skip(1).collect();
    if groups.first().map(String::as_str) == Some(neighbour::ATTACKER_FLAG) {
        return neighbour::attacker_main(&groups[1..]);
    }
    let want = |g: &str| groups.is_empty() || groups.iter().any(|x| x == g);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut figures = Vec::new();
    if want("cluster") {
        figures.extend(cluster(&rt));
    }
    if want("preempt") {
        figures.extend(preemption());
    }
    if groups.iter().any(|g| g == "fleet") {
        figures.extend(fleet(&rt));
    }
    if groups.iter().any(|g| g == "throughput") {
        figures.extend(throughput(&rt));
    }
    if groups.iter().any(|g| g == "loaded") {
        figures.extend(loaded(&rt));
    }
    if groups.iter().any(|g| g == "restart") {
        figures.extend(restart(&rt));
    }
    if groups.iter().any(|g| g == "report") {
        figures.extend(report());
    }
    if groups.iter().any(|g| g == "array") {
        figures.extend(array(&rt));
    }
    if groups.iter().any(|g| g == "neighbour") {
        figures.extend(noisy_neighbour());
    }
    if groups.iter().any(|g| g == "fuzz") {
        figures.extend(fuzz(&rt));
    }
    if want("core") {
        for (name, value, unit, target, higher_is_better) in ysched_tests::core_bench::run() {
            figures.push(Figure {
                name,
                value,
                unit,
                target,
                higher_is_better,
            });
        }
    }
    println!("\n{:<52} {:>10} {:>8}  ", "figure", "value", "target");
    for f in &figures {
        println!(
            "{:<52} {:>8.1}{:<4} {}{:<6} {}",
            f.name,
            f.value,
            f.unit,
            if f.higher_is_better { ">=" } else { "<=" },
            f.target,
            if f.met() { "met" } else { "MISSED" }
        );
    }
}

/// `yctl report` over `REPORT_RUNS` (default 1,000,000) recorded runs of the last seven
/// days: written straight into the stopped schedd's store (as the events that end runs write
/// them), then the report timed as a user runs it, whole CLI process included.
fn report() -> Vec<Figure> {
    use ysched_common::{JobId, RunRecord};
    let n_runs = env_usize("REPORT_RUNS", 1_000_000);
    let mut c = TestCluster::start(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ]);
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let t = Instant::now();
    {
        let store =
            ysched_schedd::store::Store::open(&c.dir.path().join("state")).expect("open the store");
        let now = ysched_common::time::now_ms();
        let week: i64 = 7 * 86_400_000;
        let tiers = ["critical", "high", "medium", "low"];
        // A fixed pseudo-random sequence (64-bit LCG): the same runs every time.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        let mut batch = ysched_schedd::store::Batch::default();
        for i in 0..n_runs as u64 {
            let end = now - 1 - next(week as u64) as i64;
            let start = end - 60_000 - next(6 * 3_600_000) as i64;
            let preempted = next(20) == 0;
            let account = next(50);
            batch.put_run(&RunRecord {
                job_id: JobId(i + 1),
                restart_count: next(2) as u32,
                account: format!("team{account:02}"),
                user: format!("user{:03}", account * 10 + next(10)),
                uid: 10_000 + account as u32,
                tier: tiers[next(4) as usize].to_string(),
                gpus: 1 + next(8) as u32,
                cpus: 8,
                queued_at: start - next(3_600_000) as i64,
                start,
                end,
                outcome: if preempted { "REQUEUED" } else { "COMPLETED" }.to_string(),
                preempted_by: preempted.then(|| JobId(n_runs as u64 + 1 + next(1000))),
                preemptor_account: preempted.then(|| format!("team{:02}", next(50))),
                checkpoint_saved: preempted && next(2) == 0,
                lost_gpu_secs: if preempted { next(3600) } else { 0 },
            });
            if (i + 1) % 50_000 == 0 {
                store.apply(std::mem::take(&mut batch)).expect("write runs");
            }
        }
        store.apply(batch).expect("write runs");
        rt_flush(&store);
        assert_eq!(store.run_count(), n_runs, "every run recorded once");
    }
    println!(
        "  ({n_runs} runs written to the store in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    // sled's flusher may hold the lock a moment after the store is dropped.
    std::thread::sleep(Duration::from_secs(2));
    c.start_schedd();
    c.wait_nodes_up(2);
    let mut took = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let out = c.run("yctl", &["report", "--since", "7d", "--json"]);
        took.push(t.elapsed().as_secs_f64());
        assert!(out.status.success(), "yctl report: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["cluster"]["runs"].as_u64().unwrap() > 0);
    }
    let html = c.work.join("report.html");
    let t = Instant::now();
    let out = c.run(
        "yctl",
        &["report", "--since", "7d", "--html", html.to_str().unwrap()],
    );
    assert!(out.status.success(), "yctl report --html: {}", stderr(&out));
    println!(
        "  (yctl report: {:.2} / {:.2} / {:.2} s; --html {:.2} s, {} KiB)",
        took[0],
        took[1],
        took[2],
        t.elapsed().as_secs_f64(),
        std::fs::metadata(&html)
            .map(|m| m.len() / 1024)
            .unwrap_or(0)
    );
    vec![Figure {
        name: "yctl report, 1,000,000 recorded runs (median)",
        value: median(&mut took),
        unit: "s",
        target: 2.0,
        higher_is_better: false,
    }]
}

/// Flushes `store` from this synchronous code.
fn rt_flush(store: &ysched_schedd::store::Store) {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.flush())
        .expect("flush");
}

fn read_ns(p: &std::path::Path) -> u128 {
    wait_until(Duration::from_secs(30), &p.display().to_string(), || {
        p.exists()
    });
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Preemption latencies on one 4-GPU node held by one low-tier 4-GPU job.
fn preemption() -> Vec<Figure> {
    let c = real_cluster(vec![FakeNode::uniform("n1", 4, A100)]);
    let stamp = |name: &str| c.work.join(name);
    let write_stamp =
        |path: &std::path::Path| format!("date +%s%N > {0}.tmp && mv {0}.tmp {0}", path.display());
    let (mut to_sigterm, mut to_start, mut stubborn) = (Vec::new(), Vec::new(), Vec::new());
    let grace = 2u64;
    for round in 0..6 {
        let ignores_term = round % 2 == 1;
        let term = stamp(&format!("term-{round}"));
        let exit = stamp(&format!("exit-{round}"));
        let started = stamp(&format!("victim-up-{round}"));
        let victim = if ignores_term {
            format!(
                "#!/bin/sh\ntrap '' TERM\n{}\nwhile true; do sleep 1; done\n",
                write_stamp(&started)
            )
        } else {
            format!(
                "#!/bin/sh\ntrap '{}; {}; exit 0' TERM\n{}\nwhile true; do sleep 1; done\n",
                write_stamp(&term),
                write_stamp(&exit),
                write_stamp(&started)
            )
        };
        let script = c.script(&format!("victim-{round}.sh"), &victim);
        let vid = c.submit(&[
            "-p",
            "low",
            "-G",
            "4",
            "--no-requeue",
            "--grace",
            &grace.to_string(),
            script.to_str().unwrap(),
        ]);
        read_ns(&started);
        let pre = stamp(&format!("preemptor-{round}"));
        let t0 = now_ns();
        let pid = c.submit(&["-p", "critical", "-G", "4", "--wrap", &write_stamp(&pre)]);
        let pre_ns = read_ns(&pre);
        if ignores_term {
            stubborn.push((pre_ns - t0) as f64 / 1e6);
        } else {
            to_sigterm.push((read_ns(&term) - t0) as f64 / 1e6);
            to_start.push((pre_ns as i128 - read_ns(&exit) as i128) as f64 / 1e6);
        }
        c.wait_state(pid, "COMPLETED", Duration::from_secs(30));
        c.wait_state(vid, "PREEMPTED", Duration::from_secs(30));
    }
    vec![
        Figure {
            name: "critical submit -> victim sees SIGTERM (median)",
            value: median(&mut to_sigterm),
            unit: "ms",
            target: 50.0,
            higher_is_better: false,
        },
        Figure {
            name: "victim exit -> preemptor start (median)",
            value: median(&mut to_start),
            unit: "ms",
            target: 100.0,
            higher_is_better: false,
        },
        Figure {
            name: "stubborn victim: submit -> start minus grace (2 s)",
            value: median(&mut stubborn) - (grace * 1000) as f64,
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
    ]
}

/// One user floods schedd (see `ysched_tests::neighbour`) for `BENCH_NEIGHBOUR_SECS` (default
/// 30) while another submits and lists: the other's p99 latencies and their running job.
fn noisy_neighbour() -> Vec<Figure> {
    let secs = env_usize("BENCH_NEIGHBOUR_SECS", 30) as f64;
    let c = real_cluster(vec![FakeNode::uniform("n1", 8, A100)]);
    let o = neighbour::run(&c, secs);
    for line in &o.attacker_reports {
        println!("  (attacker {line})");
    }
    println!(
        "  (neighbour quiet: yq --me p50 {:.1} ms p99 {:.1} ms, ysub p50 {:.1} ms p99 {:.1} ms)",
        o.quiet.yq.percentile(0.5),
        o.quiet.yq.percentile(0.99),
        o.quiet.ysub.percentile(0.5),
        o.quiet.ysub.percentile(0.99)
    );
    println!(
        "  (neighbour flooded: {} yq, {} ysub; yq p50 {:.1} ms max {:.1} ms, ysub p50 {:.1} ms max {:.1} ms)",
        o.flooded.yq.0.len(),
        o.flooded.ysub.0.len(),
        o.flooded.yq.percentile(0.5),
        o.flooded.yq.percentile(1.0),
        o.flooded.ysub.percentile(0.5),
        o.flooded.ysub.percentile(1.0)
    );
    for f in o.flooded.failures.iter().take(5) {
        println!("  (neighbour request failed: {f})");
    }
    println!(
        "  (neighbour's job: {}; schedd alive: {}, RSS {:.0} MiB)",
        o.job_detail, o.schedd_alive, o.schedd_rss_mib
    );
    let yes = |b: bool| if b { 1.0 } else { 0.0 };
    vec![
        Figure {
            name: "flooded: neighbour yq --me p99",
            value: o.flooded.yq.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "flooded: neighbour ysub p99",
            value: o.flooded.ysub.percentile(0.99),
            unit: "ms",
            target: 200.0,
            higher_is_better: false,
        },
        Figure {
            name: "flooded: neighbour requests failed",
            value: o.flooded.failures.len() as f64,
            unit: "",
            target: 0.0,
            higher_is_better: false,
        },
        Figure {
            name: "flooded: neighbour's running job untouched (1 = yes)",
            value: yes(o.job_untouched && o.schedd_alive),
            unit: "",
            target: 1.0,
            higher_is_better: true,
        },
    ]
}
