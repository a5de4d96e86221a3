//! The `neighbour` benchmark's slow readers: answers cost memory only while the client reads.
//! On a schedd with a long history, four users flood it with listings of the whole history:
//! first as slow readers, each at its connection limit (64) with 16 listings in flight on
//! every connection that it never reads (what is refused is asked again 5 s later); then as
//! readers, each reading whole-history listings (every page) in a loop (history floods). Meanwhile another user runs `yq --me` and `ysub` (see [`crate::neighbour`]) and
//! schedd's resident memory is sampled.
//!
//! The floods run in child processes of the bench binary, one per user
//! (`bench --neighbour-attacker unread|history SOCKET SECS`): identity comes from the socket's
//! peer credentials, so each attacker must really be another uid.

use crate::neighbour::{attacker_binary, neighbour_loop, spawn_attacker, Seen};
use crate::unread::{whole_history, UnreadListings};
use crate::TestCluster;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The flooding users: `nobody` and three uids without a name.
pub const ATTACKERS: [(u32, u32); 4] = [
    (65534, 65534),
    (40001, 40001),
    (40002, 40002),
    (40003, 40003),
];

/// What the neighbour saw, and what the floods did and cost.
#[derive(Debug, Default)]
pub struct Outcome {
    pub quiet: Seen,
    /// Under the slow readers, and schedd's highest resident memory and its CPU meanwhile.
    pub unread: Seen,
    pub unread_rss_mib: f64,
    pub unread_cpu_share: f64,
    /// Under the history floods.
    pub floods: Seen,
    pub floods_rss_mib: f64,
    pub floods_cpu_share: f64,
    pub attacker_reports: Vec<String>,
    pub schedd_alive: bool,
}

/// The highest resident memory of process `pid` while it runs (sampled every 50 ms).
struct PeakRss {
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl PeakRss {
    fn watch(pid: u32) -> PeakRss {
        let (peak_kib, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (peak, stopped) = (Arc::clone(&peak_kib), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                peak.fetch_max((crate::rss_mib(pid) * 1024.0) as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        PeakRss {
            peak_kib,
            stop,
            thread,
        }
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

/// What one phase measured: the neighbour's latencies, schedd's highest resident memory (MiB)
/// and its CPU (cores' worth, on average).
type Phase = (Seen, f64, f64);

/// Runs `mode` as every one of [`ATTACKERS`] for `secs` while the neighbour measures (see
/// [`Phase`]); each attacker's line goes to `reports`.
fn phase(c: &TestCluster, mode: &str, secs: f64, reports: &mut Vec<String>) -> Phase {
    let pid = c.schedd_pid().expect("schedd runs");
    let peak = PeakRss::watch(pid);
    let (start, cpu_before) = (Instant::now(), crate::cpu_ms(pid).map_or(0.0, |c| c.0));
    let binary = attacker_binary(c);
    let attackers: Vec<_> = ATTACKERS
        .iter()
        .map(|&(uid, gid)| spawn_attacker(&binary, mode, &c.socket(), secs, (uid, gid)))
        .collect();
    // Let the flood build up before measuring.
    std::thread::sleep(Duration::from_secs(2));
    let seen = neighbour_loop(c, (secs - 3.0).max(1.0));
    for ((uid, _), child) in ATTACKERS.iter().zip(attackers) {
        let out = child.wait_with_output().unwrap();
        reports.push(format!(
            "{mode} as uid {uid}: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let cpu = crate::cpu_ms(pid).map_or(0.0, |c| c.0) - cpu_before;
    (seen, peak.stop(), cpu / 1e3 / start.elapsed().as_secs_f64())
}

/// The whole run on `c` (one node), after `history` finished jobs are written into its
/// history: a quiet phase, then `secs` of slow readers, then `secs` of history floods.
pub fn run(c: &mut TestCluster, history: u64, secs: f64) -> Outcome {
    let t = Instant::now();
    // Entries of ~450 bytes, as an ordinary job's: the whole history is ~45 MB for 100,000.
    crate::seed_finished_jobs(c, history, 450);
    println!(
        "  ({history} finished jobs written in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let mut outcome = Outcome {
        quiet: neighbour_loop(c, 5.0),
        ..Outcome::default()
    };
    let mut reports = Vec::new();
    (
        outcome.unread,
        outcome.unread_rss_mib,
        outcome.unread_cpu_share,
    ) = phase(c, "unread", secs, &mut reports);
    (
        outcome.floods,
        outcome.floods_rss_mib,
        outcome.floods_cpu_share,
    ) = phase(c, "history", secs, &mut reports);
    outcome.attacker_reports = reports;
    outcome.schedd_alive = c.schedd_alive();
    if !outcome.schedd_alive {
        let log = std::fs::read_to_string(c.dir.path().join("schedd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        for line in &lines[lines.len().saturating_sub(40)..] {
            println!("  | {line}");
        }
    }
    outcome
}

/// `unread` as the attacker: its 64 connections, 16 listings of the whole history in flight
/// on each, never read; one line of what became of them at the end.
pub fn unread_flood(socket: &Path, until: Instant) -> String {
    let connections: Vec<_> = (0..64)
        .filter_map(|_| std::os::unix::net::UnixStream::connect(socket).ok())
        .collect();
    let attack = UnreadListings::start(
        connections,
        16,
        whole_history(),
        Some(Duration::from_secs(5)),
    );
    std::thread::sleep(until.saturating_duration_since(Instant::now()));
    let refusal = attack.tally.first_refusal.lock().unwrap().clone();
    format!(
        "{}; {} connections refused; first refusal: {}",
        attack.tally.line(),
        attack.tally.connections_lost.load(Ordering::Relaxed),
        refusal.chars().take(200).collect::<String>()
    )
}

/// `history` as the attacker: whole-history listings (every page) read in a loop.
pub async fn history_flood(socket: &Path, until: Instant) -> String {
    let (mut listings, mut jobs, mut errors, mut first_error) = (0u64, 0u64, 0u64, None);
    let Ok(mut client) = ysub::client::connect(socket).await else {
        return "could not connect".into();
    };
    while Instant::now() < until {
        match ysub::client::list_all_jobs(&mut client, whole_history()).await {
            Ok(all) => {
                listings += 1;
                jobs += all.len() as u64;
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(format!("{e:#}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    format!(
        "read {listings} whole-history listings ({jobs} jobs), {errors} failed{}",
        first_error.map_or(String::new(), |f| format!(
            " (first: {})",
            f.chars().take(200).collect::<String>()
        ))
    )
}
