//! `yctl report` and `yctl usage import`: the usage report as a table, JSON, CSV or one
//! self-contained HTML file with SVG charts (drawn with `plotters`, no script, font file or
//! link), and the import of runs recorded elsewhere. Parsing and rendering are plain functions
//! of the reply, unit tested without a daemon.

use crate::client::{reply, Client};
use crate::output::{print_json, print_stdout, Column, Table};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, rfc3339, rfc3339_millis, Millis};
use ysched_proto::{
    ImportUsageRequest, ReportReply, ReportRequest, RunUsage, TierWait, TraceReply,
};

const DAY_MS: Millis = 86_400_000;
const HOUR_MS: f64 = 3_600_000.0;

/// `yctl report`'s options.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ReportArgs {
    /// The window: the last SPAN up to now (`7d`, `36h`, `2w`, `90m`)
    #[arg(long, value_name = "SPAN", conflicts_with_all = ["from", "to"])]
    pub since: Option<String>,
    /// Start of the window: RFC 3339 (`2026-01-05T08:00:00Z`, `...+02:00`) or `YYYY-MM-DD`
    /// (00:00 UTC) [default: seven days before --to]
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
    /// End of the window (not included), as --from [default: now]
    #[arg(long, value_name = "DATE")]
    pub to: Option<String>,
    /// Group usage by account, user or tier
    #[arg(long, value_name = "WHAT", default_value = "account",
          value_parser = ["account", "user", "tier"])]
    pub by: String,
    /// Print JSON
    #[arg(long, conflicts_with_all = ["csv", "html"])]
    pub json: bool,
    /// Print CSV: one row per group, then one for the whole cluster
    #[arg(long, conflicts_with = "html")]
    pub csv: bool,
    /// Write one self-contained HTML file with charts to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the jobs that ended in the window as a CSV trace `ysim --trace FILE` replays
    /// (`-`: stdout): one row per job, from its runs and its spec; jobs still running or
    /// back in the queue at the window's end are left out
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "csv", "html", "by"])]
    pub export_trace: Option<PathBuf>,
}

/// `yctl usage` subcommands.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum UsageCommand {
    /// Record runs from elsewhere (a migration from another scheduler's accounting), as if
    /// they had run here: FILE is a JSON array of runs (administrators only)
    Import {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

// ------------------------------------------------------------------ dates and spans

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `YYYY-MM-DD` (00:00 UTC), or RFC 3339: `YYYY-MM-DDTHH:MM[:SS[.frac]]` with `Z` or
/// `±HH:MM` (none: UTC); a space may stand for the `T`.
pub fn parse_date(input: &str) -> Result<Millis> {
    let s = input.trim();
    let bad = || {
        anyhow!(
            "invalid date {input:?}: expected YYYY-MM-DD or RFC 3339 (e.g. 2026-01-05 or \
             2026-01-05T08:00:00Z)"
        )
    };
    let num = |t: &str| -> Result<i64> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse().map_err(|_| bad())
    };
    let (date, time) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(bad());
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return Err(bad());
    }
    let (y, m, d) = (num(y)?, num(m)? as u32, num(d)? as u32);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return Err(bad());
    }
    let mut ms = days_from_civil(y, m, d) * DAY_MS;
    let Some(time) = time else {
        return Ok(ms);
    };
    // The zone: Z, +HH:MM, -HH:MM, or none (UTC).
    let (clock, offset_ms) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else if let Some(i) = time.rfind(['+', '-']) {
        let (c, zone) = time.split_at(i);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (h, mi) = zone[1..].split_once(':').ok_or_else(bad)?;
        let (h, mi) = (num(h)?, num(mi)?);
        if h > 23 || mi > 59 {
            return Err(bad());
        }
        (c, sign * (h * 3600 + mi * 60) * 1000)
    } else {
        (time, 0)
    };
    let (hms, frac) = match clock.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (clock, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    let (h, mi, sec) = match fields[..] {
        [h, mi] => (num(h)?, num(mi)?, 0),
        [h, mi, sec] => (num(h)?, num(mi)?, num(sec)?),
        _ => return Err(bad()),
    };
    if h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    ms += (h * 3600 + mi * 60 + sec) * 1000;
    if let Some(frac) = frac {
        num(frac)?;
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        ms += num(&digits)?;
    }
    Ok(ms - offset_ms)
}

