#!/usr/bin/env python3
"""Mutants of the project's kernels (make mutants; not part of CI: it rebuilds and reruns tests per mutant).

A mutant is one kernel file of layers/ or parallel/ with one change that a correct test suite must notice:
  - a barrier deleted: each __syncthreads() and __syncwarp(...) call becomes ((void)0);
  - a static shared array one element short: in `__shared__ T name[N]...`, N becomes (N) - 1 (for an array of
    arrays, the element is a row: the outermost extent is cut).
Every file is covered as it is found (a new kernel file needs no change here). Each mutant is built into a copy
of its file's gpu tests' programs (test/emulator/cmake/variants.cmake, emu_mutant; the tests of a file are
listed by the emulated build in emu_kernel_tests.txt) and run under the modes make test-emulated runs:
memcheck in the forward and the reverse thread order (build-mutants/, AddressSanitizer) and the race mode
(build-mutants-race/, ThreadSanitizer). A mutant no test kills is a gap: a test's shape that misses the
element, or a barrier nothing depends on (then it is redundant and goes).

    mutants.py list  [--root DIR]                  the mutants, one a line
    mutants.py check [--root DIR] [--map FILE]     the list is complete (CI: emu_mutants_enumeration)
    mutants.py apply SRC OUT MUTATION...           write SRC with one mutation to OUT (the build calls this):
        --delete-call LINE NAME                    the call NAME(...) on line LINE becomes ((void)0)
        --shrink LINE NAME                         the first extent of shared array NAME (declared on LINE) - 1
        --after ANCHOR --replace OLD NEW           the first OLD after the one line holding ANCHOR becomes NEW
    mutants.py run   [--root DIR] [--only REGEX] [--jobs N] [--all-modes] [--small]
                                                   build and run them, mode after mode (a mutant killed in one
                                                   mode is not run in the next); print the table
"""
import argparse
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_transform import matching_paren, rewrite_launches, rewrite_shared, split_top, strip_comments_and_strings  # noqa: E402

KERNEL_DIRS = ("layers", "parallel")
BARRIERS = ("__syncthreads", "__syncwarp")
BARRIER_CALL = re.compile(r"\b(__syncthreads|__syncwarp)\s*\(")
STATIC_SHARED = re.compile(r"(\bextern\s+)?\b__shared__\b")


def kernel_files(root):
    out = []
    for d in KERNEL_DIRS:
        for name in sorted(os.listdir(os.path.join(root, d))):
            if name.endswith((".cu", ".cuh")):
                out.append(os.path.join(d, name))
    return out


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def shared_declarators(plain, start):
    """The (name, line) of each array declared by the __shared__ declaration whose keyword ends at `start`."""
    semi = plain.find(";", start)
    decl = plain[start:semi]
    flat = re.sub(r"__align__\(\s*\d+\s*\)", " ", decl)
    first = re.search(r"\b(\w+)\s*\[", flat)
    if not first:
        return []
    names = []
    for d in split_top(flat[first.start():]):
        m = re.match(r"\s*(\w+)\s*\[", d)
        if m:
            names.append(m.group(1))
    return names


def enumerate_mutants(root):
    """Every mutant of every kernel file: dicts with file, line, kind (barrier | shared), name, id, args."""
    mutants = []
    for rel in kernel_files(root):
        with open(os.path.join(root, rel)) as f:
            plain = strip_comments_and_strings(f.read())
        stem = os.path.splitext(os.path.basename(rel))[0]
        for m in BARRIER_CALL.finditer(plain):
            line = line_of(plain, m.start())
            mutants.append(dict(file=rel, line=line, kind="barrier", name=m.group(1),
                                id="%s_%d%s" % (stem, line, m.group(1)),
                                args=["--delete-call", str(line), m.group(1)]))
        for m in STATIC_SHARED.finditer(plain):
            if m.group(1):
                continue  # extern __shared__: the dynamic shared memory, sized at the launch
            line = line_of(plain, m.start())
            for name in shared_declarators(plain, m.end()):
                mutants.append(dict(file=rel, line=line, kind="shared", name=name,
                                    id="%s_%d_%s_short" % (stem, line, name),
                                    args=["--shrink", str(line), name]))
    for m in mutants:
        m["what"] = ("%s deleted" % m["name"]) if m["kind"] == "barrier" else ("shared array %s one element short" % m["name"])
    return mutants


