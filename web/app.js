// The explorable page: it asks the endpoints of tformer serve (docs/serve.md) and draws their
// answers. Every number it shows is a value of a response, placed by num() in a <span class="num">
// that keeps the value (data-value) and how it is written (data-fmt); every string from a response
// is placed by str(). The browser tests (tools/interop/web_page.mjs) check both against the
// network traffic they capture. Nothing here computes a number that is shown.
import {formatNumber} from "./format.js";

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : document.createTextNode(k));
  return e;
}
function num(v, fmt = "sig4", cls = "") {
  if (v === null || v === undefined) return el("span", {class: "absent"}, "–");  // the response has no such value
  return el("span", {class: `num ${cls}`.trim(), "data-value": String(v), "data-fmt": fmt}, formatNumber(v, fmt));
}
function str(s, cls = "") { return el("span", {class: `str ${cls}`.trim()}, s); }

// Under --api-key every endpoint but the page itself wants "Authorization: Bearer KEY": the key
// the user gives (asked for on a 401) is kept for this tab only.
function headers() {
  const h = {"Content-Type": "application/json"};
  const key = sessionStorage.getItem("tformer-api-key");
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}
class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
async function call(method, path, body) {
  const r = await fetch(path, {method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body)});
  const j = await r.json();
  if (!r.ok) throw new HttpError(r.status, j.error ? j.error.message : r.statusText);
  return j;
}
const get = (p) => call("GET", p);
const post = (p, b) => call("POST", p, b);
const list = (s) => s.split(",").map((x) => Number(x.trim())).filter((x) => x === x);  // user input, not shown
function fail(target, e) { target.replaceChildren(el("p", {class: "err"}, String(e.message || e))); }
function debounce(f, ms = 250) { let t; return () => { clearTimeout(t); t = setTimeout(f, ms); }; }
const shade = (p) => `rgba(36, 87, 197, ${(0.08 + 0.6 * p).toFixed(3)})`;  // a colour, not a shown number
const heat = (p) => `rgba(220, 80, 30, ${Math.sqrt(Math.max(0, Math.min(1, p))).toFixed(3)})`;  // sqrt: small weights show

// ---- playground ---------------------------------------------------------------------------------
let controller = null;
function tipAt(tip, ev, content) {
  tip.replaceChildren(content);
  tip.hidden = false;
  tip.style.left = `${Math.min(ev.clientX + 14, innerWidth - 330)}px`;
  tip.style.top = `${ev.clientY + 16}px`;
}
function tokenTip(lp) {
  const t = el("table");
  lp.forEach((x) => {
    t.append(el("tr", {}, el("td", {}, "chosen"), el("td", {}, "“", str(x.token), "”"), el("td", {}, num(x.logprob, "fixed3"))));
    for (const [tok, l] of Object.entries(x.top))  // the alternatives: the chosen token is the row above
      if (tok !== x.token) t.append(el("tr", {}, el("td", {}, ""), el("td", {}, "“", str(tok), "”"), el("td", {}, num(l, "fixed3"))));
  });
  return el("div", {}, el("div", {class: "note"}, "token · log-probability (top alternatives)"), t);
}
async function generate() {
  const out = $("pg-out"), stats = $("pg-stats"), tip = $("pg-tip");
  const prompt = $("pg-prompt").value;
  out.replaceChildren(el("span", {class: "prompt"}, prompt));
  stats.replaceChildren();
  controller = new AbortController();
  $("pg-go").disabled = true; $("pg-stop").disabled = false;
  const body = {prompt, max_tokens: Number($("pg-max").value), temperature: Number($("pg-temp").value),
                top_p: Number($("pg-topp").value), top_k: Number($("pg-topk").value), logprobs: 5, stream: true,
                stream_options: {include_usage: true}};
  if ($("pg-seed").value !== "") body.seed = Number($("pg-seed").value);
  try {
    const r = await fetch("/v1/completions", {method: "POST", headers: headers(), body: JSON.stringify(body),
                                              signal: controller.signal});
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const line = buf.slice(0, at); buf = buf.slice(at + 2);
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const j = JSON.parse(line.slice(6));
        if (j.error) throw new Error(j.error.message);
        if (j.usage) {
          stats.replaceChildren(num(j.usage.completion_tokens, "int"), " tokens · ",
            num(j.timings.predicted_per_second, "fixed1"), " tokens/s after the first · first token after ",
            num(j.timings.time_to_first_token_ms, "fixed1"), " ms");
          continue;
        }
        const c = j.choices[0];
        if (!c || !c.text) continue;
        const lp = c.logprobs ? c.logprobs.tokens.map((t, i) => ({token: t, logprob: c.logprobs.token_logprobs[i],
                                                                   top: c.logprobs.top_logprobs[i]})) : [];
        // One span per token, shaded by its own probability, when the chunk's text is its tokens'
        // texts (a chunk holds several tokens when one ends a UTF-8 character another began, or
        // after text held back for a stop string); otherwise the chunk's text as one span with
        // every token in its tooltip.
        const parts = lp.length && lp.map((x) => x.token).join("") === c.text ? lp.map((x) => [x.token, [x]]) : [[c.text, lp]];
        for (const [text, tokens] of parts) {
          const span = el("span", {class: "tok str"}, text);
          if (tokens.length) {
            span.style.background = shade(Math.exp(tokens[0].logprob));
            span.addEventListener("mouseenter", (ev) => tipAt(tip, ev, tokenTip(tokens)));
            span.addEventListener("mouseleave", () => (tip.hidden = true));
          }
          out.append(span);
        }
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") stats.replaceChildren(el("span", {class: "err"}, String(e.message)));
  } finally {
    $("pg-go").disabled = false; $("pg-stop").disabled = true;
  }
}

