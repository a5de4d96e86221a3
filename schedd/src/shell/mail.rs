//! Mail about jobs (`--mail-type`, `--mail-user`): which of an event's job changes a user asked
//! to be told of ([`collect`]), the message (RFC 5322, Slurm's subjects), and the [`Mailer`]
//! that hands each to `<notify.sendmail> -i -t` on threads of its own. The recipient is only
//! ever in the `To:` header, never on sendmail's command line, and is an address or a user
//! name (`ysched_common::mail_address`, checked at submit; a record from before that check
//! mails its owner instead).
//!
//! **When.** The shell's observer collects the mails of an event while the reactor commits it
//! (under the state lock: no I/O there, only the message text); the flush loop hands them to
//! the mailer once the flush covering the event is done, so that a user is never told of a
//! change a crash could undo. Sending never takes the state lock.
//!
//! **What.** `BEGIN`: the job started. `END`: it ended, whichever way. `FAIL`: it ended
//! FAILED, NODE_FAIL, TIMEOUT or OUT_OF_MEMORY. `TIME_LIMIT` (and `TIME_LIMIT_50/80/90`, which
//! ysched does not tell apart): it reached its time limit (TIMEOUT). `REQUEUE`: it went back to
//! the queue after running. `INVALID_DEPEND`: its dependency can never be met (its pending
//! reason becomes `DependencyNeverSatisfied`, or it is cancelled for it). One mail per
//! event: an end that is a failure at its time limit is one "Reached time limit" mail when
//! TIME_LIMIT was asked for, else one "Failed" mail when FAIL was, else one "Ended".
//!
//! **Arrays.** With `ARRAY_TASKS` every task mails as a job of its own. Without it the array
//! mails as one job: BEGIN when its task of the lowest index starts, END/FAIL/TIME_LIMIT once,
//! when its last task ends (by that task's end), INVALID_DEPEND once (by the lowest task);
//! REQUEUE still for each task requeued.
//!
//! **Bounds.** At most [`MAX_SENDING`] sendmails run at once, each given [`SEND_TIMEOUT`].
//! Mails wait in a queue bounded in all and per user, with a rate per user (`[notify]`, see
//! `mail_queue`): one user's flood drops that user's mail only, summed up in one log line. A
//! failure is logged (rate-limited per user) and counted, never fatal.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use ysched_common::config::NotifyConfig;
use ysched_common::edge::peer_log;
use ysched_common::{Job, JobId, JobState};

use super::mail_queue::{Bounds, MailQueue};
use crate::core::PendingReason;
use crate::state::Records;

/// sendmails running at once.
pub const MAX_SENDING: usize = 4;
/// How long one sendmail may take before it is killed.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// How often an idle mail thread looks for drops to sum up in the log.
const SUMMARY_CHECK: Duration = Duration::from_secs(1);

/// Refuses a submit that asks for mail when this host cannot send any: mail turned off, or no
/// executable sendmail where `notify.sendmail` says. Reads the file system: call it off the
/// async runtime.
pub fn check_sendmail(notify: &NotifyConfig) -> Result<(), String> {
    let Some(path) = notify.sendmail() else {
        return Err(
            "--mail-type needs sendmail on the scheduler host, and mail is turned off there \
             (notify.sendmail is empty); ask your administrator or drop --mail-type"
                .into(),
        );
    };
    if is_executable_file(path) {
        return Ok(());
    }
    Err(format!(
        "--mail-type needs sendmail on the scheduler host ({} is not there); ask your \
         administrator or drop --mail-type",
        path.display()
    ))
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// The job's owner: whose share of the queue and rate it counts against.
    pub user: String,
    pub to: String,
    pub subject: String,
    pub body: String,
}

impl Mail {
    /// The message as `sendmail -i -t` reads it: headers (the recipients from `To:`), a blank
    /// line, the body.
    pub fn rfc5322(&self) -> String {
        format!(
            "To: {}\r\nSubject: {}\r\nAuto-Submitted: auto-generated\r\nMIME-Version: 1.0\r\n\
             Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{}",
            header_text(&self.to),
            header_text(&self.subject),
            self.body.replace('\n', "\r\n")
        )
    }
}

/// A header's value on one line: names and addresses are checked printable at submit, and
/// this keeps a record from before that check from adding headers.
fn header_text(value: &str) -> String {
    value.replace(['\r', '\n'], " ")
}

