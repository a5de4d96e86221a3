#!/usr/bin/env bash
# Runs the whole test suite: unit tests, core property tests and end-to-end tests that start the
# real schedd/noded binaries. Needs only the Rust toolchain; installs anything else it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

# End-to-end tests switch users (jobs and clients run as `nobody`) and use ps/id/sleep.
for tool in ps id sleep; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && apt-get install -y -qq procps coreutils >/dev/null
    else
      echo "scripts/test.sh: $tool is missing (install procps/coreutils)" >&2
      exit 1
    fi
  fi
done

# The end-to-end tests drive the real binaries: build them first, in the same profile.
cargo build --workspace --bins --quiet
cargo test --workspace --quiet -- --test-threads="${YS_TEST_THREADS:-4}"
