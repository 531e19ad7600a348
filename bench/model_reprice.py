#!/usr/bin/env python3
# Re-prices a bench/model_check.sh run (its OUT_DIR) with another build or profile,
# without a GPU: the model's error over every all-reduce plan row measured there, and
# the selection at each size against the best measured plan, as `braid explain` would
# choose with BLOCKS thread blocks per rank (the runtime's grant: half the GPU's 66 among
# the ranks on it).
#
# Usage: bench/model_reprice.py OUT_DIR TOPO BLOCKS BRAID PROFILE
import glob, json, statistics, subprocess, sys


def explain(braid, prof, topo, size, blocks, extra=()):
    args = [braid, "explain", "allreduce", "--size", str(size), "--topo", topo,
            "--profile", prof, "--blocks", str(blocks), *extra]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def price(out, plan):
    for line in out.splitlines()[1:]:
        f = line.split()
        if f and f[0] == plan and "us" in f:
            return float(f[f.index("us") - 1])
    return None


def main(d, topo, blocks, braid, prof):
    errs, per_choice, best = [], {}, {}
    for f in sorted(glob.glob(d + "/allreduce.plan.*.json")):
        for r in json.load(open(f))["rows"]:
            plan, s = r["plan"], r["size"]
            per_choice[(plan, r["replicas"], r["protocol"], s)] = r["time_us"]
            best[s] = min(best.get(s, float("inf")), r["time_us"])
            p = price(explain(braid, prof, topo, s, blocks,
                              ["--replicas", str(r["replicas"]), "--proto", r["protocol"]]), plan)
            if p is not None:
                errs.append((abs(p - r["time_us"]) / r["time_us"], plan, s))
    a = [e[0] for e in errs]
    worst = max(errs)
    print(f"error: median {statistics.median(a) * 100:.0f}%, max {worst[0] * 100:.0f}% "
          f"({worst[1]} at {worst[2]} B), within 15%: {sum(x <= 0.15 for x in a)}/{len(a)}, "
          f"above 35%: {sum(x > 0.35 for x in a)}")
    ok = 0
    for s in sorted(best):
        sel = explain(braid, prof, topo, s, blocks).splitlines()[0].split()
        plan, rep, proto = sel[1], int(sel[2][1:]), sel[3]
        t = per_choice.get((plan, rep, proto, s))
        ok += t is not None and t <= best[s] * 1.05
        ratio = "not measured" if t is None else f"x{t / best[s]:.2f} the best"
        print(f"  {s:>10} B: {plan} x{rep} {proto}, {ratio}")
    print(f"selection within 5% of the best measured plan: {ok}/{len(best)} sizes")


if __name__ == "__main__":
    main(*sys.argv[1:6])
