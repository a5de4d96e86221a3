//! `yq`: list jobs, like squeue.

use crate::client;
use crate::jobs::{
    check_target_count, flatten_targets, format_queue, format_start_table, job_lines, job_to_json,
    parse_target_list, Fold, TargetList,
};
use crate::output::{print_stdout, JsonArrayOut};
use anyhow::{anyhow, Result};
use clap::Parser;
use std::collections::HashSet;
use std::process::ExitCode;
use ysched_common::time::now_ms;
use ysched_common::JobState;
use ysched_proto::{JobInfo, ListJobsRequest};

#[derive(Parser, Debug)]
#[command(
    name = "yq",
    version,
    about = "List ysched jobs (active ones unless --all or --states)"
)]
pub struct YqCli {
    /// Only jobs of this user
    #[arg(short = 'u', long, value_name = "USER", conflicts_with = "me")]
    pub user: Option<String>,
    /// Only your own jobs
    #[arg(long)]
    pub me: bool,
    /// Only these jobs (comma list, or repeat): `12` (a job, or every task of array 12),
    /// `12_7` (one task), `12_[1-5,9]` (some tasks)
    #[arg(short = 'j', long, value_name = "ID[,ID]", value_parser = parse_target_list)]
    pub jobs: Vec<TargetList>,
    /// Only jobs in these states: full names or short codes (PD, R, CD, F, CA, TO, NF, PR, OOM), or `all`
    #[arg(short = 't', long, value_name = "STATES")]
    pub states: Option<String>,
    /// Include finished jobs
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Finished jobs that ended since then, with the active ones (implies --all): a span back
    /// from now (`7d`, `36h`, `90m`) or a date (`2026-01-05`, RFC 3339). schedd finds them
    /// by their end, so a week of a long history costs what it returns
    #[arg(long, value_name = "SPAN|DATE")]
    pub since: Option<String>,
    /// Only jobs submitted before this date (`2026-01-05`, RFC 3339), as sacct's -E
    #[arg(long, value_name = "DATE")]
    pub until: Option<String>,
    /// Only jobs charged to these accounts (comma list, exact)
    #[arg(short = 'A', long = "account", value_name = "ACCOUNT[,ACCOUNT]")]
    pub accounts: Option<String>,
    /// Print a JSON array of jobs instead of the table (one object per job: array tasks are
    /// never folded)
    #[arg(long)]
    pub json: bool,
    /// Also show each job's account and, for a pending job, its place in its tier's queue
    /// (1: next) and its account's fair-share factor
    #[arg(short = 'l', long, conflicts_with = "json")]
    pub long: bool,
    /// One line per array task: without it, the waiting tasks of an array with the same state
    /// and reason share one line, `12_[40-199%16]` (%N: at most N run at once)
    #[arg(short = 'r', long)]
    pub array: bool,
    /// List pending jobs with when and on which nodes they are expected to start, as
    /// `squeue --start` (N/A: not known), soonest first
    #[arg(long, conflicts_with_all = ["json", "long"])]
    pub start: bool,
    /// Leave out the header line
    #[arg(long)]
    pub noheader: bool,
    /// Only jobs of these tiers (comma list, any case), as squeue's -p takes partitions
    #[arg(short = 'p', long = "priority", value_name = "TIER[,TIER]")]
    pub tiers: Option<String>,
    /// Only jobs with these names (comma list, exact)
    #[arg(short = 'n', long = "name", value_name = "NAME[,NAME]")]
    pub names: Option<String>,
    /// The columns: squeue's codes (`"%.10i %9P %j %u %T %M %l %D %R"`: %i %j %u %T %t %M %l
    /// %D %R %P %C %b %N %V %S %a %A %K %Q, each with an optional width, `.` to right-justify)
    /// or a comma list of column names (`jobid,name,state,time_limit`, any case)
    #[arg(short = 'o', long = "format", value_name = "FORMAT", conflicts_with_all = ["json", "long", "start"])]
    pub format: Option<String>,
}

