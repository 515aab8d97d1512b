#!/usr/bin/env bash
# Installs what chatbench needs and is missing, nothing else: Debian packages and a Python
# virtual environment holding the pinned LibTorch wheel, cached outside the checkout.
# Safe to run again; a second run only checks.
set -euo pipefail

TORCH_VERSION="${CHATBENCH_TORCH_VERSION:-2.11.0}"
CACHE="${CHATBENCH_CACHE:-$HOME/.cache/chatbench}"
VENV="$CACHE/venv"

PACKAGES=(
  cmake ninja-build ccache g++ pkg-config
  qt6-base-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libhdf5-dev libzip-dev zlib1g-dev
  xvfb xauth fonts-dejavu-core locales
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! ls -d "$VENV"/lib/python3*/site-packages/torch-"$TORCH_VERSION".dist-info >/dev/null 2>&1; then
  echo "setup: installing torch $TORCH_VERSION (LibTorch, CUDA build) into $VENV"
  mkdir -p "$CACHE"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --progress-bar off "torch==$TORCH_VERSION"
fi
echo "setup: ok (torch $TORCH_VERSION in $VENV)"
