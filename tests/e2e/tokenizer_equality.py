"""Token-for-token equality of Loom's tokenizers with tiktoken and Hugging Face tokenizers
(both from PyPI) on one text, usually the whole KJV Bible.

Usage: tokenizer_equality.py LOOM TEXT WORK R50K_TIKTOKEN

Cases (each: Loom's ids from `loom tokenizer check --ids` against the tool's own encoding):
  tiktoken      GPT-2's ranks (r50k_base) and tiktoken's own GPT-2 pattern, encode_ordinary
  hf-json       a byte-level BPE trained by tokenizers on TEXT (GPT-2 pre-tokenizer), tokenizer.json
  hf-vocab      the same model as vocab.json + merges.txt
  hf-split      a BPE with a Llama-3 style Split regex + ByteLevel, trained by tokenizers
  loom-as-hf    Loom's own BPE (loom tokenizer train), written as tokenizer.json by
                `loom tokenizer convert`, encoded by tokenizers against Loom's own encoding
  tiktoken-as-hf the GPT-2 ranks written as tokenizer.json, encoded by tokenizers against tiktoken
"""
import os
import subprocess
import sys

import numpy as np
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers, decoders

loom, text_path, work, r50k = sys.argv[1:5]
text = open(text_path, encoding="utf-8").read()
failures = 0


def loom_ids(spec, pattern="gpt2"):
    out = os.path.join(work, "ids.npy")
    subprocess.run([loom, "tokenizer", "check", "--tokenizer", spec, "--pattern", pattern,
                    "--input", text_path, "--ids", out], check=True, stdout=subprocess.DEVNULL)
    return np.load(out).tolist()


def compare(case, ours, theirs):
    global failures
    n = min(len(ours), len(theirs))
    first = next((i for i in range(n) if ours[i] != theirs[i]), n if len(ours) != len(theirs) else -1)
    mismatches = sum(a != b for a, b in zip(ours, theirs)) + abs(len(ours) - len(theirs))
    print(f"{case}: {len(theirs)} tokens compared, {mismatches} mismatches")
    if first >= 0:
        failures += 1
        print(f"  first difference at token {first}: loom {ours[first:first + 8]} "
              f"vs {theirs[first:first + 8]}")


# tiktoken: GPT-2 as tiktoken defines it (its own pattern string, its own loader).
ranks = tiktoken.load.load_tiktoken_bpe(r50k)
gpt2 = tiktoken.Encoding("r50k_base", pat_str=openai_public.r50k_pat_str, mergeable_ranks=ranks,
                         special_tokens={"<|endoftext|>": 50256})
reference = gpt2.encode_ordinary(text)
compare("tiktoken", loom_ids(r50k), reference)

# Hugging Face tokenizers: byte-level BPEs it trains itself.
def train_bpe(pre_tokenizer, vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tok

hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), 4096)
hf_dir = os.path.join(work, "hf-bpe")
os.makedirs(hf_dir, exist_ok=True)
hf.save(os.path.join(hf_dir, "tokenizer.json"))
reference = hf.encode(text, add_special_tokens=False).ids
compare("hf-json", loom_ids(os.path.join(hf_dir, "tokenizer.json")), reference)
vocab_dir = os.path.join(work, "hf-vocab")
os.makedirs(vocab_dir, exist_ok=True)
hf.model.save(vocab_dir)
compare("hf-vocab", loom_ids(vocab_dir), reference)

llama3_pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
split = train_bpe(pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(llama3_pattern), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 3000)
split.save(os.path.join(work, "hf-split.json"))
compare("hf-split", loom_ids(os.path.join(work, "hf-split.json")),
        split.encode(text, add_special_tokens=False).ids)

# Loom's own BPE, read by tokenizers.
own = os.path.join(work, "loom.bpe")
subprocess.run([loom, "tokenizer", "train", "--input", text_path, "--vocab", "2048", "--out", own],
               check=True, stdout=subprocess.DEVNULL)
subprocess.run([loom, "tokenizer", "convert", "--tokenizer", own, "--out",
                os.path.join(work, "loom.json")], check=True, stdout=subprocess.DEVNULL)
compare("loom-as-hf", Tokenizer.from_file(os.path.join(work, "loom.json"))
        .encode(text, add_special_tokens=False).ids, loom_ids(own))

# GPT-2's ranks as tokenizer.json (derived merges), read by tokenizers.
subprocess.run([loom, "tokenizer", "convert", "--tokenizer", r50k, "--out",
                os.path.join(work, "r50k.json")], check=True, stdout=subprocess.DEVNULL)
compare("tiktoken-as-hf", Tokenizer.from_file(os.path.join(work, "r50k.json"))
        .encode(text, add_special_tokens=False).ids, gpt2.encode_ordinary(text))

sys.exit(1 if failures else 0)
