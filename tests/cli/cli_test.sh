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

# tokenize --jsonl: one JSON string per line in, one line of ids per text out, same ids as one by one;
# a line that is not a JSON string is an error naming it, with nothing printed.
printf '"hi"\n"a\\nb"\n""\n' > "$tmp/texts.jsonl"
check "tokenize --jsonl" test "$("$tf" tokenize --tokenizer char --jsonl --input "$tmp/texts.jsonl")" = "$(printf '104 105\n97 10 98\n')"
check "... one line per text, an empty text an empty line" test "$("$tf" tokenize --tokenizer char --jsonl --input "$tmp/texts.jsonl" | wc -l)" -eq 3
printf '"ok"\nnot json\n' > "$tmp/bad.jsonl"
out=$("$tf" tokenize --tokenizer char --jsonl --input "$tmp/bad.jsonl" 2> "$tmp/err.txt"); rc=$?
check "tokenize --jsonl bad line exits 1" test "$rc" -eq 1
check "... naming the line" grep -q "line 2 is not one valid JSON string" "$tmp/err.txt"
check "... printing nothing" test -z "$out"

# tokenizer train --pattern: the pattern is kept in the JSON; GPT-2's two files cannot keep it (a note
# says so); an unknown pattern is refused.
printf 'It IS 1234567 DON'"'"'T stop.\nWe ARE 7654321 WON'"'"'T go!\n%.0s' $(seq 300) > "$tmp/corpus.txt"
"$tf" tokenizer train --vocab-size 300 --pattern cl100k --input "$tmp/corpus.txt" --output "$tmp/cl.json" \
  --gpt2-output "$tmp/cl-gpt2" 2> "$tmp/err.txt"
check "tokenizer train --pattern cl100k" grep -q '"pattern":"cl100k"' "$tmp/cl.json"
check "... reports the pattern" grep -q "pattern cl100k" "$tmp/err.txt"
check "... notes that encoder.json and vocab.bpe do not keep it" grep -q "no place for the pattern 'cl100k'" "$tmp/err.txt"
"$tf" tokenize --tokenizer "$tmp/cl.json" --input "$tmp/corpus.txt" > "$tmp/cl-ids.txt"
check "... its ids decode back to the corpus" cmp -s "$tmp/corpus.txt" <("$tf" detokenize --tokenizer "$tmp/cl.json" --input "$tmp/cl-ids.txt")
check "... digits in runs of at most three" test "$("$tf" tokenize --tokenizer "$tmp/cl.json" --text 1234567 | wc -w)" -ge 3
"$tf" tokenizer train --vocab-size 300 --pattern bad --input "$tmp/corpus.txt" --output "$tmp/bad.json" 2> "$tmp/err.txt"
check "tokenizer train --pattern bad is refused" test $? -ne 0 -a ! -e "$tmp/bad.json"
check "... naming the choices" grep -q "gpt2,cl100k,o200k" "$tmp/err.txt"

