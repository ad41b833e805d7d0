#!/usr/bin/env bash
# Runs libFuzzer targets built by `make fuzz` (docs/fuzzing.md), one after another:
#   bash scripts/fuzz.sh BUILD SECONDS TARGET...
# Each starts from its committed seed corpus fuzz/corpus/T (and what earlier runs found, kept in
# BUILD/corpus/T), with fuzz/T.dict where there is one, and runs SECONDS seconds under the limits
# below: an input slower than 10 s is a hang, a process above 2 GiB or a single allocation above
# 512 MiB a failure. A crash's input lands in BUILD/artifacts/ and ends the run non-zero. One
# summary line per target: executions, coverage (edges), features, corpus size.
set -euo pipefail
build="$(cd "$1" && pwd)"
seconds="$2"
shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$build/artifacts"
status=0
for t in "$@"; do
  exe="$build/fuzz/fuzz_$t"
  [[ -x "$exe" ]] || { echo "fuzz.sh: no $exe (make fuzz builds it)" >&2; exit 1; }
  mkdir -p "$build/corpus/$t"
  dict=()
  [[ -f "$root/fuzz/$t.dict" ]] && dict=(-dict="$root/fuzz/$t.dict")
  log="$build/fuzz_$t.log"
  rc=0
  # The regression inputs are read too, under the same limits (a fixed bug must stay fixed).
  regressions=()
  [[ -d "$root/fuzz/regressions/$t" ]] && regressions=("$root/fuzz/regressions/$t")
  (cd "$build/artifacts" && "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -print_final_stats=1 "${dict[@]}" "$build/corpus/$t" "$root/fuzz/corpus/$t" "${regressions[@]}") > "$log" 2>&1 || rc=$?
  done_line="$(grep -E '^#[0-9]+.*DONE' "$log" | tail -1 || true)"
  if [[ $rc -ne 0 ]]; then
    echo "fuzz $t: FAILED (exit $rc); $log says:" >&2
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" >&2 || tail -20 "$log" >&2
    status=1
  else
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    echo "fuzz $t: $seconds s, $execs executions, ${done_line#*DONE}"
  fi
done
exit $status
