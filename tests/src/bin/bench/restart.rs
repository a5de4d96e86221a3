//! The `restart` group: a schedd outage under load, and that every job still runs once.

use crate::figure::Figure;
use crate::setup::{env_usize, held_spec, start_fleet, submit_all};
use std::time::{Duration, Instant};
use ysched_tests::*;

/// A schedd outage under load: `RESTART_NODES` (100) simulated agents, every GPU
/// busy with 20 s jobs and as many queued behind them; schedd is killed (`SIGKILL`) and
/// restarted after `RESTART_DOWN_SECS` (30), while about half the jobs end. Every job must
/// still run once and end once: none lost, none started twice, every end acknowledged.
pub fn restart(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    use std::sync::atomic::Ordering;
    let n_nodes = env_usize("RESTART_NODES", 100);
    let down = Duration::from_secs(env_usize("RESTART_DOWN_SECS", 30) as u64);
    let mut c = TestCluster::start_with_cluster_key(vec![]);
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
