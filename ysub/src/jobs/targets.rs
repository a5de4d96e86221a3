//! Job ids as users type them on a command line, and the request naming one.

use ysched_common::array::{split_outside_brackets, JobTarget};
use ysched_proto::JobRef;

/// Job ids as users type them on a command line: `12`, `12_7`, `12_[1-5,9]`, several joined by
/// commas (the commas inside brackets belong to the task list). What `ycancel`, `yq -j` and
/// `yctl hold|release|requeue` take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetList(pub Vec<JobTarget>);

/// The value parser of a job list: every id is checked, so a typo sends nothing.
pub fn parse_target_list(text: &str) -> Result<TargetList, String> {
    split_outside_brackets(text, |c| c == ',')
        .into_iter()
        .map(JobTarget::parse)
        .collect::<Result<Vec<_>, _>>()
        .map(TargetList)
}

/// The value parser of one job (`yctl show job`): `12` or `12_7`, not a range of tasks.
pub fn parse_single_target(text: &str) -> Result<JobTarget, String> {
    let target = JobTarget::parse(text)?;
    match target.tasks_named() {
        Some(n) if target.single_task().is_none() => Err(format!(
            "'{}' names {n} tasks; give one job (12) or one task (12_7)",
            ysched_common::text::excerpt(text.trim(), 40),
        )),
        _ => Ok(target),
    }
}

/// The targets of several command-line words, in order.
pub fn flatten_targets(lists: &[TargetList]) -> Vec<JobTarget> {
    lists.iter().flat_map(|l| l.0.iter().cloned()).collect()
}

/// Refuses more job ids than one request may carry (`limits::TARGETS`), as schedd would.
pub fn check_target_count(targets: &[JobTarget]) -> anyhow::Result<()> {
    ysched_common::limits::TARGETS
        .check_count(targets.len() as u64)
        .map_err(anyhow::Error::msg)
}

/// The request naming `target`. schedd reads `target`; `job_id` is set for a plain id only, so
/// that a server older than arrays, which reads `job_id` alone, never acts on a task's array
/// (`12_7` is not job 12) but refuses job 0.
pub fn job_ref(target: &JobTarget) -> JobRef {
    JobRef {
        job_id: if target.tasks.is_none() {
            target.id.0
        } else {
            0
        },
        target: target.to_string(),
    }
}
