#!/usr/bin/env bash
# The device check of the CUDA backend (docs/cuda.md): one prepared script for the lent GPU
# machine, which has nvcc 13, CMake and PyTorch but none of the Debian libraries Loom builds
# against, and nothing to fetch them from. So the binaries are built here and carried:
#
#   here:   bash scripts/device_check.sh pack
#           builds build-device/ (portable x86-64 code, sm_90, the CUDA backend) and packs the
#           CUDA test and bench binaries with the libraries the device lacks (every one ldd
#           lists but the C runtime's and CUDA's) into .device/ (git-ignored, about 23 MB)
#   there:  the device tool's run, command "bash scripts/device_check.sh run",
#           carry [".device"], timeout_s 480
#           runs every CUDA test (the op harness on the GPU against the float64 reference,
#           cuDNN's fused attention against the CPU at the models' shapes,
#           50-step training parity of the GPT and DiT with the CPU, `loom train`'s loop with
#           train.device "cuda" against the CPU's and a bit-identical resume, the NCCL group on
#           one GPU, transfers, allocator)
#           then times GPT-2 124M (16 x 1024 tokens) and DiT-small (256 images) training steps
#           in bf16, fp8_tensorwise and f32 (build/loom_cuda_bench) and PyTorch's eager and
#           torch.compile steps of the same models (bench/compare/torch_bench.py), one after the
#           other, and writes $OUT/report.md, $OUT/cuda_tests.log, $OUT/cuda_tests.xml and
#           $OUT/bench.log
#           "tests" and "bench" run one part (BENCH_JOBS, BENCH_LOOM narrow the benchmark);
#           "dist" runs the device process-group tests (tests/cuda/staged_*) under the packed
#           OpenMPI with 2 and 4 processes sharing the GPU, into $OUT/dist_np{2,4}.log;
#           "profile SHAPE PRECISION..." sums one step's GPU time by kernel under Nsight
#           Compute into $OUT/kernels_SHAPE_PRECISION.txt and the report
#
# "run" took 168 s on an H200 (2026-12-04), so that it can be rerun within one session's device
# time.
set -euo pipefail
cd "$(dirname "$0")/.."

# OpenMPI's launcher, its plugins and help texts (Debian's layout under ompi/usr), for the
# device machine, which has no MPI: "dist" runs the device process-group tests under it.
pack_ompi() {
  local to=$1/ompi libdir=/usr/lib/x86_64-linux-gnu
  mkdir -p "$to/usr/bin" "$to/usr/lib/x86_64-linux-gnu" "$to/usr/share" "$to/etc"
  cp -L /usr/bin/orterun /usr/bin/orted "$to/usr/bin/"
  cp -rL "$libdir/openmpi" "$libdir/pmix2" "$to/usr/lib/x86_64-linux-gnu/"
  rm -rf "$to/usr/lib/x86_64-linux-gnu/openmpi/include" "$to/usr/lib/x86_64-linux-gnu/pmix2/include"
  find "$to" -name '*.a' -delete  # static libraries: nothing runs them
  cp -rL /usr/share/openmpi "$to/usr/share/"
  [ ! -d /usr/share/pmix ] || cp -rL /usr/share/pmix "$to/usr/share/"
  cp -rL /etc/openmpi "$to/etc/"
}

# mpirun from the pack: OPAL_PREFIX relocates OpenMPI's directories, shared memory between the
# processes of the one machine, as root where the device runs commands as root.
packed_mpirun() {
  local ompi=$1/ompi
  shift
  OPAL_PREFIX=$ompi/usr OPAL_SYSCONFDIR=$ompi/etc/openmpi PMIX_INSTALL_PREFIX=$ompi/usr \
    OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mca_base_component_show_load_errors=0 \
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH=$ompi/usr/bin:$PATH "$ompi/usr/bin/orterun" \
    --oversubscribe -x LD_LIBRARY_PATH -x OMP_NUM_THREADS "$@"
}

