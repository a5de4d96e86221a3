//! Waiting for a condition instead of sleeping: polling it, or a file a job writes.

use std::path::Path;
use std::time::{Duration, Instant};

/// Polls `cond` until true or panics after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a file a job writes, waiting until its last line is complete. A shell's `> file`
/// creates the file before the command writes a byte, so "it exists" alone can read nothing.
pub fn read_when_exists(p: &Path, timeout: Duration) -> String {
    let mut text = String::new();
    wait_until(
        timeout,
        &format!("a complete line in {}", p.display()),
        || {
            text = std::fs::read_to_string(p).unwrap_or_default();
            text.ends_with('\n')
        },
    );
    text
}
