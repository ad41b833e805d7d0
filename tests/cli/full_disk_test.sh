#!/usr/bin/env bash
# Every writer against a disk that fills up mid-write (ctest "cli.full_disk", label cli; the
# reliability issue): the checkpoint, the model, the token cache, Sennrich codes, a tokenizer, a
# GGUF export and metrics.jsonl, each written under a file-size limit below its size (prlimit
# --fsize: the write fails with EFBIG, since tformer ignores SIGXFSZ), and each again on a small
# tmpfs filled to the brim (ENOSPC; when this runs as root).
# Each time: exit status 1, a message naming the file and the cause, the previous file intact
# (byte for byte) or absent when there was none, and no temporary file left behind.
#   tests/cli/full_disk_test.sh PATH/TO/tformer
set -uo pipefail
tf="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"   # tests/
tmp="${TFORMER_TEST_TMP:-$(mktemp -d)}"
small="$tmp/small"
cleanup() {
  mountpoint -q "$small" 2> /dev/null && umount "$small"
  [[ -n "${TFORMER_TEST_TMP:-}" ]] || rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...: the command must succeed
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}

# refused NAME OUT CAUSE LIMIT CMD...: CMD run with a file-size limit of LIMIT bytes (none when
# LIMIT is "-") must exit 1 with a message naming OUT's file name and CAUSE, leave OUT as OUT.prev
# (or absent when there is no OUT.prev), and leave no temporary in OUT's folder.
refused() {
  local name="$1" out="$2" cause="$3" limit="$4"
  shift 4
  local rc lim=()
  [[ "$limit" != - ]] && lim=(prlimit --fsize="$limit")
  "${lim[@]}" "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"
  rc=$?
  check "$name: exit status 1 (got $rc)" test $rc -eq 1
  check "$name: the message names $(basename "$out") and says '$cause'" \
    bash -c "grep -q -- '$(basename "$out")' '$tmp/err.txt' && grep -q -- '$cause' '$tmp/err.txt'"
  if [[ -e "$out.prev" ]]; then
    check "$name: the previous file is intact" cmp -s "$out" "$out.prev"
  else
    check "$name: no file left" test ! -e "$out"
  fi
  check "$name: no temporary left" bash -c "! compgen -G '$(dirname "$out")/*.tmp.*' > /dev/null"
  [[ $rc -eq 1 ]] || { head -c 600 "$tmp/err.txt"; echo; }
}
size() { stat -c %s "$1"; }

data="$here/fixtures/tinyshakespeare_100k.txt"
cat > "$tmp/tiny.json" <<'JSON'
{"context_length": 16, "d_model": 16, "n_layers": 1, "n_heads": 2}
JSON
flags=(--data "$data" --val-fraction 0.1 --tokenizer char --config "$tmp/tiny.json" --batch 2 --context 16
       --steps 5 --eval-every 5 --eval-steps 1 --checkpoint-every 1 --seed 3 --threads 1)
big="File too large"

# ---- under a file-size limit ------------------------------------------------------------------
"$tf" train "${flags[@]}" --out "$tmp/r" > /dev/null 2>&1
check "the first run exits 0" test $? -eq 0
ck="$tmp/r/checkpoint.safetensors"
cp "$ck" "$ck.prev"
cp "$tmp/r/model.safetensors" "$tmp/r/model.safetensors.prev"
cp "$tmp/r/metrics.jsonl" "$tmp/r/metrics.jsonl.prev"
# metrics.jsonl: the evaluation after the first resumed step appends a record past the limit.
refused "metrics.jsonl" "$tmp/r/metrics.jsonl" "$big" $(($(size "$tmp/r/metrics.jsonl") + 20)) \
  "$tf" train --resume "$tmp/r" --steps 10 --eval-every 1
