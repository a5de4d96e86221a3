//! `ycancel`: cancel jobs, like scancel.

use crate::client::{self, reply};
use crate::jobs::{check_target_count, flatten_targets, parse_target_list, TargetList};
use anyhow::{bail, Result};
use clap::Parser;
use std::process::ExitCode;
use ysched_common::text::escape_for_terminal;
use ysched_proto::{CancelReply, CancelRequest};

#[derive(Parser, Debug)]
#[command(
    name = "ycancel",
    version,
    about = "Cancel ysched jobs",
    override_usage = "ycancel [-v] JOBID...\n       ycancel [-v] -u USER"
)]
pub struct YcancelCli {
    /// Jobs to cancel (space- or comma-separated): `12` (a job, or every task of array 12 not
    /// yet ended), `12_7` (one task of an array), `12_[1-5,9]` (some tasks)
    #[arg(value_name = "JOBID", value_parser = parse_target_list)]
    pub jobs: Vec<TargetList>,
    /// Cancel all active jobs of this user (with JOBIDs: only those of them that are the user's)
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,
    /// Print the ids of the jobs cancelled (`12_7` for an array task)
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// The request: every job as a target, which schedd resolves (`12` being a whole array).
pub fn cancel_request(cli: &YcancelCli) -> Result<CancelRequest> {
    if cli.jobs.is_empty() && cli.user.is_none() {
        bail!("no job id given (ycancel JOBID... or ycancel -u USER)");
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
