#!/usr/bin/env bash
# Builds HyperQueue's `hq` from its public source, for `HQ_BIN=... scripts/bench.sh hq`
# (ysched's throughput and latency measured side by side with HyperQueue's, see
# docs/benchmarks.md).
# Nothing of HyperQueue is built by the test suite or shipped with ysched.
#
#   scripts/build-hq.sh [SOURCE] [DEST]
#     SOURCE  a clone of https://github.com/It4innovations/hyperqueue (or that URL; cloned
#             into DEST/src); default: the URL
#     DEST    where the build goes (default: target/hyperqueue); prints the path of `hq`
#
# Built without HyperQueue's default HiGHS solver (it needs cmake and a C++ build) and
# without its dashboard: `--no-default-features --features jemalloc,microlp`, as measured
# in docs/benchmarks.md (0.26.2). About 10-20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source=${1:-https://github.com/It4innovations/hyperqueue}
dest=${2:-target/hyperqueue}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
if [ -d "$source" ]; then
    src=$(cd "$source" && pwd)
else
    src="$dest/src"
    [ -d "$src/.git" ] || git clone --quiet --depth 1 "$source" "$src"
fi
CARGO_TARGET_DIR="$dest/target" cargo build --release --quiet \
    --manifest-path "$src/Cargo.toml" -p hyperqueue \
    --no-default-features --features jemalloc,microlp >&2
echo "$dest/target/release/hq"