# The checkpoint: larger than the limit, which the model file and the metrics stay under.
refused "checkpoint" "$ck" "$big" $(($(size "$ck") / 2)) "$tf" train --resume "$tmp/r" --steps 10
check "checkpoint: the model file is intact too" cmp -s "$tmp/r/model.safetensors" "$tmp/r/model.safetensors.prev"
"$tf" train --resume "$tmp/r" --steps 10 > /dev/null 2>&1
check "the run continues once there is room" test $? -eq 0
# The token cache of a new run: its folder, made by this run, goes too.
refused "token cache" "$tmp/t/tokens-" "$big" 40000 "$tf" train "${flags[@]}" --out "$tmp/t"
check "token cache: the new run folder is removed, cache and all" test ! -e "$tmp/t"
# A model.
cat > "$tmp/cfg.json" <<'JSON'
{"context_length": 64, "d_model": 64, "n_layers": 2, "n_heads": 4}
JSON
m="$tmp/m/model.safetensors"
mkdir -p "$tmp/m"
"$tf" init --config "$tmp/cfg.json" --tokenizer char --seed 1 --out "$m" > /dev/null
cp "$m" "$m.prev"
refused "model" "$m" "$big" $(($(size "$m") / 2)) "$tf" init --config "$tmp/cfg.json" --tokenizer char --seed 2 --out "$m"
# A GGUF export.
e="$tmp/m/model.gguf"
"$tf" export --model "$m" --out "$e" > /dev/null
cp "$e" "$e.prev"
refused "export" "$e" "$big" $(($(size "$e") / 8)) "$tf" export --model "$m" --type q8_0 --out "$e"
# Sennrich codes and a tokenizer, each over an earlier smaller one.
c="$tmp/m/codes"
"$tf" bpe learn --input "$data" --merges 20 --output "$c" > /dev/null
cp "$c" "$c.prev"
refused "codes" "$c" "$big" $(($(size "$c") + 100)) "$tf" bpe learn --input "$data" --merges 1000 --output "$c"
j="$tmp/m/tok.json"
"$tf" tokenizer train --input "$data" --vocab-size 280 --output "$j" > /dev/null 2>&1
cp "$j" "$j.prev"
refused "tokenizer" "$j" "$big" $(($(size "$j") + 100)) "$tf" tokenizer train --input "$data" --vocab-size 900 --output "$j"

# ---- on a full tmpfs -------------------------------------------------------------------------
# fill DIR: a filler file takes all the free space of DIR's filesystem but KEEP bytes.
fill() {
  rm -f "$1/filler"
  dd if=/dev/zero of="$1/filler" bs=4096 2> /dev/null
  local keep=$2 have
  have=$(size "$1/filler")
  truncate -s $((have > keep ? have - keep : 0)) "$1/filler"
}
mkdir -p "$small"
if [[ $(id -u) -ne 0 ]] && ! mount -t tmpfs -o size=4m tmpfs "$small" 2> /dev/null; then
  echo "full_disk_test: not root, so no tmpfs: the ENOSPC cases are skipped"
else
  mountpoint -q "$small" || mount -t tmpfs -o size=4m tmpfs "$small"
  check "a 4 MiB tmpfs is mounted" mountpoint -q "$small"
  nospace="No space left on device"
  cp -r "$tmp/r" "$small/r"
  rm -f "$small"/r/*.prev
  cp "$small/r/checkpoint.safetensors" "$small/r/checkpoint.safetensors.prev"
  fill "$small" 16384
  refused "checkpoint (full disk)" "$small/r/checkpoint.safetensors" "$nospace" - \
    "$tf" train --resume "$small/r" --steps 15
  rm -f "$small/filler" "$small/r/checkpoint.safetensors.prev"
  "$tf" train --resume "$small/r" --steps 15 > /dev/null 2>&1
  check "the run continues once there is room" test $? -eq 0
  rm -rf "$small/r"
  fill "$small" 40000
  refused "token cache (full disk)" "$small/t/tokens-" "$nospace" - "$tf" train "${flags[@]}" --out "$small/t"
  check "token cache (full disk): the new run folder is removed, cache and all" test ! -e "$small/t"
  rm -f "$small/filler"
  cp "$e.prev" "$small/model.gguf"
  cp "$e.prev" "$small/model.gguf.prev"
  fill "$small" 8192
  refused "export (full disk)" "$small/model.gguf" "$nospace" - "$tf" export --model "$m" --out "$small/model.gguf"
  # The other writers on the full disk too: a model, codes, a tokenizer, the metrics log.
  rm -f "$small/filler" "$small"/model.gguf*
  for f in model.safetensors codes tok.json; do cp "$tmp/m/$f.prev" "$small/$f" && cp "$tmp/m/$f.prev" "$small/$f.prev"; done
  fill "$small" 4096
  refused "model (full disk)" "$small/model.safetensors" "$nospace" - \
    "$tf" init --config "$tmp/cfg.json" --tokenizer char --seed 2 --out "$small/model.safetensors"
  refused "codes (full disk)" "$small/codes" "$nospace" - "$tf" bpe learn --input "$data" --merges 1000 --output "$small/codes"
  refused "tokenizer (full disk)" "$small/tok.json" "$nospace" - \
    "$tf" tokenizer train --input "$data" --vocab-size 900 --output "$small/tok.json"
  rm -f "$small/filler" "$small"/model.safetensors* "$small"/codes* "$small"/tok.json*
  cp -r "$tmp/r" "$small/r2"
  rm -f "$small"/r2/*.prev "$small"/r2/tokens-*.bin.tmp.*
  cp "$small/r2/metrics.jsonl" "$small/r2/metrics.jsonl.prev"
  # Every page full: resuming rewrites metrics.jsonl first (dropping records after the checkpoint),
  # and that write finds no room.
  fill "$small" 0
  refused "metrics.jsonl (full disk)" "$small/r2/metrics.jsonl" "$nospace" - \
    "$tf" train --resume "$small/r2" --steps 30 --eval-every 1
fi

echo "full_disk_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
