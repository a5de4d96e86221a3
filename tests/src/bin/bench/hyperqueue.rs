//! The `hq` group: ysched and HyperQueue side by side, on the same workloads, in one window.
//!
//! HyperQueue is not part of ysched and is not built here: give its `hq` binary in `HQ_BIN`
//! (built by you from its public repository, github.com/It4innovations/hyperqueue, e.g. with
//! `scripts/build-hq.sh`); without it the group measures ysched's side alone and compares
//! nothing. Both are driven through their command lines, as a
//! user would: `ysub` and `hq submit`, rounds alternating (`HQ_ROUNDS`, 2) so that both see
//! the same machine.

use crate::figure::{median, percentile, Figure};
use crate::setup::{env_usize, machine_busy_ms, real_cluster, supervisor_of, A100};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use ysched_tests::*;

/// The workload: `HQ_JOBS` (2,000) one-GPU `true` jobs as one array, on two agents/workers of
/// 8 GPUs; `HQ_LATENCY_JOBS` (20) single jobs on the idle cluster, submit → first instruction;
/// `HQ_SEQUENTIAL` (200) submits one after another, each a new CLI process.
struct Workload {
    jobs: usize,
    latency_jobs: usize,
    sequential: usize,
}

/// One system's figures in one round.
#[derive(Default)]
struct Round {
    jobs_per_sec: f64,
    /// The array's CPU time per job, in ms: the whole machine's (see [`machine_busy_ms`]),
    /// then each role's own (a process and its threads) and its reaped children's.
    machine_ms: f64,
    roles: Vec<(&'static str, f64)>,
    latency_ms: Vec<f64>,
    sequential_per_sec: f64,
    submit_p99_ms: f64,
}

pub fn hyperqueue() -> Vec<Figure> {
    let work = Workload {
        jobs: env_usize("HQ_JOBS", 2_000),
        latency_jobs: env_usize("HQ_LATENCY_JOBS", 20),
        sequential: env_usize("HQ_SEQUENTIAL", 200),
    };
    let rounds = env_usize("HQ_ROUNDS", 2);
    let Some(hq) = std::env::var_os("HQ_BIN").map(PathBuf::from) else {
        println!(
            "  hq: HQ_BIN is not set (the path of HyperQueue's `hq` binary): ysched's side \
             alone, no comparison"
        );
        for round in 1..=rounds {
            print_round(round, "ysched", &ysched_round(&work));
        }
        return Vec::new();
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let y = ysched_round(&work);
        print_round(round, "ysched", &y);
        let h = hq_round(&hq, &work);
        print_round(round, "HyperQueue", &h);
        ours.push(y);
        theirs.push(h);
    }
    let ratio = |f: fn(&Round) -> f64| {
        let a: f64 = ours.iter().map(f).sum();
        let b: f64 = theirs.iter().map(f).sum();
        a / b.max(f64::MIN_POSITIVE)
    };
    let latency = |rs: &[Round]| {
        median(
            &mut rs
                .iter()
                .flat_map(|r| r.latency_ms.clone())
                .collect::<Vec<_>>(),
        )
    };
    vec![
        Figure {
            name: "end-to-end `true` jobs/s, ysched ÷ HyperQueue",
            value: ratio(|r| r.jobs_per_sec),
            unit: "×",
            target: 1.0,
            higher_is_better: true,
        },
        Figure {
            name: "idle submit→start via the CLI, ysched (median)",
            value: latency(&ours),
            unit: "ms",
            // HyperQueue's median in the same rounds, to a tenth of a millisecond.
            target: (latency(&theirs) * 10.0).round() / 10.0,
            higher_is_better: false,
        },
        Figure {
            name: "sequential CLI submits/s, ysched ÷ HyperQueue",
            value: ratio(|r| r.sequential_per_sec),
            unit: "×",
            target: 1.0,
            higher_is_better: true,
        },
    ]
}

fn print_round(round: usize, system: &str, r: &Round) {
    println!(
        "  round {round} {system}: {:.0} jobs/s, submit→start median {:.1} ms, {:.0} sequential \
         submits/s (p99 {:.1} ms)",
        r.jobs_per_sec,
        median(&mut r.latency_ms.clone()),
        r.sequential_per_sec,
        r.submit_p99_ms
    );
    let roles: Vec<String> = r
        .roles
        .iter()
        .map(|(role, ms)| format!("{role} {ms:.2}"))
        .collect();
    println!(
        "    array CPU per job: {:.2} ms of the machine's; {} ms",
        r.machine_ms,
        roles.join(", ")
    );
}

/// Each role's CPU time between `before` and `after`, per job.
fn per_job(
    before: Vec<(&'static str, f64)>,
    after: Vec<(&'static str, f64)>,
    jobs: usize,
) -> Vec<(&'static str, f64)> {
    before
        .into_iter()
        .zip(after)
        .map(|((role, b), (_, a))| (role, (a - b).max(0.0) / jobs as f64))
        .collect()
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Waits for `stamp` (a job's `date +%s%N`) and returns the ms from `t0_ns` to it.
fn stamp_latency_ms(stamp: &Path, t0_ns: u128) -> f64 {
    wait_until(Duration::from_secs(30), "the job's start stamp", || {
        std::thread::sleep(Duration::from_micros(200));
        stamp.exists()
    });
    let ns: u128 = std::fs::read_to_string(stamp)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    ns.saturating_sub(t0_ns) as f64 / 1e6
}

/// `sequential` submits of `submit()`, one after another: (submits/s, p99 ms).
fn sequential(sequential: usize, mut submit: impl FnMut()) -> (f64, f64) {
    let mut each = Vec::new();
    let t = Instant::now();
    for _ in 0..sequential {
        let s = Instant::now();
        submit();
        each.push(s.elapsed().as_secs_f64() * 1e3);
    }
    (
        sequential as f64 / t.elapsed().as_secs_f64(),
        percentile(&mut each, 0.99),
    )
}

fn ysched_round(work: &Workload) -> Round {
    let c = real_cluster(vec![
        FakeNode::uniform("n1", 8, A100),
        FakeNode::uniform("n2", 8, A100),
    ]);
    let mut round = Round::default();
    for i in 0..work.latency_jobs {
        let stamp = c.work.join(format!("start-{i}"));
        let cmd = format!("date +%s%N > {0}.tmp && mv {0}.tmp {0}", stamp.display());
        let t0 = now_ns();
        c.submit(&["-G", "1", "--wrap", &cmd]);
        round.latency_ms.push(stamp_latency_ms(&stamp, t0));
        std::thread::sleep(Duration::from_millis(50));
    }
    // The roles: schedd; each noded and its node's supervisor, their own; the jobs (the
    // supervisors' reaped children). A supervisor started by the idle jobs is still there.
    let nodes = ["n1", "n2"];
    let roles = || {
        let own = |pid: Option<u32>| pid.and_then(cpu_ms).unwrap_or_default();
        let supervisors: Vec<(f64, f64)> = nodes
            .iter()
            .map(|n| own(supervisor_of(&c.spool_dir(n))))
            .collect();
        let agents: f64 = nodes
            .iter()
            .map(|n| own(c.agent_pid(n).map(|p| p as u32)).0)
            .sum();
        vec![
            ("schedd", own(c.schedd_pid()).0),
            ("noded", agents),
            ("supervisor", supervisors.iter().map(|s| s.0).sum()),
            ("jobs", supervisors.iter().map(|s| s.1).sum()),
        ]
    };
    let (machine_before, roles_before) = (machine_busy_ms(), roles());
    let t = Instant::now();
    let array = format!("1-{}", work.jobs);
    let out = c.run(
        "ysub",
        &["-W", "-G", "1", "--array", &array, "--wrap", "true"],
    );
    assert!(out.status.success(), "ysub -W: {}", stderr(&out));
    round.jobs_per_sec = work.jobs as f64 / t.elapsed().as_secs_f64();
    round.machine_ms = (machine_busy_ms() - machine_before) / work.jobs as f64;
    round.roles = per_job(roles_before, roles(), work.jobs);
    (round.sequential_per_sec, round.submit_p99_ms) = sequential(work.sequential, || {
        c.submit(&["-H", "-G", "1", "--wrap", "true"]);
    });
    round
}

/// A HyperQueue server and two workers of 8 GPUs in a temp dir; killed when dropped.
struct HqCluster {
    hq: PathBuf,
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

impl HqCluster {
    fn start(hq: &Path) -> HqCluster {
        let dir = tempfile::tempdir().unwrap();
        let mut c = HqCluster {
            hq: hq.to_path_buf(),
            dir,
            children: Vec::new(),
        };
        let server = c.spawn(&["server", "start", "--host", "127.0.0.1"]);
        c.children.push(server);
        wait_until(Duration::from_secs(30), "the HyperQueue server", || {
            std::thread::sleep(Duration::from_millis(100));
            c.command(&["server", "info"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        for _ in 0..2 {
            let worker = c.spawn(&[
                "worker",
                "start",
                "--cpus",
                "8",
                "--resource",
                "gpus/nvidia=range(0-7)",
            ]);
            c.children.push(worker);
        }
        wait_until(Duration::from_secs(30), "two HyperQueue workers", || {
            std::thread::sleep(Duration::from_millis(100));
            c.command(&["worker", "list", "--output-mode", "quiet"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().count() >= 2)
        });
        c
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.hq);
        cmd.arg("--server-dir")
            .arg(self.dir.path().join("server"))
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        cmd
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.hq.display()))
    }

    fn submit(&self, args: &[&str]) {
        let out = self
            .command(&[&["submit"], args].concat())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "hq submit {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for HqCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn hq_round(hq: &Path, work: &Workload) -> Round {
    let c = HqCluster::start(hq);
    let mut round = Round::default();
    for i in 0..work.latency_jobs {
        let stamp = c.dir.path().join(format!("start-{i}"));
        let cmd = format!("date +%s%N > {0}.tmp && mv {0}.tmp {0}", stamp.display());
        let t0 = now_ns();
        c.submit(&["--resource", "gpus/nvidia=1", "--", "sh", "-c", &cmd]);
        round.latency_ms.push(stamp_latency_ms(&stamp, t0));
        std::thread::sleep(Duration::from_millis(50));
    }
    // The roles: the server; the workers, their own; the tasks (their reaped children).
    let roles = || {
        let own = |child: &Child| cpu_ms(child.id()).unwrap_or_default();
        let workers: Vec<(f64, f64)> = c.children[1..].iter().map(own).collect();
        vec![
            ("server", own(&c.children[0]).0),
            ("workers", workers.iter().map(|w| w.0).sum()),
            ("tasks", workers.iter().map(|w| w.1).sum()),
        ]
    };
    let (machine_before, roles_before) = (machine_busy_ms(), roles());
    let t = Instant::now();
    let array = format!("1-{}", work.jobs);
    c.submit(&[
        "--wait",
        "--array",
        &array,
        "--resource",
        "gpus/nvidia=1",
        "--",
        "true",
    ]);
    round.jobs_per_sec = work.jobs as f64 / t.elapsed().as_secs_f64();
    round.machine_ms = (machine_busy_ms() - machine_before) / work.jobs as f64;
    round.roles = per_job(roles_before, roles(), work.jobs);
    (round.sequential_per_sec, round.submit_p99_ms) = sequential(work.sequential, || {
        c.submit(&["--resource", "gpus/nvidia=1", "--", "true"]);
    });
    round
}