/// What happened to a job that a mail type names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Began,
    Ended,
    Requeued,
    InvalidDepend,
}

/// The mails `jobs` (an event's new job versions, not yet in `rec`) call for, added to `out`.
/// Cheap for jobs that asked for none: one test each.
pub fn collect(rec: &Records, jobs: &[Job], out: &mut Vec<Mail>) {
    let mut ending: Option<BTreeSet<JobId>> = None;
    for new in jobs.iter().filter(|j| !j.spec.mail_types.is_empty()) {
        // A job not in memory yet is being submitted: nothing to tell.
        let Some(old) = rec.jobs().get(&new.id) else {
            continue;
        };
        let Some(event) = event_of(old, new) else {
            continue;
        };
        let per_task = new.array.is_none() || wants(new, "ARRAY_TASKS");
        let subject_id = subject_id(new, per_task);
        if !per_task {
            let Some(task) = new.array.as_ref() else {
                continue;
            };
            let lowest = new.spec.array.as_ref().map_or(0, |a| a.min);
            let keep = match event {
                Event::Began | Event::InvalidDepend => task.task == lowest,
                Event::Requeued => true,
                Event::Ended => {
                    let ending = ending.get_or_insert_with(|| {
                        jobs.iter()
                            .filter(|j| j.state.is_terminal())
                            .map(|j| j.id)
                            .collect()
                    });
                    last_task_left(rec, new, ending)
                }
            };
            if !keep {
                continue;
            }
        }
        if let Some(mail) = mail_for(new, event, &subject_id, per_task) {
            out.push(mail);
        }
    }
}

/// The `INVALID_DEPEND` mails of an event's new pending reasons (kept in memory only, not
/// among its jobs): a job whose dependency has just become impossible to meet. Cheap when no
/// reason is that one.
pub fn collect_reasons(rec: &Records, reasons: &[(JobId, PendingReason)], out: &mut Vec<Mail>) {
    let never = PendingReason::DependencyNeverSatisfied;
    for (id, reason) in reasons.iter().filter(|(_, r)| *r == never) {
        let Some(job) = rec.jobs().get(id) else {
            continue;
        };
        if never.is_text_of(&job.reason) || !wants(job, "INVALID_DEPEND") {
            continue;
        }
        let per_task = job.array.is_none() || wants(job, "ARRAY_TASKS");
        let lowest = job.spec.array.as_ref().map_or(0, |a| a.min);
        if !per_task && job.array.as_ref().is_some_and(|a| a.task != lowest) {
            continue;
        }
        let mut job = Job::clone(job);
        job.reason = reason.to_string();
        let subject_id = subject_id(&job, per_task);
        out.extend(mail_for(&job, Event::InvalidDepend, &subject_id, per_task));
    }
}

/// `12`, `12_7`, or `12_*` for an array that mails as one job.
fn subject_id(job: &Job, per_task: bool) -> String {
    if per_task {
        job.display_id()
    } else {
        format!("{}_*", job.array.as_ref().map_or(job.id, |a| a.array_id))
    }
}

/// What changed from `old` to `new`, if it is something a mail type names.
fn event_of(old: &Job, new: &Job) -> Option<Event> {
    if !old.state.is_terminal() && new.state.is_terminal() {
        Some(Event::Ended)
    } else if new.state == JobState::Running && !old.state.holds_resources() {
        Some(Event::Began)
    } else if old.state.holds_resources() && matches!(new.state, JobState::Pending | JobState::Held)
    {
        Some(Event::Requeued)
    } else if PendingReason::DependencyNeverSatisfied.is_text_of(&new.reason)
        && old.reason != new.reason
    {
        Some(Event::InvalidDepend)
    } else {
        None
    }
}

/// No task of `task`'s array is left once this event's ending tasks (`ending`) are gone.
fn last_task_left(rec: &Records, task: &Job, ending: &BTreeSet<JobId>) -> bool {
    let Some(array) = task.array.as_ref() else {
        return true;
    };
    let count = task.spec.array.as_ref().map_or(1, |a| u64::from(a.count));
    let ids = array.array_id..JobId(array.array_id.0 + count);
    // Ended tasks leave memory, so the first one found is usually still active. Among the
    // tasks ending in this event, the one of the highest id speaks for them all.
    let others_active = rec
        .jobs()
        .range(ids.clone())
        .any(|(id, _)| *id != task.id && !ending.contains(id));
    let later_ending = ending.range(ids).any(|id| *id > task.id);
    !others_active && !later_ending
}

