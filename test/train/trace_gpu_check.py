#!/usr/bin/env python3
"""trace_gpu_check.py — checks a --trace file of a pipeline run on a GPU (here the emulated one), with the json
module only: the spans are events recorded on their streams (layers/trace.h), and recording changes nothing.

    trace_gpu_check.py TRACE.json [--negative]

  [stream order] on each rank, the compute row (the compute stream: the schedule's ops and the optimizer) is in
                 the order the host issued it (the file's order) and its spans do not overlap; an exchange that
                 runs on the compute stream too (a whole one, "exchange pp [...]") overlaps none of them;
  [overlap]      some W op runs while an exchange runs on the communication stream ("exchange_finish pp
                 [...]": a zero-bubble unit's W's run between exchange_start and exchange_finish) and the trace
                 shows the two overlapping: a trace that synchronized its streams at every span could not.
--negative: the checks must pass on the file and fail on corrupted copies of it (two ops swapped; every W moved
after the exchange it overlaps, as a synchronizing trace would have drawn it), each caught by the check named.
"""
import copy
import json
import re
import sys

TOL = 1.0  # µs
OP = re.compile(r"^([FBW])(\d+)\.(\d+)$")


def end(e):
    return e["ts"] + e["dur"]


def check(doc):
    problems = []
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    pids = sorted({e["pid"] for e in spans})
    overlaps = 0
    for pid in pids:
        compute = [e for e in spans if e["pid"] == pid and e["tid"] == 0]  # the file's order: the host's issue order
        for a, b in zip(compute, compute[1:]):
            if b["ts"] < end(a) - TOL:
                problems.append("[stream order] pid %d: %s [%.1f, %.1f) then %s at %.1f" % (pid, a["name"], a["ts"], end(a),
                                                                                          b["name"], b["ts"]))
        whole = [e for e in spans if e["pid"] == pid and e["tid"] == 1 and e["name"].startswith("exchange ")]
        for x in whole:
            for op in compute:
                if op["ts"] < end(x) - TOL and x["ts"] < end(op) - TOL:
                    problems.append("[stream order] pid %d: %s overlaps %s, on the same stream" % (pid, x["name"], op["name"]))
        finishes = [e for e in spans if e["pid"] == pid and e["tid"] == 1 and e["name"].startswith("exchange_finish")]
        for w in (e for e in compute if OP.match(e["name"]) and e["name"][0] == "W"):
            for x in finishes:
                if w["ts"] < end(x) - TOL and x["ts"] < end(w) - TOL:
                    overlaps += 1
    if overlaps == 0:
        problems.append("[overlap] no W op overlaps an exchange on the communication stream")
    return problems, overlaps


def corruptions(doc):
    out = []
    d = copy.deepcopy(doc)
    ops = [e for e in d["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0 and e["tid"] == 0 and OP.match(e["name"])]
    a, b = ops[0], ops[1]
    a["ts"], b["ts"] = b["ts"], a["ts"]
    out.append(("two ops swapped", "[stream order]", d))
    d = copy.deepcopy(doc)
    spans = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    for w in (e for e in spans if e["tid"] == 0 and OP.match(e["name"]) and e["name"][0] == "W"):
        for x in (e for e in spans if e["pid"] == w["pid"] and e["tid"] == 1 and e["name"].startswith("exchange_finish")):
            if w["ts"] < end(x) - TOL and x["ts"] < end(w) - TOL:
                w["ts"] = end(x)
    out.append(("W after its exchange, as if synchronized", "[overlap]", d))
    return out


def main():
    path = sys.argv[1]
    negative = "--negative" in sys.argv
    doc = json.load(open(path))
    problems, overlaps = check(doc)
    if problems:
        print("\n".join(problems))
        print("trace_gpu_check: FAILED (%d problems) on %s" % (len(problems), path))
        return 1
    print("trace_gpu_check: %s passes: the compute rows in stream order, %d W/exchange overlaps shown" % (path, overlaps))
    if not negative:
        return 0
    failed = 0
    for name, tag, d in corruptions(doc):
        found = sorted({p.split("]")[0] + "]" for p in check(d)[0]})
        caught = tag in found
        print("trace_gpu_check: corrupted (%s): %s by %s" % (name, "caught" if caught else "NOT caught", tag))
        failed += not caught
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
