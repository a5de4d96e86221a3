//! `sacct`: jobs, finished ones too, in Slurm's accounting fields: the fixed-width table,
//! `--parsable2` (`|` between fields) and `--parsable` (and after the last), which submitit,
//! Snakemake and dask read.

use crate::client;
use crate::jobs::TargetList;
use crate::jobs::{
    check_target_count, display_id, elapsed_secs, flatten_targets, parse_target_list,
};
use crate::queue::current_user_name;
use crate::slurm::words::{
    job_nodes, parse_slurm_states, sacct_duration, slurm_state, slurm_time, time_limit,
    ysched_states_for,
};
use anyhow::{anyhow, bail, Result};
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;
use ysched_common::time::{now_ms, parse_datetime_ms, Millis, DAY_MS};
use ysched_proto::{JobInfo, ListJobsRequest};

/// The fields sacct prints here, with the width of the fixed-width table.
pub const FIELDS: [(&str, usize); 19] = [
    ("JobID", 12),
    ("JobIDRaw", 12),
    ("JobName", 10),
    ("State", 10),
    ("ExitCode", 8),
    ("Elapsed", 10),
    ("NodeList", 15),
    ("NNodes", 8),
    ("Start", 19),
    ("End", 19),
    ("Submit", 19),
    ("User", 9),
    ("Account", 10),
    ("Partition", 10),
    ("AllocCPUS", 10),
    ("AllocTRES", 10),
    ("ReqTRES", 10),
    ("Timelimit", 10),
    ("Reason", 10),
];

/// sacct's default fields.
pub const DEFAULT_FIELDS: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";

#[derive(Parser, Debug)]
#[command(
    name = "sacct",
    about = "Slurm's sacct on ysched: jobs and how they ended",
    disable_version_flag = true,
    disable_help_flag = true
)]
pub struct SacctCli {
    /// Only these jobs (repeat, or comma lists): `12` (a job, or every task of array 12),
    /// `12_7`
    #[arg(short = 'j', long, value_name = "IDS", value_parser = parse_target_list)]
    pub jobs: Vec<TargetList>,
    /// Only jobs of these users (comma list) [default: yours]
    #[arg(short = 'u', long, value_name = "USERS")]
    pub user: Option<String>,
    /// Jobs of every user
    #[arg(short = 'a', long = "allusers")]
    pub all_users: bool,
    /// Only jobs of these names (comma list)
    #[arg(long, value_name = "NAMES")]
    pub name: Option<String>,
    /// Only jobs in these states (CD, F, CA, TO, NF, OOM, PR, PD, R or long names)
    #[arg(short = 's', long = "state", value_name = "STATES")]
    pub state: Option<String>,
    /// Only jobs active at or after this time: YYYY-MM-DD[THH:MM[:SS]] (UTC) or `now`
    /// [default: midnight today, UTC, unless -j is given]
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    pub start: Option<String>,
    /// Only jobs active at or before this time
    #[arg(short = 'E', long = "endtime", value_name = "TIME")]
    pub end: Option<String>,
    /// The job allocations only (ysched has no steps: the default here)
    #[arg(short = 'X', long)]
    pub allocations: bool,
    /// Leave out the header
    #[arg(short = 'n', long)]
    pub noheader: bool,
    /// Fields separated by `|`, none after the last
    #[arg(short = 'P', long)]
    pub parsable2: bool,
    /// Fields separated by `|`, and one after the last
    #[arg(short = 'p', long)]
    pub parsable: bool,
    /// Fields, comma-separated, each `Name[%WIDTH]`
    #[arg(short = 'o', long, value_name = "FIELDS")]
    pub format: Option<String>,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// A field asked for, with its width in the fixed-width table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    pub name: &'static str,
    pub width: usize,
}

/// Reads `-o`: names in any case, each with an optional `%WIDTH`.
pub fn parse_fields(list: &str) -> Result<Vec<FieldSpec>> {
    let mut fields = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((name, width)) => (name, Some(width)),
            None => (item, None),
        };
        let Some((known, default_width)) =
            FIELDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))
        else {
            let names: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
            bail!(
                "Invalid field requested: \"{name}\" (valid: {})",
                names.join(", ")
            );
        };
        let width = match width {
            Some(w) => w
                .parse::<usize>()
                .ok()
                .filter(|w| (1..=1024).contains(w))
                .ok_or_else(|| anyhow!("field '{item}': '{w}' is not a width from 1 to 1024"))?,
            None => *default_width,
        };
        fields.push(FieldSpec { name: known, width });
    }
    if fields.is_empty() {
        bail!("no field in --format '{list}'");
    }
    Ok(fields)
}

