// Helpers shared by the live checks against llama.cpp (llama_cpp_check.mjs, quant_agreement.mjs):
// a seeded generator, softmax, and next-token probabilities and greedy continuations from tformer
// (its `logits` command) and from llama.cpp (node-llama-cpp, F32 KV cache, flash attention off).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";

// mulberry32: a small seeded generator, so the fixtures are the same on every run.
export function rng(seed) {
  let a = seed >>> 0;
  const u = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = () => Math.sqrt(-2 * Math.log(1 - u())) * Math.cos(2 * Math.PI * u());
  return {u, normal, int: (n) => Math.floor(u() * n)};
}

export function softmaxRows(logits, V) {
  const rows = logits.length / V, out = new Float64Array(logits.length);
  for (let t = 0; t < rows; t++) {
    let m = -Infinity;
    for (let j = 0; j < V; j++) m = Math.max(m, logits[t * V + j]);
    let s = 0;
    for (let j = 0; j < V; j++) s += (out[t * V + j] = Math.exp(logits[t * V + j] - m));
    for (let j = 0; j < V; j++) out[t * V + j] /= s;
  }
  return out;
}

// tformer's next-token probabilities at every position of ids ([T][V], float64); `tformer` the
// binary, `work` a folder for the logits file.
export function tformerProbs(tformer, work, model, ids, V) {
  const out = path.join(work, "logits.bin");
  const r = spawnSync(tformer, ["logits", "--model", model, "--tokens", ids.join(" "), "--out", out], {encoding: "utf8"});
  if (r.status !== 0) throw new Error(`tformer logits failed: ${r.stderr}`);
  const b = fs.readFileSync(out);
  return softmaxRows(new Float32Array(b.buffer, b.byteOffset, b.length / 4), V);
}

export function argmax(p, from, V) {
  let best = 0;
  for (let j = 1; j < V; j++) if (p[from + j] > p[from + best]) best = j;
  return best;
}

export function maxAbsDiff(a, b) {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

// batchSize: the rows llama.cpp evaluates at once (default: the whole context). The quantized
// checks pass 16: on CPUs with AMX (Intel Xeon, Sapphire Rapids on), node-llama-cpp 3.21.1's
// prebuilt CPU backend gives NaN and wrong probabilities for Q8_0 and Q4_0 weights in batches of
// 32 rows or more (its AMX path), while batches of fewer rows and one-token decoding agree with
// tformer to 2.6e-7 (seen on this workplace's Xeon; AMD's Zen 4 has no AMX and never showed it).
// threads: 1 -- node-llama-cpp's default thread count took 270 ms for each evaluation of these tiny
// models on 2 cores (threads woken and put back to sleep), one thread 1 ms; ggml computes each dot
// product on one thread whatever their number, so the probabilities are the same.
const kThreads = 1;

export async function llamaCppProbs(llama, ggufPath, ids, V, contextSize, batchSize = contextSize) {
  const model = await llama.loadModel({modelPath: ggufPath});
  const ctx = await model.createContext({
    contextSize, batchSize, threads: kThreads, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
    flashAttention: false,  // llama.cpp's CPU flash attention rounds the queries to F16 (errors ~1e-3)
  });
  const seq = ctx.getSequence();
  const res = await seq.controlledEvaluate(ids.map((t) => [t, {generateNext: {probabilities: true}}]));
  const out = new Float64Array(ids.length * V);
  res.forEach((r, t) => {
    for (const [k, v] of r.next.probabilities) out[t * V + k] = v;
  });
  await ctx.dispose();
  await model.dispose();
  return out;
}

export async function llamaCppGreedy(llama, ggufPath, prompt, n, V, contextSize) {
  const model = await llama.loadModel({modelPath: ggufPath});
  const ctx = await model.createContext({
    contextSize, batchSize: contextSize, threads: kThreads, experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
    flashAttention: false,  // llama.cpp's CPU flash attention rounds the queries to F16 (errors ~1e-3)
  });
  const seq = ctx.getSequence();
  const out = [];
  let input = prompt;
  for (let i = 0; i < n; i++) {
    const res = await seq.controlledEvaluate(
        input.map((t, k) => (k === input.length - 1 ? [t, {generateNext: {probabilities: true}}] : t)));
    const probs = res[res.length - 1].next.probabilities;
    const p = new Float64Array(V);
    for (const [k, v] of probs) p[k] = v;
    const next = argmax(p, 0, V);
    out.push(next);
    input = [next];
  }
  await ctx.dispose();
  await model.dispose();
  return out;
}

export function tformerGreedy(tformer, work, model, prompt, n, V) {
  const ids = [...prompt];
  for (let i = 0; i < n; i++) {
    const p = tformerProbs(tformer, work, model, ids, V);
    ids.push(argmax(p, (ids.length - 1) * V, V));
  }
  return ids.slice(prompt.length);
}
