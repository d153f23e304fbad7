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
  hf-sentencepiece-{llama2,metaspace}
                a SentencePiece-style BPE (byte fallback) trained by tokenizers, laid out as
                Llama 2's tokenizer.json (Prepend + Replace normalizer) and with Metaspace (split),
                on TEXT with lines of unseen characters and runs of spaces around it
  sentencepiece-*-as-hf  the same written back by `loom tokenizer convert`, encoded (and
                decoded) by tokenizers
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

# SentencePiece-style BPEs (byte fallback) laid out as Llama 2's tokenizer.json and as the
# Metaspace one: trained by tokenizers on TEXT, then the ids moved so that <unk> <s> </s> and
# the 256 byte tokens come first, as in Llama 2. The text gets lines with characters the
# training never saw (byte fallback) and runs of spaces.
import json
from tokenizers import normalizers

def sentencepiece(layout):
    tok = Tokenizer(models.BPE())
    if layout == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                               normalizers.Replace(" ", "\u2581")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                     split=True)
    trainer = trainers.BpeTrainer(vocab_size=2000, show_progress=False)
    tok.train_from_iterator(text.splitlines(keepends=True)[:20000], trainer)
    saved = json.loads(tok.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    for entry, _ in sorted(saved["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(entry, len(vocab))
    saved["model"].update({"vocab": vocab, "byte_fallback": True, "fuse_unk": True,
                           "unk_token": "<unk>"})
    saved["added_tokens"] = [{"id": i, "content": c, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    saved["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    path = os.path.join(work, f"sp-{layout}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(saved, f, ensure_ascii=False)
    return path

extra = "\n".join(["Ünïcödé 東京 🙂 naïve  café   three spaces", "  leading and trailing  ",
                   "\t tab"]) + "\n"
sp_text = extra + text + extra
sp_path = os.path.join(work, "sp-text.txt")
with open(sp_path, "w", encoding="utf-8") as f:
    f.write(sp_text)
for layout in ("llama2", "metaspace"):
    path = sentencepiece(layout)
    hf_sp = Tokenizer.from_file(path)
    theirs = hf_sp.encode(sp_text, add_special_tokens=False).ids
    out = os.path.join(work, "ids.npy")
    subprocess.run([loom, "tokenizer", "check", "--tokenizer", path, "--input", sp_path,
                    "--ids", out], check=True, stdout=subprocess.DEVNULL)
    compare(f"hf-sentencepiece-{layout}", np.load(out).tolist(), theirs)
    # Written back by Loom, read by tokenizers.
    again = os.path.join(work, f"sp-{layout}-loom.json")
    subprocess.run([loom, "tokenizer", "convert", "--tokenizer", path, "--out", again],
                   check=True, stdout=subprocess.DEVNULL)
    compare(f"sentencepiece-{layout}-as-hf", Tokenizer.from_file(again)
            .encode(sp_text, add_special_tokens=False).ids, theirs)
    sample = extra + text[:20000]
    if hf_sp.decode(hf_sp.encode(sample, add_special_tokens=False).ids) != Tokenizer.from_file(again).decode(
            Tokenizer.from_file(again).encode(sample, add_special_tokens=False).ids):
        print(f"sentencepiece-{layout}: Loom's tokenizer.json decodes differently")
        failures += 1

sys.exit(1 if failures else 0)
