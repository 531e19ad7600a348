#!/usr/bin/env python3
"""Summary of bench/one_gpu.sh's reports: per collective and rank count, the rows and
wrong results, the lowest roofline efficiency at >= 64 MiB (target 0.9), and the 8-byte
all-reduce per call back to back and from a graph (targets: 2 ranks 5 and 2.5 us, 8 ranks
6 and 4.5 us)."""
import json
import pathlib
import sys

BIG = 64 << 20
SMALL_TARGETS = {2: (5.0, 2.5), 8: (6.0, 4.5)}


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main(out):
    out = pathlib.Path(out)
    reports = {}
    for p in sorted(out.glob("*r.json")) + sorted(out.glob("*r_graph.json")):
        r = load(p)
        if r is None:
            continue
        graph = p.stem.endswith("_graph")
        reports[(r["collective"], r["ranks"], graph)] = r
    met = missed = 0
    print(f"{'collective':15} {'ranks':>5} {'rows':>5} {'wrong':>5}  lowest efficiency >= 64 MiB (out / in)")
    for (c, n, graph), r in sorted(reports.items()):
        if graph:
            continue
        rows = r["rows"]
        wrong = sum(x["wrong"] for x in rows)
        cells = []
        for mode in ("outofplace", "inplace"):
            effs = [x["efficiency"] for x in rows
                    if x["mode"] == mode and x["size"] >= BIG and "efficiency" in x]
            if effs:
                e = min(effs)
                ok = e >= 0.9
                met += ok
                missed += not ok
                cells.append(f"{e:.2f} {'met' if ok else 'MISSED'}")
            else:
                cells.append("-")
        print(f"{c:15} {n:5} {len(rows):5} {wrong:5}  {' / '.join(cells)}")
    print()
    for n, (b2b_target, graph_target) in SMALL_TARGETS.items():
        for graph, target in ((False, b2b_target), (True, graph_target)):
            r = reports.get(("allreduce", n, graph))
            if r is None:
                continue
            for mode in ("outofplace", "inplace"):
                t = [x["time_us"] for x in r["rows"] if x["size"] == 8 and x["mode"] == mode]
                if not t:
                    continue
                ok = t[0] <= target
                met += ok
                missed += not ok
                how = "from a graph" if graph else "back to back"
                print(f"allreduce 8 B, {n} ranks, {mode}, {how}: {t[0]:.2f} us "
                      f"(target {target}) {'met' if ok else 'MISSED'}")
    print(f"\ntargets met: {met}, missed: {missed}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
