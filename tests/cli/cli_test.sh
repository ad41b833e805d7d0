#!/usr/bin/env bash
# End-to-end checks of the tformer command line: exact output formats, raw bytes, exit codes and
# error messages, the checkpoint as a tokenizer, chunked logits. Run by ctest (label "cli") as
#   tests/cli/cli_test.sh PATH/TO/tformer
# Prints "N passed, M failed" and exits non-zero when anything failed.
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

# tokenize prints ids on one line, single spaces, newline at the end; input is raw bytes.
check "tokenize char --text" test "$("$tf" tokenize --tokenizer char --text 'hi')" = "104 105"
printf 'a\0b\xff\n' > "$tmp/raw.bin"
check "tokenize char raw bytes" test "$("$tf" tokenize --tokenizer char --input "$tmp/raw.bin")" = "97 0 98 255 10"
"$tf" tokenize --tokenizer char --input "$tmp/raw.bin" > "$tmp/ids.txt"
check "tokenize output is one line" test "$(wc -l < "$tmp/ids.txt")" -eq 1
"$tf" detokenize --tokenizer char --input "$tmp/ids.txt" > "$tmp/back.bin"
check "detokenize restores the raw bytes" cmp -s "$tmp/raw.bin" "$tmp/back.bin"

# Errors: a message naming the problem on stderr, exit status 1, nothing on stdout.
out=$("$tf" detokenize --tokenizer char --ids "65 999" 2> "$tmp/err.txt"); rc=$?
check "detokenize bad id exits 1" test "$rc" -eq 1
check "detokenize bad id names it" grep -q 999 "$tmp/err.txt"
check "detokenize bad id prints nothing" test -z "$out"
"$tf" tokenize --tokenizer "$tmp/missing.json" --text x 2> "$tmp/err.txt"; rc=$?
check "missing tokenizer file exits 1" test "$rc" -eq 1
check "missing tokenizer file is named" grep -q missing.json "$tmp/err.txt"

# Sennrich BPE apply against the hand-derived expected outputs, from a file and from stdin.
"$tf" bpe apply --codes "$here/fixtures/bpe/toy.codes" --input "$here/fixtures/bpe/toy.input.txt" --output "$tmp/apply-file.txt"
check "bpe apply --input" cmp -s "$tmp/apply-file.txt" "$here/fixtures/bpe/toy.expected-file.txt"
"$tf" bpe apply --codes "$here/fixtures/bpe/toy.codes" < "$here/fixtures/bpe/toy.input.txt" > "$tmp/apply-stdin.txt"
check "bpe apply stdin" cmp -s "$tmp/apply-stdin.txt" "$here/fixtures/bpe/toy.expected-stdin.txt"
# bpe learn: header, the --trace line format, and empty input.
printf 'low low low lower newest newest widest\n' > "$tmp/corpus.txt"
"$tf" bpe learn --input "$tmp/corpus.txt" --merges 3 --trace --output "$tmp/codes" 2> "$tmp/trace.txt"
check "bpe learn header" test "$(head -n 1 "$tmp/codes")" = "#version: 0.2"
check "bpe learn first merge" test "$(sed -n 2p "$tmp/codes")" = "l o"
check "bpe learn --trace" grep -q '^step 1: l + o -> lo (count 4, vocab' "$tmp/trace.txt"
: > "$tmp/empty.txt"
"$tf" bpe learn --input "$tmp/empty.txt" --merges 10 --output "$tmp/empty.codes" 2> "$tmp/err.txt"; rc=$?
check "bpe learn empty input succeeds" test "$rc" -eq 0
check "bpe learn empty input writes the header only" test "$(cat "$tmp/empty.codes")" = "#version: 0.2"
check "bpe learn empty input says so" test -s "$tmp/err.txt"

# A model file: its tokenizer serves --tokenizer; logits uncached and chunked agree; context errors.
printf '{"context_length": 16, "d_model": 16, "n_layers": 2, "n_heads": 2, "positions": "rope"}\n' > "$tmp/cfg.json"
"$tf" init --config "$tmp/cfg.json" --tokenizer char --seed 3 --out "$tmp/m.safetensors" > /dev/null
check "model file as --tokenizer" test "$("$tf" tokenize --tokenizer "$tmp/m.safetensors" --text 'hi')" = "104 105"
"$tf" logits --model "$tmp/m.safetensors" --tokens "5 6 7 8 9" --out "$tmp/l0.f32"
"$tf" logits --model "$tmp/m.safetensors" --tokens "5 6 7 8 9" --chunk 2 --out "$tmp/l2.f32"
"$tf" logits --model "$tmp/m.safetensors" --tokens "5 6 7 8 9" --attention reference --out "$tmp/lr.f32"
check "logits size is T x vocab x 4" test "$(stat -c %s "$tmp/l0.f32")" -eq $((5 * 256 * 4))
close() {  # two float32 files agree within 1e-5 relative + 1e-6 absolute
  paste <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; a = $2 < 0 ? -$2 : $2; if (d > 1e-6 + 1e-5 * a) bad++ } END { exit bad > 0 }'
}
check "logits chunked = uncached" close "$tmp/l2.f32" "$tmp/l0.f32"
check "logits reference kernel = tiled" close "$tmp/lr.f32" "$tmp/l0.f32"
out=$("$tf" generate --model "$tmp/m.safetensors" --prompt "abcdef" --max-new-tokens 20 2> "$tmp/err.txt"); rc=$?
check "generate beyond the context exits 1" test "$rc" -eq 1
check "generate beyond the context names both numbers" grep -q "6 tokens and 20 new tokens" "$tmp/err.txt"
check "generate beyond the context prints nothing" test -z "$out"
out=$("$tf" generate --model "$tmp/m.safetensors" --prompt "ab" --max-new-tokens 5 --temperature 0)
out2=$("$tf" generate --model "$tmp/m.safetensors" --prompt "ab" --max-new-tokens 5 --temperature 0 --prefill-chunk 1)
check "generate echoes the prompt" test "${out:0:2}" = "ab"
check "generate greedy does not depend on the prefill chunk" test "$out" = "$out2"

