# A rig of network namespaces joined by shaped links, to run MPI jobs whose ranks talk over
# real TCP through a slow link. Source it, then:
#   rig_up K RATE [DELAY]   K worker namespaces, each joined to a hub by a link shaped in
#                           both directions to RATE (tc syntax: 100mbit) and DELAY each way
#                           (20ms: netem, or RIG_DELAY_LINE where the kernel has no netem; see
#                           rig_up); addresses 10.213.0.1..K on the hub's bridge (10.213.0.254),
#                           nothing outside the namespaces. RIG_SHAPE describes the links,
#                           RIG_DELAYED says whether the delay is on them (1) or not (0).
#   rig_mpirun ARGS...      mpirun in the hub, one rank per worker namespace (a launch agent
#                           enters each), TCP only, over the rig's addresses
#   rig_tx_bytes I          bytes worker I's link has sent so far
#   rig_health              the delay line's state and messages (for a failed run)
#   rig_down                kills what runs in the namespaces and deletes them (also on exit)
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; rig_check says whether it can run.
RIG_NET=10.213.0
RIG=loomrig$$
RIG_K=0
RIG_SHAPE=""

rig_check() {
  [ "$(id -u)" = 0 ] || { echo "not root"; return 1; }
  command -v ip > /dev/null && command -v tc > /dev/null || { echo "no iproute2"; return 1; }
  # Everything the rig does, once, on a probe: a namespace, a command inside it, a veth pair
  # into it, a shaped link.
  local probe=$RIG-probe ok=1
  ip netns add "$probe" 2> /dev/null || { echo "cannot create network namespaces"; return 1; }
  ip netns exec "$probe" true 2> /dev/null || ok=0
  [ $ok = 1 ] && { ip link add probe0 netns "$probe" type veth peer name probe1 netns "$probe" &&
    ip netns exec "$probe" tc qdisc add dev probe0 root tbf rate 10mbit burst 16000 latency 1s; } \
    > /dev/null 2>&1 || ok=0
  ip netns del "$probe" 2> /dev/null
  [ $ok = 1 ] || { echo "network namespaces cannot run commands, veth pairs or tc here"; return 1; }
}

# rig_netem: whether this kernel has netem (a probe on a veth pair in a namespace of its own).
rig_netem() {
  local probe=$RIG-netem ok=1
  ip netns add "$probe" 2> /dev/null || return 1
  ip link add probe0 netns "$probe" type veth peer name probe1 netns "$probe" 2> /dev/null &&
    ip netns exec "$probe" tc qdisc add dev probe0 root netem delay 1ms 2> /dev/null || ok=0
  ip netns del "$probe" 2> /dev/null
  [ $ok = 1 ]
}

# rig_shape NS DEV RATE [DELAY]: netem's rate and delay when DELAY is given (and the kernel has
# netem), else tbf's rate alone.
rig_shape() {
  local ns=$1 dev=$2 rate=$3 delay=${4:-}
  if [ -n "$delay" ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root netem delay "$delay" rate "$rate" limit 100000
    return
  fi
  # A burst of 10 ms of traffic (at least 16 kB): larger ones would let whole messages through
  # at the link's own speed.
  local bits
  bits=$(echo "$rate" | awk '{n = $1 + 0; u = tolower($1); sub(/^[0-9.]+/, "", u);
    m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : 1; printf "%d", n * m}')
  local burst=$((bits / 800 > 16000 ? bits / 800 : 16000))
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 2s
}

# The links are veth pairs, shaped by netem (rate and delay) or, without a delay, tbf. A delay
# on a kernel without netem: each link is a pair of TAP devices joined by RIG_DELAY_LINE
# (tests/e2e/lowcomm/delay_line.cpp, DELAY in ms) and shaped by tbf; without RIG_DELAY_LINE the
# delay is left out and RIG_SHAPE says so.
rig_up() {
  local k=$1 rate=$2 delay=${3:-} hub=$RIG-hub i mode=tbf
  RIG_K=$k
  trap rig_down EXIT
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" addr add "$RIG_NET.254/24" dev br0
  ip -n "$hub" link set br0 up
  for i in $(seq 1 "$k"); do
    ip netns add "$RIG-w$i"
    ip -n "$RIG-w$i" link set lo up
  done
  if [ -n "$delay" ]; then
    if rig_netem; then
      mode=netem
    elif [ -x "${RIG_DELAY_LINE:-}" ]; then
      mode=taps
      case $delay in
        *[0-9]ms) ;;
        *) echo "rig: the delay line takes a delay in ms (20ms), not '$delay'" >&2; return 1 ;;
      esac
      local args=() ms=${delay%ms}
      for i in $(seq 1 "$k"); do args+=("$RIG-w$i" "w$i" "$hub" "p$i"); done
      RIG_DELAY_LOG=$(mktemp /tmp/loom-rig-delay.XXXXXX)
      "$RIG_DELAY_LINE" "$ms" "${args[@]}" > "$RIG_DELAY_LOG" 2>&1 &
      RIG_DELAY_PID=$!
      for _ in $(seq 100); do
        grep -q '^ready$' "$RIG_DELAY_LOG" && break
        kill -0 $RIG_DELAY_PID 2> /dev/null || break
        sleep 0.1
      done
      grep -q '^ready$' "$RIG_DELAY_LOG" || { echo "delay line: $(cat "$RIG_DELAY_LOG")" >&2; return 1; }
    fi
  fi
  for i in $(seq 1 "$k"); do
    local ns=$RIG-w$i
    [ $mode = taps ] || ip link add "w$i" netns "$ns" type veth peer name "p$i" netns "$hub"
    ip -n "$ns" addr add "$RIG_NET.$i/24" dev "w$i"
    ip -n "$ns" link set "w$i" up
    ip -n "$hub" link set "p$i" master br0
    ip -n "$hub" link set "p$i" up
    local netem_delay=""
    [ $mode = netem ] && netem_delay=$delay
    rig_shape "$ns" "w$i" "$rate" "$netem_delay"
    rig_shape "$hub" "p$i" "$rate" "$netem_delay"
  done
  case $mode in
    netem) RIG_SHAPE="netem: $rate, $delay each way" ;;
    taps) RIG_SHAPE="tbf: $rate; delay line (no netem in this kernel): $delay each way" ;;
    *) RIG_SHAPE="tbf: $rate${delay:+ (no netem in this kernel, no delay line: no added delay)}" ;;
  esac
  RIG_DELAYED=$([ $mode = tbf ] && echo 0 || echo 1)
  # The agent mpirun starts each daemon through: host 10.213.0.I is namespace $RIG-wI.
  # Each start and its exit status go to RIG_AGENT_LOG (rig_health shows it).
  RIG_AGENT=$(mktemp /tmp/loom-rig-agent.XXXXXX)
  RIG_AGENT_LOG=$(mktemp /tmp/loom-rig-agent-log.XXXXXX)
  cat > "$RIG_AGENT" << AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
