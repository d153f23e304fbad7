"""Loads a Hugging Face model directory with transformers (from PyPI) and checks the logits of
a prompt against LOGITS.npy (what `loom sample --logits` wrote): exits 1 unless they agree
within RTOL x max|logit|. The prompt is tokenized by transformers' own AutoTokenizer from the
directory's tokenizer.json where it has one, else as bytes.

Usage: hf_transformers_logits.py MODEL_DIR PROMPT LOGITS.npy RTOL WHAT"""
import sys

import numpy as np
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

d, prompt, npy, rtol, what = sys.argv[1:6]
m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
if os.path.exists(os.path.join(d, "tokenizer.json")):
    ids = AutoTokenizer.from_pretrained(d)(prompt, add_special_tokens=False).input_ids
    what += ", prompt tokenized by transformers"
else:
    ids = list(prompt.encode())
with torch.no_grad():
    z = m(torch.tensor([ids])).logits[0].double().numpy()
err = np.abs(z - np.load(npy)).max() / np.abs(z).max()
print(f"{what} ({type(m).__name__}): logits within {err:.2e} of max|logit| (bound {rtol})")
sys.exit(0 if err < float(rtol) else 1)
