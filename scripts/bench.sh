#!/usr/bin/env bash
# Builds ysched in release mode and prints the benchmark figures (see docs/benchmarks.md).
#   scripts/bench.sh                 all groups
#   scripts/bench.sh cluster core    only these groups (cluster, preempt, core; fleet, throughput,
#                                    loaded, restart, report, array, neighbour and fuzz only when
#                                    named)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins --quiet
exec target/release/bench "$@"
