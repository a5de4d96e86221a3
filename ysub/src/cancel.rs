//! `ycancel`: cancel jobs, like scancel.

use crate::client::{self, reply};
use anyhow::{bail, Result};
use clap::Parser;
use std::process::ExitCode;
use ysched_proto::CancelRequest;

#[derive(Parser, Debug)]
#[command(
    name = "ycancel",
    version,
    about = "Cancel ysched jobs",
    override_usage = "ycancel [-v] JOBID...\n       ycancel [-v] -u USER"
)]
pub struct YcancelCli {
    /// Jobs to cancel (space- or comma-separated)
    #[arg(value_name = "JOBID", value_delimiter = ',')]
    pub job_ids: Vec<u64>,
    /// Cancel all active jobs of this user (with JOBIDs: only those of them that are the user's)
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,
    /// Print the ids of the jobs cancelled
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

pub fn cancel_request(cli: &YcancelCli) -> Result<CancelRequest> {
    if cli.job_ids.is_empty() && cli.user.is_none() {
        bail!("no job id given (ycancel JOBID... or ycancel -u USER)");
    }
    Ok(CancelRequest {
        job_ids: cli.job_ids.clone(),
        user: cli.user.clone().unwrap_or_default(),
        targets: Vec::new(),
    })
}

/// The `ycancel` binary.
pub fn main() -> ExitCode {
    match client::parse_args::<YcancelCli>("ycancel") {
        Ok(cli) => client::run_tool("ycancel", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: YcancelCli) -> Result<ExitCode> {
    let request = cancel_request(&cli)?;
    let (mut client, _) = client::connect_from_config().await?;
    let cancelled = reply(client.cancel(request).await)?.cancelled;
    if cli.verbose {
        let mut out = String::new();
        for id in cancelled {
            out.push_str(&format!("Cancelled job {id}\n"));
        }
        crate::output::print_stdout(&out)?;
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
        assert_eq!(request.job_ids, [3, 4, 5]);
        assert!(request.user.is_empty());
        let request = cancel_request(&parse(&["-u", "bob"]).unwrap()).unwrap();
        assert_eq!(request.user, "bob");
        assert!(request.job_ids.is_empty());
        assert!(cancel_request(&parse(&[]).unwrap()).is_err());
    }

    #[test]
    fn invalid_ids_are_refused() {
        for bad in ["abc", "-1", "1.5", "7x"] {
            assert!(parse(&[bad]).is_err(), "{bad} accepted");
        }
    }
}
