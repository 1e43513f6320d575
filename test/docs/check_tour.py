#!/usr/bin/env python3
"""check_tour.py — the tour of one training step says who calls whom, and the code agrees.

    python3 test/docs/check_tour.py SOURCE_ROOT [PAGE]   (CTest: docs_tour, label unit)

PAGE (default docs/code_map.md) holds a section "A tour of one training step, in call order". In it:
 - a function's name in backticks, then "in" and a source file's path, says where that function is defined;
 - "`A` ... calls `B`" (also "hands over to `B`"; "which calls `B`" after "`A` in file") says that the body of
   the function named last before the verb, A, calls B. The callee then becomes the function named last, so that
   "`A` in f, which calls `B` in g, which calls `C`" checks A -> B and B -> C.
Each such claim is checked in the code: A's definition is found in its file, its body taken up to the matching
brace, and B must be called there (B( or B<...>(). A reader who follows the tour then lands, at every step, in a
function that really makes the next call. Prints one line per claim that fails; exit 1 when any does (or when the
page makes no claim at all), else a summary.
"""
import os
import re
import sys

root = sys.argv[1]
page = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "docs/code_map.md")
text = open(page, encoding="utf-8").read()
m = re.search(r"^#+ A tour of one training step, in call order\n(.*?)(?=^#|\Z)", text, re.S | re.M)
if not m:
    print(f"check_tour: {page} has no section 'A tour of one training step, in call order'")
    sys.exit(1)
tour = re.sub(r"\s+", " ", m.group(1))

SOURCE = r"[\w./]+\.(?:cu|cuh|h|cpp)"
where = {name: path for name, path in re.findall(r"`(\w+)` in (" + SOURCE + ")", tour)}


def body(name, path):
    """The text of function `name`'s definition in path (signature to its closing brace), or None."""
    full = os.path.join(root, path)
    if not os.path.exists(full):
        return None
    src = open(full, encoding="utf-8").read()
    # A definition starts a line (not a call inside a body, not a comment) and its parameter list is followed by
    # the body's brace, not by a semicolon.
    for d in re.finditer(r"^[A-Za-z_][^;{}()]*?\b" + re.escape(name) + r"\s*\(", src, re.M):
        depth, i = 0, d.end() - 1
        while i < len(src):  # the parameter list
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
            if depth == 0:
                break
        rest = src[i:]
        brace = re.match(r"[^;{]*\{", rest)
        if not brace:
            continue  # a declaration
        j, depth = i + brace.end() - 1, 0
        while j < len(src):
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            j += 1
            if depth == 0:
                return src[d.start():j]
    return None


problems, claims = [], 0
last = None
for tok in re.finditer(r"`(\w+)`|\b(calls|hands over to)\s+(?:\d+\.\s+)?`(\w+)`", tour):
    if tok.group(1):
        if tok.group(1) in where:
            last = tok.group(1)
        continue
    callee = tok.group(3)
    claims += 1
    if last is None:
        problems.append(f"'{tok.group(2)} `{callee}`' names no caller before it")
        continue
    b = body(last, where[last])
    if b is None:
        problems.append(f"`{last}` is said to be in {where[last]}, which has no definition of it")
    elif not re.search(r"\b" + re.escape(callee) + r"\s*(?:<[^<>;]*>)?\s*\(", b):
        problems.append(f"`{last}` ({where[last]}) is said to call `{callee}`, but its body does not")
    if callee in where:
        last = callee

for p in problems:
    print("check_tour:", p)
if problems or claims == 0:
    if claims == 0:
        print("check_tour: the tour makes no 'calls' claim to check")
    sys.exit(1)
print(f"check_tour: {claims} calls the tour names are in the callers' bodies ({len(where)} functions located)")
