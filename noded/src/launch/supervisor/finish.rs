//! A job's end: read from its shepherd's `exit.json`, recorded in the spool and reported.
//!
//! The end ([`FinishedRecord`]) says how the job was stopped (asked, timed out, fenced,
//! killed) and whether it saved a checkpoint after its SIGTERM; one that cannot be written
//! to the spool is kept in memory until schedd acknowledges it.

use super::Supervisor;
use crate::launch::process::newest_mtime_ms;
use crate::launch::spool::{ExitRecord, FinishedRecord};
use crate::launch::tracking::JobProcesses;
use crate::launch::JobEvent;
use std::time::Duration;
use ysched_common::time::now_ms;

/// File timestamps come from the kernel's coarse clock, which lags the precise clock noded
/// reads by up to a tick: a checkpoint written right after SIGTERM can look a few ms older.
const MTIME_GRANULARITY_MS: i64 = 10;

impl Supervisor {
    /// Reports the job's end from what its shepherd recorded. `watched_exit`: noded saw the
    /// shepherd die just now, so the job's group id is still meaningful; after a restart
    /// (maybe a reboot) it may belong to someone else by now.
    pub async fn finish_after_shepherd(self, watched_exit: bool) {
        let exit = match self.dir.read_exit() {
            Ok(Some(exit)) => exit,
            Ok(None) => {
                tracing::warn!("job {}: its shepherd is gone without a word", self.job_id());
                // Nobody supervises the job anymore: don't leave it running unseen. A cgroup
                // is the job's for sure; a process group id only while noded watched the
                // shepherd (after a restart, maybe a reboot, it may be someone else's).
                let cgroup = self.record.plan.as_ref().and_then(|p| p.cgroup.as_ref());
                let job_pid = self.record.job_pid.filter(|_| watched_exit);
                if let Some(processes) = JobProcesses::of(cgroup, job_pid) {
                    let _ = processes.kill();
                    wait_briefly_until_gone(&processes).await;
                }
                ExitRecord {
                    end_time_ms: now_ms(),
                    error: Some("lost: shepherd gone".into()),
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

    /// Records the job's end ([`FinishedRecord`]) in the spool (kept until acknowledged), stops
    /// tracking the job, and reports it.
    pub(super) async fn finish(self, exit: ExitRecord) {
        let stop = &self.record.stop;
        // A job whose shepherd fenced it (the node's lease ran out, see `lease`) was stopped
        // as if asked to: its SIGTERM time, and a SIGKILL at the end of its grace.
        let fenced = exit.fenced;
        let term_time_ms = if stop.term_time_ms > 0 {
            stop.term_time_ms
        } else if fenced {
            exit.term_time_ms
        } else {
            0
        };
        let killed = (stop.kill_sent
            && (stop.kill_found_processes || exit.signal == Some(libc::SIGKILL)))
            || (fenced && exit.killed);
        // The shepherd removes them; not when it could not run, or died.
        if let Some(cgroup) = self.record.plan.as_ref().and_then(|p| p.cgroup.as_ref()) {
            if let Err(e) = cgroup.remove() {
                tracing::warn!("job {}: {e}", self.job_id());
            }
        }
        let checkpoint_dir = self.record.plan.as_ref().and_then(|p| p.checkpoint());
        let saved_after_term = match checkpoint_dir {
            Some(dir) if (stop.stop_requested || fenced) && term_time_ms > 0 && !killed => {
                tokio::task::spawn_blocking(move || newest_mtime_ms(&dir))
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|newest| newest + MTIME_GRANULARITY_MS > term_time_ms)
            }
            _ => false,
        };
        let finished = FinishedRecord {
            job_id: self.job_id(),
            restart_count: self.record.job.restart_count,
            exit_code: exit.exit_code,
            signal: exit.signal,
            end_time_ms: if exit.end_time_ms > 0 {
                exit.end_time_ms
            } else {
                now_ms()
            },
            timed_out: stop.timed_out,
            stop_requested: stop.stop_requested,
            term_time_ms,
            killed,
            checkpoint_saved: saved_after_term && exit.error.is_none(),
            error: exit.error.unwrap_or_default(),
            out_of_memory: exit.out_of_memory,
            fenced,
            node_fault: exit.node_fault,
        };
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
        if finished.node_fault {
            // Its node cannot run it: said (and the node drained) before its end is reported,
            // so that schedd does not place it here again.
            self.shared.launch_fault(&finished.error);
        }
        if let Err(e) = self.dir.write_finished(&finished) {
            // Kept in memory until schedd acknowledges it; a noded restarted before that
            // rebuilds it from `exit.json` (see the spool's docs).
            tracing::error!(
                "job {}: cannot record its end in the spool ({e}): kept in memory until \
                 schedd acknowledges it",
                finished.job_id
            );
            self.shared.spool_write_failed(&e);
            if self.record.shepherd_pid.is_none() && !self.record.supervised {
                // It never started, and its directory holds nothing a restarted noded could
                // use: gone, so that it finds no job there to report as lost.
                let _ = self.shared.spool.remove_job(finished.job_id);
            }
            self.shared
                .unwritten_ends()
                .insert(finished.job_id, finished.clone());
        }
        self.shared.jobs().remove(&finished.job_id);
        self.shared.emit(JobEvent::Finished(finished));
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
