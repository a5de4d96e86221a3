//! The `throughput` group: jobs run end to end per second on two real agents, and the CPU
//! each role (schedd, each noded with its node's supervisor and jobs) used per job.

use crate::figure::Figure;
use crate::setup::{env_usize, held_spec, real_cluster_with, submit_all, supervisor_of, A100};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use ysched_tests::*;

/// The agents of the run, by name: their figures' names are `'static`.
const AGENTS: [(&str, &str); 2] = [
    ("n1", "noded n1 CPU per job (with supervisor, jobs)"),
    ("n2", "noded n2 CPU per job (with supervisor, jobs)"),
];

/// End-to-end throughput on two real `noded` agents: `THROUGHPUT_JOBS` (2,000) jobs running
/// `true` (no GPUs), submitted by 64 API clients, counted until every one has ended
/// COMPLETED. Each is a real job process, started by its node's supervisor and journaled.
///
/// Also the CPU time each role used per job over the run (submits included), from
/// `/proc/<pid>/stat`: schedd's own, and each `noded`'s own plus its reaped children's, plus
/// its node's supervisor's own and its reaped children's (the jobs). The supervisor is
/// started with the first job and lives on for a few seconds after the last. The completions are counted from schedd's
/// `ysched_jobs_ended_total` counter, whose scrape costs the same at any queue length
/// (listing the COMPLETED jobs would cost schedd CPU growing with their number).
pub fn throughput(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let n = env_usize("THROUGHPUT_JOBS", 2_000);
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let c = real_cluster_with(
        AGENTS
            .iter()
            .map(|(name, _)| FakeNode::uniform(name, 8, A100))
            .collect(),
        &format!("metrics_listen = \"127.0.0.1:{metrics_port}\""),
    );
    let work = c.work.display().to_string();
    let schedd = c.schedd_pid().expect("schedd runs");
    let agents: Vec<u32> = AGENTS
        .iter()
        .map(|(name, _)| c.agent_pid(name).expect("agent runs") as u32)
        .collect();
    let cpu = |pid: u32| cpu_ms(pid).expect("process runs");
    // A node's CPU: its agent and its supervisor (if one runs), each with reaped children.
    let node_cpu = |name: &str, agent: u32| {
        let (own, children) = cpu(agent);
        let (sup_own, sup_children) = supervisor_of(&c.spool_dir(name))
            .and_then(cpu_ms)
            .unwrap_or_default();
        (own + sup_own, children + sup_children)
    };
    let schedd_before = cpu(schedd);
    let agents_before: Vec<(f64, f64)> = AGENTS
        .iter()
        .zip(&agents)
        .map(|((name, _), pid)| node_cpu(name, *pid))
        .collect();
    let t = Instant::now();
    submit_all(rt, &c, n, move |_| {
        let mut spec = held_spec(&work);
        spec.hold = false;
        spec
    });
    wait_until(Duration::from_secs(600), "every job completes", || {
        // A scrape costs schedd about 0.2 ms: a few a second stay out of its figure.
        std::thread::sleep(Duration::from_millis(200));
        completed(metrics_port) >= n
    });
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let per_job = |before: f64, after: f64| (after - before) / n as f64;
    let schedd_after = cpu(schedd);
    let metrics = scrape(metrics_port).unwrap_or_default();
    let passes = sample(&metrics, "ysched_scheduling_pass_duration_seconds_count");
    let pass_secs = sample(&metrics, "ysched_scheduling_pass_duration_seconds_sum");
    println!(
        "  (schedd: {:.3} ms CPU per job)",
        per_job(schedd_before.0, schedd_after.0)
    );
    println!(
        "  ({passes:.0} scheduling passes, {:.2} per job, {:.2} ms each on average)",
        passes / n as f64,
        pass_secs * 1e3 / passes.max(1.0)
    );
    let mut figures = vec![
        Figure {
            name: "2 real agents: `true` jobs submitted, run, ended /s",
            value: rate,
            unit: "/s",
            target: 1000.0,
            higher_is_better: true,
        },
        Figure {
            name: "schedd CPU per job",
            value: per_job(schedd_before.0, schedd_after.0),
            unit: "ms",
            target: 0.3,
            higher_is_better: false,
        },
    ];
    for (((node, name), pid), before) in AGENTS.iter().zip(&agents).zip(&agents_before) {
        let after = node_cpu(node, *pid);
        let own = per_job(before.0, after.0);
        let children = per_job(before.1, after.1);
        println!(
            "  ({name}: {own:.2} ms noded's and the supervisor's own, {children:.2} ms their \
             reaped children)"
        );
        figures.push(Figure {
            name,
            value: own + children,
            unit: "ms",
            // HyperQueue's agent and job together, per `true` job, as first measured side by
            // side (docs/notes/cost-per-job.md): the node's share may cost no more.
            target: 2.5,
            higher_is_better: false,
        });
    }
    figures
}

/// How many jobs have ended COMPLETED, from schedd's metrics, summed over the tiers; 0 when
/// the scrape fails.
fn completed(port: u16) -> usize {
    scrape(port)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("ysched_jobs_ended_total{") && l.contains("state=\"COMPLETED\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as usize
}

/// schedd's metrics as text (`GET /metrics`).
fn scrape(port: u16) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The value of the sample `name` (without labels) in a scrape; 0 when absent.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}