fn wants(job: &Job, mail_type: &str) -> bool {
    job.spec.mail_types.iter().any(|t| t == mail_type)
}

/// The mail for `event` of `job`, if its mail types ask for it.
fn mail_for(job: &Job, event: Event, subject_id: &str, per_task: bool) -> Option<Mail> {
    let failed = matches!(
        job.state,
        JobState::Failed | JobState::NodeFail | JobState::Timeout | JobState::OutOfMemory
    );
    let time_limit = job.state == JobState::Timeout
        && job
            .spec
            .mail_types
            .iter()
            .any(|t| t.starts_with("TIME_LIMIT"));
    // `scheduler.kill_invalid_depend` ends such a job CANCELLED with this reason.
    let never_satisfied = PendingReason::DependencyNeverSatisfied.is_text_of(&job.reason);
    let what = match event {
        Event::Began if wants(job, "BEGIN") => "Began",
        Event::Ended if never_satisfied && wants(job, "INVALID_DEPEND") => {
            "Dependency never satisfied"
        }
        Event::Requeued if wants(job, "REQUEUE") => "Requeued",
        Event::InvalidDepend if wants(job, "INVALID_DEPEND") => "Dependency never satisfied",
        Event::Ended if time_limit => "Reached time limit",
        Event::Ended if failed && wants(job, "FAIL") => "Failed",
        Event::Ended if wants(job, "END") => "Ended",
        _ => return None,
    };
    let array = if per_task { "" } else { "Array " };
    let mut subject = format!(
        "ysched {array}Job_id={subject_id} Name={} {what}",
        job.spec.name
    );
    match event {
        Event::Began => {
            let waited = job.start_time.unwrap_or(job.submit_time) - job.submit_time;
            subject.push_str(&format!(", Queued time {}", duration(waited)));
        }
        Event::Ended | Event::Requeued => {
            let ran = match (job.start_time, job.end_time) {
                (Some(start), Some(end)) => end - start,
                _ => 0,
            };
            subject.push_str(&format!(", Run time {}", duration(ran)));
            if event == Event::Ended {
                let last = if per_task {
                    String::new()
                } else {
                    format!("last task {} ", job.display_id())
                };
                subject.push_str(&format!(
                    ", {last}{}, ExitCode {}",
                    job.state,
                    job.exit_code.unwrap_or(0)
                ));
            }
        }
        Event::InvalidDepend => {}
    }
    // An address or a user name, as checked at submit; a record from before that check
    // with anything else mails its owner.
    let mail_user = &job.spec.mail_user;
    let to = if mail_user.is_empty()
        || ysched_common::mail_address::check_mail_user(mail_user).is_err()
    {
        job.owner.user.clone()
    } else {
        mail_user.clone()
    };
    let nodes: Vec<&str> = job.alloc.iter().map(|a| a.node.as_str()).collect();
    let mut body = format!(
        "{subject}\n\nJob:     {} ({})\nUser:    {}\nAccount: {}\nTier:    {}\nState:   {}\n",
        job.display_id(),
        job.spec.name,
        job.owner.user,
        job.spec.account,
        job.spec.tier,
        job.state
    );
    if !job.reason.is_empty() {
        body.push_str(&format!("Reason:  {}\n", job.reason));
    }
    if !nodes.is_empty() {
        body.push_str(&format!("Nodes:   {}\n", nodes.join(",")));
    }
    body.push_str(&format!(
        "\n`yctl show job {}` tells the rest.\n",
        job.display_id()
    ));
    Some(Mail {
        user: job.owner.user.clone(),
        to,
        subject,
        body,
    })
}

