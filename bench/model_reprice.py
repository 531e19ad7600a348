#!/usr/bin/env python3
# Re-prices a bench/model_check.sh run (its OUT_DIR) with another build or profile,
# without a GPU: the model's error over every shipped plan's row measured there (each with
# the replicas and protocol it ran), over the imported MSCCL algorithms' and `braid
# synth`'s programs' rows (run from the project root: the XML files are read where the
# check found them), and the selection at each size against the best
# measured plan, as `braid explain` would choose, and against the best fixed plan.
#
# Usage: bench/model_reprice.py OUT_DIR TOPO BRAID PROFILE [BLOCKS]
#   BLOCKS: thread blocks one rank may use (`braid explain --blocks`; default: explain's)
#   PROFILE_SET="NAME=VALUE ...": the profile with those constants set (a per-protocol
#   one for every protocol), e.g. PROFILE_SET="wait_us=0" to price without a term
#   ROWS=FILE: every shipped plan's row, tab-separated (collective, plan, size,
#   replicas, protocol, measured us, predicted us), written to FILE
import glob, json, os, re, statistics, subprocess, sys, tempfile


def with_set(prof, spec):
    """`prof`, or a copy of it with the constants `spec` names set."""
    if not spec.strip():
        return prof
    p = json.load(open(prof))
    for item in spec.split():
        name, value = item.split("=", 1)
        v = float(value)
        if name in ("flat_call_us", "flat_gpu_us", "flat_block_gbps", "flat_pass_us", "rank_us"):
            p[name] = v
        elif name == "cores":
            p[name] = int(v)
        else:
            p[name] = {k: v for k in ("simple", "ll", "ll128")}
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(p, f)
    f.close()
    return f.name


def main(d, topo, braid, prof, blocks=None):
    prof = with_set(prof, os.environ.get("PROFILE_SET", ""))
    cache = {}

    def explain(coll, size, extra=(), env=None):
        key = (coll, size, *extra, *sorted((env or {}).items()))
        if key not in cache:
            args = [braid, "explain", coll, "--size", str(size), "--topo", topo, "--profile", prof]
            if blocks:
                args += ["--blocks", str(blocks)]
            out = subprocess.run([*args, *extra], capture_output=True, text=True, check=True,
                                 env={**os.environ, **(env or {})}).stdout
            sel, prices = None, {}
            for line in out.splitlines():
                m = re.match(r"selected: (\S+) x(\d+) (\S+)", line)
                if m:
                    sel = (m.group(1), int(m.group(2)), m.group(3))
                m = re.match(r"\s+(\S+) x(\d+) (\S+)\s+([\d.]+) us", line)
                if m:
                    prices[(m.group(1), int(m.group(2)), m.group(3))] = float(m.group(4))
            cache[key] = (sel, prices)
        return cache[key]

    errs, measured, rows = [], {}, []
    for f in sorted(glob.glob(os.path.join(d, "*.plan.*.json"))):
        doc = json.load(open(f))
        coll = doc["collective"]
        for r in doc["rows"]:
            choice, s = (r["plan"], r["replicas"], r["protocol"]), r["size"]
            measured.setdefault((coll, s), {})[choice] = r["time_us"]
            p = explain(coll, s, ("--replicas", str(r["replicas"]), "--proto", r["protocol"]))[1].get(choice)
            if p is not None:
                errs.append((abs(p - r["time_us"]) / r["time_us"], coll, r["plan"], s, r["time_us"], p))
                rows.append((coll, r["plan"], s, r["replicas"], r["protocol"], r["time_us"], p))
    # Plans no micro-benchmark resembles, as bench/model_check.sh ran them: the imported
    # MSCCL algorithms (in place) and the programs `braid synth` wrote (out of place).
    others = {"xml": [], "synth": []}
    for kind, mode in (("xml", "inplace"), ("synth", "outofplace")):
        for f in sorted(glob.glob(os.path.join(d, f"*.{kind}.*.json"))):
            doc = json.load(open(f))
            coll, name = doc["collective"], os.path.basename(f)[: -len(".json")].split(".", 2)[2]
            src = (os.path.join("tests/msccl/corpus/msccl-tools-examples", name + ".xml") if kind == "xml"
                   else os.path.join(d, "synth", f"{coll}.{name}.json"))
            if not os.path.exists(src):
                continue
            for r in doc["rows"]:
                env = {"BRAID_PLANS": src, "BRAID_ALGO": "=" + r["plan"]}
                extra = ("--replicas", str(r["replicas"]), "--proto", r["protocol"], "--mode", mode)
                try:
                    p = explain(coll, r["size"], extra, env)[1].get((r["plan"], r["replicas"], r["protocol"]))
                except subprocess.CalledProcessError:
                    p = None
                if p is not None:
                    others[kind].append(abs(p - r["time_us"]) / r["time_us"])
    for kind, label in (("xml", "imported MSCCL"), ("synth", "braid synth's")):
        if others[kind]:
            a = others[kind]
            print(f"error, {label}: median {statistics.median(a) * 100:.0f}%, within 15%: "
                  f"{sum(x <= 0.15 for x in a)}/{len(a)}, above 35%: {sum(x > 0.35 for x in a)}")
    if os.environ.get("ROWS"):
        with open(os.environ["ROWS"], "w") as out:
            for row in rows:
                print(*row, sep="\t", file=out)
    a = [e[0] for e in errs]
    print(f"error: median {statistics.median(a) * 100:.0f}%, within 15%: "
          f"{sum(x <= 0.15 for x in a)}/{len(a)}, above 35%: {sum(x > 0.35 for x in a)}")
    for e in sorted(errs, reverse=True):
        if e[0] > 0.35:
            print(f"  {e[1]} {e[2]} at {e[3]} B: measured {e[4]:.1f} us, predicted {e[5]:.1f}")
    # The best fixed plan of each collective (as bench/model_summary.py takes it): the
    # lowest sum over sizes of its time relative to each size's best.
    fixed = {}
    for coll in {c for c, _ in measured}:
        sizes = {s: m for (c, s), m in measured.items() if c == coll}
        per_plan = {}
        for s, m in sizes.items():
            for (plan, _, _), t in m.items():
                per_plan.setdefault(plan, {})[s] = t
        best_at = {s: min(m.values()) for s, m in sizes.items()}
        fixed[coll] = min(per_plan.items(),
                          key=lambda p: sum(p[1].get(s, float("inf")) / best_at[s] for s in sizes))
    ok = n = 0
    worst_fixed = (0.0, None)
    for (coll, s), m in sorted(measured.items()):
        sel = explain(coll, s)[0]
        best = min(m.values())
        t = m.get(sel)
        n += 1
        ok += t is not None and t <= best * 1.05
        if t is None or t > best * 1.05:
            ratio = "not measured" if t is None else f"x{t / best:.2f} the best"
            print(f"  {coll} {s} B: {sel[0]} x{sel[1]} {sel[2]}, {ratio}")
        f = fixed[coll][1].get(s)
        if t is not None and f is not None and t / f > worst_fixed[0]:
            worst_fixed = (t / f, f"{coll} {s} B against {fixed[coll][0]}")
    print(f"selection within 5% of the best measured plan: {ok}/{n} sizes")
    print(f"worst against the best fixed plan (sizes where the selection was measured): "
          f"x{worst_fixed[0]:.2f} ({worst_fixed[1]})")


if __name__ == "__main__":
    main(*sys.argv[1:6])
