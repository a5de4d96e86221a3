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

/// Splits one CSV record (no embedded newlines) into fields, unquoting `"..."` with `""` as
/// a quote.
pub fn split_line(line: &str) -> Result<Vec<String>> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.trim().is_empty() && !was_quoted => {
                field.clear();
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        bail!("unterminated quote");
    }
    fields.push(field);
    Ok(fields.into_iter().map(|f| f.trim().to_string()).collect())
}

/// Rows of a CSV text as maps from column name (lower case) to field, with their line numbers.
pub fn records(text: &str) -> Result<Vec<(usize, BTreeMap<String, String>)>> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((_, header)) = lines.next() else {
        bail!("empty file: expected a header row");
    };
    let names: Vec<String> = split_line(header)?
        .into_iter()
        .map(|n| n.to_ascii_lowercase())
        .collect();
    let mut out = Vec::new();
    for (no, line) in lines {
        let fields = split_line(line).with_context(|| format!("line {no}"))?;
        if fields.len() > names.len() {
            bail!(
                "line {no}: {} fields, but the header names {} columns",
                fields.len(),
                names.len()
            );
        }
        let row = names
            .iter()
            .cloned()
            .zip(fields)
            .filter(|(_, v)| !v.is_empty())
            .collect();
        out.push((no, row));
    }
    Ok(out)
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
    match row.get(col) {
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
    for (no, row) in records(text)? {
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

fn parse_job(row: &BTreeMap<String, String>, no: usize) -> Result<SimJob> {
    let get = |c: &str| row.get(c).map(String::as_str);
    let required = |c: &str| get(c).ok_or_else(|| anyhow!("no {c} (a required column)"));
    let submit_ms = parse_instant(required("submit_time")?)?;
    let duration_ms = parse_duration(required("duration")?)?.max(SEC);
    let gpus = parse_u32(row, "gpus", 0)?;
    if get("gpus").is_none() {
        bail!("no gpus (a required column)");
    }
    let user = get("user").unwrap_or("user").to_string();
    let time_limit_secs = match get("time_limit") {
        None => None,
        Some(t) if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") => {
            None
        }
        Some(t) => Some((parse_duration(t)? / SEC) as u64).filter(|s| *s > 0),
    };
    let mem_mib = match get("mem") {
        Some(m) => ysched_common::parse::parse_mem_mib(m).map_err(|e| anyhow!("mem: {e}"))?,
        None => 0,
    };
    Ok(SimJob {
        name: get("job_id").map_or_else(|| format!("row{no}"), str::to_string),
        submit_ms,
        tier: get("tier").unwrap_or("").to_string(),
        account: get("account").unwrap_or(&user).to_string(),
        user,
        gpus,
        nodes: parse_u32(row, "nodes", 1)?.max(1),
        gpu_types: get("gpu_type")
            .map(|t| {
                t.split('|')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        cpus: parse_u32(row, "cpus", 1)?.max(1),
        mem_mib,
        duration_ms,
        time_limit_secs,
        checkpoint_interval_ms: get("checkpoint_interval")
            .map(parse_duration)
            .transpose()?
            .unwrap_or(0),
        checkpoint_write_ms: get("checkpoint_write")
            .map(parse_duration)
            .transpose()?
            .unwrap_or(0),
        grace_secs: get("grace")
            .map(|g| parse_duration(g).map(|ms| (ms / SEC) as u32))
            .transpose()?,
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
