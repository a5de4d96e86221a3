//! What the bench groups share to set up a run: env counts, clusters, job specs, the submitter.

use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

pub const A100: &str = "NVIDIA A100-SXM4-80GB";

/// A cluster with real agents; `BENCH_NODE_TOML` (e.g. `cgroup_root = "none"`) is added to
/// their `[node]` table, to compare settings.
pub fn real_cluster(nodes: Vec<FakeNode>) -> TestCluster {
    real_cluster_with(nodes, "")
}

/// [`real_cluster`] with `scheduler_toml` added to the `[scheduler]` table.
pub fn real_cluster_with(nodes: Vec<FakeNode>, scheduler_toml: &str) -> TestCluster {
    let node_toml = std::env::var("BENCH_NODE_TOML").unwrap_or_default();
    TestCluster::start_with(nodes, scheduler_toml, &node_toml)
}

pub fn held_spec(workdir: &str) -> pb::JobSpec {
    pb::JobSpec {
        name: "bench".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: workdir.into(),
        hold: true,
        env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
        ..Default::default()
    }
}

/// A count from the environment, else `default`.
pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Starts `n_nodes` simulated 8-GPU agents against `c`'s schedd and waits until all have
/// registered; jobs without `YS_SIM_DURATION_MS` run for `default_duration`.
pub fn start_fleet(
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

/// Submits `n` jobs made by `spec(i)` through the API from 64 clients at once; returns each
/// submit's latency (ms).
pub fn submit_all(
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

/// The pid of the node supervisor serving `spool` (`noded __supervisor <spool>`), if one runs.
pub fn supervisor_of(spool: &std::path::Path) -> Option<u32> {
    let spool = std::fs::canonicalize(spool).ok()?;
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let serves = args.windows(2).any(|w| {
                w[0] == b"__supervisor"
                    && std::fs::canonicalize(
                        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(w[1]),
                    )
                    .is_ok_and(|p| p == spool)
            });
            serves.then_some(pid)
        })
}

/// The whole machine's busy CPU time so far, in ms, from `/proc/stat`: every CPU's user,
/// nice, system, irq and softirq time (not idle, iowait, or steal: the time the hypervisor
/// gave to other guests, which the processes' own times leave out too). What a run costs
/// the machine, kernel threads (cgroup teardown, writeback, RCU) included.
pub fn machine_busy_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: f64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| ticks.get(i)).sum();
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    busy * 1e3 / hz
}

/// Where the benchmarks' temp dirs (clusters' state, spools, job output) live: the mount
/// under `TMPDIR`, its file system and, for ext4, whether it has a journal. The figures
/// depend on it: ext4 without a journal makes every new file slower the more were deleted in
/// the last seconds (see docs/benchmarks.md).
pub fn temp_dir_mount() -> String {
    let dir = std::env::temp_dir();
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // `id parent major:minor root mount-point options [optional...] - fstype source super`.
    let best = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?.replace("\\040", " ");
            let mut right = right.split(' ');
            let (fstype, source) = (right.next()?, right.next()?);
            dir.starts_with(&point)
                .then(|| (point, fstype.to_string(), source.to_string()))
        })
        .max_by_key(|(point, _, _)| point.len());
    let Some((point, fstype, source)) = best else {
        return format!("{} (mount not found)", dir.display());
    };
    let journal = match fstype.as_str() {
        "ext4" => {
            let device = source.rsplit('/').next().unwrap_or("");
            if std::path::Path::new(&format!("/proc/fs/jbd2/{device}-8")).exists() {
                ", with a journal"
            } else {
                ", WITHOUT a journal: new files slow down after many deletions"
            }
        }
        _ => "",
    };
    format!("{} on {point} ({fstype} {source}{journal})", dir.display())
}
