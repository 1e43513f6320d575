#!/usr/bin/env python3
# fuzz_seeds.py OUT_DIR: small valid inputs for the fuzzers (`make fuzz`): a tiny llm.c checkpoint (fp32 and
# bf16), token shards, a training state, a tiny GPT-2 in safetensors (with and without its config.json), a
# Hugging Face tokenizer (vocab.json + merges.txt) and an eval file, each in OUT_DIR/<target>/.
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

# safetensors + config.json (tools/fuzz_safetensors.cu): the tiny GPT-2 (1 layer, n_embd 2, vocabulary 3) the
# target assumes without a config, in F32 and BF16, with the "transformer." prefix, a tied lm_head and an old
# attention buffer; and the same after its config.json and a NUL byte.
import json
def safetensors(tensors, dtype):
    size = {"F32": 4, "BF16": 2}[dtype]
    header, blob = {"__metadata__": {"format": "pt"}}, b""
    for name, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        data = struct.pack("<%df" % n, *[0.25] * n)
        if dtype == "BF16":
            data = b"".join(data[i + 2:i + 4] for i in range(0, len(data), 4))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob
gpt2 = [("wte.weight", [3, 2]), ("wpe.weight", [2, 2]), ("h.0.ln_1.weight", [2]), ("h.0.ln_1.bias", [2]),
        ("h.0.attn.c_attn.weight", [2, 6]), ("h.0.attn.c_attn.bias", [6]), ("h.0.attn.c_proj.weight", [2, 2]),
        ("h.0.attn.c_proj.bias", [2]), ("h.0.ln_2.weight", [2]), ("h.0.ln_2.bias", [2]), ("h.0.mlp.c_fc.weight", [2, 8]),
        ("h.0.mlp.c_fc.bias", [8]), ("h.0.mlp.c_proj.weight", [8, 2]), ("h.0.mlp.c_proj.bias", [2]),
        ("ln_f.weight", [2]), ("ln_f.bias", [2])]
config = json.dumps({"n_layer": 1, "n_head": 1, "n_embd": 2, "n_positions": 2, "vocab_size": 3, "model_type": "gpt2",
                     "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "n_inner": None}).encode()
put("safetensors", "f32.safetensors", safetensors(gpt2, "F32"))
put("safetensors", "bf16_prefixed.safetensors",
    safetensors([("transformer." + n, s) for n, s in gpt2] + [("lm_head.weight", [3, 2]), ("h.0.attn.bias", [1, 1, 2, 2])], "BF16"))
put("safetensors", "with_config", config + b"\0" + safetensors(gpt2, "F32"))

# vocab.json NUL merges.txt (tools/fuzz_hf_tokenizer.cu): the 256 bytes in GPT-2's alphabet, two merges, <|endoftext|>.
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cp, k = {}, 256
for b in range(256):
    if b in printable:
        cp[b] = b
    else:
        cp[b], k = k, k + 1
char = lambda bs: "".join(chr(cp[b]) for b in bs)
vocab = {char([b]): b for b in range(256)}
vocab.update({char(b" t"): 256, char(b" th"): 257, "<|endoftext|>": 258})
merges = "#version: 0.2\n%s %s\n%s %s\n" % (char(b" "), char(b"t"), char(b" t"), char(b"h"))
put("hf_tokenizer", "tiny", json.dumps(vocab, ensure_ascii=False).encode() + b"\0" + merges.encode())

# llm.c's eval file (tools/fuzz_eval_file.cu): two examples of a 2-token context and 4 one-token completions.
def example(i):
    body = [i, 1, 4, 2, 5, 6] + [1, 7 + i] * 4
    return [65535, 2 * (2 + len(body))] + body
ex = example(0) + example(1)
put("eval_file", "two.bin", struct.pack("<256i", 20240522, 1, 2, 2 * len(ex), *[0] * 252) + struct.pack("<%dH" % len(ex), *ex))
