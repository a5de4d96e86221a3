//! `ysub --wait`: following the submitted jobs until each has ended (through schedd restarts),
//! a spinner on a terminal, and the lines and exit code the wait ends with.

use crate::client::{self, status_error, Client};
use anyhow::{anyhow, Result};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;
use ysched_common::text::escape_for_terminal;
use ysched_common::JobState;
use ysched_proto::{JobInfo, JobRef};

/// How many times in a row `--wait` tries to re-establish its watch (once a second) before
/// giving up, e.g. while schedd restarts.
const WATCH_RETRIES: u32 = 60;

/// `--wait`: follows jobs `first`, `first + 1`, ... (`count` of them: an array's tasks have
/// consecutive job ids, the first being the array's id) one after another until each has
/// ended, and returns them as they ended, without their specs. Shows a spinner on a terminal.
pub(super) async fn wait_for_jobs(
    mut client: Client,
    socket: &Path,
    first: u64,
    count: u32,
    is_array: bool,
) -> Result<Vec<JobInfo>> {
    let array = is_array.then_some(count);
    let spinner = std::io::stderr()
        .is_terminal()
        .then(|| new_spinner(first, array));
    let mut ended = Vec::with_capacity(count as usize);
    let mut outcome = Ok(());
    if is_array && count > 1 {
        match wait_for_array(&mut client, socket, first, count, spinner.as_ref()).await {
            Ok(Some(tasks)) => {
                if let Some(spinner) = spinner {
                    spinner.finish_and_clear();
                }
                return Ok(tasks);
            }
            // A schedd that watches one job per request (an older one): task by task.
            Ok(None) => {}
            Err(e) => {
                if let Some(spinner) = spinner {
                    spinner.finish_and_clear();
                }
                return Err(e);
            }
        }
    }
    for job_id in (first..).take(count as usize) {
        let progress = array.map(|total| (ended.len(), total));
        match wait_for_job(&mut client, socket, job_id, spinner.as_ref(), progress).await {
            Ok(mut job) => {
                // Kept for the summary only: a spec carries the whole script.
                job.spec = None;
                ended.push(job);
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    outcome.map(|()| ended)
}

/// Follows the `count` tasks of array `first` with one `WatchJob` of the array's name, which
/// streams each task once it has ended (a request per task would cost schedd and `ysub` as
/// much as the tasks themselves on an array of short ones), and returns them in task order.
/// If the stream breaks (schedd restarting) it reconnects and watches again, keeping what it
/// has. `Ok(None)` when schedd refuses to watch several jobs at once (an older schedd).
async fn wait_for_array(
    client: &mut Client,
    socket: &Path,
    first: u64,
    count: u32,
    spinner: Option<&indicatif::ProgressBar>,
) -> Result<Option<Vec<JobInfo>>> {
    let mut ended = std::collections::BTreeMap::new();
    let mut failures = 0u32;
    let mut answered = false;
    loop {
        let request = JobRef {
            job_id: first,
            target: first.to_string(),
        };
        match client.watch_job(request).await {
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(task)) => {
                            answered = true;
                            failures = 0;
                            if !is_finished(&task) || task.id < first {
                                continue;
                            }
                            if let Some(spinner) = spinner {
                                let progress = Some((ended.len() + 1, count));
                                spinner.set_message(spinner_message(&task, progress));
                            }
                            ended.insert(task.id, task);
                            if ended.len() >= count as usize {
                                return Ok(Some(ended.into_values().collect()));
                            }
                        }
                        Ok(None) => break,
                        Err(status) if is_transient(&status) => break,
                        Err(status) => return Err(status_error(status)),
                    }
                }
            }
            Err(status) if !answered && status.code() == tonic::Code::InvalidArgument => {
                return Ok(None)
            }
            Err(status) if is_transient(&status) => {}
            Err(status) => return Err(status_error(status)),
        }
        reconnect_after_loss(client, socket, &mut failures, &format!("array {first}")).await?;
    }
}

