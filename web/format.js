// How the page writes a number it shows (web/app.js's num()); the browser tests import it too, to
// check that each shown number is its response's value written this way.
// How a shown number is written: "int", "fixedN", "expN", "sigN", "group" (thousands separated) or
// "hexN" (0x and at least N upper-case hex digits: a byte).
export function formatNumber(v, fmt) {
  if (v === null || v === undefined) return "–";
  if (fmt === "int") return String(v);
  if (fmt === "group") return Number(v).toLocaleString("en-US");
  if (fmt.startsWith("hex")) return "0x" + Number(v).toString(16).toUpperCase().padStart(Number(fmt.slice(3)), "0");
  const d = Number(fmt.slice(fmt.search(/\d/)));
  if (fmt.startsWith("fixed")) return Number(v).toFixed(d);
  if (fmt.startsWith("exp")) return Number(v).toExponential(d);
  return Number(v).toPrecision(d);
}