// ---- tokenizer ----------------------------------------------------------------------------------
const chipColours = ["#e3ecff", "#ffe9d6", "#dcf5e3", "#f6e0f5", "#fff4c4", "#dff3f7"];
async function tokenize() {
  try {
    const j = await post("/tokenize", {content: $("tk-text").value, with_pieces: true});
    $("tk-counts").replaceChildren(num(j.n_chars, "int"), " characters · ", num(j.n_bytes, "int"), " bytes · ",
                                   num(j.n_tokens, "int"), " tokens");
    $("tk-out").replaceChildren(...j.tokens.map((t, i) => el("span", {class: `chip ${chipClass(t)}`.trim(), style: `background:${chipColours[i % 6]}`},
                                                             chipText(t), el("span", {class: "id"}, num(t.id, "int")))));
  } catch (e) {
    $("tk-counts").replaceChildren();  // the counts were of the text before
    fail($("tk-out"), e);
  }
}

// A piece that is not whole UTF-8 characters (one byte of a character the tokenizer splits) arrives
// with U+FFFD in its text: show its bytes instead, from the response's "bytes". Whitespace pieces
// get a class whose CSS marks them, so that a space is not an empty chip.
const partial = (t) => t.piece.includes("\uFFFD") && t.bytes.length > 0;
function chipClass(t) { return partial(t) ? "bytes" : /^\s+$/.test(t.piece) ? (t.piece.includes("\n") ? "ws nl" : "ws") : ""; }
function chipText(t) {
  if (!partial(t)) return str(t.piece);
  return el("span", {class: "byte-list"}, ...t.bytes.flatMap((b, i) => [i ? " " : "", num(b, "hex2")]));
}

