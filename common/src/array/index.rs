//! Lists of task indices (`1,5,9-12,20-30:5`): parsed into ranges as written, and sorted
//! indices folded back into such a list.

use crate::limits;
use crate::text::excerpt;
use serde::{Deserialize, Serialize};
use std::fmt;

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
    pub(super) fn first_above(self, bound: u32) -> Option<u32> {
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
