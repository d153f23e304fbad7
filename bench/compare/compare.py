#!/usr/bin/python3
"""Loom against PyTorch on the same models, side by side in one run (bench/compare/README.md).

    compare.py [--loom build/loom] [--configs gpt2_124m gpt_small dit_small]
               [--loom-dtypes f32 bf16] [--torch-dtypes f32 bf16]
               [--rounds 3] [--warmup 1] [--steps 3] [--threads N] [--out FILE.md]

For each config, `rounds` rounds; each round runs, alternately, PyTorch and Loom (A B A B) in
every dtype, each as a fresh process timing `warmup` + `steps` training steps (same threads,
shapes and step: forward, loss, backward, clip, AdamW). A round's ratio is PyTorch's median
step time over Loom's (so > 1: Loom is faster, in tokens or images per second); the table
gives the median over rounds. Besides same-dtype ratios it gives Loom bf16 against PyTorch f32.
(PyTorch's bf16 autocast is only worth timing on CPUs with native bf16, AVX512-BF16 or AMX:
elsewhere its bf16 matmuls fall back to slow reference loops, minutes per step; leave bf16
out of --torch-dtypes there.)

Needs `bash scripts/bootstrap.sh compare` first (an optimised BLAS for PyTorch). PyTorch runs
at its best: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (which this workplace sets to
pin OpenBLAS to generic kernels) are removed from its environment only, and the OpenBLAS core
it picked is reported. Loom's environment is left as it is.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_torch(config, dtype, args):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["OMP_NUM_THREADS"] = str(args.threads)
    env["OPENBLAS_VERBOSE"] = "2"  # prints the core OpenBLAS chose ("Core: Zen")
    out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_bench.py"), config, dtype,
                          str(args.warmup), str(args.steps)],
                         env=env, capture_output=True, text=True, check=True)
    core = re.search(r"Core: (\S+)", out.stdout + out.stderr)
    if not core:
        sys.exit("compare: PyTorch is not running on OpenBLAS (it printed no 'Core:' line), so it "
                 "would use the reference BLAS and be timed far below its best; install it with "
                 "`bash scripts/bootstrap.sh compare` (Debian's libopenblas0-pthread)")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["blas_core"] = core.group(1)
    return result


def run_loom(config, dtype, args):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([args.loom, "bench", config, "--precision", dtype, "--warmup", str(args.warmup),
                        "--steps", str(args.steps), "--json", f.name],
                       env=env, capture_output=True, text=True, check=True)
        return json.loads(open(f.name).read().strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loom", default=os.path.join(HERE, "..", "..", "build", "loom"))
    p.add_argument("--configs", nargs="+", default=["gpt2_124m", "gpt_small", "dit_small"])
    p.add_argument("--loom-dtypes", nargs="+", default=["f32", "bf16"])
    p.add_argument("--torch-dtypes", nargs="+", default=["f32", "bf16"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", help="also write the table (markdown) here")
    args = p.parse_args()

    torch_ms, loom_ms, loom_mfu, cores = {}, {}, {}, set()
    started = time.time()
    for config in args.configs:
        for r in range(args.rounds):
            for dtype in sorted(set(args.loom_dtypes) | set(args.torch_dtypes)):
                if dtype in args.torch_dtypes:
                    t = run_torch(config, dtype, args)
                    cores.add(t["blas_core"])
                    torch_ms.setdefault((config, dtype), []).append(statistics.median(t["ms"]))
                    print(f"  round {r + 1}: {config} {dtype}: PyTorch {torch_ms[config, dtype][-1]:.0f} ms",
                          file=sys.stderr, flush=True)
                if dtype in args.loom_dtypes:
                    lm = run_loom(config, dtype, args)
                    loom_ms.setdefault((config, dtype), []).append(lm["median_ms"])
                    loom_mfu.setdefault((config, dtype), []).append(lm["mfu"])
                    print(f"  round {r + 1}: {config} {dtype}: Loom {lm['median_ms']:.0f} ms "
                          f"(MFU {100 * lm['mfu']:.0f}%)", file=sys.stderr, flush=True)

    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    lines = [
        f"{time.strftime('%Y-%m-%d')}, {cpu}, {args.threads} threads, {platform.machine()}; "
        f"PyTorch {torch_version()} with OpenBLAS core {', '.join(sorted(cores))}; "
        f"{args.rounds} rounds of {args.warmup} warm-up + {args.steps} timed steps; "
        f"{time.time() - started:.0f} s in all.",
        "",
        "| config | Loom | PyTorch | Loom ms/step | PyTorch ms/step | Loom / PyTorch throughput | Loom MFU |",
        "|---|---|---|---|---|---|---|",
    ]
    pairs = [(d, d) for d in args.loom_dtypes if d in args.torch_dtypes]
    if "bf16" in args.loom_dtypes and "f32" in args.torch_dtypes:
        pairs.append(("bf16", "f32"))
    for config in args.configs:
        for ld, td in pairs:
            ratios = [t / l for t, l in zip(torch_ms[config, td], loom_ms[config, ld])]
            lines.append(f"| {config} | {ld} | {td} | {statistics.median(loom_ms[config, ld]):.0f} | "
                         f"{statistics.median(torch_ms[config, td]):.0f} | "
                         f"**{statistics.median(ratios):.2f}x** ({', '.join(f'{x:.2f}' for x in ratios)}) | "
                         f"{100 * statistics.median(loom_mfu[config, ld]):.0f}% |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


def torch_version():
    out = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