# ---- apply --------------------------------------------------------------------------------------------------
def offset_of_line(text, line):
    pos = 0
    for _ in range(line - 1):
        pos = text.index("\n", pos) + 1
    return pos


def apply_mutation(src, argv):
    plain = strip_comments_and_strings(src)
    if argv[0] == "--delete-call" and len(argv) == 3:
        line, name = int(argv[1]), argv[2]
        a = offset_of_line(plain, line)
        b = plain.find("\n", a)
        b = len(plain) if b < 0 else b
        hits = [m for m in re.finditer(r"\b%s\s*\(" % re.escape(name), plain[a:b])]
        if len(hits) != 1:
            raise SystemExit("mutants.py: line %d has %d calls of %s, not one" % (line, len(hits), name))
        start = a + hits[0].start()
        close = matching_paren(plain, a + hits[0].end() - 1)
        return src[:start] + "((void)0)" + src[close + 1:]
    if argv[0] == "--shrink" and len(argv) == 3:
        line, name = int(argv[1]), argv[2]
        a = offset_of_line(plain, line)
        kw = STATIC_SHARED.search(plain, a)
        if not kw or line_of(plain, kw.start()) != line or kw.group(1):
            raise SystemExit("mutants.py: no static __shared__ declaration on line %d" % line)
        semi = plain.find(";", kw.end())
        m = re.compile(r"\b%s\s*\[" % re.escape(name)).search(plain, kw.end(), semi)
        if not m:
            raise SystemExit("mutants.py: no shared array %s declared on line %d" % (name, line))
        close = plain.find("]", m.end())
        extent = src[m.end():close]
        return src[:m.end()] + "(%s) - 1" % extent.strip() + src[close:]
    if argv[0] == "--after" and len(argv) == 5 and argv[2] == "--replace":
        anchor, old, new = argv[1], argv[3], argv[4]
        if src.count(anchor) != 1:
            raise SystemExit("mutants.py: the anchor %r occurs %d times, not once" % (anchor, src.count(anchor)))
        at = src.find(old, src.index(anchor))
        if at < 0:
            raise SystemExit("mutants.py: %r does not occur after the anchor %r" % (old, anchor))
        return src[:at] + new + src[at + len(old):]
    raise SystemExit("mutants.py apply: unknown mutation %s" % " ".join(argv))


def cmd_apply(args):
    with open(args.src) as f:
        src = f.read()
    out = apply_mutation(src, args.mutation)
    if out == src:
        raise SystemExit("mutants.py: the mutation %s changes nothing" % " ".join(args.mutation))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    try:
        with open(args.out) as f:
            if f.read() == out:
                return 0
    except OSError:
        pass
    with open(args.out, "w") as f:
        f.write(out)
    return 0


# ---- list, check ----------------------------------------------------------------------------------------------
def read_map(path):
    tests = {}
    with open(path) as f:
        for line in f:
            if ":" in line:
                rel, names = line.split(":", 1)
                tests[rel.strip()] = names.split()
    return tests


def cmd_list(args):
    for m in enumerate_mutants(args.root):
        print("%-34s %s:%d  %s" % (m["id"], m["file"], m["line"], m["what"]))
    return 0