echo "\$(date +%T.%N) \$host: starting" >> "$RIG_AGENT_LOG"
ip netns exec "$RIG-w\${host##*.}" unshare --uts sh -c "hostname $RIG-w\${host##*.} && \$*" \\
  2>> "$RIG_AGENT_LOG"
rc=\$?
echo "\$(date +%T.%N) \$host: exit \$rc" >> "$RIG_AGENT_LOG"
exit \$rc
AGENT
  chmod +x "$RIG_AGENT"
}

# Each worker's daemon also gets a host name of its own (a UTS namespace), and PMIx keeps its
# job data in each process's memory (PMIX_MCA_gds=hash), not in shared-memory segments that
# daemons of one host name share: without both, 2 of 23 runs on a loaded machine hung at start
# (a daemon gone or no rank printing); with them none of 30 did.
# rtc ^hwloc: OpenMPI 4.1's daemons, started this way, at times crashed sharing the hwloc
# topology through shared memory (a segfault in hwloc_shmem_topology_write); binding is not
# wanted here anyway. No tree spawn and direct routing: mpirun starts and talks to every daemon
# itself (under load, a daemon started by another was once not yet routable: "ORTE does not
# know how to route a message to the specified daemon").
rig_mpirun() {
  local hosts="" i
  for i in $(seq 1 "$RIG_K"); do hosts+="${hosts:+,}$RIG_NET.$i:1"; done
  ip netns exec "$RIG-hub" mpirun --host "$hosts" -np "$RIG_K" \
    --mca plm_rsh_agent "$RIG_AGENT" --mca btl tcp,self --mca rtc ^hwloc \
    --mca plm_rsh_no_tree_spawn 1 --mca routed direct \
    --mca btl_tcp_if_include "$RIG_NET.0/24" --mca oob_tcp_if_include "$RIG_NET.0/24" \
    -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LOOM_FAULT -x PATH -x PMIX_MCA_gds=hash "$@"
}

# rig_health: what a failed run needs to be understood: whether the delay line still runs, and
# what it said.
rig_health() {
  local i
  for i in $(seq 1 "$RIG_K"); do echo "worker $i runs: $(ip netns pids "$RIG-w$i" | xargs -r ps -o comm= -p | tr '\n' ' ')"; done
  [ -n "${RIG_AGENT_LOG:-}" ] && sed 's/^/launch agent: /' "$RIG_AGENT_LOG"
  [ -n "${RIG_DELAY_PID:-}" ] || return 0
  if kill -0 "$RIG_DELAY_PID" 2> /dev/null; then echo "delay line: running"; else
    echo "delay line: exited"; fi
  sed 's/^/delay line: /' "$RIG_DELAY_LOG"
}

rig_tx_bytes() {
  ip netns exec "$RIG-w$1" cat "/sys/class/net/w$1/statistics/tx_bytes"
}

rig_down() {
  local ns
  if [ -n "${RIG_DELAY_PID:-}" ]; then  # first: its TAP devices go with it
    kill "$RIG_DELAY_PID" 2> /dev/null || true
    wait "$RIG_DELAY_PID" 2> /dev/null || true  # killed: not a failure (callers may run set -e)
    rm -f "$RIG_DELAY_LOG"
    RIG_DELAY_PID=""
  fi
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^$RIG-"); do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null
    ip netns del "$ns" 2> /dev/null
  done
  [ -n "${RIG_AGENT:-}" ] && rm -f "$RIG_AGENT" "$RIG_AGENT_LOG"
  return 0
}
