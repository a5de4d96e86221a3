//! Job arrays (`ysub --array 0-99:4%16`) and the job names users type for them (`12`, `12_7`,
//! `12_[1-5,9]`).
//!
//! An array of N tasks is N jobs with consecutive ids: the array's id is the first task's job
//! id, and the task at position `i` of the sorted task list has job id `array_id + i`. Each
//! task is scheduled, preempted and requeued on its own; the spec (shared) says which array
//! it belongs to ([`ArraySpec`]) and the job which task it is ([`ArrayTask`]).
//!
//! - [`index`]: lists of task indices (`1,5,9-12:2`), parsed and folded back into text.
//! - [`task_set`]: the tasks of an array as sorted runs, with each task's place in O(log runs).
//! - [`target`]: the job names users type ([`JobTarget`]).

mod index;
mod target;
mod task_set;

pub use index::{fold_tasks, parse_index_list, IndexRange};
pub use target::{merge_targets, split_outside_brackets, JobTarget};
pub use task_set::TaskSet;

use crate::limits;
use crate::text::excerpt;
use crate::types::JobId;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The default of `scheduler.max_array_size`, as Slurm's `MaxArraySize`: task indices go from
/// 0 to one less than it.
pub const DEFAULT_MAX_ARRAY_SIZE: u32 = 10_001;

/// What `--array` asked for. Kept small (the text, not the task list), since every task's
/// stored record carries its spec; the tasks themselves are a [`TaskSet`] made from the text
/// (when parsed, and again when read from the store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(try_from = "StoredArraySpec", into = "StoredArraySpec")]
pub struct ArraySpec {
    /// The index expression without `%N`, spaces removed: `0-99:4`, `1,5,9-12`.
    pub indices: String,
    /// `%N`: at most this many tasks run at once; 0: no limit.
    pub max_running: u32,
    /// How many distinct tasks, and the smallest and largest index.
    pub count: u32,
    pub min: u32,
    pub max: u32,
    /// The tasks, shared by every copy of the spec.
    tasks: Arc<TaskSet>,
}

/// [`ArraySpec`] as stored: the text and what it was found to hold.
#[derive(Serialize, Deserialize)]
struct StoredArraySpec {
    indices: String,
    max_running: u32,
    count: u32,
    min: u32,
    max: u32,
}

impl TryFrom<StoredArraySpec> for ArraySpec {
    type Error = String;

    fn try_from(stored: StoredArraySpec) -> Result<ArraySpec, String> {
        // A stored spec was checked against the limit of its day; it is read as it is.
        let ranges = parse_index_list(&stored.indices, usize::MAX)?;
        let tasks = TaskSet::union(&ranges)?;
        Ok(ArraySpec {
            indices: stored.indices,
            max_running: stored.max_running,
            count: stored.count,
            min: stored.min,
            max: stored.max,
            tasks: Arc::new(tasks),
        })
    }
}

impl From<ArraySpec> for StoredArraySpec {
    fn from(spec: ArraySpec) -> StoredArraySpec {
        StoredArraySpec {
            indices: spec.indices,
            max_running: spec.max_running,
            count: spec.count,
            min: spec.min,
            max: spec.max,
        }
    }
}

/// Which task of which array a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ArrayTask {
    pub array_id: JobId,
    pub task: u32,
}

impl ArraySpec {
    /// Parses `--array`: `0-99`, `0-99:4`, `1,5,9-12`, each optionally followed by `%N`.
    /// Every index must be below `max_array_size` (`scheduler.max_array_size`); the text is at
    /// most [`limits::ARRAY`] bytes. Costs O(text) plus O(tasks): indices named many times
    /// (`7,7,7,…`) are one task.
    pub fn parse(text: &str, max_array_size: u32) -> Result<ArraySpec, String> {
        limits::ARRAY.check_len(text)?;
        let shown = excerpt(text.trim(), 40);
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if compact.is_empty() {
            return Err("empty --array".into());
        }
        let (indices, max_running) = match compact.split_once('%') {
            Some((indices, limit)) => {
                let limit: u32 = limit.parse().map_err(|_| {
                    format!(
                        "--array '{shown}': '%{}' is not a number of tasks",
                        excerpt(limit, 20)
                    )
                })?;
                if limit == 0 {
                    return Err(format!("--array '{shown}': %0 would never run a task"));
                }
                (indices.to_string(), limit)
            }
            None => (compact, 0),
        };
        let ranges = parse_index_list(&indices, usize::MAX)
            .map_err(|why| format!("--array '{shown}': {why}"))?;
        if let Some(r) = ranges.iter().find(|r| r.last >= max_array_size) {
            return Err(format!(
                "--array '{shown}': index {} is above the largest allowed, {} \
                 (scheduler.max_array_size = {max_array_size})",
                r.last,
                max_array_size.saturating_sub(1)
            ));
        }
        let tasks = TaskSet::union(&ranges).map_err(|why| format!("--array '{shown}': {why}"))?;
        Ok(ArraySpec {
            count: tasks.count() as u32,
            min: tasks.first().expect("not empty"),
            max: tasks.last().expect("not empty"),
            indices,
            max_running,
            tasks: Arc::new(tasks),
        })
    }

    /// An array of the tasks `0` to `count - 1` (tests and benchmarks).
    pub fn first_n(count: u32, max_running: u32) -> ArraySpec {
        let text = match max_running {
            0 => format!("0-{}", count.saturating_sub(1)),
            n => format!("0-{}%{n}", count.saturating_sub(1)),
        };
        ArraySpec::parse(&text, u32::MAX).expect("a valid range")
    }

    /// The tasks.
    pub fn task_set(&self) -> &TaskSet {
        &self.tasks
    }

    /// The task indices, sorted and distinct.
    pub fn tasks(&self) -> Vec<u32> {
        self.tasks.iter().collect()
    }

    /// The task at `place` (0: the smallest index): the task of job `array_id + place`.
    pub fn task_at(&self, place: u64) -> Option<u32> {
        self.tasks.task_at(place)
    }

    /// The job id of `task` in the array whose id is `array_id`; `None` when the array has no
    /// such task.
    pub fn job_of(&self, array_id: JobId, task: u32) -> Option<JobId> {
        self.tasks.place_of(task).map(|i| JobId(array_id.0 + i))
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

/// How a job is shown: `12_7` for a task, `12` otherwise.
pub fn display_id(id: JobId, array: Option<&ArrayTask>) -> String {
    match array {
        Some(a) => format!("{}_{}", a.array_id, a.task),
        None => id.to_string(),
    }
}

#[cfg(test)]
mod tests;
