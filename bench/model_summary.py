#!/usr/bin/env python3
# The summary of a bench/model_check.sh run (its OUT_DIR): the cost model's error over
# every row of the plans' sweeps (shipped plans and imported MSCCL algorithms apart), and
# for each collective the runtime's selection against the best measured plan at each size
# (within 5 %?) and against the best fixed plan (the one plan best over all sizes).
import glob, json, os, statistics, sys
out = sys.argv[1]
def rows(path):
    return json.load(open(path))["rows"]
def errors(kind):
    e = []
    for f in sorted(glob.glob(os.path.join(out, f"*.{kind}.*.json"))):
        for r in rows(f):
            if r.get("model_error") is not None:
                e.append((abs(r["model_error"]), os.path.basename(f), r["size"], r["time_us"], r["predicted_us"]))
    return e
for kind, what in (("plan", "shipped plans"), ("xml", "imported MSCCL algorithms"),
                   ("synth", "programs braid synth wrote (run as a user's plan files)")):
    e = errors(kind)
    if not e:
        continue
    a = [x[0] for x in e]
    worst = max(e)
    print(f"model error, {what}: median {statistics.median(a)*100:.0f}%, max {worst[0]*100:.0f}% "
          f"({worst[1]} at {worst[2]} B: measured {worst[3]:.1f} us, predicted {worst[4]:.1f}), "
          f"within 15%: {sum(x <= 0.15 for x in a)}/{len(a)}, above 35%: {sum(x > 0.35 for x in a)}")
for sel in sorted(glob.glob(os.path.join(out, "*.selected.json"))):
    c = os.path.basename(sel).split(".")[0]
    per_plan = {}
    # The same choice (plan, replicas, protocol) as measured in the plans' sweep.
    per_choice = {}
    for f in glob.glob(os.path.join(out, f"{c}.plan.*.json")):
        for r in rows(f):
            per_plan.setdefault(r["plan"], {})[r["size"]] = r["time_us"]
            per_choice[(r["plan"], r["replicas"], r["protocol"], r["size"])] = r["time_us"]
    if not per_plan:
        continue
    sizes = sorted({s for t in per_plan.values() for s in t})
    # The best fixed plan: the lowest sum of times relative to each size's best.
    best_at = {s: min(t[s] for t in per_plan.values() if s in t) for s in sizes}
    fixed = min(per_plan, key=lambda p: sum(per_plan[p].get(s, float("inf")) / best_at[s] for s in sizes))
    within, worst_fixed, n = 0, 0.0, 0
    for r in rows(sel):
        s = r["size"]
        if s not in best_at:
            continue
        n += 1
        # Where the plans' sweep ran the selected choice, its time there: the selection
        # is then compared with the other plans in one sweep, not across two invocations.
        key = (r["plan"], r["replicas"], r["protocol"], s)
        t = per_choice.get(key, r["time_us"])
        ratio = t / best_at[s]
        within += ratio <= 1.05
        if s in per_plan[fixed]:
            worst_fixed = max(worst_fixed, t / per_plan[fixed][s])
        print(f"  {c} {s:>11} B: selected {r['plan']} x{r['replicas']} {r['protocol']} "
              f"{t:.1f} us{' (in the plans sweep)' if key in per_choice else ''}; "
              f"as selected {r['time_us']:.1f} us; best measured {best_at[s]:.1f} us (x{ratio:.2f})")
    print(f"selection, {c}: within 5% of the best measured plan at {within}/{n} sizes; "
          f"at most x{worst_fixed:.2f} the best fixed plan ({fixed})")
# How well the machine repeats itself: the selected choice timed twice, once in the plans'
# sweep and once as the selection (two invocations, minutes apart), where both ran it.
# The model is scored against one of the two; their difference is the noise it cannot
# beat.
again = []
for sel in sorted(glob.glob(os.path.join(out, "*.selected.json"))):
    c = os.path.basename(sel).split(".")[0]
    swept = {}
    for f in glob.glob(os.path.join(out, f"{c}.plan.*.json")):
        for r in rows(f):
            swept[(r["plan"], r["replicas"], r["protocol"], r["size"])] = r["time_us"]
    for r in rows(sel):
        t = swept.get((r["plan"], r["replicas"], r["protocol"], r["size"]))
        if t:
            again.append(abs(r["time_us"] - t) / t)
if again:
    print(f"the same choice timed twice (plans' sweep, selection): median difference "
          f"{statistics.median(again)*100:.0f}%, max {max(again)*100:.0f}%, above 15%: "
          f"{sum(x > 0.15 for x in again)}/{len(again)}")
# Where the run has rounds (ROUNDS=K, each in roundK/): what selection by measurement
# would reach on this machine. Each round's fastest choice at each size (as an autotuner
# that timed every plan once would pick), timed by the other rounds (their median): how
# often it is within 5 % of their fastest. The model's selection above is scored the
# same way against the rounds' medians; it cannot be asked to order plans more finely
# than the machine repeats them.
def choices(d):
    m = {}
    for f in glob.glob(os.path.join(d, "*.plan.*.json")):
        j = json.load(open(f))
        for r in j["rows"]:
            m.setdefault((j["collective"], r["size"]), {})[(r["plan"], r["replicas"], r["protocol"])] = r["time_us"]
    return m
rounds = [choices(d) for d in sorted(glob.glob(os.path.join(out, "round*")))]
if len(rounds) > 1:
    ok = n = 0
    worst = 1.0
    for key in rounds[0]:
        for k, mine in enumerate(rounds):
            others = [o[key] for j, o in enumerate(rounds) if j != k and key in o]
            if key not in mine or not others:
                continue
            pick = min(mine[key], key=mine[key].get)
            med = {c: statistics.median(o[c] for o in others) for c in mine[key] if all(c in o for o in others)}
            if pick not in med:
                continue
            ratio = med[pick] / min(med.values())
            n += 1
            ok += ratio <= 1.05
            worst = max(worst, ratio)
    if n:
        print(f"selection by measurement (each round's fastest choice, timed by the other rounds): "
              f"within 5% of their fastest at {ok}/{n} ({100 * ok / n:.0f}%), at most x{worst:.2f}")
