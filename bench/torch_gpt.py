#!/usr/bin/env python3
"""The CPU peer of make bench: the same GPT-2 as mini-megatron, in PyTorch's eager mode, trained from the same
llm.c checkpoint on the same llm.c token shard (batches in file order), so that seconds per step compare like
with like. Prints one line per step: step, loss, milliseconds.

    python3 bench/torch_gpt.py CHECKPOINT SHARD --batch 8 --seq 128 --steps 10 --threads 2 --lr 1e-4

Written for this comparison only: plain modules, no fused kernels, no dropout; AdamW (betas 0.9/0.999,
eps 1e-8, no weight decay) without gradient clipping, as the trainer runs with --grad-clip 0.
--dtype float64 trains the same model from the same fp32 weights in double precision: the reference that
bench/loss_deviation.sh measures mini-megatron's fp32 losses and PyTorch's own fp32 losses against. The loss
is printed with 9 significant digits (all of an fp32's, and enough to see a deviation of 1e-7)."""
import argparse
import math
import struct
import time

import torch
import torch.nn.functional as F


def read_checkpoint(path, dtype=torch.float32):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240326 and header[1] == 3, f"{path}: not an llm.c fp32 checkpoint (version 3)"
        maxT, V, L, NH, C, Vp = header[2:8]
        sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                 L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
        flat = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    assert flat.numel() == sum(sizes), f"{path}: {flat.numel()} parameters, expected {sum(sizes)}"
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    names = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
             "fcprojw", "fcprojb", "lnfw", "lnfb"]
    params, off = {}, 0
    for name, n, shape in zip(names, sizes, shapes):
        params[name] = torch.nn.Parameter(flat[off:off + n].clone().view(shape).to(dtype))
        off += n
    return dict(V=V, L=L, NH=NH, C=C), params


def read_tokens(path):
    """An llm.c token shard's tokens, as int64."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520, f"{path}: not an llm.c token shard"
        return torch.frombuffer(bytearray(f.read()), dtype=torch.int16).to(torch.int64) & 0xFFFF


def batch(tokens, step, B, T):
    """Inputs and targets [B, T] of `step` (from 0) of a --no-shuffle run: llm.c's batch k, the tokens
    [k·B·T, k·B·T + B·T + 1), k = step modulo the number of whole batches."""
    BT = B * T
    start = (step % ((tokens.numel() - 1) // BT)) * BT
    chunk = tokens[start:start + BT + 1]
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def forward(cfg, p, idx, targets):
    B, T = idx.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    hd = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        q, k, v = F.linear(h, p["qkvw"][l], p["qkvb"][l]).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = (x @ p["wte"].t())[..., :cfg["V"]]  # the padded vocabulary rows are never targets
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("shard")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, params = read_checkpoint(a.checkpoint, getattr(torch, a.dtype))
    tokens = read_tokens(a.shard)
    opt = torch.optim.AdamW(params.values(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    for step in range(a.steps):
        idx, tgt = batch(tokens, step, a.batch, a.seq)
        t0 = time.perf_counter()
        loss = forward(cfg, params, idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step + 1} loss {loss.item():.9g} ms {(time.perf_counter() - t0) * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
