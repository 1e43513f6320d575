#!/usr/bin/env python3
"""The tensor-core flash attention kernels' instruction budget, counted on their sm_90 SASS (no GPU needed).

    bench/sass_budget.py [--object FILE | --sass FILE] [--check]

It counts the kernels' own code, not any machine's speed. Each SM sub-partition issues one instruction per clock
and retires one HMMA.16816 per 4 clocks at H100/H200's dense bf16 peak, so the instructions a warp issues per
HMMA bound the share of the tensor cores' peak a kernel can reach (4 × HMMA / instructions); what it reaches on a
GPU is a measurement (bench/PERF_NOTES.md, "Flash attention on tensor cores"), not this.

How it counts, per kernel (the bf16 instantiations of layers/flash_attention_tc.cu at HDB = 32, 64, 128):
  - the main loop is the backward branch whose body holds the most HMMA: the loop over key tiles (forward,
    dQ) or query tiles (dK-dV), one iteration per tile;
  - the loops nested in it that hold no HMMA (the copies of the next tile into shared memory, stage_rows) count
    0, as their trip count is not the tile's work;
  - the body's forward branches make paths from the loop's first instruction to its back edge. Of the paths
    that run every HMMA of an iteration, the shortest and the longest are counted; the instructions on a path
    are all issued, predicated off or not;
  - a path "with dropout" passes a block holding Philox4x32's multipliers (0xD2511F53, 0xCD9E8D57), the keep
    bits; one "without" passes none (the branch a p = 0 run takes).
In the kernels as they are, "shortest, no dropout" is the iteration of a tile that needs no mask, and "longest, no
dropout" one that is masked (the causal diagonal, the ends of the sequence); with dropout, the shortest is a tile
whose keep bits start on a Philox block (index ≡ 0 mod 4, the usual case), the longest a masked tile whose
bits do not. (In code that branches around the work of a masked element, the shortest path is a tile with every
element masked, not a real one: read the longest then.)

The SASS comes from cuobjdump -sass: of --object (a cubin, or an object file the build compiled with sm_90 among
its architectures), or of layers/flash_attention_tc.cu compiled here with nvcc -cubin -arch=sm_90 (the build's
flags: -O3 -lineinfo --expt-relaxed-constexpr, C++17); --sass reads a saved listing. cuobjdump is in the CUDA
toolkit, or in PyPI's nvidia-cuda-cuobjdump (pip install nvidia-cuda-cuobjdump), or where $CUOBJDUMP says;
without it this exits 77.
--check: exit 1 unless every kernel was found and counted (a unit test runs it so, on the build's object).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = 77

# The kernels counted: (label, mangled-name pattern with the HDB in {hdb}). bf16 operands and outputs, written
# (not a ring block's f32 accumulators: the same loops, another store).
KERNELS = [
    ("forward", r"_Z23flash_tc_forward_kernelI13__nv_bfloat16Li{hdb}E"),
    ("dK-dV", r"_Z27flash_tc_backward_kv_kernelI13__nv_bfloat16Lb0ELi{hdb}E"),
    ("dQ", r"_Z26flash_tc_backward_q_kernelI13__nv_bfloat16Lb0ELi{hdb}E"),
]
HDBS = (32, 64, 128)
PHILOX = re.compile(r"0xd2511f53|-0x2daee0ad|0xcd9e8d57|-0x326172a9", re.I)
INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
PRED = re.compile(r"^(@!?U?P[0-9T])\s+")


def fail(msg, code=1):
    print("sass_budget: " + msg, file=sys.stderr)
    sys.exit(code)


def find_cuobjdump():
    cands = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"]
    # PyPI's nvidia-cuda-cuobjdump: nvidia/cu*/bin/cuobjdump in a site-packages folder, this interpreter's or the
    # system's (make deps installs PyPI packages for /usr/bin/python3).
    sites = sys.path + glob.glob("/usr/local/lib/python3*/dist-packages") + glob.glob("/usr/lib/python3/dist-packages")
    for site in sites:
        cands += glob.glob(os.path.join(site, "nvidia", "cu*", "bin", "cuobjdump"))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    fail("cuobjdump not found ($CUOBJDUMP, on PATH, in /usr/local/cuda/bin, or in the Python packages of %s or the "
         "system's): install it with "
         "'pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm' (or the CUDA toolkit's cuda-cuobjdump and cuda-nvdisasm), then run this again"
         % sys.executable, SKIP)


def compile_cubin(out_dir):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.access(nvcc, os.X_OK):
        fail("nvcc not found (PATH, /usr/local/cuda/bin): give --object, a build's flash_attention_tc.cu.o", SKIP)
    cubin = os.path.join(out_dir, "flash_attention_tc.cubin")
    cmd = [nvcc, "-cubin", "-arch=sm_90", "-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo",
           "-I" + ROOT, "-I" + os.path.join(ROOT, "layers"), os.path.join(ROOT, "layers", "flash_attention_tc.cu"),
           "-o", cubin]
    print("sass_budget: " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        fail("nvcc failed:\n" + r.stdout)
    return cubin


def disassemble(path):
    tool = find_cuobjdump()
    # cuobjdump -sass runs nvdisasm, which it looks for on PATH: PyPI's nvidia-cuda-nvdisasm puts it beside
    # PyPI's cuobjdump, the toolkit beside its own.
    env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([tool, "-sass", "-arch", "sm_90", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env)
    if r.returncode != 0 or "Function :" not in r.stdout:
        fail("%s -sass -arch sm_90 %s gave no sm_90 code (%s): build it with 90 among CMAKE_CUDA_ARCHITECTURES, "
             "or run without --object to compile for sm_90 here" % (tool, path, (r.stderr or "no functions").strip()))
    return r.stdout


def functions(sass):
    """{mangled name: [(address, predicate, opcode, operands)]}"""
    out, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = INSTR.match(line)
        if m and cur is not None:
            text = m.group(2).strip()
            p = PRED.match(text)
            pred = p.group(1) if p else ""
            text = text[p.end():] if p else text
            op, _, args = text.partition(" ")
            cur.append((int(m.group(1), 16), pred, op, args.strip()))
    return out


def branch_target(ins):
    _, _, op, args = ins
    if op.split(".")[0] != "BRA":
        return None
    m = re.search(r"0x([0-9a-f]+)", args)
    return int(m.group(1), 16) if m else None


def budget(code):
    """The main loop's paths: {(dropout?): (hmma, shortest, longest)} and the loop's extent."""
    addr_index = {ins[0]: i for i, ins in enumerate(code)}
    hmma_at = [1 if ins[2].startswith("HMMA") else 0 for ins in code]
    prefix = [0]
    for h in hmma_at:
        prefix.append(prefix[-1] + h)

    def hmma_in(i, j):  # instructions i..j inclusive
        return prefix[j + 1] - prefix[i]

    backs = []
    for i, ins in enumerate(code):
        t = branch_target(ins)
        if t is not None and t <= ins[0] and t in addr_index:
            backs.append((addr_index[t], i))
    if not backs:
        return None
    head, tail = max(backs, key=lambda b: (hmma_in(*b), b[1] - b[0]))
    if hmma_in(head, tail) == 0:
        return None
    # Nested loops without HMMA (the staging copies): their instructions count 0.
    free = [False] * len(code)
    for a, b in backs:
        if head <= a and b <= tail and (a, b) != (head, tail) and hmma_in(a, b) == 0:
            for i in range(a, b + 1):
                free[i] = True
    # Forward paths from head to the back edge at tail. State per instruction: {(hmma, philox): (min, max)}.
    states = [dict() for _ in range(tail + 1)]
    states[head][(0, False)] = (0, 0)
    result = {}
    for i in range(head, tail + 1):
        if not states[i]:
            continue
        pred, op, args = code[i][1], code[i][2], code[i][3]
        cost = 0 if free[i] else 1
        here = {}
        for (h, ph), (lo, hi) in states[i].items():
            key = (h + hmma_at[i], ph or bool(PHILOX.search(args)))
            here[key] = (lo + cost, hi + cost)
        if i == tail:
            for key, v in here.items():
                result[key] = v
            break
        succ = []
        t = branch_target(code[i])
        base = op.split(".")[0]
        if t is not None:
            j = addr_index.get(t)
            if j is not None and i < j <= tail:
                succ.append(j)
            if pred and pred not in ("@PT",):
                succ.append(i + 1)
        elif base in ("EXIT", "RET", "BRX", "JMX") and not pred:
            pass
        else:
            succ.append(i + 1)
        for j in succ:
            for key, (lo, hi) in here.items():
                old = states[j].get(key)
                states[j][key] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)
    if not result:
        return None
    most = max(h for h, _ in result)
    paths = {ph: result[(h, ph)] for (h, ph) in result if h == most}
    return dict(hmma=most, paths=paths, extent=(code[head][0], code[tail][0]), static=tail - head + 1)


def per_mma(n, hmma):
    return "%.1f" % ((n - hmma) / hmma)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--object", help="a cubin or object file with sm_90 SASS of layers/flash_attention_tc.cu")
    src.add_argument("--sass", help="a saved cuobjdump -sass listing")
    p.add_argument("--check", action="store_true", help="exit 1 unless every kernel was found and counted")
    args = p.parse_args()
    if args.sass:
        with open(args.sass) as f:
            sass = f.read()
        what = args.sass
    else:
        with tempfile.TemporaryDirectory() as tmp:
            obj = args.object or compile_cubin(tmp)
            sass = disassemble(obj)
        what = args.object or "layers/flash_attention_tc.cu (nvcc -cubin -arch=sm_90 here)"
    funcs = functions(sass)
    print("Instructions per HMMA.16816 in the main loop of each tensor-core kernel, sm_90 SASS of %s" % what)
    print("(one iteration = one tile of 64 keys, forward and dQ, or of 64 queries, 32 at HDB 128, dK-dV; other =")
    print(" instructions that are not HMMA, per HMMA; nested copy loops count 0: bench/sass_budget.py says how)")
    print()
    print("| kernel | HDB | HMMA | no dropout: shortest path | longest | dropout: shortest | longest |")
    print("|---|---|---|---|---|---|---|")
    missing = []
    for label, pattern in KERNELS:
        for hdb in HDBS:
            rx = re.compile(pattern.format(hdb=hdb))
            names = [n for n in funcs if rx.match(n)]
            b = budget(funcs[names[0]]) if len(names) == 1 else None
            if b is None:
                missing.append("%s HDB=%d (%s)" % (label, hdb, "no such kernel" if len(names) != 1 else
                                                   "no loop with HMMA"))
                continue
            cells = []
            for ph in (False, True):
                if ph not in b["paths"]:
                    cells += ["-", "-"]
                    continue
                lo, hi = b["paths"][ph]
                cells += ["%d instr., other/HMMA %s" % (lo, per_mma(lo, b["hmma"])),
                          "%d, %s" % (hi, per_mma(hi, b["hmma"]))]
            print("| %s | %d | %d | %s |" % (label, hdb, b["hmma"], " | ".join(cells)))
    if missing:
        fail("not counted: %s (is this the SASS of layers/flash_attention_tc.cu, with sm_90?)" % "; ".join(missing),
             1 if args.check or len(missing) == len(KERNELS) * len(HDBS) else 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