/// After a watch broke off: another try in a second, on a new connection, unless
/// [`WATCH_RETRIES`] tries in a row have failed (an error naming `what` was waited for).
async fn reconnect_after_loss(
    client: &mut Client,
    socket: &Path,
    failures: &mut u32,
    what: &str,
) -> Result<()> {
    *failures += 1;
    if *failures > WATCH_RETRIES {
        return Err(anyhow!("lost contact with schedd while waiting for {what}"));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let Ok(reconnected) = client::connect(socket).await {
        *client = reconnected;
    }
    Ok(())
}

/// Follows one job's `WatchJob` stream until it reports a terminal state. If the stream
/// breaks (schedd restarting) it reconnects and watches again.
async fn wait_for_job(
    client: &mut Client,
    socket: &Path,
    job_id: u64,
    spinner: Option<&indicatif::ProgressBar>,
    progress: Option<(usize, u32)>,
) -> Result<JobInfo> {
    let mut failures = 0u32;
    loop {
        match watch_until_terminal(client, job_id, spinner, progress, &mut failures).await {
            Ok(Some(job)) => return Ok(job),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        reconnect_after_loss(client, socket, &mut failures, &format!("job {job_id}")).await?;
    }
}

/// One watch: `Ok(Some(job))` once the job is finished, `Ok(None)` when the stream broke off
/// in a way worth retrying, an error when schedd refused (unknown job, ...).
async fn watch_until_terminal(
    client: &mut Client,
    job_id: u64,
    spinner: Option<&indicatif::ProgressBar>,
    progress: Option<(usize, u32)>,
    failures: &mut u32,
) -> Result<Option<JobInfo>> {
    let mut stream = match client
        .watch_job(JobRef {
            job_id,
            target: String::new(),
        })
        .await
    {
        Ok(response) => response.into_inner(),
        Err(status) if is_transient(&status) => return Ok(None),
        Err(status) => return Err(status_error(status)),
    };
    loop {
        match stream.message().await {
            Ok(Some(job)) => {
                *failures = 0;
                if let Some(spinner) = spinner {
                    spinner.set_message(spinner_message(&job, progress));
                }
                if is_finished(&job) {
                    return Ok(Some(job));
                }
            }
            // The stream ends only after a terminal state; ending before one means schedd went away.
            Ok(None) => return Ok(None),
            Err(status) if is_transient(&status) => return Ok(None),
            Err(status) => return Err(status_error(status)),
        }
    }
}

/// Errors that a broken connection produces, as opposed to a refusal by schedd: among them
/// an HTTP/2 stream reset (which tonic reports as an internal error naming h2), as a schedd
/// of an earlier version forwarded a leader's broken-off answer.
fn is_transient(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted => true,
        Code::Internal => status.message().starts_with("h2 protocol error"),
        _ => false,
    }
}

pub(super) fn is_finished(job: &JobInfo) -> bool {
    JobState::parse(&job.state).is_some_and(JobState::is_terminal)
}

/// `array`: the number of tasks when `job_id` is an array's id.
fn new_spinner(job_id: u64, array: Option<u32>) -> indicatif::ProgressBar {
    let spinner = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        spinner.set_style(style);
    }
    spinner.set_message(match array {
        Some(tasks) => format!("Array {job_id} submitted ({tasks} tasks)"),
        None => format!("Job {job_id} submitted"),
    });
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}

/// `progress`: for an array's task, how many of how many tasks have ended.
pub(super) fn spinner_message(job: &JobInfo, progress: Option<(usize, u32)>) -> String {
    let state = escape_for_terminal(&job.state);
    let mut message = format!("Job {} {state}", job_name(job));
    if !job.reason.is_empty() {
        message.push_str(&format!(" ({})", escape_for_terminal(&job.reason)));
    }
    if let Some((ended, total)) = progress {
        message.push_str(&format!(", {ended} of {total} tasks ended"));
    }
    message
}

/// The job as users name it: `12_7` for an array task.
fn job_name(job: &JobInfo) -> String {
    escape_for_terminal(&crate::jobs::display_id(job)).into_owned()
}

