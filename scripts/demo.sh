#!/usr/bin/env bash
# The main job (`make demo`). Until training lands it shows every piece that exists, end to end, on
# a corpus any Debian machine can install (the text of the `fortunes` package):
#   1. learn Sennrich BPE merges on the corpus and segment a few lines with them;
#   2. GPT-2's tokenizer: ids for a sentence and back;
#   3. a small random decoder (configs/demo.json) with a char tokenizer: its loss on the corpus,
#      which at initialisation must be close to ln(vocab).
set -euo pipefail
build=${1:-build}
tf="$build/tformer"
out=runs/demo
mkdir -p "$out"

corpus="$out/fortunes.txt"
if [[ ! -s "$corpus" ]]; then
  shopt -s nullglob
  files=()
  for f in /usr/share/games/fortunes/*; do
    [[ -f "$f" && "$f" != *.dat && "$f" != *.u8 ]] && files+=("$f")
  done
  if [[ ${#files[@]} -eq 0 ]]; then
    echo "demo: no fortunes found in /usr/share/games/fortunes (run scripts/install-deps.sh)" >&2
    exit 1
  fi
  # Fortunes are separated by lines holding a single '%'.
  cat "${files[@]}" | grep -v '^%$' > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
fi
echo "== corpus: $corpus ($(wc -c < "$corpus") bytes, $(wc -l < "$corpus") lines)"

echo
echo "== 1. Sennrich BPE: learn 5000 merges (first steps traced), then segment three lines"
start=$(date +%s.%N)
"$tf" bpe learn --input "$corpus" --merges 5000 --output "$out/codes.bpe" --trace 2> "$out/trace.txt"
end=$(date +%s.%N)
head -n 5 "$out/trace.txt"
awk -v a="$start" -v b="$end" -v n="$(($(wc -l < "$out/codes.bpe") - 1))" -v f="$out/codes.bpe" \
  'BEGIN { printf "learned %d merges in %.2f s -> %s\n", n, b - a, f }'
sed -n '10,12p' "$corpus" | "$tf" bpe apply --codes "$out/codes.bpe"

echo
echo "== 2. GPT-2 byte-level BPE (ids identical to tiktoken's gpt2 encoding)"
text="Hello world! Tokenization is part of the model contract."
ids=$("$tf" tokenize --tokenizer gpt2 --text "$text")
echo "text: $text"
echo "ids:  $ids"
echo "back: $("$tf" detokenize --tokenizer gpt2 --ids "$ids")"

echo
echo "== 3. A small random decoder (configs/demo.json, char tokenizer): forward pass over the corpus"
"$tf" init --config configs/demo.json --tokenizer char --seed 1 --out "$out/model.safetensors"
"$tf" eval --model "$out/model.safetensors" --data "$corpus" --max-tokens 32768
echo "(at initialisation the loss should be close to ln(256) = 5.545)"
