//! A job's end: how it is made ([`finished_record`]), recorded and reported.
//!
//! The end ([`FinishedRecord`]) says how the job was stopped (asked, timed out, fenced,
//! killed) and whether it saved a checkpoint after its SIGTERM. The node's supervisor makes
//! it for the jobs it ran (with these functions) and records it in the journal; noded makes
//! it for a launch that failed before the hand-over, a job whose supervisor went away, and
//! a job of an older noded's per-job process (from its `exit.json`). One that cannot be
//! recorded is kept in memory until schedd acknowledges it.

use super::JobTask;
use crate::launch::checkpoint_scan::CheckpointDir;
use crate::launch::process::newest_mtime_ms;
use crate::launch::spool::{ExitRecord, FinishedRecord, JobRecord, StopState};
use crate::launch::supervisor_client::record_end;
use crate::launch::tracking::JobProcesses;
use crate::launch::JobEvent;
use std::time::Duration;
use ysched_common::time::now_ms;

/// File timestamps come from the kernel's coarse clock, which lags the precise clock noded
/// reads by up to a tick: a checkpoint written right after SIGTERM can look a few ms older.
const MTIME_GRANULARITY_MS: i64 = 10;

/// The end of a job whose supervisor went away without recording it (it died, or the host
/// restarted). The words an older noded used (it called its per-job processes shepherds),
/// which users and scripts may look for.
pub(in crate::launch) const LOST: &str = "lost: shepherd gone";

impl JobTask {
    /// The exit an older noded's per-job process recorded; nothing for a job of the node's
    /// supervisor (its end comes on its connection, or not at all).
    fn read_old_layout_exit(&self) -> std::io::Result<Option<ExitRecord>> {
        if self.old_layout {
            self.dir.read_exit()
        } else {
            Ok(None)
        }
    }

    /// Reports the end of a job whose owner went without telling it: from what an older
    /// noded's per-job process recorded (its `exit.json`), or, with no word from it or from
    /// the node's supervisor, as lost. `watched_exit`: noded saw that process (or the
    /// supervisor's connection) go just now, so the job's group id is still meaningful; after
    /// a restart (maybe a reboot) it may belong to someone else by now.
    pub async fn finish_after_owner_gone(self, watched_exit: bool) {
        let exit = match self.read_old_layout_exit() {
            Ok(Some(exit)) => exit,
            Ok(None) => {
                tracing::warn!(
                    "job {}: its supervisor is gone without a word",
                    self.job_id()
                );
                // Nobody supervises the job anymore: don't leave it running unseen. A cgroup
                // is the job's for sure; a process group id only while noded watched its
                // owner (after a restart, maybe a reboot, it may be someone else's).
                let cgroup = self.record.plan.as_ref().and_then(|p| p.cgroup.as_ref());
                let job_pid = self
                    .record
                    .job_pid
                    .filter(|_| watched_exit && !self.processes_gone);
                if let Some(processes) = JobProcesses::of(cgroup, job_pid) {
                    let _ = processes.kill();
                    wait_briefly_until_gone(&processes).await;
                }
                ExitRecord {
                    end_time_ms: now_ms(),
                    error: Some(LOST.into()),
                    ..Default::default()
                }
            }
            Err(e) => ExitRecord {
                end_time_ms: now_ms(),
                error: Some(format!("lost: {e}")),
                ..Default::default()
            },
        };
        self.finish(exit).await
    }

    /// Records the job's end ([`FinishedRecord`]) (kept until acknowledged), stops tracking
    /// the job, and reports it. The end of a job of an older noded's per-job process goes to its
    /// `finished.json`; any other, to the node's journal through the supervisor.
    pub(super) async fn finish(self, exit: ExitRecord) {
        // The supervisor removes the cgroups of the jobs it ran; not when it could not run
        // them, or died, or for an older noded's per-job process.
        if let Some(cgroup) = self.record.plan.as_ref().and_then(|p| p.cgroup.as_ref()) {
            match cgroup.remove() {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("job {}: {e}", self.job_id()),
            }
        }
        let saved_after_term = match checkpoint_to_check(&self.record, &exit) {
            Some((dir, term_time_ms)) => tokio::task::spawn_blocking(move || {
                saved_since(newest_mtime_ms(&dir), term_time_ms)
            })
            .await
            .unwrap_or(false),
            None => false,
        };
        let finished = finished_record(&self.record, exit, saved_after_term);
        if finished.node_fault {
            // Its node cannot run it: said (and the node drained) before its end is reported,
            // so that schedd does not place it here again.
            self.shared.launch_fault(&finished.error);
        }
        if self.old_layout {
            self.write_old_layout_end(&finished);
            return self.report_end(finished);
        }
        let end = finished.clone();
        let recorded = self
            .shared
            .on_blocking_thread(move |connection| record_end(connection, &end))
            .await;
        if let Err(e) = recorded {
            self.keep_unwritten(&finished, "the node's journal", &e);
        }
        self.report_end(finished);
    }

