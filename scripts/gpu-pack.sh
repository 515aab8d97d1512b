#!/usr/bin/env bash
# Prepares the headless CLI for a GPU machine that has no package registry and no Qt, so that
# scripts/gpu-report.sh spends that machine's minutes on the GPU, not on compiling.
#
# Builds chatbench-cli here without the window, the Qt tests or Keras import (HDF5 would drag in
# libcurl and its many dependencies) into build-gpu/, then fills .gpu/ (ignored by git):
#   .gpu/bin/chatbench-cli    the stripped binary, linked against this machine's torch wheel
#   .gpu/lib/                 the shared libraries it needs that are neither glibc nor torch's
#   .gpu/lib-fallback/        this machine's libstdc++ and libgcc_s, used only if the target's are older
#   .gpu/MANIFEST             what it was built from
# On the GPU machine the binary runs against that machine's own torch (the same version: the
# manifest names it; gpu-report.sh checks) through LD_LIBRARY_PATH.
#
# Why a carried binary and not a build there: a cold build of the engine takes minutes of a
# 15-minute device budget, and needs CMake packages (nlohmann-json, CLI11, yaml-cpp, zlib
# headers) that machine lacks; the binary needs only libyaml-cpp beside torch and glibc.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${CHATBENCH_CACHE:-$HOME/.cache/chatbench}"
export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}"
BUILD="${CHATBENCH_GPU_BUILD_DIR:-build-gpu}"
PY="${CHATBENCH_PYTHON:-$CACHE/venv/bin/python}"

scripts/setup.sh
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHATBENCH_GUI=OFF -DCHATBENCH_TESTS=OFF \
    -DCHATBENCH_KERAS=OFF -DCHATBENCH_PYTHON="$PY" >/dev/null
fi
cmake --build "$BUILD" --target chatbench-cli

rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/lib-fallback
strip -o .gpu/bin/chatbench-cli "$BUILD/app/chatbench-cli"
# Every library the binary loads from the system that is not glibc's own, torch's or CUDA's.
ldd "$BUILD/app/chatbench-cli" | awk '/=> \//{print $3}' | while read -r lib; do
  base=$(basename "$lib")
  case "$base" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libutil.so*) ;;   # glibc
    libstdc++.so*|libgcc_s.so*) cp -L "$lib" .gpu/lib-fallback/ ;;
    libtorch*|libc10*|libcudart*|libcuda.so*|libnv*|libcublas*|libcudnn*|libgomp*) ;; # torch's wheel / driver
    *) case "$lib" in */site-packages/*|*/cuda*/*) ;; *) cp -L "$lib" .gpu/lib/ ;; esac ;;
  esac
done
{
  echo "torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "libraries: $(ls .gpu/lib | tr '\n' ' ')"
} > .gpu/MANIFEST
du -sh .gpu | awk '{print "gpu-pack: .gpu/ holds " $1}'
cat .gpu/MANIFEST
