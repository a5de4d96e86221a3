//! Jobs from a CSV file, in the format `docs/simulation.md` defines (and `yctl report
//! --export-trace` writes): a header row naming the columns, in any order, then one job per
//! row. Required: `submit_time`, `gpus`, `duration`. Optional (default): `job_id` (the row
//! number), `tier` (the config's default tier), `account` (the user), `user` (`user`),
//! `gpu_type` (any), `nodes` (1), `cpus` (1), `mem` (none), `time_limit` (none),
//! `checkpoint_interval` (0: never), `checkpoint_write` (0: instant), `grace` (the tier's).
//! Unknown columns are ignored, lines starting with `#` and blank lines are skipped, fields
//! may be quoted as in RFC 4180.
//!
//! Times: `submit_time` is seconds (a number, fractions allowed) from any origin, or an RFC
//! 3339 time (`2026-03-02T09:30:00Z`) or day; the simulation starts at the earliest one.
//! Durations are seconds (`5400`), a number with a unit (`90s`, `30m`, `1.5h`, `2d`, `1w`), or
//! Slurm's `[D-]HH:MM:SS`. Both are read by `common::time`.
//!
//! Also here: a cluster as CSV (`name,gpus,model,cpus,mem,nvlink`) and the uniform cluster
//! the CSV workload runs on without one.

use super::{SimJob, SimNode, Workload, SEC};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use ysched_common::time::Millis;
use ysched_report::csv_rows;
use ysched_report::trace::{read_trace, TraceRecord};

/// Splits one CSV record (no embedded newlines) into fields, unquoting `"..."` with `""` as
/// a quote (`ysched_report::csv_rows`).
pub fn split_line(line: &str) -> Result<Vec<String>> {
    Ok(csv_rows::split_line(line)?)
}

/// Rows of a CSV text as maps from column name (lower case) to field, with their line numbers
/// (`ysched_report::csv_rows`).
pub fn records(text: &str) -> Result<Vec<(usize, BTreeMap<String, String>)>> {
    Ok(csv_rows::records(text)?)
}

/// A duration: seconds (`5400`, `0.5`), with a unit (`90s`, `30m`, `1.5h`, `2d`, `1w`), or
/// Slurm's `[D-]HH:MM:SS` / `MM:SS` (`common::time::parse_duration_ms`). Milliseconds.
pub fn parse_duration(text: &str) -> Result<Millis> {
    Ok(ysched_common::time::parse_duration_ms(text)?)
}

/// An instant: seconds from any origin (`3600`, `12.5`) or RFC 3339
/// (`2026-03-02T09:30:00Z`, `2026-03-02 09:30:00+01:00`; `common::time::parse_datetime_ms`).
/// Milliseconds.
pub fn parse_instant(text: &str) -> Result<Millis> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() {
            return Ok((secs * 1000.0).round() as Millis);
        }
    }
    ysched_common::time::parse_datetime_ms(t)
        .map_err(|_| anyhow!("'{text}' is neither seconds nor an RFC 3339 time"))
}

fn parse_u32(row: &BTreeMap<String, String>, col: &str, default: u32) -> Result<u32> {
    parse_u32_field(row.get(col).map(String::as_str), col, default)
}

/// `value` of column `col` as a whole number; `default` when the field is empty.
fn parse_u32_field(value: Option<&str>, col: &str, default: u32) -> Result<u32> {
    match value {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| anyhow!("{col} '{v}' is not a whole number")),
    }
}
/// The uniform cluster a CSV workload runs on unless a cluster file is given: `nodes` nodes of
/// `gpus` NVLinked GPUs of `model`, 64 CPUs and 512 GiB each (as the test harness's agents).
pub fn uniform_cluster(nodes: u32, gpus: u32, model: &str) -> Vec<SimNode> {
    (0..nodes)
        .map(|i| SimNode {
            name: format!("node{i:03}"),
            gpus,
            model: model.to_string(),
            nvlink: true,
            cpus: 64,
            mem_mib: 512 * 1024,
        })
        .collect()
}

