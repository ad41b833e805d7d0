#!/usr/bin/env bash
# Data-parallel training on one host (docs/distributed.md): for nanoGPT's bigger shape (6 layers,
# d 384, 6 heads, context 256, char vocabulary) and, when GPT-2's vocabulary is fetched
# (scripts/fetch-gpt2-vocab.sh), the GPT-2 124M shape (12 layers, d 768, context 1024, vocab 50257,
# windows of 64 tokens), each run three ways in the same run:
#   1 process x 2 threads          the anchor
#   2 processes x 1 thread         mpirun on loopback (TCP), the same bits
#   2 processes x 1 thread, --zero 1
# Printed per run: the median step, tokens/s and their ratio to the anchor, the MiB rank 0 sends
# per step and the share of the step it spends in collectives (tformer's own counters, the
# `communication` line), and each process's peak resident memory (GNU time). The models of the
# three runs must be byte-identical (checked).
#
#   bench/distributed.sh [BUILD_DIR]      (env: STEPS=6 ACCUM=2)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
tf="$build/tformer"
steps="${STEPS:-6}"
accum="${ACCUM:-2}"
[[ -x "$tf" ]] || { echo "no tformer binary at $tf (build first)" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "no mpirun (scripts/install-deps.sh installs openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
data="$here/../shared/data/tinyshakespeare.txt"
[[ -f "$data" ]] || data="$here/tests/fixtures/tinyshakespeare_100k.txt"

cat > "$work/bigger.json" <<'JSON'
{"context_length": 256, "d_model": 384, "n_layers": 6, "n_heads": 6}
JSON
cat > "$work/gpt2.json" <<'JSON'
{"context_length": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12}
JSON

# run NAME OUT PREFIX...: the training run (PREFIX: nothing, or mpirun ... -np 2), peak RSS per process.
run() {
  local name="$1" out="$2"
  shift 2
  "$@" > "$work/$out.log" 2> "$work/$out.err" || { echo "$name failed:"; tail -5 "$work/$out.log" "$work/$out.err"; exit 1; }
  local med tps comm rss
  med=$(sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p' "$work/$out.log")
  tps=$(sed -n 's/.*ms, \([0-9]*\) tokens\/s.*/\1/p' "$work/$out.log")
  comm=$(sed -n 's/^communication (rank 0): \(.*\)$/\1/p' "$work/$out.log")
  rss=$(grep -o '^peak_rss_kb [0-9]*' "$work/$out.err" | awk '{ printf "%s%.0f", sep, $2 / 1024; sep = " + " }')
  printf '  %-34s median step %9s ms  %7s tokens/s  %s  peak RSS %s MiB\n' "$name" "$med" "$tps" \
    "${comm:+($comm)}" "$rss"
  echo "$tps" > "$work/$out.tps"
}

shape() {  # shape NAME CONFIG TOKENIZER BATCH CONTEXT
  local name="$1" config="$2" tok="$3" batch="$4" context="$5"
  echo "$name: --batch $batch --context $context --grad-accum $accum, $steps steps"
  local flags=(--data "$data" --tokenizer "$tok" --config "$config" --batch "$batch" --context "$context"
               --grad-accum "$accum" --steps "$steps" --eval-every 0 --eval-steps 1 --log-every 1000 --seed 1)
  local t=(/usr/bin/time -f 'peak_rss_kb %M')
  run "1 process x 2 threads" "$name-1" "${t[@]}" "$tf" train "${flags[@]}" --threads 2 --out "$work/$name-1"
  run "2 processes x 1 thread" "$name-2" "${mpi[@]}" -np 2 "${t[@]}" "$tf" train "${flags[@]}" --threads 1 \
    --out "$work/$name-2"
  run "2 processes x 1 thread, --zero 1" "$name-z" "${mpi[@]}" -np 2 "${t[@]}" "$tf" train "${flags[@]}" \
    --threads 1 --zero 1 --out "$work/$name-z"
  for v in 2 z; do
    cmp -s "$work/$name-1/model.safetensors" "$work/$name-$v/model.safetensors" ||
      { echo "$name: the $v run's model differs from one process's" >&2; exit 1; }
  done
  echo "  models byte-identical; 2 processes x 1 thread against 1 x 2: $(awk -v a="$(cat "$work/$name-2.tps")" \
    -v b="$(cat "$work/$name-1.tps")" 'BEGIN { printf "%.2fx", a / b }') the tokens/s"
}

shape bigger "$work/bigger.json" char 8 256
if [[ -f "$here/build-data/gpt2/encoder.json" ]]; then
  shape gpt2 "$work/gpt2.json" gpt2 4 64
else
  echo "gpt2: skipped (no build-data/gpt2: bash scripts/fetch-gpt2-vocab.sh)"
fi
