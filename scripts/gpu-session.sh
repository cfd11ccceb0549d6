#!/usr/bin/env bash
# One GPU session in one command: build for sm_90, run the gpu-labelled tests, benchmark the
# kernels (bench_kernels --mode gpu, then PyTorch SDPA on the same shapes), validate
# scenarios/validate-small.yaml and scenarios/validate-llama8b-pressure.yaml on the cuda backend
# in bf16 and fp16, export the second one's measured attention latencies and fit them with
# `kvsim calibrate`. Run it from anywhere in the repository on the GPU machine; it needs no
# network. Results go to $OUT (default ./gpu-results) as at most 8 files, the most the device
# tool brings back:
#   session.log  ctest-gpu.log  bench_kernels_gpu.csv  sdpa_gpu.csv  bench_vs_sdpa.csv
#   calibration_gpu.csv (validate --export-calibration, bf16)  validate.tar.gz (the validation
#   runs and the fitted model)  logs.tar.gz (nvidia-smi, build, ctest, bench, sdpa and validate logs)
# Sections are time-boxed (the whole run stays under KVSIM_GPU_BUDGET_S, default 480 s) and a
# failing section does not stop the next; the exit status is 1 when any section failed.
#
#   scripts/gpu-session.sh [--quick]          on the GPU machine (--quick: smaller bench grids)
#   scripts/gpu-session.sh fetch-deps [DIR]   on a Debian 12 machine with apt, beforehand
#
# fetch-deps downloads the Debian 12 packages kvsim builds against (Boost, yaml-cpp, fmt, Eigen,
# nlohmann-json, xxHash, Catch2; about 13 MB) into DIR (default build-gpu-deps, git-ignored).
# When the GPU machine lacks them, this script unpacks them into a private prefix (never into /)
# and configures against it; carry DIR to the machine with the working tree.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS_DIR=${KVSIM_GPU_DEPS_DIR:-$ROOT/build-gpu-deps}
DEB_PACKAGES=(libboost1.74-dev libboost-program-options1.74-dev libboost-program-options1.74.0
              libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 libeigen3-dev nlohmann-json3-dev
              libxxhash-dev libxxhash0 catch2)

if [ "${1:-}" = "fetch-deps" ]; then
  dir=${2:-$DEPS_DIR}
  mkdir -p "$dir" && cd "$dir" || exit 1
  apt-get download "${DEB_PACKAGES[@]}" || exit 1
  echo "gpu-session: $(ls ./*.deb | wc -l) packages in $dir ($(du -sh . | cut -f1)); carry it to the GPU machine"
  exit 0
fi
QUICK=()
[ "${1:-}" = "--quick" ] && QUICK=(--quick)

OUT=${OUT:-$ROOT/gpu-results}
BUILD=${KVSIM_GPU_BUILD_DIR:-$ROOT/build-gpu}
BUDGET_S=${KVSIM_GPU_BUDGET_S:-480}
LOGS=$BUILD/session  # logs that travel back inside logs.tar.gz
mkdir -p "$OUT" "$LOGS"
exec > >(tee -a "$OUT/session.log") 2>&1
TEE_PID=$!
export PATH=$PATH:/usr/local/cuda/bin
START=$(date +%s)
declare -A STATUS
ORDER=()

section() { echo; echo "==================== $1 ($(($(date +%s) - START)) s) ===================="; }
# run_step NAME CAP_S LOG quiet|tee CMD...: runs CMD under `timeout min(CAP_S, time left)`, its
# output appended to LOG (and shown, with tee), and records the outcome for the summary.
run_step() {
  local name=$1 cap=$2 log=$3 mode=$4
  shift 4
  local limit=$((BUDGET_S - ($(date +%s) - START)))
  [ "$cap" -lt "$limit" ] && limit=$cap
  ORDER+=("$name")
  if [ "$limit" -lt 20 ]; then
    echo "gpu-session: no time left for '$name', skipped"
    STATUS[$name]="SKIPPED (out of time)"
    return 1
  fi
  local t0 rc
  t0=$(date +%s)
  if [ "$mode" = tee ]; then
    timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
  else
    timeout --signal=INT --kill-after=10 "$limit" "$@" >> "$log" 2>&1
    rc=$?
  fi
  local dt=$(($(date +%s) - t0))
  case $rc in
    0) STATUS[$name]="ok (${dt} s)" ;;
    124 | 137) STATUS[$name]="TIMED OUT after ${limit} s" ;;
    *) STATUS[$name]="FAILED rc=$rc (${dt} s)" ;;
  esac
  return "$rc"
}

