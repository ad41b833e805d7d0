#!/usr/bin/env bash
# Decode and prefill of quantized files (issue "quantized weights"): the llama2.c stories shapes
# (15M: dim 288, 6 layers, 6 heads, hidden 768; 110M: dim 768, 12 layers, 12 heads, hidden 2048;
# vocabulary 32,000, tied, random weights) written by tformer as F32, BF16, Q8_0 and Q4_0 GGUF
# files, then for each file: build/bench/bench_quant (decode tokens/s at batch 1, prefill of 512
# tokens, each against the read-bandwidth bound measured in the same run) and, when LLAMA_BENCH
# names a llama-bench binary, `llama-bench -t 2 -p 512 -n 128` on the same file right after, so
# that every ratio is of two figures taken minutes apart on the same machine.
#
#   bash bench/quant.sh [BUILD]                       # BUILD defaults to build
#   LLAMA_BENCH=/path/to/llama-bench bash bench/quant.sh
#   SHAPES="110M" TYPES="q8_0 q4_0" REPS=5 bash bench/quant.sh      # REPS: rounds (default 3)
#
# llama-bench is not built here: build it by hand from a llama.cpp snapshot (CPU only,
# -DGGML_NATIVE=ON, server and examples off). The vocabulary is a 32,000-token byte-level BPE
# learned from ../shared/data/mix.txt (the stories' own tokenizer is not needed: the weights are
# random, and only the shapes matter for speed). Files go to build-data/quant-bench/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/.."
build="${1:-build}"
T="$build/tformer"
B="$build/bench/bench_quant"
[[ -x "$T" && ( -x "$B" || -n "${FILES_ONLY:-}" ) ]] || { echo "quant.sh: build first (make build): $T, $B" >&2; exit 1; }
corpus="$root/../shared/data/mix.txt"
[[ -f "$corpus" ]] || { echo "quant.sh: needs $corpus for the 32,000-token vocabulary" >&2; exit 1; }
out="$root/build-data/quant-bench"
mkdir -p "$out"
shapes="${SHAPES:-15M 110M}"
types="${TYPES:-f32 bf16 q8_0 q4_0}"
reps="${REPS:-3}"

[[ -f "$out/tok32k.json" ]] || "$T" tokenizer train --vocab-size 32000 --input "$corpus" --output "$out/tok32k.json" > /dev/null
for s in $shapes; do
  case "$s" in
    15M) dims='"d_model": 288, "n_layers": 6, "n_heads": 6, "d_ff": 768, "context_length": 1024' ;;
    110M) dims='"d_model": 768, "n_layers": 12, "n_heads": 12, "d_ff": 2048, "context_length": 1024' ;;
    *) echo "quant.sh: unknown shape $s (15M or 110M)" >&2; exit 1 ;;
  esac
  cfg="$out/stories$s.json"
  echo "{\"vocab_size\": 32000, $dims, \"norm\": \"rmsnorm\", \"positions\": \"rope\", \"activation\": \"swiglu\", \"bias\": false, \"tied_embeddings\": true}" > "$cfg"
  [[ -f "$out/stories$s.safetensors" ]] ||
    "$T" init --config "$cfg" --out "$out/stories$s.safetensors" --tokenizer "$out/tok32k.json" --seed 1 > /dev/null
  for t in $types; do
    f="$out/stories$s-$t.gguf"
    [[ -f "$f" ]] && continue
    if [[ "$t" == f32 ]]; then
      "$T" export --model "$out/stories$s.safetensors" --out "$f" > /dev/null
    else
      "$T" quantize --model "$out/stories$s.safetensors" --type "$t" --out "$f" > /dev/null
    fi
  done
done

# FILES_ONLY=1: make the files and stop (bench/serve.sh serves them).
[[ -n "${FILES_ONLY:-}" ]] && exit 0

results="$out/results.jsonl"
: > "$results"
# Rounds: in each, every file once through bench_quant and once through llama-bench, so that a
# drift of this shared machine's speed (its bandwidth moved between 22 and 36 GB/s within minutes)
# falls on both sides alike; the table shows each side's median over the rounds.
for round in $(seq "$reps"); do
  for s in $shapes; do
    for t in $types; do
      f="$out/stories$s-$t.gguf"
      echo "== round $round: stories$s $t" >&2
      line="$("$B" --reps 1 --json "$f")"
      lt=0 lp=0
      if [[ -n "${LLAMA_BENCH:-}" ]]; then
        csv="$("$LLAMA_BENCH" -m "$f" -t 2 -p 512 -n 128 -r 1 -o csv 2> /dev/null)"
        # avg_ts is the last-but-one column; n_prompt = 512 marks pp512, n_gen = 128 tg128.
        lp="$(echo "$csv" | awk -F, 'NR > 1 && $0 ~ /"512","0"/ {gsub(/"/, "", $(NF-1)); print $(NF-1)}')"
        lt="$(echo "$csv" | awk -F, 'NR > 1 && $0 ~ /"0","128"/ {gsub(/"/, "", $(NF-1)); print $(NF-1)}')"
      fi
      echo "${line%\}}, \"shape\": \"$s\", \"llama_tg128\": ${lt:-0}, \"llama_pp512\": ${lp:-0}}" >> "$results"
    done
  done
done

python3 - "$results" << 'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in runs:
    if (r["shape"], r["type"]) not in keys:
        keys.append((r["shape"], r["type"]))
med = lambda rs, k: statistics.median(r[k] for r in rs)
# MB/tok: the weights a step reads + the mean keys and values it reads; %bound: the median over the
# rounds of bench_quant's bound_fraction (each round's plain steps against reads of their bytes in
# the same seconds: bench/bench_quant.cpp says how); %prod: the same for the step's matrix products
# alone (products_fraction): what the kernels reach, without the rest of the step.
print(f"{'shape':>5} {'type':>7} {'MB/tok':>12} {'decode':>8} {'bound':>8} {'%bound':>6} {'%prod':>5} {'llama tg128':>11} {'x':>5}"
      f" {'prefill':>8} {'%sgemm':>6} {'llama pp512':>11} {'x':>5}  (tokens/s, medians of {len(runs) // max(1, len(keys))} rounds; GB/s)")
for shape, typ in keys:
    rs = [r for r in runs if (r["shape"], r["type"]) == (shape, typ)]
    dec, pre, bnd, bw = med(rs, "decode_tps"), med(rs, "prefill_tps"), med(rs, "bound_tps"), med(rs, "bandwidth_gbs")
    frac = med(rs, "bound_fraction")
    prod = med(rs, "products_fraction") if all("products_fraction" in r for r in rs) else 0
    lt, lp = med(rs, "llama_tg128"), med(rs, "llama_pp512")
    xt = f"{dec / lt:5.2f}" if lt else "    -"
    xp = f"{pre / lp:5.2f}" if lp else "    -"
    mb = f"{rs[0]['bytes_per_token'] / 1e6:.1f} + {rs[0]['kv_bytes_per_token'] / 1e6:.1f}"
    # The prefill's share of its compute bound: its GFLOP/s over the same round's sgemm GFLOP/s.
    psg = statistics.median(r["prefill_gflops"] / r["sgemm_gflops"] for r in rs) if all("sgemm_gflops" in r for r in rs) else 0
    print(f"{shape:>5} {typ:>7} {mb:>12} {dec:8.1f} {bnd:8.1f} {100 * frac:5.0f}% {100 * prod:4.0f}%"
          f" {lt:11.1f} {xt} {pre:8.1f} {100 * psg:5.0f}% {lp:11.1f} {xp}  ({bw:.1f})")
EOF
