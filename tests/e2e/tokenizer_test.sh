#!/usr/bin/env bash
# Loom's tokenizers against the tools people use, token for token on the whole KJV text
# (tokenizer_equality.py says which cases): tiktoken with GPT-2's ranks, Hugging Face
# tokenizers with tokenizer.json, vocab.json + merges.txt and a Split regex, and Loom's own
# BPE and GPT-2's ranks written as tokenizer.json. tiktoken and tokenizers come from PyPI into
# a virtual environment; GPT-2's rank file (r50k_base, as tiktoken checks it by SHA-256) from
# the openai-whisper source package on PyPI, which ships it. Where either cannot be had, one
# line says so and the test is skipped (77), never passed.
# Usage: tokenizer_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/loom
venv=$cache/venv-tokenizers
if ! "$venv/bin/python" -c "import tiktoken, tokenizers, numpy" 2>/dev/null; then
  rm -rf "$venv"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q tiktoken tokenizers numpy; } \
    > "$work/pip.log" 2>&1; then
    echo "SKIP: tiktoken and tokenizers from PyPI could not be installed into $venv: $(tail -1 "$work/pip.log")"
    exit 77
  fi
fi
r50k=$cache/r50k_base.tiktoken
if [ ! -s "$r50k" ]; then
  if ! "$venv/bin/python" - "$r50k" > "$work/fetch.log" 2>&1 <<'PY'; then
import hashlib, io, sys, tarfile, urllib.request
url = ("https://files.pythonhosted.org/packages/35/8e/d36f8880bcf18ec026a55807d02fe4c7357da9f25aeb"
       "d92f85178000c0dc/openai_whisper-20250625.tar.gz")
data = urllib.request.urlopen(url, timeout=120).read()
member = tarfile.open(fileobj=io.BytesIO(data)).extractfile(
    "openai_whisper-20250625/whisper/assets/gpt2.tiktoken").read()
# tiktoken's expected hash of r50k_base.tiktoken (tiktoken_ext/openai_public.py)
assert hashlib.sha256(member).hexdigest() == \
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", "wrong file"
open(sys.argv[1] + ".tmp", "wb").write(member)
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PY
    echo "SKIP: GPT-2's rank file could not be fetched from PyPI: $(tail -1 "$work/fetch.log")"
    exit 77
  fi
fi
command -v bible > /dev/null || { echo "FAIL: bible (bible-kjv) is not installed"; exit 1; }
bible "Gen1:1-Rev22:21" < /dev/null > "$work/kjv.txt"
"$venv/bin/python" "$here/tokenizer_equality.py" "$loom" "$work/kjv.txt" "$work" "$r50k"