    /// The end of a job of an older noded's per-job process, in its `finished.json`.
    fn write_old_layout_end(&self, finished: &FinishedRecord) {
        if let Err(e) = self.dir.write_finished(finished) {
            // A noded restarted before schedd acknowledges it rebuilds it from `exit.json`
            // (see the spool's docs).
            self.keep_unwritten(finished, "the spool", &e);
        }
    }

    /// An end that could not be recorded in `place`: kept in memory until schedd
    /// acknowledges it, and the spool said to fail.
    fn keep_unwritten(&self, finished: &FinishedRecord, place: &str, e: &std::io::Error) {
        tracing::error!(
            "job {}: cannot record its end in {place} ({e}): kept in memory until schedd \
             acknowledges it",
            finished.job_id
        );
        self.shared.spool_write_failed(e);
        self.shared
            .unwritten_ends()
            .insert(finished.job_id, finished.clone());
    }

    /// Stops tracking the job and reports its end, recorded (or kept in memory) already.
    pub(super) fn report_end(self, finished: FinishedRecord) {
        log_end(&finished);
        if !self.shared.unwritten_ends().contains_key(&finished.job_id) {
            self.shared
                .recorded_ends()
                .insert(finished.job_id, finished.clone());
        }
        self.shared.jobs().remove(&finished.job_id);
        self.shared.emit(JobEvent::Finished(finished));
    }
}

fn log_end(finished: &FinishedRecord) {
    tracing::info!(
        "job {} finished: exit {:?}, signal {:?}{}{}{}",
        finished.job_id,
        finished.exit_code,
        finished.signal,
        if finished.fenced {
            ", fenced (no word from schedd)"
        } else {
            ""
        },
        if finished.out_of_memory {
            ", out of memory"
        } else {
            ""
        },
        if finished.error.is_empty() {
            String::new()
        } else {
            format!(", error: {}", finished.error)
        }
    );
}

/// When the job's stop began: noded's SIGTERM, or for a job its supervisor fenced (the
/// node's lease ran out, see `lease`), the fence's; 0 if it was never stopped so.
fn stop_began_ms(stop: &StopState, exit: &ExitRecord) -> i64 {
    if stop.term_time_ms > 0 {
        stop.term_time_ms
    } else if exit.fenced {
        exit.term_time_ms
    } else {
        0
    }
}

/// Whether the job counts as killed: a SIGKILL found processes of it still alive.
fn was_killed(stop: &StopState, exit: &ExitRecord) -> bool {
    (stop.kill_sent && (stop.kill_found_processes || exit.signal == Some(libc::SIGKILL)))
        || (exit.fenced && exit.killed)
}

/// The checkpoint directory to look at, and since when, when the job was stopped with a
/// grace it may have used to save a checkpoint.
pub(in crate::launch) fn checkpoint_to_check(
    record: &JobRecord,
    exit: &ExitRecord,
) -> Option<(CheckpointDir, i64)> {
    let stop = &record.stop;
    let term_time_ms = stop_began_ms(stop, exit);
    let dir = record.plan.as_ref().and_then(|p| p.checkpoint())?;
    ((stop.stop_requested || exit.fenced) && term_time_ms > 0 && !was_killed(stop, exit))
        .then_some((dir, term_time_ms))
}

/// Whether the newest file of a checkpoint directory was written after the stop began.
pub(in crate::launch) fn saved_since(newest_ms: Option<i64>, term_time_ms: i64) -> bool {
    newest_ms.is_some_and(|newest| newest + MTIME_GRANULARITY_MS > term_time_ms)
}

/// How a job ended, as reported to schedd: its stop progress (`record.stop`: asked, timed
/// out, killed), how it ended (`exit`, its supervisor's word, with the fence's) and whether
/// it saved a checkpoint after its SIGTERM.
pub(in crate::launch) fn finished_record(
    record: &JobRecord,
    exit: ExitRecord,
    saved_after_term: bool,
) -> FinishedRecord {
    let stop = &record.stop;
    FinishedRecord {
        job_id: record.job.job_id,
        restart_count: record.job.restart_count,
        exit_code: exit.exit_code,
        signal: exit.signal,
        end_time_ms: if exit.end_time_ms > 0 {
            exit.end_time_ms
        } else {
            now_ms()
        },
        timed_out: stop.timed_out,
        stop_requested: stop.stop_requested,
        term_time_ms: stop_began_ms(stop, &exit),
        killed: was_killed(stop, &exit),
        checkpoint_saved: saved_after_term && exit.error.is_none(),
        error: exit.error.unwrap_or_default(),
        out_of_memory: exit.out_of_memory,
        fenced: exit.fenced,
        node_fault: exit.node_fault,
    }
}

/// Gives processes just SIGKILLed a moment to go, so that their cgroup can be removed.
async fn wait_briefly_until_gone(processes: &JobProcesses<'_>) {
    for _ in 0..100 {
        if !processes.any_alive().unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
