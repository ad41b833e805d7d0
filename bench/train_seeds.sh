#!/usr/bin/env bash
# nanoGPT's Tiny Shakespeare recipe over several seeds (the goal: validation loss <= 1.88), three
# ways per seed, all in the same run:
#   tformer    `tformer train --seed S` (its own initialisation and window order); the final
#              validation loss is the mean of 200 random validation batches (metrics.jsonl).
#   torch      bench/train_torch.py --seed S: PyTorch 1.13 with its own generator for the
#              initialisation and the windows (an independent draw of the same recipe).
#   lock-step  tools/reference/train_lockstep.py: PyTorch from tformer's initial weights on
#              tformer's windows; prints the largest |tformer - torch| training loss over the 2000
#              steps and both final models' loss on the same 200 validation batches and on the whole
#              validation split (1742 consecutive windows of 64).
# Then the mean, standard deviation and minimum of tformer's and torch's final validation loss.
#
#   bench/train_seeds.sh [--seeds "1337 1 2 3 4"] [--no-lockstep] [build-dir]   (default: build)
# About 40 s (tformer) + 80 s (torch) + 90 s (lock-step) per seed on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seeds="1337 1 2 3 4"
lockstep=1
build=build
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds=$2; shift ;;
    --no-lockstep) lockstep=0 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) build=$1 ;;
  esac
  shift
done
data="$here/../../shared/data/tinyshakespeare.txt"
py=/usr/bin/python3
[[ -f "$data" ]] || { echo "train_seeds.sh: $data not found" >&2; exit 1; }
[[ -x "$build/tformer" ]] || { echo "train_seeds.sh: $build/tformer not built" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo '{"context_length": 64, "d_model": 128, "n_layers": 4, "n_heads": 4, "dropout": 0}' > "$out/config.json"
: > "$out/results.txt"

for s in $seeds; do
  echo "== seed $s"
  "$build/tformer" train --data "$data" --val-fraction 0.1 --tokenizer char --config "$out/config.json" \
    --out "$out/run$s" --steps 2000 --batch 12 --context 64 --lr 1e-3 --min-lr 1e-4 --warmup 100 \
    --decay-steps 2000 --beta1 0.9 --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 --eval-every 2000 \
    --eval-steps 200 --seed "$s" --threads 2 --log-every 1 > "$out/tformer$s.log" 2>&1 \
    || { tail "$out/tformer$s.log" >&2; exit 1; }
  tf=$($py -c 'import json,sys; print("%.4f" % json.loads(open(sys.argv[1]).read().splitlines()[-1])["val_loss"])' \
    "$out/run$s/metrics.jsonl")
  echo "tformer: val loss $tf"
  $py "$here/train_torch.py" --data "$data" --seed "$s" --log-every 1000 > "$out/torch$s.log" 2>&1 \
    || { tail "$out/torch$s.log" >&2; exit 1; }
  th=$(sed -nE 's/^RESULT .*val_loss=([^ ]+).*/\1/p' "$out/torch$s.log")
  echo "torch:   val loss $th"
  echo "$s $tf $th" >> "$out/results.txt"
  if [[ $lockstep == 1 ]]; then
    "$build/tformer" init --config "$out/config.json" --tokenizer "$out/run$s/model.safetensors" --seed "$s" \
      --out "$out/init$s.safetensors" > /dev/null
    $py "$here/../tools/reference/train_lockstep.py" --data "$data" --init "$out/init$s.safetensors" --seed "$s" \
      --tformer-log "$out/tformer$s.log" --tformer-model "$out/run$s/model.safetensors" | grep -E '^(max|mean|torch |tformer |RESULT)' \
      | grep -v 'steps 1\.\.\(10\|100\|500\|1000\):'
  fi
  rm -rf "$out/run$s"
done

$py - "$out/results.txt" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
tf = [float(r[1]) for r in rows]
th = [float(r[2]) for r in rows]
print("\n| seed | tformer val loss | PyTorch val loss |\n|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} |")
def summary(v):
    sd = st.stdev(v) if len(v) > 1 else float("nan")
    return f"mean {st.mean(v):.4f}, sd {sd:.4f}, min {min(v):.4f}, runs <= 1.88: {sum(x <= 1.88 for x in v)}/{len(v)}"
print(f"\ntformer: {summary(tf)}\nPyTorch: {summary(th)}")
PY
