#!/usr/bin/env bash
# Quantized GGUF files written by llama.cpp's own quantizer, for tformer's loader to read in
# `make test` (tests/test_model_gguf_llama_cpp.cpp, LlamaQuantize): `llama-quantize --pure` of the
# F32 fixture tests/fixtures/gguf/llama_halves_gqa_untied.gguf (which tformer exported and llama.cpp
# checked) to BF16, Q8_0 and Q4_0, every matrix in the type (--pure: no mixed types), the norms F32.
# The test holds each tensor byte-identical to tformer's quantization of the same F32 file and the
# logits identical to those of tformer's own file.
#
# llama-quantize is not built here: build it by hand from a llama.cpp snapshot (cmake, target
# llama-quantize; CPU only) and name it:
#   LLAMA_QUANTIZE=/path/to/llama-quantize bash tools/reference/gen_llama_quantize_fixtures.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
q="${LLAMA_QUANTIZE:?name the llama-quantize binary: LLAMA_QUANTIZE=/path/to/llama-quantize}"
src="$here/../../tests/fixtures/gguf/llama_halves_gqa_untied.gguf"
out="$here/../../tests/fixtures/gguf_llama_quantize"
mkdir -p "$out"
for t in BF16 Q8_0 Q4_0; do
  lower="$(echo "$t" | tr 'A-Z' 'a-z')"
  "$q" --pure "$src" "$out/llama_halves_gqa_untied.$lower.gguf" "$t" > "$out/.log" 2>&1 ||
    { cat "$out/.log" >&2; exit 1; }
  echo "wrote $out/llama_halves_gqa_untied.$lower.gguf"
done
rm -f "$out/.log"
