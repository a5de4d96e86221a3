//! `yctl report --export-trace`: the jobs that ended in the window as the CSV trace `ysim`
//! replays, and the summary line that goes with it.

use std::fmt::Write as _;
use ysched_common::time::{rfc3339, rfc3339_millis, Millis};
use ysched_proto::{TraceJob, TraceReply};
use ysched_report::trace::{write_trace, TraceRecord};

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

/// A job's row: times RFC 3339 in UTC with milliseconds, durations seconds, `mem` MiB; empty
/// where the job has nothing to say (`ysim`'s default). `checkpoint_interval` and
/// `checkpoint_write` are not recorded, and are always empty.
fn trace_record(j: &TraceJob) -> TraceRecord {
    TraceRecord {
        job_id: Some(j.job_id.clone()),
        submit_time: Some(rfc3339_millis(j.submit_ms)),
        tier: Some(j.tier.clone()),
        account: Some(j.account.clone()),
        user: Some(j.user.clone()),
        gpus: Some(j.gpus.to_string()),
        gpu_type: Some(j.gpu_types.join("|")),
        nodes: j.nodes.map(|n| n.to_string()),
        cpus: (j.cpus > 0).then(|| j.cpus.to_string()),
        mem: (j.mem_mib > 0).then(|| j.mem_mib.to_string()),
        duration: Some(trace_secs(j.duration_ms)),
        time_limit: j.time_limit_secs.map(|t| t.to_string()),
        checkpoint_interval: None,
        checkpoint_write: None,
        grace: j.grace_secs.map(|g| g.to_string()),
        outcome: Some(j.outcome.clone()),
        restarts: Some(j.restarts.to_string()),
    }
}

/// `yctl report --export-trace`: a header, then one row per job (RFC 4180 quoting, see
/// `ysched_report::trace`).
pub fn trace_csv(r: &TraceReply) -> String {
    let records: Vec<TraceRecord> = r.jobs.iter().map(trace_record).collect();
    write_trace(&records)
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
