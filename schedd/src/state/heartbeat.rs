//! An agent's heartbeat and the end of its session, in memory only (no store write): the
//! node was heard from, the leftover jobs it no longer runs are gone, its jobs' newest
//! checkpoints; and what of its word needs an event of its own.

use super::agent_events::health_drain;
use super::gpu_health::GpuReport;
use super::Records;
use ysched_common::time::Millis;

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
}