/// The exit code of `ysub --wait` for an array, as sbatch's: the highest of its tasks' (see
/// [`wait_exit_code`]), so 0 only when every task COMPLETED.
pub fn array_exit_code(tasks: &[JobInfo]) -> u8 {
    tasks.iter().map(wait_exit_code).max().unwrap_or(0)
}

/// The line `ysub --wait` ends with for an array: `Array 12: 3 tasks ended, 2 COMPLETED,
/// 1 FAILED (exit 3)`, states in the order first seen.
pub fn array_summary(array_id: u64, tasks: &[JobInfo], exit_code: u8) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for task in tasks {
        match counts.iter_mut().find(|(state, _)| *state == task.state) {
            Some((_, n)) => *n += 1,
            None => counts.push((&task.state, 1)),
        }
    }
    let states: Vec<String> = counts
        .iter()
        .map(|(state, n)| format!("{n} {}", escape_for_terminal(state)))
        .collect();
    format!(
        "Array {array_id}: {} tasks ended, {} (exit {exit_code})",
        tasks.len(),
        states.join(", ")
    )
}

/// The exit code `ysub --wait` returns for a finished job: 0 when it COMPLETED; otherwise never
/// 0: 128+signal when a signal killed it, its own exit code when that is non-zero, else 1 (a
/// CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED or OUT_OF_MEMORY job with nothing better to
/// report).
pub fn wait_exit_code(job: &JobInfo) -> u8 {
    if JobState::parse(&job.state) == Some(JobState::Completed) {
        return 0;
    }
    if let Some(signal) = job.signal.filter(|s| (1..128).contains(s)) {
        return 128 + signal as u8;
    }
    match job.exit_code {
        Some(code) if (1..=255).contains(&code) => code as u8,
        _ => 1,
    }
}

/// The line `ysub --wait` ends with on stderr, e.g. `Job 7 COMPLETED (exit 0)` (`Job 12_7 ...`
/// for an array task). When the job's own exit code is not the one `ysub` exits with (a job
/// that exited 0 in the grace of its time limit ends TIMEOUT, and `ysub` exits 1), both are
/// said: `Job 7 TIMEOUT (job exit code 0, ysub exits 1)`, never an exit the job did not have.
pub fn final_line(job: &JobInfo, exit_code: u8) -> String {
    let own = job.exit_code.filter(|code| *code != i32::from(exit_code));
    let mut line = match own {
        Some(code) if job.signal.is_none() => format!(
            "Job {} {} (job exit code {code}, ysub exits {exit_code}",
            job_name(job),
            escape_for_terminal(&job.state)
        ),
        _ => format!(
            "Job {} {} (exit {exit_code}",
            job_name(job),
            escape_for_terminal(&job.state)
        ),
    };
    if let Some(signal) = job.signal {
        line.push_str(&format!(", signal {signal}"));
    }
    line.push(')');
    if !job.reason.is_empty() && JobState::parse(&job.state) != Some(JobState::Completed) {
        line.push_str(": ");
        line.push_str(&escape_for_terminal(&job.reason));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(state: &str, exit_code: Option<i32>, signal: Option<i32>) -> JobInfo {
        JobInfo {
            id: 7,
            state: state.into(),
            exit_code,
            signal,
            ..Default::default()
        }
    }

    #[test]
    fn the_final_line_never_names_an_exit_the_job_did_not_have() {
        let mut job = finished("TIMEOUT", Some(0), None);
        job.reason = "time limit reached".into();
        let code = wait_exit_code(&job);
        assert_eq!(code, 1);
        assert_eq!(
            final_line(&job, code),
            "Job 7 TIMEOUT (job exit code 0, ysub exits 1): time limit reached"
        );
        // The same code: said once, as before.
        let job = finished("FAILED", Some(3), None);
        assert_eq!(final_line(&job, 3), "Job 7 FAILED (exit 3)");
        let job = finished("TIMEOUT", None, None);
        assert_eq!(final_line(&job, 1), "Job 7 TIMEOUT (exit 1)");
        let job = finished("CANCELLED", Some(143), Some(15));
        assert_eq!(
            final_line(&job, 143),
            "Job 7 CANCELLED (exit 143, signal 15)"
        );
    }
}
