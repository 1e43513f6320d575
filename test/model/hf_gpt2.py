#!/usr/bin/python3
"""The transformers side of test/model/test_hf_gpt2.sh. Run with /usr/bin/python3 (Debian's python3-torch
lives there; `make deps` installs transformers and safetensors for it). Exit 77 when they are missing.

  hf_gpt2.py make DIR OUT [P]    a random tiny GPT-2 made by transformers (P positions, default 64), saved to
                                 DIR (save_pretrained), and OUT/train.bin, OUT/val.bin: llm.c token shards of
                                 random ids below its vocabulary
  hf_gpt2.py loss DIR SHARD B T  load DIR with GPT2LMHeadModel.from_pretrained, failing on any warning about
                                 missing or unexpected keys; print the loss of the shard's first batch of B
                                 sequences of T tokens (llm.c's layout: row b is tokens b*T .. b*T+T, its
                                 targets one further) as transformers computes it
  hf_gpt2.py same A B            every tensor of A/model.safetensors and B/model.safetensors has the same name,
                                 dtype, shape and bytes
  hf_gpt2.py generate DIR "IDS" N  GPT2LMHeadModel.generate's greedy continuation of the prompt IDS
                                 (space-separated), N new tokens, printed as ids on one line
"""
import logging
import os
import struct
import sys

try:
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:
    print(f"skipped: {e} (make deps installs transformers and safetensors for /usr/bin/python3)")
    sys.exit(77)

VOCAB = 101  # odd, so the trainer pads it (to 128) and the writer must drop the padding rows


def write_shard(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253))
        f.write(struct.pack("<%dH" % len(ids), *ids))


def make(d, out, positions=64):
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=positions, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    # GPT-2's own init (std 0.02, unit layer norms, zero biases) gives near-uniform logits, whose loss is
    # ln(V) whatever a loader does to the weights. Larger random weights make every layout mistake show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    model.save_pretrained(d)
    g = torch.Generator().manual_seed(99)
    for name, n in (("train.bin", 4000), ("val.bin", 1000)):
        write_shard(os.path.join(out, name), torch.randint(0, VOCAB, (n,), generator=g).tolist())
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: wrote {d} and {out}/train.bin, val.bin")


def load_strictly(d):
    """from_pretrained with its log captured: a missing, unexpected or newly initialized weight fails."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    transformers.logging.set_verbosity_warning()
    handler = Keep()
    transformers.logging.get_logger().addHandler(handler)  # the "transformers" logger, parent of every module's
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    transformers.logging.get_logger().removeHandler(handler)
    bad = [r for r in records if any(w in r for w in ("missing", "unexpected", "not used", "newly initialized", "not initialized"))]
    if bad or any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")):
        print("FAIL: transformers warned while loading", d, bad, info)
        sys.exit(1)
    return model.eval()


def loss(d, shard, B, T):
    model = load_strictly(d)
    with open(shard, "rb") as f:
        data = f.read()
    n = struct.unpack("<3i", data[:12])[2]
    ids = torch.tensor(struct.unpack("<%dH" % n, data[1024:1024 + 2 * n]), dtype=torch.long)
    x = torch.stack([ids[b * T:b * T + T] for b in range(B)])
    y = torch.stack([ids[b * T + 1:b * T + T + 1] for b in range(B)])
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
        # the mean over every token, as the trainer's validation loss is
        l = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    print("%.9f" % l.item())


def same(a, b):
    fa = safe_open(os.path.join(a, "model.safetensors"), "pt")
    fb = safe_open(os.path.join(b, "model.safetensors"), "pt")
    ka, kb = sorted(fa.keys()), sorted(fb.keys())
    if ka != kb:
        print("FAIL: the tensor names differ:", sorted(set(ka) ^ set(kb)))
        sys.exit(1)
    for k in ka:
        ta, tb = fa.get_tensor(k), fb.get_tensor(k)
        if ta.dtype != tb.dtype or ta.shape != tb.shape or ta.float().numpy().tobytes() != tb.float().numpy().tobytes():
            print(f"FAIL: tensor {k} differs: {ta.dtype} {tuple(ta.shape)} vs {tb.dtype} {tuple(tb.shape)}")
            sys.exit(1)
    print(f"{len(ka)} tensors byte-identical ({ta.dtype}) between {a} and {b}")


def generate(d, ids, n):
    model = load_strictly(d)
    model.eval()
    prompt = torch.tensor([[int(x) for x in ids.split()]])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, num_beams=1, pad_token_id=0)
    print(" ".join(str(int(t)) for t in out[0, prompt.shape[1]:]))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 64)
    elif cmd == "loss":
        loss(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "same":
        same(sys.argv[2], sys.argv[3])
    elif cmd == "generate":
        generate(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {cmd}")
