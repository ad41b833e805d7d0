#!/usr/bin/env bash
# Training benchmark in one go: tformer's `train` beside PyTorch 1.13 (train_torch.py, the
# same decoder, optimiser and schedule in plain torch) in the same run, on three shapes:
#   small   nanoGPT's shakespeare_char CPU recipe: 4 layers, 4 heads, d 128, block 64, batch 12,
#           2000 iterations, lr 1e-3 -> 1e-4 (cosine to 2000, 100 warmup), betas (0.9, 0.99), wd 0.1,
#           clip 1.0, character level on Tiny Shakespeare (90/10 split); the final validation loss is
#           the mean of 200 random validation batches.
#   bigger  nanoGPT's shakespeare_char GPU config on the CPU: 6 layers, 6 heads, d 384, block 256,
#           batch 32, dropout 0; a few iterations (speed only).
#   gpt2    the GPT-2 124M shape: 12 layers, 12 heads, d 768, vocab 50257, context_length 1024,
#           batch 4 x 64 tokens; a few iterations. tformer reads Tiny Shakespeare through GPT-2's
#           tokenizer (build-data/gpt2, scripts/fetch-gpt2-vocab.sh); torch trains on random ids
#           (only speed matters). llm.c's train_gpt2 (same shape, B 4, T 64) is a recorded anchor:
#           5.69 s/step at 2 threads (llm.c is not built by this script, so it is not measured).
# Anchor for the FLOP rates: sgemm (n = 1024, 2 threads, median of 5) from bench_kernels, this run.
#
# FLOPs of one training iteration (forward + backward = 3x the forward's multiply-adds x 2):
#   B*T * ( 6*N + 6*d*V + 12*L*T*d )
#   N = L*(12 d^2 + 13 d) + 2 d   the non-embedding parameters (Q, K, V, O, FFN weights and biases,
#                                 the norms; neither the token nor the position table)
#   6*d*V                         the output projection (tied to the token table)
#   12*L*T*d                      attention scores QK^T and the weighted sum PV, counted over the
#                                 full T x T (PaLM / nanoGPT convention: causal masking not discounted)
# GFLOP/s = that / the median ms per iteration; "/sgemm" is GFLOP/s over the sgemm rate above.
#
# Medians: train_torch.py leaves out the first iteration of a short run (the first 3 of a long one);
# tformer's `done:` line is the median of every step (with 6 steps, one slow first step moves it little).
# Threads: tformer --threads 2; torch keeps its default (torch.get_num_threads() is printed; on this
# 2-core machine it is 1 torch thread, with OpenBLAS (pthreads) using both cores in the matmuls).
#
#   bench/train.sh [--quick] [build-dir]     (default: build)
#   --quick: skip the 2000-iteration runs of the small recipe (a 50-iteration timing run instead).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
quick=0
build=build
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) build=$arg ;;
  esac
