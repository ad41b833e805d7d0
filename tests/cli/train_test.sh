#!/usr/bin/env bash
# End-to-end checks of `tformer train` (ctest "cli.train", label cli):
#   * 400 uninterrupted steps == 200 steps, then a resumed run killed with SIGKILL part-way, then
#     resumed again to 400: the same loss at every step (the plain progress lines, one per step),
#     the same metrics.jsonl and a byte-identical model file, at the same thread count;
#   * the run folder's files, eval of the result, plot, generate with the trained model;
#   * eval of a torch-trained fixture model against torch's loss and token count;
#   * the live progress bar on a pseudo-terminal (util-linux's script), narrowed to fit;
#   * errors: an existing run without --resume, bad flag values, a missing, empty or too small data
#     file (no run folder left behind), --config with --resume.
#   tests/cli/train_test.sh PATH/TO/tformer
set -uo pipefail
tf="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"   # tests/
tmp="${TFORMER_TEST_TMP:-$(mktemp -d)}"
[[ -n "${TFORMER_TEST_TMP:-}" ]] || trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...: the command must succeed
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}

data="$here/fixtures/tinyshakespeare_100k.txt"
cat > "$tmp/tiny.json" <<'JSON'
{"context_length": 32, "d_model": 32, "n_layers": 2, "n_heads": 4, "dropout": 0.1}
JSON
flags=(--data "$data" --val-fraction 0.1 --tokenizer char --config "$tmp/tiny.json" --batch 4 --context 32
       --grad-accum 2 --lr 3e-3 --min-lr 3e-4 --warmup 20 --decay-steps 400 --eval-every 100 --eval-steps 2
       --checkpoint-every 200 --log-every 1 --seed 5 --threads 2)

# A: 400 steps in one go.
"$tf" train "${flags[@]}" --out "$tmp/a" --steps 400 > "$tmp/a.log" 2>&1
check "train exits 0" test $? -eq 0
for f in model.safetensors checkpoint.safetensors metrics.jsonl; do
  check "run folder has $f" test -s "$tmp/a/$f"
done
check "a token cache was written" compgen -G "$tmp/a/tokens-*.bin" > /dev/null
check "metrics: step 0 and every 100 steps" test "$(grep -c '"val_loss"' "$tmp/a/metrics.jsonl")" -eq 5
check "metrics have step, train_loss, val_loss, lr, grad_norm" \
  grep -q '"step":400,"train_loss":[0-9.]*,"val_loss":[0-9.]*,"lr":[0-9.e-]*,"grad_norm":[0-9.]' "$tmp/a/metrics.jsonl"
check "one progress line per step" test "$(grep -c '^step [0-9]*/400 loss' "$tmp/a.log")" -eq 400
first=$(grep '^step 1/400 ' "$tmp/a.log" | awk '{print $4}')
last=$(grep '^step 400/400 ' "$tmp/a.log" | awk '{print $4}')
check "the loss fell (from $first to $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'

# B: 200 steps, then a resumed run killed with SIGKILL as soon as it is past step 200 (and past the
# evaluation at 300 when the machine is slow), then resumed again.
"$tf" train "${flags[@]}" --out "$tmp/b" --steps 200 > "$tmp/b1.log" 2>&1
check "first half exits 0" test $? -eq 0
"$tf" train --resume "$tmp/b" --steps 400 > "$tmp/b2.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q '^step 2[0-9][0-9]/400 ' "$tmp/b2.log" 2> /dev/null && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.05
done
kill -9 "$pid" 2> /dev/null
wait "$pid" 2> /dev/null
check "the interrupted run got past step 200 and was killed before 400" \
  bash -c "grep -q '^step 2[0-9][0-9]/400 ' '$tmp/b2.log' && ! grep -q '^step 400/400 ' '$tmp/b2.log'"