def cmd_check(args):
    """The enumeration against an independent count: every barrier identifier and every static __shared__
    keyword of the kernel files (comments and strings aside) is a mutant, only .cu files hold them (a header's
    barrier could not be mutated per file), each mutant applies and transforms, and each file has gpu tests."""
    mutants = enumerate_mutants(args.root)
    problems = []
    tests = read_map(args.map) if args.map else None
    for rel in kernel_files(args.root):
        with open(os.path.join(args.root, rel)) as f:
            src = f.read()
        plain = strip_comments_and_strings(src)
        mine = [m for m in mutants if m["file"] == rel]
        n_barrier_tokens = len(re.findall(r"\b(?:%s)\b" % "|".join(BARRIERS), plain))
        n_barriers = sum(1 for m in mine if m["kind"] == "barrier")
        if n_barrier_tokens != n_barriers:
            problems.append("%s: %d barrier names in the code, %d barrier mutants (a barrier the tool cannot read)"
                            % (rel, n_barrier_tokens, n_barriers))
        static_kw = [m for m in STATIC_SHARED.finditer(plain) if not m.group(1)]
        shared_lines = {line_of(plain, m.start()) for m in static_kw}
        mutated_lines = {m["line"] for m in mine if m["kind"] == "shared"}
        if shared_lines != mutated_lines:
            problems.append("%s: static __shared__ on lines %s, shared mutants on lines %s"
                            % (rel, sorted(shared_lines), sorted(mutated_lines)))
        if mine and rel.endswith(".cuh"):
            problems.append("%s: a header with barriers or shared arrays: the mutants are built per .cu file; "
                            "move them into the kernel's .cu file (or teach variants.cmake's emu_mutant headers)" % rel)
        if mine and tests is not None and "__global__" in plain and not tests.get(rel):
            problems.append("%s: no gpu test in %s" % (rel, args.map))
        if mine and tests is not None and "__global__" not in plain and not rel.endswith(".cuh"):
            problems.append("%s: barriers outside any kernel file" % rel)
        for m in mine:
            try:
                out = apply_mutation(src, m["args"])
                if out == src:
                    raise SystemExit("changes nothing")
                rewrite_shared(rewrite_launches(out))
            except SystemExit as e:
                problems.append("%s: mutant %s does not apply: %s" % (rel, m["id"], e))
    for p in problems:
        print("FAIL: " + p)
    if problems:
        return 1
    files = sorted({m["file"] for m in mutants})
    print("%d mutants (%d barriers, %d shared arrays) in %d files: %s" % (
        len(mutants), sum(m["kind"] == "barrier" for m in mutants), sum(m["kind"] == "shared" for m in mutants),
        len(files), " ".join(files)))
    return 0


# ---- run ------------------------------------------------------------------------------------------------------
MODES = [  # (column, build folder's sanitizer, test-name suffix)
    ("memcheck, forward order", "address", ""),
    ("memcheck, reverse order", "address", "_reverse"),
    ("race mode", "thread", ""),
]


def why(output):
    """What stopped a test, from its output."""
    if "emulated CUDA: memcheck:" in output or "ERROR: AddressSanitizer" in output:
        return "memcheck"
    if "emulated CUDA: synccheck:" in output:
        return "synccheck"
    if "ThreadSanitizer: data race" in output:
        return "racecheck"
    if re.search(r"^FAIL", output, re.M) or "checks FAILED" in output:
        return "wrong result"
    return "failed"


def build_folder(root, build, san, listing, jobs):
    configure = ["cmake", "-S", root, "-B", build, "-DMM_EMULATED=ON", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                 "-DMM_EMU_SANITIZER=" + san, "-DMM_EMU_MUTANTS=" + listing]
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        configure += ["-G", "Ninja"]
    print("mutants: configuring and building %s (MM_EMU_SANITIZER=%s)" % (build, san), flush=True)
    subprocess.run(configure, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j", str(jobs), "--target", "emu_mutant_programs"], check=True,
                   stdout=subprocess.DEVNULL)


