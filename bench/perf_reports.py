# Reading `braid perf --json` reports for the bench scripts.
import json, os


def load_all(paths):
    """The reports at `paths` that exist and parse, in order (a run cut short leaves a
    file empty or half written)."""
    docs = []
    for f in paths:
        if not os.path.exists(f):
            continue
        try:
            docs.append(json.load(open(f)))
        except ValueError:
            pass
    return docs
