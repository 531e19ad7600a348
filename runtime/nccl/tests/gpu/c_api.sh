#!/usr/bin/env bash
# On a GPU machine: compiles tests/c/nccl_api.c against that machine's own nccl.h (the one
# PyTorch's NCCL wheel ships) and CUDA runtime, links it with Braid's libnccl.so.2, and
# runs every section on GPUs: rank r on GPU r % (GPUs present), so on one GPU every rank
# shares it. Forwarding is checked against the machine's real NCCL.
#
# Usage: runtime/nccl/tests/gpu/c_api.sh DIR_WITH_BRAID_LIBNCCL_SO OUT_DIR
# Braid's library comes first on LD_LIBRARY_PATH too: that path is searched before the
# binary's run path, and a machine's environment may put NCCL's own library on it.
# Exit status: 0 when every section passed. One log per section in OUT_DIR.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="$(cd "$1" && pwd)"
out="$2"
mkdir -p "$out/link" "$out/run"
ln -sf "$lib/libnccl.so" "$out/link/libnccl.so"
ln -sf "$lib/libnccl.so" "$out/run/libnccl.so.2"
nccl_dir="$(python3 -c 'import nvidia.nccl, os; print(nvidia.nccl.__path__[0])')"
cuda="${CUDA_HOME:-/usr/local/cuda}"
gcc -std=c11 -O1 -Wall -Wextra -Werror -DBRAID_CUDA -I"$nccl_dir/include" -I"$cuda/include" \
    "$here/../c/nccl_api.c" -o "$out/nccl_api" -L"$out/link" -lnccl -L"$cuda/lib64" -lcudart \
    -Wl,-rpath,"$out/run" -lpthread -lm || exit 1
gpus="$(nvidia-smi -L | wc -l)"
echo "nccl.h: $nccl_dir/include; $gpus GPU(s)"
failed=0
run() {
    local section="$1"; shift
    local start=$SECONDS
    if env LD_LIBRARY_PATH="$out/run:${LD_LIBRARY_PATH:-}" BRAID_TEST_GPUS="$gpus" "$@" timeout 300 "$out/nccl_api" "$section" >"$out/$section.log" 2>&1; then
        echo "pass $section ($((SECONDS - start)) s)"
    else
        echo "FAIL $section ($((SECONDS - start)) s):"; tail -5 "$out/$section.log"; failed=1
    fi
}
run matrix
run threads
run processes
run abort BRAID_TIMEOUT=10
run no-forward
run forward-real BRAID_NCCL_LIB="$nccl_dir/lib/libnccl.so.2" BRAID_TIMEOUT=20
run groups BRAID_NCCL_LIB="$nccl_dir/lib/libnccl.so.2" BRAID_TIMEOUT=20
exit $failed
