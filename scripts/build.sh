#!/usr/bin/env bash
# Sets up (scripts/setup.sh), configures and builds into build/ (override with CHATBENCH_BUILD_DIR).
# Extra arguments go to CMake, e.g. scripts/build.sh -DCHATBENCH_GUI=OFF.
# CHATBENCH_SKIP_SETUP=1 skips the setup step, for machines without a package registry whose
# dependencies are already in place (CMAKE_PREFIX_PATH may point at them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${CHATBENCH_SKIP_SETUP:-0}" != 1 ]; then
  scripts/setup.sh
fi
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
