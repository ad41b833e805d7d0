#!/usr/bin/env bash
# Writes that survive a kill at any instant (ctest "cli.kill", label cli; the reliability issue):
#   * a small training run with a checkpoint every step, killed with SIGKILL KILLS times (default
#     8; `make test-long` runs 50), resumed after each kill: half of the kills at a random instant,
#     half timed to land inside a write (as soon as a temporary file of the killed process appears
#     in the run folder). Every resumed run starts without error, and the final model and
#     checkpoint tensors, every step's loss and metrics.jsonl equal those of an uninterrupted run;
#   * `tformer export`, `quantize`, `bpe learn`, `tokenizer train` and `init` killed the same way
#     (KILLS / 2 times each, at least 6): afterwards the output is the previous complete file, or
#     the new complete file, or absent when there was none before -- never anything else, and the
#     next complete run leaves no temporary behind.
#   tests/cli/kill_test.sh PATH/TO/tformer        (KILLS=50 KILL_SEED=7 to change the loop)
# The random instants come from bash's RANDOM seeded with KILL_SEED (printed), so a failing
# sequence can be replayed.
set -uo pipefail
tf="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"   # tests/
tmp="${TFORMER_TEST_TMP:-$(mktemp -d)}"
[[ -n "${TFORMER_TEST_TMP:-}" ]] || trap 'rm -rf "$tmp"' EXIT
kills="${KILLS:-8}"
seed="${KILL_SEED:-$(date +%s)}"
RANDOM=$seed
echo "kill_test: KILLS=$kills KILL_SEED=$seed"
passed=0
failed=0
check() {  # check NAME COMMAND...: the command must succeed
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}

# kill_run MODE MS DIR LOG CMD...: starts CMD (output to LOG) and kills it with SIGKILL. MODE
# "random": after a random delay of 0 to MS milliseconds; MODE "write": as soon as a temporary
# file of the process ("<target>.tmp.<pid>.*", core/file_io.h) appears in DIR, after 0 or 1 more
# looks. Sets
# kill_status (137 when killed, the exit status when the command ended first) and kill_in_write
# (1 when a temporary of the process was still there after the kill: it died inside a write).
kill_run() {
  local mode="$1" ms="$2" dir="$3" log="$4"
  shift 4
  "$@" > "$log" 2>&1 &
  local pid=$!
  if [[ "$mode" == write ]]; then
    local extra=$((RANDOM % 2)) seen=0 i
    for ((i = 0; i < 400000; i++)); do
      if compgen -G "$dir/*.tmp.$pid.*" > /dev/null; then
        seen=$((seen + 1))
        ((seen > extra)) && break
      fi
      kill -0 "$pid" 2> /dev/null || break
    done
  else
    local d=$(((RANDOM * 32768 + RANDOM) % (ms + 1)))
    sleep "$((d / 1000)).$(printf '%03d' $((d % 1000)))"
  fi
  kill -9 "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  kill_status=$?
  kill_in_write=0
  compgen -G "$dir/*.tmp.$pid.*" > /dev/null && kill_in_write=1
  return 0
}

# ---- training -------------------------------------------------------------------------------------
data="$here/fixtures/tinyshakespeare_100k.txt"
cat > "$tmp/tiny.json" <<'JSON'
{"context_length": 16, "d_model": 16, "n_layers": 1, "n_heads": 2, "dropout": 0.1}
JSON
steps="${KILL_STEPS:-$((kills * 25 + 50))}"
flags=(--data "$data" --val-fraction 0.1 --tokenizer char --config "$tmp/tiny.json" --batch 2 --context 16
       --lr 3e-3 --warmup 5 --decay-steps "$steps" --steps "$steps" --eval-every 10 --eval-steps 1
       --checkpoint-every 1 --log-every 1 --seed 3 --threads 1)
"$tf" train "${flags[@]}" --out "$tmp/a" > "$tmp/a.log" 2>&1
check "the uninterrupted run exits 0" test $? -eq 0

in_write=0
done_early=0
for ((k = 1; k <= kills; k++)); do
  mode=random
  ((k % 2 == 0)) && mode=write
  if [[ -e "$tmp/b/checkpoint.safetensors" ]]; then
    kill_run "$mode" 100 "$tmp/b" "$tmp/b.$k.log" "$tf" train --resume "$tmp/b"
  else  # killed before its first checkpoint: the run starts again
    kill_run "$mode" 100 "$tmp/b" "$tmp/b.$k.log" "$tf" train "${flags[@]}" --out "$tmp/b"
  fi
  in_write=$((in_write + kill_in_write))
  if [[ $kill_status -eq 0 ]]; then done_early=1; break; fi
  if [[ $kill_status -ne 137 ]]; then
    check "kill $k ($mode): the run was killed or finished, not failed (status $kill_status)" false
    tail -n 5 "$tmp/b.$k.log"
  fi
done
if [[ $done_early -eq 0 ]]; then
  # Resumed, or started again when every kill came before the first checkpoint (a slow build,
  # such as AddressSanitizer's, can spend all of them on the start).
  if [[ -e "$tmp/b/checkpoint.safetensors" ]]; then
    "$tf" train --resume "$tmp/b" > "$tmp/b.last.log" 2>&1
  else
    "$tf" train "${flags[@]}" --out "$tmp/b" > "$tmp/b.last.log" 2>&1
  fi
  check "the last resume exits 0" test $? -eq 0
fi
echo "kill_test: $((k > kills ? kills : k)) kills, $in_write inside a write"
check "all $kills kills were made before the run finished" test "$done_early" -eq 0
check "some kill landed inside a write ($in_write)" test "$in_write" -gt 0
check "the final model is byte-identical to the uninterrupted run's" \
  cmp -s "$tmp/a/model.safetensors" "$tmp/b/model.safetensors"
