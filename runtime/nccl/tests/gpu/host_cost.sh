#!/usr/bin/env bash
# On a GPU machine: the host cost of ncclAllReduce through Braid's libnccl.so.2 (call to
# return, median of 10,000 calls per rank; tests/c/host_cost.c), two rank processes.
# Usage: runtime/nccl/tests/gpu/host_cost.sh DIR_WITH_BRAID_LIBNCCL_SO OUT_DIR [RANKS] [FLOATS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="$(cd "$1" && pwd)"
out="$2"
mkdir -p "$out/link" "$out/run"
ln -sf "$lib/libnccl.so" "$out/link/libnccl.so"
ln -sf "$lib/libnccl.so" "$out/run/libnccl.so.2"
nccl_dir="$(python3 -c 'import nvidia.nccl, os; print(nvidia.nccl.__path__[0])')"
cuda="${CUDA_HOME:-/usr/local/cuda}"
gcc -std=c11 -O2 -Wall -Wextra -Werror -I"$nccl_dir/include" -I"$cuda/include" \
    "$here/../c/host_cost.c" -o "$out/host_cost" -L"$out/link" -lnccl -L"$cuda/lib64" -lcudart \
    -Wl,-rpath,"$out/run"
LD_LIBRARY_PATH="$out/run:${LD_LIBRARY_PATH:-}" BRAID_TEST_GPUS="$(nvidia-smi -L | wc -l)" timeout 300 "$out/host_cost" "${3:-2}" "${4:-2}"