/// A span like `7d`, `36h`, `2w`, `90m`, `3600s`, or several (`1d12h`), in milliseconds.
pub fn parse_span(input: &str) -> Result<Millis> {
    let s = input.trim();
    let bad = || anyhow!("invalid span {input:?}: expected e.g. 7d, 36h, 2w or 90m");
    let mut total: i64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: i64 = match c.to_ascii_lowercase() {
            'w' => 7 * DAY_MS,
            'd' => DAY_MS,
            'h' => 3_600_000,
            'm' => 60_000,
            's' => 1_000,
            _ => return Err(bad()),
        };
        let n: i64 = digits.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        digits.clear();
    }
    if !digits.is_empty() || total <= 0 {
        return Err(bad());
    }
    Ok(total)
}

/// The window `[from, to)` the options ask for, as `ReportRequest` takes it (0: schedd's
/// default: to now, from seven days before).
pub fn window(args: &ReportArgs, now: Millis) -> Result<(Millis, Millis)> {
    if let Some(span) = &args.since {
        return Ok((now - parse_span(span)?, now));
    }
    let from = args.from.as_deref().map(parse_date).transpose()?;
    let to = args.to.as_deref().map(parse_date).transpose()?;
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            bail!(
                "--from ({}) is not before --to ({})",
                rfc3339(f),
                rfc3339(t)
            );
        }
    }
    Ok((from.unwrap_or(0), to.unwrap_or(0)))
}

// ------------------------------------------------------------------ JSON

