#!/usr/bin/env bash
# The newcomer's first hour, proved in a clean root: a minimal Debian 12 (debootstrap) gets a
# clean clone of this checkout's HEAD and, inside it as a new user would, runs the bootstrap,
# `make build`, `make test` (the pinned Python environment, then every test, once) and a
# 20-step `loom train` of the tiny DiT and GPT. A package the build needs but the bootstrap does
# not install fails here, not on a user's machine. This is what CI runs (.ci/run). Prints the
# test suite's closing line (ctest's), its slowest and skipped tests, the time of each stage, and
# `fresh machine: OK (...)` or `fresh machine: FAILED at <stage>`. CI=true travels into the root
# (a skipped test that could run there then fails the suite: scripts/run_tests.sh).
#
#   scripts/fresh_machine_check.sh            (root: debootstrap, chroot and mounts need it)
#
# The bare root is cached as ~/.cache/loom/debian12-minbase.tar.gz (a second run skips
# debootstrap), and the pinned Python wheels the root downloads are kept beside it in wheels/
# (pip checks each against its SHA-256 before installing it); LOOM_FRESH_ROOT_CACHE=DIR moves
# both. Everything else lives in one temporary folder, unmounted and removed on every exit,
# failure included.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
start=$(date +%s)

[ "$(id -u)" -eq 0 ] || { echo "fresh machine: FAILED at start: must run as root (chroot)"; exit 1; }

cache_dir=${LOOM_FRESH_ROOT_CACHE:-$HOME/.cache/loom}
tarball=$cache_dir/debian12-minbase.tar.gz
work=$(mktemp -d /tmp/loom-fresh.XXXXXX)
root=$work/root
log=$work/check.log

cleanup() {
  # Ends whatever still runs inside the root, then unmounts (deepest first) and removes it.
  if [ -d "$root" ]; then
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
    for m in $(awk -v r="$root" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
      umount -l "$m" 2>/dev/null || true
    done
  fi
  # Nothing may be mounted under the folder any more before it is removed.
  if ! awk -v r="$work" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    rm -rf "$work"
  fi
}
trap cleanup EXIT

stage=start
fail() {
  echo "fresh machine: FAILED at $stage (last lines of its log follow; whole log: kept below)"
  tail -40 "$log" 2>/dev/null | sed 's/^/  | /'
  cp "$log" /tmp/loom-fresh-machine.log 2>/dev/null && echo "  log: /tmp/loom-fresh-machine.log"
  exit 1
}

# The mirror and suites this machine's own apt uses (the check must reach only the registries
# the machine reaches).
mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
         true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)

stage="debootstrap"
if [ ! -s "$tarball" ]; then
  [ -n "$mirror" ] || { echo "fresh machine: FAILED at $stage: no Debian mirror in /etc/apt"; exit 1; }
  if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 || fail
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
      >>"$log" 2>&1 || fail
  fi
  echo "fresh machine: debootstrap of a minimal Debian 12 (once; cached in $cache_dir)"
  debootstrap --variant=minbase bookworm "$work/bare" "$mirror" >>"$log" 2>&1 || fail
  mkdir -p "$cache_dir"
  tar -C "$work/bare" -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$work/bare"
fi
mkdir -p "$root"
tar -C "$root" -xzf "$tarball"

# The machine's apt sources (so the root installs from the same registry), its name server,
# and what MPI and OpenMP need: /proc, /dev with a writable /dev/shm, /sys.
stage="preparing the root"
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  rm -f "$root/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
  keyring=$(awk '/^Signed-By:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
  [ -z "$keyring" ] || [ -f "$root$keyring" ] || install -D -m 644 "$keyring" "$root$keyring"
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# And its /etc/hosts, which every installed Debian has and debootstrap's minbase lacks: without
# localhost and the host's own name, each mpirun rank beyond the cores waits 5 s at start.
cp -L /etc/hosts "$root/etc/hosts" 2>/dev/null || true
# Likewise the machine's own certificate authorities (a network that inspects HTTPS has its
# own): the ca-certificates package that bootstrap installs adds them to the root's trust, so
# the pinned PyPI wheels it fetches verify as on this machine.
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -rL /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
# The root a mount point of its own: `ip netns exec` (the shaped-link test's network
# namespaces) makes / a slave mount, which a plain directory under chroot cannot be.
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
mount --rbind /sys "$root/sys"
mkdir -p "$cache_dir/wheels" "$root/root/.cache/loom/wheels"
mount --bind "$cache_dir/wheels" "$root/root/.cache/loom/wheels"

# A clean clone of what is committed here: what a newcomer would get.
stage="clone"
mkdir -p "$root/home/newcomer"
git clone -q --no-hardlinks "$repo" "$root/home/newcomer/loom" >"$log" 2>&1 || fail
packages_before=$(chroot "$root" dpkg-query -W -f='${Status}\n' | grep -c "install ok installed")

# Inside the root: only the clone, a login-like environment, nothing of this machine's.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE travel in where this machine sets them (OpenBLAS
# needs them on some processors), and CI where it is set.
root_env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE CI; do
  [ -z "${!v:-}" ] || root_env+=("$v=${!v}")
done
in_root() {
  chroot "$root" /usr/bin/env -i "${root_env[@]}" \
    /bin/bash -c "cd /home/newcomer/loom && $1" >>"$log" 2>&1
}

timed() {  # STAGE COMMAND: runs COMMAND in the root as stage STAGE; its seconds in $took
  stage=$1
  local t0
  t0=$(date +%s)
  in_root "$2" || fail
  took=$(( $(date +%s) - t0 ))
}
echo "fresh machine: bootstrap, build and tests in the clean root (about 12 minutes on 2 cores)"
timed "scripts/bootstrap.sh" "bash scripts/bootstrap.sh"
bootstrap_s=$took
packages_after=$(chroot "$root" dpkg-query -W -f='${Status}\n' | grep -c "install ok installed")
timed "build (make build)" "make build"
build_s=$took
timed "the pinned Python environment (scripts/bootstrap.sh test)" "bash scripts/bootstrap.sh test"
python_s=$took
test_start=$(wc -l < "$log")
timed "tests (make test)" "make test"
tests_s=$took
tests=$(grep -o '100% tests passed, 0 tests failed out of [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
# ctest's closing line and scripts/run_tests.sh's summary after it, on this script's output.
tail -n +"$test_start" "$log" | sed -n '/tests passed, .* tests failed out of/,$p'

for model in dit gpt; do
  stage="a 20-step loom train of tests/e2e/tiny_$model.toml"
  in_root "build/loom train tests/e2e/tiny_$model.toml --set train.steps=20 \
           --set run.out_dir=/tmp/fresh_runs" || fail
done

echo "fresh machine: OK ($((packages_after - packages_before)) packages installed in" \
     "${bootstrap_s} s, build ${build_s} s, Python environment ${python_s} s, ${tests:-?} tests" \
     "passed in ${tests_s} s; $(( $(date +%s) - start )) s in all)"
