//! The tasks of an array as sorted, disjoint runs: built from index ranges however much they
//! overlap, and asked for a task's place (its job id) and the task at a place.

use super::IndexRange;

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