let bpeSteps = 0;
async function bpe() {
  try {
    const j = await post("/widgets/bpe", {corpus: $("bpe-corpus").value, steps: bpeSteps,
                                          min_frequency: Number($("bpe-minf").value), apply: $("bpe-apply").value});
    bpeSteps = j.steps.length;
    const words = el("table", {class: "t"}, el("tr", {}, el("th", {}, "word"), el("th", {class: "n"}, "count"),
                                                   el("th", {}, "pieces after the merges so far")));
    j.words.forEach((w, i) => words.append(el("tr", {}, el("td", {}, str(w.word)), el("td", {class: "n"}, num(w.count, "int")),
                                                 el("td", {}, ...j.segments[i].map((s) => str(s, "seg"))))));
    $("bpe-words").replaceChildren(words);
    const steps = el("table", {class: "t"}, el("tr", {}, el("th", {}, "step"), el("th", {}, "merge"), el("th", {class: "n"}, "count"),
                                                   el("th", {class: "n"}, "vocabulary")));
    j.steps.forEach((s) => steps.append(el("tr", {class: "merge-row"}, el("td", {}, num(s.step, "int")),
      el("td", {}, str(s.first, "seg"), " + ", str(s.second, "seg"), " → ", str(s.symbol, "seg")),
      el("td", {class: "n"}, num(s.count, "int")), el("td", {class: "n"}, num(s.vocab_size, "int")))));
    $("bpe-steps").replaceChildren(j.steps.length ? steps : el("p", {class: "note"}, "Press Step to learn the first merge."));
    const pairs = el("table", {class: "t"}, el("tr", {}, el("th", {}, "pair"), el("th", {class: "n"}, "count")));
    j.pairs.slice(0, 10).forEach((p, i) => pairs.append(el("tr", {class: i === 0 ? "best" : ""},
      el("td", {}, str(p.first, "seg"), " + ", str(p.second, "seg")), el("td", {class: "n"}, num(p.count, "int")))));
    $("bpe-pairs").replaceChildren(pairs, el("p", {class: "note"}, "Ties: ", str(j.tie_rule)),
                                   j.stop_reason ? el("p", {class: "note"}, str(j.stop_reason)) : "");
    $("bpe-applied").replaceChildren(el("h4", {}, "The learned merges applied to new text"),
      el("div", {}, ...j.applied.map((w) => el("span", {style: "margin-right:14px"}, ...w.map((s) => str(s, "seg"))))));
  } catch (e) { fail($("bpe-words"), e); }
}

