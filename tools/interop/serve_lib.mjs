// What the scripts that drive `tformer serve` share (tools/interop/serve_openai.mjs,
// serve_soak.mjs, bench/serve_load.mjs): start the server and wait for its ready line.
import {spawn} from "node:child_process";

// Starts `tformer serve ARGS` (give --port 0) and returns {child, url, exited, stderr}: url a
// promise of the printed http://host:port (rejected when the server exits first), exited a promise
// of {code, signal}, stderr() what it has printed there so far.
export function startServer(tformer, args) {
  const child = spawn(tformer, ["serve", ...args], {stdio: ["ignore", "pipe", "pipe"]});
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({code, signal})));
  const url = new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/on (http:\/\/\S+)\s/);
      if (m) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`serve exited ${code} before it was ready: ${stderr}`)));
  });
  return {child, url, exited, stderr: () => stderr};
}