# What a kill during a checkpoint write leaves: a temporary file named by the writer's pid. One of
# a finished process is removed on resume; one of a live process (this shell) is left alone.
sleep 0 & dead=$!; wait "$dead"
echo "half a checkpoint" > "$tmp/b/checkpoint.safetensors.tmp.$dead.0"
echo "being written" > "$tmp/b/model.safetensors.tmp.$$.0"
"$tf" train --resume "$tmp/b" --steps 400 > "$tmp/b3.log" 2>&1
check "resume exits 0" test $? -eq 0
check "resume removes a dead run's temporary checkpoint" test ! -e "$tmp/b/checkpoint.safetensors.tmp.$dead.0"
check "... but not a live process's" test -e "$tmp/b/model.safetensors.tmp.$$.0"
rm -f "$tmp/b/model.safetensors.tmp.$$.0"
check "resume says where it starts" grep -q 'resumed at step 200' "$tmp/b3.log"
grep -o '^step [0-9]*/400 loss [0-9.]*' "$tmp/a.log" > "$tmp/a.steps"
cat "$tmp/b1.log" "$tmp/b3.log" | grep -o '^step [0-9]*/[0-9]* loss [0-9.]*' | sed 's|/200 |/400 |' > "$tmp/b.steps"
check "every step's loss equals the uninterrupted run's" cmp -s "$tmp/a.steps" "$tmp/b.steps"
check "metrics.jsonl equal apart from timings" cmp -s \
  <(sed 's/,"tokens_per_s".*//' "$tmp/a/metrics.jsonl") <(sed 's/,"tokens_per_s".*//' "$tmp/b/metrics.jsonl")
check "the final model is byte-identical" cmp -s "$tmp/a/model.safetensors" "$tmp/b/model.safetensors"
tensors() {  # the data buffer of a safetensors file (the header names the run folder, which differs)
  local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  tail -c +$((9 + n)) "$1"
}
check "the final checkpoint's tensors (weights, AdamW moments) are byte-identical" \
  cmp -s <(tensors "$tmp/a/checkpoint.safetensors") <(tensors "$tmp/b/checkpoint.safetensors")

# The trained model works with the other commands.
"$tf" eval --model "$tmp/a/model.safetensors" --data "$data" --max-tokens 4000 > "$tmp/eval.txt"
check "eval prints loss and perplexity" grep -q '^loss [0-9.]*  perplexity' "$tmp/eval.txt"
"$tf" plot --run "$tmp/a" > /dev/null
check "plot writes a PNG" bash -c "head -c 8 '$tmp/a/loss.png' | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a'"
out=$("$tf" generate --model "$tmp/a/model.safetensors" --prompt "ROMEO:" --max-new-tokens 20 --seed 1)
check "generate continues the prompt" test "${#out}" -gt 6

# eval against PyTorch: the trained fixture model of tools/reference/gen_trajectory_fixture.py on
# the corpus' first 3001 tokens (187 windows of 16 scored tokens and one of 8): torch's mean loss
# to the 4 printed decimals, the token count exactly, perplexity = exp(loss); any --batch.
fx="$here/fixtures/train"
want_loss=$(grep -o '"loss": [0-9.e+-]*' "$fx/trajectory.json" | tail -n 1 | awk '{print $2}')
want_count=$(grep -o '"tokens_scored": [0-9]*' "$fx/trajectory.json" | awk '{print $2}')
for b in 1 8; do
  "$tf" eval --model "$fx/trajectory_model.safetensors" --data "$data" --max-tokens 3001 --batch "$b" \
    > "$tmp/eval$b.txt"
  got_loss=$(awk '{print $2}' "$tmp/eval$b.txt")
  got_ppl=$(awk '{print $4}' "$tmp/eval$b.txt")
  got_count=$(awk '{print $7}' "$tmp/eval$b.txt")
  check "eval --batch $b: loss $got_loss is torch's $want_loss" \
    awk -v a="$got_loss" -v b="$want_loss" 'BEGIN { d = a - b; exit !(d < 6e-5 && d > -6e-5) }'
  check "eval --batch $b: $got_count tokens scored (torch: $want_count)" test "$got_count" = "$want_count"
  check "eval --batch $b: perplexity $got_ppl = exp(loss)" \
    awk -v p="$got_ppl" -v l="$want_loss" 'BEGIN { r = p / exp(l); exit !(r < 1.0001 && r > 0.9999) }'
done

printf 'ab\xffcd' > "$tmp/bad-byte.txt"
"$tf" eval --model "$fx/trajectory_model.safetensors" --data "$tmp/bad-byte.txt" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "eval of a byte outside the vocabulary exits 1 naming the file and position" \
  bash -c "test $rc -eq 1 && grep -q 'bad-byte.txt: char tokenizer: byte 255 (0xff) at position 2' '$tmp/err.txt'"