# tiktoken's encodings by name (when scripts/fetch-tiktoken-vocab.sh has run; make test runs it).
if [[ -f "$here/../build-data/tiktoken/cl100k_base.json" || -n "${TFORMER_TIKTOKEN_DIR:-}" ]]; then
  check "tokenize cl100k_base" test "$("$tf" tokenize --tokenizer cl100k_base --text 'Hello world')" = "9906 1917"
  check "tokenize o200k_base" test "$("$tf" tokenize --tokenizer o200k_base --text 'Hello world')" = "13225 2375"
  check "detokenize o200k_base" test "$("$tf" detokenize --tokenizer o200k_base --ids '13225 2375')" = "Hello world"
  check "special token only with --allow-special" \
    test "$("$tf" tokenize --tokenizer cl100k_base --text '<|endofprompt|>' --allow-special)" = "100276"
  check "... else it is text" test "$("$tf" tokenize --tokenizer cl100k_base --text '<|endofprompt|>' | wc -w)" -gt 1
  "$tf" detokenize --tokenizer cl100k_base --ids "9906 100256" > "$tmp/out.txt" 2> "$tmp/err.txt"
  check "detokenize an unused cl100k id exits 1 naming it" \
    bash -c "test $? -eq 1 && grep -q 'token id 100256 is not a token' '$tmp/err.txt' && test ! -s '$tmp/out.txt'"
  echo '{"d_model": 8, "n_layers": 1, "n_heads": 2, "context_length": 16}' > "$tmp/tiny.json"
  "$tf" init --config "$tmp/tiny.json" --tokenizer cl100k_base --seed 3 --out "$tmp/cl.safetensors" > "$tmp/out.txt"
  check "init --tokenizer cl100k_base takes its vocabulary size" grep -q '"vocab_size":100277' "$tmp/out.txt"
  check "... and the model file tokenizes as cl100k_base" \
    test "$("$tf" tokenize --tokenizer "$tmp/cl.safetensors" --text 'Hello world')" = "9906 1917"
  "$tf" train --data "$tmp/corpus.txt" --tokenizer o200k_base --config "$tmp/tiny.json" --batch 2 --context 16 \
    --steps 3 --eval-every 3 --eval-steps 1 --val-fraction 0.2 --seed 1 --out "$tmp/o2run" > "$tmp/train.log" 2>&1
  check "train --tokenizer o200k_base" test $? -eq 0 -a -f "$tmp/o2run/model.safetensors"
  check "... its model tokenizes as o200k_base" \
    test "$("$tf" tokenize --tokenizer "$tmp/o2run/model.safetensors" --text 'Hello world')" = "13225 2375"
fi
# generate never samples an unused id: a vocabulary whose one extra special token sits at id 4000
# leaves most of its 4,001 ids unused, which hot sampling from a random model would hit at almost every token.
sed 's/"special_tokens":{"<|endoftext|>":[0-9]*}/"special_tokens":{"<|endoftext|>":599,"<|far|>":4000}/' "$tmp/cl.json" > "$tmp/gaps.json"
check "a vocabulary with unused ids" grep -q '"<|far|>":4000' "$tmp/gaps.json"
echo '{"d_model": 8, "n_layers": 1, "n_heads": 2, "context_length": 64}' > "$tmp/tiny64.json"
"$tf" init --config "$tmp/tiny64.json" --tokenizer "$tmp/gaps.json" --seed 5 --out "$tmp/gaps.safetensors" > /dev/null
check "generate at temperature 5 never samples one (48 tokens)" \
  "$tf" generate --model "$tmp/gaps.safetensors" --prompt "It IS" --max-new-tokens 48 --temperature 5 --seed 6
TFORMER_TIKTOKEN_DIR="$tmp/none" "$tf" tokenize --tokenizer o200k_base --text x > "$tmp/out.txt" 2> "$tmp/err.txt"
check "a missing tiktoken vocabulary exits 1" test $? -eq 1 -a ! -s "$tmp/out.txt"
check "... naming the command that fetches it" grep -q "run scripts/fetch-tiktoken-vocab.sh" "$tmp/err.txt"

# tformer serve: ready line with the port, /health and a completion over bash's /dev/tcp, exit 0
# on SIGTERM; bad flags refused before it listens.
"$tf" serve --model "$tmp/m.safetensors" --port 0 > "$tmp/serve.out" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q " on http://" "$tmp/serve.out" && break; sleep 0.1; done
port="$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/serve.out")"
check "serve prints its URL" test -n "$port"
http() {  # http METHOD PATH [BODY]: the whole response
  local body="${3:-}"
  exec 3<> "/dev/tcp/127.0.0.1/$port"
  printf '%s %s HTTP/1.1\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s' "$1" "$2" "${#body}" "$body" >&3
  cat <&3
  exec 3<&-
}
check "serve /health" grep -q '"status":"ok"' <<< "$(http GET /health)"
check "serve /v1/completions" grep -q '"finish_reason":"length"' \
  <<< "$(http POST /v1/completions '{"prompt": "hi", "max_tokens": 4, "temperature": 0}')"
check "serve refuses a prompt past the context (400)" grep -q '^HTTP/1.1 400' \
  <<< "$(http POST /v1/completions '{"prompt": "hi", "max_tokens": 40}')"
