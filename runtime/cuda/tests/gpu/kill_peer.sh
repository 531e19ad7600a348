#!/usr/bin/env bash
# On a GPU machine: two `braid rank --backend cuda` processes (both on GPU 0 with
# LOCAL_RANK=0, or one per GPU with LOCAL_RANK=RANK when LOCAL=rank) run a long all-reduce
# with every timeout at its default; rank 1 is SIGKILLed after rank 0 has reported K
# results, for K in KILL_AFTER. Rank 0's kernel must be aborted: the process must exit 3
# within 15 s of the kill, naming rank 1. Afterwards no process of the test is left on
# the GPU (nvidia-smi).
# Usage: runtime/cuda/tests/gpu/kill_peer.sh BRAID_BINARY OUT_DIR
# Exit status: 0 when every kill passed.
set -uo pipefail
braid="$1"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
kills="${KILL_AFTER:-1 5 20}"
size="${SIZE:-64M}"
failed=0
for k in $kills; do
    port=$((20000 + RANDOM % 20000))
    pids=()
    for r in 0 1; do
        local_rank=0
        [ "${LOCAL:-}" = rank ] && local_rank=$r
        env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$local_rank MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port BRAID_SECRET=$(printf "%032x" $port) \
            "$braid" rank allreduce --backend cuda --topo nvswitch:2 --size "$size" \
            --iters 1000000 >"$out/kill$k.rank$r.out" 2>"$out/kill$k.rank$r.err" &
        pids+=($!)
    done
    # Wait for K results from rank 0 (at most 60 s).
    for _ in $(seq 600); do
        [ "$(grep -c correct "$out/kill$k.rank0.out")" -ge "$k" ] && break
        kill -0 "${pids[0]}" 2>/dev/null || break
        sleep 0.1
    done
    got="$(grep -c correct "$out/kill$k.rank0.out")"
    if [ "$got" -lt "$k" ]; then
        echo "FAIL kill after $k: rank 0 reported only $got results"
        cat "$out/kill$k.rank0.err" "$out/kill$k.rank1.err" | tail -5
        kill -9 "${pids[@]}" 2>/dev/null; wait; failed=1; continue
    fi
    kill -9 "${pids[1]}"
    start=$(date +%s%N)
    # Rank 0 gets 30 s to exit (the bound checked is 15 s).
    for _ in $(seq 300); do
        kill -0 "${pids[0]}" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "${pids[0]}" 2>/dev/null; then
        echo "FAIL kill after $k: rank 0 still running 30 s after rank 1 was killed"
        kill -9 "${pids[0]}"; wait; failed=1; continue
    fi
    wait "${pids[0]}"; rc=$?
    wait "${pids[1]}" 2>/dev/null
    took_ms=$((($(date +%s%N) - start) / 1000000))
    took="$((took_ms / 1000)).$(printf %03d $((took_ms % 1000)))"
    msg="$(grep -m1 -i error "$out/kill$k.rank0.err")"
    if [ $rc -eq 3 ] && echo "$msg" | grep -q "rank 1" && [ "$took_ms" -lt 15000 ]; then
        echo "pass kill after $k results: rank 0 exit $rc after ${took} s: $msg"
    else
        echo "FAIL kill after $k results: rank 0 exit $rc after ${took} s: ${msg:-$(tail -3 "$out/kill$k.rank0.err")}"
        failed=1
    fi
done
sleep 1
left="$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | grep -c braid)"
if [ "$left" -ne 0 ]; then
    echo "FAIL: $left braid process(es) still on the GPU"; nvidia-smi; failed=1
else
    echo "pass: no braid process left on the GPU"
fi
exit $failed
