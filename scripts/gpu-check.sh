#!/usr/bin/env bash
# Checks ysched on a host with a real NVIDIA GPU, through the driver's NVML (no --fake-gpus):
#   1. `noded --inventory` from NVML, compared GPU by GPU with nvidia-smi;
#   2. a one-node cluster (schedd + noded, on temp dirs) that registers those GPUs;
#   3. a job that runs nvidia-smi (and, where python3 and libcuda are there, asks CUDA) and
#      checks that it sees exactly the GPUs it was given.
# It changes no GPU setting (no MIG change, no reset, no clocks), takes a few minutes at most
# after the build, stops what it started on exit, and prints a record for docs/benchmarks.md.
#
#   scripts/gpu-check.sh [--release] [--gpus N] [--nvml-library PATH]
#
#   --release             build and run the release binaries (default: debug)
#   --gpus N              GPUs the job asks for (default: half of those offered, at least 1)
#   --nvml-library PATH   load NVML from PATH instead of the driver's libnvidia-ml.so.1 (also
#                         how to rehearse without a GPU: the mock library of tests/mock-nvml,
#                         with a stand-in nvidia-smi on PATH answering for the same machine)
#
# Exit status: 0 every check passed; 1 a check failed; 2 no NVIDIA GPU or driver here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

profile=debug
job_gpus=""
nvml_library=""
while [ $# -gt 0 ]; do
  case "$1" in
    --release) profile=release ;;
    --gpus) job_gpus=${2:?--gpus needs a number}; shift ;;
    --nvml-library) nvml_library=${2:?--nvml-library needs a path}; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done

if [ -n "$job_gpus" ] && ! [[ $job_gpus =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu-check: --gpus $job_gpus: expected a number of GPUs, at least 1" >&2
  exit 1
fi

say() { echo "==> $*"; }
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- 1. A GPU and its driver, before anything is built ---------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU/driver here (nvidia-smi is not installed)"
  exit 2
fi
if ! smi_list=$(timeout 60 nvidia-smi -L 2>&1) || ! grep -q '^GPU [0-9]' <<<"$smi_list"; then
  echo "gpu-check: no NVIDIA GPU/driver here (nvidia-smi -L: $(head -n 1 <<<"$smi_list"))"
  exit 2
fi
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to check the JSON answers"
smi_gpus=$(grep -c '^GPU [0-9]' <<<"$smi_list")
# `sed -n 1p` rather than `head`: it reads to the end, so nvidia-smi never gets SIGPIPE.
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | sed -n 1p) || true
cuda_version=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | sed -n 1p) || true
say "$smi_gpus GPU(s) on driver $driver (CUDA ${cuda_version:-?})"

# --- Build --------------------------------------------------------------------------------------
say "building ($profile)"
if [ "$profile" = release ]; then
  cargo build --release --bins --quiet
else
  cargo build --bins --quiet
fi
bin="$root/target/$profile"

dir=$(mktemp -d "${TMPDIR:-/tmp}/ysched-gpu-check.XXXXXX")
chmod 755 "$dir"
mkdir -m 1777 "$dir/checkpoints"
# Every process started here carries this tag (the agent's shepherds too), so that the exit
# trap finds them all, and nothing else.
tag="ysched-gpu-check-$$"
export YSCHED_GPU_CHECK_TAG=$tag
pids=()
cleanup() {
  local status=$?
  if [ -S "$dir/schedd.sock" ]; then
    YSCHED_CONF="$dir/ysched.toml" timeout 10 "$bin/ycancel" -u "$(id -un)" >/dev/null 2>&1 || true
  fi
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
  sleep 1
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}; pid=${pid%/environ}
    [ "$pid" = $$ ] && continue
    if { tr '\0' '\n' <"$environ"; } 2>/dev/null | grep -qx "YSCHED_GPU_CHECK_TAG=$tag"; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  if [ "$status" = 0 ]; then rm -rf "$dir"; else echo "gpu-check: files kept in $dir" >&2; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/ysched.toml" <<TOML
[scheduler]
listen = "127.0.0.1:$port"
socket = "$dir/schedd.sock"
state_dir = "$dir/state"
cluster_key_file = "$dir/cluster.key"
checkpoint_root = "$dir/checkpoints"
heartbeat_secs = 2

[node]
spool_dir = "$dir/spool"
# Process groups: the check leaves no cgroup behind.
cgroup_root = "none"
TOML
export YSCHED_CONF="$dir/ysched.toml"

# The checks, in one place: python3 reads the JSON the CLIs print.
cat >"$dir/check.py" <<'PY'
import json, sys

def csv_rows(path):
    """(index, uuid, name) per GPU of `nvidia-smi --query-gpu=index,uuid,name`."""
    rows = []
    for line in open(path):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows.append((cells[0], cells[1], ", ".join(cells[2:])))
    return rows

