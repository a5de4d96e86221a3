//! Job arrays (`ysub --array 0-99:4%16`) and the job names users type for them (`12`, `12_7`,
//! `12_[1-5,9]`).
//!
//! An array of N tasks is N jobs with consecutive ids: the array's id is the first task's job
//! id, and the task at position `i` of the sorted task list has job id `array_id + i`. Each
//! task is scheduled, preempted and requeued on its own; the spec (shared) says which array
//! it belongs to ([`ArraySpec`]) and the job which task it is ([`ArrayTask`]).

use crate::limits;
use crate::text::excerpt;
use crate::types::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;
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

/// One item of a list of task indices: `first-last:step`, or one index (`first == last`,
/// step 1). Always normalised: `first <= last`, `step >= 1`, and `last` is a task (`0-10:4` is
/// `0-8:4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IndexRange {
    pub first: u32,
    pub last: u32,
    pub step: u32,
}

impl IndexRange {
    /// `first`, `first + step`, ... up to `last` (lowered to the last of them).
    pub fn new(first: u32, last: u32, step: u32) -> IndexRange {
        let step = step.max(1);
        let last = first + (last - first) / step * step;
        let step = if first == last { 1 } else { step };
        IndexRange { first, last, step }
    }

    pub fn single(index: u32) -> IndexRange {
        IndexRange::new(index, index, 1)
    }

    /// How many indices.
    pub fn count(self) -> u64 {
        u64::from((self.last - self.first) / self.step) + 1
    }

    pub fn contains(self, index: u32) -> bool {
        (self.first..=self.last).contains(&index) && (index - self.first).is_multiple_of(self.step)
    }

    /// The first index above `bound`, if any.
    fn first_above(self, bound: u32) -> Option<u32> {
        if self.first > bound {
            return Some(self.first);
        }
        let next = u64::from(self.first)
            + (u64::from(bound - self.first) / u64::from(self.step) + 1) * u64::from(self.step);
        (next <= u64::from(self.last)).then_some(next as u32)
    }
}

impl fmt::Display for IndexRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.first == self.last, self.step) {
            (true, _) => write!(f, "{}", self.first),
            (false, 1) => write!(f, "{}-{}", self.first, self.last),
            (false, step) => write!(f, "{}-{}:{step}", self.first, self.last),
        }
    }
}

/// Parses `1,5,9-12,20-30:5` into its ranges, as written (not expanded, not merged), in
/// O(text). More than `max_ranges` ranges is refused.
pub fn parse_index_list(text: &str, max_ranges: usize) -> Result<Vec<IndexRange>, String> {
    let mut ranges = Vec::new();
    for part in text.split(',') {
        if part.is_empty() {
            return Err("an empty index between commas".into());
        }
        if ranges.len() == max_ranges {
            return Err(
                limits::TARGET_RANGES.refusal(text.split(',').count() as u64, max_ranges as u64)
            );
        }
        let shown = || excerpt(part, 24);
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("step ':{}' is not a number", excerpt(step, 24)))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (range, step)
            }
            None => (part, 1),
        };
        let number = |s: &str| -> Result<u32, String> {
            s.parse::<u32>()
                .map_err(|_| format!("'{}' is not a task index", excerpt(s, 24)))
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                if step != 1 {
                    return Err(format!("a step needs a range ('{}')", shown()));
                }
                let n = number(range)?;
                (n, n)
            }
        };
        if first > last {
            return Err(format!("range '{}' goes backwards", excerpt(range, 24)));
        }
        ranges.push(IndexRange::new(first, last, step));
    }
    Ok(ranges)
}

/// A set of task indices as sorted, disjoint runs (each `first`, `first + step`, ... `len`
/// of them), with how many tasks come before each run: the place of a task (its job is the
/// array's id plus its place) and the task at a place are found in O(log runs), and the set
/// never holds more than one entry per run, however many tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskSet {
    runs: Vec<Run>,
    count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: u32,
    step: u32,
    len: u64,
    /// Tasks in the runs before this one.
    place: u64,
}

impl Run {
    fn last(&self) -> u32 {
        // A task, so within u32.
        (u64::from(self.first) + (self.len - 1) * u64::from(self.step)) as u32
    }
}

/// The widest span of indices [`TaskSet::union`] lays out bit by bit where ranges overlap:
/// above `scheduler.max_array_size`'s own ceiling (4000001).
const MAX_OVERLAP_SPAN: u64 = 1 << 23;