/// Reads a time of `-S`/`-E`: a day, a day and time (UTC), or `now`.
pub fn parse_time(text: &str, now: Millis) -> Result<Millis> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    // Slurm writes `2026-01-05T08:00` without seconds or zone: read as UTC.
    let full = match text.len() {
        16 if text.as_bytes().get(10) == Some(&b'T') => format!("{text}:00Z"),
        19 if text.as_bytes().get(10) == Some(&b'T') => format!("{text}Z"),
        _ => text.to_string(),
    };
    parse_datetime_ms(&full).map_err(|e| anyhow!("{e}"))
}

/// The job's value of field `name`.
pub fn field(job: &JobInfo, name: &str, now: Millis) -> String {
    let state = slurm_state(&job.state);
    let cpus: u32 = job.alloc.iter().map(|a| a.cpus).sum();
    let nodes = job.alloc.len();
    match name {
        "JobID" => display_id(job).into_owned(),
        "JobIDRaw" => job.id.to_string(),
        "JobName" => job.name.clone(),
        // Slurm names who cancelled a job by uid; ysched records no canceller's uid, so the
        // owner's stands in (a job is cancelled by its owner or an administrator).
        "State" if state.long == "CANCELLED" => format!("CANCELLED by {}", job.uid),
        "State" => state.long.into(),
        "ExitCode" => format!(
            "{}:{}",
            job.exit_code.unwrap_or(0).clamp(0, 255),
            job.signal.unwrap_or(0).max(0)
        ),
        "Elapsed" => sacct_duration(elapsed_secs(job, now)),
        "NodeList" => {
            let list = job_nodes(job);
            if list.is_empty() {
                "None assigned".into()
            } else {
                list
            }
        }
        "NNodes" => nodes.max(1).to_string(),
        "Start" => slurm_time(job.start_time_ms),
        "End" if state.long == "RUNNING" || state.long == "PENDING" => "Unknown".into(),
        "End" => slurm_time(job.end_time_ms),
        "Submit" => slurm_time(job.submit_time_ms),
        "User" => job.user.clone(),
        "Account" => job.account.clone(),
        "Partition" => job.tier.clone(),
        "AllocCPUS" => cpus.to_string(),
        "AllocTRES" if nodes == 0 => String::new(),
        "AllocTRES" => {
            let gpus: usize = job.alloc.iter().map(|a| a.gpus.len()).sum();
            let mem: u64 = job.alloc.iter().map(|a| a.mem_mib).sum();
            let mut tres = format!("cpu={cpus}");
            if gpus > 0 {
                tres.push_str(&format!(",gres/gpu={gpus}"));
            }
            if mem > 0 {
                tres.push_str(&format!(",mem={mem}M"));
            }
            tres.push_str(&format!(",node={nodes}"));
            tres
        }
        "ReqTRES" => {
            let mut tres = format!("cpu={}", cpus.max(1));
            if job.gpus_requested > 0 {
                tres.push_str(&format!(",gres/gpu={}", job.gpus_requested));
            }
            tres.push_str(&format!(",node={}", nodes.max(1)));
            tres
        }
        "Timelimit" => time_limit(job.time_limit_secs, sacct_duration),
        "Reason" if job.reason.is_empty() => "None".into(),
        "Reason" => job.reason.clone(),
        _ => String::new(),
    }
}

/// How the lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Fixed-width columns, a `---` line under the header; values cut with a `+`.
    Table,
    /// `|` between fields (`--parsable2`).
    Parsable2,
    /// `|` after every field (`--parsable`).
    Parsable,
}

