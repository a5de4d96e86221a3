//! Log lines about peers, rate-limited per peer: a peer that sends thousands of bad requests
//! (a wrong cluster key, a connection over its limit, no TLS) gets the first
//! [`LINES_PER_WINDOW`] lines of each kind per [`WINDOW`] logged, then nothing until the
//! window ends, when one line says how many were suppressed. Other peers' lines are not held
//! back by it.
//!
//! A peer is what the daemon knows it by: an IP address on the agent port, a uid on a client
//! socket. At most [`MAX_PEERS`] peers are tracked per window; lines about more are counted
//! together under "other peers".

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Lines of one kind about one peer logged per window.
pub const LINES_PER_WINDOW: u32 = 5;
/// The window of the limit.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Peers tracked at once.
pub const MAX_PEERS: usize = 4096;
/// How often the summaries of ended windows are logged.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

const OTHER_PEERS: &str = "other peers";

/// What to do with one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; `last`: it is the last one of its window (say that more will be suppressed).
    Log {
        last: bool,
    },
    Suppress,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

/// Counts lines per key (kind and peer) in fixed windows. Pure: time is passed in.
#[derive(Debug)]
pub struct Limiter {
    lines: u32,
    window: Duration,
    max_keys: usize,
    keys: Mutex<HashMap<(&'static str, String), Window>>,
}

impl Limiter {
    pub fn new(lines: u32, window: Duration, max_keys: usize) -> Limiter {
        Limiter {
            lines,
            window,
            max_keys,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a line of `kind` about `peer` at `now` is logged; and how many lines of that
    /// key were suppressed in its previous window when that window ended unreported.
    pub fn check(&self, kind: &'static str, peer: &str, now: Instant) -> (Verdict, u64) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let mut key = (kind, peer.to_string());
        if !keys.contains_key(&key) && keys.len() >= self.max_keys {
            key.1 = OTHER_PEERS.to_string();
        }
        let window = keys.entry(key).or_insert(Window {
            start: now,
            logged: 0,
            suppressed: 0,
        });
        let mut earlier = 0;
        if now.duration_since(window.start) >= self.window {
            earlier = window.suppressed;
            *window = Window {
                start: now,
                logged: 0,
                suppressed: 0,
            };
        }
        if window.logged < self.lines {
            window.logged += 1;
            (
                Verdict::Log {
                    last: window.logged == self.lines,
                },
                earlier,
            )
        } else {
            window.suppressed += 1;
            (Verdict::Suppress, earlier)
        }
    }

    /// Forgets the windows that ended by `now`, returning those that suppressed lines: kind,
    /// peer and how many.
    pub fn take_ended(&self, now: Instant) -> Vec<(&'static str, String, u64)> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ended = Vec::new();
        keys.retain(|(kind, peer), window| {
            if now.duration_since(window.start) < self.window {
                return true;
            }
            if window.suppressed > 0 {
                ended.push((*kind, peer.clone(), window.suppressed));
            }
            false
        });
        ended.sort();
        ended
    }
}

static LIMITER: LazyLock<Limiter> =
    LazyLock::new(|| Limiter::new(LINES_PER_WINDOW, WINDOW, MAX_PEERS));

/// Logs `message`, a line of `kind` (a few words: "refused connection", "wrong cluster key")
/// about `peer`, as a warning, unless that peer has had its share of such lines in this
/// window.
pub fn warn(kind: &'static str, peer: &str, message: impl Display) {
    let (verdict, earlier) = LIMITER.check(kind, peer, Instant::now());
    if earlier > 0 {
        tracing::warn!("{}", suppressed_line(kind, peer, earlier));
    }
    match verdict {
        Verdict::Log { last: false } => tracing::warn!("{message}"),
        Verdict::Log { last: true } => tracing::warn!(
            "{message} (further '{kind}' lines about {peer} are suppressed for up to {} s)",
            WINDOW.as_secs()
        ),
        Verdict::Suppress => {}
    }
}

fn suppressed_line(kind: &str, peer: &str, count: u64) -> String {
    format!(
        "{count} more '{kind}' lines about {peer} were suppressed in {} s",
        WINDOW.as_secs()
    )
}

/// Logs, every few seconds, how many lines each window that ended suppressed. Runs until the
/// runtime ends; start it once per daemon.
pub fn spawn_summaries() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut every = tokio::time::interval(SUMMARY_EVERY);
        loop {
            every.tick().await;
            for (kind, peer, count) in LIMITER.take_ended(Instant::now()) {
                tracing::warn!("{}", suppressed_line(kind, &peer, count));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_peer_gets_its_lines_per_window_then_a_count() {
        let limiter = Limiter::new(3, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let verdicts: Vec<_> = (0..10)
            .map(|_| limiter.check("bad key", "10.0.0.1", at(1)).0)
            .collect();
        assert_eq!(
            verdicts[..4],
            [
                Verdict::Log { last: false },
                Verdict::Log { last: false },
                Verdict::Log { last: true },
                Verdict::Suppress
            ]
        );
        assert!(verdicts[3..].iter().all(|v| *v == Verdict::Suppress));
        // Another peer, and another kind of line, are counted on their own.
        assert_eq!(
            limiter.check("bad key", "10.0.0.2", at(2)),
            (Verdict::Log { last: false }, 0)
        );
        assert_eq!(
            limiter.check("no TLS", "10.0.0.1", at(2)),
            (Verdict::Log { last: false }, 0)
        );
        // Nothing ended yet.
        assert!(limiter.take_ended(at(30)).is_empty());
        // The next window of 10.0.0.1 says what the last one suppressed.
        assert_eq!(
            limiter.check("bad key", "10.0.0.1", at(61)),
            (Verdict::Log { last: false }, 7)
        );
        // Windows that ended quietly are summarized once, then forgotten.
        for _ in 0..5 {
            limiter.check("no TLS", "10.0.0.1", at(3));
        }
        assert_eq!(
            limiter.take_ended(at(70)),
            vec![("no TLS", "10.0.0.1".to_string(), 3)]
        );
        assert!(limiter.take_ended(at(200)).is_empty());
    }

    #[test]
    fn peers_beyond_the_limit_share_one_count() {
        let limiter = Limiter::new(2, Duration::from_secs(60), 3);
        let now = Instant::now();
        for peer in ["a", "b", "c"] {
            assert_eq!(
                limiter.check("k", peer, now).0,
                Verdict::Log { last: false }
            );
        }
        let verdicts: Vec<_> = (0..100)
            .map(|i| limiter.check("k", &format!("spoofed-{i}"), now).0)
            .collect();
        assert_eq!(verdicts[0], Verdict::Log { last: false });
        assert_eq!(verdicts[1], Verdict::Log { last: true });
        assert!(verdicts[2..].iter().all(|v| *v == Verdict::Suppress));
        let ended = limiter.take_ended(now + Duration::from_secs(60));
        assert_eq!(ended, vec![("k", OTHER_PEERS.to_string(), 98)]);
    }
}
