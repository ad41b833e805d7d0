#!/usr/bin/env bash
# Installs the outside programs `make test-interop` runs (tools/interop/package.json: node-llama-cpp
# 3.21.1, which ships llama.cpp's prebuilt CPU binaries, @huggingface/gguf 0.4.6 and the OpenAI
# client openai 6.30.1, and playwright-core 1.64.1, which drives Debian's chromium in the page's tests) with the exact
# versions of tools/interop/package-lock.json (npm ci). Idempotent: does nothing when they are there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/tools/interop"
if [[ -f "$dir/node_modules/node-llama-cpp/package.json" && -f "$dir/node_modules/@huggingface/gguf/package.json" ]] &&
  grep -q '"version": "3.21.1"' "$dir/node_modules/node-llama-cpp/package.json" &&
  grep -q '"version": "6.30.1"' "$dir/node_modules/openai/package.json" 2>/dev/null &&
  grep -q '"version": "1.64.1"' "$dir/node_modules/playwright-core/package.json" 2>/dev/null; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-interop: npm is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
echo "install-interop: npm ci in tools/interop (node-llama-cpp, @huggingface/gguf, openai, playwright-core)"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