done
data="$here/../../shared/data/tinyshakespeare.txt"
tformer="$build/tformer"
py=/usr/bin/python3
[[ -f "$data" ]] || { echo "train.sh: $data not found" >&2; exit 1; }
[[ -x "$tformer" ]] || { echo "train.sh: $tformer not built" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
results="$out/results.txt"
: > "$results"

big_iters=6
gpt2_iters=6
small_iters=2000
[[ $quick == 1 ]] && small_iters=50

echo "== (a) sgemm n=1024, 2 threads (bench_kernels, median of 5)"
"$build"/bench/bench_kernels --benchmark_filter='BM_Sgemm/n:1024/threads:2' --benchmark_repetitions=5 \
  --benchmark_format=json > "$out/sgemm.json" 2>/dev/null
sgemm=$($py -c '
import json, sys
b = [x for x in json.load(open(sys.argv[1]))["benchmarks"] if x.get("aggregate_name") == "median"]
print("%.2f" % b[0]["GFLOPs"])' "$out/sgemm.json")
echo "sgemm: $sgemm GFLOP/s"
echo "sgemm $sgemm" >> "$results"

# torch NAME ARGS...: runs train_torch.py, records "torch NAME ms tokens_per_s val_loss".
torch_run() {
  local name=$1; shift
  echo "-- torch $name: train_torch.py $*"
  $py "$here/train_torch.py" "$@" | tee "$out/torch-$name.log"
  local r
  r=$(tail -n 1 "$out/torch-$name.log")
  [[ $r == RESULT* ]] || { echo "train.sh: train_torch.py ($name) printed no RESULT line" >&2; exit 1; }
  echo "torch $name $(sed -E 's/RESULT ms_per_iter=([^ ]+) tokens_per_s=([^ ]+) val_loss=([^ ]+)/\1 \2 \3/' <<< "$r")" >> "$results"
}

# tformer_run NAME CONFIG_JSON ARGS...: runs `tformer train`, records "tformer NAME ms tokens_per_s val_loss".
tformer_run() {
  local name=$1 config=$2; shift 2
  local dir="$out/tformer-$name"
  mkdir -p "$dir"
  echo "$config" > "$dir/config.json"
  echo "-- tformer $name: tformer train --config <$config> $*"
  "$tformer" train --config "$dir/config.json" --out "$dir/run" --val-fraction 0.1 --threads 2 \
    --lr 1e-3 --min-lr 1e-4 --warmup 100 --beta1 0.9 --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 \
    "$@" > "$dir/log" 2>&1 || { cat "$dir/log" >&2; echo "train.sh: tformer train ($name) failed" >&2; exit 1; }
  grep -E '^(model:|done:|step [0-9]+: )' "$dir/log" || true
  local done_line ms tps val
  done_line=$(grep '^done:' "$dir/log")
  ms=$(sed -E 's/.*median step ([0-9.]+) ms.*/\1/' <<< "$done_line")
  tps=$(sed -E 's/.*, ([0-9.]+) tokens\/s.*/\1/' <<< "$done_line")
  val=$($py -c 'import json, sys; v = json.loads(open(sys.argv[1]).read().splitlines()[-1])["val_loss"]; print("nan" if v is None else f"{v:.4f}")' \
    "$dir/run/metrics.jsonl")
  echo "tformer $name $ms $tps $val" >> "$results"
  rm -rf "$dir/run"  # the GPT-2-shape checkpoint is 1.5 GB
}

small_cfg='{"context_length": 64, "d_model": 128, "n_layers": 4, "n_heads": 4, "dropout": 0}'
big_cfg='{"context_length": 256, "d_model": 384, "n_layers": 6, "n_heads": 6, "dropout": 0}'
gpt2_cfg='{"context_length": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12, "dropout": 0}'

if [[ $quick == 1 ]]; then
  echo "== (b) small recipe: --quick, a $small_iters-iteration timing run only (no val-loss goal)"
  eval_small=20
else
  echo "== (b) small recipe: nanoGPT shakespeare_char on the CPU, $small_iters iterations"
  eval_small=200
fi
torch_run small --data "$data" --n-layer 4 --n-head 4 --n-embd 128 --block 64 --batch 12 --iters "$small_iters" \
  --lr 1e-3 --min-lr 1e-4 --warmup 100 --decay 2000 --beta1 0.9 --beta2 0.99 --wd 0.1 --clip 1.0 \
  --eval-iters "$eval_small" --log-every 500
tformer_run small "$small_cfg" --data "$data" --tokenizer char --steps "$small_iters" --batch 12 --context 64 \
  --decay-steps 2000 --eval-every 0 --eval-steps "$eval_small" --log-every 500

echo "== (c) bigger: 6 layers, 6 heads, d 384, block 256, batch 32; $big_iters iterations"
torch_run big --data "$data" --n-layer 6 --n-head 6 --n-embd 384 --block 256 --batch 32 --iters "$big_iters" \
  --decay 5000 --eval-iters 0 --log-every 1
tformer_run big "$big_cfg" --data "$data" --tokenizer char --steps "$big_iters" --batch 32 --context 256 \
  --decay-steps 5000 --eval-every 0 --eval-steps 1 --log-every 1

echo "== (d) GPT-2 124M shape: 12 layers, 12 heads, d 768, vocab 50257, B 4, T 64; $gpt2_iters iterations"
torch_run gpt2 --vocab 50257 --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --seq 64 --batch 4 \
  --iters "$gpt2_iters" --decay 5000 --eval-iters 0 --log-every 1
tformer_run gpt2 "$gpt2_cfg" --data "$data" --tokenizer gpt2 --steps "$gpt2_iters" --batch 4 --context 64 \
  --decay-steps 5000 --eval-every 0 --eval-steps 1 --log-every 1

$py - "$results" "$quick" <<'PY'
import math, sys
rows = {}
sgemm = float("nan")
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "sgemm":
        sgemm = float(f[1])
    else:
        rows[(f[0], f[1])] = (float(f[2]), float(f[3]), float(f[4]))
quick = sys.argv[2] == "1"
# name: (L, d, V, T, B)
shapes = {"small": (4, 128, 65, 64, 12), "big": (6, 384, 65, 256, 32), "gpt2": (12, 768, 50257, 64, 4)}
labels = {"small": "small (4x128, B12 T64)", "big": "bigger (6x384, B32 T256)", "gpt2": "GPT-2 124M (B4 T64)"}

def flops(L, d, V, T, B):
    n = L * (12 * d * d + 13 * d) + 2 * d
    return B * T * (6 * n + 6 * d * V + 12 * L * T * d)

print(f"\nsgemm (n=1024, 2 threads) in this run: {sgemm:.1f} GFLOP/s")
print(f"FLOPs/iter = B*T*(6*N_nonemb + 6*d*V + 12*L*T*d)")
print(f"{'shape':<26} {'GFLOP/it':>8} {'who':>8} {'ms/iter':>9} {'tokens/s':>9} {'GFLOP/s':>8} {'/sgemm':>7} {'val loss':>8}")
ratio = {}
for name, shape in shapes.items():
    g = flops(*shape) * 1e-9
    for who in ("torch", "tformer"):
        if (who, name) not in rows:
            continue
        ms, tps, val = rows[(who, name)]
        rate = g / (ms * 1e-3)
        print(f"{labels[name]:<26} {g:8.2f} {who:>8} {ms:9.1f} {tps:9.0f} {rate:8.1f} {rate / sgemm:7.2f} {val:8.4f}")
    if ("torch", name) in rows and ("tformer", name) in rows:
        ratio[name] = rows[("torch", name)][0] / rows[("tformer", name)][0]
        print(f"{'':<26} {'':>8} {'tformer/torch speed':>28}: {ratio[name]:.2f}x")
llmc_s = 5.69
print(f"{labels['gpt2']:<26} {flops(*shapes['gpt2']) * 1e-9:8.2f} {'llm.c':>8} {llmc_s * 1e3:9.1f} "
      f"{shapes['gpt2'][3] * shapes['gpt2'][4] / llmc_s:9.0f}  (a figure recorded on an AMD EPYC Zen 5 with 2 threads, not measured in this run)")

def mark(ok):
    return "MET" if ok else "not met"

print("\ngoals:")
if "small" in ratio:
    val = rows[("tformer", "small")][2]
    if quick:
        print(f"  small:  val loss <= 1.88              : (--quick: not run; the full run measures it)")
    else:
        print(f"  small:  val loss <= 1.88              : tformer {val:.4f}, torch {rows[('torch', 'small')][2]:.4f}"
              f"  {mark(val <= 1.88)}")
    print(f"  small:  >= 2x torch it/s              : {ratio['small']:.2f}x  {mark(ratio['small'] >= 2)}")
if "big" in ratio:
    frac = flops(*shapes["big"]) * 1e-9 / (rows[("tformer", "big")][0] * 1e-3) / sgemm
    print(f"  bigger: >= 1.5x torch it/s            : {ratio['big']:.2f}x  {mark(ratio['big'] >= 1.5)}")
    print(f"  bigger: >= 70% of sgemm               : {frac * 100:.0f}%  {mark(frac >= 0.7)}")
if ("tformer", "gpt2") in rows:
    s = rows[("tformer", "gpt2")][0] * 1e-3
    print(f"  GPT-2:  >= 3x llm.c (<= {llmc_s / 3:.2f} s/step): {s:.2f} s/step, {llmc_s / s:.2f}x llm.c  "
          f"{mark(llmc_s / s >= 3)}")
PY
