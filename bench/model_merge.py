#!/usr/bin/env python3
# Merges the rounds of a bench/model_check.sh run (OUT_DIR/round1, round2, ...) into
# OUT_DIR: each row's time is the median of the rounds that timed it (the choice the
# selection made in the first round, for the selection), its model error recomputed
# from that median; every round's time is kept in `rounds_us`.
#
# Usage: bench/model_merge.py OUT_DIR
import glob, json, os, statistics, sys
from perf_reports import load_all
out = sys.argv[1]
rounds = sorted(glob.glob(os.path.join(out, "round*")), key=lambda d: int(d.split("round")[-1]))
names = sorted({os.path.basename(f) for d in rounds for f in glob.glob(os.path.join(d, "*.json"))})
for name in names:
    per_round = load_all(os.path.join(d, name) for d in rounds)
    if not per_round:
        continue
    first = per_round[0]
    key = lambda r: (r["size"], r["plan"], r["replicas"], r["protocol"], r["mode"])
    times = {}
    for doc in per_round:
        for r in doc["rows"]:
            times.setdefault(key(r), []).append(r["time_us"])
    for r in first["rows"]:
        ts = times[key(r)]
        r["rounds_us"] = ts
        r["time_us"] = statistics.median(ts)
        if r.get("predicted_us") is not None:
            r["model_error"] = (r["predicted_us"] - r["time_us"]) / r["time_us"]
    json.dump(first, open(os.path.join(out, name), "w"), indent=1)
