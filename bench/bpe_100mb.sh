#!/usr/bin/env bash
# Sennrich BPE at scale: learn 32,000 merges on a ~100 MB corpus; prints wall time, CPU time and
# peak memory (GNU time's maximum resident set size). One run.
#
#   bench/bpe_100mb.sh [BUILD_DIR] [THREADS]      (defaults: build, 2)
#
# The corpus is generated into a temporary folder (removed at the end; never committed): 14 copies
# of ../shared/data/mix.txt (7.38 MB each; 107 MB in all with the appended numbers). Copy 0 is mix.txt as it is; in copy k
# (1..13), with i the line number and j the position of a word in its line (words split at ' '):
#   - every word of the lines with (i + k) % 4 == 0 is written reversed (by code points), and
#   - every word with (7 i + j + k) % 6 == 0 gets k appended ("king" -> "king7").
# So the copies share most words and their frequencies but not all: reversed and numbered words add
# distinct words (as a bigger real corpus would), and pair counts are not just 14 x mix.txt's.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
threads="${2:-2}"
source_corpus="$here/../shared/data/mix.txt"
tformer="$build/tformer"
[[ -x "$tformer" ]] || { echo "no tformer binary at $tformer (build first)" >&2; exit 1; }
[[ -f "$source_corpus" ]] || { echo "no corpus at $source_corpus" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
corpus="$tmp/mix100.txt"

python3 - "$source_corpus" "$corpus" <<'EOF'
import sys
src, dst = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8", newline="") as f:
    lines = f.read().split("\n")
with open(dst, "w", encoding="utf-8", newline="") as out:
    for k in range(14):
        if k == 0:
            out.write("\n".join(lines))
        else:
            varied = []
            for i, line in enumerate(lines):
                words = line.split(" ")
                if (i + k) % 4 == 0:
                    words = [w[::-1] for w in words]
                for j in range((6 - (7 * i + k) % 6) % 6, len(words), 6):
                    if words[j]:
                        words[j] += str(k)
                varied.append(" ".join(words))
            out.write("\n".join(varied))
        if not lines[-1] == "":
            out.write("\n")
EOF

mb=$(awk -v b="$(stat -c %s "$corpus")" 'BEGIN { printf "%.1f", b / 1e6 }')
export OMP_NUM_THREADS="$threads"
echo "corpus: $mb MB (14 varied copies of mix.txt), threads: $threads"
/usr/bin/time -f "%e %U %S %M" -o "$tmp/time.txt" "$tformer" bpe learn --input "$corpus" --merges 32000 \
  --output "$tmp/mix100.codes" 2> "$tmp/learn.err" || { cat "$tmp/learn.err" >&2; exit 1; }
read -r wall user sys rss < "$tmp/time.txt"
printf "tformer bpe learn 32000 merges on %s MB: %.2f s wall, %.2f s cpu, peak %d MB\n" "$mb" "$wall" \
  "$(echo "$user + $sys" | bc)" $((rss / 1024))
echo "  merges written: $(($(wc -l < "$tmp/mix100.codes") - 1))"
