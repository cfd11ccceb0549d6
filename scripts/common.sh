# Shared by scripts/run-default.sh and scripts/test.sh: install missing packages, configure, build.
# Usage: kvsim_build BUILD_DIR [extra cmake args...]
set -euo pipefail
KVSIM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

kvsim_build() {
  local dir=$1
  shift
  "$KVSIM_ROOT/scripts/install-deps.sh"
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S "$KVSIM_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  cmake --build "$dir" -j "$jobs"
}
