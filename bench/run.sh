#!/usr/bin/env bash
# Runs every benchmark program of a build (default: build/), three repetitions, medians only.
set -euo pipefail
build=${1:-build}
for b in "$build"/bench/bench_*; do
  [[ -x "$b" ]] || continue
  echo "== $(basename "$b")"
  "$b" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_display_aggregates_only=true
done