# init without --tokenizer: any vocab_size, no tokenizer in the file (logits work; generate and eval
# say a tokenizer is missing); with one whose size differs from an explicit vocab_size: an error.
printf '{"vocab_size": 1000, "context_length": 16, "d_model": 16, "n_layers": 1, "n_heads": 2}\n' > "$tmp/cfg1000.json"
"$tf" init --config "$tmp/cfg1000.json" --seed 3 --out "$tmp/m1000.safetensors" > "$tmp/init.txt"; rc=$?
check "init without a tokenizer takes any vocab_size" test "$rc" -eq 0
check "init without a tokenizer says so" grep -q "no tokenizer" "$tmp/init.txt"
"$tf" logits --model "$tmp/m1000.safetensors" --tokens "999 0 500" --out "$tmp/l1000.f32"
check "logits of a tokenizer-less model: T x 1000 floats" test "$(stat -c %s "$tmp/l1000.f32")" -eq $((3 * 1000 * 4))
"$tf" generate --model "$tmp/m1000.safetensors" --prompt "ab" --max-new-tokens 2 > /dev/null 2> "$tmp/err.txt"; rc=$?
check "generate without a tokenizer exits 1" test "$rc" -eq 1
check "generate without a tokenizer names it" grep -q "carries no tokenizer" "$tmp/err.txt"
printf 'some text to score\n' > "$tmp/score.txt"
"$tf" eval --model "$tmp/m1000.safetensors" --data "$tmp/score.txt" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "eval without a tokenizer exits 1" test "$rc" -eq 1
check "eval without a tokenizer names it" grep -q "carries no tokenizer" "$tmp/err.txt"
"$tf" init --config "$tmp/cfg1000.json" --tokenizer char --out "$tmp/bad.safetensors" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "init with a tokenizer of another size exits 1" test "$rc" -eq 1
check "init with a tokenizer of another size names both" grep -q "vocab_size is 1000 but the tokenizer 'char' has 256" "$tmp/err.txt"
check "init with a tokenizer of another size writes nothing" test ! -e "$tmp/bad.safetensors"
printf '{"context_length": 16, "d_model": 16, "n_layers": 1, "n_heads": 2}\n' > "$tmp/cfg0.json"
"$tf" init --config "$tmp/cfg0.json" --out "$tmp/m0.safetensors" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "init with neither vocab_size nor a tokenizer exits 1" test "$rc" -eq 1
check "init with neither vocab_size nor a tokenizer names the key" grep -q '"vocab_size" is not set' "$tmp/err.txt"

# Sampling is reproducible by --seed; --verbose prints the KV cache payload (2 x layers x batch x
# kv_heads x tokens x head_dim x 4 bytes);
# a prompts file (CRLF line ends stripped) is one batch whose lines equal each prompt alone;
# a missing prompt is an error.
s1=$("$tf" generate --model "$tmp/m.safetensors" --prompt "ab" --max-new-tokens 8 --seed 11)
s2=$("$tf" generate --model "$tmp/m.safetensors" --prompt "ab" --max-new-tokens 8 --seed 11)
check "generate --seed repeats" test "$s1" = "$s2"
"$tf" generate --model "$tmp/m.safetensors" --prompt "ab" --max-new-tokens 4 --verbose > /dev/null 2> "$tmp/verbose.txt"
# 2 x 2 layers x 1 batch x 2 kv heads x 6 tokens x 8 head dim x 4 bytes = 1536
check "generate --verbose prints the KV payload" grep -q "KV cache payload 1536 bytes = 2 x 2 layers x 1 batch x 2 kv heads x 6 tokens x 8 head dim x 4" "$tmp/verbose.txt"
printf 'ab\r\nxyz\r\n' > "$tmp/prompts.txt"
"$tf" generate --model "$tmp/m.safetensors" --prompts-file "$tmp/prompts.txt" --max-new-tokens 5 --temperature 0 > "$tmp/batch.txt"
alone0=$("$tf" generate --model "$tmp/m.safetensors" --prompt "ab" --max-new-tokens 5 --temperature 0)
alone1=$("$tf" generate --model "$tmp/m.safetensors" --prompt "xyz" --max-new-tokens 5 --temperature 0)
check "batch line 0 equals prompt 0 alone" test "$(sed -n 1p "$tmp/batch.txt")" = "[0] $alone0"
check "batch line 1 equals prompt 1 alone" test "$(sed -n 2p "$tmp/batch.txt")" = "[1] $alone1"
"$tf" generate --model "$tmp/m.safetensors" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "generate without a prompt exits 1" test "$rc" -eq 1
check "... and says what is needed" grep -q -- "--prompt TEXT or --prompts-file FILE" "$tmp/err.txt"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
