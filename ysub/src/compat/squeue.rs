//! `squeue`: the job queue in Slurm's columns and `%` codes.

use crate::client;
use crate::jobs::{
    check_target_count, display_id, elapsed_secs, flatten_targets, job_lines, parse_target_list,
    Fold, JobLine, TargetList,
};
use crate::queue::current_user_name;
use crate::slurm::format::{parse_named_format, parse_percent_format, render_line, Piece};
use crate::slurm::words::{
    job_nodes, parse_slurm_states, slurm_job_state, slurm_time, squeue_duration, time_limit,
    ysched_states_for,
};
use anyhow::{anyhow, Result};
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;
use ysched_common::time::{now_ms, Millis};
use ysched_proto::{JobInfo, ListJobsRequest};

/// squeue's default format (`JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)`).
pub const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";

/// The `%` codes squeue takes here (`%r`: the reason alone).
const CODES: [char; 19] = [
    'i', 'j', 'u', 'T', 't', 'M', 'l', 'D', 'R', 'P', 'C', 'b', 'N', 'V', 'S', 'A', 'a', 'K', 'r',
];

/// `-O/--Format` names and their `%` codes.
const NAMES: [(&str, char); 19] = [
    ("JobID", 'i'),
    ("Name", 'j'),
    ("UserName", 'u'),
    ("State", 'T'),
    ("StateCompact", 't'),
    ("TimeUsed", 'M'),
    ("TimeLimit", 'l'),
    ("NumNodes", 'D'),
    ("ReasonList", 'R'),
    ("Partition", 'P'),
    ("NumCPUs", 'C'),
    ("tres-per-node", 'b'),
    ("NodeList", 'N'),
    ("SubmitTime", 'V'),
    ("StartTime", 'S'),
    ("ArrayJobID", 'A'),
    ("Account", 'a'),
    ("ArrayTaskID", 'K'),
    ("Reason", 'r'),
];

#[derive(Parser, Debug)]
#[command(
    name = "squeue",
    about = "Slurm's squeue on ysched: the queue in Slurm's columns",
    disable_version_flag = true,
    disable_help_flag = true
)]
pub struct SqueueCli {
    /// Only these jobs (comma list, or repeat): `12`, `12_7`, `12_[1-3]`
    #[arg(short = 'j', long, value_name = "IDS", value_parser = parse_target_list)]
    pub jobs: Vec<TargetList>,
    /// Only jobs of these users (comma list)
    #[arg(short = 'u', long, value_name = "USERS")]
    pub user: Option<String>,
    /// Only your own jobs
    #[arg(long)]
    pub me: bool,
    /// Only jobs in these states (PD, R, CG, CD, F, TO, CA, PR, NF, OOM or their long names; all)
    #[arg(short = 't', long = "states", value_name = "STATES")]
    pub states: Option<String>,
    /// Only jobs of these partitions (ysched's tiers; comma list)
    #[arg(short = 'p', long, value_name = "PARTITIONS")]
    pub partition: Option<String>,
    /// Only jobs of these names (comma list)
    #[arg(short = 'n', long, value_name = "NAMES")]
    pub name: Option<String>,
    /// Leave out the header
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Columns as `%` codes: %i %j %u %T %t %M %l %D %R %P %C %b %N %V %S %A %a %K
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Columns by name: JobID, Name, UserName, State, StateCompact, TimeUsed, TimeLimit,
    /// NumNodes, ReasonList, Partition, NumCPUs, tres-per-node, NodeList, SubmitTime,
    /// StartTime, ArrayJobID, Account, ArrayTaskID, Reason (each `:[.]WIDTH`)
    #[arg(
        short = 'O',
        long = "Format",
        value_name = "FIELDS",
        conflicts_with = "format"
    )]
    pub named_format: Option<String>,
    /// One line per array task (pending tasks are folded into `12_[3-9]` otherwise)
    #[arg(short = 'r', long)]
    pub array: bool,
    /// Every partition (the default here: accepted for scripts that pass it)
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// The `squeue` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::args::parse_args_from::<SqueueCli>("squeue", args) {
        Ok(cli) => client::run_tool("squeue", || run(cli)),
        Err(code) => code,
    }
}

/// The columns asked for.
pub fn pieces(cli: &SqueueCli) -> Result<Vec<Piece>> {
    let pieces = match (&cli.named_format, &cli.format) {
        (Some(names), _) => parse_named_format(names, &NAMES),
        (None, Some(format)) => parse_percent_format(format, &CODES),
        (None, None) => parse_percent_format(DEFAULT_FORMAT, &CODES),
    };
    pieces.map_err(|e| anyhow!(e))
}