/// Slurm's run-time form: `HH:MM:SS`, `D-HH:MM:SS` from a day on.
fn duration(ms: i64) -> String {
    let secs = (ms.max(0) / 1000) as u64;
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// What became of the mails handed to a [`Mailer`].
#[derive(Debug, Default)]
pub struct MailCounts {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

/// Sends mails through `<sendmail> -i -t` on [`MAX_SENDING`] threads of its own, started with
/// the first mail, from the per-user bounded [`MailQueue`].
pub struct Mailer {
    sendmail: Option<PathBuf>,
    queue: Arc<Queue>,
    started: OnceLock<()>,
    counts: Arc<MailCounts>,
}

/// The queue the mail threads share, and the wake-up of one of them.
struct Queue {
    mails: Mutex<MailQueue>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, MailQueue> {
        self.mails.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Mailer {
    pub fn new(notify: &NotifyConfig) -> Mailer {
        Mailer {
            sendmail: notify.sendmail().map(Path::to_path_buf),
            queue: Arc::new(Queue {
                mails: Mutex::new(MailQueue::new(Bounds::of(notify))),
                ready: Condvar::new(),
            }),
            started: OnceLock::new(),
            counts: Arc::default(),
        }
    }

    pub fn counts(&self) -> &MailCounts {
        &self.counts
    }

    /// Queues `mails`, never blocking: a mail over its user's share or rate, or beyond the
    /// whole queue, is dropped (summed up in the log per user, see `mail_queue`).
    pub fn send(&self, mails: Vec<Mail>) {
        let Some(sendmail) = &self.sendmail else {
            if !mails.is_empty() {
                tracing::debug!(
                    "{} job mails not sent: notify.sendmail is empty",
                    mails.len()
                );
                self.counts
                    .dropped
                    .fetch_add(mails.len() as u64, Ordering::Relaxed);
            }
            return;
        };
        if mails.is_empty() {
            return;
        }
        self.started.get_or_init(|| {
            start_workers(
                sendmail.clone(),
                Arc::clone(&self.queue),
                Arc::clone(&self.counts),
            )
        });
        let now = Instant::now();
        let (mut queued, mut dropped) = (0, 0);
        let mut queue = self.queue.lock();
        for mail in mails {
            match queue.offer(mail, now) {
                Ok(()) => queued += 1,
                Err(_) => dropped += 1,
            }
        }
        drop(queue);
        self.counts.dropped.fetch_add(dropped, Ordering::Relaxed);
        // A thread for each mail, and one at least for drops: it sums them up when due.
        let wake = if dropped > 0 { queued.max(1) } else { queued };
        for _ in 0..wake.min(MAX_SENDING) {
            self.queue.ready.notify_one();
        }
    }
}

fn start_workers(sendmail: PathBuf, queue: Arc<Queue>, counts: Arc<MailCounts>) {
    for i in 0..MAX_SENDING {
        let (queue, sendmail, counts) = (Arc::clone(&queue), sendmail.clone(), Arc::clone(&counts));
        let spawned = std::thread::Builder::new()
            .name(format!("mail-{i}"))
            .spawn(move || loop {
                let mail = next_mail(&queue);
                match send_one(&sendmail, &mail) {
                    Ok(()) => {
                        counts.sent.fetch_add(1, Ordering::Relaxed);
                        tracing::info!("job mail sent to {}: {}", mail.to, mail.subject);
                    }
                    Err(e) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        peer_log::warn(
                            "job mail failed",
                            &mail.user,
                            format_args!(
                                "job mail of user {} to {} failed ({}): {e}",
                                mail.user,
                                mail.to,
                                sendmail.display()
                            ),
                        );
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a mail thread: {e}");
        }
    }
}

/// Waits for the next mail to send; while none waits, logs what was dropped once it is due
/// (see `mail_queue`).
fn next_mail(queue: &Queue) -> Mail {
    let mut mails = queue.lock();
    loop {
        let lines = mails.take_summaries(Instant::now());
        if !lines.is_empty() {
            drop(mails);
            for line in lines {
                tracing::warn!("job mail: {line}");
            }
            mails = queue.lock();
        }
        if let Some(mail) = mails.next() {
            return mail;
        }
        mails = if mails.has_drops() {
            queue
                .ready
                .wait_timeout(mails, SUMMARY_CHECK)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        } else {
            queue
                .ready
                .wait(mails)
                .unwrap_or_else(PoisonError::into_inner)
        };
    }
}

/// Runs `<sendmail> -i -t` with the message on its standard input, killed after
/// [`SEND_TIMEOUT`]: the recipients come from the `To:` header only (`-t`), so no part of
/// an address is ever an argument, and a line of a lone `.` does not end the message (`-i`).
fn send_one(sendmail: &Path, mail: &Mail) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(sendmail)
        .args(["-i", "-t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A sendmail that exits early closes the pipe: its exit status says why.
        let _ = stdin.write_all(mail.rfc5322().as_bytes());
    }
    let deadline = std::time::Instant::now() + SEND_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("it exited with {status}")),
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "it did not finish in {} s and was killed",
                    SEND_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}

#[cfg(test)]
#[path = "mail_tests.rs"]
mod tests;
