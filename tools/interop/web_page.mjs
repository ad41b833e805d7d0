// The explorable page in Debian's Chromium, driven headless by playwright-core (make test-interop).
// A small model is trained for 60 steps (evaluated every 20, so that its run has curves), served
// with --model and --run, and every section of the page is clicked through:
//   - BPE: after the fifth Step, the fifth merge shown equals the fifth line of
//     `tformer bpe learn --trace` on the same corpus;
//   - RoPE: the scores before and after shifting both positions agree to 1e-12, and each row's two
//     sides agree; changing the gap changes the score;
//   - attention: a heat map per head with n x n cells, the n(n-1)/2 above the diagonal masked;
//     section 07's three checks shown as holding; the score-zero mask puts mass on a future key;
//   - playground: a streamed completion with tokens/s; tokenizer: one chip per token; KV cache:
//     the formula's bytes equal the engine's; training: one curve point per record;
//   - provenance: the page's network traffic is captured, and every number the page shows (each
//     <span class="num">) is a value of some response, written as its data-fmt says; every string
//     (class "str") is a string of some response; and no digit appears in an output outside them.
// With --screenshots DIR it also writes each section's picture there (docs/images/web-*.png).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {chromium} from "playwright-core";
import {formatNumber} from "../../web/format.js";
import {startServer} from "./serve_lib.mjs";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = path.resolve(flag("--tformer", "build/tformer"));
const shots = flag("--screenshots", "");
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tformer-web-"));
let failures = 0, checks = 0;
const check = (ok, msg) => {
  checks++;
  if (!ok) {
    failures++;
    console.log(`FAIL ${msg}`);
  }
};
function run(cmdArgs) {
  const r = spawnSync(tformer, cmdArgs, {encoding: "utf8", maxBuffer: 1 << 26});
  if (r.status !== 0) throw new Error(`tformer ${cmdArgs.join(" ")} failed: ${r.stderr}`);
  return r;
}

const cfg = path.join(work, "cfg.json");
fs.writeFileSync(cfg, JSON.stringify({context_length: 64, d_model: 48, n_layers: 2, n_heads: 4, n_kv_heads: 2,
                                      positions: "rope"}));
const runDir = path.join(work, "run");
run(["train", "--data", path.join(root, "tests/fixtures/tinyshakespeare_100k.txt"), "--config", cfg, "--out", runDir,
     "--steps", "60", "--batch", "8", "--warmup", "10", "--eval-every", "20", "--eval-steps", "2", "--log-every", "1000",
     "--lr", "0.003"]);
const server = startServer(tformer, ["--model", path.join(runDir, "model.safetensors"), "--run", runDir, "--port", "0"]);
const url = await server.url;

