#!/usr/bin/env python3
"""The emulated device's source transform (as hipify does for HIP): a project .cu file -> host C++.

    cuda_transform.py SOURCE OUTPUT [--name NAME]

NAME (default SOURCE) is the file name the output's #line directive gives, so that a patched copy of a file
(a mutant, test/emulator/mutants.py) reports the original file's name and lines. Three rewrites, nothing else;
line numbers are kept (a #line directive and the same count of newlines), so a compiler error, a gdb line or
an emulator report points into the original file:
  kernel<<<grid, block[, smem[, stream]]>>>(args)  ->  ::emu::launch(kernel, "kernel", __FILE__, __LINE__,
                                                       grid, block[, smem[, stream]])(args)
  __shared__ T name[N][M];                          ->  T (&name)[N][M] = ::emu::shared_array<T[N][M]>(
                                                           []{}, "name", __FILE__, __LINE__);
  extern __shared__ T name[];                       ->  T* const name = ::emu::dynamic_shared<T>();
A static __shared__ array becomes a reference to the block's own copy of it, a heap allocation of exactly its
size made by the emulator (launch.cpp): under AddressSanitizer an access one element past it is reported,
naming the array. The lambda `[]{}` only gives each declaration (and each instantiation of a template
kernel) a type, hence an address, of its own: the emulator's key for the array.
The output is written only when it changed, so that a rebuild after an unchanged transform compiles nothing.
"""
import re
import sys


def strip_comments_and_strings(src):
    """The same text with comments and string/char literals blanked (same length), for searching."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_") and src[i - 1 : i + 1] != "u8":
                # a digit separator (1'000) is not a literal
                if src[i - 1].isdigit():
                    i += 1
                    continue
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def split_top(text):
    """Split at the commas not inside (), [], {} or <> of templates (best effort: <> only after a name)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def callee_start(s, end):
    """Start of the kernel expression that ends just before `end` (a name, template arguments, ::)."""
    i = end
    while True:
        while i > 0 and s[i - 1].isspace():
            i -= 1
        if i > 0 and s[i - 1] == ">":
            depth = 0
            while i > 0:
                i -= 1
                if s[i] == ">":
                    depth += 1
                elif s[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            while i > 0 and s[i - 1].isspace():
                i -= 1
        j = i
        while i > 0 and (s[i - 1].isalnum() or s[i - 1] == "_"):
            i -= 1
        if i == j:
            raise SystemExit("cuda_transform: no kernel name before <<< at offset %d" % end)
        k = i
        while k > 0 and s[k - 1].isspace():
            k -= 1
        if k >= 2 and s[k - 2 : k] == "::":
            i = k - 2
            continue
        return i


def matching_paren(s, open_at):
    depth = 0
    for i in range(open_at, len(s)):
        if s[i] == "(":
            depth += 1
        elif s[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise SystemExit("cuda_transform: unbalanced parentheses after a launch")


def rewrite_launches(src):
    out = src
    while True:
        plain = strip_comments_and_strings(out)
        at = plain.find("<<<")
        if at < 0:
            return out
        close = plain.find(">>>", at)
        if close < 0:
            raise SystemExit("cuda_transform: <<< without >>>")
        start = callee_start(plain, at)
        callee = out[start:at]
        cfg = out[at + 3 : close]
        k = close + 3
        while plain[k].isspace():
            k += 1
        if plain[k] != "(":
            raise SystemExit("cuda_transform: a launch's >>> is not followed by its arguments")
        name = " ".join(callee.split())
        newlines = callee.count("\n") + cfg.count("\n") + out[close + 3 : k].count("\n")
        cfg_flat = " ".join(cfg.split())
        repl = '::emu::launch(%s, "%s", __FILE__, __LINE__, %s)' % (" ".join(callee.split()), name.replace('"', ""),
                                                                     cfg_flat)
        out = out[:start] + repl + "\n" * newlines + out[k:]


SHARED = re.compile(r"(\bextern\s+)?__shared__\b")


def rewrite_shared(src):
    out = src
    pos = 0
    while True:
        plain = strip_comments_and_strings(out)
        m = SHARED.search(plain, pos)
        if not m:
            return out
        semi = plain.find(";", m.end())
        decl = out[m.end() : semi]
        newlines = out[m.start() : semi].count("\n")
        flat = " ".join(decl.split())
        if m.group(1):  # extern __shared__ T name[];
            mm = re.fullmatch(r"(?:__align__\(\s*\d+\s*\)\s*)?(.+?)\s*\b(\w+)\s*\[\s*\]", flat)
            if not mm:
                raise SystemExit("cuda_transform: cannot read the extern __shared__ declaration: " + flat)
            typ, name = mm.group(1), mm.group(2)
            repl = "%s* const %s = ::emu::dynamic_shared<%s>()" % (typ, name, typ)
        else:  # __shared__ T a[N][M], b[K];
            flat = re.sub(r"__align__\(\s*\d+\s*\)\s*", "", flat)
            first = re.search(r"\b(\w+)\s*\[", flat)
            if not first:
                raise SystemExit("cuda_transform: a __shared__ declaration that is not an array: " + flat)
            typ = flat[: first.start()].strip()
            parts = []
            for d in split_top(flat[first.start() :]):
                dm = re.fullmatch(r"\s*(\w+)\s*((?:\[[^\]]+\]\s*)+)", d)
                if not dm:
                    raise SystemExit("cuda_transform: cannot read the __shared__ array declarator: " + d)
                name, dims = dm.group(1), "".join(dm.group(2).split())
                parts.append('%s (&%s)%s = ::emu::shared_array<%s%s>([] {}, "%s", __FILE__, __LINE__)'
                             % (typ, name, dims, typ, dims, name))
            repl = "; ".join(parts)
        out = out[: m.start()] + repl + "\n" * newlines + out[semi:]
        pos = m.start() + len(repl)


def main():
    args = sys.argv[1:]
    name = None
    if len(args) == 4 and args[2] == "--name":
        name = args[3]
        args = args[:2]
    if len(args) != 2:
        raise SystemExit(__doc__)
    src_path, out_path = args
    with open(src_path) as f:
        src = f.read()
    text = '#line 1 "%s"\n' % (name or src_path) + rewrite_shared(rewrite_launches(src))
    try:
        with open(out_path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(out_path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
