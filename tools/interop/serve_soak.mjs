// A bounded soak of tformer serve (`make test-interop` runs it for 60 s, CI for 20; `make
// test-interop SOAK_SECONDS=120` or --seconds changes it):
// 12 clients send requests back to back (streamed or not, prompts of 1 to 60 tokens, 1 to 80 new
// tokens, random seeds) to a server with 4 slots and a queue of 8, and abandon about a third of
// them at a random moment (AbortController: a disconnect while queued, prefilling or streaming).
// Checked:
//   - every request ends, with its tokens (a finish_reason, and completion_tokens within
//     max_tokens), with a 503 (the queue was full), or abandoned by the client: nothing hangs or
//     fails otherwise;
//   - the resident memory after the first quarter of the run (the warm-up) grows by less than 5%
//     to the end;
//   - /metrics adds up: finished + cancelled + failed + queued + active = the sequences accepted;
//   - SIGTERM while the clients are still sending: every request in flight ends within 10 s (its
//     tokens, or an error event, or a closed connection), none that completed lacks its end, and
//     the server exits with status 0.
//
//   node tools/interop/serve_soak.mjs --tformer build/tformer [--seconds 40] (or SOAK_SECONDS in the environment)
import {spawnSync} from "node:child_process";
import {startServer} from "./serve_lib.mjs";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = path.resolve(flag("--tformer", "build/tformer"));
const seconds = Number(flag("--seconds", process.env.SOAK_SECONDS ?? "40"));
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tformer-soak-"));
let failures = 0;
const fail = (msg) => {
  failures++;
  if (failures <= 20) console.log(`FAIL ${msg}`);
};

const cfg = path.join(work, "cfg.json");
fs.writeFileSync(cfg, JSON.stringify({context_length: 160, d_model: 64, n_layers: 2, n_heads: 4, positions: "rope"}));
const init = spawnSync(tformer, ["init", "--config", cfg, "--tokenizer", "char", "--seed", "5", "--out",
                                 path.join(work, "m.safetensors")], {encoding: "utf8"});
if (init.status !== 0) throw new Error(init.stderr);

const server = startServer(tformer, ["--model", path.join(work, "m.safetensors"), "--port", "0", "--parallel", "4",
                                    "--queue", "8", "--prefill-chunk", "16", "--threads", "1"]);
const {child, exited} = server;
const base = await server.url;
const rss = () => Number(fs.readFileSync(`/proc/${child.pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]);

let rand = 12345;
const random = () => ((rand = (rand * 1103515245 + 12345) % 2147483648) / 2147483648);
const counts = {complete: 0, busy: 0, abandoned: 0, shutdown: 0, sent: 0};
let stopping = false;

// One request; resolves to what became of it.
async function one() {
  const stream = random() < 0.6;
  const maxTokens = 1 + Math.floor(random() * 80);
  const prompt = Array.from({length: 1 + Math.floor(random() * 60)}, () => 32 + Math.floor(random() * 90));
  const abandon = random() < 0.33 ? Math.floor(random() * 60) : -1;
  const controller = new AbortController();
  const timer = abandon >= 0 ? setTimeout(() => controller.abort(), abandon) : null;
  const body = {prompt, max_tokens: maxTokens, seed: Math.floor(random() * 1e6), temperature: 1.0, stream,
                stream_options: {include_usage: true}};
  counts.sent++;
  let answered = false;  // the response has begun: from here on, a cut is a loss
  try {
    const res = await fetch(`${base}/v1/completions`, {method: "POST", body: JSON.stringify(body),
                                                         headers: {"Content-Type": "application/json"},
                                                         signal: controller.signal});
    answered = true;
    const text = await res.text();
    if (res.status === 503) return "busy";
    if (res.status !== 200) return `status ${res.status}: ${text}`;
    let finish = null, tokens = -1, error = null;
    if (stream) {
      if (!text.endsWith("data: [DONE]\n\n")) return `a stream without its end: ${text.slice(-80)}`;
      for (const ev of text.split("\n\n")) {
        if (!ev.startsWith("data: {")) continue;
        const j = JSON.parse(ev.slice(6));
        if (j.error) error = j.error.message;
        if (j.usage) tokens = j.usage.completion_tokens;
        if (j.choices?.[0]?.finish_reason) finish = j.choices[0].finish_reason;
      }
    } else {
      const j = JSON.parse(text);
      finish = j.choices[0].finish_reason;
      tokens = j.usage.completion_tokens;
    }
    if (error) return stopping && error.includes("shutting down") ? "shutdown" : `error event: ${error}`;
    if (!["stop", "length"].includes(finish)) return `finish_reason ${finish}`;
    if (stream && tokens < 0) return "no usage";
    if (tokens > maxTokens) return `${tokens} tokens > max_tokens ${maxTokens}`;
    return "complete";
  } catch (e) {
    if (controller.signal.aborted) return "abandoned";
    // Under shutdown a new connection may be refused; a response already begun must end whole.
    if (stopping && !answered) return "shutdown";
    return `client error: ${e.cause?.code ?? e.message}`;
  } finally {
    if (timer) clearTimeout(timer);
  }
}

const t0 = Date.now();
let warm = 0;
const workers = Array.from({length: 12}, async () => {
  while (!stopping) {
    const r = await one();
    if (r in counts) counts[r]++;
    else fail(r);
    if (r === "busy") await new Promise((ok) => setTimeout(ok, 20));  // back off, as a client should
  }
});
// Warm-up: the first quarter. Then run to the end, and stop the server under load.
await new Promise((r) => setTimeout(r, seconds * 250));
warm = rss();
await new Promise((r) => setTimeout(r, seconds * 750));
const end = rss();
const metrics = await (await fetch(`${base}/metrics`)).text();
const metric = (name) => Number(metrics.match(new RegExp(`^${name} (\\S+)$`, "m"))?.[1]);
stopping = true;
const sentBeforeStop = counts.sent;
child.kill("SIGTERM");
const drained = await Promise.race([Promise.all(workers).then(() => true),
                                    new Promise((r) => setTimeout(() => r(false), 10000))]);
if (!drained) fail("requests still hanging 10 s after SIGTERM");
const status = await exited;
if (status.code !== 0) fail(`exit status ${status.code} (signal ${status.signal}) after SIGTERM`);
const growth = (end - warm) / warm;
if (!(growth < 0.05)) fail(`resident memory grew ${(100 * growth).toFixed(1)}% after warm-up (${warm} -> ${end} kB)`);
// Every accepted sequence is finished, cancelled, failed, waiting or running (one snapshot).
const accounted = metric("tformer_requests_finished_total") + metric("tformer_requests_cancelled_total") +
                  metric("tformer_requests_failed_total") + metric("tformer_queue_length") +
                  metric("tformer_active_sequences");
if (accounted !== metric("tformer_requests_total") || !(metric("tformer_requests_total") <= sentBeforeStop))
  fail(`/metrics does not add up (${accounted} accounted for): ${metrics}`);
if (counts.complete < 50) fail(`only ${counts.complete} requests completed`);
fs.rmSync(work, {recursive: true, force: true});
console.log(`serve_soak: ${seconds} s, ${counts.sent} requests: ${counts.complete} complete, ${counts.abandoned} ` +
            `abandoned by the client, ${counts.busy} refused with 503, ${counts.shutdown} ended by the shutdown; ` +
            `resident memory ${warm} -> ${end} kB (${(100 * growth).toFixed(2)}%) after warm-up; ` +
            `${failures ? failures + " FAILURES" : "all checks passed"}`);
process.exit(failures ? 1 : 0);
