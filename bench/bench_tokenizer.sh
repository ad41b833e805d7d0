#!/usr/bin/env bash
# Byte-level BPE encoding speed, tformer beside tiktoken, in one run on one corpus, with the same ids:
# tiktoken's three encodings (gpt2, cl100k_base, o200k_base) against its native Rust build (npm
# @anysphere/tiktoken-node 0.2.1, which has no gpt2; installed below into build-data/tiktoken-node)
# and its WASM build (npm tiktoken, the exact version of tools/reference/package-lock.json). Then
# linear time (tiktoken#195): one run of "a" of 10^4 .. 10^7 bytes and a 10 MB line.
#   bench/bench_tokenizer.sh [BUILD_DIR] [CORPUS]     (defaults: build, ../shared/data/mix.txt)
# Speeds are MB/s (10^6 bytes of text per second, wall clock, best of the runs); tformer's at one
# thread (the goal: 5x the native build) and at every core. Exits non-zero when any ids differ.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
corpus="$(realpath "${2:-$root/../shared/data/mix.txt}")"
ref="$root/tools/reference"
bash "$root/scripts/fetch-gpt2-vocab.sh" >/dev/null
bash "$root/scripts/fetch-tiktoken-vocab.sh" >/dev/null
[[ -x "$build/bench/bench_tokenizer" ]] || { echo "build $build first (bench_tokenizer missing)" >&2; exit 1; }
[[ -d "$ref/node_modules/tiktoken" ]] || (cd "$ref" && npm ci --no-audit --no-fund --loglevel=error)
# tiktoken's native build, at an exact version, in a folder of its own under build-data/ (its
# package carries the linux-x64 binary itself; the per-platform optional packages are left out).
native_version=0.2.1
export TFORMER_TIKTOKEN_NODE_DIR="$root/build-data/tiktoken-node"
if [[ "$(node -p "try { require('$TFORMER_TIKTOKEN_NODE_DIR/node_modules/@anysphere/tiktoken-node/package.json').version } catch { '' }")" != "$native_version" ]]; then
  mkdir -p "$TFORMER_TIKTOKEN_NODE_DIR"
  echo '{"name": "tformer-bench-tiktoken-node", "private": true}' > "$TFORMER_TIKTOKEN_NODE_DIR/package.json"
  (cd "$TFORMER_TIKTOKEN_NODE_DIR" && npm install --no-audit --no-fund --loglevel=error --no-package-lock --omit=optional \
     "@anysphere/tiktoken-node@$native_version")
fi

tik() { (cd "$ref" && node bench_tiktoken.mjs "$@"); }
declare -A anchor
for enc in gpt2 cl100k_base o200k_base; do
  echo "timing tiktoken $enc ..." >&2
  anchor[wasm_$enc]=$(tik wasm "$enc" "$corpus" 3)
  [[ $enc == gpt2 ]] || anchor[native_$enc]=$(tik native "$enc" "$corpus" 3)
done
runs_json="{"
for n in 1000 10000 30000 100000; do
  echo "timing tiktoken native cl100k_base on a run of $n a's ..." >&2
  runs_json+="\"$n\": $(tik native cl100k_base --run-of-a "$n" 1),"
done
runs_json="${runs_json%,}}"
echo "timing tformer ..." >&2
ours=$(TFORMER_BENCH_CORPUS="$corpus" "$build/bench/bench_tokenizer" --benchmark_filter='BM_Encode' \
         --benchmark_format=json 2>/dev/null)
anchors_json="{"
for k in "${!anchor[@]}"; do anchors_json+="\"$k\": ${anchor[$k]},"; done
anchors_json="${anchors_json%,}}"

