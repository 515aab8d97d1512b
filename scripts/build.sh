#!/usr/bin/env bash
# Sets up (scripts/setup.sh), configures and builds into build/ (override with CHATBENCH_BUILD_DIR).
# Extra arguments go to CMake, e.g. scripts/build.sh -DCHATBENCH_GUI=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD="${CHATBENCH_BUILD_DIR:-build}"
CACHE="${CHATBENCH_CACHE:-$HOME/.cache/chatbench}"
export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}"
GUI="${CHATBENCH_GUI:-ON}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHATBENCH_GUI="$GUI" \
    -DCHATBENCH_PYTHON="$CACHE/venv/bin/python" "$@" >/dev/null
elif [ $# -gt 0 ]; then
  cmake "$BUILD" "$@" >/dev/null
fi
cmake --build "$BUILD"
