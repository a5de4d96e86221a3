//! Reporting a test that could not run here as skipped, never passing it silently.

/// Says that the running test could not run here and passes it: one line
/// `SKIPPED: <test>: <why>` written straight to stderr (not captured by the test harness, so
/// it shows even when the test passes), which `scripts/test.sh` counts and lists at the end.
/// Never skip silently: a test that returns early without this line passed for nothing.
pub fn skipped(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}
