//! `scancel`: cancel jobs by id, or by user, name, state and partition, as Slurm's.

use crate::client::{self, reply};
use crate::jobs::{check_target_count, display_id, flatten_targets, parse_target_list, TargetList};
use crate::queue::current_user_name;
use crate::slurm::words::{parse_slurm_states, slurm_state, ysched_states_for};
use anyhow::{anyhow, bail, Result};
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;
use ysched_proto::{CancelRequest, JobInfo, ListJobsRequest};

#[derive(Parser, Debug)]
#[command(
    name = "scancel",
    about = "Slurm's scancel on ysched: cancel jobs",
    disable_version_flag = true,
    disable_help_flag = true
)]
pub struct ScancelCli {
    /// Jobs: `12` (a job, or every task of array 12), `12_7`, `12_[1-3]`
    #[arg(value_name = "JOBID", value_parser = parse_target_list)]
    pub jobs: Vec<TargetList>,
    /// Only jobs of this user (alone: every active job of theirs)
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,
    /// Only your own jobs
    #[arg(long, conflicts_with = "user")]
    pub me: bool,
    /// Only jobs of this name
    #[arg(
        short = 'n',
        long = "name",
        visible_alias = "jobname",
        value_name = "NAME"
    )]
    pub name: Option<String>,
    /// Only jobs in this state (PENDING/PD, RUNNING/R)
    #[arg(short = 't', long = "state", value_name = "STATE")]
    pub state: Option<String>,
    /// Only jobs of this partition (a ysched tier)
    #[arg(short = 'p', long, value_name = "PARTITION")]
    pub partition: Option<String>,
    /// Refused: ysched cannot send a signal to a job on request
    #[arg(short = 's', long, value_name = "SIGNAL")]
    pub signal: Option<String>,
    /// Refused with --signal (the batch shell only)
    #[arg(short = 'b', long)]
    pub batch: bool,
    /// Print what is cancelled
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// No message for jobs already ended (the default here)
    #[arg(short = 'Q', long)]
    pub quiet: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// The signal refusal: ysched has no request that signals a job without stopping it.
pub const SIGNAL_REFUSED: &str = "--signal is not supported: ysched has no request that sends \
    a signal to a running job; scancel without --signal stops it (SIGTERM, then SIGKILL after \
    its grace), and `ysub --signal SIG@SECS` has one sent before the time limit";

/// Whether the command names jobs by a filter that schedd does not apply (name, state,
/// partition): those are found in a listing first.
fn filtered(cli: &ScancelCli) -> bool {
    cli.name.is_some() || cli.state.is_some() || cli.partition.is_some()
}

/// Checks the command line; the user the command is restricted to (`-u`, `--me`, or, for
/// filters without either, the caller: a filter never reaches into other users' jobs).
pub fn check(cli: &ScancelCli, me: impl Fn() -> Result<String>) -> Result<Option<String>> {
    if cli.signal.is_some() || cli.batch {
        bail!(SIGNAL_REFUSED);
    }
    if cli.jobs.is_empty() && cli.user.is_none() && !cli.me && !filtered(cli) {
        bail!("No job identification provided");
    }
    if let Some(user) = &cli.user {
        if user.trim().is_empty() {
            bail!("-u/--user is empty: give a user name");
        }
        ysched_common::limits::USER
            .check_len(user)
            .map_err(anyhow::Error::msg)?;
    }
    if let Some(states) = &cli.state {
        parse_slurm_states(states).map_err(|e| anyhow!(e))?;
    }
    Ok(match &cli.user {
        Some(user) => Some(user.clone()),
        None if cli.me || (filtered(cli) && cli.jobs.is_empty()) => Some(me()?),
        None => None,
    })
}

/// Whether a listed job matches the name, state and partition filters.
pub fn matches(cli: &ScancelCli, job: &JobInfo) -> bool {
    let states = cli
        .state
        .as_deref()
        .and_then(|s| parse_slurm_states(s).ok().flatten());
    cli.name.as_ref().is_none_or(|n| *n == job.name)
        && cli.partition.as_ref().is_none_or(|p| *p == job.tier)
        && states.is_none_or(|s| s.contains(&slurm_state(&job.state).long))
}

/// The `scancel` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::args::parse_args_from::<ScancelCli>("scancel", args) {
        Ok(cli) => client::run_tool("scancel", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: ScancelCli) -> Result<ExitCode> {
    let user = check(&cli, current_user_name)?;
    let targets = flatten_targets(&cli.jobs);
    check_target_count(&targets)?;
    let mut targets: Vec<String> = targets.iter().map(ToString::to_string).collect();
    let (mut client, _) = client::connect_from_config().await?;
    if filtered(&cli) {
        // The active jobs the filters name, among the ids given (if any) and of the user.
        let states = match cli.state.as_deref().map(parse_slurm_states).transpose() {
            Ok(Some(Some(wanted))) => ysched_states_for(&wanted),
            Ok(_) => Vec::new(),
            Err(e) => return Err(anyhow!(e)),
        };
        let listed = client::list_all_jobs(
            &mut client,
            ListJobsRequest {
                user: user.clone().unwrap_or_default(),
                job_ids: Vec::new(),
                states,
                all: false,
                targets: targets.clone(),
                ..Default::default()
            },
        )
        .await?;
        targets = listed
            .iter()
            .filter(|job| matches(&cli, job))
            .map(|job| display_id(job).into_owned())
            .collect();
        targets.dedup();
        if targets.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    let cancelled = reply(
        client
            .cancel(CancelRequest {
                job_ids: Vec::new(),
                user: user.unwrap_or_default(),
                targets,
            })
            .await,
    )?;
    if cli.verbose {
        for name in &cancelled.cancelled_names {
            eprintln!(
                "scancel: Terminating job {}",
                ysched_common::text::escape_for_terminal(name)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> ScancelCli {
        ScancelCli::try_parse_from(std::iter::once("scancel").chain(args.iter().copied())).unwrap()
    }

    fn me() -> Result<String> {
        Ok("alice".into())
    }

    #[test]
    fn who_a_command_reaches() {
        assert_eq!(check(&cli(&["12", "13_[1-3]"]), me).unwrap(), None);
        assert_eq!(
            check(&cli(&["-u", "bob"]), me).unwrap().as_deref(),
            Some("bob")
        );
        assert_eq!(
            check(&cli(&["--me"]), me).unwrap().as_deref(),
            Some("alice")
        );
        // A filter alone reaches only the caller's jobs.
        assert_eq!(
            check(&cli(&["-n", "x"]), me).unwrap().as_deref(),
            Some("alice")
        );
        assert!(check(&cli(&[]), me).is_err());
        assert!(check(&cli(&["-t", "XX"]), me).is_err());
        let err = check(&cli(&["--signal", "USR2", "12"]), me)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--signal is not supported"), "{err}");
        assert!(ScancelCli::try_parse_from(["scancel", "abc"]).is_err());
    }

    #[test]
    fn filters_match_name_state_and_partition() {
        let job = JobInfo {
            name: "train".into(),
            tier: "high".into(),
            state: "HELD".into(),
            ..Default::default()
        };
        assert!(matches(
            &cli(&["-n", "train", "-t", "PD", "-p", "high"]),
            &job
        ));
        assert!(!matches(&cli(&["-t", "R"]), &job));
        assert!(!matches(&cli(&["-n", "other"]), &job));
    }
}
