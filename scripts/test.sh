#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA kernels too when nvcc is found) and runs the
# test suite with ctest. In CI (CI=true) warnings are errors. KVSIM_SANITIZE=1 builds and tests
# an ASan+UBSan tree in build-asan/ instead.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$KVSIM_ROOT"
dir=build
args=()
if [ "${CI:-}" = "true" ]; then args+=(-DKVSIM_WERROR=ON); fi
if [ "${KVSIM_SANITIZE:-0}" = "1" ]; then
  dir=build-asan
  args+=(-DKVSIM_SANITIZE=ON -DKVSIM_ENABLE_CUDA=OFF -DKVSIM_BUILD_BENCH=OFF)
fi
kvsim_build "$dir" all "${args[@]}"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