/// A cluster from CSV: `name,gpus` required; `model` (NVIDIA A100-SXM4-80GB), `cpus` (64),
/// `mem` (512G), `nvlink` (true) optional.
pub fn read_cluster(path: &Path) -> Result<Vec<SimNode>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut nodes = Vec::new();
    for (no, row) in records(&text).with_context(|| path.display().to_string())? {
        let at = || format!("{} line {no}", path.display());
        let name = row
            .get("name")
            .cloned()
            .ok_or_else(|| anyhow!("{}: no name", at()))?;
        let gpus = parse_u32(&row, "gpus", 0).with_context(at)?;
        let mem_mib = match row.get("mem") {
            Some(m) => {
                ysched_common::parse::parse_mem_mib(m).map_err(|e| anyhow!("{}: {e}", at()))?
            }
            None => 512 * 1024,
        };
        nodes.push(SimNode {
            name,
            gpus,
            model: row
                .get("model")
                .cloned()
                .unwrap_or_else(|| "NVIDIA A100-SXM4-80GB".into()),
            nvlink: row
                .get("nvlink")
                .is_none_or(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "1")),
            cpus: parse_u32(&row, "cpus", 64).with_context(at)?,
            mem_mib,
        });
    }
    if nodes.is_empty() {
        bail!("{}: no nodes", path.display());
    }
    Ok(nodes)
}

/// Parses the jobs of a CSV trace (see the module docs); `name` names the workload.
pub fn parse_jobs(name: &str, text: &str, nodes: Vec<SimNode>) -> Result<Workload> {
    let mut jobs = Vec::new();
    for (no, row) in read_trace(text)? {
        let job = parse_job(&row, no).with_context(|| format!("{name} line {no}"))?;
        jobs.push(job);
    }
    if jobs.is_empty() {
        bail!("{name}: no jobs");
    }
    let origin = jobs.iter().map(|j| j.submit_ms).min().unwrap_or(0);
    for j in &mut jobs {
        j.submit_ms -= origin;
    }
    let mut w = Workload {
        name: name.to_string(),
        nodes,
        jobs,
        window_ms: 0,
        accounts: BTreeMap::new(),
        notes: vec![format!(
            "jobs from {name}; submit times shifted so that the first is at 0"
        )],
    };
    w.finish(SEC);
    Ok(w)
}