/// The output: a header (unless `noheader`) and one line per job.
pub fn format_jobs(
    fields: &[FieldSpec],
    jobs: &[JobInfo],
    layout: Layout,
    noheader: bool,
    now: Millis,
) -> String {
    let line = |values: Vec<String>| -> String {
        let text = match layout {
            Layout::Parsable2 => values.join("|"),
            Layout::Parsable => values.iter().map(|v| format!("{v}|")).collect(),
            Layout::Table => fields
                .iter()
                .zip(&values)
                .map(|(spec, value)| {
                    let width = spec.width;
                    let cut = if value.chars().count() > width {
                        let mut cut: String = value.chars().take(width - 1).collect();
                        cut.push('+');
                        cut
                    } else {
                        value.clone()
                    };
                    if spec.name.starts_with("JobID") {
                        format!("{cut:<width$}")
                    } else {
                        format!("{cut:>width$}")
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
        };
        format!("{}\n", ysched_common::text::escape_for_terminal(&text))
    };
    let mut out = String::new();
    if !noheader {
        out.push_str(&line(fields.iter().map(|f| f.name.to_string()).collect()));
        if layout == Layout::Table {
            out.push_str(&line(fields.iter().map(|f| "-".repeat(f.width)).collect()));
        }
    }
    for job in jobs {
        out.push_str(&line(
            fields.iter().map(|f| field(job, f.name, now)).collect(),
        ));
    }
    out
}

/// Whether the job is in the window: submitted by `end`, and not ended before `start`.
pub fn in_window(job: &JobInfo, start: Option<Millis>, end: Option<Millis>) -> bool {
    let ended_before = |start: Millis| job.end_time_ms > 0 && job.end_time_ms < start;
    !start.is_some_and(ended_before) && end.is_none_or(|end| job.submit_time_ms <= end)
}

/// Comma-list values of a filter.
fn list(value: &Option<String>) -> Option<Vec<String>> {
    value.as_ref().map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
}

/// The `sacct` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::args::parse_args_from::<SacctCli>("sacct", args) {
        Ok(cli) => client::run_tool("sacct", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: SacctCli) -> Result<ExitCode> {
    let now = now_ms();
    let fields = parse_fields(cli.format.as_deref().unwrap_or(DEFAULT_FIELDS))?;
    let layout = if cli.parsable2 {
        Layout::Parsable2
    } else if cli.parsable {
        Layout::Parsable
    } else {
        Layout::Table
    };
    let targets = flatten_targets(&cli.jobs);
    check_target_count(&targets)?;
    let start = match &cli.start {
        Some(text) => Some(parse_time(text, now)?),
        // Slurm's default window: since midnight, unless jobs are named.
        None if targets.is_empty() => Some(now - now.rem_euclid(DAY_MS)),
        None => None,
    };
    let end = cli.end.as_deref().map(|t| parse_time(t, now)).transpose()?;
    let users = list(&cli.user);
    // Named jobs are shown whoever owns them, as Slurm does; otherwise the caller's.
    let user = match users.as_deref() {
        Some([only]) => only.clone(),
        Some(_) => String::new(),
        None if cli.all_users || !targets.is_empty() => String::new(),
        None => current_user_name()?,
    };
    let states = match cli.state.as_deref().map(parse_slurm_states).transpose() {
        Err(e) => return Err(anyhow!(e)),
        Ok(Some(Some(wanted))) => ysched_states_for(&wanted),
        Ok(_) => Vec::new(),
    };
    let (mut client, _) = client::connect_from_config().await?;
    let mut jobs = client::list_all_jobs(
        &mut client,
        ListJobsRequest {
            user,
            job_ids: targets
                .iter()
                .filter(|t| t.tasks.is_none())
                .map(|t| t.id.0)
                .collect(),
            all: states.is_empty(),
            states,
            targets: targets.iter().map(ToString::to_string).collect(),
            // schedd finds the finished jobs by their end (older servers ignore these:
            // `in_window` below applies the same window).
            since_ms: start.unwrap_or(0),
            until_ms: end.map_or(0, |e| e.saturating_add(1)),
            // All of them, page by page.
            ..Default::default()
        },
    )
    .await?;
    jobs = crate::queue::without_repeats(jobs);
    let names = list(&cli.name);
    jobs.retain(|job| {
        users.as_ref().is_none_or(|u| u.contains(&job.user))
            && names.as_ref().is_none_or(|n| n.contains(&job.name))
            && in_window(job, start, end)
    });
    // By id, as sacct lists them (an array's tasks together, by index).
    jobs.sort_by_key(|job| {
        (
            job.array_job_id.unwrap_or(job.id),
            job.array_task_id,
            job.id,
        )
    });
    crate::output::print_stdout(&format_jobs(&fields, &jobs, layout, cli.noheader, now))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_proto::NodeAlloc;

    const T0: Millis = 1_767_225_600_000;

    fn cli(args: &[&str]) -> SacctCli {
        SacctCli::try_parse_from(std::iter::once("sacct").chain(args.iter().copied())).unwrap()
    }

    fn jobs() -> Vec<JobInfo> {
        let task = |id: u64, index: u32, state: &str, exit: i32| JobInfo {
            id,
            display_id: format!("12_{index}"),
            array_job_id: Some(12),
            array_task_id: Some(index),
            name: "sweep".into(),
            user: "alice".into(),
            uid: 1000,
            account: "vision".into(),
            tier: "medium".into(),
            state: state.into(),
            exit_code: Some(exit),
            alloc: vec![NodeAlloc {
                node: "n1".into(),
                gpus: vec![0],
                cpus: 2,
                mem_mib: 0,
            }],
            gpus_requested: 1,
            submit_time_ms: T0,
            start_time_ms: T0 + 1000,
            end_time_ms: T0 + 6000,
            ..Default::default()
        };
        vec![
            task(12, 0, "COMPLETED", 0),
            task(13, 1, "FAILED", 3),
            task(14, 2, "CANCELLED", 0),
        ]
    }

    #[test]
    fn parsable2_lines_as_submitit_reads_them() {
        let fields = parse_fields("JobID,State,NodeList").unwrap();
        let text = format_jobs(&fields, &jobs(), Layout::Parsable2, false, T0 + 10_000);
        assert_eq!(
            text,
            "JobID|State|NodeList\n12_0|COMPLETED|n1\n12_1|FAILED|n1\n12_2|CANCELLED by 1000|n1\n"
        );
        let fields = parse_fields("jobid,ExitCode,Elapsed,Start,End,AllocTRES").unwrap();
        let text = format_jobs(&fields, &jobs()[1..2], Layout::Parsable, true, T0);
        assert_eq!(
            text,
            "12_1|3:0|00:00:05|2026-01-01T00:00:01|2026-01-01T00:00:06|cpu=2,gres/gpu=1,node=1|\n"
        );
        let err = parse_fields("JobID,Bogus").unwrap_err().to_string();
        assert!(err.contains("Invalid field requested: \"Bogus\""), "{err}");
        assert!(err.contains("JobIDRaw"), "{err}");
    }

    #[test]
    fn the_table_is_fixed_width_with_cut_values_marked() {
        let fields = parse_fields("JobID,JobName%4,State").unwrap();
        let text = format_jobs(&fields, &jobs()[..1], Layout::Table, false, T0);
        assert_eq!(
            text,
            "JobID        Job+      State\n------------ ---- ----------\n12_0         swe+  COMPLETED\n"
        );
        let pending = JobInfo {
            id: 20,
            state: "PENDING".into(),
            ..Default::default()
        };
        assert_eq!(field(&pending, "NodeList", T0), "None assigned");
        assert_eq!(field(&pending, "Start", T0), "Unknown");
        assert_eq!(field(&pending, "End", T0), "Unknown");
        assert_eq!(field(&pending, "Timelimit", T0), "UNLIMITED");
    }

    #[test]
    fn times_and_windows() {
        assert_eq!(parse_time("2026-01-01", 0).unwrap(), T0);
        assert_eq!(parse_time("2026-01-01T00:01", 0).unwrap(), T0 + 60_000);
        assert_eq!(parse_time("2026-01-01T00:00:02", 0).unwrap(), T0 + 2000);
        assert_eq!(parse_time("now", 5).unwrap(), 5);
        assert!(parse_time("yesterday-ish", 0).is_err());
        let job = &jobs()[0];
        assert!(in_window(job, Some(T0), None));
        assert!(!in_window(job, Some(T0 + 7000), None));
        assert!(!in_window(job, None, Some(T0 - 1)));
        assert!(cli(&["-j", "12", "-j", "13,14_2", "-X", "-P", "-n"]).parsable2);
    }
}