fn hours(ms: u64) -> f64 {
    ms as f64 / HOUR_MS
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn day_label(start_ms: Millis) -> String {
    rfc3339(start_ms)[..10].to_string()
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct WaitJson {
    pub tier: String,
    /// Runs that started in the window.
    pub starts: u64,
    pub wait_p50_secs: f64,
    pub wait_p95_secs: f64,
    pub wait_max_secs: f64,
}

fn waits_json(w: &[TierWait]) -> Vec<WaitJson> {
    w.iter()
        .map(|w| WaitJson {
            tier: w.tier.clone(),
            starts: w.starts,
            wait_p50_secs: w.wait_p50_ms as f64 / 1000.0,
            wait_p95_secs: w.wait_p95_ms as f64 / 1000.0,
            wait_max_secs: w.wait_max_ms as f64 / 1000.0,
        })
        .collect()
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ClusterJson {
    pub gpus: u32,
    pub capacity_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub used_gpu_seconds: f64,
    /// used / capacity; null when the capacity is 0.
    pub utilization: Option<f64>,
    pub jobs: u64,
    pub runs: u64,
    pub running: u64,
    pub preemptions: u64,
    pub checkpoints_saved: u64,
    /// checkpoints_saved / preemptions; null without preemptions.
    pub checkpoint_rate: Option<f64>,
    pub lost_gpu_hours: f64,
    pub lost_gpu_seconds: f64,
    /// Runs that ended back in the queue.
    pub restarts: u64,
    pub start_latency: Vec<WaitJson>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct GroupJson {
    pub name: String,
    pub gpu_hours: f64,
    pub gpu_seconds: f64,
    /// gpu_hours / the cluster's capacity.
    pub capacity_share: Option<f64>,
    pub cpu_hours: f64,
    pub jobs: u64,
    pub runs: u64,
    pub running: u64,
    pub restarts: u64,
    pub preemptions_suffered: u64,
    pub preemptions_caused: u64,
    pub checkpoints_saved: u64,
    pub checkpoint_rate: Option<f64>,
    pub lost_gpu_hours: f64,
    pub lost_gpu_seconds: f64,
    pub waits: Vec<WaitJson>,
    pub outcomes: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct DayJson {
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    pub capacity_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub utilization: Option<f64>,
    /// GPU-hours per group that day.
    pub groups: BTreeMap<String, f64>,
}

/// `yctl report --json`: stable field names; times RFC 3339 and epoch milliseconds.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ReportJson {
    pub from: String,
    pub to: String,
    pub from_ms: Millis,
    pub to_ms: Millis,
    pub generated: String,
    /// What `groups` are: account, user or tier.
    pub by: String,
    /// false: only the accounts you may charge are in `groups` and `days`.
    pub all_accounts: bool,
    pub cluster: ClusterJson,
    pub groups: Vec<GroupJson>,
    pub days: Vec<DayJson>,
}

pub fn report_json(r: &ReportReply) -> ReportJson {
    let c = r.cluster.clone().unwrap_or_default();
    ReportJson {
        from: rfc3339(r.from_ms),
        to: rfc3339(r.to_ms),
        from_ms: r.from_ms,
        to_ms: r.to_ms,
        generated: rfc3339(r.generated_ms),
        by: r.by.clone(),
        all_accounts: r.all_accounts,
        cluster: ClusterJson {
            gpus: c.gpus,
            capacity_gpu_hours: hours(c.capacity_gpu_ms),
            used_gpu_hours: hours(c.used_gpu_ms),
            used_gpu_seconds: secs(c.used_gpu_ms),
            utilization: ratio(c.used_gpu_ms, c.capacity_gpu_ms),
            jobs: c.jobs,
            runs: c.runs,
            running: c.running,
            preemptions: c.preemptions,
            checkpoints_saved: c.checkpoints_saved,
            checkpoint_rate: ratio(c.checkpoints_saved, c.preemptions),
            lost_gpu_hours: hours(c.lost_gpu_ms),
            lost_gpu_seconds: secs(c.lost_gpu_ms),
            restarts: c.restarts,
            start_latency: waits_json(&c.start_latency),
        },
        groups: r
            .groups
            .iter()
            .map(|g| GroupJson {
                name: g.name.clone(),
                gpu_hours: hours(g.gpu_ms),
                gpu_seconds: secs(g.gpu_ms),
                capacity_share: ratio(g.gpu_ms, c.capacity_gpu_ms),
                cpu_hours: hours(g.cpu_ms),
                jobs: g.jobs,
                runs: g.runs,
                running: g.running,
                restarts: g.restarts,
                preemptions_suffered: g.preemptions_suffered,
                preemptions_caused: g.preemptions_caused,
                checkpoints_saved: g.checkpoints_saved,
                checkpoint_rate: ratio(g.checkpoints_saved, g.preemptions_suffered),
                lost_gpu_hours: hours(g.lost_gpu_ms),
                lost_gpu_seconds: secs(g.lost_gpu_ms),
                waits: waits_json(&g.waits),
                outcomes: g
                    .outcomes
                    .iter()
                    .map(|o| (o.outcome.clone(), o.runs))
                    .collect(),
            })
            .collect(),
        days: r
            .days
            .iter()
            .map(|d| DayJson {
                date: day_label(d.start_ms),
                capacity_gpu_hours: hours(d.capacity_gpu_ms),
                used_gpu_hours: hours(d.used_gpu_ms),
                utilization: ratio(d.used_gpu_ms, d.capacity_gpu_ms),
                groups: d
                    .groups
                    .iter()
                    .map(|g| (g.name.clone(), hours(g.gpu_ms)))
                    .collect(),
            })
            .collect(),
    }
}

// ------------------------------------------------------------------ text

fn percent(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.1}%", r * 100.0))
}

fn wait_text(ms: Millis) -> String {
    format_elapsed((ms.max(0) as u64).div_ceil(1000))
}

fn waits_text(w: &[TierWait]) -> String {
    let parts: Vec<String> = w
        .iter()
        .map(|w| {
            format!(
                "{} {}/{} ({})",
                escape_for_terminal(&w.tier),
                wait_text(w.wait_p50_ms),
                wait_text(w.wait_p95_ms),
                w.starts
            )
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

const GROUP_COLUMNS: &[Column; 12] = &[
    Column::left("NAME"),
    Column::right("GPU-HOURS"),
    Column::right("SHARE"),
    Column::right("JOBS"),
    Column::right("RUNS"),
    Column::right("RUNNING"),
    Column::right("RESTARTS"),
    Column::right("PREEMPTED"),
    Column::right("CAUSED"),
    Column::right("CKPT-SAVED"),
    Column::right("LOST-GPU-H"),
    Column::left("WAIT P50/P95 (STARTS) BY TIER"),
];

/// The default text report: the cluster's lines, then one row per group.
pub fn format_report(r: &ReportReply) -> String {
    let j = report_json(r);
    let c = &j.cluster;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Usage from {} to {}, by {}{}",
        j.from,
        j.to,
        j.by,
        if j.all_accounts {
            ""
        } else {
            " (only the accounts you may charge)"
        }
    );
    let _ = writeln!(
        out,
        "Cluster: {} GPUs, capacity {:.1} GPU-hours, used {:.1} ({}); {} jobs, {} runs ended, \
         {} running",
        c.gpus,
        c.capacity_gpu_hours,
        c.used_gpu_hours,
        percent(c.utilization),
        c.jobs,
        c.runs,
        c.running
    );
    let _ = writeln!(
        out,
        "Preemptions: {}, checkpoint saved in {} ({}), {:.2} GPU-hours lost",
        c.preemptions,
        c.checkpoints_saved,
        percent(c.checkpoint_rate),
        c.lost_gpu_hours
    );
    let cluster = r.cluster.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "Start latency p50/p95 (starts): {}",
        waits_text(&cluster.start_latency)
    );
    let days: Vec<String> = j
        .days
        .iter()
        .map(|d| format!("{} {}", &d.date[5..], percent(d.utilization)))
        .collect();
    if !days.is_empty() {
        let _ = writeln!(out, "Daily GPU utilization: {}", days.join(", "));
    }
    out.push('\n');
    let mut table = Table::with_capacity(GROUP_COLUMNS, r.groups.len());
    for (g, gj) in r.groups.iter().zip(&j.groups) {
        table.push_row([
            escape_for_terminal(&g.name),
            Cow::Owned(format!("{:.1}", gj.gpu_hours)),
            Cow::Owned(percent(gj.capacity_share)),
            Cow::Owned(g.jobs.to_string()),
            Cow::Owned(g.runs.to_string()),
            Cow::Owned(g.running.to_string()),
            Cow::Owned(g.restarts.to_string()),
            Cow::Owned(g.preemptions_suffered.to_string()),
            Cow::Owned(g.preemptions_caused.to_string()),
            Cow::Owned(if g.preemptions_suffered == 0 {
                "-".into()
            } else {
                format!(
                    "{}/{} ({})",
                    g.checkpoints_saved,
                    g.preemptions_suffered,
                    percent(gj.checkpoint_rate)
                )
            }),
            Cow::Owned(format!("{:.2}", gj.lost_gpu_hours)),
            Cow::Owned(waits_text(&g.waits)),
        ]);
    }
    if r.groups.is_empty() {
        out.push_str("(no usage in this window)\n");
    } else {
        table.render(&mut out, true);
    }
    out
}

// ------------------------------------------------------------------ CSV

/// A CSV field, quoted when it must be (RFC 4180).
fn csv_field(s: &str) -> Cow<'_, str> {
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

// ------------------------------------------------------------------ trace export

/// The columns of `--export-trace`: the CSV trace format of `docs/simulation.md`, then
/// `outcome` and `restarts`, which `ysim` ignores.
pub const TRACE_COLUMNS: &str = "job_id,submit_time,tier,account,user,gpus,gpu_type,nodes,\
    cpus,mem,duration,time_limit,checkpoint_interval,checkpoint_write,grace,outcome,restarts";

/// Milliseconds as seconds: `12`, `12.5`, `0.001`.
fn trace_secs(ms: Millis) -> String {
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

/// Writes `text` to `path` whole or not at all, safely in a directory other users may write
/// (`yctl report` often runs as root): a reader never sees half of it, and nothing another user
/// planted there is followed, written through, or left able to read the text.
///
/// The text goes to a new file in the same directory under a random name
/// (`.NAME.XXXXXX.tmp`), created exclusively (`O_CREAT|O_EXCL`: a file or symlink planted under
/// that name makes it pick another, it never opens one), then synced and renamed over `path`.
/// A rename replaces a symlink at `path` itself, never what it points to. The file gets the
/// mode of the regular file it replaces (set before the rename), or else a new file's mode
/// (0666 less the umask).
fn write_whole(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("cannot write {}: not a file name", path.display()))?
        .to_string_lossy();
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // Only a regular file's mode is kept: a symlink's target is not looked at.
    let replaced_mode = std::fs::symlink_metadata(path)
        .ok()
        .filter(|meta| meta.file_type().is_file())
        .map(|meta| meta.mode() & 0o777);
    // Short enough that the random part and the suffix fit a file name's 255 bytes.
    let stem: String = name.chars().take(64).collect();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{stem}."))
        .suffix(".tmp")
        // Private until the text is whole; a new file's mode is what the umask leaves of 0666.
        .permissions(std::fs::Permissions::from_mode(
            if replaced_mode.is_some() {
                0o600
            } else {
                0o666
            },
        ))
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    let written = tmp
        .write_all(text.as_bytes())
        .and_then(|()| match replaced_mode {
            Some(mode) => tmp
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode)),
            None => Ok(()),
        })
        .and_then(|()| tmp.as_file().sync_all());
    // On error the temporary file is removed when `tmp` is dropped.
    written.with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}

// ------------------------------------------------------------------ HTML

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

mod charts {
    //! The report's charts as SVG text, drawn with `plotters`' SVG backend. Text is SVG
    //! `<text>` in the browser's sans-serif: no font file is read or linked.

    use super::{day_label, hours, ReportReply};
    use plotters::coord::ranged1d::{IntoSegmentedCoord, SegmentValue};
    use plotters::prelude::*;

    const W: u32 = 900;
    const H: u32 = 340;
    /// Colour-blind-safe (Okabe–Ito), then some more.
    const COLOURS: [RGBColor; 12] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(213, 94, 0),
        RGBColor(240, 228, 66),
        RGBColor(0, 0, 0),
        RGBColor(136, 34, 85),
        RGBColor(68, 170, 153),
        RGBColor(153, 153, 51),
        RGBColor(170, 68, 153),
    ];

    type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

    fn finish(svg: String) -> String {
        // Inline in HTML5 an SVG needs no namespace: leave no URL in the file.
        svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
    }

    fn label_at(labels: &[String], v: &SegmentValue<u32>) -> String {
        match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        }
    }

    /// Daily GPU utilization, in percent, one bar per day.
    pub fn utilization(r: &ReportReply) -> DrawResult<String> {
        let labels: Vec<String> = r.days.iter().map(|d| day_label(d.start_ms)).collect();
        let values: Vec<f64> = r
            .days
            .iter()
            .map(|d| {
                if d.capacity_gpu_ms == 0 {
                    0.0
                } else {
                    100.0 * d.used_gpu_ms as f64 / d.capacity_gpu_ms as f64
                }
            })
            .collect();
        let top = values.iter().copied().fold(100.0, f64::max);
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
            root.fill(&WHITE)?;
            // The segments are inclusive of the range's end: one per label.
            let last = labels.len().saturating_sub(1) as u32;
            let mut chart = ChartBuilder::on(&root)
                .caption("Daily GPU utilization (%)", ("sans-serif", 18))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .x_labels(labels.len().max(1))
                .x_label_formatter(&|v| label_at(&labels, v))
                .y_desc("% of capacity")
                .draw()?;
            chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let i = i as u32;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *v),
                    ],
                    COLOURS[0].filled(),
                );
                bar.set_margin(0, 0, 6, 6);
                bar
            }))?;
            root.present()?;
        }
        Ok(finish(svg))
    }

    /// GPU-hours per group, stacked per day.
    pub fn gpu_hours_by_day(r: &ReportReply) -> DrawResult<String> {
        let labels: Vec<String> = r.days.iter().map(|d| day_label(d.start_ms)).collect();
        let names: Vec<&str> = r.groups.iter().map(|g| g.name.as_str()).collect();
        let top = r
            .days
            .iter()
            .map(|d| hours(d.groups.iter().map(|g| g.gpu_ms).sum()))
            .fold(0.0, f64::max)
            .max(1e-3)
            // Room for the legend above the bars.
            * 1.35;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
            root.fill(&WHITE)?;
            // The segments are inclusive of the range's end: one per label.
            let last = labels.len().saturating_sub(1) as u32;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("GPU-hours per {} and day", r.by),
                    ("sans-serif", 18),
                )
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .x_labels(labels.len().max(1))
                .x_label_formatter(&|v| label_at(&labels, v))
                .y_desc("GPU-hours")
                .draw()?;
            // Each group's bars sit on the ones of the groups before it.
            let mut base = vec![0.0f64; r.days.len()];
            for (gi, name) in names.iter().enumerate() {
                let colour = COLOURS[gi % COLOURS.len()];
                let mut bars = Vec::new();
                for (di, day) in r.days.iter().enumerate() {
                    let h = day
                        .groups
                        .iter()
                        .find(|g| g.name == *name)
                        .map_or(0.0, |g| hours(g.gpu_ms));
                    if h > 0.0 {
                        let i = di as u32;
                        let mut bar = Rectangle::new(
                            [
                                (SegmentValue::Exact(i), base[di]),
                                (SegmentValue::Exact(i + 1), base[di] + h),
                            ],
                            colour.filled(),
                        );
                        bar.set_margin(0, 0, 6, 6);
                        bars.push(bar);
                        base[di] += h;
                    }
                }
                chart
                    .draw_series(bars)?
                    .label(name.to_string())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                    });
            }
            if !names.is_empty() {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK.mix(0.3))
                    .draw()?;
            }
            root.present()?;
        }
        Ok(finish(svg))
    }

    /// Start latency per tier: p50 and p95 side by side.
    pub fn wait_by_tier(r: &ReportReply) -> DrawResult<String> {
        let waits = r
            .cluster
            .as_ref()
            .map(|c| c.start_latency.clone())
            .unwrap_or_default();
        let max_ms = waits.iter().map(|w| w.wait_p95_ms).max().unwrap_or(0);
        let (unit, per) = if max_ms < 120_000 {
            ("seconds", 1_000.0)
        } else if max_ms < 7_200_000 {
            ("minutes", 60_000.0)
        } else {
            ("hours", 3_600_000.0)
        };
        let mut labels = Vec::new();
        let mut values = Vec::new();
        for w in &waits {
            labels.push(format!("{} p50", w.tier));
            values.push(w.wait_p50_ms as f64 / per);
            labels.push(format!("{} p95", w.tier));
            values.push(w.wait_p95_ms as f64 / per);
        }
        let top = values.iter().copied().fold(0.0, f64::max).max(1.0) * 1.1;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
            root.fill(&WHITE)?;
            // The segments are inclusive of the range's end: one per label.
            let last = labels.len().saturating_sub(1) as u32;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("Wait to start by tier ({unit})"),
                    ("sans-serif", 18),
                )
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .x_labels(labels.len().max(1))
                .x_label_formatter(&|v| label_at(&labels, v))
                .y_desc(unit)
                .draw()?;
            chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let colour = COLOURS[if i % 2 == 0 { 4 } else { 5 }];
                let i = i as u32;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *v),
                    ],
                    colour.filled(),
                );
                bar.set_margin(0, 0, 8, 8);
                bar
            }))?;
            root.present()?;
        }
        Ok(finish(svg))
    }
}