section "environment"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)  kernel: $(uname -r)  cpus: $(nproc)"
  echo "git: $(git -C "$ROOT" rev-parse HEAD 2> /dev/null || echo "unknown (no .git)")"
  nvcc --version 2>&1 | tail -1
  cmake --version 2>&1 | head -1
  c++ --version 2>&1 | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu \
    --format=csv 2>&1
} | tee "$LOGS/nvidia-smi.txt"
{ echo; nvidia-smi -q 2>&1; } >> "$LOGS/nvidia-smi.txt"

section "configure + build (sm_90)"
GENERATOR=(-G Ninja)
command -v ninja > /dev/null || GENERATOR=(-G "Unix Makefiles")
configure() {
  cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DKVSIM_ENABLE_CUDA=ON "$@" >> "$LOGS/configure.log" 2>&1
}
unpack_deps() {  # unpacks every .deb of DEPS_DIR under $1, with dpkg-deb or with ar + tar
  local prefix=$1 deb member z
  mkdir -p "$prefix"
  for deb in "$DEPS_DIR"/*.deb; do
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$deb" "$prefix" || return 1
    else
      member=$(ar t "$deb" | grep '^data\.tar')
      case $member in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
      ar p "$deb" "$member" | tar -x $z -C "$prefix" -f - || return 1
    fi
  done
}
ORDER+=("configure")
STATUS[configure]="FAILED (see configure.log in logs.tar.gz)"
if configure; then
  STATUS[configure]="ok (the machine's libraries)"
elif compgen -G "$DEPS_DIR/*.deb" > /dev/null; then
  echo "configure failed with the machine's libraries: $(grep -m1 -iE 'could not find|not found' "$LOGS/configure.log")"
  echo "retrying against the Debian packages carried in $DEPS_DIR"
  PREFIX=/tmp/kvsim-deps
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
  # Multiarch config folders are listed too, for machines whose CMake does not search lib/<arch>.
  if unpack_deps "$PREFIX" &&
    configure "-DCMAKE_PREFIX_PATH=$PREFIX/usr;$PREFIX/usr/lib/x86_64-linux-gnu/cmake;$PREFIX/usr/lib/cmake" \
      "-DCMAKE_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu"; then
    STATUS[configure]="ok (carried Debian packages)"
    export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
else
  echo "configure failed and $DEPS_DIR holds no packages: run 'scripts/gpu-session.sh fetch-deps'"
  echo "where apt works, then carry that folder to this machine"
fi
tail -n 5 "$LOGS/configure.log"
if [[ ${STATUS[configure]} == ok* ]]; then
  # The kernel targets first: they need none of the simulator, so they still build (and run)
  # when something in core/ or sim/ does not compile.
  run_step "build kernels" 300 "$LOGS/build.log" quiet \
    cmake --build "$BUILD" -j "$(nproc)" --target test_kernels_gpu bench_kernels
  run_step "build validate" 300 "$LOGS/build.log" quiet \
    cmake --build "$BUILD" -j "$(nproc)" --target kvsim test_validate_gpu
  grep -E "error|FAILED" "$LOGS/build.log" | head -20
fi

section "ctest -L gpu"
: > "$OUT/ctest-gpu.log"
run_step "ctest -L gpu" 270 "$OUT/ctest-gpu.log" tee \
  ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 260
cp "$BUILD/Testing/Temporary/LastTest.log" "$LOGS/ctest-LastTest.log" 2> /dev/null
if grep -q "Skipped" "$OUT/ctest-gpu.log"; then  # exit 77: the tests saw no usable device
  STATUS["ctest -L gpu"]="SKIPPED: no usable CUDA device (${STATUS["ctest -L gpu"]})"
fi

section "bench_kernels --mode gpu"
run_step "bench_kernels" 200 "$LOGS/bench_kernels.log" tee \
  "$BUILD/bench/kernels/bench_kernels" --mode gpu "${QUICK[@]}" --csv "$OUT/bench_kernels_gpu.csv"

section "PyTorch SDPA (flash) on contiguous KV, same shapes"
SDPA_ARGS=(--csv "$OUT/sdpa_gpu.csv" "${QUICK[@]}")
[ -s "$OUT/bench_kernels_gpu.csv" ] &&
  SDPA_ARGS+=(--shapes-from "$OUT/bench_kernels_gpu.csv" --join "$OUT/bench_vs_sdpa.csv")
run_step "sdpa_compare" 150 "$LOGS/sdpa_compare.log" tee \
  env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/kernels/sdpa_compare.py" "${SDPA_ARGS[@]}"

section "kvsim validate scenarios/validate-small.yaml --backend cuda"
rm -rf "$LOGS/validate"
for dtype in bf16 fp16; do
  run_step "validate $dtype" 90 "$LOGS/validate.log" tee "$BUILD/kvsim" validate \
    "$ROOT/scenarios/validate-small.yaml" --backend cuda --dtype "$dtype" -o "$LOGS/validate/$dtype"
done

section "kvsim validate scenarios/validate-llama8b-pressure.yaml --backend cuda (+ calibration)"
# Llama-3.1-8B shapes with preemptions and prefix hits; bf16 checks a tenth of the steps and exports
# the measured latencies, fp16 a sample of them.
PRESSURE=$ROOT/scenarios/validate-llama8b-pressure.yaml
run_step "pressure bf16" 150 "$LOGS/validate.log" tee "$BUILD/kvsim" validate "$PRESSURE" \
  --backend cuda --dtype bf16 --sample-prob 0.1 -o "$LOGS/validate/pressure-bf16" \
  --export-calibration "$OUT/calibration_gpu.csv"
run_step "pressure fp16" 90 "$LOGS/validate.log" tee "$BUILD/kvsim" validate "$PRESSURE" \
  --backend cuda --dtype fp16 --sample-prob 0.03 -o "$LOGS/validate/pressure-fp16"
if [ -s "$OUT/calibration_gpu.csv" ]; then
  run_step "calibrate" 30 "$LOGS/validate.log" tee "$BUILD/kvsim" calibrate \
    "$OUT/calibration_gpu.csv" -o "$LOGS/validate/fitted-attention.yaml"
fi
tar -czf "$OUT/validate.tar.gz" -C "$LOGS" validate 2> /dev/null

section "summary"
tar -czf "$OUT/logs.tar.gz" --exclude=session/validate -C "$BUILD" session 2> /dev/null
failed=0
for name in "${ORDER[@]}"; do
  printf '  %-16s %s\n' "$name" "${STATUS[$name]}"
  [[ ${STATUS[$name]} == ok* ]] || failed=1
done
if [ -s "$OUT/bench_kernels_gpu.csv" ]; then
  echo
  echo "ceilings and the worked example (B=64, ctx 4096, 32/8/128), kvsim paged decode:"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    $1 ~ /^ceiling_/ { printf "  %-14s %9.1f GB/s\n", $1, $col["gbps"] }
    $2 == "worked_example" {
      printf "  %-5s bs=%-2s %-10s %-12s %9.1f us %8.1f GB/s %6.1f%% of copy\n", $col["dtype"],
        $col["block_size"], $col["pages"], $col["path"], $col["median_us"], $col["gbps"], $col["pct_copy"] }' \
    "$OUT/bench_kernels_gpu.csv"
fi
[ -s "$OUT/bench_vs_sdpa.csv" ] && grep -A16 "^worked example, kvsim paged vs SDPA" "$LOGS/sdpa_compare.log"
echo
echo "results in $OUT: $(ls "$OUT" | tr '\n' ' ')($(($(date +%s) - START)) s in all)"
exec >&- 2>&-
wait "$TEE_PID"
exit $failed