// ---- attention ----------------------------------------------------------------------------------
let hatches = 0;  // each map's own pattern id
const wsMark = (piece) => (/^\s+$/.test(piece) ? (piece.includes("\n") ? "\u21B5" : "\u2423") : null);
// A cell is hatched where the response's weight is exactly zero above the diagonal (the causal
// mask as the kernel applied it); a weight above the diagonal that is not zero would be drawn with
// a red outline, never hidden under the hatching. Sizes in pixels: the maps of a short prompt four
// to a row, a long prompt's fewer and no smaller than 12 px a cell.
function heatMap(weights, tokens, tip, perRow) {
  const n = tokens.length, pad = 56;
  const cell = Math.min(22, Math.max(12, Math.floor((1000 / perRow - 14 - pad) / n)));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", pad + n * cell + 4); svg.setAttribute("height", pad + n * cell + 4);
  const add = (tag, a, text) => { const e = document.createElementNS(ns, tag); for (const k in a) e.setAttribute(k, a[k]);
                                  if (text !== undefined) e.textContent = text; svg.append(e); return e; };
  const defs = add("defs", {});
  const hatch = `hatch${++hatches}`;
  defs.innerHTML = `<pattern id="${hatch}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
                   `<rect width="6" height="6" fill="#f0f1f4"/><line x1="0" y1="0" x2="0" y2="6" stroke="#d3d7df" stroke-width="3"/></pattern>`;
  add("text", {x: 2, y: 12, "font-size": 11, fill: "#5c6474"}, "query ↓ key →");
  const label = (attrs, piece) => {
    const mark = wsMark(piece);  // a whitespace piece: a visible mark, not an empty label
    return mark ? add("text", {...attrs, fill: "#8a93a6"}, mark) : add("text", {...attrs, class: "str"}, piece);
  };
  tokens.forEach((t, i) => {
    label({x: pad - 4, y: pad + i * cell + cell * 0.7, "text-anchor": "end", "font-size": 11, "font-family": "monospace"}, t.piece);
    label({x: 0, y: 0, transform: `translate(${pad + i * cell + cell * 0.7},${pad - 4}) rotate(-60)`, "font-size": 11,
           "font-family": "monospace"}, t.piece);
  });
  for (let i = 0; i < n; ++i)
    for (let j = 0; j < n; ++j) {
      const w = weights[i][j], masked = j > i && w === 0, leak = j > i && w !== 0;
      const r = add("rect", {x: pad + j * cell, y: pad + i * cell, width: cell - 1, height: cell - 1,
                             fill: masked ? `url(#${hatch})` : heat(w), class: masked ? "masked" : leak ? "cell leak" : "cell"});
      if (leak) { r.setAttribute("stroke", "#c62828"); r.setAttribute("stroke-width", "2"); }
      r.addEventListener("mouseenter", (ev) => tipAt(tip, ev, el("div", {}, "query “", str(tokens[i].piece),
        "” reads key “", str(tokens[j].piece), "”: weight ", num(w, "fixed4"), masked ? " (masked)" : "")));
      r.addEventListener("mouseleave", () => (tip.hidden = true));
    }
  return svg;
}
async function modelAttention() {
  const out = $("at-maps");
  try {
    const j = await post("/widgets/model_attention", {prompt: $("at-prompt").value, layer: Number($("at-layer").value)});
    const perRow = j.tokens.length <= 24 ? Math.min(4, j.heads.length) : j.tokens.length <= 40 ? 2 : 1;
    out.replaceChildren(...j.heads.map((h) => el("div", {class: "map"},
      el("h4", {}, "head ", num(h.head, "int"), " · KV head ", num(h.kv_head, "int")), heatMap(h.weights, j.tokens, $("at-tip"), perRow))),
      el("p", {class: "note legend"}, "Colour: the weight, white for none, deep orange for all of a row's mass; hatched: masked (weight exactly zero). Hover a cell for its value."));
  } catch (e) { fail(out, e); }
}
function matrix(w, offset, leakCheck) {
  const t = el("table", {class: "mat"});
  w.forEach((row, i) => t.append(el("tr", {}, ...row.map((p, jx) => {
    const future = jx > i + offset;
    const td = el("td", {class: future ? (p !== 0 ? "leak" : "masked") : ""}, num(p, "fixed3"));
    if (!future || p !== 0) td.style.background = future ? "rgba(198,40,40,0.15)" : heat(p);
    return td;
  }))));
  return t;
}
function vecs(rows) {
  return el("span", {class: "eq"}, ...rows.flatMap((r, i) => [i ? ", " : "",
    el("span", {class: "tuple"}, "(", num(r[0], "sig4"), ", ", num(r[1], "sig4"), ")")]));
}
async function specAttention() {
  try {
    const j = await post("/widgets/attention", {example: "spec"});
    const yes = (b) => el("span", {class: b ? "ok" : "bad"}, b ? "holds" : "fails");
    $("spec-att").replaceChildren(
      el("div", {class: "card"}, el("h4", {}, "Weights (full pass)"), matrix(j.full.weights, 0), el("div", {}, "outputs ", vecs(j.full.out))),
      el("div", {class: "card"}, el("h4", {}, "The last row from the cache (offset ", num(j.cached.offset, "int"), ")"), matrix(j.cached.weights, j.cached.offset),
         el("div", {}, "output ", vecs(j.cached.out))),
      el("div", {class: "card", id: "spec-checks"}, el("h4", {}, "The three checks"),
         el("p", {}, "The first row has one legal key: its output minus the first value, largest coordinate ", num(j.first_row_error, "exp2")),
         el("p", {}, "Cached equals full: the cached row minus the full pass's last, largest coordinate ", num(j.cached_vs_full, "exp2")),
         el("p", {}, "A changed future value (the third set to ", vecs([j.changed_value]), ") leaves row one as it was: ", yes(j.earlier_row_immune),
            el("br"), "row one before ", vecs([j.full.out[1]]), ", after ", vecs([j.changed.out[1]]))));
    const cards = [];
    for (const [mask, title] of [["correct", "Correct: masked before the softmax"], ["score_zero", "Wrong: masked score replaced by zero"],
                                 ["zero_after_softmax", "Wrong: zeroed after the softmax"]]) {
      const w = await post("/widgets/attention", {queries: j.queries, keys: j.queries, values: j.values, mask});
      cards.push(el("div", {class: "card", "data-mask": mask}, el("h4", {}, title), matrix(w.weights, 0),
        el("table", {class: "t"}, el("tr", {}, el("th", {class: "n"}, "row sum"), el("th", {class: "n"}, "mass on future keys")),
           ...w.row_sums.map((s, i) => el("tr", {}, el("td", {class: "n"}, num(s, "fixed4")),
                                              el("td", {class: "n"}, num(w.future_mass[i], "fixed4")))))));
    }
    $("wrong-att").replaceChildren(...cards);
  } catch (e) { fail($("spec-att"), e); }
}

