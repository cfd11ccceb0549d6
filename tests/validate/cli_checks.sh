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
# Progress goes to stderr only when it is a terminal: none here.
[ ! -s "$work/stderr" ] || { cat "$work/stderr"; fail "bytes on stderr that is not a terminal"; }
grep -q '^validating 240 of 240 steps: every step' "$work/stdout" || fail "the sampling is not announced"
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
expect_2 "zero reference threads" "threads" "$scenario" --threads 0 -o "$work/x"
expect_2 "missing scenario" "missing SCENARIO" --backend cpu
expect_2 "pool bookkeeping over the limit" "num_gpu_blocks_override" "$scenario" \
  --set cache.num_gpu_blocks_override=20000000 -o "$work/x"
if ! "$kvsim" validate "$scenario" --backend cuda -o "$work/probe" --sample-every 100000 --quiet \
     > /dev/null 2> "$work/probe_err"; then
  # No usable GPU here: the cuda backend must be refused as bad input (2), on one line.
  expect_2 "cuda without a device" "cuda" "$scenario" --backend cuda -o "$work/x"
fi
[ ! -e "$work/x" ] || [ -z "$(ls -A "$work/x")" ] || fail "a refused run left files in $work/x"

# No sampling in the scenario: a bounded plan, announced, with the preemption steps among it.
"$kvsim" validate "$scenario" --set validate.sample_every_steps=0 -o "$work/bounded" \
  > "$work/bounded.out" 2> "$work/bounded.err" || { cat "$work/bounded.out" "$work/bounded.err"; fail "bounded run"; }
grep -q '^validating 200 of 240 steps: [0-9]* evenly spread + [1-9][0-9]* with preemptions + [1-9][0-9]* with prefix hits; --sample-every N or --sample-prob P to change$' \
  "$work/bounded.out" || { cat "$work/bounded.out"; fail "the bounded plan is not announced"; }
grep -q ',preemption$' "$work/bounded/validate-small/validation.csv" || fail "no preemption step in validation.csv"
[ ! -s "$work/bounded.err" ] || { cat "$work/bounded.err"; fail "bytes on stderr that is not a terminal"; }

# A sweep scenario: its base point is validated, and the output says so.
"$kvsim" validate "$(dirname "$scenario")/block-size-sweep.yaml" --sample-every 1000000 \
  -o "$work/sweep" > "$work/sweep.out" 2>&1 || { cat "$work/sweep.out"; fail "sweep scenario"; }
grep -q 'block-size-sweep.yaml has a sweep of 8 points; validating its base point' \
  "$work/sweep.out" || { cat "$work/sweep.out"; fail "the sweep is not mentioned"; }

# On a terminal (script(1) gives the run a pty): the progress line is drawn and erased; --quiet
# draws nothing. (Skipped where no pty can be had.)
if command -v script > /dev/null 2>&1 && script -qec true /dev/null > /dev/null 2>&1; then
  script -qec "'$kvsim' validate '$scenario' --sample-every 2 -o '$work/tty'" "$work/tty.log" \
    > /dev/null 2>&1 || fail "run on a terminal"
  grep -q "$(printf '\033\\[K')" "$work/tty.log" || { cat -v "$work/tty.log"; fail "no progress line on a terminal"; }
  script -qec "'$kvsim' validate '$scenario' --sample-every 2 -o '$work/tty-quiet' --quiet" "$work/quiet.log" \
    > /dev/null 2>&1 || fail "quiet run on a terminal"
  ! grep -q "$(printf '\033')" "$work/quiet.log" || { cat -v "$work/quiet.log"; fail "progress with --quiet"; }
  echo "ok: progress on a terminal only, not with --quiet"
fi
echo "all cli checks passed"