// Every number and string of every response the page received.
const numbers = new Set(), strings = new Set();
function collect(v) {
  if (typeof v === "number") numbers.add(v);
  else if (typeof v === "string") strings.add(v);
  else if (Array.isArray(v)) v.forEach(collect);
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) { strings.add(k); collect(x); }
}
const browser = await chromium.launch({executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]});
try {
  const page = await browser.newPage({viewport: {width: 1200, height: 900}});
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const pending = [];
  page.on("response", (r) => pending.push((async () => {
    const type = r.headers()["content-type"] || "";
    if (!type.startsWith("application/json") && !type.startsWith("text/event-stream")) return;
    const text = await r.text().catch(() => "");
    if (type.startsWith("application/json")) return collect(JSON.parse(text));
    for (const line of text.split("\n"))
      if (line.startsWith("data: {")) collect(JSON.parse(line.slice(6)));
  })()));
  await page.goto(url + "/");
  await page.waitForSelector("#tk-out .chip");
  await page.waitForSelector("#at-maps svg");
  await page.waitForSelector("#wrong-att [data-mask=zero_after_softmax]");
  await page.waitForSelector("#rp-out .rope-row:nth-child(4)");
  await page.waitForSelector("#tr-svg");
  await page.waitForSelector("#kv-out p");

  // BPE: five Steps; the fifth merge equals the learner's fifth, as `bpe learn --trace` prints it.
  for (let i = 1; i <= 5; ++i) {
    await page.click("#bpe-step");
    await page.waitForFunction((n) => document.querySelectorAll("#bpe-steps .merge-row").length === n, i);
  }
  const corpus = await page.inputValue("#bpe-corpus");
  fs.writeFileSync(path.join(work, "toy.txt"), corpus + "\n");
  const trace = run(["bpe", "learn", "--input", path.join(work, "toy.txt"), "--merges", "5", "--trace", "--output",
                     path.join(work, "toy.codes")]).stderr.split("\n");
  const fifth = (await page.locator("#bpe-steps .merge-row").nth(4).innerText()).replace(/\s+/g, " ").trim();
  const m = trace[4].match(/^step (\d+): (\S+) \+ (\S+) -> (\S+) \(count (\d+), vocab (\d+)\)$/);
  check(m !== null, `trace line 5: ${trace[4]}`);
  if (m) check(fifth === `${m[1]} ${m[2]} + ${m[3]} → ${m[4]} ${m[5]} ${m[6]}`, `fifth step shown "${fifth}" vs "${trace[4]}"`);

  // RoPE: both sides, and a shift of both positions, agree to 1e-12; a changed gap does not.
  const rope = await page.$$eval("#rp-out .rope-row", (rows) =>
    rows.map((r) => [...r.querySelectorAll(".num")].map((e) => Number(e.dataset.value))));
  check(rope.length === 3, "three RoPE rows");
  for (const r of rope) check(Math.abs(r[2] - r[3]) < 1e-12, `RoPE sides agree: ${r}`);
  check(Math.abs(rope[0][2] - rope[1][2]) < 1e-12, `RoPE shift: ${rope[0][2]} vs ${rope[1][2]}`);
  check(Math.abs(rope[0][2] - rope[2][2]) > 1e-6, "RoPE: a changed gap changes the score");

  // Attention: heat maps with the causal mask; the spec's checks; the leak of the wrong mask.
  const maps = await page.$$eval("#at-maps svg", (svgs) =>
    svgs.map((s) => [s.querySelectorAll("rect.cell").length, s.querySelectorAll("rect.masked").length]));
  const nTok = await page.$$eval("#at-maps svg", (s) => s[0].querySelectorAll("text.str").length / 2);
  check(maps.length === 4, `a map per head: ${maps.length}`);
  for (const [cells, masked] of maps)
    check(cells === nTok * (nTok + 1) / 2 && masked === nTok * (nTok - 1) / 2, `map cells ${cells}, masked ${masked}`);
  check((await page.locator("#spec-checks .ok").count()) === 1, "section 07's third check holds");
  const leak = await page.$$eval("#wrong-att [data-mask=score_zero] td.leak .num", (e) => e.map((x) => Number(x.dataset.value)));
  check(leak.length > 0 && leak.every((v) => v > 0), `the score-zero mask leaks: ${leak}`);
  check((await page.locator("#wrong-att [data-mask=correct] td.leak").count()) === 0, "the correct mask leaks nothing");

  // KV cache: the formula equals the engine's bytes; training: a point per record.
  const payload = await page.$eval("#kv-out .payload", (x) => Number(x.dataset.value));
  const held = await page.$eval("#kv-out .engine-bytes", (x) => Number(x.dataset.value));
  check(payload === held && payload > 0, `formula ${payload} = engine ${held}`);
  const records = fs.readFileSync(path.join(runDir, "metrics.jsonl"), "utf8").trim().split("\n").length;
  const points = await page.$eval("#tr-svg .curve-val", (p) => p.getAttribute("points").trim().split(/\s+/).length);
  check(points === records, `validation points ${points} = records ${records}`);

  // Playground: a streamed completion.
  await page.fill("#pg-max", "20");
  await page.click("#pg-go");
  await page.waitForSelector("#pg-stats .num", {timeout: 30000});
  check((await page.locator("#pg-out .tok").count()) > 0, "the playground streamed tokens");
  await page.locator("#pg-out .tok", {hasText: /\S/}).first().hover();
  await page.waitForSelector("#pg-tip .num");

  // Provenance: every shown number and string came from a response.
  await Promise.all(pending);
  const shown = await page.$$eval(".num", (e) => e.map((x) => ({v: x.dataset.value, f: x.dataset.fmt, t: x.textContent})));
  check(shown.length > 100, `numbers shown: ${shown.length}`);
  for (const s of shown) {
    if (s.f === "label") {
      check(strings.has(s.t) && numbers.has(Number(s.v)), `axis label ${s.t} (${s.v}) not from a response`);
      continue;
    }
    check(numbers.has(Number(s.v)), `shown number ${s.v} (${s.t}) is in no response`);
    check(s.t === formatNumber(Number(s.v), s.f), `shown number ${s.v} written "${s.t}", not as ${s.f}`);
  }
  const texts = await page.$$eval(".str", (e) => e.map((x) => x.textContent));
  for (const t of texts) check(strings.has(t), `shown string ${JSON.stringify(t)} is in no response`);
  const stray = await page.$$eval(".out", (outs) => outs.map((o) => {
    const c = o.cloneNode(true);
    c.querySelectorAll(".num, .str, input, textarea, select, option").forEach((x) => x.remove());
    return c.textContent.match(/[0-9]/) ? c.textContent.slice(0, 120) : null;
  }).filter((x) => x));
  check(stray.length === 0, `digits outside numbers from responses: ${JSON.stringify(stray)}`);
  check(errors.length === 0, `page errors: ${errors}`);

  if (shots) {
    for (const id of ["playground", "tokenizer", "attention", "rope", "layernorm", "kv", "training"])
      await page.locator("#" + id).screenshot({path: path.join(shots, `web-${id}.png`)});
  }
} finally {
  await browser.close();
  server.child.kill("SIGTERM");
  await server.exited;
  fs.rmSync(work, {recursive: true, force: true});
}
console.log(`web page: ${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
