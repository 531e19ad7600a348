#!/usr/bin/env bash
# On a GPU machine: every GPU test of the project in one command, each with its own log
# and a line in OUT_DIR/summary.txt (pass or FAIL, seconds), as docs/testing.md lists
# them: the in-process sections of gpu_comm (quick matrix by default), its direct-read and
# network sections, the C program against Braid's libnccl.so.2, PyTorch's ops against
# gloo, a killed peer, and the `braid rank` processes across network namespaces. One GPU
# runs all of it (ranks share it); two-GPU cases run where two are present.
#
# Usage: runtime/cuda/tests/gpu/all.sh OUT_DIR
#   BIN=DIR    take the binaries from DIR (gpu_comm, multiprocess, braid, libnccl.so)
#              instead of building them here (a machine without a Rust toolchain)
#   FULL=1     gpu_comm's full matrix instead of the quick one
#   ONLY="a b" run only these items (gpu_comm direct net c_api torch kill_peer namespaces)
# Exit status: 0 when every item that ran passed. Items whose tools are missing (PyTorch,
# root for namespaces) print why they skip, as the tests themselves do.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
out="$(mkdir -p "${1:?usage: all.sh OUT_DIR}" && cd "$1" && pwd)"
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no GPU on this machine (nvidia-smi lists none): nothing to run; the GPU tests in" \
        "cargo test skip with a printed reason"
    exit 0
fi
if [ -n "${BIN:-}" ]; then
    bin="$(cd "$BIN" && pwd)"
else
    bin="$out/bin"
    mkdir -p "$bin"
    cargo build --release -p braid-cli -p braid-nccl || exit 1
    cp target/release/braid target/release/libnccl.so "$bin/"
    for t in "braid-cuda gpu_comm" "braid-cli multiprocess"; do
        set -- $t
        exe=$(cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
            python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2" | tail -1)
        [ -n "$exe" ] || { echo "could not build the $2 test" >&2; exit 1; }
        cp "$exe" "$bin/$2"
    done
fi
summary="$out/summary.txt"
: >"$summary"
failed=0
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
item() {
    local name="$1" limit="$2"
    shift 2
    wanted "$name" || return 0
    local start=$SECONDS
    if timeout "$limit" "$@" >"$out/$name.log" 2>&1; then
        echo "pass $name ($((SECONDS - start)) s)" | tee -a "$summary"
    else
        echo "FAIL $name (exit $?, $((SECONDS - start)) s): see $out/$name.log" | tee -a "$summary"
        failed=1
    fi
}
quick=(env BRAID_CUDA_QUICK=1)
[ "${FULL:-0}" = 1 ] && quick=(env)
item gpu_comm 600 "${quick[@]}" \
    BRAID_GPU_SECTIONS=matrix,graph,two,procs,p2p,premul,synth,trace,counters,abort,ll128 \
    "$bin/gpu_comm"
item direct 300 "${quick[@]}" BRAID_GPU_SECTIONS=direct "$bin/gpu_comm"
item net 600 "${quick[@]}" BRAID_GPU_SECTIONS=net "$bin/gpu_comm"
item c_api 600 runtime/nccl/tests/gpu/c_api.sh "$bin" "$out/c_api"
if python3 -c 'import torch' 2>/dev/null; then
    item torch 600 python3 runtime/nccl/tests/gpu/torch_check.py ops "$bin/libnccl.so" "$out/torch"
elif wanted torch; then
    echo "skip torch: PyTorch is not installed" | tee -a "$summary"
fi
item kill_peer 300 runtime/cuda/tests/gpu/kill_peer.sh "$bin/braid" "$out/kill_peer"
item namespaces 600 env BRAID_EXE="$bin/braid" "$bin/multiprocess" gpu_ --nocapture
exit $failed
