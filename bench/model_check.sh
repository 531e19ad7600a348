#!/usr/bin/env bash
# The cost model against this machine, in one command (docs/costmodel.md): calibrate with
# `braid tune` (micro-benchmarks only), then time every shipped plan of each collective
# over the size sweep with `braid perf --predict` (the model's time for the plan, replicas
# and protocol that ran, beside the measured one), an imported MSCCL algorithm where one
# fits the rank count and the programs `braid synth` writes for the topology (plans no
# micro-benchmark resembles, the latter run as a user's plan files), and the runtime's own
# selection; then summarise: the model's error, and the selection against the best
# measured plan at each size and against the best fixed plan.
#
# Usage: bench/model_check.sh [OUT_DIR]
#   BRAID=path/to/braid   the braid binary (default: target/release/braid, built if missing)
#   BACKEND=cuda|host     cuda (default; ranks placed r % GPUs) or host (threads)
#   PROCS=1               host: one process per rank, tuned and timed that way (over
#                         shared memory; over TCP with BRAID_SHM_DISABLE=1)
#   RANKS=N               ranks (default 4)
#   COLLECTIVES="..."     default: allreduce allgather reduce_scatter
#   MIN=8 MAX=1G FACTOR=8 the sweep; ITERS=10, WARMUP=2, RUNS=3
#   INTERLEAVE=1          time the shipped plans and the selection size by size: at
#                         each size every one of them (in an order turned each round)
#                         before the next size, so a slow while of the machine falls on
#                         the choices of one size alike instead of on one plan's sweep
#   ROUNDS=1              sweeps of every plan and the selection, one after another; with
#                         more, each row's time is the median of its rounds (each round
#                         in OUT_DIR/roundK/), so a slow minute of the machine moves one
#                         round of one plan, not the comparison
#   TRACES="C:PLAN:SIZE ..." after the sweeps, each such call of a shipped plan run
#                         once more with BRAID_TRACE (`braid run` on GPUs, `braid perf`'s
#                         last call on the host; the replicas and protocol its sweep ran) and predicted with `braid explain
#                         --trace`, side by side in OUT_DIR/traces/ (bench/trace_compare.py;
#                         bench/model_worst.py lists the rows furthest off)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/model-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
backend="${BACKEND:-cuda}"
braid="${BRAID:-target/release/braid}"
if [ ! -x "$braid" ]; then
    cargo build --release -p braid-cli
fi
ranks="${RANKS:-4}"
topo="nvswitch:$ranks"
profile="$out/profile.json"
procs=()
if [ "${PROCS:-0}" = 1 ]; then procs=(--procs); fi
if [ "$backend" = cuda ]; then
    "$braid" tune --backend cuda --topo "$topo" -o "$profile" 2>"$out/tune.err"
else
    "$braid" tune "${procs[@]}" -o "$profile" 2>"$out/tune.err"
fi
cat "$out/tune.err"
export BRAID_PROFILE="$profile"
timing=(--backend "$backend" --topo "$topo" -n "${ITERS:-10}" -w "${WARMUP:-2}"
    --runs "${RUNS:-3}" --predict "${procs[@]}")
sweep=("${timing[@]}" -e "${MAX:-1G}" -f "${FACTOR:-8}")
# Programs no micro-benchmark resembles beside the imported MSCCL ones: what `braid synth`
# writes for this topology (bandwidth and latency), run as a user's plan files are.
mkdir -p "$out/synth"
for c in ${COLLECTIVES:-allreduce allgather reduce_scatter}; do
    for o in bandwidth latency; do
        "$braid" synth "$c" --topo "$topo" --objective "$o" -o "$out/synth/$c.$o.braid" \
            --plan "$out/synth/$c.$o.json" 2>"$out/synth/$c.$o.err" ||
            echo "$c: braid synth --objective $o wrote nothing (see $out/synth/$c.$o.err)"
    done
