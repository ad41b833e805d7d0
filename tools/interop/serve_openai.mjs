// `make test-interop`: tformer serve driven by the official OpenAI client (npm `openai` 6.30.1,
// pinned in package-lock.json), on an ephemeral loopback port.
//
//   node tools/interop/serve_openai.mjs --tformer build/tformer
//
// A small model is trained for 150 steps on tests/fixtures/tinyshakespeare_100k.txt (its own
// character vocabulary: every token is ASCII, so texts compare byte for byte). Then:
//   1. completions, streamed and not, with a seed: the text equals `tformer generate`'s with the
//      same seed, temperature, top-p and max tokens; usage counts prompt and completion tokens;
//   2. stop strings end the text before them (streamed and not), max_tokens gives "length";
//   3. chat (--chat-template plain), streamed and not: the text equals the completion of the
//      rendered prompt "user: ...\nassistant:" with the template's stop string;
//   4. 16 concurrent streamed requests of mixed prompt lengths on 16 slots: every one completes and
//      equals its solo run, and /metrics counts them;
//   5. errors arrive as the client's typed errors (400 naming the field, 404 for a model, 401 for
//      a key) and SIGTERM stops the server with exit status 0.
import OpenAI from "openai";
import {startServer as startServerWith} from "./serve_lib.mjs";
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = path.resolve(flag("--tformer", "build/tformer"));
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tformer-serve-"));
let failures = 0, checks = 0;
const check = (ok, msg) => {
  checks++;
  if (!ok) {
    failures++;
    console.log(`FAIL ${msg}`);
  }
};
const eq = (a, b, msg) => check(a === b, `${msg}: ${JSON.stringify(a)} !== ${JSON.stringify(b)}`);

function run(cmdArgs) {
  const r = spawnSync(tformer, cmdArgs, {encoding: "utf8", maxBuffer: 1 << 26});
  if (r.status !== 0) throw new Error(`tformer ${cmdArgs.join(" ")} failed: ${r.stderr}`);
  return r.stdout;
}

// The model: 150 steps on 100 KB of Shakespeare.
const cfg = path.join(work, "cfg.json");
fs.writeFileSync(cfg, JSON.stringify({context_length: 128, d_model: 64, n_layers: 2, n_heads: 4, positions: "rope"}));
run(["train", "--data", path.join(root, "tests/fixtures/tinyshakespeare_100k.txt"), "--config", cfg, "--out",
     path.join(work, "run"), "--steps", "150", "--batch", "8", "--warmup", "20", "--eval-every", "0",
     "--log-every", "1000", "--lr", "0.003"]);
const model = path.join(work, "run", "model.safetensors");

// `tformer generate`'s continuation (the prompt is echoed first; a newline ends the output).
function generate(prompt, maxTokens, seed, temperature, topP) {
  const out = run(["generate", "--model", model, "--prompt", prompt, "--max-new-tokens", String(maxTokens), "--seed",
                   String(seed), "--temperature", String(temperature), "--top-p", String(topP)]);
  if (!out.startsWith(prompt) || !out.endsWith("\n")) throw new Error(`unexpected generate output: ${out}`);
  return out.slice(prompt.length, -1);
}

const startServer = (extra = []) => startServerWith(tformer, ["--model", model, "--port", "0", "--parallel", "16", ...extra]);

async function collect(stream) {
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.text ?? ch.delta?.content ?? "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return {text, finish, usage, chunks};
}

