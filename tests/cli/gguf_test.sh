#!/usr/bin/env bash
# End-to-end checks of GGUF through the command line (ctest "cli.gguf", label cli):
#   * `tformer export --format gguf` of a gelu_tanh (gpt2) and a llama model: logits, generate and
#     eval read the GGUF file (found by its magic, whatever its name) exactly as the model file;
#   * `tformer train --init-from` a GGUF file and a model file of the same weights: the same
#     losses; --config or --tokenizer with --init-from refused;
#   * `tformer import --from hf` of the Hugging Face fixture folders, then export: the same logits;
#     the chat template through import, export and fine-tuning;
#   * a vocabulary with a BOS: eval puts it before every window and scores every token (the loss
#     recomputed from `logits`), generate before the prompt;
#   * tformer quantize from a model file and from a GGUF file (F32, or already quantized: the same
#     bytes), every --model command reading the result (serve's greedy text is generate's);
#   * tformer convert --kv-heads: a smaller KV cache (from a Q8_0 file too), the identity at the model's own
#     count, errors;
#   * errors: an unknown --type, --format or --from, a config no llama.cpp architecture computes (named,
#     and no output file left behind).
#   tests/cli/gguf_test.sh PATH/TO/tformer
set -uo pipefail
tf="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"   # tests/
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...: the command must succeed
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}
data="$here/fixtures/tinyshakespeare_100k.txt"

cat > "$tmp/gpt2.json" <<'JSON'
{"context_length": 32, "d_model": 32, "n_layers": 2, "n_heads": 4, "activation": "gelu_tanh"}
JSON
cat > "$tmp/llama.json" <<'JSON'
{"context_length": 32, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "norm": "rmsnorm",
 "positions": "rope", "activation": "swiglu", "bias": false, "tied_embeddings": false}
JSON
for arch in gpt2 llama; do
  "$tf" train --data "$data" --config "$tmp/$arch.json" --out "$tmp/run-$arch" --steps 30 --batch 4 --eval-every 0 \
    --eval-steps 1 --threads 2 > /dev/null 2>&1
  check "$arch: train" test -s "$tmp/run-$arch/model.safetensors"
  st="$tmp/run-$arch/model.safetensors"
  "$tf" export --model "$st" --format gguf --out "$tmp/$arch.gguf" > "$tmp/export-$arch.log" 2>&1
  check "$arch: export exits 0" test $? -eq 0
  check "$arch: export names the architecture" grep -q "llama.cpp architecture $arch" "$tmp/export-$arch.log"
  cp "$tmp/$arch.gguf" "$tmp/$arch.bin"  # found by its magic, not its name
  ids="10 50 43 1 20 33 7 19"
  "$tf" logits --model "$st" --tokens "$ids" --out "$tmp/a.bin"
  "$tf" logits --model "$tmp/$arch.bin" --tokens "$ids" --out "$tmp/b.bin"
  check "$arch: logits from the GGUF file are bit-identical" cmp -s "$tmp/a.bin" "$tmp/b.bin"
  g1="$("$tf" generate --model "$st" --prompt "ROMEO:" --max-new-tokens 24 --temperature 0)"
  g2="$("$tf" generate --model "$tmp/$arch.gguf" --prompt "ROMEO:" --max-new-tokens 24 --temperature 0)"
  check "$arch: generate from the GGUF file" test -n "$g2" -a "$g1" = "$g2"
  e1="$("$tf" eval --model "$st" --data "$data" --max-tokens 2000)"
  e2="$("$tf" eval --model "$tmp/$arch.gguf" --data "$data" --max-tokens 2000)"
  check "$arch: eval from the GGUF file" test -n "$e2" -a "$e1" = "$e2"
done

