//! Job dependencies (`--dependency afterok:12:13,afterany:14`, `after:5?afternotok:6`,
//! `singleton`), as sbatch spells them.
//!
//! A submit names jobs as users do ([`JobTarget`]: `12`, `12_7`); schedd resolves them into
//! job ids (an array's id means all its tasks) and stores the resolved [`Dependency`] in the
//! spec. Whether it is met is a pure function of the targets' states ([`Dependency::status`]),
//! which the scheduling core evaluates each pass. `singleton` is not about named jobs: the
//! core checks that no other job of the same name and user runs.

use crate::array::split_outside_brackets;
use crate::array::JobTarget;
use crate::limits;
use crate::text::excerpt;
use crate::types::{JobId, JobState};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DepKind {
    /// The targets have started (or ended).
    After,
    /// The targets have ended, however.
    AfterAny,
    /// The targets have ended COMPLETED (exit code 0).
    AfterOk,
    /// The targets have ended in any other way (failed, timed out, cancelled, node failure,
    /// out of memory, preempted without requeue).
    AfterNotOk,
}

impl DepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::After => "after",
            DepKind::AfterAny => "afterany",
            DepKind::AfterOk => "afterok",
            DepKind::AfterNotOk => "afternotok",
        }
    }

    fn parse(s: &str) -> Option<DepKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "after" => DepKind::After,
            "afterany" => DepKind::AfterAny,
            "afterok" => DepKind::AfterOk,
            "afternotok" => DepKind::AfterNotOk,
            _ => return None,
        })
    }

    /// Whether one target in state `target` meets this kind.
    pub fn status(self, target: TargetState) -> DepStatus {
        use DepStatus::*;
        match (self, target) {
            (DepKind::After, TargetState::NotStarted) => Waiting,
            (DepKind::After, _) => Satisfied,
            (DepKind::AfterAny, TargetState::Ended(_) | TargetState::Gone) => Satisfied,
            (DepKind::AfterAny, _) => Waiting,
            (DepKind::AfterOk, TargetState::Ended(JobState::Completed)) => Satisfied,
            (DepKind::AfterOk, TargetState::Ended(_) | TargetState::Gone) => Never,
            (DepKind::AfterOk, _) => Waiting,
            (DepKind::AfterNotOk, TargetState::Ended(JobState::Completed) | TargetState::Gone) => {
                Never
            }
            (DepKind::AfterNotOk, TargetState::Ended(_)) => Satisfied,
            (DepKind::AfterNotOk, _) => Waiting,
        }
    }
}

/// Where a dependency's target is, as far as dependencies care. A preempted job that was
/// requeued is not ended: it is `Started` (it ran before) and waits again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    /// Pending or held, never started.
    NotStarted,
    /// Running, stopping, or back in the queue after a run.
    Started,
    /// Finished in this state.
    Ended(JobState),
    /// Not known at all (a record lost to a bug or an old store): counts as ended, not OK.
    Gone,
}

impl TargetState {
    /// The state of a job record as dependencies see it.
    pub fn of(state: JobState, has_run: bool) -> TargetState {
        if state.is_terminal() {
            TargetState::Ended(state)
        } else if has_run || state.holds_resources() {
            TargetState::Started
        } else {
            TargetState::NotStarted
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DepStatus {
    Satisfied,
    Waiting,
    /// Can never be met: the job waits with `DependencyNeverSatisfied` (or is cancelled with
    /// `scheduler.kill_invalid_depend`).
    Never,
}

/// One `kind:id[:id...]` of a submitted dependency, before schedd resolved its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClauseRequest {
    pub kind: DepKind,
    pub targets: Vec<JobTarget>,
}

/// `--dependency` as parsed, before resolution.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DependencyRequest {
    /// Joined by `?` (any clause) rather than `,` (all).
    pub any: bool,
    pub clauses: Vec<ClauseRequest>,
    pub singleton: bool,
    /// The text, spaces removed.
    pub text: String,
}

/// One resolved clause: `kind` must hold for every job in `jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepClause {
    pub kind: DepKind,
    pub jobs: Vec<JobId>,
}

/// A resolved dependency, kept in the job's spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Dependency {
    pub any: bool,
    pub clauses: Vec<DepClause>,
    /// At most one job of this name and user runs at a time (checked by the core).
    pub singleton: bool,
    /// As the user wrote it, for display.
    pub text: String,
}