node -e '
const anchor = JSON.parse(process.argv[1]), tikRuns = JSON.parse(process.argv[2]);
const ours = JSON.parse(process.argv[3]).benchmarks;
const [corpus, versions] = [process.argv[4], process.argv[5]];
const mbs = (b) => b.bytes_per_second / 1e6;
const f = (x) => x.toFixed(2);
let same = true;
const check = (b, a) => {
  const ok = b.tokens === a.tokens && b.ids_fnv1a === a.ids_fnv1a;
  same = same && ok;
  return ok ? "identical" : "DIFFER";
};
console.log(`corpus: ${corpus} (${ours[0].bytes} bytes); ${versions}`);
console.log("encoding     tformer 1 thread   all cores   tiktoken native   tiktoken WASM   1 thread vs native   vs WASM   ids");
for (const enc of ["gpt2", "cl100k_base", "o200k_base"]) {
  const mine = ours.filter((b) => b.name.startsWith(`BM_Encode/${enc}/`));
  const one = mine.find((b) => b.threads === 1), all = mine[mine.length - 1];
  const nat = anchor[`native_${enc}`], wasm = anchor[`wasm_${enc}`];
  let ids = check(one, wasm);
  if (nat) ids = check(one, nat) === "identical" && ids === "identical" ? "identical" : "DIFFER";
  console.log(`${enc.padEnd(12)} ${f(mbs(one)).padStart(10)} MB/s ${f(mbs(all)).padStart(6)} (${all.threads}) ` +
              `${nat ? f(nat.mb_per_s).padStart(12) + " MB/s" : "           -     "} ${f(wasm.mb_per_s).padStart(10)} MB/s ` +
              `${nat ? (f(mbs(one) / nat.mb_per_s) + "x").padStart(16) : "               -"} ${(f(mbs(one) / wasm.mb_per_s) + "x").padStart(10)}   ${ids}`);
}
console.log("\nlinear time: one run of \"a\" (one piece), 1 thread, MB/s (flat = linear)");
console.log("bytes        " + ["gpt2", "cl100k_base", "o200k_base"].map((e) => e.padStart(12)).join("") + "   tiktoken native cl100k_base");
const sizes = [...new Set(ours.filter((b) => b.name.startsWith("BM_EncodeRun/")).map((b) => b.bytes))].sort((a, b) => a - b);
for (const n of [...new Set([...sizes, ...Object.keys(tikRuns).map(Number)])].sort((a, b) => a - b)) {
  const row = ["gpt2", "cl100k_base", "o200k_base"].map((e) => {
    const b = ours.find((x) => x.name.startsWith(`BM_EncodeRun/${e}/`) && x.bytes === n);
    return (b ? f(mbs(b)) : "-").padStart(12);
  }).join("");
  const t = tikRuns[n];
  let tail = "";
  if (t) {
    const b = ours.find((x) => x.name.startsWith("BM_EncodeRun/cl100k_base/") && x.bytes === n);
    tail = `   ${f(t.mb_per_s)} MB/s (${t.seconds.toFixed(3)} s)` + (b ? `, ids ${check(b, t)}` : "");
  }
  console.log(`${String(n).padEnd(13)}${row}${tail}`);
}
const line = ["gpt2", "cl100k_base", "o200k_base"].map((e) => {
  const b = ours.find((x) => x.name.startsWith(`BM_EncodeOneLine/${e}`));
  const c = ours.find((x) => x.name.startsWith(`BM_Encode/${e}/`) && x.threads === 1);
  return `${e} ${f(mbs(b))} MB/s (${f(mbs(b) / mbs(c))}x the corpus rate)`;
});
console.log(`one line of ${ours.find((x) => x.name.startsWith("BM_EncodeOneLine/")).bytes} bytes, 1 thread: ${line.join("; ")}`);
if (!same) { console.error("ids differ from tiktoken"); process.exit(1); }
' "$anchors_json" "$runs_json" "$ours" "$corpus" \
  "$(cd "$ref" && node -p 'const v = (p) => JSON.parse(require("fs").readFileSync(`${p}/package.json`)).version;
                             `tiktoken ${v("node_modules/tiktoken")} (WASM), @anysphere/tiktoken-node ${v(process.env.TFORMER_TIKTOKEN_NODE_DIR + "/node_modules/@anysphere/tiktoken-node")} (native)`')"
