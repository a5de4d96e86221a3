//! `yctl report --csv`: one row per group, then one for the whole cluster.

use super::json::{report_json, WaitJson};
use std::borrow::Cow;
use std::fmt::Write as _;
use ysched_proto::ReportReply;

/// A CSV field, quoted when it must be (RFC 4180).
pub(super) fn csv_field(s: &str) -> Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        Cow::Owned(format!("\"{}\"", s.replace('"', "\"\"")))
    } else {
        Cow::Borrowed(s)
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.6}"))
}

/// `yctl report --csv`: a header, one row per group, then the whole cluster (`by` =
/// `cluster`). Waits are columns per tier (`wait_p50_secs_<tier>`, `..._p95_...`).
pub fn report_csv(r: &ReportReply) -> String {
    let j = report_json(r);
    let tiers: Vec<String> = j
        .cluster
        .start_latency
        .iter()
        .map(|w| w.tier.clone())
        .collect();
    let mut out = String::from(
        "by,name,gpu_hours,gpu_seconds,capacity_share,cpu_hours,jobs,runs,running,restarts,\
         preemptions_suffered,preemptions_caused,checkpoints_saved,checkpoint_rate,\
         lost_gpu_hours",
    );
    for t in &tiers {
        let t = csv_field(t);
        let _ = write!(out, ",starts_{t},wait_p50_secs_{t},wait_p95_secs_{t}");
    }
    out.push('\n');
    let waits = |out: &mut String, w: &[WaitJson]| {
        for t in &tiers {
            match w.iter().find(|w| &w.tier == t) {
                Some(w) => {
                    let _ = write!(out, ",{},{},{}", w.starts, w.wait_p50_secs, w.wait_p95_secs);
                }
                None => out.push_str(",0,,"),
            }
        }
        out.push('\n');
    };
    for g in &j.groups {
        let _ = write!(
            out,
            "{},{},{:.6},{:.3},{},{:.6},{},{},{},{},{},{},{},{},{:.6}",
            csv_field(&j.by),
            csv_field(&g.name),
            g.gpu_hours,
            g.gpu_seconds,
            opt(g.capacity_share),
            g.cpu_hours,
            g.jobs,
            g.runs,
            g.running,
            g.restarts,
            g.preemptions_suffered,
            g.preemptions_caused,
            g.checkpoints_saved,
            opt(g.checkpoint_rate),
            g.lost_gpu_hours
        );
        waits(&mut out, &g.waits);
    }
    let c = &j.cluster;
    let _ = write!(
        out,
        "cluster,,{:.6},{:.3},{},,{},{},{},{},{},{},{},{},{:.6}",
        c.used_gpu_hours,
        c.used_gpu_seconds,
        opt(c.utilization),
        c.jobs,
        c.runs,
        c.running,
        c.restarts,
        c.preemptions,
        c.preemptions,
        c.checkpoints_saved,
        opt(c.checkpoint_rate),
        c.lost_gpu_hours
    );
    waits(&mut out, &c.start_latency);
    out
}
