// The load half of bench/serve.sh: `tformer serve` on one model file, driven by C concurrent
// clients (C in --clients, default 1,4,16), each sending streamed completions back to back
// (prompts of --prompt tokens, --max-tokens tokens each, random seeds). Per level: aggregate
// completion tokens/s over the level's wall time, and time to first token (first streamed text)
// p50 and p99 seen by the clients, the server's own mean time to first token (from /metrics: from
// the request's acceptance to its first sampled token, no HTTP in it), and the median round trip
// of GET /health before the levels (what HTTP alone costs these clients). --rounds R runs the levels
// R times over, in turn (1, 4, 16, 1, 4, 16, ...), so that a ratio of two levels can be taken
// within a round, seconds apart, on a machine whose speed moves from minute to minute. One JSON
// line per level and round.
//
//   node bench/serve_load.mjs --tformer build/tformer --model FILE [--clients 1,4,16]
//        [--requests 4] [--prompt 32] [--max-tokens 64] [--parallel 16] [--threads 2] [--rounds 1]
//
// node:http and server-sent events, no client library, so that the client costs little.
import {readFileSync} from "node:fs";
import http from "node:http";
import {startServer} from "../tools/interop/serve_lib.mjs";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = flag("--tformer", "build/tformer");
const model = flag("--model", "");
const levels = flag("--clients", "1,4,16").split(",").map(Number);
const perClient = Number(flag("--requests", "4"));
const promptTokens = Number(flag("--prompt", "32"));
const maxTokens = Number(flag("--max-tokens", "64"));
const parallel = flag("--parallel", "16");
const threads = flag("--threads", "2");
const rounds = Number(flag("--rounds", "1"));
if (!model) throw new Error("serve_load.mjs: --model FILE");

const server = startServer(tformer, ["--model", model, "--port", "0", "--parallel", parallel, "--threads", threads,
                                    "--context", String(promptTokens + maxTokens + 8)]);
const child = server.child;
const base = await server.url;

// A prompt of exactly promptTokens ids (token ids, so that every tokenizer gives the same length).
const promptIds = (seed) => Array.from({length: promptTokens}, (_, i) => (seed * 7919 + i * 31) % 1000 + 100);

// One streamed completion through node:http (a keep-alive connection per client): its time to
// first text and its completion tokens (from the usage chunk). node:http rather than fetch(): the
// clients share the server's two cores, and fetch's web streams cost them about twice the CPU.
const agent = new http.Agent({keepAlive: true, maxSockets: 256});
function one(seed) {
  const t0 = performance.now();
  const body = JSON.stringify({prompt: promptIds(seed), max_tokens: maxTokens, seed, temperature: 1.0, stream: true,
                               stream_options: {include_usage: true}});
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/v1/completions`, {
      method: "POST", agent,
      headers: {"Content-Type": "application/json", "Content-Length": Buffer.byteLength(body)},
    }, (res) => {
      res.setEncoding("utf8");
      if (res.statusCode !== 200) {
        let text = "";
        res.on("data", (d) => (text += d));
        res.on("end", () => reject(new Error(`status ${res.statusCode}: ${text}`)));
        return;
      }
      let first = -1, tokens = 0, buf = "";
      res.on("data", (d) => {
        buf += d;
        let at;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, at);
          buf = buf.slice(at + 2);
          if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
          // Once the first text has come, only the usage chunk needs parsing.
          if (first >= 0 && !event.includes('"usage"')) continue;
          const j = JSON.parse(event.slice(6));
          if (j.usage) tokens = j.usage.completion_tokens;
          if (first < 0 && j.choices?.[0]?.text) first = performance.now() - t0;
        }
      });
      res.on("end", () => resolve({ttft: first / 1000, tokens}));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

// GET path: the body, through the same agent as the completions.
const get = (path) => new Promise((resolve, reject) => {
  http.get(`${base}${path}`, {agent}, (res) => {
    let text = "";
    res.setEncoding("utf8");
    res.on("data", (d) => (text += d));
    res.on("end", () => resolve(text));
    res.on("error", reject);
  }).on("error", reject);
});

const quantile = (v, q) => {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

// The server's counters: its time-to-first-token histogram (sum and count) and where its inference
// loop's time goes (steps, and the phases of steps).
const counters = ["tformer_time_to_first_token_seconds_sum", "tformer_time_to_first_token_seconds_count",
                  "tformer_steps_total", "tformer_step_seconds_total", "tformer_sample_seconds_total",
                  "tformer_decode_steps_total", "tformer_decode_rows_total", "tformer_decode_seconds_total",
                  "tformer_prefill_steps_total", "tformer_prefill_rows_total", "tformer_prefill_seconds_total"];
async function serverCounters() {
  const text = await get("/metrics");
  return Object.fromEntries(counters.map((name) => {
    const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
    if (!m) throw new Error(`serve_load.mjs: /metrics has no ${name}`);
    return [name.replace(/^tformer_/, "").replace(/_total$/, ""), Number(m[1])];
  }));
}

// CPU seconds (user + system) the server's process has used, all its threads (/proc, in ticks of
// 10 ms), and the clients' (this process).
const serverCpu = () => {
  const f = readFileSync(`/proc/${child.pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) / 100;
};
const clientCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

await one(1);  // warm-up
const trips = [];
for (let i = 0; i < 21; i++) {
  const t0 = performance.now();
  await get("/health");
  trips.push((performance.now() - t0) / 1000);
}
const roundTrip = quantile(trips, 0.5);
let seed = 10;
for (let round = 0; round < rounds; round++) for (const c of levels) {
  const before = await serverCounters();
  const ttfts = [];
  let tokens = 0;
  const cpu0 = [serverCpu(), clientCpu()];
  const t0 = performance.now();
  await Promise.all(Array.from({length: c}, async () => {
    for (let r = 0; r < perClient; r++) {
      const x = await one(seed++);
      ttfts.push(x.ttft);
      tokens += x.tokens;
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  const cpu1 = [serverCpu(), clientCpu()];
  const after = await serverCounters();
  console.log(JSON.stringify({round, clients: c, requests: c * perClient, tokens, seconds: wall, tokens_per_s: tokens / wall,
                              ttft_p50: quantile(ttfts, 0.5), ttft_p99: quantile(ttfts, 0.99),
                              server_ttft_mean: after.time_to_first_token_seconds_count >
                                  before.time_to_first_token_seconds_count ?  // none with --max-tokens 0
                                (after.time_to_first_token_seconds_sum - before.time_to_first_token_seconds_sum) /
                                  (after.time_to_first_token_seconds_count - before.time_to_first_token_seconds_count) :
                                null,
                              loop: Object.fromEntries(Object.keys(after).filter((k) => !k.startsWith("time_to"))
                                .map((k) => [k, after[k] - before[k]])),
                              health_round_trip: roundTrip, server_cpu_s: cpu1[0] - cpu0[0],
                              client_cpu_s: cpu1[1] - cpu0[1]}));
}
child.kill("SIGTERM");
await server.exited;
