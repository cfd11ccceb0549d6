#!/usr/bin/env bash
# Fast-forward identity: run SCENARIO with fast-forward (the default) and with
# engine.fast_forward=false, then compare every output file of every run folder byte for byte.
#   ff_identity.sh KVSIM SCENARIO WORK_DIR EXPECTED [kvsim args for the second run...]
# EXPECTED 0: the folders must be identical; 1: they must differ (the planted check that the
# comparison can fail). A `sweep:` file runs through `kvsim sweep --jobs 1`.
set -uo pipefail
kvsim=$1 scenario=$2 work=$3 expected=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
cmd=(run "$scenario" --quiet)
grep -q '^sweep:' "$scenario" && cmd=(sweep "$scenario" --jobs 1)
"$kvsim" "${cmd[@]}" -o "$work/on" --set engine.fast_forward=true >/dev/null 2>&1 ||
  { echo "ff_identity.sh: the run failed"; exit 2; }
"$kvsim" "${cmd[@]}" -o "$work/off" --set engine.fast_forward=false "$@" >/dev/null 2>&1 ||
  { echo "ff_identity.sh: the run without fast-forward failed"; exit 2; }
# A sweep's sweep.json lists the command line's --set values: the one setting that differs.
find "$work/off" -name sweep.json -exec sed -i 's/engine\.fast_forward=false/engine.fast_forward=true/' {} +
files=$(cd "$work/on" && find . -type f | wc -l)
[ "$files" -gt 0 ] || { echo "ff_identity.sh: no output files"; exit 2; }
if diff -r "$work/on" "$work/off" >"$work/diff.txt"; then
  [ "$expected" = 0 ] && { echo "ff_identity.sh: $files files identical"; exit 0; }
  echo "ff_identity.sh: expected a difference, the $files files are identical"
  exit 1
fi
[ "$expected" = 1 ] && { echo "ff_identity.sh: the planted difference was caught"; exit 0; }
echo "ff_identity.sh: the runs differ:"
head -40 "$work/diff.txt"
exit 1
