#!/usr/bin/env python3
# A measured timeline (`BRAID_TRACE`) beside the predicted one (`braid explain --trace`)
# of the same call, step by step: each step's start and duration (µs from the call's
# first step) in both, and each one's span. Steps are matched by rank, block and step
# index (the plan's order), as both traces number them.
#
# Usage: bench/trace_compare.py MEASURED.json PREDICTED.json
import json, sys


def steps(path):
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    other = t.get("otherData", {}) if isinstance(t, dict) else {}
    xs = [e for e in ev if e.get("ph") == "X"]
    if not xs:
        return {}, 0.0, other
    t0 = min(e["ts"] for e in xs)
    out = {}
    for e in xs:
        key = (e["pid"], e["tid"], e.get("args", {}).get("step", 0))
        out.setdefault(key, []).append((e["name"], e["ts"] - t0, e["dur"]))
    span = max(e["ts"] + e["dur"] for e in xs) - t0
    return out, span, other


def main(measured, predicted):
    m, ms, _ = steps(measured)
    p, ps, other = steps(predicted)
    print(f"{'rank':>4} {'block':>5} {'#':>3}  {'step':<24} {'measured start':>14} {'dur':>9}   "
          f"{'predicted start':>15} {'dur':>9}")
    for key in sorted(set(m) | set(p)):
        a, b = m.get(key, []), p.get(key, [])
        for i in range(max(len(a), len(b))):
            ma = a[i] if i < len(a) else None
            pa = b[i] if i < len(b) else None
            name = (ma or pa)[0]
            fmt = lambda x: f"{x[1]:14.2f} {x[2]:9.2f}" if x else f"{'-':>14} {'-':>9}"
            print(f"{key[0]:>4} {key[1]:>5} {key[2]:>3}  {name:<24} {fmt(ma)}   {' ' + fmt(pa)}")
    print(f"span: measured {ms:.2f} us, predicted {ps:.2f} us")
    if other.get("bound_by"):
        print(f"(predicted total {other['predicted_us']:.2f} us, set by the {other['bound_by']}"
              f" beyond the steps, which end at {other['steps_end_us']:.2f} us)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
