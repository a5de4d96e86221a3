//! End-to-end: answers cost memory only while the client reads. `nobody` opens every
//! connection it may (64) on schedd's socket, then on a node's client socket, with 16
//! listings of a long history in flight on each, and never reads a byte of an answer (its
//! HTTP/2 window is 0). schedd, and the agent that relays, hold at most the user's room for
//! answers not yet read and refuse the rest (RESOURCE_EXHAUSTED, naming the limit); their
//! resident memory stays bounded; another user's `yq --me` and `ysub` work meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ysched_tests::unread::{whole_history, UnreadListings};
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const NOBODY: u32 = 65534;
/// Finished jobs in the history, and about how long each one's listing entry is: a listing of
/// the whole history is ~18 MB, which schedd once made and held for every request of the
/// flood (1,024 of them: ~18 GiB).
const HISTORY_JOBS: u64 = 4_000;
const ENTRY_BYTES: usize = 4_500;
/// What schedd's and the agent's resident memory must stay under (generous: the caps hold
/// 32 MiB per user, 256 MiB in all).
const RSS_BOUND_MIB: f64 = 512.0;
/// Another user's command answers within this (it should within 1 s; twice that leaves room
/// for a loaded 2-core machine).
const PROMPT: Duration = Duration::from_secs(2);

/// A user other than root and nobody (`yq --me` needs a user name): the first in the passwd
/// database (`daemon` on most systems).
fn other_user() -> u32 {
    (1..65534)
        .find(|uid| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*uid))
                .ok()
                .flatten()
                .is_some()
        })
        .expect("a user besides root and nobody")
}

/// A job of `uid`'s running on n1, which makes n1's client socket relay `uid`.
fn a_job_running_on_n1(c: &TestCluster, uid: u32) {
    let out = c.run_as(
        uid,
        uid,
        "ysub",
        &[
            "--parsable",
            "-w",
            "n1",
            "-D",
            "/tmp",
            "--wrap",
            "sleep 600",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    c.wait_state(id, "RUNNING", Duration::from_secs(20));
}

/// The highest resident memory of `pids` while it runs (sampled every 20 ms).
struct PeakRss {
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl PeakRss {
    fn watch(pids: Vec<u32>) -> PeakRss {
        let (peak_kib, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (peak, stopped) = (Arc::clone(&peak_kib), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                for pid in &pids {
                    peak.fetch_max((rss_mib(*pid) * 1024.0) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        PeakRss {
            peak_kib,
            stop,
            thread,
        }
    }

    fn mib(&self) -> f64 {
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let peak = Arc::clone(&self.peak_kib);
        self.thread.join().unwrap();
        peak.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

/// `bin args` as `uid` through `agent`'s socket (or schedd's) succeeds, and promptly.
fn works_promptly(c: &TestCluster, agent: Option<&str>, uid: u32, bin: &str, args: &[&str]) {
    let start = Instant::now();
    let out = c.run_on(agent, uid, uid, bin, args);
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{bin} {args:?} as uid {uid} failed: {}",
        stderr(&out)
    );
    assert!(took < PROMPT, "{bin} {args:?} as uid {uid} took {took:?}");
    if bin == "ysub" {
        let id = stdout(&out).trim().to_string();
        c.run_on(agent, uid, uid, "ycancel", &[&id]);
    }
}

/// The flood on `socket` (schedd's, or `agent`'s), with `watched` (schedd, and the agent)
/// holding the answers: bounded, the rest refused, `other` served meanwhile.
fn flood(c: &mut TestCluster, agent: Option<&str>, other: u32, watched: Vec<u32>) {
    let socket = agent.map_or_else(|| c.socket(), |a| c.agent_socket(a));
    let peak = PeakRss::watch(watched);
    let connections = connect_as(&socket, NOBODY, NOBODY, 64);
    let attack = UnreadListings::start(connections, 16, whole_history(), None);
    let tally = &attack.tally;
    // Each request is held (the user's room: a few pages) or refused, within seconds.
    let mut settled = (0, Instant::now());
    wait_until(Duration::from_secs(60), "the flood to settle", || {
        let now = tally.settled();
        if now != settled.0 {
            settled = (now, Instant::now());
        }
        tally.sent.load(Ordering::Relaxed) == 64 * 16
            && settled.1.elapsed() > Duration::from_secs(2)
    });
    let line = tally.line();
    let refused = tally.refused.load(Ordering::Relaxed);
    let held = 64 * 16 - tally.settled();
    // 32 MiB per user holds four pages of 8 MiB, and a few smaller ones at most.
    assert!((1..=16).contains(&held), "{line}");
    assert!(refused >= 64 * 16 - 16, "{line}");
    let refusal = tally.first_refusal.lock().unwrap().clone();
    // A connection's room (16 MiB: two pages) or the user's (32 MiB), whichever is full first.
    let which = ["this connection", "uid 65534"];
    assert!(which.iter().any(|w| refusal.contains(w)), "{refusal}");
    for words in [
        "of answers",
        "has not read yet; another",
        "would pass the limit per",
        "read the answers already asked for",
    ] {
        assert!(refusal.contains(words), "{refusal}");
    }
    // Another user is served meanwhile, through the same door.
    for _ in 0..3 {
        works_promptly(c, agent, other, "yq", &["--me"]);
        works_promptly(
            c,
            agent,
            other,
            "ysub",
            &["--parsable", "--hold", "--wrap", "true"],
        );
    }
    assert!(
        c.schedd_alive(),
        "schedd died under the flood:\n{}",
        c.logs()
    );
    let peak = {
        let peak_now = peak.mib();
        drop(attack);
        assert!(peak_now < RSS_BOUND_MIB, "{peak_now:.0} MiB ({line})");
        peak.stop()
    };
    assert!(peak < RSS_BOUND_MIB, "{peak:.0} MiB ({line})");
    println!("through {agent:?}: {line}; resident memory at most {peak:.0} MiB");
    // Its connections gone, what they held is given back: nobody is served again.
    wait_until(Duration::from_secs(10), "nobody served again", || {
        c.run_on(agent, NOBODY, NOBODY, "yq", &["--me"])
            .status
            .success()
    });
}

#[test]
fn a_user_who_asks_and_never_reads_holds_only_their_room_and_others_are_served() {
    // The test holds over a hundred sockets.
    ysched_common::edge::raise_open_files_limit().unwrap();
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    seed_finished_jobs(&mut c, HISTORY_JOBS, ENTRY_BYTES);
    // Should a regression make schedd hold what it should not, it fails here, alone, rather
    // than take the machine's memory with it.
    c.restart_schedd_with_memory_limit(4 << 30);
    let other = other_user();
    let schedd = c.schedd_pid().unwrap();
    let agent = c.agent_pid("n1").unwrap() as u32;

    // 1. schedd's own socket.
    flood(&mut c, None, other, vec![schedd]);
    // 2. The node's client socket: the agent reads schedd's answers and holds them for
    // nobody's connections; both stay bounded. A compute node relays only users with a job
    // running on it.
    for uid in [NOBODY, other] {
        a_job_running_on_n1(&c, uid);
    }
    flood(&mut c, Some("n1"), other, vec![schedd, agent]);
    assert!(
        c.logs().contains("refused an answer to uid 65534"),
        "{}",
        c.logs()
    );
}
