//! Latency stamps for measuring a job's cycle (schedd, noded and the node's supervisor): with
//! `YSCHED_LATENCY_STAMPS=<file>` in the environment of schedd or noded (the supervisor inherits
//! noded's), each stamp appends `<realtime µs> <pid> <label> <job id>` to the file; without it,
//! nothing.
//!
//! A measurement aid (see docs/benchmarks.md, "Latency stamps"): the
//! realtime clock, so that the stamps of noded, the supervisor and a job's own `date +%s%N`
//! line up.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

/// The environment variable naming the file stamps go to.
pub const STAMPS_ENV: &str = "YSCHED_LATENCY_STAMPS";

fn sink() -> Option<&'static File> {
    static SINK: OnceLock<Option<File>> = OnceLock::new();
    SINK.get_or_init(|| {
        let path = std::env::var_os(STAMPS_ENV)?;
        // Not blocking: a FIFO without a reader is refused (no stamps), not waited on.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .ok()
    })
    .as_ref()
}

/// Appends one stamp (one `write`, whole: `O_APPEND`), if stamps are asked for.
pub fn stamp(label: &str, job_id: u64) {
    let Some(mut file) = sink() else {
        return;
    };
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let line = format!("{micros} {} {label} {job_id}\n", std::process::id());
    let _ = file.write_all(line.as_bytes());
}