done
# Bytes of a size as `braid perf` reads it (8, 64K, 16M, 1G).
bytes_of() {
    case "$1" in
    *K) echo $((${1%K} << 10)) ;;
    *M) echo $((${1%M} << 20)) ;;
    *G) echo $((${1%G} << 30)) ;;
    *) echo "$1" ;;
    esac
}
# INTERLEAVE=1: collective C's shipped plans and its selection from MIN, size by size,
# into DEST (bench/model_join.py joins each choice's sizes into one report).
interleaved() {
    local c="$1" min="$2" dest="$3" round="$4"
    shift 4
    local choices=("$@" "(selected)") parts="$dest/parts" max s k i n
    mkdir -p "$parts"
    max=$(bytes_of "${MAX:-1G}")
    n=${#choices[@]}
    for ((s = min; s <= max; s *= ${FACTOR:-8})); do
        for ((k = 0; k < n; k++)); do
            i=$(((k + round + s % 7) % n))
            local p="${choices[$i]}" what=(--algo "${choices[$i]}") name="$c.plan.${choices[$i]}"
            if [ "$p" = "(selected)" ]; then what=(); name="$c.selected"; fi
            "$braid" perf "$c" "${timing[@]}" -b "$s" -e "$s" --mode outofplace "${what[@]}" \
                --json "$parts/$name.$s.json" >>"$parts/$name.txt" 2>&1 ||
                echo "$c $p at $s B: failed (see $parts/$name.txt)"
        done
    done
    python3 bench/model_join.py "$parts" "$dest"
}
rounds="${ROUNDS:-1}"
for round in $(seq 1 "$rounds"); do
    dest="$out"
    if [ "$rounds" -gt 1 ]; then dest="$out/round$round"; mkdir -p "$dest"; fi
    for c in ${COLLECTIVES:-allreduce allgather reduce_scatter}; do
        # The smallest call: MIN bytes (default 8), at least one f32 element per rank where
        # the buffer is split among the ranks.
        min="${MIN:-8}"
        case "$c" in allgather | reduce_scatter | alltoall) [ "$min" -ge $((ranks * 4)) ] || min=$((ranks * 4)) ;; esac
        # Every shipped plan the model can price for this collective on this topology.
        plans=$("$braid" explain "$c" --size 1M --topo "$topo" --profile "$profile" |
            awk 'NR > 1 && / us / { print $1 }' | sort -u)
        if [ "${INTERLEAVE:-0}" = 1 ]; then
            interleaved "$c" "$min" "$dest" "$round" $plans
            plans=""
        fi
        for p in $plans; do
            "$braid" perf "$c" "${sweep[@]}" -b "$min" --mode outofplace --algo "$p" --json "$dest/$c.plan.$p.json" \
                >"$dest/$c.plan.$p.txt" 2>&1 || echo "$c $p: failed (see $dest/$c.plan.$p.txt)"
        done
        # The imported MSCCL algorithms for this collective and rank count (in place: how
        # MSCCL's programs are written).
        for x in tests/msccl/corpus/msccl-tools-examples/*.xml; do
            name=$(basename "$x" .xml)
            case "$name" in "$c"_*_"${ranks}"r_*|"$c"_*_"${ranks}"r) ;; *) continue ;; esac
            "$braid" perf "$c" "${sweep[@]}" -b "$min" --mode inplace --plan "$x" --json "$dest/$c.xml.$name.json" \
                >"$dest/$c.xml.$name.txt" 2>&1 || echo "$c $name: did not run (see $dest/$c.xml.$name.txt)"
        done
        for o in bandwidth latency; do
            [ -f "$out/synth/$c.$o.json" ] || continue
            "$braid" perf "$c" "${sweep[@]}" -b "$min" --mode outofplace --plan "$out/synth/$c.$o.json" \
                --json "$dest/$c.synth.$o.json" >"$dest/$c.synth.$o.txt" 2>&1 ||
                echo "$c synth $o: did not run (see $dest/$c.synth.$o.txt)"
        done
        [ "${INTERLEAVE:-0}" = 1 ] ||
        "$braid" perf "$c" "${sweep[@]}" -b "$min" --mode outofplace --json "$dest/$c.selected.json" >"$dest/$c.selected.txt" 2>&1 ||
            echo "$c selection: failed (see $dest/$c.selected.txt)"
    done
done
if [ "$rounds" -gt 1 ]; then python3 bench/model_merge.py "$out"; fi
python3 bench/model_summary.py "$out" | tee "$out/summary.txt"
# Step times of chosen calls, measured and predicted (the interpreter's: a call that runs
# as a flat launch is run by the interpreter when BRAID_TRACE is set).
for spec in ${TRACES:-}; do
    IFS=: read -r c p s <<<"$spec"
    mkdir -p "$out/traces"
    b=$(bytes_of "$s")
    read -r x proto < <(python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
r = [r for r in rows if r["size"] == int(sys.argv[2])] or rows
print(r[0]["replicas"], r[0]["protocol"])' "$out/$c.plan.$p.json" "$b") || continue
    t="$out/traces/$c.$p.$s"
    if [ "$backend" = host ]; then
        # The last of back-to-back calls (`braid run` would trace a communicator's first).
        BRAID_TRACE="$t.measured.json" BRAID_CHANNELS="$x" BRAID_PROTO="$proto" \
            "$braid" perf "$c" --topo "$topo" --backend host --algo "$p" -b "$b" -e "$b" \
            -n "${ITERS:-10}" -w "${WARMUP:-2}" --mode outofplace >"$t.run.txt" 2>&1 ||
            echo "$spec: did not run (see $t.run.txt)"
    else
        BRAID_TRACE="$t.measured.json" BRAID_CHANNELS="$x" BRAID_PROTO="$proto" \
            "$braid" run "algorithms/$p.braid" --topo "$topo" --backend "$backend" --size "$b" \
            --iters 3 --mode outofplace >"$t.run.txt" 2>&1 || echo "$spec: did not run (see $t.run.txt)"
    fi
    BRAID_ALGO="=$p" "$braid" explain "$c" --size "$b" --topo "$topo" --profile "$profile" \
        --replicas "$x" --proto "$proto" --trace "$t.predicted.json" >"$t.explain.txt" 2>&1 || true
    [ -f "$t.measured.json" ] && [ -f "$t.predicted.json" ] &&
        python3 bench/trace_compare.py "$t.measured.json" "$t.predicted.json" >"$t.txt"
done
