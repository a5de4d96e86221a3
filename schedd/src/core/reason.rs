//! Why a pending job waits, as the core decides it: a typed value, rendered to Slurm's words
//! only where a person or a stored record reads it.

use std::fmt;
use ysched_common::JobId;

/// Why a PENDING job that a pass did not place still waits. Its text (`Display`) is what
/// `yq` shows in the REASON column, in Slurm's words where Slurm has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingReason {
    /// Nothing free fits it now and no earlier job is waiting.
    Resources,
    /// An earlier job in the queue waits for room first.
    Priority,
    /// Its dependency is not met yet, or it is a `singleton` and a job of its name and user
    /// runs.
    Dependency,
    /// Its dependency can never be met (a target ended the wrong way, or is gone).
    DependencyNeverSatisfied,
    /// Its array's `%N` tasks run.
    JobArrayTaskLimit,
    /// Starting it would take its account over its tier's `max_gpus_per_account`.
    AccountLimit,
    /// Starting it would take its user over its tier's `max_gpus_per_user`.
    UserLimit,
    /// Its `--begin` time has not come.
    BeginTime,
    /// A node of its `--nodelist` is drained, down or not connected.
    ReqNodeNotAvail,
    /// Its victims are being stopped for it.
    Preempting {
        victims: Vec<JobId>,
        nodes: Vec<String>,
    },
    /// No node could ever run it, as the cluster is now (why).
    Unsatisfiable(String),
}

impl PendingReason {
    /// The text of a reason that has no detail, without building a string.
    fn fixed_text(&self) -> Option<&'static str> {
        Some(match self {
            PendingReason::Resources => "Resources",
            PendingReason::Priority => "Priority",
            PendingReason::Dependency => "Dependency",
            PendingReason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            PendingReason::JobArrayTaskLimit => "JobArrayTaskLimit",
            PendingReason::AccountLimit => "AccountLimit",
            PendingReason::UserLimit => "UserLimit",
            PendingReason::BeginTime => "BeginTime",
            PendingReason::ReqNodeNotAvail => "ReqNodeNotAvail",
            PendingReason::Preempting { .. } | PendingReason::Unsatisfiable(_) => return None,
        })
    }

    /// Whether `text` (a job record's reason) is this reason's text: compared without
    /// building a string for the reasons most pending jobs have, once per job and pass.
    pub fn is_text_of(&self, text: &str) -> bool {
        match self.fixed_text() {
            Some(fixed) => fixed == text,
            None => {
                // Rendered piece by piece against `text`, without building a string.
                let mut rest = TextMatch(text);
                fmt::write(&mut rest, format_args!("{self}")).is_ok() && rest.0.is_empty()
            }
        }
    }
}

/// What is left of a text to match; writing a piece that is not its next part fails.
struct TextMatch<'a>(&'a str);

impl fmt::Write for TextMatch<'_> {
    fn write_str(&mut self, piece: &str) -> fmt::Result {
        self.0 = self.0.strip_prefix(piece).ok_or(fmt::Error)?;
        Ok(())
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(fixed) = self.fixed_text() {
            return f.write_str(fixed);
        }
        match self {
            PendingReason::Preempting { victims, nodes } => {
                let ids: Vec<String> = victims.iter().map(JobId::to_string).collect();
                write!(f, "Preempting {} on {}", ids.join(","), nodes.join(","))
            }
            PendingReason::Unsatisfiable(why) => write!(f, "Unsatisfiable: {why}"),
            _ => Ok(()),
        }
    }
}

/// Lets tests and callers compare a reason with its text (`reason == "Resources"`).
impl PartialEq<str> for PendingReason {
    fn eq(&self, text: &str) -> bool {
        self.is_text_of(text)
    }
}

impl PartialEq<&str> for PendingReason {
    fn eq(&self, text: &&str) -> bool {
        self.is_text_of(text)
    }
}

