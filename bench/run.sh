#!/usr/bin/env bash
# The whole comparison in one command: every collective, f32 sum, from the smallest call
# (8 B, or one element per rank) to 1 GiB, both modes, timed back to back (braid perf),
# Braid beside NCCL on the GPUs of this machine
# (one rank per GPU: NCCL's rule), each run's JSON report and plot kept in OUT_DIR with
# a summary of the ratios (NCCL time / Braid time; above 1, Braid is faster).
#
# Usage: bench/run.sh [OUT_DIR]
#   BRAID=path/to/braid   the braid binary (default: target/release/braid, built if missing)
#   BACKEND=cuda|host     cuda (default) compares with NCCL; host runs the same sweep on the
#                         host backend (no NCCL) to check the script itself
#   RANKS=N               ranks (default: the GPUs nvidia-smi lists; host: 4)
#   MAX=1G                largest size; ITERS=20, WARMUP=5, RUNS=3
#   NET=1                 both over their network transports: Braid with BRAID_NET_FORCE=1,
#                         NCCL with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (its sockets);
#                         the roofline then also times the busiest pair's bytes on loopback
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/run-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
backend="${BACKEND:-cuda}"
braid="${BRAID:-target/release/braid}"
if [ ! -x "$braid" ]; then
    cargo build --release -p braid-cli
fi
if [ "$backend" = cuda ]; then
    ranks="${RANKS:-$(nvidia-smi -L | wc -l)}"
    extra=(--backend cuda --vs-nccl)
else
    ranks="${RANKS:-4}"
    extra=(--backend host)
fi
max="${MAX:-1G}"
if [ "${NET:-0}" = 1 ]; then
    export BRAID_NET_FORCE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
fi
summary="$out/summary.txt"
: >"$summary"
failed=0
for c in allreduce allgather reduce_scatter broadcast reduce alltoall; do
    json="$out/$c.json"
    if "$braid" perf "$c" --topo "nvswitch:$ranks" -e "$max" -f 2 \
        -n "${ITERS:-20}" -w "${WARMUP:-5}" --runs "${RUNS:-3}" --mode both \
        "${extra[@]}" --json "$json" --plot "$out/$c.svg" >"$out/$c.txt" 2>"$out/$c.err"; then
        python3 - "$json" "$c" >>"$summary" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
wrong = sum(x["wrong"] for x in rows)
ratios = [x["ratio"] for x in rows if "ratio" in x]
effs = [x["efficiency"] for x in rows if "efficiency" in x]
line = f"{sys.argv[2]:15} {len(rows):3} rows, {wrong} wrong"
if ratios:
    line += f", ratio min {min(ratios):.2f} max {max(ratios):.2f} (NCCL {r.get('nccl', '?')})"
if effs:
    line += f", roofline efficiency max {max(effs):.2f}"
print(line)
EOF
    else
        echo "$c: braid perf failed (exit $?): $(tail -1 "$out/$c.err")" >>"$summary"
        failed=1
    fi
done
cat "$summary"
exit $failed
