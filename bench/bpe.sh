#!/usr/bin/env bash
# Sennrich BPE benchmark: learn 10,000 merges on mix.txt and apply them to mix.txt with tformer,
# check the codes against subword-nmt's, and run sentencepiece's BPE trainer as an anchor when it is
# installed (Debian package "sentencepiece"). One run each; prints seconds, MB/s and ratios.
#
#   bench/bpe.sh [BUILD_DIR] [THREADS]      (defaults: build, 2)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
threads="${2:-2}"
data="$here/../shared/data"
corpus="$data/mix.txt"
reference="$data/mix.subword-nmt.s10000.codes"
tformer="$build/tformer"
[[ -x "$tformer" ]] || { echo "no tformer binary at $tformer (build first)" >&2; exit 1; }
[[ -f "$corpus" ]] || { echo "no corpus at $corpus" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS="$threads"
mb=$(awk -v b="$(stat -c %s "$corpus")" 'BEGIN { printf "%.2f", b / 1e6 }')

# Wall-clock and CPU seconds of a command (GNU time's format, parsed).
measure() {
  local out="$tmp/time.txt"
  /usr/bin/time -f "%e %U %S %M" -o "$out" "$@" > /dev/null
  cat "$out"
}

echo "corpus: $corpus ($mb MB), threads: $threads"
read -r wall user sys rss < <(measure "$tformer" bpe learn --input "$corpus" --merges 10000 --output "$tmp/mix.codes")
learn_wall=$wall
printf "tformer bpe learn  10000 merges: %6.3f s wall, %6.3f s cpu, peak %d MB\n" "$wall" "$(echo "$user + $sys" | bc)" $((rss / 1024))
if [[ -f "$reference" ]]; then
  if cmp -s "$tmp/mix.codes" "$reference"; then echo "  codes identical to subword-nmt's"; else echo "  CODES DIFFER from subword-nmt's" >&2; exit 1; fi
fi

read -r wall user sys rss < <(measure "$tformer" bpe apply --codes "$tmp/mix.codes" --input "$corpus" --output "$tmp/mix.bpe")
cpu=$(echo "$user + $sys" | bc)
printf "tformer bpe apply  10000 codes:  %6.3f s wall, %6.3f s cpu, %.1f MB/s wall, %.1f MB/s per cpu-second\n" \
  "$wall" "$cpu" "$(echo "$mb / $wall" | bc -l)" "$(echo "$mb / $cpu" | bc -l)"
read -r wall user sys rss < <(OMP_NUM_THREADS=1 measure "$tformer" bpe apply --codes "$tmp/mix.codes" --input "$corpus" --output "$tmp/mix1.bpe")
printf "tformer bpe apply  1 thread:     %6.3f s wall, %.1f MB/s\n" "$wall" "$(echo "$mb / $wall" | bc -l)"
cmp -s "$tmp/mix.bpe" "$tmp/mix1.bpe" || echo "  THREADED OUTPUT DIFFERS"

if command -v spm_train > /dev/null; then
  # BPE with a vocabulary of about 10,000 merges' worth; sentencepiece counts whole pieces.
  read -r wall user sys rss < <(measure spm_train --input="$corpus" --model_prefix="$tmp/spm" --model_type=bpe \
    --vocab_size=10000 --num_threads="$threads" --minloglevel=2 --max_sentence_length=100000000)
  printf "anchor spm_train --model_type=bpe vocab 10000: %6.3f s wall  (tformer learn is %.1fx faster)\n" \
    "$wall" "$(echo "$wall / $learn_wall" | bc -l)"
else
  echo "anchor: spm_train not installed (apt-get install sentencepiece); figures recorded on an AMD EPYC Zen 5: subword-nmt 29.0 s," \
    "spm_train 4.5 s, YouTokenToMe 0.7 s (learn); subword-nmt apply 4.7 s"
fi
