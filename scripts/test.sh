#!/usr/bin/env bash
# Runs the whole test suite in two stages: first the fast one (formatting, then the unit tests
# and the property tests of the scheduling core, with clippy's lints), then the end-to-end
# tests, which start the real schedd/noded binaries. Needs only the Rust toolchain; installs
# anything else it needs.
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

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

# One build for the lints and the tests. `cargo clippy` is `cargo check` with clippy-driver
# compiling the workspace's own crates: run separately, it checks every dependency once more
# (metadata only, which `cargo build` cannot reuse). Here clippy-driver compiles the
# workspace's crates for the test builds themselves (`CLIPPY_ARGS` is how `cargo clippy`
# hands it `-D warnings`): the same lints over the same targets as
# `cargo clippy --workspace --all-targets -- -D warnings` (the tests build every lib, bin and
# test target; the workspace has no benches or examples), and the dependencies are built once.
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# `CLIPPY_ARGS` is how this toolchain's `cargo clippy` talks to clippy-driver, not a promise:
# make sure the lints are really in force, so that a toolchain that changed it fails here
# instead of letting every lint pass unseen. A scratch crate with a lint that `-D warnings`
# denies (a `vec!` that could be an array) must fail to build, and for that lint.
canary=$(mktemp -d)
mkdir -p "$canary/src"
printf '[package]\nname = "lint-canary"\nversion = "0.0.0"\nedition = "2021"\n\n[workspace]\n' \
  >"$canary/Cargo.toml"
printf 'fn main() {\n    let v = vec![1];\n    println!("{}", v.len());\n}\n' >"$canary/src/main.rs"
if cargo build --quiet --offline --manifest-path "$canary/Cargo.toml" \
  --target-dir "$canary/target" >"$canary/out" 2>&1 || ! grep -q 'useless_vec' "$canary/out"; then
  cat "$canary/out" >&2
  echo "scripts/test.sh: clippy's lints are not in force in the test build (see above): run" \
    "cargo clippy --workspace --all-targets -- -D warnings instead" >&2
  rm -rf "$canary"
  exit 1
fi
rm -rf "$canary"

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# A closing line for what ran so far (cargo prints one per test binary), and every test that
# said it could not run here (`SKIPPED: <test>: <why>`, see `ysched_tests::skipped`).
summary() {
  awk '/^test result:/ { passed += $4; failed += $6 } END { printf "%d passed, %d failed", passed, failed }' "$log"
  local skipped
  skipped=$(grep -c '^SKIPPED: ' "$log" || true)
  echo ", $skipped skipped"
  grep '^SKIPPED: ' "$log" || true
}

run_tests() {
  set +e
  "$@" 2>&1 | tee -a "$log"
  local status=${PIPESTATUS[0]}
  set -e
  if [ "$status" != 0 ]; then
    summary
    exit "$status"
  fi
}

# Fast stage: formatting, then the unit tests and property tests (the lib and bin targets of
# every crate) and doc tests.
stage_start=$SECONDS
cargo fmt --all -- --check
run_tests cargo test --workspace --lib --bins --quiet
run_tests cargo test --workspace --doc --quiet
echo "fast stage: $((SECONDS - stage_start)) s"

# End-to-end stage. The tests drive the real binaries: build them first, in the same profile.
# The mock NVML library (tests/mock-nvml, a cdylib) comes with them: the test harness depends
# on it, so cargo builds target/<profile>/deps/libysched_mock_nvml.so, where the tests find it.
# `--all-targets`, not `--bins`: the dev-dependencies then take part in resolving features as
# they do in `cargo test`, so the binaries and the tests share one build of every crate (with
# `--bins` alone, several dependencies and every workspace crate are built twice).
stage_start=$SECONDS
cargo build --workspace --all-targets --quiet
# submitit from PyPI (pinned) for the Slurm-compatibility test (tests/tests/e2e/compat.rs), in
# target/submitit-venv. Where that cannot be made (no venv module, no PyPI), the reason goes to
# target/submitit-venv.failed and the test says SKIPPED with it.
prepare_submitit() {
  local venv=target/submitit-venv
  rm -f "$venv.failed"
  if "$venv/bin/python" -c 'import submitit; assert submitit.__version__ == "1.5.4"' 2>/dev/null; then
    return
  fi
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get install -y -qq python3-venv >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null 2>&1; } || true
    fi
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >"$venv.failed" 2>&1; then
      return
    fi
  fi
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check submitit==1.5.4 >"$venv.failed" 2>&1; then
    return
  fi
  rm -f "$venv.failed"
}
prepare_submitit
# Every integration test target: the end-to-end binary `ysched-tests --test e2e` and the
# crates' own (a daemon or CLI against a fake peer).
run_tests cargo test --workspace --test '*' --quiet -- --test-threads="${YS_TEST_THREADS:-4}"
echo "end-to-end stage: $((SECONDS - stage_start)) s"

# One closing line for the whole suite.
summary