/// One reason of each kind with the text it renders to, exactly as `yq`, the store and
/// Slurm-speaking tools read it: a change of wording changes this table too, deliberately.
#[cfg(test)]
pub(crate) fn every_reason_as_rendered() -> Vec<(PendingReason, &'static str)> {
    vec![
        (PendingReason::Resources, "Resources"),
        (PendingReason::Priority, "Priority"),
        (PendingReason::Dependency, "Dependency"),
        (
            PendingReason::DependencyNeverSatisfied,
            "DependencyNeverSatisfied",
        ),
        (PendingReason::JobArrayTaskLimit, "JobArrayTaskLimit"),
        (PendingReason::AccountLimit, "AccountLimit"),
        (PendingReason::UserLimit, "UserLimit"),
        (PendingReason::BeginTime, "BeginTime"),
        (PendingReason::ReqNodeNotAvail, "ReqNodeNotAvail"),
        (
            PendingReason::Preempting {
                victims: vec![JobId(17), JobId(18)],
                nodes: vec!["n1".into(), "n2".into()],
            },
            "Preempting 17,18 on n1,n2",
        ),
        (
            PendingReason::Preempting {
                victims: vec![JobId(7)],
                nodes: vec!["gpu-a1".into()],
            },
            "Preempting 7 on gpu-a1",
        ),
        (
            PendingReason::Unsatisfiable("no node has 16 GPUs (largest has 8)".into()),
            "Unsatisfiable: no node has 16 GPUs (largest has 8)",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_renders_exactly_as_before() {
        let table = every_reason_as_rendered();
        // Each kind of reason once at least: a new kind fails to compile here until it is
        // named, and then this until the table has it.
        let kind = |reason: &PendingReason| match reason {
            PendingReason::Resources => 0,
            PendingReason::Priority => 1,
            PendingReason::Dependency => 2,
            PendingReason::DependencyNeverSatisfied => 3,
            PendingReason::JobArrayTaskLimit => 4,
            PendingReason::AccountLimit => 5,
            PendingReason::UserLimit => 6,
            PendingReason::BeginTime => 7,
            PendingReason::ReqNodeNotAvail => 8,
            PendingReason::Preempting { .. } => 9,
            PendingReason::Unsatisfiable(_) => 10,
        };
        let kinds: std::collections::BTreeSet<u32> = table.iter().map(|(r, _)| kind(r)).collect();
        assert_eq!(kinds, (0..=10).collect());
        for (reason, text) in &table {
            assert_eq!(reason.to_string(), *text, "{reason:?}");
            assert!(reason.is_text_of(text), "{reason:?}");
            // Compared without rendering, a reason is its own text and no other's.
            for (other, other_text) in &table {
                assert_eq!(reason.is_text_of(other_text), reason == other, "{reason:?}");
                assert_eq!(other.is_text_of(text), reason == other, "{other:?}");
            }
        }
    }

    #[test]
    fn each_reason_renders_as_slurm_and_yq_name_it() {
        assert_eq!(PendingReason::Resources.to_string(), "Resources");
        assert_eq!(
            PendingReason::DependencyNeverSatisfied.to_string(),
            "DependencyNeverSatisfied"
        );
        let preempting = PendingReason::Preempting {
            victims: vec![JobId(3), JobId(4)],
            nodes: vec!["n1".into(), "n2".into()],
        };
        assert_eq!(preempting.to_string(), "Preempting 3,4 on n1,n2");
        assert!(preempting.is_text_of("Preempting 3,4 on n1,n2"));
        assert!(!preempting.is_text_of("Preempting 3 on n1"));
        let never = PendingReason::Unsatisfiable("no node has 9 GPUs".into());
        assert_eq!(never.to_string(), "Unsatisfiable: no node has 9 GPUs");
        assert!(PendingReason::Priority == "Priority");
        assert_eq!(PendingReason::BeginTime.to_string(), "BeginTime");
        assert_eq!(
            PendingReason::ReqNodeNotAvail.to_string(),
            "ReqNodeNotAvail"
        );
        assert!(PendingReason::Priority != "Resources");
    }
}
