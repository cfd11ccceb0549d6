# Shared by scripts/run-default.sh and scripts/test.sh: install missing packages, configure, build.
# Usage: kvsim_build BUILD_DIR TARGET [extra cmake args...]   (TARGET "all" builds everything)
set -euo pipefail
KVSIM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

kvsim_build() {
  local dir=$1 target=$2
  shift 2
  "$KVSIM_ROOT/scripts/install-deps.sh"
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S "$KVSIM_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  cmake --build "$dir" -j "$jobs" --target "$target"
}
