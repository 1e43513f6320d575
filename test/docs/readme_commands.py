#!/usr/bin/env python3
"""readme_commands.py — the commands of README.md and docs/*.md run as pasted after `make train` and `make test`.

    python3 test/docs/readme_commands.py SOURCE_ROOT BUILD_DIR   (CTest: readme_commands, label unit)

The pages' promise is that a reader can paste any command into a fresh root shell. What can be checked without
running the long ones (those take hours, a network and GPUs):
 1. `make train` builds what the README says it builds: the programs in the Makefile's TRAIN_PROGRAMS are those
    "Quick start" names, and every build/PROGRAM a page runs is one of them or a program `make test` builds (a
    file in BUILD_DIR).
 2. Every flag a command gives one of the programs (train_gpt, generate, prepare_data, draw_pipeline,
    memory_calculator) is one that program's --help shows: no command fails on an unknown flag.
 3. Every Python line uses the interpreter `make deps` installs the packages for (the Makefile's PYTHON), except
    llm.c's own scripts, which the pages run in llm.c's checkout.
 4. Open MPI as root: every code block that runs `mpirun` exports OMPI_ALLOW_RUN_AS_ROOT and
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM before its first mpirun line, and no mpirun command that runs a program stands
    in running text (a reader would paste it without them).
 5. No template where a command belongs: a command line holds no unquoted "(" (as in "--schedule 1f1b (or
    zb-h1)"), and names a program by its path (build/draw_pipeline, not draw_pipeline).
 6. The quick ones run: each `build/draw_pipeline --ideal ...` and `build/memory_calculator ...` command runs in a
    scratch folder and must exit 0 (a missing required flag fails here).
Prints one line per problem; exit 1 when there is any.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

root, build = sys.argv[1], sys.argv[2]
makefile = open(os.path.join(root, "Makefile"), encoding="utf-8").read()
pages = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
text = {p: open(os.path.join(root, p), encoding="utf-8").read() for p in pages}
readme = text["README.md"]
problems = []
PROGRAMS = ("train_gpt", "generate", "prepare_data", "draw_pipeline", "memory_calculator", "plot_log")
CHECKED = ("train_gpt", "generate", "prepare_data", "draw_pipeline", "memory_calculator")
EXPORT = re.compile(r"^export\b.*\bOMPI_ALLOW_RUN_AS_ROOT=1\b.*\bOMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\b")


def blocks(page):
    """The fenced code blocks of a page, each a list of commands (lines joined at a trailing backslash)."""
    return [b.replace("\\\n", " ").splitlines() for b in re.findall(r"^ *```[a-z]*\n(.*?)^ *```", text[page], re.S | re.M)]


def spans(page):
    """The inline code spans outside fenced blocks (they may wrap in the Markdown source)."""
    prose = re.sub(r"^ *```.*?^ *```", "", text[page], flags=re.S | re.M)
    return [c.replace("\n", " ") for c in re.findall(r"`([^`]+)`", prose)]


def unquoted(command):
    """The command without what its quotes hold (a Python -c program, a prompt)."""
    return re.sub(r"\"[^\"]*\"|'[^']*'", "''", command)


# 1. What make train builds.
train_programs = re.search(r"^TRAIN_PROGRAMS = (.*)$", makefile, re.M).group(1).split()
quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
named = re.findall(r"`build/([a-z_]+)`", quick.split("builds the trainer", 1)[1].split("for this machine", 1)[0])
if sorted(named) != sorted(train_programs):
    problems.append(f"README's Quick start says make train builds {named}; the Makefile's TRAIN_PROGRAMS is {train_programs}")
for page in pages:
    for prog in sorted(set(re.findall(r"\bbuild/([a-z_0-9]+)(?![\w./-])", text[page]))):  # programs, not build/model.bin
        if prog not in train_programs and not os.path.exists(os.path.join(build, prog)):
            problems.append(f"{page} runs build/{prog}, which neither make train nor the build in {build} makes")


# 2. Flags against --help.
def help_flags(prog):
    out = subprocess.run([os.path.join(build, prog), "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", out.stdout + out.stderr))


checked = {p: help_flags(p) for p in CHECKED if os.path.exists(os.path.join(build, p))}
count = 0
runs = []  # (page, command) of the quick ones (6.)
for page in pages:
    commands = [c for b in blocks(page) for c in b] + spans(page)
    for c in commands:
        for m in re.finditer(r"build/(" + "|".join(CHECKED) + r")\b(.*)", c):
            prog, rest = m.group(1), re.split(r"\s(?:&&|\||;)\s|\bbuild/", m.group(2))[0]
            for flag in re.findall(r"(?<![\w\-/])--[a-z][a-z0-9_-]*", rest):
                count += 1
                if prog in checked and flag not in checked[prog]:
                    problems.append(f"{page}: build/{prog} {flag}: not a flag `build/{prog} --help` shows (in: {c.strip()[:90]})")

# 3. Python lines: the interpreter make deps installed for.
python = re.search(r"^PYTHON = (.*)$", makefile, re.M).group(1).strip()
for page in pages:
    for line in text[page].splitlines():
        if line.startswith("|"):  # a table row describes what a test does (docs/bad_inputs.md), not a command to paste
            continue
        for m in re.finditer(r"(?:^|`|\s)((?:/usr/bin/)?python3?) (-c|[\w/.-]+\.py)", line):
            interp, what = m.group(1), m.group(2)
            llmc = what.startswith("dev/data/") or what == "train_gpt2.py"  # llm.c's scripts, in llm.c's checkout
            if interp != python and not llmc:
                problems.append(f"{page}: '{interp} {what}' is not {python}, the interpreter make deps installs for: {line.strip()[:90]}")

# 4 and 5. Blocks that run mpirun export the Open MPI variables first; no command in running text or as a template.
mpirun_blocks = 0
for page in pages:
    for b in blocks(page):
        exported = False
        for c in b:
            if EXPORT.match(c.strip()):
                exported = True
            if re.match(r"\s*mpirun\b", c):
                mpirun_blocks += 1
                if not exported:
                    problems.append(f"{page}: a block runs mpirun before exporting OMPI_ALLOW_RUN_AS_ROOT=1 "
                                    f"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (in: {c.strip()[:90]})")
                    break
    for c in spans(page):
        if re.search(r"\bmpirun\b.*\bbuild/", c):
            problems.append(f"{page}: an mpirun command in running text; put it in a code block after the export line "
                            f"(in: {c.strip()[:90]})")
    for c in [c for b in blocks(page) for c in b] + spans(page):
        bare = re.match(r"\s*(?:mpirun\b.*?\s)?(" + "|".join(PROGRAMS) + r") --", c)
        if bare:
            problems.append(f"{page}: '{bare.group(1)}' without its path: build/{bare.group(1)} (in: {c.strip()[:90]})")
        if re.search(r"\bbuild/(" + "|".join(PROGRAMS) + r")\b", c) and "(" in unquoted(c).replace("$(", ""):
            problems.append(f"{page}: a command with a template in it, not runnable as pasted (in: {c.strip()[:90]})")
        if re.match(r"\s*build/(draw_pipeline --ideal|memory_calculator)\b", c):
            runs.append((page, c.strip()))

# 6. The quick ones, run.
with tempfile.TemporaryDirectory() as scratch:
    os.mkdir(os.path.join(scratch, "docs"))  # the charts' folder, as in the checkout
    for page, c in runs:
        argv = shlex.split(c)
        argv[0] = os.path.join(os.path.abspath(build), argv[0][len("build/"):])
        r = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            why = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
            problems.append(f"{page}: exits {r.returncode}: {c[:90]}: {why[0][:120]}")

for p in problems:
    print("readme_commands:", p)
if problems:
    sys.exit(1)
print(f"readme_commands: make train builds {' '.join(train_programs)}, as README says; {count} flags of the commands in "
      f"{len(pages)} pages are in their programs' --help; {mpirun_blocks} mpirun lines follow the Open MPI export; "
      f"{len(runs)} quick commands ran; every Python line uses {python}")
