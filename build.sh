#!/usr/bin/env bash
# factorjit's one entry point on a fresh Debian/Ubuntu machine:
#   ./build.sh demo   install what is missing, build everything, run the rolling-correlation demo
#   ./build.sh test   install what is missing, build everything, run the test suite (ctest)
#   ./build.sh build  install what is missing and build (into ./build)
# Environment:
#   BUILD_DIR      build folder (default build); use one folder per configuration
#   FJ_CMAKE_ARGS  extra CMake arguments, split on spaces, e.g. FJ_CMAKE_ARGS=-DFJ_WITH_CUDA=OFF for the build
#                  a machine without the CUDA toolkit gets (cuda.h not found: no CUDA backend, its tests
#                  compiled out with a message); .ci/run builds and tests both configurations this way:
#                    BUILD_DIR=build-nocuda FJ_CMAKE_ARGS=-DFJ_WITH_CUDA=OFF ./build.sh test
#   JOBS           parallel compile and test jobs (default: all cores)
#   FJ_BACKEND     the demo's backend (auto|cpu|cuda)
# The CUDA toolkit is optional: only cuda.h and nvrtc.h are used at build time (from /usr/local/cuda/include
# or $CUDA_HOME/include); libcuda and NVRTC are loaded at run time.
set -euo pipefail
cd "$(dirname "$0")"
what=${1:-demo}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
read -r -a cmake_args <<< "${FJ_CMAKE_ARGS:-}"

packages=(cmake ninja-build g++ pkg-config llvm-19-dev libfmt-dev doctest-dev
          zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev libcurl4-openssl-dev
          # the Python module (python/, docs/python.md) and its tests: Debian's interpreter, /usr/bin/python3
          pybind11-dev python3-dev python3-numpy python3-pandas python3-pytest python3-dask python3-distributed
          python3-matplotlib)
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

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${cmake_args[@]+"${cmake_args[@]}"} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

case "$what" in
  demo) exec "$BUILD_DIR/rolling_corr" 50000 1000 20 --backend "${FJ_BACKEND:-auto}" ;;
  test) cd "$BUILD_DIR" && exec ctest --output-on-failure -j "$JOBS" ;;
  build) ;;
  *) echo "usage: $0 demo|test|build" >&2; exit 2 ;;
esac
