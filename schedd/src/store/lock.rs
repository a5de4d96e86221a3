//! sled allows one process per store: a `schedd` started while the one before it is still
//! stopping (a quick restart) waits for its lock, rather than fail at once, and one that
//! finds the store in use for good says which file to look at.

use super::{Error, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long an opening waits for another process to let go of the store's lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// How often the lock is tried again meanwhile.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Opens the store in `dir` with `open`, waiting up to [`LOCK_WAIT`] while another process
/// holds its lock (said once in the log).
pub(super) fn open_when_unlocked(
    dir: &Path,
    open: impl Fn() -> sled::Result<sled::Db>,
) -> Result<sled::Db> {
    let start = Instant::now();
    let mut said = false;
    loop {
        match open() {
            Err(e) if is_locked(&e) => {
                if start.elapsed() >= LOCK_WAIT {
                    return Err(Error::Locked {
                        path: dir.display().to_string(),
                        secs: LOCK_WAIT.as_secs(),
                    });
                }
                if !said {
                    said = true;
                    tracing::warn!(
                        "the state store {} is in use by another process (a schedd still \
                         stopping?): waiting up to {} s for it to let go",
                        dir.display(),
                        LOCK_WAIT.as_secs()
                    );
                }
                std::thread::sleep(RETRY_EVERY);
            }
            Err(why) => {
                return Err(Error::Open {
                    path: dir.display().to_string(),
                    why,
                })
            }
            Ok(db) => {
                if said {
                    tracing::warn!(
                        "the state store {} was let go after {:.1} s",
                        dir.display(),
                        start.elapsed().as_secs_f64()
                    );
                }
                return Ok(db);
            }
        }
    }
}

/// Whether sled refused to open because another process holds the store's lock.
fn is_locked(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opening_waits_for_the_lock_and_then_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let open = || sled::Config::new().path(&path).open();
        let first = open().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                tx.send(()).unwrap();
                open_when_unlocked(&path, || sled::Config::new().path(&path).open())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        };
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        assert!(!waiter.is_finished(), "it did not wait for the lock");
        drop(first);
        assert_eq!(waiter.join().unwrap(), Ok(()));
    }
}
