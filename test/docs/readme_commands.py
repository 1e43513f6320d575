#!/usr/bin/env python3
"""readme_commands.py — the README's commands run as written after `make train` and `make test`.

    python3 test/docs/readme_commands.py SOURCE_ROOT BUILD_DIR   (CTest: readme_commands, label unit)

What can be checked without running them (the runs themselves take hours, a network and GPUs):
 1. `make train` builds what the README says it builds: the programs in the Makefile's TRAIN_PROGRAMS are those
    "Quick start" names, and every build/PROGRAM the README runs is one of them or a program `make test` builds
    (a file in BUILD_DIR).
 2. Every flag a README command gives one of the programs (train_gpt, generate, prepare_data, draw_pipeline) is
    one that program's --help shows: no command fails on an unknown flag.
 3. Every Python line of the README uses the interpreter `make deps` installs the packages for (the Makefile's
    PYTHON), except llm.c's own scripts, which the README runs in llm.c's checkout.
Prints one line per problem; exit 1 when there is any.
"""
import os
import re
import subprocess
import sys

root, build = sys.argv[1], sys.argv[2]
readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
makefile = open(os.path.join(root, "Makefile"), encoding="utf-8").read()
problems = []

# 1. What make train builds.
train_programs = re.search(r"^TRAIN_PROGRAMS = (.*)$", makefile, re.M).group(1).split()
quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
named = re.findall(r"`build/([a-z_]+)`", quick.split("builds the trainer", 1)[1].split("for this machine", 1)[0])
if sorted(named) != sorted(train_programs):
    problems.append(f"README's Quick start says make train builds {named}; the Makefile's TRAIN_PROGRAMS is {train_programs}")
for prog in sorted(set(re.findall(r"\bbuild/([a-z_0-9]+)(?![\w./-])", readme))):  # programs, not build/model.bin
    if prog in train_programs:
        continue
    if not os.path.exists(os.path.join(build, prog)):
        problems.append(f"README runs build/{prog}, which neither make train nor the build in {build} makes")

# 2. Flags against --help. The commands: fenced blocks (lines joined at a trailing backslash) and inline code
# spans (which may wrap in the Markdown source).
def help_flags(prog):
    out = subprocess.run([os.path.join(build, prog), "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", out.stdout + out.stderr))
checked = {p: help_flags(p) for p in ("train_gpt", "generate", "prepare_data", "draw_pipeline")}
commands = []
for block in re.findall(r"```\n(.*?)```", readme, re.S):
    commands += block.replace("\\\n", " ").splitlines()
commands += [c.replace("\n", " ") for c in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", readme, flags=re.S))]
count = 0
for c in commands:
    for m in re.finditer(r"build/(train_gpt|generate|prepare_data|draw_pipeline)\b(.*)", c):
        prog, rest = m.group(1), re.split(r"\s(?:&&|\||;)\s|\bbuild/", m.group(2))[0]
        for flag in re.findall(r"(?<![\w\-/])--[a-z][a-z0-9_-]*", rest):
            count += 1
            if flag not in checked[prog]:
                problems.append(f"README: build/{prog} {flag}: not a flag `build/{prog} --help` shows (in: {c.strip()[:90]})")

# 3. Python lines: the interpreter make deps installed for.
python = re.search(r"^PYTHON = (.*)$", makefile, re.M).group(1).strip()
for line in readme.splitlines():
    for m in re.finditer(r"(?:^|`|\s)((?:/usr/bin/)?python3?) (-c|[\w/.-]+\.py)", line):
        interp, what = m.group(1), m.group(2)
        llmc = what.startswith("dev/data/") or what == "train_gpt2.py"  # llm.c's scripts, in llm.c's checkout
        if interp != python and not llmc:
            problems.append(f"README: '{interp} {what}' is not {python}, the interpreter make deps installs for: {line.strip()[:90]}")

for p in problems:
    print("readme_commands:", p)
if problems:
    sys.exit(1)
print(f"readme_commands: make train builds {' '.join(train_programs)}, as README says; {count} flags of README "
      f"commands are in their programs' --help; every Python line uses {python}")
