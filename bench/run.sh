#!/usr/bin/env bash
# Runs the benchmarks of a build (default: build/): the Google Benchmark programs (three
# repetitions, medians), the inference benchmark, the weight types (quant.sh) and the server under
# load (serve.sh), then the scripts that run outside anchors (sentencepiece, tiktoken, PyTorch;
# train.sh takes about 6 minutes) beside tformer in the same run. The experiments with their own
# set-up (distributed*.sh, bigger_than_memory.sh, bpe_100mb.sh, gqa_experiment.sh,
# train_seeds.sh) are run by hand: each one's header says how.
set -euo pipefail
build=${1:-build}
here="$(cd "$(dirname "$0")" && pwd)"
for b in "$build"/bench/bench_kernels "$build"/bench/bench_gemm "$build"/bench/bench_attention; do
  [[ -x "$b" ]] || continue
  echo "== $(basename "$b")"
  "$b" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_display_aggregates_only=true
done
echo "== bench_generate"
"$build"/bench/bench_generate --reps 3
# The weight types beside llama.cpp (its llama-bench when LLAMA_BENCH names one: never built here)
# and the server under load (Node, which make test-interop installs).
echo "== quant.sh";                 bash "$here/quant.sh" "$build"
if command -v node > /dev/null; then
  echo "== serve.sh";               bash "$here/serve.sh" "$build"
else
  echo "(no node: scripts/install-deps.sh installs it for serve.sh)"
fi
if [[ -d "$here/../../shared/data" ]]; then
  echo "== bpe.sh";                 bash "$here/bpe.sh" "$build" 2
  echo "== bench_tokenizer.sh"; bash "$here/bench_tokenizer.sh" "$build"
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "== attention.sh";         bash "$here/attention.sh" "$build"
    echo "== train.sh";             bash "$here/train.sh" "$build"
  else
    echo "(no PyTorch: scripts/install-deps.sh --reference installs it for attention.sh and train.sh)"
  fi
else
  echo "(../shared/data not found: skipping the tokenizer and anchor scripts)"
fi
