#!/usr/bin/env python3
# Joins the one-size reports of an interleaved bench/model_check.sh sweep (PARTS/NAME.SIZE.json,
# `braid perf --json` each) into one report per choice (DEST/NAME.json), rows by size, as
# a sweep of that choice alone would have written it.
#
# Usage: bench/model_join.py PARTS DEST
import glob, json, os, sys
from perf_reports import load_all
parts, dest = sys.argv[1], sys.argv[2]
groups = {}
for f in glob.glob(os.path.join(parts, "*.json")):
    name, size = os.path.basename(f)[: -len(".json")].rsplit(".", 1)
    groups.setdefault(name, []).append((int(size), f))
for name, files in groups.items():
    docs = load_all(f for _, f in sorted(files))
    if not docs:
        continue
    joined = docs[0]
    joined["rows"] = [r for d in docs for r in d["rows"]]
    json.dump(joined, open(os.path.join(dest, name + ".json"), "w"), indent=1)
