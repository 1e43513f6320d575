#!/usr/bin/env python3
"""trace_check.py — checks a --trace file (layers/trace.h) of a pipeline-parallel run, with the json module only.

    trace_check.py TRACE.json --schedule 1f1b --pp P --micro M [--chunks m] [--require-ops] [--negative]

What a correct timeline of the recorded steps must show:
  [structure] the Chrome Trace Event Format document (traceEvents, displayTimeUnit, otherData), one process per
              world rank named "stage s / tp t / dp d" (" / cp c" when cp > 1) with s = rank / ranks_per_stage,
              two named threads, known categories, complete events with ts and dur >= 0;
  [overlap]   events on one (pid, tid) never overlap (1 µs of rounding allowed);
  [ops]       every op of the schedule runs once per recorded step on every rank: F j.c and B j.c for each
              micro-batch j < M and chunk c < m, and W j.c too for zb-h1 / zb-h2 (accepted for the others when
              the names include W);
  [order]     on a rank, B j.c starts after F j.c ended (W j.c after B j.c), after the exchange that brought
              its gradient ended (every virtual stage but the last), and F j.c after the exchange that brought
              its activation (every virtual stage but the first): exchanges name what they received in
              args.recv, "grad j.c" / "act j.c" (parallel/point_to_point.cu);
  [flow]      every flow start ('s', at a send) has its finish ('f', at the receive) with the same id, on
              another rank, each inside an exchange of its rank;
  [clock]     on rank 0's clock, a message is received (its exchange ends) after it was sent (the sender's
              exchange started), and the op that consumes it starts after that too.
Until the executor records its ops (model/pipeline_step.cu), the op checks are skipped with a note;
--require-ops makes their absence an error.

--negative: the checks must pass on the file and fail on deliberately corrupted copies of it (an overlap, a
clock shifted by a second, a lost flow start; with ops: a missing op, a backward moved before its gradient
arrived), each caught by the check named; exit 0 only then.
"""
import argparse
import copy
import json
import re
import sys

TOL = 1.0  # µs: ts and dur are written with 3 decimals, and two adjacent spans may meet within rounding
CATEGORIES = {"compute", "p2p", "collective", "optimizer", "eval", "step"}
OP = re.compile(r"^([FBW])(\d+)\.(\d+)$")
LABEL = re.compile(r"^(act|grad) (\d+)\.(\d+)$")


def end(e):
    return e["ts"] + e["dur"]


