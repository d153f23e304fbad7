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

# cuDNN's frontend (NVIDIA's open-source, header-only C++ API; not packaged by Debian) for the CUDA backend's fused
# attention, when there is a CUDA toolkit to build that backend with. PyPI's wheel carries the
# headers; the pinned file is checked against its SHA-256 and only include/ is kept. CMake finds
# it in this cache (or at -DLOOM_CUDNN_FRONTEND_DIR=...).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cfe=${XDG_CACHE_HOME:-$HOME/.cache}/loom/cudnn-frontend-1.32.0
  if [ ! -f "$cfe/include/cudnn_frontend.h" ]; then
    echo "bootstrap: fetching cuDNN frontend 1.32.0 headers into $cfe"
    python3 - "$cfe" <<'PY'
import hashlib, io, os, shutil, sys, urllib.request, zipfile
url = ("https://files.pythonhosted.org/packages/11/02/"
       "660e2dd9f9d9f940e1641443771730612c3aadaafbc5ef7a93cc313d519d/"
       "nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
sha256 = "c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0"
data = urllib.request.urlopen(url, timeout=300).read()
if hashlib.sha256(data).hexdigest() != sha256:
    sys.exit("bootstrap: the cuDNN frontend wheel does not match its SHA-256")
dest = sys.argv[1]
tmp = dest + ".partial"
shutil.rmtree(tmp, ignore_errors=True)
with zipfile.ZipFile(io.BytesIO(data)) as wheel:
    for name in wheel.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            wheel.extract(name, tmp)
shutil.rmtree(dest, ignore_errors=True)
os.rename(tmp, dest)
PY
  fi
fi
