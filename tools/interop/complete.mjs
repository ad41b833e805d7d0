// Runs a GGUF file in llama.cpp itself (node-llama-cpp 3.21.1's prebuilt CPU binaries): greedy
// completion of a prompt, printed with the prompt. For trying an exported model by hand:
//
//   node tools/interop/complete.mjs FILE.gguf "PROMPT" [MAX_TOKENS]
//
// (scripts/install-interop.sh installs node-llama-cpp into tools/interop.)
import {getLlama, LlamaCompletion} from "node-llama-cpp";

const [file, prompt = "", max = "40"] = process.argv.slice(2);
if (!file) {
  console.error("usage: node tools/interop/complete.mjs FILE.gguf PROMPT [MAX_TOKENS]");
  process.exit(1);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: file});
const context = await model.createContext({flashAttention: false});
const completion = new LlamaCompletion({contextSequence: context.getSequence()});
const text = await completion.generateCompletion(prompt, {maxTokens: Number(max), temperature: 0});
process.stdout.write(prompt + text + "\n");
await context.dispose();
await model.dispose();