/// Comma-list values of a filter, `None` when the filter is not given.
fn list(value: &Option<String>) -> Option<Vec<String>> {
    value.as_ref().map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
}

/// The request for the filters schedd applies itself: ids, one user, states.
pub fn list_request(cli: &SqueueCli, me: Option<String>) -> Result<ListJobsRequest> {
    let targets = flatten_targets(&cli.jobs);
    check_target_count(&targets)?;
    let users = list(&cli.user).unwrap_or_default();
    let user = match (me, users.as_slice()) {
        (Some(me), _) => me,
        (None, [only]) => only.clone(),
        _ => String::new(),
    };
    ysched_common::limits::USER
        .check_len(&user)
        .map_err(anyhow::Error::msg)?;
    let (states, all) = match cli.states.as_deref().map(parse_slurm_states).transpose() {
        Err(e) => return Err(anyhow!(e)),
        Ok(None) => (Vec::new(), false),
        Ok(Some(None)) => (Vec::new(), true),
        Ok(Some(Some(wanted))) => (ysched_states_for(&wanted), false),
    };
    Ok(ListJobsRequest {
        user,
        job_ids: targets
            .iter()
            .filter(|t| t.tasks.is_none())
            .map(|t| t.id.0)
            .collect(),
        states,
        all,
        targets: targets.iter().map(ToString::to_string).collect(),
        ..Default::default()
    })
}

/// Whether `job` passes the filters schedd does not apply: several users, partitions, names.
pub fn wanted(cli: &SqueueCli, job: &JobInfo) -> bool {
    let within = |filter: &Option<String>, value: &str| {
        list(filter).is_none_or(|values| values.iter().any(|v| v == value))
    };
    within(&cli.user, &job.user)
        && within(&cli.partition, &job.tier)
        && within(&cli.name, &job.name)
}

/// The value of field `code` for one line of the queue.
pub fn field(line: &JobLine, code: char, now: Millis) -> String {
    let job = line.job;
    let state = slurm_job_state(job);
    let reason = || {
        if job.reason.is_empty() {
            "None".to_string()
        } else {
            job.reason.clone()
        }
    };
    let nodes = job_nodes(job);
    let na = || "N/A".to_string();
    match code {
        'i' => line
            .label
            .clone()
            .unwrap_or_else(|| display_id(job).into_owned()),
        'j' => job.name.clone(),
        'u' => job.user.clone(),
        'T' => state.long.into(),
        't' => state.short.into(),
        'M' => squeue_duration(elapsed_secs(job, now)),
        'l' => time_limit(job.time_limit_secs, squeue_duration),
        'D' => job.alloc.len().max(1).to_string(),
        'R' => {
            if nodes.is_empty() {
                format!("({})", reason())
            } else {
                nodes
            }
        }
        'r' => reason(),
        'P' => job.tier.clone(),
        'C' => {
            let cpus: u32 = job.alloc.iter().map(|a| a.cpus).sum();
            if cpus == 0 {
                na()
            } else {
                cpus.to_string()
            }
        }
        'b' => {
            let per_node = job.gpus_requested / (job.alloc.len().max(1) as u32);
            if per_node == 0 {
                na()
            } else {
                format!("gres/gpu:{per_node}")
            }
        }
        'N' => nodes,
        'V' => slurm_time(job.submit_time_ms),
        'S' => {
            let start = if job.start_time_ms > 0 {
                job.start_time_ms
            } else {
                job.expected_start_ms
            };
            if start > 0 {
                slurm_time(start)
            } else {
                na()
            }
        }
        'A' => job.id.to_string(),
        'a' => job.account.clone(),
        'K' => job.array_task_id.map_or_else(na, |t| t.to_string()),
        _ => String::new(),
    }
}

/// The header of field `code`, as squeue names it.
pub fn header(code: char) -> &'static str {
    match code {
        'i' => "JOBID",
        'j' => "NAME",
        'u' => "USER",
        'T' => "STATE",
        't' => "ST",
        'M' => "TIME",
        'l' => "TIME_LIMIT",
        'D' => "NODES",
        'R' => "NODELIST(REASON)",
        'r' => "REASON",
        'P' => "PARTITION",
        'C' => "CPUS",
        'b' => "TRES_PER_NODE",
        'N' => "NODELIST",
        'V' => "SUBMIT_TIME",
        'S' => "START_TIME",
        'A' => "JOBID",
        'a' => "ACCOUNT",
        'K' => "ARRAY_TASK_ID",
        _ => "",
    }
}

/// The whole listing: header (unless `noheader`) and one line per job line.
pub fn format_queue(pieces: &[Piece], lines: &[JobLine], now: Millis, noheader: bool) -> String {
    let mut out = String::new();
    if !noheader {
        out.push_str(&render_line(pieces, |code| header(code).to_string()));
        out.push('\n');
    }
    for line in lines {
        out.push_str(&render_line(pieces, |code| field(line, code, now)));
        out.push('\n');
    }
    out
}

