#!/usr/bin/env bash
# GPT-2 encoding speed: tformer beside tiktoken (npm, WASM), same corpus, same run, same ids.
#   bench/bench_tokenizer_gpt2.sh [BUILD_DIR] [CORPUS]     (defaults: build, ../shared/data/mix.txt)
# Prints both speeds in MB/s (10^6 bytes per second of corpus, wall clock) and the ratio, per thread
# count; for one thread also by CPU time, which stays meaningful on a machine busy with other work.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
corpus="$(realpath "${2:-$root/../shared/data/mix.txt}")"
bash "$root/scripts/fetch-gpt2-vocab.sh"
[[ -x "$build/bench/bench_tokenizer_gpt2" ]] || { echo "build $build first (bench_tokenizer_gpt2 missing)" >&2; exit 1; }
[[ -d "$root/tools/reference/node_modules/tiktoken" ]] || (cd "$root/tools/reference" && npm ci --no-audit --no-fund --loglevel=error)

tik=$(cd "$root/tools/reference" && node bench_tiktoken.mjs "$corpus" 3)
ours=$(TFORMER_BENCH_CORPUS="$corpus" "$build/bench/bench_tokenizer_gpt2" --benchmark_filter=BM_Gpt2Encode \
         --benchmark_format=json 2>/dev/null)
node -e '
const tik = JSON.parse(process.argv[1]);
const ours = JSON.parse(process.argv[2]).benchmarks;
console.log(`corpus: ${process.argv[3]}`);
console.log(`tiktoken (npm ${process.argv[4]}, WASM, 1 thread): ${tik.mb_per_s.toFixed(2)} MB/s ` +
            `(${tik.cpu_mb_per_s.toFixed(2)} MB/s of CPU time), ${tik.tokens} tokens`);
let same = true;
for (const b of ours) {
  const mbs = b.bytes_per_second / 1e6;
  const ok = b.tokens === tik.tokens && b.ids_fnv1a === tik.ids_fnv1a;
  same = same && ok;
  const cpu = b.threads == 1 ? `; by CPU time ${(b.bytes_per_second * b.real_time / b.cpu_time / 1e6).toFixed(2)} MB/s = ` +
      `${(b.bytes_per_second * b.real_time / b.cpu_time / 1e6 / tik.cpu_mb_per_s).toFixed(2)}x` : "";
  console.log(`tformer, ${b.threads} thread(s): ${mbs.toFixed(2)} MB/s = ${(mbs / tik.mb_per_s).toFixed(2)}x tiktoken${cpu}` +
              `${b.threads > 1 ? ` (${(mbs / b.threads / tik.mb_per_s).toFixed(2)}x per thread)` : ""}; ids ${ok ? "identical" : "DIFFER"}`);
}
if (!same) process.exit(1);
' "$tik" "$ours" "$corpus" "$(node -p 'require("'"$root"'/tools/reference/node_modules/tiktoken/package.json").version')"
