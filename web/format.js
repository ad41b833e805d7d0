// How the page writes a number it shows (web/app.js's num()); the browser tests import it too, to
// check that each shown number is its response's value written this way.
// How a shown number is written: "int", "fixedN", "expN", "sigN" or "group" (thousands separated).
export function formatNumber(v, fmt) {
  if (v === null || v === undefined) return "–";
  if (fmt === "int") return String(v);
  if (fmt === "group") return Number(v).toLocaleString("en-US");
  const d = Number(fmt.slice(fmt.search(/\d/)));
  if (fmt.startsWith("fixed")) return Number(v).toFixed(d);
  if (fmt.startsWith("exp")) return Number(v).toExponential(d);
  return Number(v).toPrecision(d);
}
