#!/usr/bin/env bash
# factorjit's one entry point on a fresh Debian/Ubuntu machine:
#   ./build.sh demo   install what is missing, build everything, run the rolling-correlation demo
#   ./build.sh test   install what is missing, build everything, run the test suite (ctest)
#   ./build.sh build  install what is missing and build (into ./build)
# Environment: BUILD_DIR (default build), JOBS (default: all cores), FJ_BACKEND for the demo (auto|cpu|cuda).
set -euo pipefail
cd "$(dirname "$0")"
what=${1:-demo}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

packages=(cmake ninja-build g++ pkg-config llvm-19-dev libfmt-dev doctest-dev
          zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev libcurl4-openssl-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

case "$what" in
  demo) exec "$BUILD_DIR/rolling_corr" 50000 1000 20 --backend "${FJ_BACKEND:-auto}" ;;
  test) cd "$BUILD_DIR" && exec ctest --output-on-failure -j "$JOBS" ;;
  build) ;;
  *) echo "usage: $0 demo|test|build" >&2; exit 2 ;;
esac
