#!/usr/bin/env bash
# Training on a corpus larger than memory (the reliability issue): tokenization streams the corpus
# into a memory-mapped token cache, and training reads windows from the mapping, all inside a
# cgroup whose memory limit is a quarter (or less) of the corpus.
#
#   bench/bigger_than_memory.sh [BUILD_DIR]      (env: LIMIT_MIB=64 FACTOR=4 TOKENIZER=char|byte-bpe)
#
# Needs root (a cgroup v1 memory controller at /sys/fs/cgroup/memory, as on this sandbox). The
# corpus is copies of tests/fixtures/tinyshakespeare_100k.txt, each with its copy number appended to
# every line (so the copies differ), FACTOR x LIMIT_MIB and a little more; it and the run folders
# live in a temporary folder on disk (removed at the end). Three runs, each in the cgroup:
#   1. tformer train from scratch: tokenizes the corpus into the run folder's cache, trains 20
#      steps of a tiny model with evaluation;
#   2. tformer train --resume: checks the cache against the corpus (one read) and trains on;
#   3. and 4. run 1 again outside the limit, with 2 threads and with 1: the anchor of tokenization
#      speed (time at 1 thread / time at 2), and the caches of both must be identical.
# Printed: the corpus against the limit; per run its wall time, the peak of its anonymous memory
# (RssAnon sampled every 20 ms from /proc: what the process holds beyond the file pages the kernel
# may drop), the cgroup's peak charge (memory.max_usage_in_bytes, file pages included), and the
# ratios peak / limit and peak / corpus.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
tf="$build/tformer"
limit_mib="${LIMIT_MIB:-64}"
factor="${FACTOR:-4}"
tokenizer="${TOKENIZER:-char}"
[[ -x "$tf" ]] || { echo "no tformer binary at $tf (build first)" >&2; exit 1; }
cgroot=/sys/fs/cgroup/memory
[[ -w "$cgroot" ]] || { echo "needs a writable cgroup v1 memory controller at $cgroot (root)" >&2; exit 1; }
work="$(mktemp -d -p "$here/build" bigger-than-memory.XXXXXX)"
cg="$cgroot/tformer-bench-$$"
cleanup() {
  [[ -d "$cg" ]] && { cat "$cg/cgroup.procs" 2> /dev/null | while read -r p; do echo "$p" > "$cgroot/cgroup.procs"; done; rmdir "$cg"; }
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$cg"
limit=$((limit_mib << 20))
echo "$limit" > "$cg/memory.limit_in_bytes"
[[ -e "$cg/memory.memsw.limit_in_bytes" ]] && echo "$limit" > "$cg/memory.memsw.limit_in_bytes"

# The corpus: copies with the copy number on each line, until FACTOR x the limit.
corpus="$work/corpus.txt"
src="$here/tests/fixtures/tinyshakespeare_100k.txt"
want=$((factor * limit + (1 << 20)))
k=0
while [[ $(stat -c %s "$corpus" 2> /dev/null || echo 0) -lt $want ]]; do
  sed "s/\$/ $k/" "$src" >> "$corpus"
  k=$((k + 1))
done
size=$(stat -c %s "$corpus")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "corpus: $(mib "$size") MiB ($k copies), $(awk -v a="$size" -v b="$limit" 'BEGIN { printf "%.2f", a / b }')x the cgroup memory limit of $limit_mib MiB; tokenizer $tokenizer"

tok=(--tokenizer char)
if [[ "$tokenizer" == byte-bpe ]]; then
  "$tf" tokenizer train --input "$src" --vocab-size 1000 --output "$work/tok.json" > /dev/null
  tok=(--tokenizer "byte-bpe:$work/tok.json")
fi
cat > "$work/tiny.json" <<'JSON'
{"context_length": 64, "d_model": 64, "n_layers": 2, "n_heads": 4}
JSON

# run NAME LIMITED CMD...: runs CMD (in the cgroup when LIMITED is 1), sampling its RssAnon.
run() {
  local name="$1" limited="$2"
  shift 2
  echo 0 > "$cg/memory.max_usage_in_bytes" 2> /dev/null || true
  local t0 t1 pid peak=0 a
  t0=$(date +%s%N)
  if [[ "$limited" == 1 ]]; then
    bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" "$@" > "$work/$name.log" 2>&1 &
  else
    "$@" > "$work/$name.log" 2>&1 &
  fi
  pid=$!
  while kill -0 "$pid" 2> /dev/null; do
    a=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2> /dev/null || echo 0)
    [[ -n "$a" && "$a" -gt "$peak" ]] && peak=$a
    sleep 0.02
  done
  local rc=0
  wait "$pid" || rc=$?
  t1=$(date +%s%N)
  if [[ $rc -ne 0 ]]; then
    echo "$name: FAILED (exit $rc)"; tail -n 5 "$work/$name.log"
    grep -q oom_kill "$cg/memory.oom_control" 2> /dev/null && grep oom_kill "$cg/memory.oom_control"
    exit 1
  fi
  local peak_b=$((peak * 1024)) cg_peak
  cg_peak=$(cat "$cg/memory.max_usage_in_bytes")
  last_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
  printf '%-32s %6s s   peak anonymous %5s MiB (%.2fx the limit, %.3fx the corpus)' "$name" "$last_secs" \
    "$(mib "$peak_b")" "$(awk -v a="$peak_b" -v b="$limit" 'BEGIN { print a / b }')" \
    "$(awk -v a="$peak_b" -v b="$size" 'BEGIN { print a / b }')"
  [[ "$limited" == 1 ]] && printf '   cgroup peak %s MiB' "$(mib "$cg_peak")"
  printf '\n'
}

flags=(--data "$corpus" --val-fraction 0.01 "${tok[@]}" --config "$work/tiny.json" --batch 4 --context 64
       --steps 20 --eval-every 10 --eval-steps 2 --log-every 10)
run "tokenize + train 20 steps" 1 "$tf" train "${flags[@]}" --threads 2 --out "$work/run"
grep -q "tokenizing $corpus" "$work/tokenize + train 20 steps.log" || { echo "run 1 did not tokenize" >&2; exit 1; }
echo "  cache: $(du -b "$work/run"/tokens-*.bin | awk '{ s += $1 } END { printf "%.1f MiB", s / 1048576 }') in $(ls "$work/run"/tokens-*.bin | wc -l) files"
run "resume: cache check + 20 steps" 1 "$tf" train --resume "$work/run" --steps 40
grep -q "(cached)" "$work/resume: cache check + 20 steps.log" || { echo "the resumed run did not use the cache" >&2; exit 1; }
run "unlimited: tokenize + train" 0 "$tf" train "${flags[@]}" --threads 2 --out "$work/run2"
tok2=$last_secs
run "unlimited, 1 thread" 0 "$tf" train "${flags[@]}" --threads 1 --out "$work/run1"
tok1=$last_secs
[[ "$(cat "$work/run"/tokens-*.bin | md5sum)" == "$(cat "$work/run1"/tokens-*.bin | md5sum)" ]] ||
  { echo "the token caches of 1 and 2 threads differ" >&2; exit 1; }
echo "unlimited, 2 threads against 1: $(awk -v a="$tok1" -v b="$tok2" 'BEGIN { printf "%.2fx", a / b }') as fast; the caches are identical"
