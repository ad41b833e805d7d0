#!/usr/bin/env bash
# The main job (`make demo`), on a corpus any Debian machine can install (the text of the
# `fortunes` package, 2.5 MB of English):
#   1. learn Sennrich BPE merges on the corpus and segment a few lines with them;
#   2. GPT-2's tokenizer: ids for a sentence and back;
#   3. train a character-level decoder (configs/demo.json: 4 layers, 96 wide, context 128) for
#      about three minutes on 2 cores of an AMD EPYC Zen 4 (68 ms per step), printing progress and
#      the validation loss;
#   4. draw the loss curves (runs/demo/train/loss.png) and generate samples with the KV cache.
# DEMO_STEPS=N changes the number of training steps (default 2500).
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
echo "== 3. Train a character-level decoder on the corpus (configs/demo.json, last 10% held out)"
rm -rf "$out/train"
"$tf" train --data "$corpus" --val-fraction 0.1 --tokenizer char --config configs/demo.json --out "$out/train" \
  --steps "${DEMO_STEPS:-2500}" --batch 16 --context 128 --lr 1e-3 --min-lr 1e-4 --warmup 100 \
  --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 --eval-every 250 --eval-steps 20 --log-every 100 --seed 1337
echo "validation loss by step (train/val, from $out/train/metrics.jsonl):"
sed 's/.*"step":\([0-9]*\),"train_loss":\([0-9.]*\),"val_loss":\([0-9.]*\).*/  step \1: \2 \/ \3/' "$out/train/metrics.jsonl"
size=$(wc -c < "$corpus")
tail -c $((size - size * 9 / 10)) "$corpus" > "$out/heldout.txt"   # about the held-out 10%
"$tf" eval --model "$out/train/model.safetensors" --data "$out/heldout.txt"

echo
echo "== 4. Loss curves and samples (KV-cache generation, temperature 0.8, top-k 40)"
"$tf" plot --run "$out/train"
for prompt in "The " "Q: What is" "A man "; do
  echo "--- prompt: \"$prompt\""
  "$tf" generate --model "$out/train/model.safetensors" --prompt "$prompt" --max-new-tokens 112 \
    --temperature 0.8 --top-k 40 --seed 7
  echo
done