// ---- RoPE ---------------------------------------------------------------------------------------
async function rope() {
  const out = $("rp-out");
  try {
    const q = list($("rp-q").value), k = list($("rp-k").value), m = Number($("rp-m").value), n = Number($("rp-n").value);
    const theta = Number($("rp-theta").value), s = Number($("rp-shift").value);
    const cases = [["positions m, n", m, n], ["both shifted", m + s, n + s], ["gap changed by one", m, n + 1]];
    const t = el("table", {class: "t"}, el("tr", {}, el("th", {}, ""), el("th", {class: "n"}, "m"), el("th", {class: "n"}, "n"),
      el("th", {class: "n"}, "R(mθ)q · R(nθ)k"), el("th", {class: "n"}, "q · R((n−m)θ)k"), el("th", {class: "n"}, "difference")));
    for (const [name, a, b] of cases) {
      const r = await post("/widgets/rope", {q, k, m: a, n: b, theta});
      t.append(el("tr", {class: "rope-row"}, el("td", {}, name), el("td", {class: "n"}, num(r.m, "int")), el("td", {class: "n"}, num(r.n, "int")),
        el("td", {class: "n eq"}, num(r.rotated, "fixed15")), el("td", {class: "n eq"}, num(r.relative, "fixed15")),
        el("td", {class: "n eq"}, num(r.difference, "exp1"))));
    }
    out.replaceChildren(t, el("p", {class: "note"}, "The two sides agree to the last bits of a double (the difference column: rounding, " +
      "as each side rotates by another angle). Shifting both positions leaves the score as it was; changing the gap changes it."));
  } catch (e) { fail(out, e); }
}

// ---- LayerNorm ----------------------------------------------------------------------------------
async function layernorm() {
  const out = $("ln-out");
  try {
    const body = {x: list($("ln-x").value), shift: Number($("ln-shift").value), scale: Number($("ln-scale").value),
                  eps: Number($("ln-eps").value)};
    const g = list($("ln-gain").value), b = list($("ln-bias").value);
    if (g.length) body.gain = g;
    if (b.length) body.bias = b;
    const j = await post("/widgets/layernorm", body);
    const row = (name, v) => el("tr", {}, el("td", {}, name), ...v.map((x) => el("td", {class: "n eq"}, num(x, "fixed6"))));
    out.replaceChildren(el("table", {class: "t"}, row("x", j.x), row("LayerNorm(x)", j.y), row("LayerNorm(x + c)", j.shifted),
                                                   row("LayerNorm(a·x)", j.scaled), row("gain · LayerNorm(x) + bias", j.affine)),
      el("p", {}, "adding c: largest change ", num(j.shift_error, "exp2"), " · scaling by a: largest change ", num(j.scale_error, "exp2"),
         " (ε keeps it from being exact) · after gain and bias: mean ", num(j.affine_mean, "fixed4"), ", variance ", num(j.affine_var, "fixed4")));
  } catch (e) { fail(out, e); }
}

