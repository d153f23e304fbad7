#!/usr/bin/python3
"""Loom against PyTorch 2.x from PyPI on the same models, alternating in one run (docs/performance.md).

    compare.py [--loom build/loom] [--python VENV/bin/python] [--configs gpt2_124m gpt_small dit_small]
               [--dtypes f32 bf16] [--modes eager compile] [--rounds 3] [--warmup 2] [--steps 3]
               [--threads N] [--out FILE.md]

Needs `bash scripts/bootstrap.sh compare` first (PyTorch 2.x from PyPI in the pinned virtual environment,
whose python is the default --python). For each config, `rounds` rounds; in each round every
PyTorch variant (dtype x mode: eager, torch.compile) and Loom in every dtype run one after the
other (A B A B), each as a fresh process timing `warmup` + `steps` training steps with the same
threads, shapes and step (forward, loss, backward, clip, AdamW). A round's ratio is the fastest
PyTorch variant's median step time at that precision over Loom's (> 1: Loom is faster); the table
gives the median over rounds and each round's ratio. bf16 is PyTorch's bf16 autocast, only worth
timing where the CPU has native bf16 (AVX512-BF16 or AMX): leave it out of --dtypes elsewhere.

Before the timed rounds, one untimed step of each side runs with ONEDNN_VERBOSE=1 so the table
names the oneDNN GEMM kernels that did the work, and one traced Loom step (`loom bench --trace`)
splits Loom's step into its kernels: the linear layers' GEMMs, attention, the optimizer (AdamW
and the gradient norm) and everything else. The GEMMs run at what oneDNN gives and the optimizer
at what memory gives, so their sum is a floor for Loom's step; the fastest PyTorch variant over
that floor is the most any work on the rest could make of the ratio. OPENBLAS_CORETYPE, which
this workplace sets for OpenBLAS, is left as it is for both (PyPI's PyTorch uses MKL and oneDNN,
not OpenBLAS).
"""

import argparse
import collections
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
VENV_PYTHON = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "loom",
                           "venv", "bin", "python")