def inventory(inv_path, smi_path):
    """Every GPU nvidia-smi lists is offered with its UUID and name, or excluded with a reason."""
    inv = json.load(open(inv_path))
    offered = {g["index"]: g for g in inv["gpus"]}
    excluded = {e["index"]: e for e in inv["excluded"]}
    problems = []
    for index, uuid, name in csv_rows(smi_path):
        index = int(index)
        if index in offered:
            g = offered[index]
            if g["uuid"] != uuid or g["model"] != name:
                problems.append(f"GPU {index}: noded says {g['uuid']} {g['model']}, nvidia-smi {uuid} {name}")
        elif index not in excluded:  # excluded ones are listed, with why, by noded
            problems.append(f"GPU {index} ({uuid}) is missing from noded's inventory")
    for problem in problems:
        print("    " + problem)
    print(len(offered))
    return not problems

def node_up(nodes_path, count):
    nodes = json.load(open(nodes_path))
    node = next((n for n in nodes if n["name"] == "gpucheck"), None)
    return node is not None and node["state"] != "DOWN" and len(node["gpus"]) == int(count)

def job(job_path, out_path, inv_path, want):
    """The job completed, got `want` GPUs, and saw exactly those (by index and UUID)."""
    j = json.load(open(job_path))[0]
    inv = {g["index"]: g["uuid"] for g in json.load(open(inv_path))["gpus"]}
    out = open(out_path).read().splitlines()
    given = [int(g) for g in j["gpus"]]
    problems = []
    if j["state"] != "COMPLETED":
        problems.append(f"job ended {j['state']} (exit {j.get('exit_code')})")
    if len(given) != int(want):
        problems.append(f"job got {len(given)} GPUs, asked for {want}")
    env = dict(l.split("=", 1) for l in out if l.startswith("CUDA_"))
    visible = [int(g) for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    if visible != given:
        problems.append(f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')} but the job was given {given}")
    if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        problems.append(f"CUDA_DEVICE_ORDER={env.get('CUDA_DEVICE_ORDER')}, not PCI_BUS_ID")
    smi = {int(r[0]): r[1] for r in (l.split(", ") for l in out) if len(r) == 3 and r[0].isdigit()}
    for g in given:
        if smi.get(g) != inv.get(g):
            problems.append(f"GPU {g}: nvidia-smi in the job says {smi.get(g)}, noded registered {inv.get(g)}")
    cuda = [l.split()[2] for l in out if l.startswith("cuda-device ")]
    cuda_ran = any(l.startswith("cuda: devices") for l in out)
    if cuda_ran and cuda != [inv[g] for g in given]:
        problems.append(f"CUDA in the job sees {cuda}, expected {[inv[g] for g in given]}")
    for problem in problems:
        print("    " + problem)
    print("cuda-checked" if cuda_ran else "cuda-not-checked")
    print(",".join(str(g) for g in given))
    return not problems

command, args = sys.argv[1], sys.argv[2:]
ok = {"inventory": inventory, "node-up": node_up, "job": job}[command](*args)
sys.exit(0 if ok else 1)
PY

# --- 2. The inventory from NVML ---------------------------------------------------------------
library_args=()
[ -n "$nvml_library" ] && library_args=(--nvml-library "$nvml_library")
say "noded --inventory (NVML)"
started=$(now)
"$bin/noded" --inventory --name gpucheck ${library_args[@]+"${library_args[@]}"} 2>"$dir/inventory.err" \
  || fail "noded --inventory: $(cat "$dir/inventory.err")"
inventory_secs=$(since "$started")
"$bin/noded" --inventory --json --name gpucheck ${library_args[@]+"${library_args[@]}"} \
  >"$dir/inventory.json" 2>/dev/null || fail "noded --inventory --json failed"
sed 's/^/    /' "$dir/inventory.err"
nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader >"$dir/smi.csv"
if ! check=$(python3 "$dir/check.py" inventory "$dir/inventory.json" "$dir/smi.csv"); then
  echo "$check" | sed '$d'
  fail "noded's inventory does not match nvidia-smi"
fi
echo "$check" | sed '$d'
offered=$(echo "$check" | tail -n 1)
[ "$offered" -gt 0 ] || fail "noded offers none of the $smi_gpus GPU(s) (see above)"
say "inventory matches nvidia-smi: $offered of $smi_gpus GPU(s) offered (${inventory_secs}s)"
[ -n "$job_gpus" ] || job_gpus=$(( offered / 2 > 0 ? offered / 2 : 1 ))
[ "$job_gpus" -le "$offered" ] || fail "--gpus $job_gpus: only $offered GPU(s) offered"

# --- 3. A one-node cluster on the real GPUs ---------------------------------------------------
say "starting schedd and noded"
started=$(now)
"$bin/schedd" -v >"$dir/schedd.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -S "$dir/schedd.sock" ] && break; sleep 0.05; done
[ -S "$dir/schedd.sock" ] || fail "schedd did not start: $(tail -n 5 "$dir/schedd.log")"
"$bin/noded" -v --name gpucheck ${library_args[@]+"${library_args[@]}"} --spool-dir "$dir/spool/gpucheck" \
  --client-socket "$dir/noded.sock" >"$dir/noded.log" 2>&1 &
pids+=($!)
up=""
for _ in $(seq 150); do
  if "$bin/yctl" nodes --json >"$dir/nodes.json" 2>/dev/null \
    && python3 "$dir/check.py" node-up "$dir/nodes.json" "$offered"; then
    up=yes
    break
  fi
  sleep 0.2
done
[ -n "$up" ] || fail "node gpucheck did not come up with $offered GPU(s): $(tail -n 5 "$dir/noded.log")"
register_secs=$(since "$started")
say "node gpucheck up with $offered GPU(s) (${register_secs}s)"
"$bin/yctl" nodes --topology gpucheck | sed 's/^/    /'

# --- 4. A job that looks at its GPUs ----------------------------------------------------------
cat >"$dir/cuda_check.py" <<'PY'
# Asks the CUDA driver API (libcuda, part of the NVIDIA driver) which GPUs this process sees:
# CUDA_VISIBLE_DEVICES applies here, unlike in nvidia-smi.
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(f"cuda: not checked ({e})")
    sys.exit(0)
rc = cuda.cuInit(0)
if rc != 0:
    print(f"cuda: not checked (cuInit returned {rc})")
    sys.exit(0)
count = ctypes.c_int()
if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
    print("cuda: not checked (cuDeviceGetCount failed)")
    sys.exit(0)
print(f"cuda: devices {count.value}")
for ordinal in range(count.value):
    device = ctypes.c_int()
    uuid = (ctypes.c_ubyte * 16)()
    if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0 or cuda.cuDeviceGetUuid(uuid, device) != 0:
        print(f"cuda-device {ordinal} unknown")
        continue
    h = bytes(uuid).hex()
    print(f"cuda-device {ordinal} GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
PY
cat >"$dir/job.sh" <<SH
#!/bin/bash
echo "CUDA_VISIBLE_DEVICES=\${CUDA_VISIBLE_DEVICES-}"
echo "CUDA_DEVICE_ORDER=\${CUDA_DEVICE_ORDER-}"
nvidia-smi -L
nvidia-smi --query-gpu=index,uuid,name --format=csv
python3 "$dir/cuda_check.py"
SH
chmod 755 "$dir/job.sh"
say "submitting a job with -G $job_gpus"
started=$(now)
id=$("$bin/ysub" --parsable -J gpu-check -G "$job_gpus" -t 5 --grace 5 -D "$dir" \
  -o "$dir/job.out" "$dir/job.sh") || fail "ysub refused the job (see above)"
state=""
for _ in $(seq 600); do
  "$bin/yq" --all --json -j "$id" >"$dir/job.json" || fail "yq cannot list job $id"
  state=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["state"])' "$dir/job.json")
  case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL) break ;; esac
  sleep 0.2
done
job_secs=$(since "$started")
say "job $id: $state (${job_secs}s); its output:"
sed 's/^/    /' "$dir/job.out" 2>/dev/null || true
if ! check=$(python3 "$dir/check.py" job "$dir/job.json" "$dir/job.out" "$dir/inventory.json" "$job_gpus"); then
  echo "$check" | sed '$d' | sed '$d'
  fail "the job did not see exactly the GPUs it was given"
fi
cuda_checked=$(echo "$check" | tail -n 2 | head -n 1)
given=$(echo "$check" | tail -n 1)
say "PASS: the job saw exactly GPUs $given (nvidia-smi$([ "$cuda_checked" = cuda-checked ] && echo " and CUDA"))"

# --- Record -----------------------------------------------------------------------------------
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | awk '{ $1 = $1 "×"; print }' | paste -sd, -)
row0=$("$bin/yctl" nodes --topology gpucheck | awk '/^GPU0 / { $1 = ""; print substr($0, 2) }')
cat <<RECORD

--- record for docs/benchmarks.md ---
### gpu-check $(date -u +%Y-%m-%d): $model
- host $(hostname), driver $driver, CUDA ${cuda_version:-?}; ysched $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?') ($profile)
- noded --inventory: $offered of $smi_gpus GPU(s) offered, UUIDs and models as nvidia-smi, ${inventory_secs}s; GPU0 row of the matrix: ${row0:-(one GPU)}
- one-node cluster: node up with $offered GPU(s) ${register_secs}s after start
- job -G $job_gpus: given GPUs $given, seen exactly by nvidia-smi$([ "$cuda_checked" = cuda-checked ] && echo " and CUDA" || echo " (CUDA not checked)"); COMPLETED, ${job_secs}s from submit
RECORD
