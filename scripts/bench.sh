#!/usr/bin/env bash
# Builds ysched in release mode and prints the benchmark figures (see docs/benchmarks.md).
#   scripts/bench.sh                 all groups
#   scripts/bench.sh cluster core    only these groups (cluster, preempt, core; fleet, throughput,
#                                    loaded, restart, report, history, array, neighbour, power_loss, hq,
#                                    fuzz, replicas and replicas_catch_up only when named)
#   REPLICAS_ROUNDS=10 scripts/bench.sh replicas
#                                    three schedd replicas: the failover gap over that many
#                                    kill -9 rounds, and ysub against one schedd
#   TMPDIR=/mnt/x scripts/bench.sh   temp dirs (clusters' state, spools, job output) there: the
#                                    figures depend on that file system (the first line says
#                                    which; see docs/benchmarks.md)
#   HQ_BIN=/path/to/hq scripts/bench.sh hq
#                                    ysched and HyperQueue side by side (HQ_BIN: an `hq` built
#                                    from its public repository by scripts/build-hq.sh; not
#                                    built here; without it, ysched's side alone)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins --quiet
# The power-loss shim (a cdylib, which --bins leaves out) for the power_loss group.
cargo build --release -p ysched-powerloss --quiet
exec target/release/bench "$@"
