//! The job names users type on the command line (`12`, `12_7`, `12_[1-5,9]`), parsed, merged
//! and shown.

use super::{parse_index_list, IndexRange};
use crate::limits;
use crate::text::excerpt;
use crate::types::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A job as a user names it on the command line: `12` (a job, or a whole array), `12_7` (one
/// task), `12_[1-5,9]` (some tasks). Task ranges are kept as written, never expanded: what
/// they name is found among the array's own tasks (`schedd`'s `state::targets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTarget {
    pub id: JobId,
    /// `None`: the job `id` itself, or every task when `id` is an array.
    pub tasks: Option<Vec<IndexRange>>,
}

impl JobTarget {
    /// Parses one name, in O(text); at most [`limits::JOB_TARGET`] bytes and
    /// [`limits::TARGET_RANGES`] ranges.
    pub fn parse(text: &str) -> Result<JobTarget, String> {
        limits::JOB_TARGET.check_len(text)?;
        let text = text.trim();
        let bad = || {
            format!(
                "'{}' is not a job id (expected 12, 12_7 or 12_[1-5])",
                excerpt(text, 40)
            )
        };
        let (id, tasks) = match text.split_once('_') {
            Some((id, tasks)) => {
                let inner = tasks
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .unwrap_or(tasks);
                // `%N` has no meaning here; squeue prints it, so people paste it.
                let inner = inner.split('%').next().unwrap_or(inner);
                let tasks = parse_index_list(inner, limits::TARGET_RANGES.max as usize)
                    .map_err(|why| format!("{}: {why}", bad()))?;
                (id, Some(tasks))
            }
            None => (text, None),
        };
        let id: u64 = id.parse().map_err(|_| bad())?;
        if id == 0 {
            return Err(bad());
        }
        Ok(JobTarget {
            id: JobId(id),
            tasks,
        })
    }

    /// The one task this names (`12_7`, or `12_[7,7]`), if it names exactly one.
    pub fn single_task(&self) -> Option<u32> {
        let ranges = self.tasks.as_ref()?;
        let first = ranges.first()?;
        (first.count() == 1 && ranges.iter().all(|r| *r == *first)).then_some(first.first)
    }

    /// How many tasks the ranges name, counting an index named twice twice (`None`: no
    /// ranges).
    pub fn tasks_named(&self) -> Option<u64> {
        self.tasks
            .as_ref()
            .map(|r| r.iter().map(|r| r.count()).fold(0u64, u64::saturating_add))
    }

    /// The first of the tasks named, for messages.
    pub fn first_task(&self) -> Option<u32> {
        self.tasks.as_ref()?.iter().map(|r| r.first).min()
    }

    /// The indices of `self.tasks` that are not within `lo..=hi`: the first such one, if any.
    pub fn first_outside(&self, lo: u32, hi: u32) -> Option<u32> {
        let ranges = self.tasks.as_ref()?;
        ranges
            .iter()
            .filter_map(|r| {
                if r.first < lo {
                    Some(r.first)
                } else {
                    r.first_above(hi)
                }
            })
            .min()
    }
}

/// `targets` with the task lists of each job merged into one name (`12_3`, `12_[5-9]` →
/// `12_[3,5-9]`), in the order of first appearance, so that a request naming one array many
/// times resolves it once. A whole job (`12`) stays a name of its own.
pub fn merge_targets(targets: &[JobTarget]) -> Vec<JobTarget> {
    let mut merged: Vec<JobTarget> = Vec::new();
    let mut at: std::collections::HashMap<(JobId, bool), usize> = Default::default();
    for t in targets {
        let key = (t.id, t.tasks.is_some());
        match at.get(&key) {
            Some(&i) => {
                if let (Some(into), Some(from)) = (&mut merged[i].tasks, &t.tasks) {
                    into.extend_from_slice(from);
                }
            }
            None => {
                at.insert(key, merged.len());
                merged.push(t.clone());
            }
        }
    }
    for t in &mut merged {
        if let Some(ranges) = &mut t.tasks {
            ranges.sort_unstable();
            ranges.dedup();
        }
    }
    merged
}

impl fmt::Display for JobTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.tasks, self.single_task()) {
            (None, _) => write!(f, "{}", self.id),
            (Some(_), Some(task)) => write!(f, "{}_{task}", self.id),
            (Some(ranges), None) => {
                write!(f, "{}_[", self.id)?;
                for (i, r) in ranges.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{r}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// `text` split at each character `sep` accepts that is not inside `[...]`: the lists users
/// type name tasks as `12_[1,3]`, whose commas separate tasks, not jobs.
pub fn split_outside_brackets(text: &str, sep: impl Fn(char) -> bool) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            c if depth == 0 && sep(c) => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}
