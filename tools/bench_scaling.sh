#!/usr/bin/env bash
# The thread-scaling run, for a machine with many cores: builds the
# optimized benchmark, runs every backend at each thread count, and writes
# the table, the JSON and the charts into one folder.
#
#   tools/bench_scaling.sh [OUT_DIR]        (default: bench-scaling/)
#
# Environment: THREADS (default "1 2 4 8 16"), SCALE (default 0.25),
# REPEATS (default 5), WORKLOADS (default: all), BACKENDS (default: all).
# Needs what tools/setup.sh installs (the peers, matplotlib, PostgreSQL for
# the db_http rows; anything missing is skipped with the reason printed).
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(realpath -m "${1:-bench-scaling}")
mkdir -p "$out"
read -r -a threads <<<"${THREADS:-1 2 4 8 16}"
read -r -a backends <<<"${BACKENDS:-all}"
workloads=()
[ -n "${WORKLOADS:-}" ] && read -r -a workloads <<<"$WORKLOADS"

echo "machine: $(nproc) CPUs, $(uname -m); output in $out"
bazel build -c opt //pyext:bench
bazel run -c opt //pyext:bench -- \
  --threads "${threads[@]}" --scale "${SCALE:-0.25}" --repeats "${REPEATS:-5}" \
  --backends "${backends[@]}" ${workloads[@]:+--workloads "${workloads[@]}"} \
  --json "$out/bench.json" --plot "$out/charts" | tee "$out/table.txt"
