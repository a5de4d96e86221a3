//! An agent's heartbeat and the end of its session, in memory only (no store write): the
//! node was heard from, the leftover jobs it no longer runs are gone, its jobs' newest
//! checkpoints; and what of its word needs an event of its own.

use super::agent_events::health_drain;
use super::gpu_health::GpuReport;
use super::Records;
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::JobId;

/// How far past schedd's clock a reported checkpoint time may lie and still be taken (as
/// now): clocks of nodes and schedd differ a little; a day is no skew but a broken clock.
pub const CHECKPOINT_FUTURE_SLACK_MS: Millis = 24 * 3600 * 1000;

/// What a heartbeat changed in memory, and what it asks for besides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatSeen {
    /// The last leftover job the node was still killing is gone: it may take jobs again.
    pub freed: bool,
    /// Its word on whether it can take jobs drains or resumes it (see
    /// [`Records::node_health`]).
    pub health_changes: bool,
    /// Its word on its GPUs changes something (see [`GpuReport::changes`]).
    pub gpu_changes: bool,
    /// Checkpoint times refused as absurd (see [`Records::note_checkpoints`]).
    pub refused_checkpoints: Vec<(u64, Millis)>,
}

impl Records {
    /// Node `name`'s heartbeat at `now`: it is alive; the jobs it was told to kill after
    /// they ended here (`Node::killing`) and no longer lists in `running_jobs` are gone (in
    /// case their end reports were lost); its jobs' newest checkpoint times are noted.
    /// `None`: no such node.
    pub fn heartbeat(
        &mut self,
        name: &str,
        running_jobs: &[u64],
        checkpoints: &[(u64, Millis)],
        unhealthy: Option<&str>,
        gpus: &GpuReport,
        now: Millis,
    ) -> Option<HeartbeatSeen> {
        let node = self.nodes.get_mut(name)?;
        node.last_seen = now;
        let health_changes = health_drain(
            node.drain_reason.as_deref(),
            node.drained_by_node,
            unhealthy,
        )
        .is_some();
        let gpu_changes = gpus.changes(node);
        let before = node.killing.len();
        node.killing.retain(|id| running_jobs.contains(id));
        let freed = node.killing.len() != before && node.killing.is_empty();
        let refused_checkpoints = if checkpoints.is_empty() {
            Vec::new()
        } else {
            self.note_checkpoints(name, checkpoints, now)
        };
        Some(HeartbeatSeen {
            freed,
            health_changes,
            gpu_changes,
            refused_checkpoints,
        })
    }

    /// Node `name`'s agent is gone (its connection closed, or its session ended): DOWN until
    /// it registers again. Returns whether it was connected.
    pub fn node_disconnected(&mut self, name: &str) -> bool {
        match self.nodes.get_mut(name) {
            Some(node) => std::mem::replace(&mut node.connected, false),
            None => false,
        }
    }

    /// An agent's heartbeat: per job, the newest modification time under its checkpoint
    /// directory there. Each time becomes the job's `last_checkpoint` when it is later than the
    /// one known (the newest of all its nodes, for a job spanning several), for jobs that run
    /// on `node` only; a time a little in the future (clock skew) counts as `now`.
    ///
    /// In memory only, with no event: every heartbeat may carry it, and the work lost it
    /// measures is an estimate. It is written with the job's record the next time that is
    /// written for any other reason, and a restarted schedd learns it again from the next
    /// heartbeats.
    ///
    /// Returns the times refused as absurd (not positive, or more than
    /// [`CHECKPOINT_FUTURE_SLACK_MS`] ahead of `now`), for the log.
    pub fn note_checkpoints(
        &mut self,
        node: &str,
        checkpoints: &[(u64, Millis)],
        now: Millis,
    ) -> Vec<(u64, Millis)> {
        let mut refused = Vec::new();
        for &(job_id, time) in checkpoints {
            let Some(job) = self
                .jobs
                .get_mut(&JobId(job_id))
                .filter(|j| j.runs_on(node))
            else {
                continue; // ended meanwhile, or not this node's
            };
            if time <= 0 || time > now.saturating_add(CHECKPOINT_FUTURE_SLACK_MS) {
                refused.push((job_id, time));
                continue;
            }
            let time = time.min(now);
            if job.last_checkpoint.is_none_or(|known| known < time) {
                Arc::make_mut(job).last_checkpoint = Some(time);
                // The victim cost reads it: the scheduler's copy must see it (and listings).
                self.changed(JobId(job_id));
            }
        }
        refused
    }
}