def run_tests(build, names, jobs):
    """Run the named tests of a folder; {name: None (passed) | what stopped it}."""
    if not names:
        return {}
    junit = os.path.join(build, "mutants-junit.xml")
    regex = "^(%s)$" % "|".join(re.escape(n) for n in names)
    subprocess.run(["ctest", "-R", regex, "-j", str(jobs), "--output-junit", junit], cwd=build,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failed = case.get("status") == "fail" or case.find("failure") is not None
        results[case.get("name")] = why(case.findtext("system-out") or "") if failed else None
    return results


def killed_by(cell):
    """Whether a table cell (None: not run in that mode; "passes"; or the tests that failed, and why) kills."""
    return bool(cell) and cell != "passes" and "not run" not in cell


def cmd_run(args):
    """Each mutant's tests in the modes, in order; a mutant killed in one mode is not run in the next (with
    --all-modes, every mode runs, for the full table)."""
    root = os.path.abspath(args.root)
    mutants = [m for m in enumerate_mutants(root) if re.search(args.only, m["id"])]
    if not mutants:
        raise SystemExit("no mutant matches --only %s" % args.only)
    folders = {"address": os.path.join(root, "build-mutants"), "thread": os.path.join(root, "build-mutants-race")}
    env = " ENV MM_GPU_TEST_SMALL=1" if args.small else ""
    gen = "".join('emu_mutant(mutant_%s SOURCE %s MUTATION %s TESTS ${EMU_TESTS_OF_%s} LABELS mutant REVERSE%s)\n'
                  % (m["id"], m["file"], " ".join(m["args"]), m["file"], env) for m in mutants)
    tests, cells = None, {m["id"]: [] for m in mutants}
    built = set()
    for col, san, suffix in MODES:
        todo = [m for m in mutants if args.all_modes or not any(killed_by(c) for c in cells[m["id"]])]
        if not todo:
            break
        build = folders[san]
        if san not in built:
            os.makedirs(build, exist_ok=True)
            listing = os.path.join(build, "mutants.cmake")
            with open(listing, "w") as f:
                f.write(gen)
            build_folder(root, build, san, listing, args.jobs)
            built.add(san)
            if tests is None:
                tests = read_map(os.path.join(build, "emu_kernel_tests.txt"))
        names = ["mutant_%s__%s%s" % (m["id"], t, suffix) for m in todo for t in tests.get(m["file"], [])]
        print("mutants: %s: %d tests of %d mutants" % (col, len(names), len(todo)), flush=True)
        results = run_tests(build, names, args.jobs)
        for m in mutants:
            if m not in todo:
                cells[m["id"]].append(None)
                continue
            hits = ["%s: %s" % (t, results.get("mutant_%s__%s%s" % (m["id"], t, suffix), "not run"))
                    for t in tests.get(m["file"], [])
                    if results.get("mutant_%s__%s%s" % (m["id"], t, suffix), "not run")]
            cells[m["id"]].append("; ".join(hits) if hits else "passes")
    survivors = 0
    print("\n| mutant | %s | killed |" % " | ".join(c for c, _, _ in MODES))
    print("|---|%s---|" % ("---|" * len(MODES)))
    for m in mutants:
        row = cells[m["id"]] + [None] * (len(MODES) - len(cells[m["id"]]))
        killed = any(killed_by(c) for c in row)
        survivors += not killed
        print("| %s:%d %s | %s | %s |" % (m["file"], m["line"], m["what"],
                                           " | ".join(c if c is not None else "(killed before)" for c in row),
                                           "yes" if killed else "**SURVIVES**"))
    print("\n%d mutants, %d killed, %d survive" % (len(mutants), len(mutants) - survivors, survivors))
    return 1 if survivors else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for name in ("list", "check", "run"):
        s = sub.add_parser(name)
        s.add_argument("--root", default=here)
        if name == "check":
            s.add_argument("--map", help="emu_kernel_tests.txt of an emulated build folder")
        if name == "run":
            s.add_argument("--only", default=".", help="a regex of the mutants' ids")
            s.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
            s.add_argument("--all-modes", action="store_true", help="run every mode, also on killed mutants")
            s.add_argument("--small", action="store_true",
                           help="every mode at the race mode's small shapes (MM_GPU_TEST_SMALL=1): quicker, fewer kills")
    s = sub.add_parser("apply")
    s.add_argument("src")
    s.add_argument("out")
    s.add_argument("mutation", nargs=argparse.REMAINDER)
    args = p.parse_args()
    return {"list": cmd_list, "check": cmd_check, "apply": cmd_apply, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
