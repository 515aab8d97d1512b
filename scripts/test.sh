#!/usr/bin/env bash
# Sets up, builds, and runs every test (CTest). Extra arguments go to ctest, e.g. -L fast.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd "${CHATBENCH_BUILD_DIR:-build}"
QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 900 "$@"
