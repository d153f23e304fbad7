"""One step's GPU time by kernel, from Nsight Compute's raw CSV (scripts/device_check.sh profile).

    python3 kernel_summary.py KERNELS.csv

Sums gpu__time_duration over the launches of each kernel (template arguments and parameter
lists dropped from the names) and prints the total, then the kernels from the costliest down.
"""

import csv
import re
import sys
from collections import defaultdict

SCALE = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
         "second": 1e3, "s": 1e3}


def short(name):
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    name = re.sub(r"\(.*", "", name)  # the parameter list
    while True:  # template arguments, innermost first
        stripped = re.sub(r"<[^<>]*>", "", name)
        if stripped == name:
            return name.strip()
        name = stripped


def main():
    lines = open(sys.argv[1], errors="replace").read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit(f"kernel_summary: no Nsight Compute raw CSV in {sys.argv[1]}")
    rows = list(csv.reader(lines[start:]))
    header, units = rows[0], rows[1]
    col_name, col_time = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    scale = SCALE[units[col_time]]
    ms, count = defaultdict(float), defaultdict(int)
    for row in rows[2:]:
        if len(row) != len(header):
            continue
        key = short(row[col_name])
        ms[key] += float(row[col_time].replace(",", "")) * scale
        count[key] += 1
    total = sum(ms.values())
    print(f"{sum(count.values())} launches, {total:.2f} ms of kernel time")
    print(f"{'ms':>9} {'share':>6} {'launches':>8}  kernel")
    for key in sorted(ms, key=ms.get, reverse=True):
        print(f"{ms[key]:9.3f} {100 * ms[key] / total:5.1f}% {count[key]:8d}  {key[:110]}")


if __name__ == "__main__":
    main()
