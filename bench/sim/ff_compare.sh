#!/usr/bin/env bash
# Fast-forward on against off, side by side (issue #35): each scenario run ROUNDS times each way,
# alternating, CPU time (user + sys) of the kvsim process, best of the rounds; the two run folders
# of each scenario are compared byte for byte. Prints a markdown table.
#   bench/sim/ff_compare.sh KVSIM ROUNDS SCENARIO[@--set k=v] ...
# With BASE=OLD_KVSIM in the environment the second column is that binary's run as it stands
# (before against after: both with their default fast-forward) instead of fast-forward off.
set -euo pipefail
kvsim=$1 rounds=$2
base=${BASE:-}
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu() {  # cpu SECONDS-FILE BINARY ARGS...: runs BINARY ARGS, appends its user+sys seconds
  local out=$1 bin=$2
  shift 2
  /usr/bin/time -f "%U %S" -o "$work/t" "$bin" run "$@" --quiet >/dev/null
  awk '{printf "%.3f\n", $1 + $2}' "$work/t" >>"$out"
}
other="CPU s off (best)"
[ -n "$base" ] && other="CPU s before (best)"
echo "| scenario | steps | fast-forwarded | CPU s on (best) | $other | speed-up | identical |"
echo "|---|---:|---:|---:|---:|---:|---|"
for spec in "$@"; do
  scenario=${spec%%@*}
  sets=()
  [ "$spec" != "$scenario" ] && read -r -a sets <<<"${spec#*@}"
  rm -f "$work/on" "$work/off"
  for ((i = 0; i < rounds; i++)); do
    cpu "$work/on" "$kvsim" "$scenario" "${sets[@]}" -o "$work/run-on" \
      --set engine.fast_forward=true
    if [ -n "$base" ]; then
      cpu "$work/off" "$base" "$scenario" "${sets[@]}" -o "$work/run-off"
    else
      cpu "$work/off" "$kvsim" "$scenario" "${sets[@]}" -o "$work/run-off" \
        --set engine.fast_forward=false
    fi
  done
  same=no
  diff -r "$work/run-on" "$work/run-off" >/dev/null && same=yes
  line=$("$kvsim" run "$scenario" "${sets[@]}" -o "$work/run-x" | grep -E "steps" | tr '\n' ' ')
  steps=$(sed -n 's/.* \([0-9]*\) steps,.*/\1/p' <<<"$line")
  ff=$(sed -n 's/.* \([0-9]*\) of them advanced.*/\1/p' <<<"$line")
  on=$(sort -n "$work/on" | head -1) off=$(sort -n "$work/off" | head -1)
  rm -rf "$work"/run-*
  printf "| %s %s | %s | %s | %s | %s | %.2fx | %s |\n" "$scenario" "${sets[*]:-}" "$steps" \
    "${ff:-0}" "$on" "$off" "$(echo "$off / $on" | bc -l)" "$same"
done
