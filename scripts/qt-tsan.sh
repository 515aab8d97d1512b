#!/usr/bin/env bash
# Builds Qt 6.4.2 (qtbase: Core, Gui, Widgets, PrintSupport, Test and the offscreen platform) with
# ThreadSanitizer, so the window's tests can run under TSan with Qt's own locks visible
# (`cmake --preset tsan-ui`). Debian's Qt is not instrumented: every handoff through its event
# queue reads as a race. The same version as Debian's, from Debian's source archive (checked
# against the .dsc's SHA-256), installed under the cache, never in the checkout. Idempotent: a
# finished install is kept. About 40 minutes on 2 cores; neither README command runs this.
# Usage: scripts/qt-tsan.sh            prints the install prefix on its last line
set -euo pipefail
CACHE="${CHATBENCH_CACHE:-$HOME/.cache/chatbench}"
VERSION=6.4.2
DEBIAN_REVISION=6.4.2+dfsg-10
PREFIX="$CACHE/qt-tsan/$VERSION"
WORK="$CACHE/qt-tsan/work"
POOL=http://deb.debian.org/debian/pool/main/q/qt6-base
if [ -f "$PREFIX/.complete" ]; then
  echo "$PREFIX"
  exit 0
fi
mkdir -p "$WORK"
cd "$WORK"
DSC="qt6-base_$DEBIAN_REVISION.dsc"
ORIG="qt6-base_$VERSION+dfsg.orig.tar.xz"
[ -f "$DSC" ] || curl -fsSL -o "$DSC" "$POOL/$DSC"
if [ ! -f "$ORIG" ]; then
  curl -fsSL -o "$ORIG.part" "$POOL/$ORIG"
  mv "$ORIG.part" "$ORIG"
fi
want=$(awk -v f="$ORIG" '/^Checksums-Sha256:/ {s = 1; next} /^[^ ]/ {s = 0} s && $3 == f {print $1}' "$DSC")
got=$(sha256sum "$ORIG" | cut -d' ' -f1)
if [ -z "$want" ] || [ "$want" != "$got" ]; then
  echo "qt-tsan: $WORK/$ORIG does not match the SHA-256 in $DSC; remove both and run again" >&2
  exit 1
fi
SRC="$WORK/qtbase-everywhere-src-$VERSION"
[ -d "$SRC" ] || tar -xf "$ORIG"
[ -d "$SRC" ] || SRC=$(find "$WORK" -maxdepth 1 -type d -name 'qtbase*' | head -1)
cmake -G Ninja -S "$SRC" -B "$WORK/build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DFEATURE_sanitize_thread=ON \
  -DQT_BUILD_EXAMPLES=OFF -DQT_BUILD_TESTS=OFF -DQT_BUILD_BENCHMARKS=OFF \
  -DFEATURE_dbus=OFF -DFEATURE_opengl=OFF -DFEATURE_vulkan=OFF -DFEATURE_xcb=OFF -DFEATURE_xlib=OFF \
  -DFEATURE_eglfs=OFF -DFEATURE_linuxfb=OFF -DFEATURE_vnc=OFF -DFEATURE_evdev=OFF -DFEATURE_libinput=OFF \
  -DFEATURE_tslib=OFF -DFEATURE_mtdev=OFF -DFEATURE_sql=OFF -DFEATURE_network=OFF -DFEATURE_icu=OFF \
  -DFEATURE_glib=OFF -DFEATURE_cups=OFF -DFEATURE_system_pcre2=OFF -DFEATURE_system_harfbuzz=OFF \
  -DFEATURE_system_doubleconversion=OFF -DFEATURE_fontconfig=ON >"$WORK/configure.log"
nice -n 5 cmake --build "$WORK/build" >"$WORK/build.log"
cmake --install "$WORK/build" >"$WORK/install.log"
touch "$PREFIX/.complete"
echo "$PREFIX"
