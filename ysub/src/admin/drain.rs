//! Draining and resuming: what a drain reason must be, and what `yctl resume NODE --gpu N`
//! prints of each GPU.

use anyhow::{anyhow, Result};
use ysched_common::text::{check_printable, escape_for_terminal};
use ysched_proto::GpuResumed;

/// What `yctl resume NODE --gpu N` prints, one line per GPU, and whether every GPU is back
/// in service (else yctl exits 1: one still fails).
pub fn format_gpu_resumes(node: &str, gpus: &[GpuResumed]) -> (String, bool) {
    let node = escape_for_terminal(node);
    let mut out = String::new();
    let mut all_back = true;
    for gpu in gpus {
        let index = gpu.index;
        let line = if !gpu.still_failing.is_empty() {
            all_back = false;
            format!(
                "GPU {index} of {node} still reports: {}; it is out of service again (repair \
                 it, then resume it again)",
                escape_for_terminal(&gpu.still_failing)
            )
        } else if gpu.confirmed {
            format!("GPU {index} of {node} is back in service")
        } else {
            format!(
                "GPU {index} of {node} is back in service, not yet confirmed by its node ({}): \
                 if the node still finds it failing, it goes out of service again",
                escape_for_terminal(&gpu.pending)
            )
        };
        out.push_str(&line);
        out.push('\n');
    }
    (out, all_back)
}

/// A drain reason must say something, and it is shown to everyone by `yctl nodes` and
/// `yctl show job`: no control characters, at most `limits::DRAIN_REASON` bytes.
pub fn check_drain_reason(reason: &str) -> Result<()> {
    if reason.trim().is_empty() {
        return Err(anyhow!("--reason must not be empty"));
    }
    ysched_common::limits::DRAIN_REASON
        .check_len(reason)
        .map_err(|e| anyhow!(e))?;
    check_printable("drain reason", reason).map_err(|e| anyhow!(e))
}
