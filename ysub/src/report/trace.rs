//! `yctl report --export-trace`: the jobs that ended in the window as the CSV trace `ysim`
//! replays, and the summary line that goes with it.

use super::csv::csv_field;
use std::fmt::Write as _;
use ysched_common::time::{rfc3339, rfc3339_millis, Millis};
use ysched_proto::TraceReply;

/// The columns of `--export-trace`: the CSV trace format of `docs/simulation.md`, then
/// `outcome` and `restarts`, which `ysim` ignores.
pub const TRACE_COLUMNS: &str = "job_id,submit_time,tier,account,user,gpus,gpu_type,nodes,\
    cpus,mem,duration,time_limit,checkpoint_interval,checkpoint_write,grace,outcome,restarts";

/// Milliseconds as seconds: `12`, `12.5`, `0.001`.
pub(super) fn trace_secs(ms: Millis) -> String {
    let ms = ms.max(0);
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        let s = format!("{}.{:03}", ms / 1000, ms % 1000);
        s.trim_end_matches('0').to_string()
    }
}

/// `yctl report --export-trace`: a header, then one row per job (RFC 4180 quoting). Times
/// are RFC 3339 in UTC with milliseconds, durations seconds; `mem` is MiB; empty fields take
/// `ysim`'s default (`checkpoint_interval` and `checkpoint_write` are not recorded, and are
/// always empty).
pub fn trace_csv(r: &TraceReply) -> String {
    let mut out = String::with_capacity(64 * (r.jobs.len() + 1));
    out.push_str(TRACE_COLUMNS);
    out.push('\n');
    let opt = |v: Option<String>| v.unwrap_or_default();
    for j in &r.jobs {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},,,{},{},{}",
            csv_field(&j.job_id),
            rfc3339_millis(j.submit_ms),
            csv_field(&j.tier),
            csv_field(&j.account),
            csv_field(&j.user),
            j.gpus,
            csv_field(&j.gpu_types.join("|")),
            opt(j.nodes.map(|n| n.to_string())),
            if j.cpus > 0 {
                j.cpus.to_string()
            } else {
                String::new()
            },
            if j.mem_mib > 0 {
                j.mem_mib.to_string()
            } else {
                String::new()
            },
            trace_secs(j.duration_ms),
            opt(j.time_limit_secs.map(|t| t.to_string())),
            opt(j.grace_secs.map(|g| g.to_string())),
            csv_field(&j.outcome),
            j.restarts
        );
    }
    out
}

/// What `--export-trace` tells on stderr: how many jobs, the window, what was left out.
pub fn trace_summary(r: &TraceReply, to: &str) -> String {
    let mut s = format!(
        "exported {} job{} that ended from {} to {} to {to}",
        r.jobs.len(),
        if r.jobs.len() == 1 { "" } else { "s" },
        rfc3339(r.from_ms),
        rfc3339(r.to_ms)
    );
    if r.unfinished > 0 {
        let _ = write!(
            s,
            "; {} job{} requeued and not over at the window's end left out",
            r.unfinished,
            if r.unfinished == 1 { "" } else { "s" }
        );
    }
    if !r.all_accounts {
        s.push_str(" (only the accounts you may charge)");
    }
    s
}
