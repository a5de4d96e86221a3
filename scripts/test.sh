#!/usr/bin/env bash
# Runs the whole test suite: unit tests, core property tests and end-to-end tests that start the
# real schedd/noded binaries. Needs only the Rust toolchain; installs anything else it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

# End-to-end tests switch users (jobs and clients run as `nobody`), use ps/id/sleep/cp, and
# mount a small tmpfs to fill the state disk.
for tool in ps id sleep cp mount umount; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && apt-get install -y -qq procps coreutils mount >/dev/null
    else
      echo "scripts/test.sh: $tool is missing (install procps/coreutils)" >&2
      exit 1
    fi
  fi
done

# The containment tests run python3 trainers as jobs, which get the default PATH.
if ! [ -x /usr/local/bin/python3 ] && ! [ -x /usr/bin/python3 ] && ! [ -x /bin/python3 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3 >/dev/null
  else
    echo "scripts/test.sh: python3 is missing from /usr/local/bin, /usr/bin and /bin" >&2
    exit 1
  fi
fi

# Style and lints first: a formatting slip or a warning fails the suite.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

# The end-to-end tests drive the real binaries: build them first, in the same profile. The
# mock NVML library (tests/mock-nvml, a cdylib) comes with them: the test harness depends on
# it, so cargo builds target/<profile>/deps/libysched_mock_nvml.so, where the tests find it.
cargo build --workspace --bins --quiet
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --quiet -- --test-threads="${YS_TEST_THREADS:-4}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole suite (cargo prints one per test binary).
awk '/^test result:/ { passed += $4; failed += $6 } END { printf "%d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
