#!/usr/bin/env python3
# The shipped plans' rows of a bench/model_check.sh run (its OUT_DIR) that the cost model
# is furthest from, worst first: one line each, "collective plan bytes replicas protocol
# error", for bench/model_check.sh TRACES=N to take their step times.
#
# Usage: bench/model_worst.py OUT_DIR N [MAX_BYTES]
import glob, json, os, sys


def main(out, n, max_bytes=1 << 27):
    rows = []
    for f in glob.glob(os.path.join(out, "*.plan.*.json")):
        doc = json.load(open(f))
        for r in doc["rows"]:
            e = r.get("model_error")
            if e is None or r["size"] > int(max_bytes):
                continue
            rows.append((abs(e), doc["collective"], r["plan"], r["size"], r["replicas"], r["protocol"], e))
    rows.sort(reverse=True)
    for a, c, p, s, x, proto, e in rows[: int(n)]:
        print(c, p, s, x, proto, f"{e:+.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
