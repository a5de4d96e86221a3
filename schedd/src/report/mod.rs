//! Usage reports and the trace export, pure functions of recorded runs: what `yctl report`
//! shows (`usage`) and what `yctl report --export-trace` writes for `ysim` (`trace`). The
//! shell feeds both from a scan of the store's `usage` tree on a blocking thread.

mod trace;
mod usage;

pub use trace::{trace, Trace, TraceBuilder, TraceRow, TraceSpec};
pub use usage::{
    build, Builder, ClusterLines, Day, Group, GroupBy, NodeCapacity, Params, Report, Waits,
};

use std::collections::HashMap;
pub use ysched_common::time::DAY_MS;

/// A hasher for job ids (already well spread): a multiply, not SipHash, for a map of a
/// million entries filled in one report.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod trace_tests;