/// The `-p` and `-n` filters: which of the listed jobs to show. schedd lists by user, id and
/// state; tiers and names are picked here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobPick {
    /// Tier names, lower case; empty: every tier.
    pub tiers: Vec<String>,
    /// Job names; empty: every name.
    pub names: Vec<String>,
    /// Accounts; empty: every account.
    pub accounts: Vec<String>,
}

impl JobPick {
    /// From `-p` and `-n` (comma lists; an empty item is refused, as a typo).
    pub fn new(tiers: Option<&str>, names: Option<&str>) -> Result<JobPick> {
        let list = |flag: &str, text: Option<&str>| -> Result<Vec<String>> {
            let Some(text) = text else {
                return Ok(Vec::new());
            };
            let items: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
            if items.iter().any(String::is_empty) {
                return Err(anyhow!("{flag} '{text}' has an empty item"));
            }
            Ok(items)
        };
        Ok(JobPick {
            tiers: list("-p/--priority", tiers)?
                .into_iter()
                .map(|t| t.to_ascii_lowercase())
                .collect(),
            names: list("-n/--name", names)?,
            accounts: Vec::new(),
        })
    }

    /// With `-A` (a comma list; an empty item is refused).
    pub fn with_accounts(mut self, accounts: Option<&str>) -> Result<JobPick> {
        if let Some(text) = accounts {
            let items: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
            if items.iter().any(String::is_empty) {
                return Err(anyhow!("-A/--account '{text}' has an empty item"));
            }
            self.accounts = items;
        }
        Ok(self)
    }

    /// Whether `job` is shown.
    pub fn picks(&self, job: &JobInfo) -> bool {
        (self.tiers.is_empty() || self.tiers.iter().any(|t| t.eq_ignore_ascii_case(&job.tier)))
            && (self.names.is_empty() || self.names.contains(&job.name))
            && (self.accounts.is_empty() || self.accounts.contains(&job.account))
    }
}

/// Which states `--states` asks for: `None` means every state (`all`), else the canonical names.
pub fn parse_states(list: &str) -> Result<Option<Vec<String>>> {
    let mut states = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item.eq_ignore_ascii_case("all") {
            return Ok(None);
        }
        let state = JobState::parse_named(item).map_err(|e| anyhow!(e))?;
        if !states.contains(&state) {
            states.push(state);
        }
    }
    if states.is_empty() {
        return Err(anyhow!("invalid --states '{list}': no state given"));
    }
    Ok(Some(
        states.into_iter().map(|s| s.as_str().to_string()).collect(),
    ))
}

/// The request for the filters given. `--states all` is `--all`; `--start` asks for pending
/// jobs unless `--states` says otherwise. schedd itself looks at finished jobs when asked for
/// ids or finished states, so `yq -t PD` stays cheap.
///
/// Every `-j` id goes in `targets`, which schedd resolves (`12`: the job, or every task of
/// array 12). A plain id also goes in `job_ids`, which servers older than arrays read.
pub fn list_request(cli: &YqCli, me: Option<String>) -> Result<ListJobsRequest> {
    let (states, all) = match cli.states.as_deref().map(parse_states).transpose()? {
        None if cli.start => (vec![JobState::Pending.as_str().to_string()], cli.all),
        None => (Vec::new(), cli.all),
        Some(None) => (Vec::new(), true),
        Some(Some(states)) => (states, cli.all),
    };
    let targets = flatten_targets(&cli.jobs);
    check_target_count(&targets)?;
    if let Some(user) = &cli.user {
        ysched_common::limits::USER
            .check_len(user)
            .map_err(anyhow::Error::msg)?;
    }
    let now = ysched_common::time::now_ms();
    let since_ms = match cli.since.as_deref() {
        None => 0,
        Some(text) => since_ms(text, now)?,
    };
    let until_ms = match cli.until.as_deref() {
        None => 0,
        Some(text) => {
            crate::report::parse_date(text).map_err(|e| anyhow!("invalid --until: {e}"))?
        }
    };
    Ok(ListJobsRequest {
        since_ms,
        until_ms,
        user: cli.user.clone().or(me).unwrap_or_default(),
        job_ids: targets
            .iter()
            .filter(|t| t.tasks.is_none())
            .map(|t| t.id.0)
            .collect(),
        states,
        all,
        targets: targets.iter().map(ToString::to_string).collect(),
        // As many as schedd sends in one reply; the rest in further pages.
        ..Default::default()
    })
}