/// `yctl report --html`: one file, readable offline in any browser: the cluster's lines and
/// the groups as tables, and three SVG charts inline (daily utilization, GPU-hours per group
/// stacked per day, wait by tier). No script, no font file, no link.
pub fn report_html(r: &ReportReply) -> Result<String> {
    let j = report_json(r);
    let c = &j.cluster;
    let chart = |name: &str, svg: Result<String, Box<dyn std::error::Error>>| {
        svg.map_err(|e| anyhow!("cannot draw the {name} chart: {e}"))
    };
    let utilization = chart("utilization", charts::utilization(r))?;
    let by_day = chart("GPU-hours", charts::gpu_hours_by_day(r))?;
    let waits = chart("wait", charts::wait_by_tier(r))?;
    let e = html_escape;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>ysched usage {} to {}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 2em; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 4px 8px; }}\n\
         td.n {{ text-align: right; }}\n th {{ background: #f0f0f0; }}\n\
         figure {{ margin: 1.5em 0; }}\n</style>\n</head>\n<body>\n\
         <h1>Cluster usage</h1>\n<p>From {} to {}, by {}. Generated {}.{}</p>\n",
        e(&j.from),
        e(&j.to),
        e(&j.from),
        e(&j.to),
        e(&j.by),
        e(&j.generated),
        if j.all_accounts {
            ""
        } else {
            " Only the accounts you may charge are shown."
        }
    );
    let cluster = r.cluster.clone().unwrap_or_default();
    let _ = write!(
        h,
        "<table>\n<tr><th>GPUs</th><td class=\"n\">{}</td></tr>\n\
         <tr><th>Capacity (GPU-hours)</th><td class=\"n\">{:.1}</td></tr>\n\
         <tr><th>Used (GPU-hours)</th><td class=\"n\">{:.1} ({})</td></tr>\n\
         <tr><th>Jobs / runs ended / running</th><td class=\"n\">{} / {} / {}</td></tr>\n\
         <tr><th>Preemptions (checkpoint saved)</th><td class=\"n\">{} ({}, {})</td></tr>\n\
         <tr><th>GPU-hours lost to preemption</th><td class=\"n\">{:.2}</td></tr>\n\
         <tr><th>Start latency p50/p95 (starts)</th><td>{}</td></tr>\n</table>\n",
        c.gpus,
        c.capacity_gpu_hours,
        c.used_gpu_hours,
        percent(c.utilization),
        c.jobs,
        c.runs,
        c.running,
        c.preemptions,
        c.checkpoints_saved,
        percent(c.checkpoint_rate),
        c.lost_gpu_hours,
        e(&waits_text(&cluster.start_latency))
    );
    let _ = write!(
        h,
        "<h2>By {}</h2>\n<table>\n<tr><th>{}</th><th>GPU-hours</th><th>Share of capacity</th>\
         <th>Jobs</th><th>Runs</th><th>Running</th><th>Restarts</th><th>Preempted</th>\
         <th>Caused</th><th>Checkpoint saved</th><th>GPU-hours lost</th>\
         <th>Wait p50/p95 (starts) by tier</th></tr>\n",
        e(&j.by),
        e(&j.by)
    );
    for (g, gj) in r.groups.iter().zip(&j.groups) {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{:.2}</td><td>{}</td></tr>",
            e(&g.name),
            gj.gpu_hours,
            percent(gj.capacity_share),
            g.jobs,
            g.runs,
            g.running,
            g.restarts,
            g.preemptions_suffered,
            g.preemptions_caused,
            if g.preemptions_suffered == 0 {
                "-".to_string()
            } else {
                format!(
                    "{}/{} ({})",
                    g.checkpoints_saved,
                    g.preemptions_suffered,
                    percent(gj.checkpoint_rate)
                )
            },
            gj.lost_gpu_hours,
            e(&waits_text(&g.waits))
        );
    }
    h.push_str("</table>\n");
    for svg in [utilization, by_day, waits] {
        let _ = write!(h, "<figure>\n{svg}\n</figure>\n");
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

// ------------------------------------------------------------------ usage import

/// One run of a usage file: `RunRecord`'s fields (times in epoch milliseconds); `uid`, `cpus`,
/// `queued_at` (default: `start`), `restart_count`, `outcome` (default `COMPLETED`) and the
/// preemption fields may be left out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageFileRun {
    job_id: u64,
    #[serde(default)]
    restart_count: u32,
    account: String,
    user: String,
    #[serde(default)]
    uid: u32,
    tier: String,
    gpus: u32,
    #[serde(default)]
    cpus: u32,
    #[serde(default)]
    queued_at: Option<Millis>,
    start: Millis,
    end: Millis,
    #[serde(default = "completed")]
    outcome: String,
    #[serde(default)]
    preempted_by: Option<u64>,
    #[serde(default)]
    preemptor_account: Option<String>,
    #[serde(default)]
    checkpoint_saved: bool,
    #[serde(default)]
    lost_gpu_secs: u64,
}

