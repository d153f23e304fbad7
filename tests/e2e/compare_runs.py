"""Compares two Loom runs: the loss at every logged step (metrics.jsonl) and the final model
weights (the newest checkpoint's "model" tensors, read by sharded_checkpoint.py, which also
checks every piece's checksum), each to a relative tolerance.

Usage: compare_runs.py RUN_DIR_A RUN_DIR_B RTOL [--losses-only] [--weights-rtol=W]
Prints the largest differences; exits 1 if any exceeds RTOL (the weights: W, default RTOL), or
the runs do not line up.

The optimizer state (the "optimizer" tensors: AdamW moments) is compared the same way.
One part of the weights is left out of the check and only reported: the key bias of attention
(the middle third of each attn.qkv.bias and of its moments; the test configs use as many key as
query heads).
Softmax does not change when the same amount is added to every score of a query, so the exact
gradient of the key bias is zero and what reaches it is rounding noise, which Adam scales up to
steps of about the learning rate: its values are noise in any run, not a parity signal."""
import json
import os
import sys

import numpy as np

from sharded_checkpoint import read_checkpoint


def losses(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return {m["step"]: float(m["loss"]) for m in map(json.loads, f) if "loss" in m}


def newest_checkpoint(run):
    steps = sorted(d for d in os.listdir(run) if d.startswith("step-"))
    if not steps:
        sys.exit(f"no checkpoint in {run}")
    return os.path.join(run, steps[-1])


def main():
    a, b, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    wtol = rtol
    for arg in sys.argv[4:]:
        if arg.startswith("--weights-rtol="):
            wtol = float(arg.split("=", 1)[1])
    la, lb = losses(a), losses(b)
    if sorted(la) != sorted(lb):
        sys.exit(f"logged steps differ: {sorted(la)} vs {sorted(lb)}")
    worst_loss = max(abs(la[s] - lb[s]) / max(abs(la[s]), 1e-12) for s in la)
    if "--losses-only" in sys.argv[4:]:
        print(f"{len(la)} steps: max relative loss difference {worst_loss:.2e}")
        if worst_loss > rtol:
            print(f"FAIL: above {rtol}")
            sys.exit(1)
        return
    ca, cb = newest_checkpoint(a), newest_checkpoint(b)
    if os.path.basename(ca) != os.path.basename(cb):
        sys.exit(f"final checkpoints differ: {ca} vs {cb}")
    worst_w, worst_name, key_bias, count = 0.0, "", 0.0, 0
    ra, rb = read_checkpoint(ca), read_checkpoint(cb)
    for part in ("model", "optimizer"):
        wa, wb = ra[part], rb[part]
        if sorted(wa) != sorted(wb):
            sys.exit(f"the {part} parts hold different tensors")
        count += len(wa)
        for name in wa:
            x, y = wa[name].astype(np.float64).ravel(), wb[name].astype(np.float64).ravel()
            if "attn.qkv.bias" in name:
                n = x.size // 3
                key_bias = max(key_bias, np.abs(x[n:2 * n] - y[n:2 * n]).max())
                x, y = np.delete(x, np.s_[n:2 * n]), np.delete(y, np.s_[n:2 * n])
            d = np.abs(x - y).max() / max(np.abs(x).max(), 1e-12)
            if d > worst_w:
                worst_w, worst_name = d, f"{part}: {name}"
    print(f"{len(la)} steps: max relative loss difference {worst_loss:.2e}; "
          f"final weights and optimizer state ({count} tensors): max difference / tensor max "
          f"{worst_w:.2e} ({worst_name}); key bias (noise, not checked): max difference {key_bias:.1e}")
    if worst_loss > rtol or worst_w > wtol:
        print(f"FAIL: losses above {rtol} or weights above {wtol}")
        sys.exit(1)


main()