// ---- KV cache -----------------------------------------------------------------------------------
async function kvCache() {
  const out = $("kv-out");
  try {
    const body = {kv_heads: Number($("kv-heads").value)};
    if ($("kv-tokens").value !== "") body.tokens = Number($("kv-tokens").value);
    if ($("kv-batch").value !== "") body.batch = Number($("kv-batch").value);
    const j = await post("/widgets/kv_cache", body);
    const f = (kv, bytes) => el("p", {class: "eq big"}, num(j.keys_and_values, "int"), " (K and V) × ", num(j.layers, "int"), " layers × ", num(j.batch, "int"), " batch × ",
      num(kv, "int"), " KV heads × ", num(j.tokens, "int"), " tokens × ", num(j.head_dim, "int"), " head width × ",
      num(j.bytes_per_entry, "int"), " bytes ", el("span", {class: "nowrap"}, "= ", num(bytes, "group", "payload"), " bytes"));
    out.replaceChildren(el("h4", {}, "The model as loaded"), f(j.kv_heads, j.payload_bytes),
      el("p", {}, "The engine holds ", num(j.engine_bytes, "group", "engine-bytes"), " bytes for its ", num(j.engine_slots, "int"), " slots of ",
         num(j.engine_context, "int"), " tokens."),
      el("h4", {}, "With the KV heads chosen above (tformer convert --kv-heads)"), f(j.with_kv_heads, j.payload_bytes_with_kv_heads),
      el("h4", {}, "With one KV head per query head (plain multi-head attention)"), f(j.n_heads, j.payload_bytes_one_kv_head_per_query_head));
  } catch (e) { fail(out, e); }
}

// ---- training curves ----------------------------------------------------------------------------
function curves(j) {
  const ns = "http://www.w3.org/2000/svg", W = 760, H = 360, L = 56, R = 16, T = 14, B = 40;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("id", "tr-svg");
  const add = (tag, a, text) => { const e = document.createElementNS(ns, tag); for (const k in a) e.setAttribute(k, a[k]);
                                  if (text !== undefined) e.textContent = text; svg.append(e); return e; };
  const X = (x) => L + (x - j.x_axis.lo) / (j.x_axis.hi - j.x_axis.lo) * (W - L - R);  // drawing positions only
  const Y = (y) => T + (j.y_axis.hi - y) / (j.y_axis.hi - j.y_axis.lo) * (H - T - B);
  j.y_axis.ticks.forEach((t, i) => { add("line", {x1: L, x2: W - R, y1: Y(t), y2: Y(t), stroke: "#e6e8ee"});
    add("text", {x: L - 6, y: Y(t) + 4, "text-anchor": "end", "font-size": 12, class: "num", "data-value": String(t), "data-fmt": "label"}, j.y_axis.labels[i]); });
  j.x_axis.ticks.forEach((t, i) => { add("line", {x1: X(t), x2: X(t), y1: T, y2: H - B, stroke: "#f0f1f4"});
    add("text", {x: X(t), y: H - B + 16, "text-anchor": "middle", "font-size": 12, class: "num", "data-value": String(t), "data-fmt": "label"}, j.x_axis.labels[i]); });
  add("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#c8cdd8"});
  add("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, fill: "#5c6474"}, "step");
  add("text", {x: 0, y: 0, transform: `translate(14,${(T + H - B) / 2}) rotate(-90)`, "text-anchor": "middle", "font-size": 12, fill: "#5c6474"}, "loss");
  for (const [name, pts, colour] of [["train", j.train, "#1f77b4"], ["val", j.val, "#ff7f0e"]]) {
    if (!pts.length) continue;
    add("polyline", {points: pts.map(([x, y]) => `${X(x)},${Y(y)}`).join(" "), fill: "none", stroke: colour, "stroke-width": 2, class: `curve-${name}`});
    for (const [x, y] of pts) add("circle", {cx: X(x), cy: Y(y), r: 2.5, fill: colour});
  }
  add("rect", {x: W - R - 106, y: T + 8, width: 100, height: 42, fill: "#fff", stroke: "#dde1e8"});
  add("line", {x1: W - R - 98, x2: W - R - 78, y1: T + 22, y2: T + 22, stroke: "#1f77b4", "stroke-width": 2});
  add("text", {x: W - R - 72, y: T + 26, "font-size": 12}, "train");
  add("line", {x1: W - R - 98, x2: W - R - 78, y1: T + 40, y2: T + 40, stroke: "#ff7f0e", "stroke-width": 2});
  add("text", {x: W - R - 72, y: T + 44, "font-size": 12}, "validation");
  return svg;
}
async function training() {
  const out = $("tr-out");
  try {
    const j = await get("/run");
    if (!j.train.length && !j.val.length) {
      out.replaceChildren(el("p", {class: "note"}, j.waiting ? str(j.waiting) : "No loss values yet."));
      return;
    }
    const l = j.last || {};
    out.replaceChildren(curves(j), el("p", {class: "stats"}, "run ", str(j.dir), " · last record: step ", num(l.step, "int"),
      ", train loss ", num(l.train_loss, "fixed4"), ", validation loss ", num(l.val_loss, "fixed4"), ", learning rate ",
      num(l.lr, "exp2"), ", ", num(l.tokens_per_s, "fixed0"), " tokens/s"));
  } catch (e) {
    out.replaceChildren(el("p", {class: "note"}, String(e.message)));
    return;
  }
}

