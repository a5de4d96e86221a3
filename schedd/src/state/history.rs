//! What a job's history records, as the state machine writes it: [`JobEventKind`] and
//! [`HistoryEntry`]. The kind's text (`submitted`, `requeued`, ...) is what the store keeps
//! and what users see; it is rendered only when the entry is stored ([`JobEventKind::as_str`]).

use ysched_common::time::Millis;
use ysched_common::JobId;

/// What happened to a job, as its history names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobEventKind {
    /// Queued (a job, or every task of an array, under the array's id).
    Submitted,
    /// Held by its owner or an administrator.
    Held,
    /// Released from a hold.
    Released,
    /// Placed: its parts go to their nodes.
    Scheduled,
    /// Its agent reports it running.
    Started,
    /// A part's process ended.
    Exited,
    /// A victim is asked to stop for it (the preemptor's side).
    Evicting,
    /// Asked to stop for a preemptor (the victim's side).
    Preempting,
    /// A preempted run ended: how, and whether its checkpoint was saved.
    Preemption,
    /// Its parts are being stopped, for what happened to one of them or to their nodes.
    Stopping,
    /// A cancel of a running job: being stopped.
    Cancel,
    /// Cancelled (final).
    Cancelled,
    /// A requeue of a running job was asked: being stopped.
    Requeue,
    /// Queued again after its run ended.
    Requeued,
    /// Its launch failed for good.
    LaunchFailed,
    /// Its node failed under it (final).
    NodeFail,
    /// Its node went silent: its jobs wait for the node's fence.
    NodeSilent,
    /// Its silent node came back.
    NodeBack,
    /// Its node's fence stopped it.
    Fenced,
    /// A GPU it ran on failed.
    GpuFailed,
    /// A leftover its agent was told to kill is gone.
    LeftoverGone,
    /// Changed while queued (`yctl update`): what changed.
    Updated,
}

impl JobEventKind {
    pub const ALL: [JobEventKind; 22] = [
        JobEventKind::Submitted,
        JobEventKind::Held,
        JobEventKind::Released,
        JobEventKind::Scheduled,
        JobEventKind::Started,
        JobEventKind::Exited,
        JobEventKind::Evicting,
        JobEventKind::Preempting,
        JobEventKind::Preemption,
        JobEventKind::Stopping,
        JobEventKind::Cancel,
        JobEventKind::Cancelled,
        JobEventKind::Requeue,
        JobEventKind::Requeued,
        JobEventKind::LaunchFailed,
        JobEventKind::NodeFail,
        JobEventKind::NodeSilent,
        JobEventKind::NodeBack,
        JobEventKind::Fenced,
        JobEventKind::GpuFailed,
        JobEventKind::LeftoverGone,
        JobEventKind::Updated,
    ];

    /// The kind as stored and shown (a contract: stores and scripts read it).
    pub fn as_str(self) -> &'static str {
        match self {
            JobEventKind::Submitted => "submitted",
            JobEventKind::Held => "held",
            JobEventKind::Released => "released",
            JobEventKind::Scheduled => "scheduled",
            JobEventKind::Started => "started",
            JobEventKind::Exited => "exited",
            JobEventKind::Evicting => "evicting",
            JobEventKind::Preempting => "preempting",
            JobEventKind::Preemption => "preemption",
            JobEventKind::Stopping => "stopping",
            JobEventKind::Cancel => "cancel",
            JobEventKind::Cancelled => "cancelled",
            JobEventKind::Requeue => "requeue",
            JobEventKind::Requeued => "requeued",
            JobEventKind::LaunchFailed => "launch_failed",
            JobEventKind::NodeFail => "node_fail",
            JobEventKind::NodeSilent => "node_silent",
            JobEventKind::NodeBack => "node_back",
            JobEventKind::Fenced => "fenced",
            JobEventKind::GpuFailed => "gpu_failed",
            JobEventKind::LeftoverGone => "leftover_gone",
            JobEventKind::Updated => "updated",
        }
    }

    /// The kind a stored history entry names; `None` for one this version does not write.
    pub fn parse(text: &str) -> Option<JobEventKind> {
        JobEventKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl std::fmt::Display for JobEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a job's history, as an event writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub job: JobId,
    pub time: Millis,
    pub kind: JobEventKind,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind's text is what stores hold and scripts read: a change of wording changes this
    /// table too, deliberately (and leaves older stores' entries unreadable as that kind).
    #[test]
    fn every_kind_is_written_as_it_always_has_been() {
        let table = [
            (JobEventKind::Submitted, "submitted"),
            (JobEventKind::Held, "held"),
            (JobEventKind::Released, "released"),
            (JobEventKind::Scheduled, "scheduled"),
            (JobEventKind::Started, "started"),
            (JobEventKind::Exited, "exited"),
            (JobEventKind::Evicting, "evicting"),
            (JobEventKind::Preempting, "preempting"),
            (JobEventKind::Preemption, "preemption"),
            (JobEventKind::Stopping, "stopping"),
            (JobEventKind::Cancel, "cancel"),
            (JobEventKind::Cancelled, "cancelled"),
            (JobEventKind::Requeue, "requeue"),
            (JobEventKind::Requeued, "requeued"),
            (JobEventKind::LaunchFailed, "launch_failed"),
            (JobEventKind::NodeFail, "node_fail"),
            (JobEventKind::NodeSilent, "node_silent"),
            (JobEventKind::NodeBack, "node_back"),
            (JobEventKind::Fenced, "fenced"),
            (JobEventKind::GpuFailed, "gpu_failed"),
            (JobEventKind::LeftoverGone, "leftover_gone"),
            (JobEventKind::Updated, "updated"),
        ];
        let kinds: std::collections::BTreeSet<JobEventKind> =
            table.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(kinds, JobEventKind::ALL.into_iter().collect());
        for (kind, text) in table {
            assert_eq!(kind.as_str(), text);
            assert_eq!(kind.to_string(), text);
        }
    }

    #[test]
    fn every_kind_reads_back_from_its_text() {
        for kind in JobEventKind::ALL {
            assert_eq!(JobEventKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(JobEventKind::parse("Submitted"), None);
    }
}
