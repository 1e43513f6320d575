#!/usr/bin/env python3
"""Every op's fp32 error against float64, mini-megatron's next to PyTorch's (issue 22).

    build/op_accuracy --out DIR && python3 bench/op_accuracy.py DIR

Reads the folder bench/op_accuracy.cu wrote (each op's fp32 inputs and mini-megatron's outputs), computes each
op again with PyTorch on the same inputs, once in float64 (the reference) and once in float32 (PyTorch's own
fp32 op), and prints a markdown table of both errors against the reference.

The error of an output x against its reference r (n elements) is normalised by the RMS of the reference:
    max = max_i |x_i − r_i| / rms(r),   rms = rms(x − r) / rms(r),   rms(r) = sqrt(Σ r_i² / n).
Why not |x − r| / |r| per element: outputs cross zero (a gradient, a centred activation) and a few elements
near zero would decide the number. Normalised by the RMS, the error is in units of the output's typical
size, and 6e-8 (half an fp32 ulp at 1) is the floor of a correctly rounded result.

Adding an op: its function in op_accuracy.cu and one here, under the same name in OPS: it takes the inputs
(a dict of tensors, in the dtype to compute in) and the op's params, and returns its outputs by the names the
C++ side wrote."""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def embedding(a, p):
    S, B, C, Vp = int(p["S"]), int(p["B"]), int(p["C"]), int(p["Vp"])
    wte, wpe = a["wte"].requires_grad_(), a["wpe"].requires_grad_()
    tok = a["tokens"].long()  # rows sequence-major: row s·B + b
    out = F.embedding(tok, wte.view(Vp, C)) + wpe.view(S, C).repeat_interleave(B, dim=0)
    out.backward(a["dout"].view(S * B, C))
    return {"out": out, "dwte": wte.grad, "dwpe": wpe.grad}


def layernorm(a, p):
    N, C = int(p["N"]), int(p["C"])
    x, w, b = (a[k].requires_grad_() for k in ("in", "weight", "bias"))
    out = F.layer_norm(x.view(N, C), (C,), w, b, 1e-5)
    out.backward(a["dout"].view(N, C))
    return {"out": out, "din": x.grad, "dweight": w.grad, "dbias": b.grad}


def linear(a, p):
    N, IC, OC = int(p["N"]), int(p["IC"]), int(p["OC"])
    x, w, b = (a[k].requires_grad_() for k in ("in", "weight", "bias"))
    out = F.linear(x.view(N, IC), w.view(OC, IC), b)
    out.backward(a["dout"].view(N, OC))
    return {"out": out, "din": x.grad, "dweight": w.grad, "dbias": b.grad}


def attention(a, p):
    S, B, NH, HD = (int(p[k]) for k in ("S", "B", "NH", "HD"))
    qkv = a["qkv"].requires_grad_()
    q, k, v = qkv.view(S, B, 3, NH, HD).permute(2, 1, 3, 0, 4)  # each [B, NH, S, HD]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(HD)
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    out = (att @ v).permute(2, 0, 1, 3).reshape(S * B, NH * HD)
    out.backward(a["dout"].view(S * B, NH * HD))
    return {"out": out, "dqkv": qkv.grad}


def gelu(a, p):
    x = a["in"].requires_grad_()
    out = F.gelu(x, approximate="tanh")
    out.backward(a["dout"])
    return {"out": out, "din": x.grad}


def bias_dropout_residual(a, p):
    N, C = int(p["N"]), int(p["C"])
    x = a["x"].requires_grad_()
    out = x.view(N, C) + a["bias"] + a["resid"].view(N, C)  # dropout at p = 0
    out.backward(a["dout"].view(N, C))
    return {"out": out, "dx": x.grad}


def cross_entropy(a, p):
    N, V, Vp = int(p["N"]), int(p["V"]), int(p["Vp"])
    z = a["logits"].requires_grad_()
    losses = F.cross_entropy(z.view(N, Vp)[:, :V], a["targets"].long(), reduction="none")
    losses.mean().backward()
    return {"losses": losses, "dlogits": z.grad}


