#!/usr/bin/env bash
# The dependency rule of ARCHITECTURE.md, checked on every #include of the tree: arrows point down.
#   cli -> validate -> kernels;  cli, validate -> sim -> core;  kernels knows nothing of core.
# Inside core/ and sim/, each room may include only the rooms listed for it below.
# Usage: check_includes.sh SOURCE_DIR   (exit 1 and one line per violation)
#        check_includes.sh --self-test   (plants two upward includes in a scratch tree: both caught)
set -u
if [ "${1:-}" = "--self-test" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/core/v1" "$tmp/sim/engine" "$tmp/cli"
  printf '#include "cli/commands.h"\n' > "$tmp/core/v1/planted.h"
  printf '#include "validate/harness.h"\n#include "sim/common/errors.h"\n' > "$tmp/sim/engine/planted.cpp"
  printf '#include "sim/engine/simulator.h"\n' > "$tmp/cli/fine.cpp"
  out=$("$0" "$tmp"); rc=$?
  n=$(printf '%s\n' "$out" | grep -c 'may include only')
  if [ $rc -eq 1 ] && [ "$n" -eq 2 ]; then echo "self-test: both planted includes caught"; exit 0; fi
  echo "self-test failed (rc=$rc, $n violations):"; printf '%s\n' "$out"; exit 1
fi
root=${1:?source dir}
cd "$root" || exit 2
fail=0
# room => the prefixes its files may include (besides system and third-party headers)
declare -A allowed=(
  [core/common]="core/common/"
  [core/v1]="core/common/ core/v1/ core/engine_api.h"
  [core/v0]="core/common/ core/v0/ core/engine_api.h"
  [core/contiguous]="core/common/ core/contiguous/ core/engine_api.h"
  [core]="core/"
  [sim/common]="core/ sim/common/"
  [sim/workload]="core/ sim/common/ sim/workload/"
  [sim/config]="core/ sim/common/ sim/workload/ sim/config/"
  [sim/engine]="core/ sim/common/ sim/workload/ sim/config/ sim/engine/"
  [sim/metrics]="core/ sim/common/ sim/config/ sim/engine/ sim/metrics/"
  [sim/replay]="core/ sim/common/ sim/replay/"
  [sim/check]="core/ sim/common/ sim/check/"
  [sim/cluster]="core/ sim/common/ sim/workload/ sim/config/ sim/engine/ sim/metrics/ sim/cluster/"
  [sim/run]="core/ sim/"
  [kernels]="kernels/"
  [validate]="core/ sim/ kernels/ validate/"
  [cli]="core/ sim/ kernels/ validate/ cli/"
)
room_of() {
  local f=$1 r
  for r in core/common core/v1 core/v0 core/contiguous sim/common sim/workload sim/config \
           sim/engine sim/metrics sim/replay sim/check sim/cluster sim/run; do
    [[ $f == $r/* ]] && { echo "$r"; return; }
  done
  echo "${f%%/*}"
}
while IFS= read -r f; do
  room=$(room_of "$f")
  [[ -n ${allowed[$room]+x} ]] || { echo "$f: room '$room' has no rule in tests/arch/check_includes.sh"; fail=1; continue; }
  while IFS= read -r line; do
    inc=${line#*\"}; inc=${inc%%\"*}
    [[ $inc == */* ]] || continue          # a header beside the file
    top=${inc%%/*}
    case $top in core|sim|kernels|validate|cli) ;; *) continue ;; esac
    ok=0
    for p in ${allowed[$room]}; do [[ $inc == "$p"* ]] && { ok=1; break; }; done
    [[ $ok == 1 ]] || { echo "$f includes \"$inc\": $room may include only: ${allowed[$room]}"; fail=1; }
  done < <(grep -E '^\s*#\s*include\s+"' "$f")
done < <(find core sim kernels validate cli \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
exit $fail
