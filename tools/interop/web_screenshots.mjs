// The README's pictures of the explorable page (docs/images/web-*.png): serves a model you trained
// (and its run's curves) and photographs each section in Debian's Chromium, after a streamed
// completion (with a token's tooltip open) and five BPE Steps. The checks are web_page.mjs's; this
// script only takes the pictures, so that they show a real model rather than the test's tiny one.
//
//   bash scripts/install-deps.sh --interop && bash scripts/install-interop.sh     # chromium, playwright-core
//   T=build/tformer; D=../shared/data/tinyshakespeare.txt                          # or any text
//   $T tokenizer train --type byte-bpe --vocab-size 1000 --input $D --output /tmp/bpe1k.json
//   $T train --data $D --tokenizer byte-bpe:/tmp/bpe1k.json --config configs/demo.json \
//     --out /tmp/shots-run --steps 1500 --eval-every 100
//   node tools/interop/web_screenshots.mjs --tformer $T --run /tmp/shots-run --out docs/images
// (a byte-level BPE vocabulary, so that the tokenizer shows fewer tokens than characters)
import path from "node:path";
import {startServer} from "./serve_lib.mjs";
import {launchChromium, SECTIONS} from "./web_lib.mjs";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tformer = path.resolve(flag("--tformer", "build/tformer"));
const runDir = path.resolve(flag("--run", ""));
const model = path.resolve(flag("--model", path.join(runDir, "model.safetensors")));
const out = path.resolve(flag("--out", "docs/images"));

const server = startServer(tformer, ["--model", model, "--run", runDir, "--port", "0"]);
const url = await server.url;
const browser = await launchChromium();
try {
  const page = await browser.newPage({viewport: {width: 1200, height: 900}, deviceScaleFactor: 1});
  await page.goto(url + "/");
  for (const sel of ["#tk-out .chip", "#at-maps svg", "#wrong-att [data-mask=zero_after_softmax]", "#rp-out .rope-row",
                     "#tr-svg", "#kv-out p", "#ln-out table"])
    await page.waitForSelector(sel);
  // The tokenizer with a line break (its chip is marked); the attention maps of a second layer;
  // the KV cache with one KV head (GQA's saving); LayerNorm's small-variance input (eps shows).
  await page.fill("#tk-text", "To be, or not to be: that is the question.\nO Romeo, Romeo!");
  await page.selectOption("#at-layer", "1");
  await page.selectOption("#kv-heads", "1");
  await page.click("#ln-small");
  await page.waitForTimeout(1000);
  for (let i = 1; i <= 5; ++i) {
    await page.click("#bpe-step");
    await page.waitForFunction((n) => document.querySelectorAll("#bpe-steps .merge-row").length === n, i);
  }
  await page.fill("#pg-max", "110");
  await page.click("#pg-go");
  await page.waitForSelector("#pg-stats .num", {timeout: 60000});
  for (const id of SECTIONS) {
    const file = path.join(out, `web-${id}.png`);
    const section = page.locator("#" + id);
    await section.scrollIntoViewIfNeeded();
    if (id === "playground") {
      // A token's tooltip open: hover it once the section is in place, then photograph the section's
      // box from the page (the tooltip is fixed-positioned above it).
      const toks = page.locator("#pg-out .tok", {hasText: /\S/});
      await toks.nth(Math.min(12, (await toks.count()) - 1)).hover();
      await page.waitForSelector("#pg-tip:not([hidden]) .num");
      const box = await section.boundingBox(), tip = await page.locator("#pg-tip").boundingBox();
      const bottom = Math.max(box.y + box.height, tip.y + tip.height + 8);  // the tooltip may hang below
      await page.screenshot({path: file, clip: {x: box.x, y: box.y, width: box.width, height: bottom - box.y}});
    } else {
      await page.mouse.move(0, 0);
      await section.screenshot({path: file});
    }
    console.log(file);
  }
} finally {
  await browser.close();
  server.child.kill("SIGTERM");
  await server.exited;
}
