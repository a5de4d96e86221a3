#!/usr/bin/env bash
# Builds ysched and starts a local demo cluster: schedd plus two agents with fake 8-GPU
# inventories, all in a temp dir, then submits a few jobs and shows the queue.
#   scripts/demo.sh          start it (prints how to use and stop it)
#   scripts/demo.sh stop     stop the demo started last
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
last="${TMPDIR:-/tmp}/ysched-demo.last"

if [ "${1:-}" = stop ]; then
  [ -f "$last" ] || { echo "no demo is running"; exit 0; }
  dir=$(cat "$last")
  "$dir/stop"
  exit 0
fi

echo "==> building (cargo build --release)"
cargo build --release --bins --quiet
bin="$root/target/release"

dir=$(mktemp -d "${TMPDIR:-/tmp}/ysched-demo.XXXXXX")
chmod 755 "$dir"
# Like /tmp: every user's jobs may create their own checkpoint directory here.
mkdir -m 1777 "$dir/checkpoints"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 7117)
cat > "$dir/ysched.toml" <<TOML
[scheduler]
listen = "127.0.0.1:$port"
socket = "$dir/schedd.sock"
state_dir = "$dir/state"
cluster_key_file = "$dir/cluster.key"
checkpoint_root = "$dir/checkpoints"
# Whoever runs the demo administers it (enrols its two agents, drains nodes).
admin_group = "$(id -gn)"

[node]
spool_dir = "$dir/spool"
TOML
for n in node1 node2; do
  : > "$dir/$n-gpus.toml"
  for i in 0 1 2 3 4 5 6 7; do
    peers=$(for j in 0 1 2 3 4 5 6 7; do if [ $j != $i ]; then printf "%s, " $j; fi; done | sed "s/, $//")
    cat >> "$dir/$n-gpus.toml" <<TOML
[[gpu]]
index = $i
uuid = "GPU-$n-000$i"
model = "NVIDIA A100-SXM4-80GB"
memory_mib = 81920
nvlink = [$peers]

TOML
  done
done
export YSCHED_CONF="$dir/ysched.toml"
"$bin/schedd" -v >"$dir/schedd.log" 2>&1 &
echo $! > "$dir/pids"
for _ in $(seq 100); do [ -S "$dir/schedd.sock" ] && break; sleep 0.05; done
for n in node1 node2; do
  # Each host gets its own certificate: a one-time token from schedd, traded by its agent.
  "$bin/yctl" node enrol $n -o "$dir/$n.token" 2>/dev/null
  # Each agent serves the CLIs of "its host" on its own socket (one machine plays two hosts).
  "$bin/noded" -v --name $n --cpus 64 --mem 512G --fake-gpus "$dir/$n-gpus.toml" --spool-dir "$dir/spool/$n" \
    --enrol-token "$dir/$n.token" --client-socket "$dir/$n.sock" >"$dir/noded-$n.log" 2>&1 &
  echo $! >> "$dir/pids"
done
for _ in $(seq 100); do
  [ "$("$bin/yctl" nodes --json 2>/dev/null | grep -o '"state":"[A-Z]*"' | grep -vc DOWN)" -ge 2 ] && break
  sleep 0.1
done
cat > "$dir/stop" <<STOP
#!/usr/bin/env bash
# Ends every job of the demo, whoever submitted it, then the daemons. The starter is an
# administrator when it is root (the only way jobs of other users run here); otherwise every
# job is its own. Jobs get their grace window; whatever is left after it (a job whose node
# agent is gone) is killed by its spool path, which only this demo's processes carry.
export YSCHED_CONF="$dir/ysched.toml"
active_ids() {
  "$bin/yq" --json -t PENDING,HELD,RUNNING,PREEMPTING 2>/dev/null | grep -o '"id": *[0-9]*' | grep -o '[0-9]*$' | sort -u
}
# ycancel takes at most 1000 ids a command.
active_ids | xargs -r -n 500 "$bin/ycancel" >/dev/null 2>&1 || true
for _ in \$(seq 150); do
  [ -z "\$(active_ids)" ] && break
  sleep 0.2
done
kill \$(cat "$dir/pids") 2>/dev/null || true
sleep 0.5
pkill -KILL -f "$dir/spool/" 2>/dev/null || true
echo "demo cluster stopped (files kept in $dir)"
STOP
chmod +x "$dir/stop"
echo "$dir" > "$last"

echo "==> submitting demo jobs"
cd "$dir"
# A training job as users write them: bash without `exec`, the work in a child process that
# saves its step when told to stop (SIGTERM: the grace window) and resumes from it after a
# requeue. ysched gives every process of the job the grace, not only the script.
cat > "$dir/train.sh" <<'SH'
#!/bin/bash
ckpt="$YS_CHECKPOINT_DIR/step"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
echo "run $YS_RESTART_COUNT: starting at step $step on GPUs $CUDA_VISIBLE_DEVICES"
bash -c '
  step=$1 ckpt=$2
  trap "sleep 1; echo \$step > \$ckpt.tmp && mv \$ckpt.tmp \$ckpt; echo saved step \$step; exit 0" TERM
  while :; do step=$((step + 1)); sleep 0.2 & wait $!; done
' trainer "$step" "$ckpt"
SH
"$bin/ysub" -J train-llm -G 8 -p low -t 10 "$dir/train.sh"
"$bin/ysub" -J finetune -G 4 -p medium --wrap 'sleep 60'
# Evaluation waits for the fine-tuning to succeed; a sweep of 8 tasks runs 2 at a time.
"$bin/ysub" -J eval -G 2 -d afterok:2 --wrap 'sleep 30'
"$bin/ysub" -J sweep -G 1 -p low --array 0-7%2 --wrap 'echo "point $YS_ARRAY_TASK_ID"; sleep 30'
"$bin/ysub" -J later -G 1 --hold --wrap 'echo released'
sleep 0.5
echo
"$bin/yq"
echo
"$bin/yctl" nodes
echo
echo "==> an urgent job arrives: a critical 8-GPU job preempts the low-tier training job"
"$bin/ysub" -J urgent-fix -G 8 -p critical --wrap 'echo "urgent work on $CUDA_VISIBLE_DEVICES"; sleep 20' \
  || echo "(by default only root may submit to 'critical': run the demo as root to see preemption)"
sleep 2
"$bin/yq"
echo
echo "==> the training job saved its step in its grace window and waits to resume from it"
"$bin/yctl" show job 1 | grep -E 'preemption|requeued' || true
cat "$dir/ysched-1.out" 2>/dev/null || true
cat <<EOF2

The demo cluster runs in $dir (logs: *.log there). To use it:
  export YSCHED_CONF=$dir/ysched.toml PATH=$bin:\$PATH
  yq                          # the queue;  yq --all --json for scripts
  ysub -G 2 --wrap 'nvidia-smi || env | grep CUDA'
  yctl nodes; yctl show job 1; yctl release 12; ycancel 4_[6-7]
  yq --array; yq --start      # every array task; expected start times
  YSCHED_SOCKET=$dir/node1.sock yq   # as from node1: relayed by its agent
Stop it with: scripts/demo.sh stop
EOF2