# tformer quantize: Q8_0 and Q4_0 files that generate, logits and eval multiply as stored and
# train --init-from dequantizes, a quarter and an eighth of the F32 file's matrices; an unknown
# type is refused and writes nothing.
st="$tmp/run-llama/model.safetensors"
for ty in q8_0 q4_0 bf16; do
  "$tf" quantize --model "$st" --type "$ty" --out "$tmp/q-$ty.gguf" > "$tmp/quantize.log" 2>&1
  check "quantize --type $ty" grep -q "tensors ($ty)" "$tmp/quantize.log"
  check "... generate reads it" test -n "$("$tf" generate --model "$tmp/q-$ty.gguf" --prompt "ROMEO:" --max-new-tokens 8 --temperature 0)"
  check "... eval reads it" grep -q "perplexity" <("$tf" eval --model "$tmp/q-$ty.gguf" --data "$data" --max-tokens 500)
  "$tf" logits --model "$tmp/q-$ty.gguf" --tokens "1 5 2" --chunk 1 --out "$tmp/q-$ty.bin" > /dev/null 2>&1
  check "... logits reads it" test -s "$tmp/q-$ty.bin"
  "$tf" train --init-from "$tmp/q-$ty.gguf" --data "$data" --out "$tmp/ft-$ty" --steps 1 --batch 2 --context 8 \
    --eval-every 0 --eval-steps 1 --threads 2 > /dev/null 2>&1
  check "... train --init-from trains on it" test -s "$tmp/ft-$ty/model.safetensors"
done
# tformer serve runs a quantized file too: its greedy completion is generate's continuation (the
# prompt echoed first and a newline after it by generate; JSON-escaped here as the server writes it).
"$tf" serve --model "$tmp/q-q4_0.gguf" --port 0 > "$tmp/serve.out" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q " on http://" "$tmp/serve.out" && break; sleep 0.1; done
port="$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/serve.out")"
body='{"prompt": "ROMEO:", "max_tokens": 12, "temperature": 0}'
served="$(exec 3<> "/dev/tcp/127.0.0.1/${port:-1}" &&
  printf 'POST /v1/completions HTTP/1.1\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s' "${#body}" "$body" >&3 &&
  cat <&3 | sed -n 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p')"
