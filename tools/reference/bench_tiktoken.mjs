// Times tiktoken's "gpt2" encode_ordinary (npm package, WASM) on a file; prints one JSON line:
// {"mb_per_s": best wall-clock run, "cpu_mb_per_s": best by CPU time, "tokens", "ids_fnv1a"} (the hash as bench_tokenizer_gpt2 computes it).
//   node bench_tiktoken.mjs FILE [RUNS]
import { get_encoding } from "tiktoken";
import { readFileSync } from "node:fs";

const [file, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 3);
const bytes = readFileSync(file);
const text = bytes.toString("utf8");
const enc = get_encoding("gpt2");
let best = Infinity, bestCpu = Infinity, ids = null;
for (let r = 0; r < runs; ++r) {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  ids = enc.encode_ordinary(text);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  const c1 = process.cpuUsage(c0);
  best = Math.min(best, dt);
  bestCpu = Math.min(bestCpu, (c1.user + c1.system) / 1e6);
}
let h = 2166136261;
for (const id of ids) h = Math.imul(h ^ id, 16777619) >>> 0;
console.log(JSON.stringify({
  mb_per_s: bytes.length / 1e6 / best, cpu_mb_per_s: bytes.length / 1e6 / bestCpu, seconds: best,
  tokens: ids.length, ids_fnv1a: h,
}));
enc.free();