def check(doc, schedule, p, M, chunks, require_ops):
    """The list of problems, each starting with the check's tag; empty when the trace is right."""
    problems = []
    say = problems.append
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["[structure] no traceEvents list"]
    if doc.get("displayTimeUnit") != "ms":
        say("[structure] displayTimeUnit is %r, not 'ms'" % doc.get("displayTimeUnit"))
    other = doc.get("otherData", {})
    for key in ("steps", "pp", "ranks_per_stage", "world", "cp"):
        if key not in other:
            say("[structure] otherData has no %r" % key)
    if problems:
        return problems
    if other["pp"] != p:
        say("[structure] the file says pp %d, the check was asked for %d" % (other["pp"], p))
    first, last = other["steps"]
    nsteps = last - first + 1
    per_stage = other["ranks_per_stage"]
    events = doc["traceEvents"]

    # ---- [structure] ------------------------------------------------------------------------------------------
    names, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads.setdefault(e["pid"], {})[e["tid"]] = e["args"]["name"]
    if sorted(names) != list(range(other["world"])):
        say("[structure] process names for pids %s, expected 0..%d" % (sorted(names), other["world"] - 1))
    for pid, name in names.items():
        m = re.match(r"^stage (\d+) / tp (\d+) / dp (\d+)( / cp (\d+))?$", name)
        if not m or int(m.group(1)) != pid // per_stage or (m.group(4) is None) != (other["cp"] == 1):
            say("[structure] pid %d is named %r, expected 'stage %d / tp t / dp d%s'" % (pid, name, pid // per_stage,
                                                                                       " / cp c" if other["cp"] > 1 else ""))
        if threads.get(pid) != {0: "compute", 1: "communication"}:
            say("[structure] pid %d threads %r, expected tid 0 compute, tid 1 communication" % (pid, threads.get(pid)))
    spans = [e for e in events if e.get("ph") == "X"]
    for e in spans:
        if e.get("cat") not in CATEGORIES or not isinstance(e.get("ts"), (int, float)) or not e.get("dur", -1) >= 0:
            say("[structure] malformed event %s" % json.dumps(e)[:200])
            return problems

    # ---- [overlap] ----------------------------------------------------------------------------------------------
    rows = {}
    for e in spans:
        rows.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, tid), row in sorted(rows.items()):
        row.sort(key=lambda e: (e["ts"], e["dur"]))
        for a, b in zip(row, row[1:]):
            if b["ts"] < end(a) - TOL:
                say("[overlap] pid %d tid %d: %r [%.3f, %.3f) overlaps %r starting %.3f" % (pid, tid, a["name"], a["ts"], end(a),
                                                                                         b["name"], b["ts"]))

    # Each rank's recorded steps: from its "step N" instant to the next one (the last one to the end).
    starts = {}
    for e in events:
        if e.get("ph") == "i" and e.get("cat") == "step":
            starts.setdefault(e["pid"], []).append((e["ts"], e["args"]["step"]))
    for pid in names:
        got = sorted(s for _, s in starts.get(pid, []))
        if got != list(range(first, last + 1)):
            say("[structure] pid %d marks steps %s, expected %d..%d" % (pid, got, first, last))

    def step_of(pid, ts):
        best = None
        for t, s in sorted(starts.get(pid, [])):
            if t <= ts + TOL:
                best = s
        return best

    exchanges = {}  # pid -> exchange events on the communication thread
    for e in spans:
        if e["cat"] == "p2p" and e["name"].startswith("exchange") and not e["name"].startswith(("exchange_start", "exchange_post")):
            exchanges.setdefault(e["pid"], []).append(e)

    # ---- [ops] --------------------------------------------------------------------------------------------------
    ops = [e for e in spans if e["cat"] == "compute" and OP.match(e["name"])]
    has_w = any(e["name"][0] == "W" for e in ops)
    kinds = "FBW" if schedule in ("zb-h1", "zb-h2") or has_w else "FB"
    expected = {"%s%d.%d" % (k, j, c) for k in kinds for j in range(M) for c in range(chunks)}
    by_step = {}  # (pid, step) -> {name: event}
    if not ops:
        if require_ops:
            say("[ops] no op events (cat 'compute', named like F3.0) at all")
    else:
        for e in ops:
            s = step_of(e["pid"], e["ts"])
            key = (e["pid"], s)
            if e["name"] in by_step.setdefault(key, {}):
                say("[ops] pid %d step %s runs %s twice" % (e["pid"], s, e["name"]))
            by_step[key][e["name"]] = e
        for pid in names:
            for s in range(first, last + 1):
                got = set(by_step.get((pid, s), {}))
                if got != expected:
                    missing, extra = sorted(expected - got), sorted(got - expected)
                    say("[ops] pid %d step %d: missing %s, unexpected %s (%s, M %d, m %d)" % (pid, s, missing[:6], extra[:6],
                                                                                           schedule, M, chunks))
        if len(ops) != len(expected) * nsteps * len(names):
            say("[ops] %d op events, expected %d x %d steps x %d ranks" % (len(ops), len(expected), nsteps, len(names)))

    # ---- [order] ------------------------------------------------------------------------------------------------
    def arrival(pid, s, label):
        """The first exchange of step s on pid that received `label` (training's come before validation's)."""
        found = [x for x in exchanges.get(pid, []) if label in x.get("args", {}).get("recv", []) and step_of(pid, x["ts"]) == s]
        return min(found, key=lambda x: x["ts"]) if found else None

    for (pid, s), named in sorted(by_step.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        stage = pid // per_stage
        for name, e in sorted(named.items()):
            kind, j, c = OP.match(name).groups()
            v = int(c) * p + stage  # virtual stage
            before = {"B": "F", "W": "B"}.get(kind)
            if before and before + j + "." + c in named:
                prev = named[before + j + "." + c]
                if e["ts"] < end(prev) - TOL:
                    say("[order] pid %d step %s: %s starts at %.3f before %s ended (%.3f)" % (pid, s, name, e["ts"], prev["name"], end(prev)))
            need = ("grad %s.%s" % (j, c)) if kind == "B" and v < p * chunks - 1 else ("act %s.%s" % (j, c)) if kind == "F" and v > 0 else None
            if need:
                x = arrival(pid, s, need)
                if x is None:
                    say("[order] pid %d step %s: no exchange received %r for %s" % (pid, s, need, name))
                elif e["ts"] < end(x) - TOL:
                    say("[order] pid %d step %s: %s starts at %.3f before the exchange that brought %r ended (%.3f)"
                        % (pid, s, name, e["ts"], need, end(x)))

    # ---- [flow] and [clock] -------------------------------------------------------------------------------------------
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows.setdefault(e["id"], {}).setdefault(e["ph"], []).append(e)

    def enclosing(e):
        for x in rows.get((e["pid"], e["tid"]), []):
            if x["cat"] == "p2p" and x["ts"] - TOL <= e["ts"] <= end(x) + TOL:
                return x
        return None

    # The clocks are aligned only as well as the ping-pong measured them: a rank's uncertainty is half its best
    # round trip (otherData; the tighter of the start's and the stop's), and a comparison across two ranks
    # allows both.
    unc = {}
    other = doc.get("otherData", {}) if isinstance(doc, dict) else {}
    for key in ("clock_offsets_start", "clock_offsets_stop"):
        for o in other.get(key, []):
            u = float(o.get("uncertainty_us", 0.0))
            unc[o["rank"]] = min(unc.get(o["rank"], u), u)

    def slack(a, b):
        return TOL + unc.get(a, 0.0) + unc.get(b, 0.0)

    messages = 0
    for fid, pair in sorted(flows.items()):
        if len(pair.get("s", [])) != 1 or len(pair.get("f", [])) != 1:
            say("[flow] id %d has %d start(s) and %d finish(es), expected one each" % (fid, len(pair.get("s", [])), len(pair.get("f", []))))
            continue
        snd, rcv = pair["s"][0], pair["f"][0]
        if snd["pid"] == rcv["pid"]:
            say("[flow] id %d starts and finishes on pid %d" % (fid, snd["pid"]))
        sx, rx = enclosing(snd), enclosing(rcv)
        if sx is None or rx is None:
            say("[flow] id %d: its %s is not inside an exchange of its rank" % (fid, "start" if sx is None else "finish"))
            continue
        messages += 1
        if end(rx) < snd["ts"] - slack(snd["pid"], rcv["pid"]):
            say("[clock] message %r from pid %d to pid %d: received (exchange ends %.3f) before it was sent (%.3f)"
                % (rcv.get("args", {}).get("recv"), snd["pid"], rcv["pid"], end(rx), snd["ts"]))
        label = rcv.get("args", {}).get("recv", "")
        m = LABEL.match(label)
        if m and ops:
            op_name = ("F" if m.group(1) == "act" else "B") + m.group(2) + "." + m.group(3)
            s = step_of(rcv["pid"], rx["ts"])
            op = by_step.get((rcv["pid"], s), {}).get(op_name)
            if op is not None and op["ts"] >= rx["ts"] - TOL and op["ts"] < snd["ts"] - slack(snd["pid"], rcv["pid"]):
                say("[clock] %s on pid %d starts at %.3f, before its input %r left pid %d (%.3f)" % (op_name, rcv["pid"], op["ts"], label,
                                                                                                   snd["pid"], snd["ts"]))
    if p > 1 and messages == 0:
        say("[flow] no message between ranks was recorded")
    return problems


# ---- corrupted copies (--negative) ------------------------------------------------------------------------------------
def corruptions(doc, has_ops):
    """(name, the check that must catch it, the corrupted document)."""
    out = []
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    # An overlap: the longest compute-thread (or else communication-thread) span of pid 0 doubled, half a span later.
    row = [e for e in spans if e["pid"] == 0 and e["tid"] == (0 if has_ops else 1)]
    if row:
        d = copy.deepcopy(doc)
        e = copy.deepcopy(max(row, key=lambda e: e["dur"]))
        e["ts"] += e["dur"] / 2
        e["dur"] = max(e["dur"], 10.0)
        d["traceEvents"].append(e)
        out.append(("overlap", "[overlap]", d))
    # A clock off by a second: every event of the last rank earlier.
    d = copy.deepcopy(doc)
    last = max(e["pid"] for e in d["traceEvents"])
    for e in d["traceEvents"]:
        if e["pid"] == last and "ts" in e:
            e["ts"] -= 1e6
    out.append(("clock shifted", "[clock]", d))
    # A lost flow start.
    d = copy.deepcopy(doc)
    i = next(i for i, e in enumerate(d["traceEvents"]) if e.get("ph") == "s")
    del d["traceEvents"][i]
    out.append(("flow start lost", "[flow]", d))
    if has_ops:
        d = copy.deepcopy(doc)
        i = next(i for i, e in enumerate(d["traceEvents"]) if e.get("cat") == "compute" and e.get("pid") == 0)
        del d["traceEvents"][i]
        out.append(("op missing", "[ops]", d))
        # B0.0 of pid 0 moved 0.1 ms before the end of the exchange that brought its gradient (a posted exchange's
        # wait can end at once, so its start is not early enough).
        d = copy.deepcopy(doc)
        b = next(e for e in d["traceEvents"] if e.get("pid") == 0 and e.get("name") == "B0.0")
        x = min((e for e in d["traceEvents"] if e.get("pid") == 0 and e.get("ph") == "X"
                 and "grad 0.0" in e.get("args", {}).get("recv", []) and e["ts"] < b["ts"]), key=lambda e: b["ts"] - e["ts"])
        b["ts"] = end(x) - 100.0
        out.append(("backward before its gradient", "[order]", d))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--schedule", required=True, choices=["1f1b", "afab", "interleaved", "zb-h1", "zb-h2"])
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--require-ops", action="store_true")
    ap.add_argument("--negative", action="store_true")
    a = ap.parse_args()
    with open(a.trace) as f:
        doc = json.load(f)
    problems = check(doc, a.schedule, a.pp, a.micro, a.chunks, a.require_ops)
    for msg in problems[:30]:
        print(msg)
    if problems:
        print("trace_check: FAILED (%d problems) on %s" % (len(problems), a.trace))
        return 1
    spans = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X")
    has_ops = any(e.get("cat") == "compute" and OP.match(e.get("name", "")) for e in doc["traceEvents"])
    if not has_ops:
        print("trace_check: no op events (the executor records none yet): the [ops] and [order] checks were skipped")
    print("trace_check: %s passes (%d spans, steps %s)" % (a.trace, spans, doc["otherData"]["steps"]))
    if not a.negative:
        return 0
    ok = True
    for name, tag, bad in corruptions(doc, has_ops):
        found = check(bad, a.schedule, a.pp, a.micro, a.chunks, a.require_ops)
        caught = any(msg.startswith(tag) for msg in found)
        print("trace_check: corrupted (%s): %s%s" % (name, "caught by " + tag if caught else "NOT caught by " + tag,
                                                     "" if caught else " (found: %s)" % found[:3]))
        ok = ok and caught
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
