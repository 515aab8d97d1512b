#!/usr/bin/env bash
# Sets up, builds, and opens the workbench window on the bundled corpus (or the last one used).
# Extra arguments go to chatbench, e.g. --corpus PATH or --screenshot DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
APP="${CHATBENCH_BUILD_DIR:-build}/app/chatbench"
if [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  echo "run.sh: no display found. Use 'xvfb-run -a scripts/run.sh --screenshot shots' for screenshots," >&2
  echo "        or scripts/demo.sh for the same work in the terminal." >&2
  exit 1
fi
exec "$APP" "$@"
