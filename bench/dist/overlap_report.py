"""Prints the overlap benchmark's table from the runs' per-rank metrics (time_s per step).

Usage: overlap_report.py SKIP "LABEL=RUN_DIR" ..."""
import glob
import json
import os
import statistics
import sys

KEYS = ("step", "compute", "comm_exposed", "idle", "comm_in_flight")


def rank_files(run):
    return [os.path.join(run, "metrics.jsonl")] + sorted(glob.glob(os.path.join(run, "logs", "metrics-rank-*.jsonl")))


def split(run, skip):
    """Each rank's median step split, averaged over the ranks."""
    per_rank = []
    for path in rank_files(run):
        rows = [json.loads(l)["time_s"] for l in open(path) if '"time_s"' in l]
        rows = rows[skip:]
        per_rank.append({k: statistics.median(r[k] for r in rows) for k in KEYS})
    return {k: sum(r[k] for r in per_rank) / len(per_rank) for k in KEYS}, len(per_rank)


skip = int(sys.argv[1])
print(f"{'layout':<12} {'ranks':>5} {'step ms':>8} {'compute':>8} {'exposed':>8} {'idle':>6} "
      f"{'in flight':>9} {'hidden':>7} {'vs 1 proc':>9}")
base = None
for arg in sys.argv[2:]:
    label, run = arg.split("=", 1)
    t, n = split(run, skip)
    base = base or t["step"]
    hidden = 1 - t["comm_exposed"] / t["comm_in_flight"] if t["comm_in_flight"] > 0 else float("nan")
    print(f"{label:<12} {n:>5} {1e3 * t['step']:>8.1f} {1e3 * t['compute']:>8.1f} "
          f"{1e3 * t['comm_exposed']:>8.1f} {1e3 * t['idle']:>6.1f} {1e3 * t['comm_in_flight']:>9.1f} "
          f"{hidden:>7.0%} {t['step'] / base:>8.2f}x")
print("ms per step (median over steps, mean over ranks); exposed: waits on collectives; idle: waits "
      "for data;\nin flight: time some collective was running; hidden: the part of it compute "
      "covered.")
