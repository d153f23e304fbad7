"""Times training steps of Loom's standard benchmark models in PyTorch 2.x (torch_models.py).

    python torch_bench.py MODEL DTYPE MODE WARMUP STEPS [DEVICE [BATCH [SEQ]]]
        MODEL: gpt2_124m | gpt_small | dit_small    DTYPE: f32 | bf16 (autocast)
        MODE:  eager | compile (torch.compile of the model's forward + loss)
        DEVICE: cpu (the default) | cuda; BATCH, SEQ: other than the standard shape

One step is what `loom bench` times: forward, loss, backward, global gradient-norm clipping to
1.0 and a fused AdamW update (weight decay 0.1 on Linear weights). The shapes are those of
src/loom/bench/step_bench.cpp. Prints one JSON line: per-step times in milliseconds, and the
versions and threads PyTorch ran with. With MODE compile the warm-up steps include compilation.
"""

import json
import math
import re
import sys
import time

import torch

import torch_models as tm

# Keep in step with src/loom/bench/step_bench.cpp (standard_bench_configs).
GPT2_124M = dict(vocab_size=50304, context=1024, width=768, depth=12, heads=12, mlp_ratio=4.0)
GPT_SMALL = dict(GPT2_124M, vocab_size=256, context=256, width=384, depth=6, heads=6)
DIT_SMALL = dict(image_size=28, channels=1, patch=2, width=256, depth=6, heads=4, mlp_ratio=4.0, num_classes=10)
MODELS = {
    "gpt2_124m": ("gpt", GPT2_124M, 4, 64),
    "gpt_small": ("gpt", GPT_SMALL, 16, 256),
    "dit_small": ("dit", DIT_SMALL, 64, None),
}


def config_versions():
    """MKL and oneDNN versions as torch.__config__.show() states them."""
    show = torch.__config__.show()
    mkl = re.search(r"Intel\(R\) (?:oneAPI )?Math Kernel Library Version ([\d.]+)", show)
    dnnl = re.search(r"(?:oneDNN|MKL-DNN)[^\n]*?v([\d.]+)", show)
    return {"mkl": mkl.group(1) if mkl else "none", "onednn": dnnl.group(1) if dnnl else "none",
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def main():
    model_name, dtype, mode, warmup, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    if dtype not in ("f32", "bf16") or mode not in ("eager", "compile"):
        raise SystemExit(f"torch_bench: unknown dtype {dtype!r} or mode {mode!r}")
    kind, c, batch, seq = MODELS[model_name]
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    batch = int(sys.argv[7]) if len(sys.argv) > 7 else batch
    seq = int(sys.argv[8]) if len(sys.argv) > 8 and seq is not None else seq
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if kind == "gpt":
        model = tm.Gpt(**c)
        ids = torch.randint(0, c["vocab_size"], (batch, seq + 1), generator=g)
        inputs = (ids[:, :-1].contiguous(), ids[:, 1:].contiguous())
    else:
        model = tm.Dit(**c)
        s = c["image_size"]
        inputs = (torch.randn(batch, c["channels"], s, s, generator=g), torch.randn(batch, c["channels"], s, s, generator=g),
                  torch.rand(batch, generator=g), torch.randint(0, c["num_classes"] + 1, (batch,), generator=g))
    tm.init_like_loom(model)
    model.to(device)
    inputs = tuple(t.to(device) for t in inputs)
    opt = tm.adamw(model)
    loss_fn = torch.compile(model) if mode == "compile" else model
    params = list(model.parameters())
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn(*inputs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()  # the step's kernels are asynchronous
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed * 1e3)
        if not math.isfinite(loss.item()):
            raise SystemExit(f"non-finite loss at step {i}")
    print(json.dumps({"model": model_name, "dtype": dtype, "mode": mode, "device": device,
                      "batch": batch, "seq": seq, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), **config_versions(), "ms": times, "loss": float(loss)}))


if __name__ == "__main__":
    main()