impl DependencyRequest {
    /// Parses sbatch's syntax: clauses joined by `,` (all must hold) or `?` (any), not both;
    /// each `after|afterany|afterok|afternotok:ID[:ID...]` or `singleton`. IDs are `12`,
    /// `12_7` or `12_[1-5]`. At most [`limits::DEPENDENCY`] bytes naming at most
    /// [`limits::DEPENDENCY_TARGETS`] jobs; costs O(text).
    pub fn parse(text: &str) -> Result<DependencyRequest, String> {
        limits::DEPENDENCY.check_len(text)?;
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        // Messages echo the start of the text only.
        let text = &excerpt(text.trim(), 60);
        if compact.is_empty() {
            return Err("empty --dependency".into());
        }
        // A task list such as `12_[1,3]` has commas of its own: only those outside count.
        let outside = split_outside_brackets(&compact, |c| c == ',' || c == '?');
        let mut at = 0;
        let (mut commas, mut questions) = (false, false);
        for part in &outside[..outside.len() - 1] {
            at += part.len();
            match compact.as_bytes()[at] {
                b',' => commas = true,
                _ => questions = true,
            }
            at += 1;
        }
        if commas && questions {
            return Err(format!(
                "--dependency '{text}': use ',' (all) or '?' (any), not both"
            ));
        }
        let mut request = DependencyRequest {
            any: questions,
            text: compact.clone(),
            ..DependencyRequest::default()
        };
        let mut named = 0u64;
        for clause in split_clauses(&compact) {
            if clause.eq_ignore_ascii_case("singleton") {
                request.singleton = true;
                continue;
            }
            let (kind, ids) = clause.split_once(':').ok_or_else(|| {
                format!(
                    "--dependency '{text}': '{}' names no job (expected e.g. afterok:12)",
                    excerpt(clause, 40)
                )
            })?;
            let kind = DepKind::parse(kind).ok_or_else(|| {
                format!(
                    "--dependency '{text}': unknown type '{}' \
                     (known: after, afterany, afterok, afternotok, singleton)",
                    excerpt(kind, 24)
                )
            })?;
            let mut targets = Vec::new();
            for id in split_ids(ids) {
                named += 1;
                limits::DEPENDENCY_TARGETS
                    .check_count(named)
                    .map_err(|e| format!("--dependency '{text}': {e}"))?;
                if id.contains('+') {
                    return Err(format!(
                        "--dependency '{text}': delays ('{}') are not supported",
                        excerpt(id, 24)
                    ));
                }
                targets.push(
                    JobTarget::parse(id).map_err(|why| format!("--dependency '{text}': {why}"))?,
                );
            }
            if targets.is_empty() {
                return Err(format!(
                    "--dependency '{text}': '{}' names no job",
                    excerpt(clause, 40)
                ));
            }
            request.clauses.push(ClauseRequest { kind, targets });
        }
        if request.any && request.singleton {
            return Err(format!(
                "--dependency '{text}': singleton cannot be one alternative of '?'"
            ));
        }
        Ok(request)
    }
}

/// Splits on `,` and `?` outside `[...]` (a task list such as `12_[1,3]` has commas).
fn split_clauses(text: &str) -> Vec<&str> {
    split_outside_brackets(text, |c| c == ',' || c == '?')
}

fn split_ids(text: &str) -> Vec<&str> {
    split_outside_brackets(text, |c| c == ':')
}

impl Dependency {
    /// Whether the named jobs' clauses are met, given each target's state. `singleton` is
    /// not looked at here.
    pub fn status(&self, target: impl Fn(JobId) -> TargetState) -> DepStatus {
        let clause_status = |clause: &DepClause| {
            let mut status = DepStatus::Satisfied;
            for job in &clause.jobs {
                match clause.kind.status(target(*job)) {
                    DepStatus::Never => return DepStatus::Never,
                    DepStatus::Waiting => status = DepStatus::Waiting,
                    DepStatus::Satisfied => {}
                }
            }
            status
        };
        if self.clauses.is_empty() {
            return DepStatus::Satisfied;
        }
        let statuses = self.clauses.iter().map(clause_status);
        if self.any {
            // Any one clause: met once one is, never once all are never.
            let mut best = DepStatus::Never;
            for s in statuses {
                best = best.min(s);
            }
            best
        } else {
            let mut worst = DepStatus::Satisfied;
            for s in statuses {
                worst = worst.max(s);
            }
            worst
        }
    }

