//! The `neighbour` benchmark group: one user floods `schedd` in every way a hostile local user
//! can (connections held open, long names, huge task ranges, refused submits, big
//! arrays) while another user works as usual. It measures what the other user sees: `yq --me`
//! and `ysub` latency (whole CLI processes, as a person types them) and whether their running
//! job was touched.
//!
//! The flood runs in child processes of the bench binary itself, as `nobody`
//! (`bench --neighbour-attacker MODE SOCKET SECS`): identity comes from the socket's peer
//! credentials, so the attacker must really be another uid. The other user is `daemon`
//! (uid 1), present on every Debian-like system. The same group then floods with listings of
//! a long history, read and never read, from four users (see [`crate::slow_readers`]).

use crate::TestCluster;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ysched_proto as pb;

/// The attacker's uid/gid (`nobody`).
pub const ATTACKER: (u32, u32) = (65534, 65534);
/// The other user's uid/gid (`daemon`).
pub const NEIGHBOUR: (u32, u32) = (1, 1);

/// The hidden first argument that makes the bench binary an attacker.
pub const ATTACKER_FLAG: &str = "--neighbour-attacker";

/// What one attacker process does for its whole run.
pub const MODES: [&str; 3] = ["connections", "requests", "arrays"];

/// Latencies of one kind of request, in milliseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies(pub Vec<f64>);

impl Latencies {
    pub fn percentile(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    }
}

/// What the neighbour saw in one phase.
#[derive(Debug, Default)]
pub struct Seen {
    pub yq: Latencies,
    pub ysub: Latencies,
    /// Requests of the neighbour that failed (each one a failure the user would see).
    pub failures: Vec<String>,
}

/// The outcome of a run: the neighbour's latencies when quiet and under the flood, whether
/// their running job was untouched, and what the attackers managed.
#[derive(Debug, Default)]
pub struct Outcome {
    pub quiet: Seen,
    pub flooded: Seen,
    pub job_untouched: bool,
    pub job_detail: String,
    pub attacker_reports: Vec<String>,
    pub schedd_alive: bool,
    pub schedd_rss_mib: f64,
}

/// Runs the neighbour's loop for `secs`: alternately `yq --me` and `ysub --hold --wrap true`
/// (then cancelled, so its own jobs do not pile up), every 100 ms.
pub(crate) fn neighbour_loop(c: &TestCluster, secs: f64) -> Seen {
    let mut seen = Seen::default();
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut i = 0u64;
    while Instant::now() < until {
        let t = Instant::now();
        if i.is_multiple_of(2) {
            let out = c.run_as(NEIGHBOUR.0, NEIGHBOUR.1, "yq", &["--me"]);
            seen.yq.0.push(t.elapsed().as_secs_f64() * 1e3);
            if !out.status.success() {
                seen.failures
                    .push(format!("yq --me: {}", crate::stderr(&out).trim()));
            }
        } else {
            let out = c.run_as(
                NEIGHBOUR.0,
                NEIGHBOUR.1,
                "ysub",
                &["--parsable", "--hold", "-J", "neighbour", "--wrap", "true"],
            );
            seen.ysub.0.push(t.elapsed().as_secs_f64() * 1e3);
            match crate::stdout(&out).trim().parse::<u64>() {
                Ok(id) if out.status.success() => {
                    c.run_as(NEIGHBOUR.0, NEIGHBOUR.1, "ycancel", &[&id.to_string()]);
                }
                _ => seen
                    .failures
                    .push(format!("ysub: {}", crate::stderr(&out).trim())),
            }
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
    }
    seen
}

/// A copy of the running bench binary where `nobody` can execute it.
pub(crate) fn attacker_binary(c: &TestCluster) -> PathBuf {
    let copy = c.dir.path().join("bin").join("bench-attacker");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    copy
}

/// The bench binary as an attacker in `mode`, as `uid`/`gid`, for `secs`.
pub(crate) fn spawn_attacker(
    binary: &Path,
    mode: &str,
    socket: &Path,
    secs: f64,
    (uid, gid): (u32, u32),
) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(binary)
        .args([
            ATTACKER_FLAG,
            mode,
            &socket.display().to_string(),
            &secs.to_string(),
        ])
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the attacker")
}

