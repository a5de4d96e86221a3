//! Job arrays (`ysub --array 0-99:4%16`) and the job names users type for them (`12`, `12_7`,
//! `12_[1-5,9]`).
//!
//! An array of N tasks is N jobs with consecutive ids: the array's id is the first task's job
//! id, and the task at position `i` of the sorted task list has job id `array_id + i`. Each
//! task is scheduled, preempted and requeued on its own; the spec (shared) says which array
//! it belongs to ([`ArraySpec`]) and the job which task it is ([`ArrayTask`]).

use crate::types::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The default of `scheduler.max_array_size`, as Slurm's `MaxArraySize`: task indices go from
/// 0 to one less than it.
pub const DEFAULT_MAX_ARRAY_SIZE: u32 = 10_001;

/// What `--array` asked for. Kept small (the text, not the task list), since every task's
/// stored record carries its spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ArraySpec {
    /// The index expression without `%N`, spaces removed: `0-99:4`, `1,5,9-12`.
    pub indices: String,
    /// `%N`: at most this many tasks run at once; 0: no limit.
    pub max_running: u32,
    /// How many distinct tasks, and the smallest and largest index.
    pub count: u32,
    pub min: u32,
    pub max: u32,
}

/// Which task of which array a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ArrayTask {
    pub array_id: JobId,
    pub task: u32,
}

impl ArraySpec {
    /// Parses `--array`: `0-99`, `0-99:4`, `1,5,9-12`, each optionally followed by `%N`.
    /// Every index must be below `max_array_size` (`scheduler.max_array_size`).
    pub fn parse(text: &str, max_array_size: u32) -> Result<ArraySpec, String> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if compact.is_empty() {
            return Err("empty --array".into());
        }
        let (indices, max_running) = match compact.split_once('%') {
            Some((indices, limit)) => {
                let limit: u32 = limit.parse().map_err(|_| {
                    format!("--array '{text}': '%{limit}' is not a number of tasks")
                })?;
                if limit == 0 {
                    return Err(format!("--array '{text}': %0 would never run a task"));
                }
                (indices.to_string(), limit)
            }
            None => (compact, 0),
        };
        let tasks = expand_indices(&indices, max_array_size)
            .map_err(|why| format!("--array '{text}': {why}"))?;
        Ok(ArraySpec {
            count: tasks.len() as u32,
            min: tasks[0],
            max: *tasks.last().expect("not empty"),
            indices,
            max_running,
        })
    }

    /// The task indices, sorted and distinct.
    pub fn tasks(&self) -> Vec<u32> {
        expand_indices(&self.indices, u32::MAX).unwrap_or_default()
    }

    /// The job id of `task` in the array whose id is `array_id`; `None` when the array has no
    /// such task.
    pub fn job_of(&self, array_id: JobId, task: u32) -> Option<JobId> {
        let tasks = self.tasks();
        tasks
            .binary_search(&task)
            .ok()
            .map(|i| JobId(array_id.0 + i as u64))
    }

    /// `0-99:4%16` as the user wrote it (normalised).
    pub fn describe(&self) -> String {
        if self.max_running > 0 {
            format!("{}%{}", self.indices, self.max_running)
        } else {
            self.indices.clone()
        }
    }
}

/// Expands `1,5,9-12,20-30:5` into sorted distinct indices, each below `limit`.
fn expand_indices(indices: &str, limit: u32) -> Result<Vec<u32>, String> {
    let mut tasks = Vec::new();
    for part in indices.split(',') {
        if part.is_empty() {
            return Err("an empty index between commas".into());
        }
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("step ':{step}' is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (range, step)
            }
            None => (part, 1),
        };
        let number = |s: &str| -> Result<u32, String> {
            s.parse::<u32>()
                .map_err(|_| format!("'{s}' is not a task index"))
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                if step != 1 {
                    return Err(format!("a step needs a range ('{part}')"));
                }
                let n = number(range)?;
                (n, n)
            }
        };
        if first > last {
            return Err(format!("range '{range}' goes backwards"));
        }
        if last >= limit {
            return Err(format!(
                "index {last} is above the largest allowed, {} (scheduler.max_array_size = {limit})",
                limit.saturating_sub(1)
            ));
        }
        let mut i = first;
        loop {
            tasks.push(i);
            if tasks.len() > limit as usize {
                return Err(format!("more than {limit} tasks"));
            }
            match i.checked_add(step) {
                Some(next) if next <= last => i = next,
                _ => break,
            }
        }
    }
    tasks.sort_unstable();
    tasks.dedup();
    Ok(tasks)
}