    /// Every job a clause names.
    pub fn targets(&self) -> impl Iterator<Item = JobId> + '_ {
        self.clauses.iter().flat_map(|c| c.jobs.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn dep(text: &str, resolve: impl Fn(&JobTarget) -> Vec<JobId>) -> Dependency {
        let req = DependencyRequest::parse(text).unwrap();
        Dependency {
            any: req.any,
            singleton: req.singleton,
            text: req.text,
            clauses: req
                .clauses
                .iter()
                .map(|c| DepClause {
                    kind: c.kind,
                    jobs: c.targets.iter().flat_map(&resolve).collect(),
                })
                .collect(),
        }
    }

    fn ids(t: &JobTarget) -> Vec<JobId> {
        vec![t.id]
    }

    #[test]
    fn parses_sbatch_syntax() {
        let r = DependencyRequest::parse("afterok:12:13,afterany:14_[1,2]").unwrap();
        assert!(!r.any);
        assert_eq!(r.clauses.len(), 2);
        assert_eq!(r.clauses[0].targets.len(), 2);
        assert_eq!(r.clauses[1].targets[0].to_string(), "14_[1,2]");
        let r = DependencyRequest::parse("after:5?afternotok:6").unwrap();
        assert!(r.any);
        let r = DependencyRequest::parse("afterany:12_7?afternotok:13_[1-3,5]").unwrap();
        assert!(r.any);
        assert_eq!(r.clauses[1].targets[0].tasks_named(), Some(4));
        assert!(
            !DependencyRequest::parse("afterok:12_[1,2],after:3")
                .unwrap()
                .any
        );
        assert!(DependencyRequest::parse("singleton").unwrap().singleton);
        let r = DependencyRequest::parse("afterok:3,singleton").unwrap();
        assert!(r.singleton && r.clauses.len() == 1);
        for (bad, wanted) in [
            ("", "empty"),
            ("afterok", "names no job"),
            ("afterok:", "not a job id"),
            ("before:3", "unknown type"),
            ("afterok:1,afterany:2?after:3", "not both"),
            ("after:3+5", "delays"),
            ("afterok:x", "not a job id"),
            ("singleton?afterok:1", "singleton"),
        ] {
            let err = DependencyRequest::parse(bad).unwrap_err();
            assert!(err.contains(wanted), "{bad}: {err}");
        }
    }

    #[test]
    fn dependencies_are_bounded() {
        let ids = (1..=100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(":");
        assert!(DependencyRequest::parse(&format!("afterok:{ids}")).is_ok());
        let err = DependencyRequest::parse(&format!("afterok:{ids}:101")).unwrap_err();
        assert!(
            err.ends_with("jobs named by --dependency: 101; the limit is 100 (fixed)"),
            "{err}"
        );
        assert!(err.len() < 200, "{err}");
        let err = DependencyRequest::parse(&format!("afterok:{}", "1:".repeat(600))).unwrap_err();
        assert_eq!(err, "--dependency is 1208 bytes; the limit is 1024 (fixed)");
        // Nested brackets cost nothing special.
        let err = DependencyRequest::parse(&format!("afterok:1_{}", "[".repeat(900))).unwrap_err();
        assert!(err.contains("not a job id"), "{err}");
    }

    #[test]
    fn status_follows_slurm() {
        let states: BTreeMap<u64, TargetState> = [
            (1, TargetState::Ended(JobState::Completed)),
            (2, TargetState::Ended(JobState::Failed)),
            (3, TargetState::Started),
            (4, TargetState::NotStarted),
            (5, TargetState::Ended(JobState::Cancelled)),
        ]
        .into();
        let of = |id: JobId| states.get(&id.0).copied().unwrap_or(TargetState::Gone);
        let status = |text: &str| dep(text, ids).status(of);
        use DepStatus::*;
        assert_eq!(status("afterok:1"), Satisfied);
        assert_eq!(status("afterok:2"), Never);
        assert_eq!(status("afterok:3"), Waiting);
        assert_eq!(status("afterok:1:3"), Waiting);
        assert_eq!(status("afterok:2:3"), Never);
        assert_eq!(status("afternotok:2"), Satisfied);
        assert_eq!(status("afternotok:5"), Satisfied);
        assert_eq!(status("afternotok:1"), Never);
        assert_eq!(status("afterany:2"), Satisfied);
        assert_eq!(status("afterany:3"), Waiting);
        assert_eq!(status("after:3"), Satisfied);
        assert_eq!(status("after:4"), Waiting);
        assert_eq!(status("afterok:1,after:4"), Waiting);
        assert_eq!(status("afterok:2,after:4"), Never);
        assert_eq!(status("afterok:2?after:4"), Waiting);
        assert_eq!(status("afterok:2?after:3"), Satisfied);
        assert_eq!(status("afterok:2?afternotok:1"), Never);
        assert_eq!(status("afterok:99"), Never);
        assert_eq!(status("afterany:99"), Satisfied);
        assert_eq!(status("singleton"), Satisfied);
    }

    #[test]
    fn requeued_jobs_are_started_not_ended() {
        assert_eq!(
            TargetState::of(JobState::Pending, true),
            TargetState::Started
        );
        assert_eq!(
            TargetState::of(JobState::Pending, false),
            TargetState::NotStarted
        );
        assert_eq!(
            TargetState::of(JobState::Preempted, true),
            TargetState::Ended(JobState::Preempted)
        );
    }
}