/// `--since`: a span back from `now` (`7d`) or a date; never before the epoch's first
/// millisecond (0 means "no bound" on the wire).
fn since_ms(text: &str, now: i64) -> Result<i64> {
    let at = match crate::report::parse_span(text) {
        Ok(span) => now.saturating_sub(span),
        Err(_) => crate::report::parse_date(text).map_err(|e| {
            anyhow!("invalid --since '{text}': neither a span (7d, 36h, 90m) nor a date: {e}")
        })?,
    };
    Ok(at.max(1))
}

/// The jobs of a reply without repeats, in their order: a job named both by id and by target
/// may come twice.
pub fn without_repeats(mut jobs: Vec<JobInfo>) -> Vec<JobInfo> {
    let mut seen = HashSet::with_capacity(jobs.len());
    jobs.retain(|job| seen.insert(job.id));
    jobs
}

/// The name of the user running this process, for `--me`.
pub fn current_user_name() -> Result<String> {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => Ok(user.name),
        _ => Err(anyhow!("cannot find the user name of uid {uid}")),
    }
}

/// The `yq` binary.
pub fn main() -> ExitCode {
    match crate::args::parse_args::<YqCli>("yq") {
        Ok(cli) => client::run_tool("yq", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: YqCli) -> Result<ExitCode> {
    let me = if cli.me {
        Some(current_user_name()?)
    } else {
        None
    };
    let request = list_request(&cli, me)?;
    let pick = JobPick::new(cli.tiers.as_deref(), cli.names.as_deref())?
        .with_accounts(cli.accounts.as_deref())?;
    let format = cli
        .format
        .as_deref()
        .map(crate::jobs::format::parse_format)
        .transpose()?;
    let named = !request.targets.is_empty();
    let (mut client, _) = client::connect_from_config().await?;
    if cli.json {
        // Printed page by page as they come (the same text as all at once).
        let mut seen = HashSet::new();
        let mut out = JsonArrayOut::new();
        client::for_each_page(&mut client, request, |page| {
            let picked = page
                .iter()
                .filter(|job| !named || seen.insert(job.id))
                .filter(|job| pick.picks(job))
                .map(job_to_json);
            out.extend(picked)
        })
        .await?;
        out.finish()?;
        return Ok(ExitCode::SUCCESS);
    }
    // A table's columns are as wide as their widest cell, and an array's waiting tasks fold
    // into one line: made once every page is in.
    let mut jobs = client::list_all_jobs(&mut client, request).await?;
    if named {
        jobs = without_repeats(jobs);
    }
    jobs.retain(|job| pick.picks(job));
    let fold = if cli.array {
        Fold::Never
    } else {
        Fold::Waiting
    };
    if let Some(format) = &format {
        let lines = job_lines(&jobs, fold);
        print_stdout(&crate::jobs::format::format_lines(
            format,
            &lines,
            now_ms(),
            !cli.noheader,
        ))?;
    } else if cli.start {
        print_stdout(&format_start_table(&jobs, !cli.noheader, fold))?;
    } else {
        let lines = job_lines(&jobs, fold);
        print_stdout(&format_queue(&lines, now_ms(), !cli.noheader, cli.long))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> YqCli {
        YqCli::try_parse_from(std::iter::once("yq").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn states_accept_names_and_codes() {
        assert_eq!(
            parse_states("PD,r,completed").unwrap(),
            Some(vec!["PENDING".into(), "RUNNING".into(), "COMPLETED".into()])
        );
        assert_eq!(
            parse_states("R,RUNNING").unwrap(),
            Some(vec!["RUNNING".into()])
        );
        assert_eq!(parse_states("all").unwrap(), None);
        let err = parse_states("R,bogus").unwrap_err().to_string();
        assert!(err.contains("'bogus'"), "{err}");
        assert!(parse_states(",").is_err());
    }

    #[test]
    fn requests() {
        let request = list_request(&cli(&[]), None).unwrap();
        assert_eq!(request, ListJobsRequest::default());
        let request =
            list_request(&cli(&["-u", "bob", "-j", "5,7", "-j", "9", "--all"]), None).unwrap();
        assert_eq!(request.user, "bob");
        assert_eq!(request.job_ids, [5, 7, 9]);
        assert_eq!(request.targets, ["5", "7", "9"]);
        assert!(request.all);
        let request = list_request(&cli(&["-t", "CD,F"]), Some("alice".into())).unwrap();
        assert_eq!(request.states, ["COMPLETED", "FAILED"]);
        assert_eq!(request.user, "alice");
        assert!(!request.all);
        assert!(list_request(&cli(&["-t", "all"]), None).unwrap().all);
        assert!(list_request(&cli(&["-t", "nope"]), None).is_err());
        assert!(YqCli::try_parse_from(["yq", "-j", "x"]).is_err());
        assert!(cli(&["-l"]).long && cli(&["--long"]).long);
        assert!(YqCli::try_parse_from(["yq", "-l", "--json"]).is_err());
    }

    #[test]
    fn array_targets_go_to_schedd_as_typed() {
        let request = list_request(&cli(&["-j", "12_7,12_[1-3,9],14", "-j", "15"]), None).unwrap();
        assert_eq!(request.targets, ["12_7", "12_[1-3,9]", "14", "15"]);
        // Plain ids also as ids, for servers older than arrays; tasks never.
        assert_eq!(request.job_ids, [14, 15]);
        // A pasted folded line: the %N means nothing here.
        let request = list_request(&cli(&["-j", "12_[40-199%16]"]), None).unwrap();
        assert_eq!(request.targets, ["12_[40-199]"]);
        assert!(request.job_ids.is_empty());
        for bad in ["12_", "12_[a]", "x", "0", "12_[1-3"] {
            let err = YqCli::try_parse_from(["yq", "-j", bad]).unwrap_err();
            assert!(err.to_string().contains("is not a job id"), "{bad}: {err}");
        }
    }

    #[test]
    fn start_and_array_flags() {
        let parsed = cli(&["--start"]);
        assert!(parsed.start);
        let request = list_request(&parsed, None).unwrap();
        assert_eq!(request.states, ["PENDING"]);
        let request = list_request(&cli(&["--start", "-t", "PD,HELD"]), None).unwrap();
        assert_eq!(request.states, ["PENDING", "HELD"]);
        assert!(cli(&["-r"]).array && cli(&["--array"]).array);
        assert!(!cli(&[]).array);
        assert!(YqCli::try_parse_from(["yq", "--start", "--json"]).is_err());
        assert!(YqCli::try_parse_from(["yq", "--start", "-l"]).is_err());
    }

    #[test]
    fn tiers_and_names_pick_jobs() {
        let job = |tier: &str, name: &str| JobInfo {
            tier: tier.into(),
            name: name.into(),
            ..Default::default()
        };
        let parsed = cli(&["-p", "High,low", "-n", "a,b"]);
        let pick = JobPick::new(parsed.tiers.as_deref(), parsed.names.as_deref()).unwrap();
        assert!(pick.picks(&job("high", "a")));
        assert!(pick.picks(&job("low", "b")));
        assert!(!pick.picks(&job("medium", "a")));
        assert!(!pick.picks(&job("high", "A")), "names are exact");
        assert!(JobPick::new(None, None).unwrap().picks(&job("x", "y")));
        assert!(JobPick::new(Some("high,"), None).is_err());
        assert!(cli(&["-o", "%i %j"]).format.is_some());
        assert!(YqCli::try_parse_from(["yq", "-o", "id", "--json"]).is_err());
    }

    #[test]
    fn repeated_jobs_are_listed_once() {
        let job = |id| JobInfo {
            id,
            ..Default::default()
        };
        let jobs = without_repeats(vec![job(12), job(13), job(12), job(14), job(13)]);
        let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [12, 13, 14]);
    }
}