kill -TERM "$serve_pid"
wait "$serve_pid"
check "serve --model a Q4_0 file exits 0 on SIGTERM" test $? -eq 0
generated="$("$tf" generate --model "$tmp/q-q4_0.gguf" --prompt "ROMEO:" --max-new-tokens 12 --temperature 0)"
escaped="$(printf '%s' "${generated#ROMEO:}" | awk 'BEGIN { ORS = "" } { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); if (NR > 1) print "\\n"; print }')"
served="$(sed 's/\(\\n\)*$//' <<< "$served")"  # (what $(...) took from generate's end)
check "serve --model a Q4_0 file: generate's greedy text" test -n "$served" -a "$served" = "$escaped"
check "q4_0 is smaller than q8_0, smaller than bf16" \
  test "$(stat -c %s "$tmp/q-q4_0.gguf")" -lt "$(stat -c %s "$tmp/q-q8_0.gguf")" -a \
       "$(stat -c %s "$tmp/q-q8_0.gguf")" -lt "$(stat -c %s "$tmp/q-bf16.gguf")"
# From a GGUF file: the F32 export of the same model quantizes to the same bytes as the model file,
# and a Q8_0 or Q4_0 file quantized again to its own type is unchanged (ggml's rounding is
# idempotent: a block's largest magnitude is d q with |q| the largest code, so d comes back).
for ty in q8_0 q4_0 bf16; do
  "$tf" quantize --model "$tmp/llama.gguf" --type "$ty" --out "$tmp/g-$ty.gguf" > /dev/null 2>&1
  check "quantize --type $ty from the F32 GGUF: the same file as from the model file" cmp -s "$tmp/g-$ty.gguf" "$tmp/q-$ty.gguf"
  "$tf" quantize --model "$tmp/q-$ty.gguf" --type "$ty" --out "$tmp/r-$ty.gguf" > /dev/null 2>&1
  check "quantize --type $ty of a $ty GGUF: unchanged" cmp -s "$tmp/r-$ty.gguf" "$tmp/q-$ty.gguf"
done
"$tf" export --model "$tmp/q-q8_0.gguf" --type q4_0 --out "$tmp/e-q4_0.gguf" > /dev/null 2>&1
"$tf" logits --model "$tmp/e-q4_0.gguf" --tokens "1 5 2" --chunk 1 --out "$tmp/e-q4_0.bin" > /dev/null 2>&1
check "export --type q4_0 of a Q8_0 GGUF reads back" test -s "$tmp/e-q4_0.bin"
"$tf" quantize --model "$st" --type q4_1 --out "$tmp/q-bad.gguf" > /dev/null 2> "$tmp/err.txt"
check "quantize --type q4_1 is refused" test $? -ne 0 -a ! -e "$tmp/q-bad.gguf"
check "... naming the choices" grep -q "bf16,q8_0,q4_0" "$tmp/err.txt"

# Hugging Face folders (tests/fixtures/hf): import, then export to GGUF; the three read alike.
for hf in gpt2_tiny llama_tiny llama_sharded; do
  "$tf" import --from hf "$here/fixtures/hf/$hf" --out "$tmp/$hf.safetensors" > "$tmp/import.log" 2>&1
  check "$hf: import exits 0" test $? -eq 0
  check "$hf: import names the model" grep -q "wrote $tmp/$hf.safetensors: ${hf%%_*}" "$tmp/import.log"
  "$tf" export --model "$tmp/$hf.safetensors" --format gguf --out "$tmp/$hf.gguf" > /dev/null 2>&1
  check "$hf: export exits 0" test $? -eq 0
  "$tf" logits --model "$tmp/$hf.safetensors" --tokens "258 5 77 259 264" --out "$tmp/a.bin"
  "$tf" logits --model "$tmp/$hf.gguf" --tokens "258 5 77 259 264" --out "$tmp/b.bin"
  check "$hf: logits after HF -> tformer -> GGUF are bit-identical" cmp -s "$tmp/a.bin" "$tmp/b.bin"
done
check "the chat template reaches the model file" grep -q "m\['role'\]" "$tmp/llama_tiny.safetensors"
check "the chat template reaches the GGUF file" grep -q "m\['role'\]" "$tmp/llama_tiny.gguf"
"$tf" train --init-from "$tmp/llama_tiny.gguf" --data "$data" --out "$tmp/ft-chat" --steps 1 --batch 2 --context 8 \
  --eval-every 0 --eval-steps 1 --threads 2 > /dev/null 2>&1
check "the chat template survives fine-tuning" grep -q "m\['role'\]" "$tmp/ft-chat/model.safetensors"
"$tf" import --from onnx "$here/fixtures/hf/gpt2_tiny" --out "$tmp/x.safetensors" > "$tmp/err.txt" 2>&1
check "import --from other than hf is named" grep -q -- "--from: unknown source 'onnx'" "$tmp/err.txt"

# Fine-tuning from the GGUF file and from the model file: the same weights, the same run.
ft=(--data "$data" --steps 3 --batch 4 --eval-every 3 --eval-steps 2 --log-every 1 --threads 2 --seed 3)
"$tf" train --init-from "$tmp/gpt2.gguf" --out "$tmp/ft-gguf" "${ft[@]}" > "$tmp/ft-gguf.log" 2>&1
check "train --init-from a GGUF file exits 0" test $? -eq 0
"$tf" train --init-from "$tmp/run-gpt2/model.safetensors" --out "$tmp/ft-st" "${ft[@]}" > "$tmp/ft-st.log" 2>&1
check "train --init-from a model file exits 0" test $? -eq 0
losses() { grep -E '^step ' "$1" | sed -E 's/ (tok\/s|eta) .*//'; }
check "the same losses from either" test -n "$(losses "$tmp/ft-gguf.log")" -a "$(losses "$tmp/ft-gguf.log")" = "$(losses "$tmp/ft-st.log")"
"$tf" train --config "$tmp/gpt2.json" --tokenizer "$tmp/run-gpt2/model.safetensors" --out "$tmp/fresh" "${ft[@]}" \
  > "$tmp/fresh.log" 2>&1
step0() { sed -nE 's/^step 0: train loss ([0-9.]+),.*/\1/p' "$1"; }
check "step 0 losses are printed" test -n "$(step0 "$tmp/ft-gguf.log")" -a -n "$(step0 "$tmp/fresh.log")"
check "fine-tuning starts from the trained weights (step 0 loss 0.2 below a fresh model's)" \
  awk -v a="$(step0 "$tmp/ft-gguf.log")" -v b="$(step0 "$tmp/fresh.log")" 'BEGIN { exit !(a != "" && b != "" && a + 0.2 < b) }'
"$tf" train --init-from "$tmp/gpt2.gguf" --config "$tmp/gpt2.json" --out "$tmp/ft-bad" "${ft[@]}" > "$tmp/err.txt" 2>&1
check "--config with --init-from exits 1" test $? -eq 1
check "--config with --init-from is named" grep -q -- "--config cannot be given with --init-from" "$tmp/err.txt"
check "no run folder is left" test ! -e "$tmp/ft-bad"

# A vocabulary with a BOS (LlamaTokenizer's default, read from the Hugging Face folder): generate
# and eval put it first; eval puts it at the start of every window of the context (16 here) and
# scores every token. The loss is recomputed from `logits` of each window (od + awk).
"$tf" import --from hf "$here/fixtures/hf/llama_spm" --out "$tmp/spm.safetensors" > /dev/null 2>&1
bos=$(head -c 100000 "$tmp/spm.safetensors" | grep -ao 'bos\\":[0-9]*' | head -1 | sed 's/.*://')
check "the imported SentencePiece vocabulary has a BOS" test -n "$bos"
printf 'hello world, the cat sat on the mat; the dog sat on the log, hello again and again' > "$tmp/bos.txt"
ids=($("$tf" tokenize --tokenizer "$tmp/spm.safetensors" --text "$(cat "$tmp/bos.txt")"))
"$tf" eval --model "$tmp/spm.safetensors" --data "$tmp/bos.txt" --threads 2 > "$tmp/eval.txt" 2>&1
check "eval scores every token with a BOS" grep -q "tokens scored ${#ids[@]} .*BOS first in each window" "$tmp/eval.txt"
check "the text spans more than one window" test "${#ids[@]}" -gt 32
expected=$(for ((s = 0; s < ${#ids[@]}; s += 16)); do
  win=("${ids[@]:s:16}")
  "$tf" logits --model "$tmp/spm.safetensors" --tokens "$bos ${win[*]:0:${#win[@]}-1}" --out "$tmp/w.bin" --threads 2
  od -An -v -f -w3600 "$tmp/w.bin" | awk -v targets="${win[*]}" \
    'BEGIN { split(targets, t, " ") } { m = -1e30; for (i = 1; i <= NF; i++) if ($i > m) m = $i; s = 0;
            for (i = 1; i <= NF; i++) s += exp($i - m); r++; printf "%.9f\n", m + log(s) - $(t[r] + 1) }'
done | awk '{ total += $1; n++ } END { printf "%.4f", total / n }')
check "eval's loss is the mean over BOS-led windows ($expected)" grep -q "^loss $expected " "$tmp/eval.txt"
printf 'hello world\nthe cat\n' > "$tmp/prompts.txt"
"$tf" generate --model "$tmp/spm.safetensors" --prompts-file "$tmp/prompts.txt" --max-new-tokens 3 --seed 1 \
  > "$tmp/gen.txt" 2>&1
check "generate prints each prompt as given, BOS or not" grep -q '^\[1\] the cat' "$tmp/gen.txt"

# tformer convert: fewer key/value heads (the llama model has 4 heads, 2 kv heads).
llama_st="$tmp/run-llama/model.safetensors"
"$tf" convert --model "$llama_st" --kv-heads 1 --out "$tmp/mqa.safetensors" > "$tmp/convert.txt" 2>&1
check "convert to one kv head exits 0" test $? -eq 0
check "convert reports the smaller KV cache" grep -q "2 key/value heads -> 1 (mean pooling, groups of 2); KV cache 256 -> 128 bytes per token" "$tmp/convert.txt"
"$tf" eval --model "$tmp/mqa.safetensors" --data "$data" --max-tokens 2000 --threads 2 > "$tmp/eval-mqa.txt" 2>&1
check "the converted model evaluates" grep -q "^loss " "$tmp/eval-mqa.txt"
# From a quantized file: the dequantized weights pooled as the float ones are.
"$tf" convert --model "$tmp/q-q8_0.gguf" --kv-heads 1 --out "$tmp/mqa-q8.safetensors" > "$tmp/convert.txt" 2>&1
check "convert of a Q8_0 GGUF to one kv head exits 0" test $? -eq 0
"$tf" eval --model "$tmp/mqa-q8.safetensors" --data "$data" --max-tokens 2000 --threads 2 > "$tmp/eval-mqa8.txt" 2>&1
check "... and the converted model evaluates" grep -q "^loss " "$tmp/eval-mqa8.txt"
"$tf" convert --model "$tmp/llama.gguf" --kv-heads 2 --out "$tmp/same.safetensors" > /dev/null 2>&1
"$tf" logits --model "$tmp/same.safetensors" --tokens "1 2 3 4 5" --out "$tmp/same.bin"
"$tf" logits --model "$llama_st" --tokens "1 2 3 4 5" --out "$tmp/orig.bin"
check "convert to the model's own kv heads (from its GGUF file) is the identity" cmp -s "$tmp/same.bin" "$tmp/orig.bin"
"$tf" convert --model "$llama_st" --kv-heads 3 --out "$tmp/bad.safetensors" > "$tmp/err.txt" 2>&1
check "--kv-heads 3 exits 1" test $? -eq 1
check "--kv-heads 3 names both head counts" grep -q -- "--kv-heads 3: must divide the model's 2 key/value heads (n_heads 4, n_kv_heads 2)" "$tmp/err.txt"
check "no output file is left" test ! -e "$tmp/bad.safetensors"
"$tf" convert --model "$llama_st" --kv-heads 1 --pool max --out "$tmp/bad.safetensors" > "$tmp/err.txt" 2>&1
check "--pool max is named" grep -q -- "--pool: unknown pooling 'max'" "$tmp/err.txt"

# Errors.
"$tf" export --model "$tmp/run-gpt2/model.safetensors" --out "$tmp/x.gguf" --type q4_1 > "$tmp/err.txt" 2>&1
check "unknown --type exits 1" test $? -eq 1
check "unknown --type is named" grep -q -- "--type" "$tmp/err.txt"
"$tf" export --model "$tmp/run-gpt2/model.safetensors" --out "$tmp/x.gguf" --format onnx > "$tmp/err.txt" 2>&1
check "unknown --format is named" grep -q -- "--format: unknown format 'onnx'" "$tmp/err.txt"
cat > "$tmp/post.json" <<'JSON'
{"context_length": 16, "d_model": 16, "n_layers": 1, "n_heads": 2, "norm_placement": "post"}
JSON
"$tf" init --config "$tmp/post.json" --tokenizer char --out "$tmp/post.safetensors" > /dev/null
"$tf" export --model "$tmp/post.safetensors" --out "$tmp/post.gguf" > "$tmp/err.txt" 2>&1
check "post-LN export exits 1" test $? -eq 1
check "post-LN export names norm_placement" grep -q norm_placement "$tmp/err.txt"
check "no output file is left" test ! -e "$tmp/post.gguf"

echo "gguf_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
