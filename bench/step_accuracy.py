#!/usr/bin/env python3
"""One training step's gradient error against float64, tensor by tensor: mini-megatron's next to PyTorch fp32's
(issue 41).

    build/step_accuracy --model M --train SHARD --step K --out DIR
    python3 bench/step_accuracy.py M SHARD K DIR [STATE]

(bench/loss_deviation.sh runs both, with AT_STEPS.) Reads the folder bench/step_accuracy.cu wrote
(mini-megatron's fp32 loss and gradient of step K from the weights M), computes the same step with
bench/torch_gpt.py's model from the same fp32 weights in float64 (the reference) and in fp32, and prints for
every parameter tensor of every layer (the QKV projection as its three parts) the error of both against the
reference, and their ratio:
  - rms(x − r) / rms(r), the gradient's error in units of its own size;
  - with STATE (the state.bin beside M: AdamW's moments after step K − 1), rms((x − r) / w) with
    w = sqrt(v̂) + eps of each element: the error in units of each element's own gradient scale, which is what
    AdamW turns into the update's error (δΔ ≈ lr (1 − β1) / (1 − β1^t) · δg / w). A gradient that is small
    against the tensor's RMS but not against its own history weighs here as much as a large one.
The key bias (the middle third of the QKV bias) has a gradient of 0 in exact arithmetic (it adds one constant
to all of a query's scores), so both fp32 gradients there are rounding noise; it is shown, and left out of the
total. A tensor whose ratio stands above the others' names the op that makes its gradient."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
         "fcprojw", "fcprojb", "lnfw", "lnfb"]
WHOLE = ("wte", "wpe", "lnfw", "lnfb")  # the tensors that are not per layer


def unflatten(flat, params):
    out, off = {}, 0
    for name in NAMES:
        n = params[name].numel()
        out[name] = flat[off:off + n].view(params[name].shape)
        off += n
    return out


def gradient(model, shard, k, dtype, B, S):
    cfg, params = torch_gpt.read_checkpoint(model, dtype)
    idx, tgt = torch_gpt.batch(torch_gpt.read_tokens(shard), k - 1, B, S)
    loss = torch_gpt.forward(cfg, params, idx, tgt)
    loss.backward()
    return cfg, loss.item(), {n: params[n].grad.detach().double() for n in NAMES}


def blocks(n, L):
    """(label, layer, part) of tensor n: per layer, the QKV tensors as their q, k, v thirds."""
    for l in ([None] if n in WHOLE else range(L)):
        for part in ("q", "k", "v") if n.startswith("qkv") else (None,):
            yield l, part


def pick(x, l, part):
    x = x if l is None else x[l]
    if part is None:
        return x
    j = "qkv".index(part)
    return x[j * x.shape[0] // 3:(j + 1) * x.shape[0] // 3]


def table(title, ours, theirs, ref, L, weight=None):
    what = "rms((x − float64) / w), w = sqrt(v̂) + eps" if weight else "rms(x − float64) / rms(float64)"
    print(f"\n{title}: {what}\n")
    scale = "rms(float64 / w)" if weight else "rms(float64)"
    print(f"| tensor | layer | {scale} | mini-megatron | PyTorch fp32 | ratio |")
    print("|---|---|---|---|---|---|")
    tot = [0.0, 0.0, 0.0]
    for n in NAMES:
        for l, part in blocks(n, L):
            r, o, t = (pick(x[n], l, part) for x in (ref, ours, theirs))
            if weight is not None:
                w = pick(weight[n], l, part)
                r, o, t = r / w, o / w, t / w
            s = r.pow(2).mean().sqrt().item()
            eo, et = ((x - r).pow(2).mean().sqrt().item() / s if s else 0.0 for x in (o, t))
            if not (part == "k" and n == "qkvb"):  # the key bias's noise would decide the total: left out
                tot[0] += (o - r).pow(2).sum().item()
                tot[1] += (t - r).pow(2).sum().item()
                tot[2] += r.pow(2).sum().item()
            label = n + (f".{part}" if part else "")
            print(f"| {label} | {'' if l is None else l} | {s:.3e} | {eo:.3e} | {et:.3e} | "
                  f"{f'{eo / et:.2f}' if et else '-'} |")
    norm = tot[2] ** 0.5
    print(f"| all but the key bias | | {norm:.3e} (norm) | {tot[0] ** 0.5 / norm:.3e} | {tot[1] ** 0.5 / norm:.3e} | "
          f"{(tot[0] / tot[1]) ** 0.5 if tot[1] else 0:.2f} |")


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    model, shard, k, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    state = sys.argv[5] if len(sys.argv) > 5 else None
    B, S = 8, 128
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    cfg, l64, g64 = gradient(model, shard, k, torch.float64, B, S)
    _, l32, g32 = gradient(model, shard, k, torch.float32, B, S)
    _, p0 = torch_gpt.read_checkpoint(model, torch.float64)
    gmm = unflatten(torch.from_numpy(np.fromfile(os.path.join(d, "grads.f32"), dtype=np.float32)).double(), p0)
    lmm = float(open(os.path.join(d, "loss.txt")).read())
    print(f"step {k}: loss float64 {l64:.9g}; |loss − float64|: mini-megatron {abs(lmm - l64):.2e}, "
          f"PyTorch fp32 {abs(l32 - l64):.2e}")
    table(f"step {k}, gradient", gmm, g32, g64, cfg["L"])
    # The part of each error that is one factor common to the whole gradient (e = c·g + rest): a loss spike's
    # gradient comes from a few rows, and their rounding then scales all of it alike.
    ref = torch.cat([g64[n].flatten() for n in NAMES])
    parts = []
    for g in (gmm, g32):
        e = torch.cat([g[n].flatten() for n in NAMES]) - ref
        c = (e @ ref / (ref @ ref)).item()
        parts.append(f"{c:+.2e} (rest {(e - c * ref).norm().item() / ref.norm().item():.2e})")
    print(f"\ncommon factor of the whole gradient's error (key bias included): mini-megatron {parts[0]}, "
          f"PyTorch fp32 {parts[1]}")
    if state is not None:
        total = sum(p.numel() for p in p0.values())
        with open(state, "rb") as f:
            f.seek(1024)  # model/train_state.h: the header, then m and v of the full model in llm.c order
            v = np.fromfile(f, dtype=np.float32, count=2 * total)[total:]
        v = unflatten(torch.from_numpy(v.copy()).double(), p0)
        w = {n: (v[n] / (1 - 0.999 ** (k - 1))).sqrt() + 1e-8 for n in NAMES}
        table(f"step {k}, gradient in AdamW's units", gmm, g32, g64, cfg["L"], weight=w)


if __name__ == "__main__":
    main()
