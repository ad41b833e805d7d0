#!/usr/bin/env bash
# The GQA experiment of docs/gqa.md (Ainslie et al. 2023 on nanoGPT's Shakespeare recipe with 8
# heads). Per seed: the multi-head original; `tformer convert` to K = 4, 2, 1 key/value heads by
# mean-pooling and by first head; each converted model scored as it is and after uptraining for 5%
# and 10% of the original steps (`train --init-from`: fresh AdamW, warmup a tenth of the steps,
# cosine from --uptrain-lr to 1e-4); the original trained on the same way without conversion.
# Then GQA models of the same K, and the multi-head model too, trained from scratch for the
# original's steps plus the uptraining steps. Every model is scored by `tformer eval` on the same
# held-out text (the last tenth of the corpus, which training never sees). Results: one TSV line
# per model in $OUT/results.tsv (seed, row, kv_heads, pool, steps, val_loss); rows already there
# are skipped, so the script resumes. Uptraining runs use the seed of their original, so their
# batches are the first ones the original saw (no held-out text is involved).
#
#   bash bench/gqa_experiment.sh [--seeds "1337 1 2"] [--steps 2000] [--out runs/gqa] [--threads 2]
#   build/bench/bench_gqa_plot runs/gqa/results.tsv docs/images/gqa.png   # the picture and table
set -euo pipefail
seeds="1337 1 2"; steps=2000; out=runs/gqa; threads=2; uplr=3e-4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --uptrain-lr) uplr="$2"; shift 2 ;;
    *) echo "gqa_experiment: unknown argument $1" >&2; exit 2 ;;
  esac
done
tf=build/tformer
data=../shared/data/tinyshakespeare.txt
[[ -x $tf ]] || { echo "gqa_experiment: build first (make build)" >&2; exit 1; }
[[ -f $data ]] || { echo "gqa_experiment: $data is missing" >&2; exit 1; }
mkdir -p "$out"
results="$out/results.tsv"
[[ -f $results ]] || printf 'seed\trow\tkv_heads\tpool\tsteps\tval_loss\n' > "$results"
# The held-out text: the last tenth of the corpus (train's --val-fraction 0.1 holds out the same
# bytes and a few more, so none of these is ever trained on).
size=$(stat -c %s "$data")
val="$out/val.txt"
tail -c $((size / 10)) "$data" > "$val"
cfg() { printf '{"context_length": 64, "d_model": 128, "n_layers": 4, "n_heads": 8, "n_kv_heads": %s}\n' "$1"; }
done_row() { grep -q "^$1	$2	$3	$4	$5	" "$results"; }
score() {  # score SEED ROW K POOL STEPS MODEL
  local loss
  loss=$("$tf" eval --model "$6" --data "$val" --threads "$threads" | sed -nE 's/^loss ([0-9.]+) .*/\1/p')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$loss" >> "$results"
  echo "seed $1  $2  K $3  $4  steps $5: val loss $loss"
}
train() {  # train OUT_DIR ARGS...: quietly, keeping the log
  local dir="$1"; shift
  rm -rf "$dir"
  "$tf" train --data "$data" --out "$dir" --threads "$threads" --eval-every 0 --eval-steps 1 "$@" > "$dir.log" 2>&1
}
up1=$((steps / 20)); up2=$((steps / 10))
for s in $seeds; do
  mha="$out/mha-s$s"
  if ! done_row "$s" mha 8 - "$steps"; then
    cfg 8 > "$out/mha.json"
    train "$mha" --config "$out/mha.json" --steps "$steps" --seed "$s"
    score "$s" mha 8 - "$steps" "$mha/model.safetensors"
  fi
  # The original trained on the same way, unconverted: how much of the uptraining's gain is the
  # extra training alone.
  for u in $up1 $up2; do
    done_row "$s" continued 8 - "$u" && continue
    train "$out/cont-s$s-$u" --init-from "$mha/model.safetensors" --steps "$u" --warmup $((u / 10)) --lr "$uplr" --min-lr 1e-4 \
      --seed "$s"
    score "$s" continued 8 - "$u" "$out/cont-s$s-$u/model.safetensors"
  done
  for k in 4 2 1; do
    for pool in mean first; do
      conv="$out/conv-s$s-k$k-$pool.safetensors"
      "$tf" convert --model "$mha/model.safetensors" --kv-heads "$k" --pool "$pool" --out "$conv" > /dev/null
      done_row "$s" converted "$k" "$pool" 0 || score "$s" converted "$k" "$pool" 0 "$conv"
      for u in $up1 $up2; do
        done_row "$s" uptrained "$k" "$pool" "$u" && continue
        train "$out/up-s$s-k$k-$pool-$u" --init-from "$conv" --steps "$u" --warmup $((u / 10)) --lr "$uplr" --min-lr 1e-4 \
          --seed "$s"
        score "$s" uptrained "$k" "$pool" "$u" "$out/up-s$s-k$k-$pool-$u/model.safetensors"
      done
    done
  done
done
# From scratch, the original's steps plus the uptraining's (the longer first: it is the fairer
# comparison for the 10% rows).
for total in $((steps + up2)) $((steps + up1)); do
  for s in $seeds; do
    for k in 4 2 1 8; do  # 8: the multi-head model itself for the same steps, the fair yardstick
      done_row "$s" scratch "$k" - "$total" && continue
      cfg "$k" > "$out/gqa-k$k.json"
      train "$out/scratch-s$s-k$k-$total" --config "$out/gqa-k$k.json" --steps "$total" --seed "$s"
      score "$s" scratch "$k" - "$total" "$out/scratch-s$s-k$k-$total/model.safetensors"
    done
  done
done
echo "gqa_experiment: all rows in $results"
