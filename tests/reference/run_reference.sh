#!/usr/bin/env bash
# Runs one model's Loom reference driver, then recomputes its run in PyTorch (float64).
#   run_reference.sh MODEL DRIVER OUT_DIR      e.g.  run_reference.sh dit build/reference_dit_driver build/reference/dit
# Uses Debian's /usr/bin/python3 with python3-torch (not a pyenv `python3` on PATH). A missing
# interpreter or torch is a failure, not a skip: the check must not silently vanish.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 MODEL DRIVER OUT_DIR" >&2
  exit 2
fi
model=$1 driver=$2 out=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${LOOM_REFERENCE_PYTHON:-/usr/bin/python3}

if [ ! -x "$python" ]; then
  echo "FAIL: $python not found; install Debian's python3-torch (apt-get install python3-torch)" >&2
  exit 1
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "FAIL: $python cannot import torch; install Debian's python3-torch (apt-get install python3-torch)" >&2
  exit 1
fi

# One thread each: the run is tiny, the machine is shared, and results stay deterministic.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE MKL_NUM_THREADS=1
# Keep the source tree clean of __pycache__.
export PYTHONDONTWRITEBYTECODE=1

rm -rf "$out"
mkdir -p "$out"
"$driver" "$out"
exec "$python" "$here/${model}_reference.py" "$out"
