#!/usr/bin/env bash
# On a GPU machine: builds nccl-tests (its public source, at NCCL_TESTS_SRC) against the
# machine's own NCCL headers and runs each test with Braid's libnccl.so.2 first on the
# load path, data checked (-c 1), 8 B to 256 MiB. One rank per GPU (nccl-tests' rule):
# -g takes the number of GPUs present.
# Usage: NCCL_TESTS_SRC=... runtime/nccl/tests/gpu/nccl_tests.sh DIR_WITH_BRAID_LIBNCCL_SO OUT_DIR
set -uo pipefail
lib="$(cd "$1" && pwd)"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
src="${NCCL_TESTS_SRC:?set NCCL_TESTS_SRC to the nccl-tests source}"
nccl_dir="$(python3 -c 'import nvidia.nccl, os; print(nvidia.nccl.__path__[0])')"
cuda="${CUDA_HOME:-/usr/local/cuda}"
# nccl-tests links -lnccl: a directory with that name for the linker, NCCL's headers.
mkdir -p "$out/nccl/lib" "$out/braid"
ln -sf "$nccl_dir/include" "$out/nccl/include"
ln -sf "$nccl_dir/lib/libnccl.so.2" "$out/nccl/lib/libnccl.so"
ln -sf "$lib/libnccl.so" "$out/braid/libnccl.so.2"
cp -r "$src" "$out/src" && make -C "$out/src" -j 16 CUDA_HOME="$cuda" NCCL_HOME="$out/nccl" \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$out/build" >"$out/build.log" 2>&1 \
    || { tail -20 "$out/build.log"; exit 1; }
gpus="$(nvidia-smi -L | wc -l)"
failed=0
for t in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
    log="$out/$t.log"
    LD_LIBRARY_PATH="$out/braid:${LD_LIBRARY_PATH:-}" NCCL_DEBUG=WARN timeout 300 \
        "$out/build/${t}_perf" -b 8 -e 256M -f 2 -g "$gpus" -c 1 >"$log" 2>&1
    rc=$?
    wrong="$(awk -F: '/Out of bounds values/ {split($2, a, " "); print a[1]}' "$log")"
    if [ $rc -eq 0 ] && [ "${wrong:-x}" = "0" ] && grep -q "Avg bus bandwidth" "$log"; then
        avg="$(grep 'Avg bus bandwidth' "$log")"
        echo "pass $t: 0 wrong; $avg"
    else
        echo "FAIL $t: exit $rc, sizes with wrong values: ${wrong:-unknown}"
        tail -8 "$log"
        failed=1
    fi
done
exit $failed
