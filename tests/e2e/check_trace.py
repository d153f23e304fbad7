#!/usr/bin/env python3
"""Checks a merged Loom trace (train/profiler.h) as Chrome trace-event JSON.

    check_trace.py TRACE.json RANKS

Passes (exit 0) when: the file parses as {"traceEvents": [...]}; every rank 0..RANKS-1 is a
process named "rank R"; every rank has forward (per module), backward (per autograd node), op
(per kernel call), optimizer and memory-counter events; every collective ("cat": "collective")
sits on a track named "collectives N" (never the main thread's) with an integer byte count, and
every rank has collectives that moved bytes; complete events on one track never partly overlap
(each pair is disjoint or one contains the other: enclosing scopes such as a module's forward
contain its ops); timestamps never go back within a track, in file order.
"""
import collections
import json
import sys


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def main():
    path, ranks = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail("no traceEvents list")
    process_names, thread_names = {}, {}
    for e in events:
        for key in ("ph", "name", "pid", "tid"):
            if key not in e:
                fail(f"event without {key}: {e}")
        if e["ph"] == "M" and e["name"] == "process_name":
            process_names[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] in ("X", "C"):
            if not isinstance(e.get("ts"), (int, float)):
                fail(f"event without a numeric ts: {e}")
            if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
                fail(f"complete event without a dur >= 0: {e}")
        else:
            fail(f"unexpected phase {e['ph']!r}: {e}")
    for r in range(ranks):
        if process_names.get(r) != f"rank {r}":
            fail(f"rank {r} is missing (process names: {process_names})")
    if set(process_names) != set(range(ranks)):
        fail(f"processes {sorted(process_names)}, expected ranks 0..{ranks - 1}")

    cats = collections.defaultdict(collections.Counter)
    moved = collections.Counter()
    tracks = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "M":
            continue
        cats[e["pid"]][e.get("cat", "")] += 1
        key = (e["pid"], e["tid"])
        if e["ph"] == "X":
            tracks[key].append(e)
        if e.get("cat") == "collective":
            track = thread_names.get(key, "")
            if not track.startswith("collectives "):
                fail(f"collective {e['name']} on track {track!r}, not a collectives track")
            b = e.get("args", {}).get("bytes")
            if not isinstance(b, int) or b < 0:
                fail(f"collective {e['name']} without a byte count: {e}")
            moved[e["pid"]] += b
    for r in range(ranks):
        for cat in ("forward", "backward", "op", "optimizer", "memory", "collective"):
            if cats[r][cat] == 0:
                fail(f"rank {r} has no {cat} events (has {dict(cats[r])})")
        if moved[r] == 0:
            fail(f"rank {r}'s collectives moved no bytes")

    last_ts = {}
    for e in events:
        if e["ph"] == "M":
            continue
        key = (e["pid"], e["tid"])
        if e["ts"] < last_ts.get(key, float("-inf")):
            fail(f"timestamps go back on track {key}: {e['ts']} after {last_ts[key]} ({e['name']})")
        last_ts[key] = e["ts"]
    for key, xs in tracks.items():
        open_ends = []  # ends of the enclosing events still open, innermost last
        for e in xs:  # in file order, which is by start time (checked above)
            start, end = e["ts"], e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1] + 1e-6:
                fail(f"on track {key} {e['name']} [{start}, {end}] partly overlaps an enclosing "
                     f"event ending at {open_ends[-1]}")
            open_ends.append(end)
    n = sum(len(xs) for xs in tracks.values())
    print(f"trace OK: {ranks} ranks, {n} complete events on {len(tracks)} tracks, "
          f"bytes in collectives per rank {dict(moved)}")


if __name__ == "__main__":
    main()
