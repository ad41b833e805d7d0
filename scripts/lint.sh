#!/usr/bin/env bash
# `make lint`: the format check and clang-tidy over the whole tree. Both must pass.
#   scripts/lint.sh [BUILD_DIR [JOBS]]      (defaults: build, nproc)
# 1. clang-format 14 (.clang-format): every C++ file git knows (*.cpp, *.h) is unchanged by
#    `clang-format --dry-run --Werror`.
# 2. clang-tidy 14 (.clang-tidy) on every translation unit of src/, tests/ and bench/ (with the
#    headers of the tree they include), JOBS at a time, through BUILD_DIR/compile_commands.json
#    (a configured build folder; nothing needs to be compiled). Any finding fails.
# Prints each step's time.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
jobs="${2:-$(nproc)}"

tool() {  # tool NAME: the 14 release of NAME, or NAME itself when it is release 14
  if command -v "$1-14" >/dev/null 2>&1; then
    echo "$1-14"
  elif command -v "$1" >/dev/null 2>&1 && "$1" --version | grep -q 'version 14\.'; then
    echo "$1"
  else
    echo "lint: $1 14 not found (scripts/install-deps.sh --lint installs it)" >&2
    exit 1
  fi
}
clang_format="$(tool clang-format)"
clang_tidy="$(tool clang-tidy)"

start=$SECONDS
echo "== clang-format: every *.cpp and *.h unchanged"
git ls-files -z '*.cpp' '*.h' | xargs -0 "$clang_format" --dry-run --Werror
echo "clang-format: clean ($((SECONDS - start)) s)"

if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "lint: $build/compile_commands.json missing (configure first: make configure)" >&2
  exit 1
fi
start=$SECONDS
mapfile -t units < <(git ls-files 'src/*.cpp' 'tests/*.cpp' 'bench/*.cpp')
echo "== clang-tidy: ${#units[@]} translation units, $jobs at a time"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
# The tests' precompiled header is GCC's, which clang cannot read: clang-tidy gets the compile
# commands without it (the test files include every header they use themselves).
mkdir "$logs/db"
python3 - "$build/compile_commands.json" "$logs/db/compile_commands.json" << 'EOF'
import json, re, sys
db = json.load(open(sys.argv[1]))
for e in db:
    e["command"] = re.sub(r" -include \S*cmake_pch\.hxx| -Winvalid-pch", "", e["command"])
json.dump(db, open(sys.argv[2], "w"))
EOF
# One log per unit (named after its path), so parallel runs never interleave lines of one finding.
status=0
printf '%s\0' "${units[@]}" |
  xargs -0 -P "$jobs" -I{} bash -c '"$1" -p "$2" --quiet "$4" > "$3/$(echo "$4" | tr / _).log" 2>&1' \
    _ "$clang_tidy" "$logs/db" "$logs" {} || status=$?
# clang also prints how many warnings it saw (nearly all in system headers, which are not reported).
cat "$logs"/*.log | grep -v -E '^[0-9]+ warnings?( and [0-9]+ errors?)? generated\.$' || true
if [[ $status -ne 0 ]]; then
  echo "clang-tidy: findings above ($((SECONDS - start)) s)" >&2
  exit 1
fi
echo "clang-tidy: clean ($((SECONDS - start)) s)"