pub async fn run(cli: SqueueCli) -> Result<ExitCode> {
    let pieces = pieces(&cli)?;
    let me = if cli.me {
        Some(current_user_name()?)
    } else {
        None
    };
    let request = list_request(&cli, me)?;
    let (mut client, _) = client::connect_from_config().await?;
    let mut jobs =
        crate::queue::without_repeats(client::list_all_jobs(&mut client, request).await?);
    jobs.retain(|job| wanted(&cli, job));
    let fold = if cli.array {
        Fold::Never
    } else {
        Fold::Waiting
    };
    let lines = job_lines(&jobs, fold);
    crate::output::print_stdout(&format_queue(&pieces, &lines, now_ms(), cli.noheader))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_proto::NodeAlloc;

    fn cli(args: &[&str]) -> SqueueCli {
        SqueueCli::try_parse_from(std::iter::once("squeue").chain(args.iter().copied())).unwrap()
    }

    fn running() -> JobInfo {
        JobInfo {
            id: 19,
            display_id: "12_7".into(),
            array_job_id: Some(12),
            array_task_id: Some(7),
            name: "train".into(),
            user: "alice".into(),
            account: "vision".into(),
            tier: "high".into(),
            state: "RUNNING".into(),
            alloc: vec![
                NodeAlloc {
                    node: "n1".into(),
                    gpus: vec![0, 1],
                    cpus: 8,
                    mem_mib: 0,
                },
                NodeAlloc {
                    node: "n2".into(),
                    gpus: vec![0, 1],
                    cpus: 8,
                    mem_mib: 0,
                },
            ],
            gpus_requested: 4,
            submit_time_ms: 1_767_225_600_000,
            start_time_ms: 1_767_225_600_000,
            time_limit_secs: 3600,
            ..Default::default()
        }
    }

    #[test]
    fn default_columns_are_slurms() {
        let pending = JobInfo {
            id: 20,
            name: "eval".into(),
            user: "bob".into(),
            tier: "low".into(),
            state: "PENDING".into(),
            reason: "Priority".into(),
            ..Default::default()
        };
        let jobs = [running(), pending];
        let lines = job_lines(&jobs, Fold::Waiting);
        let text = format_queue(
            &pieces(&cli(&[])).unwrap(),
            &lines,
            1_767_225_600_000 + 65_000,
            false,
        );
        let expected = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n\
                        \x20             12_7      high    train    alice  R       1:05      2 n[1-2]\n\
                        \x20               20       low     eval      bob PD       0:00      1 (Priority)\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn percent_codes_give_slurms_values() {
        let jobs = [running()];
        let lines = job_lines(&jobs, Fold::Never);
        let pieces = pieces(&cli(&["-o", "%i|%A|%K|%T|%t|%l|%C|%b|%N|%V|%a|%P|%S"])).unwrap();
        let text = format_queue(&pieces, &lines, 1_767_225_600_000, true);
        assert_eq!(
            text,
            "12_7|19|7|RUNNING|R|1:00:00|16|gres/gpu:2|n[1-2]|2026-01-01T00:00:00|vision|high|\
             2026-01-01T00:00:00\n"
        );
        let pieces = pieces_or_err(&["-O", "JobID:6,State:.8"]);
        assert_eq!(
            format_queue(&pieces, &lines, 0, false),
            "JOBID     STATE\n12_7    RUNNING\n"
        );
        assert!(super::pieces(&cli(&["-o", "%q"])).is_err());
    }

    fn pieces_or_err(args: &[&str]) -> Vec<Piece> {
        pieces(&cli(args)).unwrap()
    }

    #[test]
    fn filters() {
        let request =
            list_request(&cli(&["-u", "alice", "-t", "PD,CD", "-j", "5,12_3"]), None).unwrap();
        assert_eq!(request.user, "alice");
        assert_eq!(request.states, ["PENDING", "HELD", "COMPLETED"]);
        assert_eq!(request.targets, ["5", "12_3"]);
        let request = list_request(&cli(&["-u", "alice,bob"]), None).unwrap();
        assert_eq!(request.user, "");
        assert!(list_request(&cli(&["-t", "all"]), None).unwrap().all);
        assert!(list_request(&cli(&["-t", "XX"]), None).is_err());
        let job = running();
        assert!(wanted(
            &cli(&["-u", "bob,alice", "-p", "high", "-n", "train"]),
            &job
        ));
        assert!(!wanted(&cli(&["-n", "eval"]), &job));
        assert!(!wanted(&cli(&["-p", "low"]), &job));
    }
}
