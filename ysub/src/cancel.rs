//! `ycancel`: cancel jobs, like scancel.

use crate::client::{self, reply};
use crate::jobs::{check_target_count, flatten_targets, parse_target_list, TargetList};
use crate::queue::JobPick;
use anyhow::{bail, Result};
use clap::Parser;
use std::process::ExitCode;
use ysched_common::text::escape_for_terminal;
use ysched_common::JobState;
use ysched_proto::{CancelReply, CancelRequest, JobInfo, ListJobsRequest};

#[derive(Parser, Debug)]
#[command(
    name = "ycancel",
    version,
    about = "Cancel ysched jobs",
    override_usage = "ycancel [-v] JOBID...\n       ycancel [-v] -u USER\n       ycancel [-v] [-u USER] [-n NAME] [-t STATES] [-p TIER] [JOBID...]"
)]
pub struct YcancelCli {
    /// Jobs to cancel (space- or comma-separated): `12` (a job, or every task of array 12 not
    /// yet ended), `12_7` (one task of an array), `12_[1-5,9]` (some tasks)
    #[arg(value_name = "JOBID", value_parser = parse_target_list)]
    pub jobs: Vec<TargetList>,
    /// Cancel all active jobs of this user (with JOBIDs: only those of them that are the user's)
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,
    /// Print the ids of the jobs cancelled (`12_7` for an array task); always so with a
    /// filter (-n, -t, -p)
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Only jobs with these names (comma list, exact)
    #[arg(short = 'n', long = "name", value_name = "NAME[,NAME]")]
    pub names: Option<String>,
    /// Only jobs in these states (comma list: PENDING/PD, HELD, RUNNING/R, PREEMPTING)
    #[arg(short = 't', long = "state", value_name = "STATES")]
    pub states: Option<String>,
    /// Only jobs of these tiers (comma list, any case)
    #[arg(short = 'p', long = "priority", value_name = "TIER[,TIER]")]
    pub tiers: Option<String>,
}

impl YcancelCli {
    /// Whether a filter (-n, -t, -p) narrows what is cancelled, as scancel's do.
    pub fn filtered(&self) -> bool {
        self.names.is_some() || self.states.is_some() || self.tiers.is_some()
    }
}

/// The listing that finds what a filtered cancel cancels: the jobs named (all of them when
/// none is), of `-u`'s user or else the caller's own (`me`), in the states asked for
/// (active ones when none is). The filters on names and tiers are applied to its reply.
pub fn filter_request(cli: &YcancelCli, me: &str) -> Result<ListJobsRequest> {
    let states = match cli
        .states
        .as_deref()
        .map(crate::queue::parse_states)
        .transpose()?
    {
        None | Some(None) => Vec::new(),
        Some(Some(states)) => {
            if let Some(done) = states
                .iter()
                .find(|s| JobState::parse(s).is_some_and(JobState::is_terminal))
            {
                bail!("-t {done}: a job that has ended cannot be cancelled");
            }
            states
        }
    };
    let targets = flatten_targets(&cli.jobs);
    check_target_count(&targets)?;
    let user = cli.user.clone().unwrap_or_else(|| me.to_string());
    ysched_common::limits::USER
        .check_len(&user)
        .map_err(anyhow::Error::msg)?;
    Ok(ListJobsRequest {
        user,
        job_ids: Vec::new(),
        states,
        all: false,
        targets: targets.iter().map(ToString::to_string).collect(),
        ..Default::default()
    })
}

/// The jobs of a filtered listing that a cancel takes: active ones the filters pick, by the
/// names users type (`12_7`).
pub fn picked_targets(jobs: &[JobInfo], pick: &JobPick) -> Vec<String> {
    jobs.iter()
        .filter(|j| JobState::parse(&j.state).is_some_and(|s| !s.is_terminal()))
        .filter(|j| pick.picks(j))
        .map(|j| crate::jobs::display_id(j).into_owned())
        .collect()
}

