//! `ysub`: submit a batch script, like sbatch.
//!
//! Options come from four places, later ones winning: the `#SBATCH` lines of the script (top to
//! bottom, translated through [`crate::slurm`]'s table by [`sbatch`]), its `#YSUB` lines, then the command
//! line. Everything is checked before schedd is contacted, so a bad option never submits
//! anything.
//!
//! - [`options`]: the job options and the command line, with their value parsers.
//! - [`directives`]: the batch script, its `#YSUB` lines, and the options in effect.
//! - [`sbatch`]: sbatch's options (`#SBATCH` lines, the `sbatch` front end's command line)
//!   applied to ysub's, through [`crate::slurm`]'s table.
//! - [`request`]: the job spec built from the options, checked before it is sent.
//! - [`output_dir`]: the warning for an output directory missing on the submit host.
//! - [`wait`]: `--wait`, following the jobs to their end, and the lines and exit code it ends with.

pub mod directives;
pub mod options;
pub mod output_dir;
pub mod request;
pub mod sbatch;
pub mod wait;

pub use directives::{options_from_directives, resolve, BatchScript};
pub use options::{JobOptions, YsubCli};
pub use request::{build_spec, check_payload_size, SubmitContext};
pub use wait::{array_exit_code, array_summary, final_line, wait_exit_code};

use crate::client::{self, reply_to};
use anyhow::{anyhow, Result};
use std::process::ExitCode;
use wait::wait_for_jobs;
use ysched_common::Config;
use ysched_proto::SubmitRequest;

/// The `ysub` binary.
pub fn main() -> ExitCode {
    let args = std::env::args_os().collect();
    // Slurm's flags that ysub refuses get the table's alternative instead of clap's tip.
    match crate::args::parse_args_with::<YsubCli>("ysub", args, crate::slurm::slurm_flag_message) {
        Ok(cli) if cli.slurm_options_markdown => {
            print!("{}", crate::slurm::markdown::options_table());
            ExitCode::SUCCESS
        }
        Ok(cli) => client::run_tool("ysub", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: YsubCli) -> Result<ExitCode> {
    let (options, script) = resolve(cli)?;
    submit_and_report(&options, script, "Submitted job").await
}

/// Submits the job `options` and `script` make, prints `<submitted> <id>` (or the id alone
/// with `--parsable`), and with `--wait` follows it to its end: ysub's and an sbatch front
/// end's (`"Submitted batch job"`) submission alike.
pub async fn submit_and_report(
    options: &JobOptions,
    script: BatchScript,
    submitted_line: &str,
) -> Result<ExitCode> {
    let config = Config::load()?;
    let spec = build_spec(options, script, &SubmitContext::from_process(&config)?)?;
    check_payload_size(&spec, &config)?;
    output_dir::warn_about_output_dirs(&spec);
    let (mut client, socket) = client::connect_with_config(&config).await?;
    let submitted = reply_to(
        "submit",
        client.submit(SubmitRequest { spec: Some(spec) }).await,
    )?;
    let job_id = submitted.job_id;
    // An array prints its id, as sbatch does: its tasks are `<id>_<index>`.
    if options.parsable {
        println!("{job_id}");
    } else {
        println!("{submitted_line} {job_id}");
    }
    if !options.wait {
        return Ok(ExitCode::SUCCESS);
    }
    if submitted.array_task_count == 0 {
        let mut jobs = wait_for_jobs(client, &socket, job_id, 1, false).await?;
        let job = jobs
            .pop()
            .ok_or_else(|| anyhow!("job {job_id} was not seen to end"))?;
        let code = wait_exit_code(&job);
        eprintln!("{}", final_line(&job, code));
        return Ok(ExitCode::from(code));
    }
    let count = submitted.array_task_count;
    let tasks = wait_for_jobs(client, &socket, job_id, count, true).await?;
    let code = array_exit_code(&tasks);
    for task in &tasks {
        let task_code = wait_exit_code(task);
        if task_code != 0 {
            eprintln!("{}", final_line(task, task_code));
        }
    }
    eprintln!("{}", array_summary(job_id, &tasks, code));
    Ok(ExitCode::from(code))
}

#[cfg(test)]
mod sbatch_tests;
#[cfg(test)]
mod tests;
