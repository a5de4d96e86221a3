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
  "$bin/noded" -v --name $n --cpus 64 --mem 512G --fake-gpus "$dir/$n-gpus.toml" --spool-dir "$dir/spool/$n" >"$dir/noded-$n.log" 2>&1 &
  echo $! >> "$dir/pids"
done
for _ in $(seq 100); do
  [ "$("$bin/yctl" nodes --json 2>/dev/null | grep -o '"state":"[A-Z]*"' | grep -vc DOWN)" -ge 2 ] && break
  sleep 0.1
done
cat > "$dir/stop" <<STOP
#!/usr/bin/env bash
export YSCHED_CONF="$dir/ysched.toml"
"$bin/ycancel" -u "\$(id -un)" 2>/dev/null || true
sleep 1
kill \$(cat "$dir/pids") 2>/dev/null || true
echo "demo cluster stopped (files kept in $dir)"
STOP
chmod +x "$dir/stop"
echo "$dir" > "$last"

echo "==> submitting demo jobs"
cd "$dir"
"$bin/ysub" -J train-llm -G 8 -p low -t 10 --wrap 'echo "training on GPUs $CUDA_VISIBLE_DEVICES"; sleep 120'
"$bin/ysub" -J finetune -G 4 -p medium --wrap 'sleep 60'
"$bin/ysub" -J eval -G 2 --wrap 'sleep 30'
"$bin/ysub" -J sweep -G 4 -p low --wrap 'sleep 90'
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
sleep 1
"$bin/yq"
cat <<EOF2

The demo cluster runs in $dir (logs: *.log there). To use it:
  export YSCHED_CONF=$dir/ysched.toml PATH=$bin:\$PATH
  yq                          # the queue;  yq --all --json for scripts
  ysub -G 2 --wrap 'nvidia-smi || env | grep CUDA'
  yctl nodes; yctl show job 1; yctl release 5; ycancel 2
Stop it with: scripts/demo.sh stop
EOF2
