#!/usr/bin/env bash
# Installs every Debian package Loom needs that is missing, and fetches the pinned PyPI wheels
# Debian lacks (oneDNN 3.2; the cuDNN frontend where there is a CUDA toolkit; with `test` or
# `compare`, the pinned Python environment of the tests). Idempotent;
# silent when all present.
set -euo pipefail

packages=(
  g++ cmake make ccache pkg-config
  python3 ca-certificates  # fetching the pinned PyPI wheels below (HTTPS)
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
# kernels against (PyTorch 2.x from PyPI comes with the tests' Python environment, at the end).
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

cache=${XDG_CACHE_HOME:-$HOME/.cache}/loom
fetch_wheel() { python3 "$(dirname "$0")/fetch_wheel.py" "$@"; }

# oneDNN 3.2 (GEMM on AVX2, AVX-512 and AMX) from Intel's PyPI wheels, built with GNU OpenMP
# like Loom: Debian 12 packages only oneDNN 2.6, whose bf16 GEMMs on AMX run 5-20% slower
# (docs/performance.md). The pinned files are checked against their SHA-256; CMake finds them
# in this cache (or at -DLOOM_ONEDNN_DIR=...).
dnnl=$cache/onednn-3.2.0
if [ ! -f "$dnnl/lib/libdnnl.so.3" ] || [ ! -f "$dnnl/include/oneapi/dnnl/dnnl.hpp" ]; then
  echo "bootstrap: fetching oneDNN 3.2.0 into $dnnl"
  pypi=https://files.pythonhosted.org/packages
  fetch_wheel "$pypi/d4/26/e1f06fc4810583d892831817e3217d32be475dd740c86c0b4058cec9d172/onednn_devel_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl" \
    9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284 \
    onednn_devel_cpu_gomp-2023.2.0.data/data/include/ "$dnnl/include"
  fetch_wheel "$pypi/65/b4/792e6d3ef02a0e14fdc0392bd378dc78f3c8356e6a40fda8c0b9366628a1/onednn_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl" \
    2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb \
    onednn_cpu_gomp-2023.2.0.data/data/lib/ "$dnnl/lib" libdnnl.so.3
  ln -sf libdnnl.so.3 "$dnnl/lib/libdnnl.so"
fi

# cuDNN's frontend (NVIDIA's open-source, header-only C++ API; not packaged by Debian) for the
# CUDA backend's fused attention, when there is a CUDA toolkit to build that backend with.
# PyPI's wheel carries the headers; only include/ is kept. CMake finds it in this cache (or at
# -DLOOM_CUDNN_FRONTEND_DIR=...).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cfe=$cache/cudnn-frontend-1.32.0
  if [ ! -f "$cfe/include/cudnn_frontend.h" ]; then
    echo "bootstrap: fetching cuDNN frontend 1.32.0 headers into $cfe"
    fetch_wheel "https://files.pythonhosted.org/packages/11/02/660e2dd9f9d9f940e1641443771730612c3aadaafbc5ef7a93cc313d519d/nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl" \
      c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0 include/ "$cfe/include"
  fi
fi

# `bootstrap.sh test` (what `make test` runs) and `bootstrap.sh compare`: the Python environment
# in which tests read Loom's files with the tools people use (transformers, tokenizers, tiktoken,
# TensorBoard, PyTorch 2.x), every package pinned by version and SHA-256 in
# scripts/python-requirements.txt. Wheels are kept in $cache/wheels (pip checks each against its
# pin before installing it), so a new environment costs no second download; the environment is
# made anew whenever the pins change. GPT-2's rank file (tiktoken's r50k_base.tiktoken) comes
# from the openai-whisper source package on PyPI, which ships it.
if [ "${1:-}" = test ] || [ "${1:-}" = compare ]; then
  venv=$cache/venv
  pins=$(dirname "$0")/python-requirements.txt
  pins_sum=$(sha256sum "$pins" | cut -d' ' -f1)
  if [ "$(cat "$venv/.pins-sha256" 2>/dev/null)" != "$pins_sum" ]; then
    echo "bootstrap: installing the pinned Python packages into $venv (about 3 GB, PyTorch among them)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"  # Debian's (python3-venv), whatever python3 is first on PATH
    pip=("$venv/bin/pip" -q --disable-pip-version-check)
    "${pip[@]}" download --require-hashes -r "$pins" -d "$cache/wheels"
    "${pip[@]}" install --no-index --find-links "$cache/wheels" --require-hashes -r "$pins"
    echo "$pins_sum" > "$venv/.pins-sha256"
  fi
  r50k=$cache/r50k_base.tiktoken
  if [ ! -s "$r50k" ]; then
    echo "bootstrap: fetching GPT-2's rank file into $r50k"
    python3 - "$r50k" <<'PY'
import hashlib, io, os, sys, tarfile, urllib.request
url = ("https://files.pythonhosted.org/packages/35/8e/d36f8880bcf18ec026a55807d02fe4c7357da9f25aeb"
       "d92f85178000c0dc/openai_whisper-20250625.tar.gz")
data = urllib.request.urlopen(url, timeout=300).read()
member = tarfile.open(fileobj=io.BytesIO(data)).extractfile(
    "openai_whisper-20250625/whisper/assets/gpt2.tiktoken").read()
# tiktoken's own expected hash of r50k_base.tiktoken (tiktoken_ext/openai_public.py)
if hashlib.sha256(member).hexdigest() != \
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930":
    sys.exit("bootstrap: GPT-2's rank file in openai-whisper does not match its SHA-256")
open(sys.argv[1] + ".tmp", "wb").write(member)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PY
  fi
fi
