// Does a quantized GGUF file mean the same thing in llama.cpp and in tformer? For each type, the
// model is written by `tformer quantize` (or `export --type f32`) and both programs compute the
// next-token distribution at every position of held-out text (windows of the model's context):
// the mean KL divergence KL(p_tformer || p_llama.cpp) per position, the largest |dp|, and how much
// of a greedy continuation the two share; beside it, what the quantization itself costs (tformer
// on the file against tformer on the original float32 model).
//
//   node tools/interop/quant_agreement.mjs --tformer build/tformer --model M.safetensors --data TEXT
// (a tformer model file: its config is read from the safetensors header)
//        [--windows 8] [--types f32,bf16,q8_0,q4_0] [--output-type q8_0] [--greedy 24]
// Greedy continuations: from the first 8 tokens of the first two windows.
import {getLlama} from "node-llama-cpp";
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import * as lib from "./llama_cpp_lib.mjs";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = path.resolve(flag("--tformer", "build/tformer"));
const model = flag("--model"), data = flag("--data");
if (!model || !data) {
  console.error("usage: node quant_agreement.mjs --tformer T --model M --data TEXT [--windows N] [--types ...]");
  process.exit(2);
}
const windows = Number(flag("--windows", "8")), greedyN = Number(flag("--greedy", "24"));
const types = flag("--types", "f32,bf16,q8_0,q4_0").split(",");
const outputType = flag("--output-type", "");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tformer-quant-"));
const run = (a) => {
  const r = spawnSync(tformer, a, {encoding: "utf8", maxBuffer: 1 << 28});
  if (r.status !== 0) throw new Error(`tformer ${a.join(" ")} failed: ${r.stderr}`);
  return r.stdout;
};

// The model's config, from its safetensors header (metadata "config").
const config = (() => {
  const buf = fs.readFileSync(model);
  const n = Number(buf.readBigUInt64LE(0));
  return JSON.parse(JSON.parse(buf.subarray(8, 8 + n).toString("utf8")).__metadata__.config);
})();
const ctx = config.context_length, V = config.vocab_size;
const ids = run(["tokenize", "--tokenizer", model, "--input", data]).trim().split(" ").map(Number);
// Windows of context - 1 tokens: node-llama-cpp shifts its context when the last slot fills, which
// changes the last position's distribution.
const len = ctx - 1;
const wins = Array.from({length: windows}, (_, w) => ids.slice(w * ctx * 7, w * ctx * 7 + len))
                 .filter((w) => w.length === len);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const kl = (p, q, from) => {
  let s = 0;
  for (let j = 0; j < V; j++) if (p[from + j] > 0) s += p[from + j] * Math.log(p[from + j] / Math.max(q[from + j], 1e-30));
  return s;
};
const original = wins.map((w) => lib.tformerProbs(tformer, work, model, w, V));
console.log(`${model}: ${wins.length} windows of ${len} tokens from ${data}; vocabulary ${V}`);
console.log("type   KL(tformer||llama.cpp)  max|dp|   greedy tokens shared   KL(quantized||f32 original)");
for (const type of types) {
  const file = path.join(work, `m-${type}.gguf`);
  run(type === "f32" ? ["export", "--model", model, "--format", "gguf", "--out", file]
                     : ["quantize", "--model", model, "--type", type, "--out", file,
                        ...(outputType && type !== "bf16" ? ["--output-type", outputType] : [])]);
  let klSum = 0, klOrig = 0, worst = 0, n = 0;
  for (const [k, w] of wins.entries()) {
    const ours = lib.tformerProbs(tformer, work, file, w, V);
    // Quantized weights in batches of 16 rows (llama_cpp_lib.mjs: llama.cpp's AMX path).
    const theirs = await lib.llamaCppProbs(llama, file, w, V, ctx, ["q8_0", "q4_0"].includes(type) ? 16 : ctx);
    for (let t = 0; t < w.length; t++) {
      klSum += kl(ours, theirs, t * V);
      klOrig += kl(ours, original[k], t * V);
      n++;
    }
    worst = Math.max(worst, lib.maxAbsDiff(ours, theirs));
  }
  // Greedy continuations from each window's first 8 tokens: tokens equal before the first difference.
  let shared = 0, total = 0;
  for (const w of wins.slice(0, 2)) {
    const n2 = Math.min(greedyN, len - 8);
    const a = lib.tformerGreedy(tformer, work, file, w.slice(0, 8), n2, V);
    const b = await lib.llamaCppGreedy(llama, file, w.slice(0, 8), n2, V, ctx);
    const first = a.findIndex((x, i) => x !== b[i]);
    shared += first < 0 ? n2 : first;
    total += n2;
  }
  console.log(`${type.padEnd(6)} ${(klSum / n).toExponential(2).padStart(14)}          ${worst.toExponential(2)}   ` +
              `${String(shared).padStart(4)} of ${String(total).padEnd(4)}            ${(klOrig / n).toExponential(2)}`);
}
fs.rmSync(work, {recursive: true, force: true});
