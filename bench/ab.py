#!/usr/bin/python3
"""Two Loom builds against each other on `loom bench`, alternating in one run (A B A B).

    bench/ab.py OLD_LOOM NEW_LOOM [--configs gpt2_124m dit_small] [--precision f32|bf16]
                [--rounds 5] [--warmup 2] [--steps 5]

Each round runs `loom bench CONFIG` of A, then of B (the order swapped every other round, so
neither always runs second), each a fresh process. A round's ratio is A's median step time over
B's (> 1: B is faster); printed per round, with the median over rounds. This is how a change to
the step is judged: one build from before it, one from after, on the same machine at the same
time.
"""

import argparse
import json
import statistics
import subprocess
import tempfile


def bench(loom, config, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([loom, "bench", config, "--precision", args.precision, "--warmup", str(args.warmup),
                        "--steps", str(args.steps), "--json", f.name], capture_output=True, text=True, check=True)
        return json.loads(open(f.name).read().strip().splitlines()[-1])["median_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--configs", nargs="+", default=["gpt2_124m", "gpt_small", "dit_small"])
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    for config in args.configs:
        ratios, old_ms, new_ms = [], [], []
        for r in range(args.rounds):
            order = [("old", args.old), ("new", args.new)]
            times = {}
            for name, loom in order if r % 2 == 0 else reversed(order):
                times[name] = bench(loom, config, args)
            old_ms.append(times["old"])
            new_ms.append(times["new"])
            ratios.append(times["old"] / times["new"])
        print(f"{config} {args.precision}: old {statistics.median(old_ms):.1f} ms, new {statistics.median(new_ms):.1f} ms, "
              f"old/new x{statistics.median(ratios):.3f} (rounds: {', '.join(f'{x:.3f}' for x in ratios)})", flush=True)


if __name__ == "__main__":
    main()
