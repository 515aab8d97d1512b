#!/usr/bin/env bash
# Runs chatbench, the PyTorch-Python peer, (with --bf16) chatbench in bf16 and (with --keras) the
# Keras recipe side by side on a corpus and prints the table.
# Usage: bench/peers/run.sh CORPUS [--keras] [--bf16] [compare.py options...]
# The peers need PyYAML (added to chatbench's venv); --keras also creates a TensorFlow CPU venv
# under the cache the first time (about 600 MB). Neither README command runs this.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CHATBENCH_CACHE:-$HOME/.cache/chatbench}"
VENV="$CACHE/venv"
KERAS_VENV="$CACHE/keras-venv"
[ $# -ge 1 ] || { echo "usage: bench/peers/run.sh CORPUS [--keras] [--bf16] [--epochs N] [--rounds N] [--out FILE]" >&2; exit 2; }
CORPUS="$1"; shift
KERAS=()
ARGS=()
for a in "$@"; do
  if [ "$a" = "--keras" ]; then KERAS=(--keras "$KERAS_VENV/bin/python"); else ARGS+=("$a"); fi
done
scripts/build.sh >/dev/null
"$VENV/bin/python" -c "import yaml" 2>/dev/null || "$VENV/bin/pip" install -q pyyaml
if [ ${#KERAS[@]} -gt 0 ] && ! "$KERAS_VENV/bin/python" -c "import tensorflow, yaml" 2>/dev/null; then
  echo "peers: installing TensorFlow (CPU) into $KERAS_VENV" >&2
  python3 -m venv "$KERAS_VENV"
  "$KERAS_VENV/bin/pip" install -q --progress-bar off tensorflow-cpu pyyaml
fi
exec "$VENV/bin/python" bench/peers/compare.py --corpus "$CORPUS" --python "$VENV/bin/python" "${KERAS[@]}" "${ARGS[@]}"