impl TaskSet {
    /// The union of `ranges`. Costs O(k log k) for k ranges that do not overlap (the usual
    /// case); where some do, O(span / 64) for the span they cover plus O(indices) of the
    /// stepped ranges among them, after identical and touching ranges of the same step and
    /// offset are merged (so `7,7,7,…` or `1-9999,1-9999,…` cost one range). Refused when
    /// overlapping ranges span more than [`MAX_OVERLAP_SPAN`] indices.
    pub fn union(ranges: &[IndexRange]) -> Result<TaskSet, String> {
        // Merge ranges of one step and offset (singletons are step 1) that overlap or touch.
        let mut sorted: Vec<IndexRange> = ranges.to_vec();
        sorted.sort_unstable_by_key(|r| (r.step, r.first % r.step, r.first, r.last));
        let mut merged: Vec<IndexRange> = Vec::with_capacity(sorted.len());
        for r in sorted {
            match merged.last_mut() {
                Some(m)
                    if m.step == r.step
                        && m.first % m.step == r.first % r.step
                        && u64::from(r.first) <= u64::from(m.last) + u64::from(m.step) =>
                {
                    m.last = m.last.max(r.last);
                }
                _ => merged.push(r),
            }
        }
        merged.sort_unstable_by_key(|r| (r.first, r.last));
        let mut set = TaskSet::default();
        // Clusters of ranges whose spans overlap: one range is one run, several are laid out.
        let mut i = 0;
        while i < merged.len() {
            let (lo, mut hi) = (merged[i].first, merged[i].last);
            let mut j = i + 1;
            while j < merged.len() && merged[j].first <= hi {
                hi = hi.max(merged[j].last);
                j += 1;
            }
            if j == i + 1 {
                let r = merged[i];
                set.push(r.first, r.step, r.count());
            } else {
                set.push_overlapping(&merged[i..j], lo, hi)?;
            }
            i = j;
        }
        Ok(set)
    }

    fn push(&mut self, first: u32, step: u32, len: u64) {
        self.runs.push(Run {
            first,
            step,
            len,
            place: self.count,
        });
        self.count += len;
    }

    /// The union of `ranges`, all within `lo..=hi`, as runs: marked in a bitmap of the span,
    /// then read back in order, each run as long as its indices keep one step.
    fn push_overlapping(&mut self, ranges: &[IndexRange], lo: u32, hi: u32) -> Result<(), String> {
        let span = u64::from(hi - lo) + 1;
        if span > MAX_OVERLAP_SPAN {
            return Err(format!(
                "overlapping ranges span {span} indices; at most {MAX_OVERLAP_SPAN}"
            ));
        }
        let mut bits = vec![0u64; span.div_ceil(64) as usize];
        for r in ranges {
            let (a, b) = ((r.first - lo) as usize, (r.last - lo) as usize);
            if r.step == 1 {
                set_bit_range(&mut bits, a, b);
            } else {
                for k in (a..=b).step_by(r.step as usize) {
                    bits[k / 64] |= 1 << (k % 64);
                }
            }
        }
        // (first, step, len) of the run being read.
        let mut run: Option<(u32, u32, u64)> = None;
        for (w, &word) in bits.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                let index = lo + (w * 64 + word.trailing_zeros() as usize) as u32;
                word &= word - 1;
                run = match run {
                    None => Some((index, 1, 1)),
                    Some((first, _, 1)) => Some((first, index - first, 2)),
                    Some((first, step, len))
                        if u64::from(index) == u64::from(first) + u64::from(step) * len =>
                    {
                        Some((first, step, len + 1))
                    }
                    Some((first, step, len)) => {
                        self.push(first, step, len);
                        Some((index, 1, 1))
                    }
                };
            }
        }
        if let Some((first, step, len)) = run {
            self.push(first, step, len);
        }
        Ok(())
    }

    /// How many tasks.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The smallest index.
    pub fn first(&self) -> Option<u32> {
        self.runs.first().map(|r| r.first)
    }

    /// The largest index.
    pub fn last(&self) -> Option<u32> {
        self.runs.last().map(Run::last)
    }

    /// The place of `index` among the tasks (0: the smallest), if it is one.
    pub fn place_of(&self, index: u32) -> Option<u64> {
        let i = self
            .runs
            .partition_point(|r| r.first <= index)
            .checked_sub(1)?;
        let r = &self.runs[i];
        let offset = index - r.first;
        (offset.is_multiple_of(r.step) && u64::from(offset / r.step) < r.len)
            .then(|| r.place + u64::from(offset / r.step))
    }

    /// The task at `place`.
    pub fn task_at(&self, place: u64) -> Option<u32> {
        let i = self
            .runs
            .partition_point(|r| r.place <= place)
            .checked_sub(1)?;
        let r = &self.runs[i];
        let k = place - r.place;
        (k < r.len).then(|| (u64::from(r.first) + k * u64::from(r.step)) as u32)
    }

    /// The tasks in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs.iter().flat_map(|r| {
            (0..r.len).map(move |k| (u64::from(r.first) + k * u64::from(r.step)) as u32)
        })
    }

    /// The tasks as ranges (`0-99:4,101`), at most `max_chars` characters of them, for
    /// messages.
    pub fn describe(&self, max_chars: usize) -> String {
        let mut out = String::new();
        for r in &self.runs {
            if !out.is_empty() {
                out.push(',');
            }
            let range = IndexRange {
                first: r.first,
                last: r.last(),
                step: r.step,
            };
            out.push_str(&range.to_string());
            if out.len() > max_chars {
                let cut = (0..=max_chars)
                    .rev()
                    .find(|&i| out.is_char_boundary(i))
                    .unwrap_or(0);
                out.truncate(cut);
                out.push('…');
                break;
            }
        }
        out
    }
}

