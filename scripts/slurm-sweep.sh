#!/usr/bin/env bash
# A kvsim sweep on a Slurm cluster: one array task per run of the sweep, then one job that merges
# them into the sweep's sweep.csv once every task has ended.
#
#   scripts/slurm-sweep.sh SCENARIO.yaml OUT_DIR [kvsim sweep flags: --set k=v, --seed N ...]
#
# runs `kvsim sweep SCENARIO.yaml -o OUT_DIR --emit-jobs OUT_DIR/<scenario>.jobs` (one `kvsim run`
# command per line, each starting with a cd to this directory; OUT_DIR/<name>/sweep.json lists
# the points), then submits
#   sbatch --array=1-N[%MAX] slurm-sweep.sh task JOBS          (task i runs line i of JOBS)
#   sbatch --dependency=afterany:ARRAY slurm-sweep.sh merge KVSIM SWEEP_DIR
# The runs write into OUT_DIR/<name>/, so OUT_DIR must be on a file system the nodes share. Without
# one, copy each node's run folders back and gather them with
# `kvsim merge FOLDER... --into OUT_DIR/<name>` (the same sweep.csv, byte for byte).
# Environment: KVSIM (default: build/kvsim beside this script's folder), SBATCH_FLAGS (more sbatch
# flags for both jobs, e.g. "--partition=cpu --time=01:00:00"), KVSIM_SLURM_MAX_RUNNING (the
# array's %MAX: at most this many tasks at once). Slurm logs go to OUT_DIR/slurm-logs/.
# The array has one task per run: Slurm's MaxArraySize (1001 by default) bounds a sweep's size.
set -euo pipefail

case "${1:-}" in
  task)  # inside the array: run line SLURM_ARRAY_TASK_ID of the jobs file
    line=$(sed -n "${SLURM_ARRAY_TASK_ID:?not in a Slurm array task}p" "$2")
    [ -n "$line" ] || { echo "slurm-sweep: $2 has no line ${SLURM_ARRAY_TASK_ID}" >&2; exit 2; }
    exec bash -c "$line"
    ;;
  merge)  # after the array: gather the runs into sweep.csv
    exec "$2" merge "$3"
    ;;
  "" | -h | --help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

[ $# -ge 2 ] || { echo "usage: $0 SCENARIO.yaml OUT_DIR [kvsim sweep flags]" >&2; exit 2; }
scenario=$1 out=$2
shift 2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kvsim=${KVSIM:-$root/build/kvsim}
kvsim=$(cd "$(dirname "$kvsim")" && pwd)/$(basename "$kvsim")
[ -x "$kvsim" ] || { echo "slurm-sweep: $kvsim: no kvsim executable (set KVSIM)" >&2; exit 2; }
mkdir -p "$out/slurm-logs"
out=$(cd "$out" && pwd)
jobs=$out/$(basename "$scenario" .yaml).jobs
"$kvsim" sweep "$scenario" -o "$out" --emit-jobs "$jobs" "$@" >&2
n=$(wc -l < "$jobs")
# The sweep folder, from the first command's -o (every line has the same).
sweep_dir=$(head -n 1 "$jobs" | sed -n "s/.* '-o' '\([^']*\)' .*/\1/p")
[ -n "$sweep_dir" ] || { echo "slurm-sweep: no -o in $jobs" >&2; exit 2; }

read -r -a extra <<< "${SBATCH_FLAGS:-}"
array="1-$n${KVSIM_SLURM_MAX_RUNNING:+%$KVSIM_SLURM_MAX_RUNNING}"
array_id=$(sbatch --parsable "${extra[@]}" --job-name=kvsim-sweep --array="$array" \
  --output="$out/slurm-logs/%A_%a.out" "$0" task "$jobs")
array_id=${array_id%%;*}
merge_id=$(sbatch --parsable "${extra[@]}" --job-name=kvsim-merge \
  --dependency="afterany:$array_id" --output="$out/slurm-logs/%j-merge.out" \
  "$0" merge "$kvsim" "$sweep_dir")
echo "submitted: $n runs as array job $array_id, merge job ${merge_id%%;*} -> $sweep_dir/sweep.csv"
