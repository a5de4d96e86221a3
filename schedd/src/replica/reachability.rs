//! Whether each other replica answers, as this one's leader or candidate finds when it sends:
//! a replica that stops answering is logged once, then every [`REPEAT_EVERY`] while it lasts,
//! and once when it answers again. openraft logs each failed send itself, several a second
//! per down replica (schedd keeps those out of its log: see `main`'s filter).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a replica that still does not answer is logged again.
pub const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// A replica that does not answer: since when, and when it was last logged.
struct Down {
    since: Instant,
    logged: Instant,
}

/// The replicas that do not answer this one.
#[derive(Default)]
pub struct Reachability {
    down: Mutex<HashMap<u64, Down>>,
}

impl Reachability {
    /// A send to replica `target` (at `addr`) failed (`why`).
    pub fn failed(&self, target: u64, addr: &str, why: &str) {
        let now = Instant::now();
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        match down.get_mut(&target) {
            None => {
                down.insert(
                    target,
                    Down {
                        since: now,
                        logged: now,
                    },
                );
                tracing::warn!(
                    "replica {target} at {addr} does not answer ({why}); tried again quietly, \
                     and logged again every {} s while it lasts",
                    REPEAT_EVERY.as_secs()
                );
            }
            Some(d) if now.duration_since(d.logged) >= REPEAT_EVERY => {
                d.logged = now;
                tracing::warn!(
                    "replica {target} at {addr} still does not answer after {} s ({why})",
                    now.duration_since(d.since).as_secs()
                );
            }
            Some(_) => {}
        }
    }

    /// Replica `target` answered.
    pub fn answered(&self, target: u64) {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = down.remove(&target) {
            tracing::warn!(
                "replica {target} answers again after {} s",
                d.since.elapsed().as_secs()
            );
        }
    }

    /// Whether replica `target` is taken not to answer now.
    #[cfg(test)]
    fn is_down(&self, target: u64) -> bool {
        self.down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_down_from_its_first_failure_until_it_answers() {
        let r = Reachability::default();
        assert!(!r.is_down(2));
        r.failed(2, "10.0.0.2:7000", "connection refused");
        r.failed(2, "10.0.0.2:7000", "connection refused");
        assert!(r.is_down(2));
        assert!(!r.is_down(3));
        r.answered(2);
        assert!(!r.is_down(2));
        // Answering when up says nothing and changes nothing.
        r.answered(3);
        assert!(!r.is_down(3));
    }
}
