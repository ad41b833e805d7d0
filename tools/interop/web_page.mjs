// The explorable page in Debian's Chromium, driven headless by playwright-core (make test-interop).
// A small model is trained for 60 steps (on text with a few accented letters, whose bytes its
// character tokenizer splits), evaluated every 20 (so that its run has curves), served
// with --model and --run, and every section of the page is clicked through:
//   - BPE: after the fifth Step, the fifth merge shown equals the fifth line of
//     `tformer bpe learn --trace` on the same corpus;
//   - RoPE: the scores before and after shifting both positions agree to 1e-12, and each row's two
//     sides agree; changing the gap changes the score;
//   - attention: a heat map per head with n x n cells, the n(n-1)/2 above the diagonal masked;
//     section 07's three checks shown as holding; the score-zero mask puts mass on a future key;
//   - attention, another layer: the maps redrawn are that layer's, each cell coloured from a direct
//     POST of the same request; section 07's first two checks hold to 1e-12 and the cached row
//     equals the full pass's last; the weights zeroed after the softmax leave rows summing below one;
//   - LayerNorm: every row against an independent computation here (to 1e-12), the shift cancelling,
//     the scale cancelling but for eps, and eps mattering on the small-variance input;
//   - RoPE with a shift that takes both positions below zero;
//   - playground: a streamed completion with tokens/s, its text equal to `tformer generate`'s with
//     the same seed and sampling; tokenizer: one chip per token, the bytes of a split character
//     shown as bytes; KV cache: the formula's bytes equal the engine's, and follow the KV-heads
//     choice; training: one curve point per record, and a record appended to metrics.jsonl is drawn
//     within the page's redraw interval;
//   - the page of `tformer serve --run DIR` alone: it waits for a run that has not started, draws
//     the curves while a real `tformer train` writes them, the toy widgets work, and the model's
//     sections say what is needed; under --api-key the page asks for the key and works with it;
//   - provenance: the page's network traffic is captured, and every number the page shows (each
//     <span class="num">) is a value of some response, written as its data-fmt says; every string
//     (class "str") is a string of some response; and no digit appears in an output outside them.
// (The README's pictures, docs/images/web-*.png, come from tools/interop/web_screenshots.mjs.)
import {spawn, spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {formatNumber} from "../../web/format.js";
import {startServer} from "./serve_lib.mjs";
import {launchChromium, SECTIONS} from "./web_lib.mjs";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = path.resolve(flag("--tformer", "build/tformer"));
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tformer-web-"));
let failures = 0, checks = 0;
// A step that never ends fails the run, naming the step, instead of hanging CI.
// Each step has 240 s from its start (the whole run takes about 1.5 minutes).
let phase = "start", watchdog = null;
const step = (name) => {
  phase = name;
  if (process.env.WEB_PAGE_VERBOSE) console.log(`.. ${name}`);
  clearTimeout(watchdog);
  watchdog = setTimeout(() => {
    console.log(`FAIL web page: step "${phase}" has not finished in 240 s`);
    process.exit(1);
  }, 240000).unref();
};
step("start");
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
// The corpus with a line of accented words, so that the character tokenizer (the data's own bytes)
// holds the two bytes of "é", and splits it.
const data = path.join(work, "data.txt");
fs.writeFileSync(data, fs.readFileSync(path.join(root, "tests/fixtures/tinyshakespeare_100k.txt"), "utf8") +
                 "\nA café, a résumé, and a naïve rosé.\n");
run(["train", "--data", data, "--config", cfg, "--out", runDir,
     "--steps", "60", "--batch", "8", "--warmup", "10", "--eval-every", "20", "--eval-steps", "2", "--log-every", "1000",
     "--lr", "0.003"]);
const server = startServer(tformer, ["--model", path.join(runDir, "model.safetensors"), "--run", runDir, "--port", "0"]);
const url = await server.url;

// Every number and string of every response the page received.
const numbers = new Set(), strings = new Set();
let lastStream = "";  // the playground's last server-sent events, as received
function collect(v) {
  if (typeof v === "number") numbers.add(v);
  else if (typeof v === "string") strings.add(v);
  else if (Array.isArray(v)) v.forEach(collect);
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) { strings.add(k); collect(x); }
}
const browser = await launchChromium();
try {
  const page = await browser.newPage({viewport: {width: 1200, height: 900}});
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const pending = [];
  page.on("response", (r) => pending.push((async () => {
    const type = r.headers()["content-type"] || "";
    if (!type.startsWith("application/json") && !type.startsWith("text/event-stream")) return;
    const text = await r.text().catch(() => "");
    if (!text) return;  // a response cut off (the page closed while the curves were polled)
    if (type.startsWith("application/json")) return collect(JSON.parse(text));
    if (r.url().endsWith("/v1/completions")) lastStream = text;
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
  // The sections web_screenshots.mjs photographs are the page's own, in its order.
  const ids = await page.$$eval("main > section[id]", (els) => els.map((e) => e.id));
  check(JSON.stringify(ids.filter((id) => SECTIONS.includes(id))) === JSON.stringify(SECTIONS),
        `the page's sections ${JSON.stringify(ids)} hold ${SECTIONS} in that order`);

  step("bpe");
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
  // Back: four merges, and the top candidate (the pair counts recounted after them) is the fifth.
  await page.click("#bpe-back");
  await page.waitForFunction(() => document.querySelectorAll("#bpe-steps .merge-row").length === 4);
  const best = (await page.locator("#bpe-pairs tr.best").innerText()).replace(/\s+/g, " ").trim();
  if (m) check(best === `${m[2]} + ${m[3]} ${m[5]}`, `after Back the best candidate "${best}" is the fifth merge ${m[2]} + ${m[3]} (${m[5]})`);
  const tie = await page.locator("#bpe-pairs p.note .str").first().innerText();
  check(/largest count/.test(tie) && /greatest pair/.test(tie), `the tie rule is shown: ${tie}`);
  // The merges applied to new text: as `tformer bpe apply` segments it with the same five merges.
  await page.click("#bpe-step");
  await page.waitForFunction(() => document.querySelectorAll("#bpe-steps .merge-row").length === 5);
  const applyText = await page.inputValue("#bpe-apply");
  fs.writeFileSync(path.join(work, "apply.txt"), applyText + "\n");
  run(["bpe", "apply", "--codes", path.join(work, "toy.codes"), "--input", path.join(work, "apply.txt"), "--output",
       path.join(work, "applied.txt")]);
  const cli = fs.readFileSync(path.join(work, "applied.txt"), "utf8").trim().replace(/@@ /g, "+");
  const shownApplied = await page.$$eval("#bpe-applied > div > span", (ws) =>
    ws.map((w) => [...w.querySelectorAll(".seg")].map((x) => x.textContent.replace(/<\/w>$/, "")).join("+")).join(" "));
  check(shownApplied === cli, `the merges applied to "${applyText}": shown "${shownApplied}", bpe apply "${cli}"`);
  // Reset, then a minimum frequency of 7: Steps stop after the merges that often (counts 9, 9, 7),
  // and the page says why.
  await page.click("#bpe-reset");
  await page.waitForFunction(() => document.querySelectorAll("#bpe-steps .merge-row").length === 0);
  await page.fill("#bpe-minf", "7");
  for (let i = 0; i < 5; ++i) await page.click("#bpe-step");
  await page.waitForFunction(() => /frequency/.test(document.querySelector("#bpe-pairs")?.textContent || ""), null, {timeout: 10000})
    .catch(() => {});
  const counts7 = await page.$$eval("#bpe-steps .merge-row", (rs) => rs.map((r) => Number(r.querySelectorAll(".num")[1].dataset.value)));
  check(counts7.length === 3 && counts7.every((c) => c >= 7), `min frequency 7: merges with counts ${counts7}`);
  await page.fill("#bpe-minf", "2");
  await page.click("#bpe-reset");

  step("rope");
  // RoPE: both sides, and a shift of both positions, agree to 1e-12; a changed gap does not.
  const rope = await page.$$eval("#rp-out .rope-row", (rows) =>
    rows.map((r) => [...r.querySelectorAll(".num")].map((e) => Number(e.dataset.value))));
  check(rope.length === 3, "three RoPE rows");
  for (const r of rope) check(Math.abs(r[2] - r[3]) < 1e-12, `RoPE sides agree: ${r}`);
  check(Math.abs(rope[0][2] - rope[1][2]) < 1e-12, `RoPE shift: ${rope[0][2]} vs ${rope[1][2]}`);
  check(Math.abs(rope[0][2] - rope[2][2]) > 1e-6, "RoPE: a changed gap changes the score");

  step("attention");
  // Attention: a heat map per head, every cell of it drawn from the response of a direct request
  // for the same prompt and layer: hatched exactly where the weight is zero above the diagonal,
  // coloured by the weight everywhere else (a weight above the diagonal that were not zero would
  // be a cell with the "leak" outline, so the test would see it); the spec's checks; the leak of
  // the wrong mask.
  const heat = (p) => `rgba(220, 80, 30, ${Math.sqrt(Math.max(0, Math.min(1, p))).toFixed(3)})`;
  const direct = async (prompt, layer) => (await fetch(url + "/widgets/model_attention", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({prompt, layer})})).json();
  const drawn = () => page.$$eval("#at-maps svg", (svgs) => svgs.map((s) => [...s.querySelectorAll("rect.cell, rect.masked")]
    .map((r) => (r.getAttribute("class") === "masked" ? "masked" : `${r.getAttribute("class")} ${r.getAttribute("fill")}`))));
  const want = (j) => j.heads.map((h) => h.weights.flatMap((row, i) => row.map((w, k) =>
    (k > i && w === 0 ? "masked" : `${k > i ? "cell leak" : "cell"} ${heat(w)}`))));
  const prompt0 = await page.inputValue("#at-prompt");
  const layer0 = await direct(prompt0, 0);
  const nTok = layer0.tokens.length;
  const maps = await drawn();
  check(maps.length === 4 && layer0.heads.length === 4, `a map per head: ${maps.length}`);
  for (const cells of maps)
    check(cells.filter((c) => c === "masked").length === nTok * (nTok - 1) / 2 && cells.length === nTok * nTok,
          `map of ${cells.length} cells, ${cells.filter((c) => c === "masked").length} masked, for ${nTok} tokens`);
  check(JSON.stringify(maps) === JSON.stringify(want(layer0)), "layer 0's maps are drawn cell by cell from its weights");
  check((await page.locator("#spec-checks .ok").count()) === 1, "section 07's third check holds");
  const leak = await page.$$eval("#wrong-att [data-mask=score_zero] td.leak .num", (e) => e.map((x) => Number(x.dataset.value)));
  check(leak.length === 3, `the score-zero mask leaks onto each of the three future keys: ${leak}`);
  check((await page.locator("#wrong-att [data-mask=correct] td.leak").count()) === 0, "the correct mask leaks nothing");

  step("kv");
  // KV cache: the formula equals the engine's bytes; training: a point per record.
  const payload = await page.$eval("#kv-out .payload", (x) => Number(x.dataset.value));
  const held = await page.$eval("#kv-out .engine-bytes", (x) => Number(x.dataset.value));
  check(payload === held && payload > 0, `formula ${payload} = engine ${held}`);
  const records = fs.readFileSync(path.join(runDir, "metrics.jsonl"), "utf8").trim().split("\n").length;
  const points = await page.$eval("#tr-svg .curve-val", (p) => p.getAttribute("points").trim().split(/\s+/).length);
  check(points === records, `validation points ${points} = records ${records}`);

  step("section 07");
  // Section 07's first two checks, the cached row, and the row sums of the wrong masks.
  const specChecks = await page.$$eval("#spec-checks p .num", (e) => e.map((x) => Number(x.dataset.value)));
  check(specChecks.length >= 2 && specChecks[0] < 1e-12 && specChecks[1] < 1e-12,
        `section 07: first row = first value, cached = full (${specChecks.slice(0, 2)})`);
  const specMats = await page.$$eval("#spec-att table.mat", (ts) =>
    ts.map((t) => [...t.querySelectorAll("tr")].map((r) => [...r.querySelectorAll(".num")].map((x) => Number(x.dataset.value)))));
  check(specMats.length === 2 && JSON.stringify(specMats[1][0]) === JSON.stringify(specMats[0][2]),
        `the cached row ${JSON.stringify(specMats[1])} equals the full pass's last ${JSON.stringify(specMats[0] && specMats[0][2])}`);
  const sums = async (mask) => page.$$eval(`#wrong-att [data-mask=${mask}] table.t tr`, (rows) =>
    rows.slice(1).map((r) => Number(r.querySelector(".num").dataset.value)));
  const okSums = await sums("correct"), zeroSums = await sums("zero_after_softmax");
  check(okSums.length === 3 && okSums.every((v) => Math.abs(v - 1) < 1e-12), `correct mask: rows sum to one (${okSums})`);
  check(zeroSums.length === 3 && zeroSums[0] < 0.999 && zeroSums[1] < 0.999 && Math.abs(zeroSums[2] - 1) < 1e-12,
        `zeroed after the softmax: the first rows sum below one, the last to one (${zeroSums})`);

  step("layer");
  // Another layer, then another prompt: the maps are redrawn from that request's weights.
  const layer1 = await direct(prompt0, 1);
  const redrawnAs = async (j, what) => {
    const w = JSON.stringify(want(j));
    let same = false;
    for (const until = Date.now() + 10000; !same && Date.now() < until; await page.waitForTimeout(100))
      same = JSON.stringify(await drawn()) === w;
    check(same, `after choosing ${what} the maps are its weights`);
  };
  await page.selectOption("#at-layer", "1");
  await redrawnAs(layer1, "layer 1");
  check(JSON.stringify(want(layer0)) !== JSON.stringify(want(layer1)), "the two layers' maps differ");
  await page.fill("#at-prompt", "To be, or not");
  await redrawnAs(await direct("To be, or not", 1), "another prompt");

  step("kv heads");
  // The KV-heads choice: the second formula follows it, and its factors multiply to its bytes.
  const formula = (k) => page.$$eval("#kv-out p.eq.big", (ps, k) => [...ps[k].querySelectorAll(".num")].map((x) => Number(x.dataset.value)), k);
  await page.selectOption("#kv-heads", "1");
  await page.waitForFunction(() => document.querySelectorAll("#kv-out p.eq.big")[1]?.querySelectorAll(".num")[3]?.dataset.value === "1",
                             null, {timeout: 10000}).catch(() => {});
  const [asLoaded, chosen] = [await formula(0), await formula(1)];
  const product = (f) => f.slice(0, -1).reduce((a, b) => a * b, 1);
  check(chosen[3] === 1 && product(chosen) === chosen[chosen.length - 1], `one KV head: ${chosen}`);
  check(asLoaded[3] === 2 && chosen[chosen.length - 1] * 2 === asLoaded[asLoaded.length - 1],
        `one KV head holds half of two's bytes: ${chosen} vs ${asLoaded}`);

  step("layernorm");
  // LayerNorm: each row against a computation here, then the small-variance input.
  const lnRef = (x, eps) => {
    const m = x.reduce((a, b) => a + b, 0) / x.length;
    const v = x.reduce((a, b) => a + (b - m) * (b - m), 0) / x.length;
    return x.map((e) => (e - m) / Math.sqrt(v + eps));
  };
  const lnShown = () => page.$$eval("#ln-out table.t tr", (rows) => rows.map((r) => [...r.querySelectorAll(".num")].map((x) => Number(x.dataset.value))));
  const lnStats = () => page.$$eval("#ln-out p .num", (e) => e.map((x) => Number(x.dataset.value)));
  const maxDiff = (a, b) => Math.max(...a.map((v, i) => Math.abs(v - b[i])));
  const lnCheck = async (label) => {
    const [x, y, shifted, scaled, affine] = await lnShown();
    const [shiftErr, scaleErr, affMean, affVar] = await lnStats();
    const eps = Number(await page.inputValue("#ln-eps")), c = Number(await page.inputValue("#ln-shift"));
    const a = Number(await page.inputValue("#ln-scale"));
    const gain = (await page.inputValue("#ln-gain")).split(",").map(Number), bias = (await page.inputValue("#ln-bias")).split(",").map(Number);
    const ref = lnRef(x, eps), refScaled = lnRef(x.map((e) => a * e), eps);
    const refAffine = ref.map((e, i) => gain[i] * e + bias[i]);
    check(maxDiff(y, ref) < 1e-12, `${label}: LayerNorm(x) ${y} vs ${ref}`);
    // Looser: x + c is rounded before either side normalises it, and a shifted row's mean cancels
    // digits (in the small-variance input, deviations far below c), so summation order shows more.
    check(maxDiff(shifted, lnRef(x.map((e) => e + c), eps)) < 1e-9, `${label}: LayerNorm(x + c) ${shifted}`);
    check(maxDiff(scaled, refScaled) < 1e-12, `${label}: LayerNorm(a x) ${scaled} vs ${refScaled}`);
    check(maxDiff(affine, refAffine) < 1e-12, `${label}: gain and bias ${affine} vs ${refAffine}`);
    check(Math.abs(scaleErr - maxDiff(scaled, y)) < 1e-15, `${label}: the scale's change ${scaleErr} is the rows' largest difference`);
    const m = refAffine.reduce((s, e) => s + e, 0) / refAffine.length;
    check(Math.abs(affMean - m) < 1e-12 && Math.abs(affVar - refAffine.reduce((s, e) => s + (e - m) * (e - m), 0) / refAffine.length) < 1e-12,
          `${label}: gain and bias give mean ${affMean}, variance ${affVar}`);
    check(Math.abs(affMean) > 0.01 || Math.abs(affVar - 1) > 0.01, `${label}: gain and bias move the distribution`);
    return {shiftErr, scaleErr};
  };
  const lnDefault = await lnCheck("default input");
  check(lnDefault.shiftErr < 1e-12, `adding a constant cancels: ${lnDefault.shiftErr}`);
  check(lnDefault.scaleErr > 0 && lnDefault.scaleErr < 1e-5, `scaling cancels but for eps: ${lnDefault.scaleErr}`);
  await page.click("#ln-small");
  await page.waitForFunction(() => document.querySelector("#ln-out table.t .num")?.dataset.value === "0.001", null, {timeout: 10000});
  const lnSmall = await lnCheck("small-variance input");
  check(lnSmall.scaleErr > 0.05 && lnSmall.scaleErr > 1e4 * lnDefault.scaleErr,
        `eps matters when the variance is small: ${lnSmall.scaleErr} vs ${lnDefault.scaleErr}`);

  step("rope negative");
  // RoPE: a shift that takes both positions below zero is still a shift.
  await page.fill("#rp-shift", "-12");
  await page.waitForFunction(() => document.querySelectorAll("#rp-out .rope-row")[1]?.querySelector(".num")?.dataset.value === "-9",
                             null, {timeout: 10000}).catch(() => {});
  const ropeNeg = await page.$$eval("#rp-out .rope-row", (rows) => rows.map((r) => [...r.querySelectorAll(".num")].map((e) => Number(e.dataset.value))));
  check(ropeNeg.length === 3 && ropeNeg[1][0] === -9 && ropeNeg[1][1] === -5, `RoPE shifted below zero: ${JSON.stringify(ropeNeg)}`);
  if (ropeNeg.length === 3) {
    check(Math.abs(ropeNeg[1][2] - ropeNeg[1][3]) < 1e-12 && Math.abs(ropeNeg[0][2] - ropeNeg[1][2]) < 1e-12,
          `RoPE: a negative shift keeps the score: ${ropeNeg[0][2]} vs ${ropeNeg[1][2]}`);
  }

  step("tokenizer");
  // Tokenizer: a character the tokenizer splits into bytes shows them as bytes; a space is marked.
  const text = "né x";
  await page.fill("#tk-text", text);
  await page.waitForFunction((n) => document.querySelectorAll("#tk-out .chip").length === n, Buffer.from(text).length, {timeout: 10000})
    .catch(() => {});
  const chips = await page.$$eval("#tk-out .chip", (cs) => cs.map((c) => ({cls: c.className, bytes: [...c.querySelectorAll(".byte-list .num")]
    .map((x) => Number(x.dataset.value)), text: c.querySelector(".byte-list")?.textContent})));
  const e = [...Buffer.from("é")];
  check(chips.length === 5 && chips[1].cls.includes("bytes") && chips[2].cls.includes("bytes") &&
        chips[1].bytes[0] === e[0] && chips[2].bytes[0] === e[1] && chips[1].text === "0xC3" && chips[2].text === "0xA9",
        `"é" as its bytes 0xC3 0xA9: ${JSON.stringify(chips)}`);
  check(chips.length === 5 && chips[3].cls.includes("ws"), `the space's chip is marked: ${JSON.stringify(chips[3])}`);
  const counts = await page.$$eval("#tk-counts .num", (e) => e.map((x) => Number(x.dataset.value)));
  check(JSON.stringify(counts) === JSON.stringify([4, 5, 5]), `4 characters, 5 bytes, 5 tokens: ${counts}`);

  step("playground");
  // Playground: a streamed completion, the same text as `tformer generate` with the same settings.
  await page.fill("#pg-max", "20");
  await page.click("#pg-go");
  await page.waitForSelector("#pg-stats .num", {timeout: 30000});
  check((await page.locator("#pg-out .tok").count()) > 0, "the playground streamed tokens");
  const pgPrompt = await page.inputValue("#pg-prompt");
  const shownText = await page.$eval("#pg-out", (o) => [...o.querySelectorAll(".tok")].map((t) => t.textContent).join(""));
  const gen = run(["generate", "--model", path.join(runDir, "model.safetensors"), "--prompt", pgPrompt, "--max-new-tokens", "20",
                   "--seed", await page.inputValue("#pg-seed"), "--temperature", await page.inputValue("#pg-temp"),
                   "--top-p", await page.inputValue("#pg-topp")]).stdout;
  check(gen === pgPrompt + shownText + "\n", `the playground's text ${JSON.stringify(shownText)} equals generate's ${JSON.stringify(gen)}`);
  // Each token's shade is its own probability, and its tooltip the stream's log-probabilities.
  await Promise.all(pending);
  const streamed = lastStream.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)))
    .filter((j) => j.choices && j.choices[0] && j.choices[0].logprobs)
    .flatMap((j) => j.choices[0].logprobs.tokens.map((t, i) => ({token: t, lp: j.choices[0].logprobs.token_logprobs[i],
                                                                  top: j.choices[0].logprobs.top_logprobs[i]})));
  const spans = await page.$$eval("#pg-out .tok", (ts) => ts.map((t) => ({text: t.textContent, bg: t.style.background})));
  // (the browser keeps a colour's alpha in 8 bits: compare to within one step of 1/255)
  const alpha = (bg) => Number((bg.match(/rgba\(36, 87, 197, ([0-9.]+)\)/) || [])[1]);
  check(spans.length === streamed.length && spans.every((sp, i) => sp.text === streamed[i].token &&
                                                             Math.abs(alpha(sp.bg) - (0.08 + 0.6 * Math.exp(streamed[i].lp))) < 1 / 255),
        `a span per streamed token, shaded by its probability (${spans.length} spans, ${streamed.length} tokens): ` +
        JSON.stringify(spans.slice(0, 3)) + JSON.stringify(streamed.slice(0, 3).map((x) => [x.token, x.lp])));
  const firstVisible = spans.findIndex((sp) => /\S/.test(sp.text));
  await page.locator("#pg-out .tok").nth(firstVisible).hover();
  await page.waitForSelector("#pg-tip .num");
  const tipNums = await page.$$eval("#pg-tip .num", (e) => e.map((x) => Number(x.dataset.value)));
  const tipStrs = await page.$$eval("#pg-tip .str", (e) => e.map((x) => x.textContent));
  const tok0 = streamed[firstVisible];
  const alternatives = tok0 ? Object.entries(tok0.top).filter(([t]) => t !== tok0.token) : [];
  check(tok0 && JSON.stringify(tipNums) === JSON.stringify([tok0.lp, ...alternatives.map(([, l]) => l)]) &&
        JSON.stringify(tipStrs) === JSON.stringify([tok0.token, ...alternatives.map(([t]) => t)]),
        `the tooltip shows the stream's log-probabilities: ${tipStrs} ${tipNums} vs ${tok0 && JSON.stringify(tok0)}`);

  step("live redraw");
  // Training: a record appended to metrics.jsonl is drawn at the next redraw (every 2 s).
  const metricsPath = path.join(runDir, "metrics.jsonl");
  const lines = fs.readFileSync(metricsPath, "utf8").trim().split("\n");
  const lastRec = JSON.parse(lines[lines.length - 1]);
  const added = {...lastRec, step: lastRec.step + 20, val_loss: lastRec.val_loss * 0.9, train_loss: lastRec.train_loss * 0.9};
  fs.appendFileSync(metricsPath, JSON.stringify(added) + "\n");
  const redrawn = await page.waitForFunction((n) => document.querySelector("#tr-svg .curve-val")?.getAttribute("points").trim().split(/\s+/).length === n,
                                             lines.length + 1, {timeout: 8000}).then(() => true, () => false);
  check(redrawn, `the appended record (step ${added.step}) is drawn within the redraw interval`);
  const lastShown = await page.$$eval("#tr-out p.stats .num", (e) => e.map((x) => Number(x.dataset.value)));
  check(lastShown[0] === added.step, `the last record shown is step ${added.step}: ${lastShown}`);

  step("provenance");
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

  step("no model");
  // The page of `tformer serve --run DIR` alone: the toy widgets and the curves, no model sections.
  // Its run folder is empty when the page opens: the page says it waits, and draws the curves
  // while a real `tformer train` writes them.
  const run2 = path.join(work, "run2");
  fs.mkdirSync(run2);
  const alone = startServer(tformer, ["--run", run2, "--port", "0"]);
  try {
    const page2 = await browser.newPage({viewport: {width: 1200, height: 900}});
    const errors2 = [];
    page2.on("pageerror", (e) => errors2.push(String(e)));
    await page2.goto((await alone.url) + "/");
    await page2.waitForFunction(() => /does not exist yet/.test(document.querySelector("#tr-out")?.textContent || ""));
    const trainer = spawn(tformer, ["train", "--data", data, "--config", cfg, "--out", run2, "--steps", "300", "--batch", "8",
                                    "--warmup", "10", "--eval-every", "10", "--eval-steps", "1", "--log-every", "1000",
                                    "--lr", "0.003"], {stdio: "ignore"});
    const trained = new Promise((resolve) => trainer.on("exit", resolve));
    // While it trains: a curve with fewer points than the run will have, then every record drawn.
    // The trainer is paused (SIGSTOP) once it has written a few records, until the page has drawn
    // them: the page polls every 2 s, and the whole run can take less than that (it did once the
    // decode kernels sped up), which made "while it trains" a race.
    const metrics2 = path.join(run2, "metrics.jsonl");
    const lines = () => (fs.existsSync(metrics2) ? fs.readFileSync(metrics2, "utf8").trim().split("\n").filter(Boolean).length : 0);
    let exited = false;
    trained.then(() => { exited = true; });
    for (const t0 = Date.now(); lines() < 3 && !exited && Date.now() - t0 < 60000;) await new Promise((r) => setTimeout(r, 5));
    const paused = !exited && trainer.kill("SIGSTOP");
    check(paused, `the trainer was paused while it trained (${lines()} records written)`);
    const atPause = lines();
    await page2.waitForFunction((n) => (document.querySelector("#tr-svg .curve-val")?.getAttribute("points") || "").trim()
      .split(/\s+/).filter(Boolean).length >= n, atPause, {timeout: 20000}).catch(() => {});
    const early = await page2.$eval("#tr-svg .curve-val", (p) => p.getAttribute("points").trim().split(/\s+/).length)
      .catch(() => 0);
    if (paused) trainer.kill("SIGCONT");
    check((await trained) === 0, "tformer train wrote its run");
    const records2 = fs.readFileSync(path.join(run2, "metrics.jsonl"), "utf8").trim().split("\n").length;
    const drawn2 = await page2.waitForFunction((n) => document.querySelector("#tr-svg .curve-val")?.getAttribute("points").trim()
      .split(/\s+/).length === n, records2, {timeout: 8000}).then(() => true, () => false);
    check(drawn2 && early < records2, `the curves grew while train wrote them: ${early} points early, ${records2} records at the end`);
    await page2.waitForSelector("#rp-out .rope-row:nth-child(4)");
    await page2.waitForSelector("#wrong-att [data-mask=zero_after_softmax]");
    const needs = await page2.$$eval(".needs-model", (e) => e.map((x) => x.textContent.trim()));
    check(needs.length >= 4 && needs.every((t) => t.startsWith("Needs a model")), `model sections without a model: ${JSON.stringify(needs)}`);
    check((await page2.locator("#pg-go").count()) === 0 && (await page2.locator("#at-maps").count()) === 0,
          "no playground or model maps without a model");
    check((await page2.textContent("#model-line")).includes("No model is loaded"), "the model line says none is loaded");
    await page2.click("#bpe-step");
    await page2.waitForSelector("#bpe-steps .merge-row");
    check(errors2.length === 0, `page errors without a model: ${errors2}`);
    await page2.close();
  } finally {
    alone.child.kill("SIGTERM");
    await alone.exited;
  }

  step("api key");
  // Under --api-key: the page asks for the key, and works once it is given.
  const keyed = startServer(tformer, ["--model", path.join(runDir, "model.safetensors"), "--api-key", "s3cret-key", "--port", "0"]);
  try {
    const page3 = await browser.newPage({viewport: {width: 1200, height: 900}});
    const errors3 = [];
    page3.on("pageerror", (e) => errors3.push(String(e)));
    await page3.goto((await keyed.url) + "/");
    await page3.waitForSelector("#key-form:not([hidden])");
    check(/API key/.test(await page3.textContent("#key-note")), "the page asks for the API key");
    await page3.fill("#key-input", "s3cret-key");
    await page3.click("#key-go");
    await page3.waitForSelector("#at-maps svg", {timeout: 15000});
    await page3.waitForSelector("#rp-out .rope-row:nth-child(4)");
    check((await page3.locator("#key-form").isHidden()), "with the key the form is gone");
    check(errors3.length === 0, `page errors with a key: ${errors3}`);
    await page3.close();
  } finally {
    keyed.child.kill("SIGTERM");
    await keyed.exited;
  }
} finally {
  await browser.close();
  server.child.kill("SIGTERM");
  await server.exited;
  fs.rmSync(work, {recursive: true, force: true});
}
console.log(`web page: ${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
