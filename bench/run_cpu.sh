#!/usr/bin/env bash
# C1 of TARGETS.md on this machine, in one run: factorjit's CPU backend on the headline case next to a
# 2-read-1-write stream over the same panels (C++, same threads), numpy's one-thread add and pandas.
# Usage: bench/run_cpu.sh [build-dir]   (builds first; prints lines for bench/RESULTS.md)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$B" --target bench_cpu >/dev/null
echo "# $(date -u +%F' '%H:%M) UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
FJ_QUIET=1 "$B/bench_cpu" 50000 1000 2 7
PY=python3; /usr/bin/python3 -c 'import pandas' 2>/dev/null && PY=/usr/bin/python3
"$PY" bench/peers_cpu.py 50000 1000 100