fn parse_job(row: &TraceRecord, no: usize) -> Result<SimJob> {
    let required = |value: &Option<String>, c: &str| -> Result<String> {
        value
            .clone()
            .ok_or_else(|| anyhow!("no {c} (a required column)"))
    };
    let submit_ms = parse_instant(&required(&row.submit_time, "submit_time")?)?;
    let duration_ms = parse_duration(&required(&row.duration, "duration")?)?.max(SEC);
    let gpus = parse_u32_field(Some(&required(&row.gpus, "gpus")?), "gpus", 0)?;
    let user = row.user.clone().unwrap_or_else(|| "user".into());
    let time_limit_secs = match row.time_limit.as_deref() {
        None => None,
        Some(t) if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") => {
            None
        }
        Some(t) => Some((parse_duration(t)? / SEC) as u64).filter(|s| *s > 0),
    };
    let mem_mib = match &row.mem {
        Some(m) => ysched_common::parse::parse_mem_mib(m).map_err(|e| anyhow!("mem: {e}"))?,
        None => 0,
    };
    let duration_of = |value: &Option<String>| value.as_deref().map(parse_duration).transpose();
    Ok(SimJob {
        name: row.job_id.clone().unwrap_or_else(|| format!("row{no}")),
        submit_ms,
        tier: row.tier.clone().unwrap_or_default(),
        account: row.account.clone().unwrap_or_else(|| user.clone()),
        user,
        gpus,
        nodes: parse_u32_field(row.nodes.as_deref(), "nodes", 1)?.max(1),
        gpu_types: row
            .gpu_type
            .as_deref()
            .map(|t| {
                t.split('|')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        cpus: parse_u32_field(row.cpus.as_deref(), "cpus", 1)?.max(1),
        mem_mib,
        duration_ms,
        time_limit_secs,
        checkpoint_interval_ms: duration_of(&row.checkpoint_interval)?.unwrap_or(0),
        checkpoint_write_ms: duration_of(&row.checkpoint_write)?.unwrap_or(0),
        grace_secs: duration_of(&row.grace)?.map(|ms| (ms / SEC) as u32),
    })
}

/// Reads a CSV trace file.
pub fn read_jobs(path: &Path, nodes: Vec<SimNode>) -> Result<Workload> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    parse_jobs(&name, &text, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_instants() {
        assert_eq!(parse_duration("90").unwrap(), 90_000);
        assert_eq!(parse_duration("1.5h").unwrap(), 5_400_000);
        assert_eq!(parse_duration("30m").unwrap(), 1_800_000);
        assert_eq!(parse_duration("2d").unwrap(), 172_800_000);
        assert_eq!(parse_duration("1-00:00:00").unwrap(), 86_400_000);
        assert_eq!(parse_duration("01:30:00").unwrap(), 5_400_000);
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_instant("12.5").unwrap(), 12_500);
        assert_eq!(parse_instant("1970-01-02T00:00:00Z").unwrap(), 86_400_000);
        assert_eq!(
            parse_instant("2026-01-05T01:00:00+01:00").unwrap(),
            crate::engine::EPOCH_MS
        );
        assert_eq!(
            parse_instant("2026-01-05 00:00:00.250").unwrap(),
            crate::engine::EPOCH_MS + 250
        );
        assert!(parse_instant("yesterday").is_err());
    }

    /// A trace as `yctl report --export-trace` wrote it before traces were written with the
    /// `csv` crate (its bytes, from the hand-written writer): quoted names, a job with no spec.
    #[test]
    fn a_trace_exported_by_the_hand_written_writer_reads_as_before() {
        let text = include_str!("testdata/exported-trace.csv");
        let w = parse_jobs("exported-trace.csv", text, uniform_cluster(1, 8, "A100")).unwrap();
        let job = |name: &str| w.jobs.iter().find(|j| j.name == name).unwrap();
        let full = job("41");
        assert_eq!(
            (full.submit_ms, full.tier.as_str(), full.account.as_str()),
            (0, "low", "vision")
        );
        assert_eq!((full.user.as_str(), full.gpus, full.nodes), ("ana", 8, 2));
        assert_eq!(full.gpu_types, ["A100", "H100"]);
        assert_eq!((full.cpus, full.mem_mib), (16, 65_536));
        assert_eq!(
            (full.duration_ms, full.time_limit_secs),
            (5_400_000, Some(86_400))
        );
        assert_eq!(
            (full.checkpoint_interval_ms, full.checkpoint_write_ms),
            (0, 0)
        );
        assert_eq!(full.grace_secs, Some(120));
        let quoted = job("12_7");
        assert_eq!(quoted.account, "r&d, \"core\"");
        assert_eq!(quoted.user, "o,brien");
        assert_eq!(quoted.duration_ms, 2_250);
        let imported = job("900001");
        assert!(imported.gpu_types.is_empty());
        assert_eq!((imported.nodes, imported.cpus, imported.mem_mib), (1, 4, 0));
        // 1 ms of work counts as a second; no limit and the tier's grace.
        assert_eq!(imported.duration_ms, SEC);
        assert_eq!(
            (imported.time_limit_secs, imported.grace_secs),
            (None, None)
        );
        assert_eq!(w.jobs.len(), 3);
    }

    #[test]
    fn quoted_fields_and_defaults() {
        assert_eq!(
            split_line(r#"a,"b,c","say ""hi""",,d"#).unwrap(),
            ["a", "b,c", "say \"hi\"", "", "d"]
        );
        let text = "# exported\njob_id,submit_time,gpus,duration,tier,gpu_type,extra\n\
                    7,100,8,2h,high,A100|H100,ignored\n\
                    8,40,1,30m,,,\n";
        let w = parse_jobs("t.csv", text, uniform_cluster(1, 8, "A100")).unwrap();
        assert_eq!(w.jobs.len(), 2);
        // Sorted by submit, shifted to start at 0.
        assert_eq!(w.jobs[0].name, "8");
        assert_eq!(w.jobs[0].submit_ms, 0);
        assert_eq!(w.jobs[0].tier, "");
        assert_eq!(w.jobs[0].account, "user");
        assert_eq!(w.jobs[1].submit_ms, 60_000);
        assert_eq!(w.jobs[1].gpu_types, ["A100", "H100"]);
        assert_eq!(w.jobs[1].duration_ms, 7_200_000);
        assert_eq!(w.jobs[1].grace_secs, None);
        let missing = parse_jobs("t.csv", "submit_time,gpus\n1,1\n", Vec::new());
        assert!(format!("{:#}", missing.unwrap_err()).contains("duration"));
    }
}
