#!/usr/bin/python3
"""Times training steps of Loom's standard benchmark models in PyTorch: the models of
tests/reference/ (written independently of Loom's code), in float32 or under bf16 autocast.

    torch_bench.py MODEL DTYPE WARMUP STEPS     MODEL: gpt2_124m | gpt_small | dit_small
                                               DTYPE: f32 | bf16

One step is what `loom bench` times: forward, loss, backward, global gradient-norm clipping to
1.0 and an AdamW update (weight decay 0.1 on Linear weights). Prints one JSON line with the
per-step times in milliseconds. The shapes are those of src/loom/bench/step_bench.cpp; weights are
drawn like Loom's (normal, std 0.02, zero biases, unit norms): timing does not depend on the
values, only on shapes and dtypes.

The DiT reference spells LayerNorm, GELU and SiLU out elementwise in float64 (for the parity
test); here they are swapped for torch's fused F.layer_norm, F.gelu and F.silu and the fixed
embeddings are made in float32, so PyTorch is timed at its best, not handicapped.
"""

import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
import dit_reference as dit  # noqa: E402
import gpt_reference as gpt  # noqa: E402

# Keep in step with src/loom/bench/step_bench.cpp (standard_bench_configs).
GPT2_124M = dict(vocab_size=50304, context=1024, width=768, depth=12, heads=12, kv_heads=0,
                 mlp_ratio=4.0, style="gpt2", tie_embeddings=True, swiglu_hidden=0, rope_theta=1e4)
GPT_SMALL = dict(GPT2_124M, vocab_size=256, context=256, width=384, depth=6, heads=6)
DIT_SMALL = dict(image_size=28, channels=1, patch=2, width=256, depth=6, heads=4, mlp_ratio=4.0,
                 num_classes=10)
MODELS = {
    "gpt2_124m": ("gpt", GPT2_124M, 4, 64),
    "gpt_small": ("gpt", GPT_SMALL, 16, 256),
    "dit_small": ("dit", DIT_SMALL, 64, None),
}

# PyTorch at its best for the DiT reference's elementwise spellings (same math).
dit.layer_norm = lambda x, eps=dit.NORM_EPS: F.layer_norm(x, (x.shape[-1],), eps=eps)
dit.gelu_tanh = lambda x: F.gelu(x, approximate="tanh")
dit.silu = F.silu
_timestep_embedding, _pos_embed = dit.timestep_embedding, dit.sincos_pos_embed_2d
dit.timestep_embedding = lambda t, dim, max_period=10000.0: _timestep_embedding(t, dim, max_period).float()
_pos_cache = {}
dit.sincos_pos_embed_2d = lambda dim, grid: _pos_cache.setdefault((dim, grid), _pos_embed(dim, grid).float())


def make_params(expected):
    g = torch.Generator().manual_seed(0)
    params = {}
    for name, (shape, decay) in expected.items():
        if name.endswith(".bias"):
            t = torch.zeros(shape)
        elif len(shape) == 1:
            t = torch.ones(shape)
        else:
            t = torch.randn(shape, generator=g) * 0.02
        params[name] = t.requires_grad_(True)
    decay = [params[n] for n, (_, d) in expected.items() if d]
    no_decay = [params[n] for n, (_, d) in expected.items() if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    return params, opt


def main():
    model, dtype, warmup, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    kind, c, batch, seq = MODELS[model]
    g = torch.Generator().manual_seed(1)
    if kind == "gpt":
        params, opt = make_params(gpt.expected_parameters(c))
        ids = torch.randint(0, c["vocab_size"], (batch, seq + 1), generator=g)
        data = {"ids": ids[:, :-1], "targets": ids[:, 1:]}
        loss_fn = lambda: gpt.loss(params, data, c)  # noqa: E731
    else:
        params, opt = make_params(dit.expected_parameters(c))
        s = c["image_size"]
        data = {"x0": torch.randn(batch, c["channels"], s, s, generator=g),
                "eps": torch.randn(batch, c["channels"], s, s, generator=g),
                "t": torch.rand(batch, generator=g),
                "labels": torch.randint(0, c["num_classes"] + 1, (batch,), generator=g)}
        loss_fn = lambda: dit.loss(params, data, c)  # noqa: E731
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed * 1e3)
        if not math.isfinite(float(loss)):
            raise SystemExit(f"non-finite loss at step {i}")
    blas = os.environ.get("OPENBLAS_CORETYPE", "(auto)")
    print(json.dumps({"model": model, "dtype": dtype, "threads": torch.get_num_threads(),
                      "openblas_coretype": blas, "ms": times, "loss": float(loss)}))


if __name__ == "__main__":
    main()
