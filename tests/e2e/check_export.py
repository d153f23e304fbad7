"""`loom ckpt export` wrote one plain safetensors file: read it with an independent reader and
compare it, tensor by tensor and bit for bit, with the sharded checkpoint's model part (read
independently too, with every piece's checksum checked).

Usage: check_export.py CHECKPOINT_DIR EXPORTED.safetensors"""
import sys

import numpy as np

from sharded_checkpoint import read_checkpoint, read_safetensors

ckpt, exported = sys.argv[1], sys.argv[2]
model = read_checkpoint(ckpt)["model"]
flat, metadata = read_safetensors(exported, with_metadata=True)
if sorted(flat) != sorted(model):
    sys.exit(f"tensor names differ: {sorted(set(flat) ^ set(model))}")
for name, want in model.items():
    got = flat[name]
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        sys.exit(f"{name}: exported {got.dtype}{got.shape} differs from the checkpoint's")
if metadata.get("part") != "model":
    sys.exit(f"metadata: {metadata}")
print(f"exported file: {len(flat)} tensors, identical to the {ckpt} model part")