/// The whole group: a quiet phase, then `secs` of flood with the neighbour measuring
/// throughout. The cluster must have room for one 1-GPU job of the neighbour.
pub fn run(c: &TestCluster, secs: f64) -> Outcome {
    let mut outcome = Outcome::default();
    // The neighbour's long job, running before the flood starts.
    let out = c.run_as(
        NEIGHBOUR.0,
        NEIGHBOUR.1,
        "ysub",
        &[
            "--parsable",
            "-G",
            "1",
            "-J",
            "keep",
            "--wrap",
            "sleep 100000",
        ],
    );
    assert!(out.status.success(), "{}", crate::stderr(&out));
    let job: u64 = crate::stdout(&out).trim().parse().unwrap();
    let before = c.wait_state(job, "RUNNING", Duration::from_secs(30));

    outcome.quiet = neighbour_loop(c, 5.0);

    let binary = attacker_binary(c);
    // The requests and arrays connect first, as a user who floods with connections and still
    // wants their bad requests to get in would do: the connection flood then takes what is
    // left of the user's places.
    let mut attackers: Vec<Child> = MODES[1..]
        .iter()
        .map(|mode| spawn_attacker(&binary, mode, &c.socket(), secs, ATTACKER))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    attackers.insert(
        0,
        spawn_attacker(&binary, MODES[0], &c.socket(), secs - 0.5, ATTACKER),
    );
    // Let the flood build up before measuring.
    std::thread::sleep(Duration::from_secs(1));
    outcome.flooded = neighbour_loop(c, (secs - 1.5).max(1.0));
    for (mode, child) in MODES.iter().zip(attackers) {
        let out = child.wait_with_output().unwrap();
        outcome.attacker_reports.push(format!(
            "{mode}: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    outcome.schedd_alive = c
        .schedd_pid()
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
    outcome.schedd_rss_mib = c.schedd_pid().map(crate::rss_mib).unwrap_or(0.0);
    let after = c.job(job);
    outcome.job_untouched = after["state"] == "RUNNING"
        && after["restart_count"] == before["restart_count"]
        && after["start_time"] == before["start_time"];
    outcome.job_detail = format!(
        "state {} restarts {} start {} (was {})",
        after["state"], after["restart_count"], after["start_time"], before["start_time"]
    );
    c.run("ycancel", &[&job.to_string()]);
    outcome
}

/// `bench --neighbour-attacker MODE SOCKET SECS`: floods for SECS seconds and prints one line
/// of what it managed.
pub fn attacker_main(args: &[String]) {
    let [mode, socket, secs] = args else {
        eprintln!("usage: bench {ATTACKER_FLAG} MODE SOCKET SECS");
        std::process::exit(2);
    };
    let socket = PathBuf::from(socket);
    let until = Instant::now() + Duration::from_secs_f64(secs.parse().unwrap_or(10.0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let line = match mode.as_str() {
        "connections" => hold_connections(&socket, until),
        "requests" => rt.block_on(bad_requests(&socket, until)),
        "arrays" => rt.block_on(big_arrays(&socket, until)),
        "unread" => crate::slow_readers::unread_flood(&socket, until),
        "history" => rt.block_on(crate::slow_readers::history_flood(&socket, until)),
        other => format!("unknown mode {other}"),
    };
    println!("{line}");
}

/// Opens as many client connections as it can and keeps them open, reopening what the server
/// closes, until `until`.
fn hold_connections(socket: &Path, until: Instant) -> String {
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    const MAX: usize = 2_000;
    let mut held: Vec<UnixStream> = Vec::new();
    let (mut opened, mut closed_by_server) = (0u64, 0u64);
    while Instant::now() < until {
        // Drop the ones the server has closed (a read of 0 bytes).
        held.retain_mut(|s| {
            let mut b = [0u8; 1];
            match s.read(&mut b) {
                Ok(0) => {
                    closed_by_server += 1;
                    false
                }
                _ => true,
            }
        });
        while held.len() < MAX && Instant::now() < until {
            match UnixStream::connect(socket) {
                Ok(s) => {
                    s.set_nonblocking(true).unwrap();
                    opened += 1;
                    held.push(s);
                }
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    format!(
        "opened {opened} connections, {closed_by_server} closed by schedd, {} open at the end",
        held.len()
    )
}

/// Sends, from 8 concurrent tasks, requests the hostile tests used: huge task ranges, many
/// targets, long names and accounts, a tier the user may not use (refused and audited), long
/// dependency strings.
async fn bad_requests(socket: &Path, until: Instant) -> String {
    let mut tasks = Vec::new();
    for worker in 0..8u64 {
        let socket = socket.to_path_buf();
        tasks.push(tokio::spawn(async move {
            let (mut sent, mut refused, mut lost) = (0u64, 0u64, 0u64);
            let Ok(mut client) = ysub::client::connect(&socket).await else {
                return (sent, refused, lost);
            };
            let long = |n: usize| "z".repeat(n);
            let mut i = worker;
            while Instant::now() < until {
                let spec = |f: &dyn Fn(&mut pb::JobSpec)| {
                    let mut s = pb::JobSpec {
                        name: "flood".into(),
                        script: "#!/bin/sh\ntrue\n".into(),
                        workdir: "/tmp".into(),
                        hold: true,
                        ..Default::default()
                    };
                    f(&mut s);
                    Some(s)
                };
                let result = match i % 7 {
                    0 => client
                        .list_jobs(pb::ListJobsRequest {
                            targets: vec!["1_[0-4294967294]".into()],
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    1 => client
                        .list_jobs(pb::ListJobsRequest {
                            targets: vec!["1_[0-9999]".into(); 4_000],
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    2 => client
                        .submit(pb::SubmitRequest {
                            spec: spec(&|s| s.name = long(100_000)),
                        })
                        .await
                        .map(|_| ()),
                    3 => client
                        .submit(pb::SubmitRequest {
                            spec: spec(&|s| s.account = long(3_900_000)),
                        })
                        .await
                        .map(|_| ()),
                    4 => client
                        .submit(pb::SubmitRequest {
                            spec: spec(&|s| s.tier = "critical".into()),
                        })
                        .await
                        .map(|_| ()),
                    5 => client
                        .submit(pb::SubmitRequest {
                            spec: spec(&|s| s.dependency = format!("afterok:{}", long(60_000))),
                        })
                        .await
                        .map(|_| ()),
                    _ => client
                        .get_job(pb::JobRef {
                            job_id: 0,
                            target: format!("1_[{}]", "0-4294967294,".repeat(2_000)),
                        })
                        .await
                        .map(|_| ()),
                };
                sent += 1;
                match result {
                    Ok(()) => {}
                    // The connection itself failed: the request never reached schedd.
                    Err(e)
                        if matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown) =>
                    {
                        lost += 1
                    }
                    Err(_) => refused += 1,
                }
                i += 1;
            }
            (sent, refused, lost)
        }));
    }
    let (mut sent, mut refused, mut lost) = (0, 0, 0);
    for t in tasks {
        let (s, r, l) = t.await.unwrap_or((0, 0, 0));
        sent += s;
        refused += r;
        lost += l;
    }
    format!(
        "sent {sent} bad requests: {refused} refused by schedd, {lost} lost with their connection"
    )
}

/// Submits held arrays of 10,000 tasks until refused, then cancels them all and starts over.
async fn big_arrays(socket: &Path, until: Instant) -> String {
    let (mut tasks_queued, mut refused, mut cancels) = (0u64, 0u64, 0u64);
    let mut first_refusal = String::new();
    let Ok(mut client) = ysub::client::connect(socket).await else {
        return "could not connect".into();
    };
    while Instant::now() < until {
        let reply = client
            .submit(pb::SubmitRequest {
                spec: Some(pb::JobSpec {
                    name: "sweep".into(),
                    script: "#!/bin/sh\ntrue\n".into(),
                    workdir: "/tmp".into(),
                    hold: true,
                    array: "0-9999".into(),
                    ..Default::default()
                }),
            })
            .await;
        match reply {
            Ok(r) => tasks_queued += u64::from(r.into_inner().array_task_count),
            Err(e) => {
                if first_refusal.is_empty() {
                    first_refusal = e.message().chars().take(160).collect();
                }
                refused += 1;
                let _ = client
                    .cancel(pb::CancelRequest {
                        user: "nobody".into(),
                        ..Default::default()
                    })
                    .await;
                cancels += 1;
            }
        }
    }
    let _ = client
        .cancel(pb::CancelRequest {
            user: "nobody".into(),
            ..Default::default()
        })
        .await;
    format!(
        "queued {tasks_queued} array tasks, {refused} arrays refused ({first_refusal}), \
         {cancels} cancels of all"
    )
}
