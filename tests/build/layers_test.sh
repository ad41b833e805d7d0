#!/usr/bin/env bash
# The include-layer check (cmake/check_layers.cmake against the table cmake/layers.cmake) catches
# what it must. Run by ctest (label "build") as
#   tests/build/layers_test.sh check SOURCE_DIR CMAKE             the checker on the tree and planted copies
#   tests/build/layers_test.sh build SOURCE_DIR CMAKE [GEN [CXX]]  a planted copy's build fails before compiling
# "check" passes the real tree (strictly: no listed dependency unused), then plants one bad include
# at a time in a copy of cmake/ and src/ and expects failure naming the file, line, header and both
# layers. "build" configures a copy of CMakeLists.txt, cmake/ and src/ with an upward include in
# src/core/error.cpp (a header that exists, so only the check can stop it) and expects
# `cmake --build --target tformer_core` to fail with the check's message and no object compiled.
# Prints "N passed, M failed" and exits non-zero when anything failed.
set -uo pipefail
mode="$1"
src="$2"
cmake="$3"
generator="${4:-Ninja}"
cxx="${5:-c++}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...: the command must succeed
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; return 1; fi
}
contains() { grep -qF -- "$2" "$1" || { echo "--- $1 lacks: $2"; cat "$1"; return 1; }; }

fresh_copy() {  # fresh_copy DIR: DIR holds a copy of the tree's CMakeLists.txt, cmake/ and src/
  rm -rf "$1" && mkdir -p "$1" && cp -R "$src/CMakeLists.txt" "$src/cmake" "$src/src" "$1/"
}
plant() {  # plant FILE LINE TEXT: TEXT becomes line LINE of FILE
  sed -i "${2}i $3" "$1"
}
run_checker() {  # run_checker ROOT LOG: the checker on ROOT, output to LOG; its status
  "$cmake" -DSOURCE_ROOT="$1" -DSTRICT=ON -P "$src/cmake/check_layers.cmake" > "$2" 2>&1
}
expect_failure() {  # expect_failure NAME ROOT EXPECTED...: the checker fails, its output has each
  local name="$1" root="$2"; shift 2
  local log="$tmp/$name.log"
  run_checker "$root" "$log"
  check "$name: the checker fails" test $? -ne 0
  for text in "$@"; do check "$name: names '$text'" contains "$log" "$text"; done
}

if [[ "$mode" == check ]]; then
  run_checker "$src" "$tmp/tree.log"
  check "the tree passes the check" test $? -eq 0
  [[ -s "$tmp/tree.log" ]] && cat "$tmp/tree.log"

  # An upward include: core (the bottom layer) includes the model's header.
  fresh_copy "$tmp/up"
  plant "$tmp/up/src/core/error.cpp" 2 '#include "model/model.h"'
  expect_failure upward "$tmp/up" 'src/core/error.cpp:2: error: #include "model/model.h"' \
    'upward include: layer core includes layer model, which is above it'

  # A header of the layer above included through angle brackets, from a header.
  fresh_copy "$tmp/angle"
  plant "$tmp/angle/src/kernels/softmax.h" 3 '#include <generate/sampler.h>'
  expect_failure angle "$tmp/angle" 'src/kernels/softmax.h:3: error: #include <generate/sampler.h>' \
    'layer kernels includes layer generate, which is above it'

  # Beside: neither layer is below the other.
  fresh_copy "$tmp/beside"
  plant "$tmp/beside/src/tokenizer/tokenizer.cpp" 2 '#include "io/safetensors.h"'
  expect_failure beside "$tmp/beside" 'src/tokenizer/tokenizer.cpp:2: error: #include "io/safetensors.h"' \
    'layer tokenizer includes layer io, which is not below it'

  # Below but not in the table: the target would not link what the file uses.
  fresh_copy "$tmp/undeclared"
  plant "$tmp/undeclared/src/generate/sampler.cpp" 2 '#include "io/safetensors.h"'
  expect_failure undeclared "$tmp/undeclared" 'src/generate/sampler.cpp:2: error: #include "io/safetensors.h"' \
    'layer generate includes layer io, which is below it but not listed in TFORMER_LAYER_DEPS_generate'

  # A relative path around the check, a folder of src/ that is no layer, a file outside every layer.
  fresh_copy "$tmp/relative"
  plant "$tmp/relative/src/io/safetensors.cpp" 2 '#include "../train/data.h"'
  mkdir "$tmp/relative/src/extra"
  echo '#include "model/model.h"' > "$tmp/relative/src/stray.cpp"
  expect_failure relative "$tmp/relative" 'src/io/safetensors.cpp:2: error: #include "../train/data.h"' \
    'src/extra/: error: a directory of src/ that is not a layer' \
    "src/stray.cpp: error: a source file outside every layer's folder"

  # The table itself: a layer may list only layers before it (no cycles), and every listing is used.
  fresh_copy "$tmp/cycle"
  sed -i 's/^set(TFORMER_LAYER_DEPS_core "")$/set(TFORMER_LAYER_DEPS_core model)/' "$tmp/cycle/cmake/layers.cmake"
  expect_failure cycle "$tmp/cycle" 'layer core lists model, which is not a layer before it'
  fresh_copy "$tmp/unused"
  sed -i 's/^set(TFORMER_LAYER_DEPS_plot core)$/set(TFORMER_LAYER_DEPS_plot core kernels)/' "$tmp/unused/cmake/layers.cmake"
  expect_failure unused "$tmp/unused" 'layer plot lists kernels, but no file of src/plot/ includes it'
elif [[ "$mode" == build ]]; then
  fresh_copy "$tmp/tree"
  plant "$tmp/tree/src/core/error.cpp" 2 '#include "model/model.h"'
  "$cmake" -S "$tmp/tree" -B "$tmp/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DTFORMER_BUILD_TESTS=OFF \
    -DTFORMER_BUILD_BENCH=OFF > "$tmp/configure.log" 2>&1
  check "the planted copy configures" test $? -eq 0 || cat "$tmp/configure.log"
  "$cmake" --build "$tmp/build" --target tformer_core > "$tmp/build.log" 2>&1
  check "its build fails" test $? -ne 0
  check "the build names file, header and layers" contains "$tmp/build.log" \
    'src/core/error.cpp:2: error: #include "model/model.h": upward include: layer core includes layer model'
  check "nothing was compiled" test -z "$(find "$tmp/build/CMakeFiles/tformer_core.dir" -name '*.o')"
  # Without the planted line the same build's check passes (and is re-run: the source changed).
  sed -i 2d "$tmp/tree/src/core/error.cpp"
  "$cmake" --build "$tmp/build" --target tformer_layer_check > "$tmp/build2.log" 2>&1
  check "the check passes once the include is gone" test $? -eq 0 || cat "$tmp/build2.log"
else
  echo "usage: $0 check|build SOURCE_DIR CMAKE [GENERATOR [CXX]]" >&2
  exit 2
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
