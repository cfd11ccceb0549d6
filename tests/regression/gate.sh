#!/usr/bin/env bash
# One regression gate: run SCENARIO, then `kvsim check` it against its baseline
# (scenarios/baselines/<name>.yaml, <name> = the scenario's `name:`).
#   gate.sh KVSIM SCENARIO BASELINE_DIR WORK_DIR EXPECTED_EXIT [kvsim run args...]
# Exits 0 when `kvsim check` exits with EXPECTED_EXIT (0: must pass; 1: must be caught).
set -uo pipefail
kvsim=$1 scenario=$2 baselines=$3 work=$4 expected=$5
shift 5
name=$(sed -n 's/^name:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$scenario" | head -n1)
[ -n "$name" ] || { echo "gate.sh: no name: in $scenario"; exit 2; }
rm -rf "$work" && mkdir -p "$work"
"$kvsim" run "$scenario" -o "$work" --quiet "$@" || { echo "gate.sh: kvsim run failed"; exit 2; }
"$kvsim" check "$work/$name" --baseline "$baselines/$name.yaml"
rc=$?
if [ "$rc" -ne "$expected" ]; then
  echo "gate.sh: kvsim check exited $rc, expected $expected"
  exit 1
fi
echo "gate.sh: kvsim check exited $rc as expected"
