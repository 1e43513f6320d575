#!/usr/bin/env python3
# fuzz_seeds.py OUT_DIR: small valid inputs for the fuzzers (`make fuzz`): a tiny llm.c checkpoint (fp32 and
# bf16), token shards, and a training state, each in OUT_DIR/<target>/.
import os, struct, sys

out = sys.argv[1]
def put(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    open(os.path.join(out, target, name), "wb").write(data)

maxT, V, L, NH, C, Vp = 2, 3, 1, 1, 2, 4
n = (Vp + maxT) * C + L * 12 * C * C + L * 13 * C + 2 * C
hdr = lambda version: struct.pack("<256i", 20240326, version, maxT, V, L, NH, C, Vp, *[0] * 248)
put("checkpoint", "fp32.bin", hdr(3) + struct.pack("<%df" % n, *[0.5] * n))
put("checkpoint", "bf16.bin", hdr(5) + b"\x00\x3f" * n)
for k in (0, 1, 5):
    put("shard", "shard%d.bin" % k, struct.pack("<256i", 20240520, 1, k, *[0] * 253) + struct.pack("<%dH" % k, *range(k)))

def fnv(b, h=0xcbf29ce484222325):
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h
def signed(u): return u - (1 << 64) if u >= 1 << 63 else u
payload = struct.pack("<%df" % n, *[0.01] * n) + struct.pack("<%df" % n, *[0.001] * n)
h = [0] * 128
h[0:3] = [0x4554415453544d4d, 1, 1024]
h[3:10] = [maxT, V, L, NH, C, Vp, n]
h[10:25] = [1, 1, 0, 0, 0, 5, 0, 2, 1337, 1, 4, 2, 10, 0, 1]
for i, d in enumerate([3e-4, 0.1, 0.9, 0.95, 1e-8, 0.0, 1.0, 0.0]):
    h[25 + i] = struct.unpack("<q", struct.pack("<d", d))[0]
h[33:38] = [100, 12345, 678, signed(fnv(payload)), 0]
put("train_state", "state.bin", struct.pack("<128q", *h) + payload)
put("train_state", "latest", b"step_00000005\n")