case "${1:-}" in
  pack)
    cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DLOOM_PORTABLE=ON -DLOOM_CUDA=ON \
      -DLOOM_BENCH=OFF
    cmake --build build-device -j"$(nproc)" --target loom_cuda_tests loom_cuda_dist_tests \
      loom_cuda_bench
    rm -rf .device && mkdir -p .device/pack/lib
    cp build-device/loom_cuda_tests build-device/loom_cuda_dist_tests build-device/loom_cuda_bench \
      .device/pack/
    pack_ompi .device/pack
    # Every library the binaries (and OpenMPI's launcher and plugins) need except the C runtime
    # and CUDA's own, which the device has.
    for binary in build-device/loom_cuda_tests .device/pack/ompi/usr/bin/orterun \
      .device/pack/ompi/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do
      ldd "$binary" | awk '$3 ~ /^\// {print $3}'
    done | sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda*|libcublas*|libnccl*) ;;
        *) cp -L "$lib" .device/pack/lib/ ;;
      esac
    done
    tar -C .device -cJf .device/pack.tar.xz pack && rm -rf .device/pack
    grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
    du -h .device/pack.tar.xz
    ;;
  run | tests | bench | profile | dist)
    mode=$1; shift
    out=${OUT:-$PWD/device-out}
    mkdir -p "$out" /tmp/loom-device
    [ -x /tmp/loom-device/pack/loom_cuda_tests ] ||
      python3 -m tarfile -e .device/pack.tar.xz /tmp/loom-device
    pack=/tmp/loom-device/pack
    # CUDA's runtime and cuBLASLt: the toolkit's, else the ones PyTorch's wheels carry.
    cuda_libs=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublasLt.so.13*' \
      2>/dev/null | head -1)")
    cudart=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcudart.so.13*' \
      2>/dev/null | head -1)")
    # NCCL (loaded by the NCCL group when first used; 200 MB, so not carried): the toolkit's,
    # else the one PyTorch's wheels carry.
    nccl=$(dirname "$( (find /usr/local/cuda*/ /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null;
      python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' \
      2>/dev/null) | head -1)")
    # cuDNN 9 (opened by the fused attention when first used; its kernels are about 500 MB, so not
    # carried): the toolkit's, else the one PyTorch's wheels carry. Without it, attention runs
    # on the backend's own kernels and the cuDNN test fails, saying so.
    cudnn=$(dirname "$( (find /usr/local/cuda*/ /opt /usr/lib -name 'libcudnn.so.9' 2>/dev/null;
      python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib", "libcudnn.so.9"))' \
      2>/dev/null) | head -1)")
    # Only Loom's binaries see the carried libraries: Debian's libstdc++ and zlib among them are
    # older than those the image's PyTorch needs.
    loom_libs=$pack/lib:$cuda_libs:$cudart:$nccl:$cudnn:${LD_LIBRARY_PATH:-}
    [ -f "$out/report.md" ] || {
      echo "# Loom device check, $(date -u +%Y-%m-%dT%H:%MZ)"
      echo
      echo '```'
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
      lscpu | grep -m1 'Model name' || true
      echo '```'
    } > "$out/report.md"
    status=0
    if [ "$mode" = run ] || [ "$mode" = tests ]; then
      (cd /tmp/loom-device && LD_LIBRARY_PATH=$loom_libs timeout 240 "$pack/loom_cuda_tests" \
        --gtest_output="xml:$out/cuda_tests.xml") > "$out/cuda_tests.log" 2>&1 || status=$?
      {
        echo
        echo "## CUDA tests: exit status $status"
        echo
        echo '```'
        grep -E '^\[  (PASSED|FAILED) |^\[==========\]|tests? (ran|FAILED)|\[cuda parity\]|\[cudnn\]' \
          "$out/cuda_tests.log" || true
        [ "$status" = 0 ] || tail -n 20 "$out/cuda_tests.log"
        echo '```'
      } >> "$out/report.md"
    fi
    # Several processes sharing the GPU through the staged group (OpenMPI from the pack): every
    # layout, MoE, DiLoCo and recipe of the staged tests, each run on the GPU against the same
    # run on the host; ZeRO-3 under a device limit on 4. Each run's "trained" line gives its
    # step rate (DDP, ZeRO-3, TP 2 ... on the same GPU).
    if [ "$mode" = dist ]; then
      for np in 2 4; do
        filter=-StagedTrainer.ZeroThreeTrainsAModelAboveOneProcessDeviceLimit
        [ "$np" = 2 ] || filter='*'
        dist_status=0
        (cd /tmp/loom-device && LD_LIBRARY_PATH=$loom_libs OMP_NUM_THREADS=2 \
          packed_mpirun "$pack" --timeout 200 -np "$np" "$pack/loom_cuda_dist_tests" \
          --gtest_filter="$filter") \
          > "$out/dist_np$np.log" 2>&1 || dist_status=$?
        [ "$dist_status" = 0 ] || status=$dist_status
        {
          echo
          echo "## $np processes sharing the GPU (staged group): exit status $dist_status"
          echo
          echo '```'
          grep -E '^\[  (PASSED|FAILED) |^\[==========\]|^rank [0-9]+:|^trained|^gpt \(|^dit \(' \
            "$out/dist_np$np.log" | head -n 120 || true
          [ "$dist_status" = 0 ] || tail -n 20 "$out/dist_np$np.log"
          echo '```'
        } >> "$out/report.md"
      done
    fi
    # The benchmark: Loom and PyTorch on the same models and batches, in turn. BENCH_JOBS
    # narrows it ("dit_small 256 0", say) and BENCH_LOOM=0 leaves Loom's part out.
    if [ "$mode" = run ] || [ "$mode" = bench ]; then
      jobs=${BENCH_JOBS:-"gpt2_124m 16 1024;dit_small 256 0"}
      {
        IFS=';'
        for job in $jobs; do
          IFS=' '
          set -- $job
          shape=$1:$2; [ "$3" = 0 ] || shape=$shape:$3
          [ "${BENCH_LOOM:-1}" = 0 ] || LD_LIBRARY_PATH=$loom_libs timeout 90 \
            "$pack/loom_cuda_bench" "$shape" || echo "loom_cuda_bench $shape: exit $?"
          for torch_mode in eager compile; do
            timeout $([ $torch_mode = eager ] && echo 60 || echo 120) python3 \
              bench/compare/torch_bench.py "$1" bf16 "$torch_mode" 5 10 cuda "$2" "$3" ||
              echo "torch_bench $1 $torch_mode: exit $?"
          done
        done
        IFS=$' \t\n'
      } > "$out/bench.log" 2>&1
      { echo; echo "## Benchmark"; echo; echo '```'; cat "$out/bench.log"; echo '```'; } \
        >> "$out/report.md"
    fi
    # Where one step's GPU time goes: `profile SHAPE PRECISION...` runs one step of each under
    # Nsight Compute (kernel durations only, caches and clocks left alone) and sums the
    # durations by kernel into $out/kernels_SHAPE_PRECISION.txt (the raw CSV stays in /tmp).
    if [ "$mode" = profile ]; then
      ncu=$( (command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu) \
        2>/dev/null | head -1 || true)
      [ -n "$ncu" ] || { echo "profile: no ncu (Nsight Compute) here" | tee -a "$out/report.md"; exit 1; }
      while [ $# -ge 2 ]; do
        name=kernels_${1//:/_}_$2
        # One file per profile comes back ($OUT returns at most 8): ncu's errors go into it.
        LD_LIBRARY_PATH=$loom_libs timeout "${NCU_TIMEOUT:-150}" "$ncu" --clock-control none \
          --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
          "$pack/loom_cuda_bench" --one "$1" "$2" > "/tmp/$name.csv" 2> "/tmp/$name.err" ||
          echo "ncu $1 $2: exit $?" >> "/tmp/$name.err"
        python3 scripts/kernel_summary.py "/tmp/$name.csv" > "$out/$name.txt" 2>&1 ||
          tail -n 20 "/tmp/$name.err" >> "$out/$name.txt"
        { echo; echo "## One step of $1 $2, by kernel"; echo; echo '```'; head -n 30 "$out/$name.txt"
          echo '```'; } >> "$out/report.md"
        shift 2
      done
    fi
    cat "$out/report.md"
    exit "$status"
    ;;
  *)
    echo "usage: scripts/device_check.sh pack | run | tests | bench | profile SHAPE PRECISION..." >&2
    exit 2
    ;;
esac