/// Sorted task indices as ranges, the way squeue folds them: `1,5,9-12`.
pub fn fold_tasks(tasks: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < tasks.len() {
        let start = tasks[i];
        let mut end = start;
        while i + 1 < tasks.len() && tasks[i + 1] == end + 1 {
            i += 1;
            end = tasks[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// A job as a user names it on the command line: `12` (a job, or a whole array), `12_7` (one
/// task), `12_[1-5,9]` (some tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTarget {
    pub id: JobId,
    /// `None`: the job `id` itself, or every task when `id` is an array.
    pub tasks: Option<Vec<u32>>,
}

impl JobTarget {
    pub fn parse(text: &str) -> Result<JobTarget, String> {
        let text = text.trim();
        let bad = || format!("'{text}' is not a job id (expected 12, 12_7 or 12_[1-5])");
        let (id, tasks) = match text.split_once('_') {
            Some((id, tasks)) => {
                let inner = tasks
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .unwrap_or(tasks);
                // `%N` has no meaning here; squeue prints it, so people paste it.
                let inner = inner.split('%').next().unwrap_or(inner);
                let tasks =
                    expand_indices(inner, u32::MAX).map_err(|why| format!("{}: {why}", bad()))?;
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
}

impl fmt::Display for JobTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tasks {
            None => write!(f, "{}", self.id),
            Some(t) if t.len() == 1 => write!(f, "{}_{}", self.id, t[0]),
            Some(t) => write!(f, "{}_[{}]", self.id, fold_tasks(t)),
        }
    }
}

/// How a job is shown: `12_7` for a task, `12` otherwise.
pub fn display_id(id: JobId, array: Option<&ArrayTask>) -> String {
    match array {
        Some(a) => format!("{}_{}", a.array_id, a.task),
        None => id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_parse() {
        let a = ArraySpec::parse("0-99", DEFAULT_MAX_ARRAY_SIZE).unwrap();
        assert_eq!((a.count, a.min, a.max, a.max_running), (100, 0, 99, 0));
        let a = ArraySpec::parse("0-99:4", DEFAULT_MAX_ARRAY_SIZE).unwrap();
        assert_eq!(a.count, 25);
        assert_eq!(a.max, 96);
        assert_eq!(a.tasks()[..3], [0, 4, 8]);
        let a = ArraySpec::parse("1,5,9-12", DEFAULT_MAX_ARRAY_SIZE).unwrap();
        assert_eq!(a.tasks(), vec![1, 5, 9, 10, 11, 12]);
        assert_eq!(a.job_of(JobId(40), 9), Some(JobId(42)));
        assert_eq!(a.job_of(JobId(40), 2), None);
        let a = ArraySpec::parse("0-199%16", DEFAULT_MAX_ARRAY_SIZE).unwrap();
        assert_eq!((a.count, a.max_running), (200, 16));
        assert_eq!(a.describe(), "0-199%16");
        let a = ArraySpec::parse(" 3, 1,3 ", 10).unwrap();
        assert_eq!(a.tasks(), vec![1, 3]);
        assert_eq!(
            ArraySpec::parse("0-10000", DEFAULT_MAX_ARRAY_SIZE)
                .unwrap()
                .count,
            10_001
        );
    }

    #[test]
    fn bad_arrays_are_named() {
        for (text, wanted) in [
            ("", "empty"),
            ("0-10001", "max_array_size"),
            ("5-1", "backwards"),
            ("0-9%0", "%0"),
            ("0-9%x", "not a number"),
            ("a-b", "not a task index"),
            ("1,,2", "empty index"),
            ("0-9:0", "step of 0"),
            ("3:2", "needs a range"),
        ] {
            let err = ArraySpec::parse(text, DEFAULT_MAX_ARRAY_SIZE).unwrap_err();
            assert!(err.contains(wanted), "{text}: {err}");
        }
    }

    #[test]
    fn targets_parse_and_print() {
        assert_eq!(
            JobTarget::parse("12").unwrap(),
            JobTarget {
                id: JobId(12),
                tasks: None
            }
        );
        assert_eq!(JobTarget::parse("12_7").unwrap().tasks, Some(vec![7]));
        assert_eq!(
            JobTarget::parse("12_[1-3,9]").unwrap().tasks,
            Some(vec![1, 2, 3, 9])
        );
        assert_eq!(
            JobTarget::parse("12_[40-199%16]")
                .unwrap()
                .tasks
                .unwrap()
                .len(),
            160
        );
        assert_eq!(
            JobTarget::parse("12_[1-3,9]").unwrap().to_string(),
            "12_[1-3,9]"
        );
        assert_eq!(JobTarget::parse("12_7").unwrap().to_string(), "12_7");
        for bad in ["", "x", "12_", "12_[a]", "0", "-3"] {
            assert!(JobTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tasks_fold() {
        assert_eq!(fold_tasks(&[1, 5, 9, 10, 11, 12]), "1,5,9-12");
        assert_eq!(fold_tasks(&[40]), "40");
        assert_eq!(fold_tasks(&[]), "");
        let a = ArrayTask {
            array_id: JobId(12),
            task: 7,
        };
        assert_eq!(display_id(JobId(19), Some(&a)), "12_7");
        assert_eq!(display_id(JobId(19), None), "19");
    }
}
