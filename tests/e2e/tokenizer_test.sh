#!/usr/bin/env bash
# Loom's tokenizers against the tools people use, token for token on the whole KJV text
# (tokenizer_equality.py says which cases): tiktoken with GPT-2's ranks, Hugging Face
# tokenizers with tokenizer.json, vocab.json + merges.txt and a Split regex, and Loom's own
# BPE and GPT-2's ranks written as tokenizer.json. tiktoken and tokenizers come from the pinned
# Python environment (python_env.sh), GPT-2's rank file (r50k_base, checked by SHA-256) from
# scripts/bootstrap.sh test.
# Usage: tokenizer_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
source "$here/python_env.sh"
need_python tiktoken tokenizers numpy
need_file "$r50k"
command -v bible > /dev/null || { echo "FAIL: bible (bible-kjv) is not installed"; exit 1; }
bible "Gen1:1-Rev22:21" < /dev/null > "$work/kjv.txt"
"$py" "$here/tokenizer_equality.py" "$loom" "$work/kjv.txt" "$work" "$r50k"
