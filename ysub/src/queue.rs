//! `yq`: list jobs, like squeue.

use crate::client::{self, reply};
use crate::jobs::{format_job_table, format_job_table_long, job_to_json, JobJson};
use crate::output::{print_json, print_stdout};
use anyhow::{anyhow, Result};
use clap::Parser;
use std::process::ExitCode;
use ysched_common::time::now_ms;
use ysched_common::JobState;
use ysched_proto::ListJobsRequest;

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
    /// Only these jobs (comma list, or repeat)
    #[arg(short = 'j', long, value_name = "ID[,ID]", value_delimiter = ',')]
    pub jobs: Vec<u64>,
    /// Only jobs in these states: full names or short codes (PD, R, CD, F, CA, TO, NF, PR, OOM), or `all`
    #[arg(short = 't', long, value_name = "STATES")]
    pub states: Option<String>,
    /// Include finished jobs
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Print a JSON array of jobs instead of the table
    #[arg(long)]
    pub json: bool,
    /// Also show each job's account and, for a pending job, its place in its tier's queue
    /// (1: next) and its account's fair-share factor
    #[arg(short = 'l', long, conflicts_with = "json")]
    pub long: bool,
    /// Leave out the header line
    #[arg(long)]
    pub noheader: bool,
}

/// Which states `--states` asks for: `None` means every state (`all`), else the canonical names.
pub fn parse_states(list: &str) -> Result<Option<Vec<String>>> {
    let mut states = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item.eq_ignore_ascii_case("all") {
            return Ok(None);
        }
        let state = JobState::parse(item).ok_or_else(|| {
            let known: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            anyhow!(
                "invalid job state '{item}': use one of {} (or short codes like PD, R, CD)",
                known.join(", ")
            )
        })?;
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

/// The request for the filters given. `--states all` is `--all`. schedd itself looks at
/// finished jobs when asked for ids or finished states, so `yq -t PD` stays cheap.
pub fn list_request(cli: &YqCli, me: Option<String>) -> Result<ListJobsRequest> {
    let (states, all) = match cli.states.as_deref().map(parse_states).transpose()? {
        None => (Vec::new(), cli.all),
        Some(None) => (Vec::new(), true),
        Some(Some(states)) => (states, cli.all),
    };
    Ok(ListJobsRequest {
        user: cli.user.clone().or(me).unwrap_or_default(),
        job_ids: cli.jobs.clone(),
        states,
        all,
        targets: Vec::new(),
    })
}

/// The name of the user running this process, for `--me`.
fn current_user_name() -> Result<String> {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => Ok(user.name),
        _ => Err(anyhow!("cannot find the user name of uid {uid}")),
    }
}

/// The `yq` binary.
pub fn main() -> ExitCode {
    match client::parse_args::<YqCli>("yq") {
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
    let (mut client, _) = client::connect_from_config().await?;
    let jobs = reply(client.list_jobs(request).await)?.jobs;
    if cli.json {
        let objects: Vec<JobJson> = jobs.iter().map(job_to_json).collect();
        print_json(&objects)?;
    } else if cli.long {
        print_stdout(&format_job_table_long(&jobs, now_ms(), !cli.noheader))?;
    } else {
        print_stdout(&format_job_table(&jobs, now_ms(), !cli.noheader))?;
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
}
