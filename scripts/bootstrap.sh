#!/usr/bin/env bash
# Installs every Debian package Loom needs that is missing. Idempotent; silent when all present.
set -euo pipefail

packages=(
  g++ cmake make ccache pkg-config
  libdnnl-dev           # oneDNN: GEMM (AVX2/AVX-512/AMX)
  libgtest-dev          # unit tests
  libbenchmark-dev      # kernel benchmarks
  zlib1g-dev            # gzip-compressed datasets, PNG
  libtomlplusplus-dev   # TOML configs
  libcli11-dev          # the `loom` command line's argument parsing (header-only)
  nlohmann-json3-dev    # JSON parsing and string escaping (checkpoints, metrics.jsonl)
  openmpi-bin libopenmpi-dev  # processes across cores and machines (mpirun, MPI)
  libxxhash-dev         # checkpoint checksums (xxhash64)
  libpcre2-dev          # tokenizers' pre-tokenisation regexes (GPT-2, tiktoken, tokenizer.json)
  libspng-dev libarchive-dev  # image datasets: PNG files, webdataset tar shards
  dataset-fashion-mnist # the main job's data
  bible-kjv bible-kjv-text  # the text corpus (the `bible` program prints it)
  python3-torch python3-pil python3-xxhash # independent references in tests (PyTorch models,
                            # PNG decoding, checkpoint checksums)
  python3-venv              # tests that read Loom's files with PyPI tools (TensorBoard)
  iproute2                  # the shaped-link test: network namespaces, veth pairs, tc
  chromium                  # the run report's test: the page rendered headless, a screenshot
  time                      # /usr/bin/time: peak resident memory in the token-file test
)

# `bootstrap.sh fuzz`: what `make fuzz` needs besides (clang with libFuzzer and the
# sanitizer runtimes, and clang's OpenMP).
if [ "${1:-}" = fuzz ]; then
  packages+=(clang libclang-rt-14-dev libomp-dev)
fi
# `bootstrap.sh compare`: what bench/compare needs besides: the headers torch.compile builds its
# kernels against (the PyTorch 2.x from PyPI itself goes into a virtual environment, at the end).
if [ "${1:-}" = compare ]; then
  packages+=(python3-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyTorch 2.x from PyPI for bench/compare: what a user would install, in a virtual environment
# of its own (Debian's python3-torch stays for the float64 references of the tests); and
# transformers, with which tests/e2e/hf_export_test.sh also loads Loom's exports.
if [ "${1:-}" = compare ]; then
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/loom/venv-compare
  if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "bootstrap: installing PyTorch from PyPI into $venv (about 3 GB with its CUDA libraries)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch numpy
  fi
  "$venv/bin/python" -c "import transformers" 2>/dev/null || "$venv/bin/pip" install -q transformers
fi
