#!/usr/bin/env bash
# The parity scripts' `loom` on the emulated device: a `train` run of several processes (under
# mpirun, or `launch`) trains with train.device = "cuda" through the host-staged device group;
# everything else -- the one-process reference runs, exports, checks -- runs as it is, on the
# host.
# Usage: LOOM_EMULATED=build/loom_emulated on_device.sh ARGS... (in place of `loom ARGS...`)
set -u
device=(--set train.device=\"cuda\" --set dist.device_group=\"staged\")
if [ "${1:-}" = train ] && [ "${OMPI_COMM_WORLD_SIZE:-1}" -gt 1 ]; then
  exec "$LOOM_EMULATED" "$@" "${device[@]}"
fi
if [ "${1:-}" = launch ] && [[ " $* " == *" -- train "* ]]; then  # the train command's words last
  exec "$LOOM_EMULATED" "$@" "${device[@]}"
fi
exec "$LOOM_EMULATED" "$@"