fn completed() -> String {
    "COMPLETED".into()
}

/// The runs of a usage file (see [`UsageFileRun`]) as the wire takes them.
pub fn parse_usage_file(text: &str) -> Result<Vec<RunUsage>> {
    let runs: Vec<UsageFileRun> =
        serde_json::from_str(text).context("expected a JSON array of runs")?;
    Ok(runs
        .into_iter()
        .map(|r| RunUsage {
            job_id: r.job_id,
            restart_count: r.restart_count,
            account: r.account,
            user: r.user,
            uid: r.uid,
            tier: r.tier,
            gpus: r.gpus,
            cpus: r.cpus,
            queued_at_ms: r.queued_at.unwrap_or(r.start),
            start_ms: r.start,
            end_ms: r.end,
            outcome: r.outcome,
            preempted_by: r.preempted_by.unwrap_or(0),
            preemptor_account: r.preemptor_account.unwrap_or_default(),
            checkpoint_saved: r.checkpoint_saved,
            lost_gpu_secs: r.lost_gpu_secs,
        })
        .collect())
}

/// How many runs go in one request: with names of at most 256 bytes (schedd refuses longer
/// ones), a request stays below schedd's message limit (at least 8 MiB).
const IMPORT_BATCH: usize = 5_000;

pub async fn import(client: &mut Client, file: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let runs = parse_usage_file(&text).with_context(|| format!("{}", file.display()))?;
    let mut imported = 0;
    for chunk in runs.chunks(IMPORT_BATCH) {
        imported += reply(
            client
                .import_usage(ImportUsageRequest {
                    runs: chunk.to_vec(),
                })
                .await,
        )?
        .imported;
    }
    let skipped = runs.len() as u64 - imported;
    print_stdout(&format!(
        "imported {imported} runs from {}{}\n",
        file.display(),
        if skipped > 0 {
            format!(" ({skipped} already recorded or repeated)")
        } else {
            String::new()
        }
    ))
}

