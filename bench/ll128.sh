#!/usr/bin/env bash
# LL128 on this machine's GPUs in one command: the stress test's verdict for each link
# kind the ranks use (`braid tune --backend cuda` runs it and keeps the verdicts in the
# profile it writes), then every collective timed back to back (braid perf) with each
# protocol forced (simple, ll, ll128) and as the runtime chooses with that profile (auto),
# all in the same run, through the ranks' FIFOs: BRAID_DIRECT=0, since direct reads and
# flat launches carry no protocol. The before/after table (auto without LL128 is the
# faster of simple and ll) goes to OUT_DIR/summary.txt, each run's JSON beside it.
#
# Usage: bench/ll128.sh [OUT_DIR]
#   BRAID=path/to/braid   the braid binary (default: target/release/braid, built if missing)
#   RANKS=2               ranks of nvswitch:RANKS, one per GPU where there are that many,
#                         else sharing the GPUs there are
#   MIN=8 MAX=64M         sizes (factor 4); ITERS=20 RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/ll128-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
braid="${BRAID:-target/release/braid}"
if [ ! -x "$braid" ]; then
    cargo build --release -p braid-cli
fi
ranks="${RANKS:-2}"
topo="nvswitch:$ranks"
profile="$out/profile.json"
"$braid" tune --backend cuda --topo "$topo" -o "$profile" >"$out/tune.txt" 2>&1
failed=0
for c in allreduce allgather reduce_scatter broadcast reduce alltoall; do
    for p in simple ll ll128 auto; do
        env_proto=()
        [ "$p" = auto ] || env_proto=(BRAID_PROTO="$p")
        if ! env BRAID_PROFILE="$profile" BRAID_DIRECT=0 "${env_proto[@]}" \
            "$braid" perf "$c" --backend cuda --topo "$topo" -b "${MIN:-8}" -e "${MAX:-64M}" \
            -f 4 -n "${ITERS:-20}" --runs "${RUNS:-3}" --mode outofplace \
            --json "$out/${c}_$p.json" >"$out/${c}_$p.txt" 2>&1; then
            echo "$c $p: braid perf failed: $(tail -1 "$out/${c}_$p.txt")" >&2
            failed=1
        fi
    done
done
python3 - "$out" "$profile" >"$out/summary.txt" <<'EOF'
import json, os, sys
out, profile = sys.argv[1], sys.argv[2]
prof = json.load(open(profile))
print("LL128 stress test (braid tune), per link kind:")
for v in prof.get("ll128", []):
    # As Ll128Verdict::passed: nothing torn or stalled, at least 16 reads per line.
    ok = v["torn"] == 0 and v["stalled"] == 0 and v["reads"] >= 16 * v["lines"]
    print(f"  {v.get('link')}: {'passed' if ok else 'FAILED'} {json.dumps(v)}")
if not prof.get("ll128"):
    print("  (no verdicts: LL128 not tested here)")
for c in ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall"]:
    runs = {}
    for p in ["simple", "ll", "ll128", "auto"]:
        f = os.path.join(out, f"{c}_{p}.json")
        if os.path.exists(f):
            runs[p] = {r["size"]: r for r in json.load(open(f))["rows"]}
    if not runs:
        continue
    print(f"\n{c} (time us, back to back; wrong = elements that differed)")
    print(f"{'size':>10} {'simple':>9} {'ll':>9} {'ll128':>9} {'auto':>9} {'auto ran':>12} "
          f"{'best of simple/ll ÷ ll128':>26} {'wrong':>6}")
    sizes = sorted(set().union(*[set(v) for v in runs.values()]))
    for s in sizes:
        t = {p: runs[p][s]["time_us"] for p in runs if s in runs[p]}
        wrong = sum(runs[p][s]["wrong"] for p in runs if s in runs[p])
        ran = runs.get("auto", {}).get(s, {}).get("protocol", "-")
        before = min(t.get("simple", float("inf")), t.get("ll", float("inf")))
        ratio = f"{before / t['ll128']:.2f}" if "ll128" in t and before != float("inf") else "-"
        cols = " ".join(f"{t[p]:9.2f}" if p in t else f"{'-':>9}" for p in ["simple", "ll", "ll128", "auto"])
        print(f"{s:>10} {cols} {ran:>12} {ratio:>26} {wrong:>6}")
EOF
cat "$out/summary.txt"
exit $failed