/// Sets bits `a..=b` of `bits`, a word at a time.
fn set_bit_range(bits: &mut [u64], a: usize, b: usize) {
    let (wa, wb) = (a / 64, b / 64);
    let low = u64::MAX << (a % 64);
    let high = u64::MAX >> (63 - b % 64);
    if wa == wb {
        bits[wa] |= low & high;
        return;
    }
    bits[wa] |= low;
    for w in &mut bits[wa + 1..wb] {
        *w = u64::MAX;
    }
    bits[wb] |= high;
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

    fn set(text: &str) -> TaskSet {
        TaskSet::union(&parse_index_list(text, usize::MAX).unwrap()).unwrap()
    }

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
        assert_eq!(a.task_at(3), Some(10));
        assert_eq!(a.task_at(6), None);
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
        assert_eq!(ArraySpec::first_n(5, 2).describe(), "0-4%2");
    }

    #[test]
    fn an_index_named_many_times_is_one_task() {
        // Within the text limit, `7` 500 times is one task (it was "more than 10001 tasks").
        let sevens = vec!["7"; 500].join(",");
        let a = ArraySpec::parse(&sevens, DEFAULT_MAX_ARRAY_SIZE).unwrap();
        assert_eq!((a.count, a.min, a.max), (1, 7, 7));
        let ranges = vec!["0-10000"; 100].join(",");
        assert_eq!(
            ArraySpec::parse(&ranges, DEFAULT_MAX_ARRAY_SIZE)
                .unwrap()
                .count,
            10_001
        );
        // Beyond it, the text is refused for its length, before anything is parsed.
        let err =
            ArraySpec::parse(&vec!["7"; 20_000].join(","), DEFAULT_MAX_ARRAY_SIZE).unwrap_err();
        assert_eq!(err, "--array is 39999 bytes; the limit is 1024 (fixed)");
    }

    #[test]
    fn overlapping_ranges_count_each_task_once() {
        // Same step, different offsets; different steps; ranges inside ranges.
        for (text, tasks) in [
            ("0-9:2,1-9:2", (0..=9).collect::<Vec<u32>>()),
            ("0-12:3,0-12:4", vec![0, 3, 4, 6, 8, 9, 12]),
            (
                "0-20,5-7,3-30:3",
                (0..=20).chain([21, 24, 27, 30]).collect(),
            ),
            ("5-9,0-4", (0..=9).collect()),
            ("1-3,2-6:2,100", vec![1, 2, 3, 4, 6, 100]),
        ] {
            let s = set(text);
            assert_eq!(s.iter().collect::<Vec<_>>(), tasks, "{text}");
            assert_eq!(s.count(), tasks.len() as u64, "{text}");
            for (place, task) in tasks.iter().enumerate() {
                assert_eq!(s.place_of(*task), Some(place as u64), "{text} {task}");
                assert_eq!(s.task_at(place as u64), Some(*task), "{text} {place}");
            }
            assert_eq!(s.place_of(101), None);
        }
    }

    #[test]
    fn a_task_set_matches_the_expansion_of_random_lists() {
        // A small deterministic generator: lists of up to 12 ranges within 0..200.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(n)) as u32
        };
        for _ in 0..2_000 {
            let k = 1 + next(12);
            let mut ranges = Vec::new();
            let mut expanded = std::collections::BTreeSet::new();
            for _ in 0..k {
                let first = next(200);
                let last = first + next(60);
                let step = 1 + next(7);
                let r = IndexRange::new(first, last, step);
                expanded.extend((r.first..=r.last).step_by(r.step as usize));
                ranges.push(r);
            }
            let s = TaskSet::union(&ranges).unwrap();
            assert_eq!(
                s.iter().collect::<Vec<_>>(),
                expanded.iter().copied().collect::<Vec<_>>(),
                "{ranges:?}"
            );
            for (place, task) in expanded.iter().enumerate() {
                assert_eq!(s.place_of(*task), Some(place as u64));
                assert_eq!(s.task_at(place as u64), Some(*task));
            }
        }
    }

    #[test]
    fn huge_ranges_cost_their_text_not_their_size() {
        let started = std::time::Instant::now();
        let t = JobTarget::parse("1_[0-4294967294]").unwrap();
        assert_eq!(t.tasks_named(), Some(4_294_967_295));
        assert_eq!(t.first_outside(0, 99), Some(100));
        assert_eq!(t.first_outside(0, u32::MAX), None);
        // Disjoint huge ranges are one run each.
        let s = set("0-4294967294:2");
        assert_eq!(s.count(), 2_147_483_648);
        assert_eq!(s.place_of(4_294_967_294), Some(2_147_483_647));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // Overlapping ones wider than an array can be are refused, not laid out.
        let wide = [
            IndexRange::new(0, u32::MAX, 1),
            IndexRange::new(0, u32::MAX, 2),
        ];
        assert!(TaskSet::union(&wide).is_err());
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
        // A long bad value is echoed short.
        let err =
            ArraySpec::parse(&format!("{}x", "1".repeat(900)), DEFAULT_MAX_ARRAY_SIZE).unwrap_err();
        assert!(err.len() < 200, "{err}");
    }

    #[test]
    fn specs_read_back_from_the_store_have_their_tasks() {
        let a = ArraySpec::parse("1,5,9-12%2", DEFAULT_MAX_ARRAY_SIZE).unwrap();
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            r#"{"indices":"1,5,9-12","max_running":2,"count":6,"min":1,"max":12}"#
        );
        let back: ArraySpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.job_of(JobId(40), 12), Some(JobId(45)));
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
        let t = JobTarget::parse("12_7").unwrap();
        assert_eq!(t.tasks, Some(vec![IndexRange::single(7)]));
        assert_eq!(t.single_task(), Some(7));
        assert_eq!(
            JobTarget::parse("12_[1-3,9]").unwrap().tasks,
            Some(vec![IndexRange::new(1, 3, 1), IndexRange::single(9)])
        );
        assert_eq!(
            JobTarget::parse("12_[40-199%16]").unwrap().tasks_named(),
            Some(160)
        );
        assert_eq!(
            JobTarget::parse("12_[1-3,9]").unwrap().to_string(),
            "12_[1-3,9]"
        );
        assert_eq!(
            JobTarget::parse("12_[0-10:4]").unwrap().to_string(),
            "12_[0-8:4]"
        );
        assert_eq!(JobTarget::parse("12_7").unwrap().to_string(), "12_7");
        assert_eq!(JobTarget::parse("12_[7,7]").unwrap().single_task(), Some(7));
        for bad in ["", "x", "12_", "12_[a]", "0", "-3"] {
            assert!(JobTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn targets_are_bounded() {
        let err = JobTarget::parse(&format!("1_[{}]", "1,".repeat(600))).unwrap_err();
        assert_eq!(err, "job id is 1204 bytes; the limit is 1024 (fixed)");
        let many = vec!["1"; 200].join(",");
        let err = JobTarget::parse(&format!("1_[{many}]")).unwrap_err();
        assert!(
            err.ends_with("task ranges in one job id: 200; the limit is 128 (fixed)"),
            "{err}"
        );
        let err = JobTarget::parse(&format!("{}x", "9".repeat(500))).unwrap_err();
        assert!(err.len() < 120, "{err}");
    }

    #[test]
    fn targets_of_one_job_are_merged() {
        let parse = |s: &str| JobTarget::parse(s).unwrap();
        let merged = merge_targets(&[
            parse("12_3"),
            parse("13"),
            parse("12_[5-9]"),
            parse("12"),
            parse("12_3"),
        ]);
        assert_eq!(
            merged.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["12_[3,5-9]", "13", "12"]
        );
    }

    #[test]
    fn tasks_fold() {
        assert_eq!(fold_tasks(&[1, 5, 9, 10, 11, 12]), "1,5,9-12");
        assert_eq!(fold_tasks(&[40]), "40");
        assert_eq!(fold_tasks(&[]), "");
        assert_eq!(set("0-99:4,101").describe(80), "0-96:4,101");
        assert_eq!(set("0-99:2").describe(3), "0-9…");
        let a = ArrayTask {
            array_id: JobId(12),
            task: 7,
        };
        assert_eq!(display_id(JobId(19), Some(&a)), "12_7");
        assert_eq!(display_id(JobId(19), None), "19");
    }
}