tensors() {  # the data buffer of a safetensors file (the header names the run folder, which differs)
  local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  tail -c +$((9 + n)) "$1"
}
check "the final checkpoint's tensors are byte-identical" \
  cmp -s <(tensors "$tmp/a/checkpoint.safetensors") <(tensors "$tmp/b/checkpoint.safetensors")
check "metrics.jsonl equal apart from timings" cmp -s \
  <(sed 's/,"tokens_per_s".*//' "$tmp/a/metrics.jsonl") <(sed 's/,"tokens_per_s".*//' "$tmp/b/metrics.jsonl")
# The loss of every step, in the order the runs printed them: a step that ran twice (after a kill
# before its checkpoint) must print the same loss both times, and every step must appear.
grep -ho '^step [0-9]*/[0-9]* loss [0-9.]*' "$tmp/a.log" > "$tmp/a.steps"
cat "$tmp"/b.*.log | grep -ho '^step [0-9]*/[0-9]* loss [0-9.]*' | sort -u -t' ' -k2,2V > "$tmp/b.steps"
check "every step's loss equals the uninterrupted run's" cmp -s "$tmp/a.steps" "$tmp/b.steps"
check "no temporary left in the run folder" bash -c "! compgen -G '$tmp/b/*.tmp.*' > /dev/null"

# ---- one-shot writers ------------------------------------------------------------------------------
# kill_writer NAME OUT CMD_NEW... : OUT's previous content is made by the caller (OUT.prev); the
# command run to the end once gives OUT.new. Then, KILLS/2 times (at least 6), OUT is set back to
# OUT.prev (or removed, every third time), the command is killed, and OUT must equal OUT.prev, OUT.new,
# or be absent when it was absent before. When no kill landed inside a write, up to 6 more kills
# are timed to do so.
per_writer=$((kills / 2 > 6 ? kills / 2 : 6))
kill_writer() {
  local name="$1" out="$2"
  shift 2
  local dir ok=1 i mode t0 ms running=0 writing=0
  dir="$(dirname "$out")"
  t0=$(date +%s%N)
  "$@" > "$tmp/$name.new.log" 2>&1 || { check "$name runs" false; tail -n 5 "$tmp/$name.new.log"; return; }
  ms=$((($(date +%s%N) - t0) / 1000000))
  cp "$out" "$out.new"
  for ((i = 1; i <= per_writer || (writing == 0 && i <= per_writer + 6); i++)); do
    local had=1
    if ((i % 3 == 0)); then rm -f "$out"; had=0; else cp "$out.prev" "$out"; fi
    mode=random
    ((i % 2 == 0 || i > per_writer)) && mode=write
    kill_run "$mode" "$ms" "$dir" "$tmp/$name.$i.log" "$@"
    [[ $kill_status -eq 137 ]] && running=$((running + 1))
    writing=$((writing + kill_in_write))
    if [[ -e "$out" ]]; then
      cmp -s "$out" "$out.prev" && ((had)) && continue
      cmp -s "$out" "$out.new" && continue
      echo "$name, kill $i ($mode): $out is neither the previous file nor the new one"
      ok=0
    elif ((had)); then
      echo "$name, kill $i ($mode): $out vanished"
      ok=0
    fi
  done
  echo "kill_test: $name ($ms ms uninterrupted): $((i - 1)) kills, $running while running, $writing inside a write"
  check "$name: after every kill the output is the old file, the new one, or absent" test $ok -eq 1
  check "$name: some kill landed inside a write" test $writing -gt 0
  # The next complete run removes what the killed ones left (each writer cleans up its target's
  # temporaries of processes that are gone, core/file_io.h).
  "$@" > "$tmp/$name.after.log" 2>&1
  check "$name: the run after the kills leaves no temporary of $(basename "$out")" \
    bash -c "! compgen -G '$out.tmp.*' > /dev/null"
  check "$name: ... and writes the new file" cmp -s "$out" "$out.new"
}

mkdir -p "$tmp/w"
cat > "$tmp/w/cfg.json" <<'JSON'
{"context_length": 128, "d_model": 128, "n_layers": 4, "n_heads": 4}
JSON
"$tf" init --config "$tmp/w/cfg.json" --tokenizer char --seed 1 --out "$tmp/w/model.safetensors.prev" > /dev/null
kill_writer init "$tmp/w/model.safetensors" "$tf" init --config "$tmp/w/cfg.json" --tokenizer char --seed 2 \
  --out "$tmp/w/model.safetensors"
m="$tmp/w/model.safetensors.new"
"$tf" export --model "$tmp/w/model.safetensors.prev" --out "$tmp/w/e.gguf.prev" > /dev/null
kill_writer export "$tmp/w/e.gguf" "$tf" export --model "$m" --out "$tmp/w/e.gguf"
"$tf" quantize --model "$tmp/w/model.safetensors.prev" --type q8_0 --out "$tmp/w/q.gguf.prev" > /dev/null
kill_writer quantize "$tmp/w/q.gguf" "$tf" quantize --model "$m" --type q4_0 --out "$tmp/w/q.gguf"
"$tf" bpe learn --input "$data" --merges 50 --output "$tmp/w/codes.prev" > /dev/null
kill_writer "bpe learn" "$tmp/w/codes" "$tf" bpe learn --input "$data" --merges 2000 --output "$tmp/w/codes"
"$tf" tokenizer train --input "$data" --vocab-size 300 --output "$tmp/w/tok.json.prev" > /dev/null 2>&1
kill_writer "tokenizer train" "$tmp/w/tok.json" "$tf" tokenizer train --input "$data" --vocab-size 1200 \
  --output "$tmp/w/tok.json"

echo "kill_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