greedy='{"prompt": "hi", "max_tokens": 6, "temperature": 0}'
text_of() { sed -n 's/.*"text":"\([^"]*\)".*/\1/p'; }
two="$(http POST /v1/completions "$greedy" | text_of)"
kill -TERM "$serve_pid"
wait "$serve_pid"
check "serve exits 0 on SIGTERM" test $? -eq 0
# --threads 1: the ready line says so, and the same greedy text comes back (a sequence's logits do
# not depend on how many threads compute them).
"$tf" serve --model "$tmp/m.safetensors" --port 0 --threads 1 > "$tmp/serve.out" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q " on http://" "$tmp/serve.out" && break; sleep 0.1; done
port="$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/serve.out")"
check "serve --threads 1: the ready line names one thread" grep -q ', 1 thread)$' "$tmp/serve.out"
one="$(http POST /v1/completions "$greedy" | text_of)"
check "serve --threads 1: the same greedy text as on all threads" test -n "$one" -a "$one" = "$two"
kill -TERM "$serve_pid"
wait "$serve_pid"
# --api-key-file (its trailing newline dropped) and --chat-template FILE, through the command line.
printf 'k3y\n' > "$tmp/key.txt"
printf '# a test template\nmessage: {role}:{content}\ngeneration: >\nstop: <\n' > "$tmp/chat.tmpl"
"$tf" serve --model "$tmp/m.safetensors" --port 0 --context 16 --api-key-file "$tmp/key.txt" \
  --chat-template "$tmp/chat.tmpl" > "$tmp/serve.out" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q " on http://" "$tmp/serve.out" && break; sleep 0.1; done
port="$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/serve.out")"
http_key() {  # http_key KEY METHOD PATH [BODY]
  local body="${4:-}"
  exec 3<> "/dev/tcp/127.0.0.1/$port"
  printf '%s %s HTTP/1.1\r\nConnection: close\r\nAuthorization: Bearer %s\r\nContent-Length: %s\r\n\r\n%s' \
    "$2" "$3" "$1" "${#body}" "$body" >&3
  cat <&3
  exec 3<&-
}
check "serve --api-key-file: no key, 401" grep -q '^HTTP/1.1 401' <<< "$(http GET /v1/models)"
check "serve --api-key-file: the file's key (newline dropped), 200" grep -q '^HTTP/1.1 200' \
  <<< "$(http_key k3y GET /v1/models)"
check "serve --chat-template FILE: /props shows its message line" grep -q '"chat_template":"{role}:{content}"' \
  <<< "$(http_key k3y GET /props)"
check "serve --chat-template FILE: chat completes" grep -q '"object":"chat.completion"' \
  <<< "$(http_key k3y POST /v1/chat/completions '{"messages": [{"role": "user", "content": "h"}], "max_tokens": 2}')"
kill -TERM "$serve_pid"
wait "$serve_pid"
check "serve exits 0 on SIGTERM (with a key and a template)" test $? -eq 0
printf 'generation: x\n' > "$tmp/bad.tmpl"
"$tf" serve --model "$tmp/m.safetensors" --port 0 --chat-template "$tmp/bad.tmpl" > /dev/null 2> "$tmp/err.txt"
check "serve --chat-template FILE without a message line exits 1 naming it" grep -q "message" "$tmp/err.txt"
"$tf" serve --model "$tmp/m.safetensors" --port 0 --context 99 > /dev/null 2> "$tmp/err.txt"
check "serve --context beyond the model's exits 1 naming both" grep -q "context 99 is more than the model's context_length 16" "$tmp/err.txt"
# A cache budget the memory cannot hold: refused before anything is allocated, naming both flags
# (TFORMER_MEMORY_LIMIT stands in for a small machine: 4,096 slots of this model's 16 tokens).
TFORMER_MEMORY_LIMIT=1000000 "$tf" serve --model "$tmp/m.safetensors" --port 0 --parallel 4096 > /dev/null 2> "$tmp/err.txt"
check "serve --parallel past the memory exits 1" test $? -eq 1
check "... naming --parallel and --context" grep -q -- "--parallel 4096 x --context 16: the KV cache would take" "$tmp/err.txt"
"$tf" serve --model "$tmp/m.safetensors" --port 70000 > /dev/null 2> "$tmp/err.txt"
check "serve --port out of range exits 1" grep -q "\-\-port must be in 0..65535" "$tmp/err.txt"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
