"""Loads a Hugging Face model directory with transformers (from PyPI) and checks the logits of
a byte-level prompt against LOGITS.npy (what `loom sample --logits` wrote): exits 1 unless
they agree within RTOL x max|logit|.

Usage: hf_transformers_logits.py MODEL_DIR PROMPT LOGITS.npy RTOL WHAT"""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

d, prompt, npy, rtol, what = sys.argv[1:6]
m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
with torch.no_grad():
    z = m(torch.tensor([list(prompt.encode())])).logits[0].double().numpy()
err = np.abs(z - np.load(npy)).max() / np.abs(z).max()
print(f"{what} ({type(m).__name__}): logits within {err:.2e} of max|logit| (bound {rtol})")
sys.exit(0 if err < float(rtol) else 1)
