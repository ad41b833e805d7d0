// Times tiktoken's encoding without special tokens, by its WASM build (npm tiktoken,
// encode_ordinary) or its native Rust build (npm @anysphere/tiktoken-node: cl100k_base by
// encodeCl100KNoSpecialTokens, o200k_base by encode(text, O200k, NormalText, []); both asynchronous,
// run on a thread of their own; the native build has no gpt2). Prints one JSON line:
//   {"mb_per_s": best wall-clock run, "cpu_mb_per_s": best by CPU time, "seconds", "bytes",
//    "tokens", "ids_fnv1a": the hash of the ids as bench/bench_tokenizer.cpp computes it}
//   node bench_tiktoken.mjs wasm|native ENCODING (FILE | --run-of-a N) [RUNS]
// `--run-of-a N` encodes N copies of "a" instead of a file (one piece of N letters: tiktoken#195).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const [build, encoding, source, sourceArg, runsArg] = process.argv.slice(2);
if (!["wasm", "native"].includes(build) || !encoding || !source) {
  console.error("usage: node bench_tiktoken.mjs wasm|native ENCODING (FILE | --run-of-a N) [RUNS]");
  process.exit(2);
}
const fromRun = source === "--run-of-a";
const text = fromRun ? "a".repeat(Number(sourceArg)) : readFileSync(source, "utf8");
const runs = Number((fromRun ? runsArg : sourceArg) ?? 3);
const bytes = Buffer.byteLength(text, "utf8");

let encode, free = () => {};
if (build === "wasm") {
  const { get_encoding } = await import("tiktoken");
  const enc = get_encoding(encoding);
  encode = async (t) => enc.encode_ordinary(t);
  free = () => enc.free();
} else {
  // Installed by bench/bench_tokenizer.sh into $TFORMER_TIKTOKEN_NODE_DIR/node_modules (not in this
  // folder's package.json: the npm mirror here has only its linux-x64 build, so the lock file
  // npm writes for it cannot be installed with npm ci).
  const dir = process.env.TFORMER_TIKTOKEN_NODE_DIR;
  if (!dir) {
    console.error("set TFORMER_TIKTOKEN_NODE_DIR to the folder holding node_modules/@anysphere/tiktoken-node");
    process.exit(2);
  }
  const native = createRequire(`${dir}/package.json`)("@anysphere/tiktoken-node");
  const tok = native.getTokenizer();
  if (encoding === "cl100k_base") encode = (t) => tok.encodeCl100KNoSpecialTokens(t);
  else if (encoding === "o200k_base")
    encode = (t) => tok.encode(t, native.SupportedEncoding.O200k, native.SpecialTokenAction.NormalText, []);
  else {
    console.error(`the native build has no encoding ${encoding}`);
    process.exit(2);
  }
}

let best = Infinity, bestCpu = Infinity, ids = null;
for (let r = 0; r < runs; ++r) {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  ids = await encode(text);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  const c1 = process.cpuUsage(c0);
  best = Math.min(best, dt);
  bestCpu = Math.min(bestCpu, (c1.user + c1.system) / 1e6);
}
let h = 2166136261;
for (const id of ids) h = Math.imul(h ^ id, 16777619) >>> 0;
console.log(JSON.stringify({
  mb_per_s: bytes / 1e6 / best, cpu_mb_per_s: bytes / 1e6 / bestCpu, seconds: best, bytes,
  tokens: ids.length, ids_fnv1a: h,
}));
free();