const server = startServer(["--chat-template", "plain"]);
try {
  const base = await server.url;
  const client = new OpenAI({baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0});
  const id = path.basename(model);
  const models = await client.models.list();
  eq(models.data[0].id, id, "models.list id");

  // 1. Seeded completions equal `tformer generate`.
  for (const [prompt, seed, temperature, topP] of [["ROMEO:", 7, 0.8, 0.95], ["First Citizen:\nWe", 3, 0, 1],
                                                    ["The king", 11, 1.0, 0.9]]) {
    const want = generate(prompt, 40, seed, temperature, topP);
    const r = await client.completions.create({model: id, prompt, max_tokens: 40, seed, temperature, top_p: topP});
    eq(r.choices[0].text, want, `completion "${prompt}" seed ${seed}`);
    eq(r.choices[0].finish_reason, "length", "finish_reason length");
    eq(r.usage.completion_tokens, 40, "usage.completion_tokens");
    eq(r.usage.prompt_tokens, prompt.length, "usage.prompt_tokens (one token per character)");
    eq(r.usage.total_tokens, prompt.length + 40, "usage.total_tokens");
    eq(r.object, "text_completion", "object");
    const s = await collect(await client.completions.create(
        {model: id, prompt, max_tokens: 40, seed, temperature, top_p: topP, stream: true,
         stream_options: {include_usage: true}}));
    eq(s.text, want, `streamed completion "${prompt}"`);
    eq(s.finish, "length", "streamed finish_reason");
    eq(s.usage?.completion_tokens, 40, "streamed usage");
    check(s.chunks >= 10, `streamed in pieces (${s.chunks} chunks)`);
  }

  // 2. Stop strings and max_tokens.
  const full = generate("ROMEO:", 60, 5, 0.8, 0.95);
  const stop = full.slice(20, 23);
  const cut = full.indexOf(stop);
  for (const stream of [false, true]) {
    const req = {model: id, prompt: "ROMEO:", max_tokens: 60, seed: 5, temperature: 0.8, top_p: 0.95,
                 stop: ["\u0001never", stop]};
    const r = stream ? await collect(await client.completions.create({...req, stream: true}))
                     : await client.completions.create(req);
    eq(stream ? r.text : r.choices[0].text, full.slice(0, cut), `stop "${stop}" (stream ${stream})`);
    eq(stream ? r.finish : r.choices[0].finish_reason, "stop", `finish_reason stop (stream ${stream})`);
  }
  const short = await client.completions.create({model: id, prompt: "ROMEO:", max_tokens: 3, seed: 5,
                                                 temperature: 0.8, top_p: 0.95});
  eq(short.choices[0].text, full.slice(0, 3), "max_tokens 3 is the first 3 tokens");

  // 3. Chat with the plain template.
  const messages = [{role: "system", content: "Speak as Shakespeare."}, {role: "user", content: "Who goes there?"}];
  const rendered = "system: Speak as Shakespeare.\nuser: Who goes there?\nassistant:";
  const ref = await client.completions.create({model: id, prompt: rendered, max_tokens: 30, seed: 9,
                                               temperature: 0.7, stop: "\nuser:"});
  const chat = await client.chat.completions.create({model: id, messages, max_tokens: 30, seed: 9, temperature: 0.7});
  eq(chat.choices[0].message.content, ref.choices[0].text, "chat equals the rendered completion");
  eq(chat.choices[0].message.role, "assistant", "chat role");
  eq(chat.object, "chat.completion", "chat object");
  eq(chat.usage.prompt_tokens, rendered.length, "chat usage.prompt_tokens");
  const chatStream = await collect(await client.chat.completions.create(
      {model: id, messages, max_tokens: 30, seed: 9, temperature: 0.7, stream: true}));
  eq(chatStream.text, ref.choices[0].text, "streamed chat");

  // 4. 16 concurrent streams of mixed prompt lengths on 16 slots, each equal to its solo run.
  const prompts = Array.from({length: 16}, (_, i) => "ROMEO:\n" + "Good morrow, sweet lady. ".repeat(4).slice(0, 6 * i));
  const solo = [];
  for (const [i, p] of prompts.entries())
    solo.push((await client.completions.create({model: id, prompt: p, max_tokens: 24, seed: 100 + i,
                                                temperature: 0.9})).choices[0].text);
  const before = await (await fetch(`${base}/metrics`)).text();
  const together = await Promise.all(prompts.map(async (p, i) =>
      collect(await client.completions.create({model: id, prompt: p, max_tokens: 24, seed: 100 + i, temperature: 0.9,
                                               stream: true}))));
  for (let i = 0; i < 16; i++) {
    eq(together[i].text, solo[i], `concurrent request ${i} equals its solo run`);
    eq(together[i].finish, "length", `concurrent request ${i} finished`);
  }
  const metric = (text, name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, "m"))?.[1]);
  const after = await (await fetch(`${base}/metrics`)).text();
  eq(metric(after, "tformer_requests_finished_total") - metric(before, "tformer_requests_finished_total"), 16,
     "/metrics counts the 16 finished requests");
  eq(metric(after, "tformer_completion_tokens_total") - metric(before, "tformer_completion_tokens_total"), 16 * 24,
     "/metrics counts their tokens");

  // 5. Errors as the client's typed errors.
  const status = async (f) => {
    try {
      await f();
      return 200;
    } catch (e) {
      return e.status ?? String(e);
    }
  };
  eq(await status(() => client.completions.create({model: id, prompt: "x", max_tokens: -1})), 400, "max_tokens -1");
  eq(await status(() => client.completions.create({model: "nope", prompt: "x"})), 404, "unknown model");
  eq(await status(() => client.completions.create({model: id, prompt: "x", max_tokens: 500})), 400,
     "context exceeded");
} catch (e) {
  failures++;
  console.log(`FAIL ${e.stack ?? e}\n${server.stderr()}`);
} finally {
  server.child.kill("SIGTERM");
}
const end = await server.exited;
eq(end.code, 0, "exit status after SIGTERM");

// An API key: 401 without it, 200 with it.
const keyed = startServer(["--api-key", "k-123"]);
try {
  const base = await keyed.url;
  const bad = new OpenAI({baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0});
  let st = 200;
  try {
    await bad.models.list();
  } catch (e) {
    st = e.status;
  }
  eq(st, 401, "wrong API key");
  const good = new OpenAI({baseURL: `${base}/v1`, apiKey: "k-123", maxRetries: 0});
  eq((await good.models.list()).data.length, 1, "right API key");
} catch (e) {
  failures++;
  console.log(`FAIL ${e.stack ?? e}`);
} finally {
  keyed.child.kill("SIGINT");
}
eq((await keyed.exited).code, 0, "exit status after SIGINT");

fs.rmSync(work, {recursive: true, force: true});
console.log(`serve_openai: ${checks - failures} of ${checks} checks passed`);
process.exit(failures ? 1 : 0);
