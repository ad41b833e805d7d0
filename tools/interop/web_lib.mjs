// What the browser scripts share (tools/interop/web_page.mjs, web_screenshots.mjs): Debian's
// Chromium, headless, started the same way, and the page's sections in their order.
import {chromium} from "playwright-core";

export const SECTIONS = ["playground", "tokenizer", "attention", "rope", "layernorm", "kv", "training"];

export function launchChromium() {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync"],
  });
}