/// `yctl report`.
pub async fn report(client: &mut Client, args: &ReportArgs) -> Result<()> {
    let (from_ms, to_ms) = window(args, ysched_common::time::now_ms())?;
    if let Some(path) = &args.export_trace {
        let r = reply(
            client
                .export_trace(ReportRequest {
                    from_ms,
                    to_ms,
                    by: String::new(),
                })
                .await,
        )?;
        let csv = trace_csv(&r);
        if path.as_os_str() == "-" {
            print_stdout(&csv)?;
            eprintln!("{}", escape_for_terminal(&trace_summary(&r, "stdout")));
        } else {
            write_whole(path, &csv)?;
            let summary = trace_summary(&r, &path.display().to_string());
            print_stdout(&format!("{}\n", escape_for_terminal(&summary)))?;
        }
        return Ok(());
    }
    let r = reply(
        client
            .report(ReportRequest {
                from_ms,
                to_ms,
                by: args.by.clone(),
            })
            .await,
    )?;
    if args.json {
        print_json(&report_json(&r))
    } else if args.csv {
        print_stdout(&report_csv(&r))
    } else if let Some(path) = &args.html {
        // Written whole or not at all: a timer's reader never sees half a report.
        write_whole(path, &report_html(&r)?)
    } else {
        print_stdout(&format_report(&r))
    }
}

#[cfg(test)]
mod tests;