/// A filtered cancel: lists the jobs, cancels those the filters pick (in requests of at most
/// `limits::TARGETS` names), and says what was cancelled. A job that ends between the
/// listing and the cancel makes schedd refuse the request: it is listed again, up to
/// [`FILTER_TRIES`] times.
async fn cancel_filtered(
    client: &mut crate::client::Client,
    cli: &YcancelCli,
) -> Result<CancelReply> {
    let me = crate::queue::current_user_name()?;
    let request = filter_request(cli, &me)?;
    let pick = JobPick::new(cli.tiers.as_deref(), cli.names.as_deref())?;
    let mut done = CancelReply::default();
    for attempt in 1..=FILTER_TRIES {
        let jobs = client::list_all_jobs(client, request.clone()).await?;
        let targets = picked_targets(&crate::queue::without_repeats(jobs), &pick);
        let mut refused = None;
        for chunk in targets.chunks(ysched_common::limits::TARGETS.max as usize) {
            match reply(
                client
                    .cancel(CancelRequest {
                        job_ids: Vec::new(),
                        user: String::new(),
                        targets: chunk.to_vec(),
                    })
                    .await,
            ) {
                Ok(r) => {
                    done.cancelled.extend(r.cancelled);
                    done.cancelled_names.extend(r.cancelled_names);
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        match refused {
            None => return Ok(done),
            Some(e) if attempt < FILTER_TRIES && e.to_string().contains("already finished") => {}
            Some(e) => return Err(e),
        }
    }
    Ok(done)
}

/// How often a filtered cancel lists again when a job ended under it.
const FILTER_TRIES: u32 = 3;

/// The request: every job as a target, which schedd resolves (`12` being a whole array).
pub fn cancel_request(cli: &YcancelCli) -> Result<CancelRequest> {
    if cli.jobs.is_empty() && cli.user.is_none() && !cli.filtered() {
        bail!("no job id given (ycancel JOBID..., ycancel -u USER, or a filter: -n, -t, -p)");
    }
    let targets = flatten_targets(&cli.jobs);
    check_target_count(&targets)?;
    let user = cli.user.clone().unwrap_or_default();
    if cli.user.is_some() && user.trim().is_empty() {
        bail!("-u/--user is empty: give a user name");
    }
    ysched_common::limits::USER
        .check_len(&user)
        .map_err(anyhow::Error::msg)?;
    Ok(CancelRequest {
        job_ids: Vec::new(),
        user,
        targets: targets.iter().map(ToString::to_string).collect(),
    })
}

/// `ycancel -v`: one `Cancelled job 12_7` line per job, by the names schedd gave (its ids
/// when it gave none, as servers older than arrays do).
pub fn cancelled_lines(reply: &CancelReply) -> String {
    let mut out = String::new();
    if reply.cancelled_names.len() == reply.cancelled.len() {
        for name in &reply.cancelled_names {
            out.push_str(&format!("Cancelled job {}\n", escape_for_terminal(name)));
        }
    } else {
        for id in &reply.cancelled {
            out.push_str(&format!("Cancelled job {id}\n"));
        }
    }
    out
}

/// The `ycancel` binary.
pub fn main() -> ExitCode {
    match crate::args::parse_args::<YcancelCli>("ycancel") {
        Ok(cli) => client::run_tool("ycancel", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: YcancelCli) -> Result<ExitCode> {
    if cli.filtered() {
        // Checked before connecting: a typo cancels nothing.
        filter_request(&cli, "")?;
        JobPick::new(cli.tiers.as_deref(), cli.names.as_deref())?;
        let (mut client, _) = client::connect_from_config().await?;
        let cancelled = cancel_filtered(&mut client, &cli).await?;
        if cancelled.cancelled.is_empty() {
            eprintln!("ycancel: no job matched");
        }
        crate::output::print_stdout(&cancelled_lines(&cancelled))?;
        return Ok(ExitCode::SUCCESS);
    }
    let request = cancel_request(&cli)?;
    let (mut client, _) = client::connect_from_config().await?;
    let cancelled = reply(client.cancel(request).await)?;
    if cli.verbose {
        crate::output::print_stdout(&cancelled_lines(&cancelled))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<YcancelCli, clap::Error> {
        YcancelCli::try_parse_from(std::iter::once("ycancel").chain(args.iter().copied()))
    }

    #[test]
    fn ids_and_user() {
        let request = cancel_request(&parse(&["3", "4,5"]).unwrap()).unwrap();
        assert_eq!(request.targets, ["3", "4", "5"]);
        assert!(request.job_ids.is_empty());
        assert!(request.user.is_empty());
        let request = cancel_request(&parse(&["-u", "bob"]).unwrap()).unwrap();
        assert_eq!(request.user, "bob");
        assert!(request.targets.is_empty());
        assert!(cancel_request(&parse(&[]).unwrap()).is_err());
    }

    #[test]
    fn array_targets() {
        let request =
            cancel_request(&parse(&["12", "12_7", "12_[1-5,9],13_[2]", " 14_3 "]).unwrap())
                .unwrap();
        assert_eq!(
            request.targets,
            ["12", "12_7", "12_[1-5,9]", "13_2", "14_3"]
        );
        // Pasted from yq's folded line.
        let request = cancel_request(&parse(&["12_[40-199%16]"]).unwrap()).unwrap();
        assert_eq!(request.targets, ["12_[40-199]"]);
    }

    #[test]
    fn invalid_ids_are_refused() {
        for bad in [
            "abc", "-1", "1.5", "7x", "12_", "12_[a]", "12_[1-3", "0", "12_7,x",
        ] {
            assert!(parse(&[bad]).is_err(), "{bad} accepted");
        }
        let err = crate::args::clap_error_message(&parse(&["12_x"]).unwrap_err());
        assert!(err.contains("invalid value '12_x'"), "{err}");
        assert!(err.contains("expected 12, 12_7 or 12_[1-5]"), "{err}");
    }

    #[test]
    fn filters_list_the_callers_jobs_and_pick_by_name_state_and_tier() {
        let cli = parse(&["-n", "a,b", "-t", "PD,R", "-p", "low"]).unwrap();
        assert!(cli.filtered());
        let request = filter_request(&cli, "alice").unwrap();
        assert_eq!(request.user, "alice", "your own jobs unless -u says whose");
        assert_eq!(request.states, ["PENDING", "RUNNING"]);
        assert!(request.targets.is_empty());
        let cli = parse(&["-n", "a", "-u", "bob", "12"]).unwrap();
        let request = filter_request(&cli, "alice").unwrap();
        assert_eq!(
            (request.user.as_str(), request.targets.as_slice()),
            ("bob", &["12".to_string()][..])
        );
        let err = filter_request(&parse(&["-t", "CD"]).unwrap(), "alice").unwrap_err();
        assert!(err.to_string().contains("cannot be cancelled"), "{err}");
        assert!(!parse(&["12"]).unwrap().filtered());
        let job = |id: u64, name: &str, tier: &str, state: &str| JobInfo {
            id,
            name: name.into(),
            tier: tier.into(),
            state: state.into(),
            ..Default::default()
        };
        let jobs = [
            job(1, "a", "low", "PENDING"),
            job(2, "b", "high", "PENDING"),
            job(3, "a", "low", "COMPLETED"),
            job(4, "c", "low", "RUNNING"),
        ];
        let pick = JobPick::new(Some("LOW"), Some("a,c")).unwrap();
        assert_eq!(picked_targets(&jobs, &pick), ["1", "4"]);
    }

    #[test]
    fn cancelled_jobs_are_printed_by_name() {
        let reply = CancelReply {
            cancelled: vec![19, 20, 30],
            cancelled_names: vec!["12_7".into(), "12_8".into(), "30".into()],
        };
        assert_eq!(
            cancelled_lines(&reply),
            "Cancelled job 12_7\nCancelled job 12_8\nCancelled job 30\n"
        );
        let old = CancelReply {
            cancelled: vec![3, 4],
            cancelled_names: vec![],
        };
        assert_eq!(cancelled_lines(&old), "Cancelled job 3\nCancelled job 4\n");
    }
}