// ---- start --------------------------------------------------------------------------------------
async function start() {
  let props;
  try {
    props = await get("/props");
  } catch (e) {
    // Any failure but a refused key (a 401 under --api-key): no key would help, so say what failed.
    if (e.status !== 401) return fail($("model-line"), e);
    // Under --api-key: ask for the key, keep it for this tab, and start again with it.
    $("key-form").hidden = false;
    $("key-note").textContent = "This server wants an API key (tformer serve --api-key).";
    $("key-form").onsubmit = (ev) => {
      ev.preventDefault();
      sessionStorage.setItem("tformer-api-key", $("key-input").value);
      location.reload();
    };
    return;
  }
  const hasModel = props.model !== null;
  if (hasModel) {
    const c = props.config;
    $("model-line").replaceChildren("Model ", str(props.model), ": ", num(c.n_layers, "int"), " layers, ", num(c.n_heads, "int"),
      " heads (", num(c.n_kv_heads, "int"), " KV heads), width ", num(c.d_model, "int"), ", context ", num(c.context_length, "int"),
      ", vocabulary ", num(props.vocab_size, "int"), " · ", num(props.parallel, "int"), " slots of ", num(props.context, "int"), " tokens");
    for (let l = 0; l < c.n_layers; ++l) $("at-layer").append(el("option", {value: l}, `layer ${l}`));
    for (let h = 1; h <= c.n_heads; ++h) if (c.n_heads % h === 0) $("kv-heads").append(el("option", {value: h}, String(h)));
    $("kv-heads").value = String(c.n_kv_heads);
    $("pg-max").value = String(Math.min(120, Math.max(1, props.context - 16)));  // an input's default
    $("kv-tokens").value = String(props.context); $("kv-batch").value = String(props.parallel);
    $("pg-go").onclick = generate;
    $("pg-stop").onclick = () => controller && controller.abort();
    $("tk-text").oninput = debounce(tokenize);
    $("at-prompt").oninput = debounce(modelAttention, 400);
    $("at-layer").onchange = modelAttention;
    for (const id of ["kv-tokens", "kv-batch", "kv-heads"]) $(id).oninput = debounce(kvCache);
    tokenize(); modelAttention(); kvCache();
  } else {
    $("model-line").textContent = "No model is loaded (tformer serve --run DIR alone): the toy widgets and the curves work; start it with --model M for the rest.";
    for (const e of document.querySelectorAll(".needs-model")) e.replaceChildren(el("p", {class: "note"}, "Needs a model: start tformer serve with --model M."));
  }
  $("bpe-step").onclick = () => { bpeSteps += 1; bpe(); };
  $("bpe-back").onclick = () => { bpeSteps = Math.max(0, bpeSteps - 1); bpe(); };
  $("bpe-reset").onclick = () => { bpeSteps = 0; bpe(); };
  for (const id of ["bpe-corpus", "bpe-minf", "bpe-apply"]) $(id).oninput = debounce(bpe);
  for (const id of ["rp-q", "rp-k", "rp-m", "rp-n", "rp-theta", "rp-shift"]) $(id).oninput = debounce(rope);
  for (const id of ["ln-x", "ln-shift", "ln-scale", "ln-eps", "ln-gain", "ln-bias"]) $(id).oninput = debounce(layernorm);
  $("ln-small").onclick = () => { $("ln-x").value = "0.001, 0.002, 0.004, 0.007"; $("ln-shift").value = "10"; layernorm(); };
  bpe(); specAttention(); rope(); layernorm(); training();
  if (props.run) setInterval(training, 2000);
}
start();
