#!/usr/bin/env bash
# Every collective with several ranks sharing one GPU, in one process (NCCL refuses two
# ranks on one GPU, so the roofline measured in the same run is the yardstick): f32 sum,
# both modes, back to back over the whole sweep and replayed from a CUDA graph for small
# calls; each run's JSON report kept in OUT_DIR, then a summary of the one-GPU targets
# (bench/one_gpu_summary.py): efficiency at >= 64 MiB, the 8-byte all-reduce's time.
#
# Usage: bench/one_gpu.sh [OUT_DIR]
#   BRAID=path/to/braid   the braid binary (default: target/release/braid, built if missing)
#   RANKS="2 4 8"         rank counts, all on GPU 0
#   COLLECTIVES="..."     default: the six
#   MAX=256M FACTOR=8     the back-to-back sweep (from 8 B, or one element per rank)
#   GRAPH_MAX=64K         the sweep replayed from a graph
#   ITERS=20, WARMUP=5, RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/one-gpu-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
braid="${BRAID:-target/release/braid}"
if [ ! -x "$braid" ]; then
    cargo build --release -p braid-cli
fi
common=(-n "${ITERS:-20}" -w "${WARMUP:-5}" --runs "${RUNS:-3}" --mode both --streams gpu)
failed=0
for n in ${RANKS:-2 4 8}; do
    for c in ${COLLECTIVES:-allreduce allgather reduce_scatter broadcast reduce alltoall}; do
        # The smallest call: 8 B, at least one f32 element per rank where the buffer is
        # split among the ranks.
        min=8
        case "$c" in allgather | reduce_scatter | alltoall) [ "$min" -ge $((n * 4)) ] || min=$((n * 4)) ;; esac
        run=(perf "$c" --backend cuda --topo "nvswitch:$n" -b "$min" "${common[@]}")
        if ! "$braid" "${run[@]}" -e "${MAX:-256M}" -f "${FACTOR:-8}" --json "$out/${c}_${n}r.json" \
            >"$out/${c}_${n}r.txt" 2>&1; then
            echo "$c, $n ranks: braid perf failed (see $out/${c}_${n}r.txt)"
            failed=1
        fi
        if ! "$braid" "${run[@]}" -e "${GRAPH_MAX:-64K}" -f 8 --graph --json "$out/${c}_${n}r_graph.json" \
            >"$out/${c}_${n}r_graph.txt" 2>&1; then
            echo "$c, $n ranks, graph: braid perf failed (see $out/${c}_${n}r_graph.txt)"
            failed=1
        fi
    done
done
python3 bench/one_gpu_summary.py "$out" | tee "$out/summary.txt"
exit "$failed"
