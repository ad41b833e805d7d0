#!/usr/bin/env bash
# The README's perplexity table for quantized weights (issue "quantized weights"): held-out
# perplexity of the same model stored as F32, BF16, Q8_0, Q4_0 and Q4_0 with a Q8_0 output matrix,
# by `tformer eval`, on
#   - a Tiny Shakespeare model, trained here (nanoGPT's character-level corpus; d_model 128,
#     4 layers, 8 heads, context 64, 2,000 steps, seed 1337: bench/gqa_experiment.sh's multi-head
#     model), scored on the last tenth of the corpus, which training holds out;
#   - the demo model (`make demo`), scored on runs/demo/heldout.txt, when it has been trained.
# Training is deterministic (each element of a loop is computed by one thread, whole), so the
# figures repeat on any machine with the same build. Then, with --agreement (after
# scripts/install-interop.sh), llama.cpp's and tformer's next-token distributions on the
# Shakespeare model's files (tools/interop/quant_agreement.mjs).
#
#   bash bench/quant_perplexity.sh [--out runs/quant-ppl] [--threads 2] [--agreement]
set -euo pipefail
out=runs/quant-ppl; threads=2; agreement=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --agreement) agreement=1; shift ;;
    *) echo "quant_perplexity: unknown argument $1" >&2; exit 2 ;;
  esac
done
tf=build/tformer
data=../shared/data/tinyshakespeare.txt
[[ -x $tf ]] || { echo "quant_perplexity: build first (make build)" >&2; exit 1; }
[[ -f $data ]] || { echo "quant_perplexity: $data is missing" >&2; exit 1; }
mkdir -p "$out"
size=$(stat -c %s "$data")
val="$out/val.txt"
tail -c $((size / 10)) "$data" > "$val"
model="$out/shakespeare/model.safetensors"
if [[ ! -f $model ]]; then
  printf '{"context_length": 64, "d_model": 128, "n_layers": 4, "n_heads": 8}\n' > "$out/shakespeare.json"
  echo "training the Shakespeare model (2,000 steps; log: $out/shakespeare.log)"
  rm -rf "$out/shakespeare"
  "$tf" train --data "$data" --out "$out/shakespeare" --config "$out/shakespeare.json" --steps 2000 --seed 1337 \
    --threads "$threads" --eval-every 0 --eval-steps 1 > "$out/shakespeare.log" 2>&1
fi

ppl() { "$tf" eval --model "$1" --data "$2" --threads "$threads" | sed -nE 's/.*perplexity ([0-9.]+).*/\1/p'; }
row() {  # row NAME MODEL HELDOUT: one line of the table
  local name="$1" m="$2" text="$3" f32 p
  f32=$(ppl "$m" "$text")
  local line="| $name | $f32"
  for t in bf16 q8_0 q4_0 q4_0+q8_0; do
    local f="$out/$name-$t.gguf"
    if [[ $t == q4_0+q8_0 ]]; then
      "$tf" quantize --model "$m" --type q4_0 --output-type q8_0 --out "$f" > /dev/null
    else
      "$tf" quantize --model "$m" --type "$t" --out "$f" > /dev/null
    fi
    p=$(ppl "$f" "$text")
    line+=" | $p ($(python3 -c "print(f'{100 * ($p / $f32 - 1):+.2f}%')"))"
  done
  echo "$line |"
}
echo "| model | F32 | BF16 | Q8_0 | Q4_0 | Q4_0, output Q8_0 |"
echo "|---|---|---|---|---|---|"
row shakespeare "$model" "$val"
if [[ -f runs/demo/train/model.safetensors && -f runs/demo/heldout.txt ]]; then
  row demo runs/demo/train/model.safetensors runs/demo/heldout.txt
else
  echo "(the demo model is not trained: make demo, then run this again for its row)"
fi
if [[ -n $agreement ]]; then
  node tools/interop/quant_agreement.mjs --tformer "$tf" --model "$model" --data "$val"
fi