def environment(args, verbose=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if verbose:
        env["ONEDNN_VERBOSE"] = "1"
    return env


def torch_command(config, dtype, mode, warmup, steps, args):
    return [args.python, os.path.join(HERE, "torch_bench.py"), config, dtype, mode, str(warmup), str(steps)]


def run_torch(config, dtype, mode, args):
    out = subprocess.run(torch_command(config, dtype, mode, args.warmup, args.steps, args), env=environment(args),
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compare: PyTorch {config} {dtype} {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def loom_command(config, dtype, warmup, steps, args, json_path=None):
    cmd = [args.loom, "bench", config, "--precision", dtype, "--warmup", str(warmup), "--steps", str(steps)]
    return cmd + (["--json", json_path] if json_path else [])


def run_loom(config, dtype, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(loom_command(config, dtype, args.warmup, args.steps, args, f.name), env=environment(args),
                       capture_output=True, text=True, check=True)
        return json.loads(open(f.name).read().strip().splitlines()[-1])


def gemm_kernels(cmd, args):
    """The oneDNN kernels one step ran, by how many calls: 'matmul brg:avx512_core_bf16 x75, ...'."""
    out = subprocess.run(cmd, env=environment(args, verbose=True), capture_output=True, text=True)
    counts = collections.Counter(f"{m.group(1)} {m.group(2)}" for m in
                                 re.finditer(r",exec,cpu,(matmul|inner_product|convolution),([^,]+),", out.stdout))
    return ", ".join(f"{k} x{n}" for k, n in counts.most_common()) or "no oneDNN GEMM (MKL or own kernels)"


# The traced step's kernels ("op" events of `loom bench --trace`) in the groups the table shows.
STEP_GROUPS = {"matmul": "gemm", "attention_forward": "attention", "attention_backward": "attention",
               "adamw_step": "optimizer", "sum_squares": "optimizer"}


def step_composition(config, dtype, args):
    """ms of one traced Loom step per group (gemm, attention, optimizer, rest), from its kernel events."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [args.loom, "bench", config, "--precision", dtype, "--warmup", str(args.warmup), "--steps", "1",
               "--trace", f.name]
        subprocess.run(cmd, env=environment(args), capture_output=True, text=True, check=True)
        trace = json.load(open(f.name))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ms = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "op":
            ms[STEP_GROUPS.get(e["name"], "rest")] += e["dur"] / 1000.0
    return ms


def cpu_description():
    name, family, flags = "unknown", "?", set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and name == "unknown":
            name = line.split(":", 1)[1].strip()
        if line.startswith("cpu family"):
            family = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name} (family {family}; {' '.join(isa) or 'no AVX2'})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loom", default=os.path.join(HERE, "..", "..", "build", "loom"))
    p.add_argument("--python", default=VENV_PYTHON, help="a python with PyTorch 2.x from PyPI")
    p.add_argument("--configs", nargs="+", default=["gpt2_124m", "gpt_small", "dit_small"])
    p.add_argument("--dtypes", nargs="+", default=["f32", "bf16"], choices=["f32", "bf16"])
    p.add_argument("--modes", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps (with compile: they include compiling)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", help="also write the table (markdown) here")
    args = p.parse_args()
    if not os.path.exists(args.python):
        sys.exit(f"compare: no {args.python}; run `bash scripts/bootstrap.sh compare` (PyTorch 2.x from PyPI)")

    started = time.time()
    kernels = {}
    for config in args.configs:
        for dtype in args.dtypes:
            kernels[config, dtype, "loom"] = gemm_kernels(loom_command(config, dtype, 0, 1, args), args)
            kernels[config, dtype, "torch"] = gemm_kernels(torch_command(config, dtype, "eager", 0, 1, args), args)

    composition = {(config, dtype): step_composition(config, dtype, args)
                   for config in args.configs for dtype in args.dtypes}

    torch_ms, loom_ms, loom_mfu, info = {}, {}, {}, {}
    for config in args.configs:
        for r in range(args.rounds):
            for dtype in args.dtypes:
                for mode in args.modes:
                    t = run_torch(config, dtype, mode, args)
                    info = t
                    torch_ms.setdefault((config, dtype, mode), []).append(statistics.median(t["ms"]))
                    print(f"  round {r + 1}: {config} {dtype}: PyTorch {mode} {torch_ms[config, dtype, mode][-1]:.0f} ms",
                          file=sys.stderr, flush=True)
                lm = run_loom(config, dtype, args)
                loom_ms.setdefault((config, dtype), []).append(lm["median_ms"])
                loom_mfu.setdefault((config, dtype), []).append((lm["mfu"], lm["mfu_hardware"]))
                print(f"  round {r + 1}: {config} {dtype}: Loom {lm['median_ms']:.0f} ms (MFU {100 * lm['mfu']:.0f}%)",
                      file=sys.stderr, flush=True)

    lines = [
        f"{time.strftime('%Y-%m-%d')}, {cpu_description()}, {args.threads} threads, {platform.machine()}; "
        f"PyTorch {info['torch']} from PyPI (MKL {info['mkl']}, oneDNN {info['onednn']}, "
        f"CPU capability {info['cpu_capability']}, {info['threads']} threads); "
        f"{args.rounds} rounds of {args.warmup} warm-up + {args.steps} timed steps; {time.time() - started:.0f} s in all.",
        "",
        "| config | precision | Loom ms/step | PyTorch ms/step (" + ", ".join(args.modes) + ") | fastest PyTorch / Loom "
        "| Loom MFU (of GEMM ceiling, of hardware peak) |",
        "|---|---|---|---|---|---|",
    ]
    for config in args.configs:
        for dtype in args.dtypes:
            per_mode = {m: statistics.median(torch_ms[config, dtype, m]) for m in args.modes}
            best = min(per_mode, key=per_mode.get)
            ratios = [min(torch_ms[config, dtype, m][r] for m in args.modes) / loom_ms[config, dtype][r]
                      for r in range(args.rounds)]
            spelled = ", ".join(f"**{per_mode[m]:.0f}**" if m == best else f"{per_mode[m]:.0f}" for m in args.modes)
            lines.append(f"| {config} | {dtype} | {statistics.median(loom_ms[config, dtype]):.0f} | {spelled} | "
                         f"**{statistics.median(ratios):.2f}x** ({', '.join(f'{x:.2f}' for x in ratios)}) | "
                         f"{100 * statistics.median(m for m, _ in loom_mfu[config, dtype]):.0f}%, "
                         f"{100 * statistics.median(h for _, h in loom_mfu[config, dtype]):.0f}% |")
    lines += ["", "Loom's step by kernel (one traced step, ms; the floor is GEMMs + optimizer; the bound is the "
              "fastest PyTorch variant's median over that floor):", "",
              "| config | precision | traced step | GEMMs | attention | optimizer | rest | floor | bound |",
              "|---|---|---|---|---|---|---|---|---|"]
    for config in args.configs:
        for dtype in args.dtypes:
            ms = composition[config, dtype]
            fastest = min(statistics.median(torch_ms[config, dtype, m]) for m in args.modes)
            floor = ms["gemm"] + ms["optimizer"]
            lines.append(f"| {config} | {dtype} | {sum(ms.values()):.0f} | {ms['gemm']:.0f} | {ms['attention']:.0f} | "
                         f"{ms['optimizer']:.0f} | {ms['rest']:.0f} | {floor:.0f} | {fastest / floor:.2f}x |")
    lines += ["", "GEMM kernels (oneDNN, one step; PyTorch eager):", ""]
    for (config, dtype, side), k in kernels.items():
        lines.append(f"- {config} {dtype} {'Loom' if side == 'loom' else 'PyTorch'}: {k}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