def adamw(a, p):
    param = a["param"].clone()
    opt = torch.optim.AdamW([param], lr=p["lr"], betas=(p["beta1"], p["beta2"]), eps=p["eps"],
                            weight_decay=p["weight_decay"], foreach=False)
    param.grad = a["grad"]
    # The moments of step t − 1, so that this step is step t (its bias corrections).
    opt.state[param] = {"step": torch.tensor(p["t"] - 1.0), "exp_avg": a["m"].clone(), "exp_avg_sq": a["v"].clone()}
    opt.step()
    st = opt.state[param]
    return {"param": param.detach(), "m": st["exp_avg"], "v": st["exp_avg_sq"]}


OPS = {"embedding": embedding, "layernorm": layernorm, "linear": linear, "attention": attention, "flash_attention": attention, "gelu": gelu,
       "bias_dropout_residual": bias_dropout_residual, "cross_entropy": cross_entropy, "adamw": adamw,
       "adamw_t2": adamw}


def read_folder(d):
    ops, device = {}, "?"
    for line in open(os.path.join(d, "manifest.txt")):
        f = line.split()
        if f[0] == "device":
            device = f[1]
            continue
        op = ops.setdefault(f[0], {"in": {}, "out": {}, "param": {}})
        if f[1] == "param":
            op["param"][f[2]] = float(f[3])
        else:
            dtype = {"f32": np.float32, "i32": np.int32}[f[3]]
            arr = np.fromfile(os.path.join(d, f"{f[0]}.{f[1]}.{f[2]}.{f[3]}"), dtype=dtype)
            assert arr.size == int(f[4]), f"{f[0]}.{f[2]}: {arr.size} values, manifest says {f[4]}"
            op[f[1]][f[2]] = torch.from_numpy(arr)
    return device, ops


def run(fn, inputs, params, dtype):
    a = {k: (v.to(dtype) if v.is_floating_point() else v).clone() for k, v in inputs.items()}
    return {k: v.detach().reshape(-1).double() for k, v in fn(a, params).items()}


def errors(x, ref):
    scale = ref.pow(2).mean().sqrt().item()
    e = (x - ref).abs()
    return e.max().item() / scale, e.pow(2).mean().sqrt().item() / scale


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "op_accuracy"
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    device, ops = read_folder(d)
    print(f"Error against float64 on the same fp32 inputs (mini-megatron on {device}, PyTorch {torch.__version__} "
          f"fp32 on the CPU). Per output x with float64 reference r: max = max|x − r| / rms(r), "
          f"rms = rms(x − r) / rms(r).\n")
    print("| op | output | mini-megatron max | PyTorch max | mini-megatron rms | PyTorch rms | rms ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, op in ops.items():
        ref = run(OPS[name], op["in"], op["param"], torch.float64)
        theirs = run(OPS[name], op["in"], op["param"], torch.float32)
        ours = {k: v.double() for k, v in op["out"].items()}
        if name.startswith("adamw"):  # the step itself: the parameter moves by ~lr, a tiny fraction of its size
            p0 = op["in"]["param"].double()
            for run_ in (ref, theirs, ours):
                run_["Δparam"] = run_["param"] - p0
        for out in ref:
            om, orms = errors(ours[out], ref[out])
            tm, trms = errors(theirs[out], ref[out])
            ratio = f"{orms / trms:.2f}" if trms > 0 else ("both exact" if orms == 0 else "inf")
            print(f"| {name} | {out} | {om:.2e} | {tm:.2e} | {orms:.2e} | {trms:.2e} | {ratio} |")
        if name.startswith("adamw"):
            # An error every element shares (a rounded bias correction, lr or β) hides in the RMS, yet moves
            # the whole update along itself: its common factor c, (x − r) = c·r + the rest, for both (issue 41).
            r = ref["Δparam"]
            c = [((x["Δparam"] - r) @ r / (r @ r)).item() for x in (ours, theirs)]
            print(f"| {name} | Δparam: common factor (x − r)·r / r·r | {c[0]:+.2e} | {c[1]:+.2e} | | | |")


if __name__ == "__main__":
    main()