# On a terminal (a pty from util-linux's `script`, 70 columns): a live bar redrawn in place with \r,
# narrowed to fit (never wider than 69 columns), with the evaluation lines printed above it.
if command -v script > /dev/null 2>&1 && script -qfec true /dev/null > /dev/null 2>&1; then  # a pty is available
  script -qfec "stty cols 70; '$tf' train --data '$data' --config '$tmp/tiny.json' --out '$tmp/live' --steps 30 \
    --batch 4 --context 32 --eval-every 15 --eval-steps 1 --log-every 5 --threads 2" "$tmp/live.txt" > /dev/null 2>&1
  tr '\r' '\n' < "$tmp/live.txt" | sed 's/\x1b\[K//g' | grep '^\[' > "$tmp/live.lines" || true
  check "on a terminal: the live bar is redrawn in place" test "$(wc -l < "$tmp/live.lines")" -ge 6
  check "... narrowed to the terminal (a bar, shorter than 20, lines <= 69 columns)" \
    awk '{ if (length($0) > 69 || index($0, "] step") > 21) bad = 1 } END { exit bad || NR == 0 }' "$tmp/live.lines"
  check "... with the evaluation lines above it" grep -q 'step 15: train loss [0-9.]*, val loss' "$tmp/live.txt"
else
  echo "SKIP: the live progress bar checks (util-linux's script is missing or cannot open a pseudo-terminal)"
fi

# Errors: exit 1 with a message naming the problem.
"$tf" train "${flags[@]}" --out "$tmp/a" --steps 10 > /dev/null 2> "$tmp/err.txt"; rc=$?
check "an existing run is not overwritten" test "$rc" -eq 1
check "... and the message says --resume" grep -q -- '--resume' "$tmp/err.txt"
"$tf" train "${flags[@]}" --out "$tmp/c" --steps 10 --weight-decay -1 > /dev/null 2> "$tmp/err.txt"; rc=$?
check "bad --weight-decay exits 1" test "$rc" -eq 1
check "bad --weight-decay is named" grep -q -- '--weight-decay is -1' "$tmp/err.txt"
"$tf" train --data "$tmp/none.txt" --out "$tmp/d" --steps 10 > /dev/null 2> "$tmp/err.txt"; rc=$?
check "missing data exits 1" test "$rc" -eq 1
check "missing data is named" grep -q none.txt "$tmp/err.txt"
check "... and no run folder is left behind" test ! -e "$tmp/d"
"$tf" train --data "$data" --config "$tmp/tiny.json" --out "$tmp/e" --steps 10 --context 64 > /dev/null 2> "$tmp/err.txt"
rc=$?
check "--context beyond the config exits 1" test "$rc" -eq 1
check "... naming both numbers" grep -q -- '--context 64 exceeds the config.s context_length 32' "$tmp/err.txt"
"$tf" train "${flags[@]}" --out "$tmp/f" --steps 10 --val-data "$data" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "--val-data with --val-fraction is refused" test "$rc" -ne 0
"$tf" train --resume "$tmp/b" --steps 400 > /dev/null 2> "$tmp/err.txt"; rc=$?
check "resuming a finished run exits 1" test "$rc" -eq 1
check "... naming the step" grep -q 'already holds step 400' "$tmp/err.txt"

"$tf" train --resume "$tmp/b" --steps 500 --config "$tmp/tiny.json" > /dev/null 2> "$tmp/err.txt"; rc=$?
check "--config with --resume exits 1" test "$rc" -eq 1
check "... saying the checkpoint holds the config" grep -q -- '--config cannot be given with --resume' "$tmp/err.txt"
"$tf" train "${flags[@]}" --out "$tmp/g" --steps 10 --eps 0 > /dev/null 2> "$tmp/err.txt"; rc=$?
check "--eps 0 exits 1 naming the flag" bash -c "test $rc -eq 1 && grep -q -- '--eps is 0' '$tmp/err.txt'"
check "... and no run folder is left behind" test ! -e "$tmp/g"
: > "$tmp/empty.txt"
"$tf" train --data "$tmp/empty.txt" --config "$tmp/tiny.json" --out "$tmp/h" --steps 10 > /dev/null 2> "$tmp/err.txt"
rc=$?
check "an empty --data file exits 1 naming it" bash -c "test $rc -eq 1 && grep -q 'empty.txt: empty file' '$tmp/err.txt'"
head -c 30 "$data" > "$tmp/small.txt"
"$tf" train --data "$tmp/small.txt" --config "$tmp/tiny.json" --out "$tmp/i" --steps 10 > /dev/null 2> "$tmp/err.txt"
rc=$?
check "a corpus too small for the context exits 1" test "$rc" -eq 1
check "... naming the file and the numbers" grep -q 'training split (.*small.txt.*) has 27 tokens; --context 32 needs at least 33' "$tmp/err.txt"
check "... and the run folder it created (token cache included) is removed" test ! -e "$tmp/i"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
