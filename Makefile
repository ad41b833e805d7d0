# The README's commands. `make test` and `make demo` do all the set-up on a fresh Debian machine.
BUILD ?= build
SAN_BUILD ?= build-sanitize
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The seconds of make test-interop's server soak (tools/interop/serve_soak.mjs, docs/serve.md).
SOAK_SECONDS ?= 60

.PHONY: test-long fuzz all deps configure build build-tformer test test-sanitize test-tsan test-interop build-portable test-portable test-portable-kernels demo bench lint ci-full clean

all: build

deps:
	@bash scripts/install-deps.sh
	@bash scripts/fetch-gpt2-vocab.sh
	@bash scripts/fetch-tiktoken-vocab.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Only the tformer executable and the libraries under it: no tests, no benchmarks.
build-tformer: configure
	@cmake --build $(BUILD) -j $(JOBS) --target tformer

# Builds everything and runs every test through ctest; ends with ctest's summary line.
test: build
	@cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS)

# The long forms of the reliability checks: the kill-anywhere loop with 50 SIGKILLs (make test
# runs 8; KILL_SEED=N replays a sequence).
test-long: build-tformer
	@KILLS=50 bash tests/cli/kill_test.sh $(BUILD)/tformer

# The live checks against outside programs (docs/gguf.md): tformer's GGUF files run by llama.cpp
# itself (node-llama-cpp's prebuilt CPU binaries) and read by @huggingface/gguf, both installed in
# tools/interop with the exact versions of its package-lock.json; and tformer's SentencePiece
# tokenizer against Debian's spm_train and python3-sentencepiece on freshly trained models. Needs
# npm and those packages; `make test` does not.
test-interop: build-tformer
	@bash scripts/install-deps.sh --interop
	@bash scripts/install-interop.sh
	@node tools/interop/llama_cpp_check.mjs --tformer $(BUILD)/tformer
	@node tools/interop/serve_openai.mjs --tformer $(BUILD)/tformer
	@node tools/interop/serve_soak.mjs --tformer $(BUILD)/tformer --seconds $(SOAK_SECONDS)
	@node tools/interop/web_page.mjs --tformer $(BUILD)/tformer
	@/usr/bin/python3 tools/reference/gen_sentencepiece_fixtures.py --check $(BUILD)/tformer

# The same tests built with AddressSanitizer and UndefinedBehaviorSanitizer.
test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFORMER_SANITIZE=ON -DTFORMER_BUILD_BENCH=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	@cd $(SAN_BUILD) && OMP_WAIT_POLICY=passive ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# The server's tests (tests/test_serve_*.cpp) under ThreadSanitizer. Debian's libgomp and OpenBLAS
# are not instrumented, so the inference runs single-threaded here (OMP_NUM_THREADS=1: no OpenMP
# thread is ever started); the server's own threads (HTTP connections, the inference loop, the
# streams between them) are all checked.
TSAN_BUILD ?= build-tsan
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFORMER_TSAN=ON -DTFORMER_BUILD_BENCH=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_serve_engine test_serve_http
	@cd $(TSAN_BUILD) && OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -j $(JOBS) -L serve

# The library, CLI, benchmarks and tests for a portable x86-64-v2 target (no -march=native, so
# no AVX-512: every kernel takes its portable path): proves the code does not depend on this
# CPU's instruction set, and that the portable kernels pass the same tests.
build-portable: deps
	@cmake -S . -B build-portable -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFORMER_NATIVE=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-portable -j $(JOBS)

# Every test on the portable build (make ci-full).
test-portable: build-portable
	@cd build-portable && ctest --output-on-failure -j $(JOBS)

# CI's share of it: the kernel tests (the code that differs by instruction set: each kernel's
# AVX-512 path against its portable one) on the portable build, which builds the library and
# just those tests. That share covers every path only while instruction-set code stays in
# src/kernels/, so it first fails if any other source names an intrinsic or an ISA macro.
test-portable-kernels: deps
	@isa=$$(grep -rlE 'immintrin|__AVX|__F16C__|__FMA__|__m(128|256|512)' src --include='*.cpp' --include='*.h' | grep -v '^src/kernels/' || true); \
	  if [ -n "$$isa" ]; then echo "test-portable-kernels: instruction-set code outside src/kernels/ (make test-portable runs its tests): $$isa" >&2; exit 1; fi
	@cmake -S . -B build-portable -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFORMER_NATIVE=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-portable -j $(JOBS) --target $$(cd tests && ls test_kernels_*.cpp | sed 's/\.cpp$$//')
	@cd build-portable && ctest --output-on-failure -j $(JOBS) -L kernels

# The libFuzzer targets of fuzz/ (docs/fuzzing.md), built with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz, each run for FUZZ_SECONDS (default 60) from its seed
# corpus and dictionary; new inputs gather in build-fuzz/corpus/, a crash's input in
# build-fuzz/artifacts/. FUZZ_TARGETS picks some (default: all).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(patsubst fuzz/fuzz_%.cpp,%,$(wildcard fuzz/fuzz_*.cpp))
fuzz: deps
	@bash scripts/install-deps.sh --fuzz
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFORMER_FUZZ=ON $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The main job. scripts/demo.sh runs nothing but $(BUILD)/tformer, so only that is built.
demo: build-tformer
	@bash scripts/demo.sh $(BUILD)

bench: build
	@bash bench/run.sh $(BUILD)

# The format check (clang-format 14, every *.cpp and *.h) and clang-tidy 14 (.clang-tidy) on every
# translation unit of src/, tests/ and bench/; needs only a configured build folder.
lint: configure
	@bash scripts/install-deps.sh --lint
	@bash scripts/lint.sh $(BUILD) $(JOBS)

# Everything CI runs (.ci/run: format, test, the portable kernel tests, test-interop with the web
# page in headless Chromium, the server's tests under ThreadSanitizer, the demo) plus the slow
# checks it leaves out: clang-tidy on every translation unit, every test under ASan and UBSan,
# every test on the portable build, the 50-kill loop, and every fuzz target for 15 s.
ci-full: lint test-sanitize test-portable test-long
	@FUZZ_SECONDS=15 $(MAKE) --no-print-directory fuzz
	@bash .ci/run

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD) build-portable build-fuzz
