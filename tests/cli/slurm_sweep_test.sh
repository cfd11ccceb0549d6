#!/usr/bin/env bash
# scripts/slurm-sweep.sh under a stand-in sbatch (array tasks run one after another, last first;
# the merge job after them): the sweep folder it leaves is the one `kvsim sweep` writes, byte for
# byte. Usage: slurm_sweep_test.sh KVSIM SOURCE_DIR
set -euo pipefail
kvsim=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
cat > "$tmp/bin/sbatch" <<'SH'
#!/usr/bin/env bash
# Stand-in sbatch: --array=1-N runs the script N times (N first) with SLURM_ARRAY_TASK_ID set;
# otherwise it runs the script once. Prints a job id (--parsable).
array="" args=()
for a in "$@"; do
  case "$a" in
    --array=*) array=${a#--array=} ;;
    --*) echo "$a" >> "$SBATCH_LOG" ;;
    *) args+=("$a") ;;
  esac
done
if [ -n "$array" ]; then
  n=${array#1-}; n=${n%%%*}
  for ((i = n; i >= 1; i--)); do SLURM_ARRAY_TASK_ID=$i bash "${args[@]}" > /dev/null; done
  echo 101
else
  bash "${args[@]}" > /dev/null
  echo 102
fi
SH
chmod +x "$tmp/bin/sbatch"
cat > "$tmp/mc.yaml" <<YAML
name: mc
engine: {profile: vllm-0.7.2, mode: cache_only}
cache: {block_size: 512, capacity_tokens: 1000000, enable_prefix_caching: true, num_preallocate_tokens: 0}
scheduler: {max_model_len: 4000000}
workload: {trace: {format: mooncake, max_requests: 200, path: $src/scenarios/traces/mooncake_synthetic.jsonl}}
cluster: {replicas: 2, router: {policy: round_robin, seed: 1}}
sweep: {cluster.replicas: [1, 2, 4], cluster.router.policy: [round_robin, prefix_hash]}
YAML
cd "$tmp"
"$kvsim" sweep mc.yaml -o own --jobs 2 --quiet --set cache.capacity_tokens=1000000 > /dev/null
export SBATCH_LOG=$tmp/sbatch.log SBATCH_FLAGS="--partition=cpu --time=10"
KVSIM=$kvsim KVSIM_SLURM_MAX_RUNNING=4 PATH="$tmp/bin:$PATH" \
  bash "$src/scripts/slurm-sweep.sh" mc.yaml slurm --set cache.capacity_tokens=1000000 > out.txt
grep -q "submitted: 6 runs as array job 101, merge job 102" out.txt
grep -qx -- "--dependency=afterany:101" sbatch.log
[ "$(grep -c -- '--partition=cpu' sbatch.log)" = 2 ]
[ "$(wc -l < slurm/mc.jobs)" = 6 ]
diff -r own/mc slurm/mc
echo "slurm-sweep: the array and the merge give the sweep's own folder"
