#!/bin/sh
# kvsim validate from the command line: the CI scenario passes on the cpu backend and writes a
# non-empty validation.csv; bad input exits 2 with a one-line error.
# usage: cli_checks.sh KVSIM SCENARIO WORKDIR
set -u
kvsim=$1 scenario=$2 work=$3
rm -rf "$work" && mkdir -p "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

"$kvsim" validate "$scenario" --backend cpu -o "$work/out" --export-calibration "$work/cal.csv" \
  > "$work/stdout" 2> "$work/stderr" || { cat "$work/stdout" "$work/stderr"; fail "clean run exited $?"; }
cat "$work/stdout"
csv="$work/out/validate-small/validation.csv"
[ "$(wc -l < "$csv")" -gt 1 ] || fail "validation.csv has no rows"
grep -q '"pass": true' "$work/out/validate-small/validation.json" || fail "validation.json does not pass"
[ -s "$work/out/validate-small/summary.json" ] || fail "no summary.json next to validation.csv"
"$kvsim" calibrate "$work/cal.csv" -o "$work/fit.yaml" > /dev/null || fail "kvsim calibrate rejects the export"

# expect_2 NAME PATTERN ARGS...: exit status 2 and a one-line error matching PATTERN.
expect_2() {
  name=$1 pattern=$2
  shift 2
  "$kvsim" validate "$@" > "$work/o" 2> "$work/e"
  rc=$?
  [ $rc -eq 2 ] || { cat "$work/o" "$work/e"; fail "$name: exit $rc, want 2"; }
  [ "$(wc -l < "$work/e")" -eq 1 ] || { cat "$work/e"; fail "$name: error is not one line"; }
  grep -q -- "$pattern" "$work/e" || { cat "$work/e"; fail "$name: error does not say '$pattern'"; }
  echo "ok: $name -> $(cat "$work/e")"
}
expect_2 "unknown backend" "unknown kernel backend 'tpu'" "$scenario" --backend tpu -o "$work/x"
expect_2 "unknown flag" "unknown option '--sample-evry'" "$scenario" --sample-evry 3 -o "$work/x"
expect_2 "both samplings" "not both" "$scenario" --sample-every 2 --sample-prob 0.5 -o "$work/x"
expect_2 "bad probability" "sample-prob" "$scenario" --sample-prob 1.5 -o "$work/x"
expect_2 "bad dtype" "unknown dtype 'int8'" "$scenario" --dtype int8 -o "$work/x"
expect_2 "missing scenario" "missing SCENARIO" --backend cpu
expect_2 "pool over the limit" "num_gpu_blocks_override" "$scenario" \
  --set cache.num_gpu_blocks_override=2000000 --set model.head_dim=256 -o "$work/x"
if ! "$kvsim" validate "$scenario" --backend cuda -o "$work/probe" --sample-every 100000 --quiet \
     > /dev/null 2> "$work/probe_err"; then
  # No usable GPU here: the cuda backend must be refused as bad input (2), on one line.
  expect_2 "cuda without a device" "cuda" "$scenario" --backend cuda -o "$work/x"
fi
[ ! -e "$work/x" ] || [ -z "$(ls -A "$work/x")" ] || fail "a refused run left files in $work/x"
echo "all cli checks passed"
