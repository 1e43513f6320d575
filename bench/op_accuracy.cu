// op_accuracy.cu — every op's forward and backward in fp32 on random inputs of the benchmark GPT's shapes,
// written to a folder for bench/op_accuracy.py, which recomputes each op in float64 (the reference) and with
// PyTorch's fp32 ops on the same inputs, and prints each output's error next to PyTorch's (issue 22).
//
//     op_accuracy --out DIR [--device cpu|cuda] [--seed N]
//
// Why a folder of raw arrays and a second program: the float64 reference and PyTorch's fp32 op are one line
// of PyTorch each, on the very bytes this program fed to mini-megatron's op; writing them again in C++ would
// be a second implementation to trust. The error is measured against float64 computed from the same fp32
// inputs, so it is the op's own rounding error, not the inputs'.
// (The same math as plain C++ loops, which the unit tests hold the CPU path and the kernels to, is in
// layers/reference/; this program is about the distance from float64 next to PyTorch's, at the model's shapes.)
//
// Folder: manifest.txt, one line per array: `OP in|out NAME DTYPE COUNT` (a file OP.in|out.NAME.DTYPE of COUNT
// raw little-endian values; an output may have an input's name, as AdamW's param), and `OP param KEY VALUE` for the scalars of the op (shapes, constants).
// Adding an op: one function below that makes its inputs (Case::input), runs the op and records its outputs
// (Case::output), one row in kOps, and its PyTorch version in op_accuracy.py (same name).
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layers/adamw.h"
#include "layers/attention.h"
#include "layers/flash_attention.h"
#include "layers/cross_entropy.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/linear.h"

// The shapes of the loss-deviation model (bench/loss_deviation.sh): hidden 256, 8 heads, 128 tokens, the
// vocabulary 1000 padded to 1024; a batch of 4 sequences (512 rows) keeps the float64 side quick.
constexpr int kS = 128, kB = 4, kN = kS * kB, kC = 256, kNH = 8, kV = 1000, kVp = 1024;

// One op's inputs and outputs: each array becomes a file of the folder and a line of the manifest.
struct Case {
    Ctx& ctx;
    std::mt19937& rng;
    FILE* manifest;
    std::string dir, op;

    void write(const char* role, const char* name, const char* dtype, const void* data, size_t count, size_t size) {
        const std::string path = dir + "/" + op + "." + role + "." + name + "." + dtype;
        FILE* f = fopen(path.c_str(), "wb");
        if (!f || fwrite(data, size, count, f) != count || fclose(f) != 0) mm_fatal("op_accuracy: cannot write %s", path.c_str());
        fprintf(manifest, "%s %s %s %s %zu\n", op.c_str(), role, name, dtype, count);
    }
    void param(const char* key, double value) { fprintf(manifest, "%s param %s %.17g\n", op.c_str(), key, value); }

    // A new f32 tensor on the op's device holding `values`, recorded as an input.
    Tensor input(const char* name, const std::vector<float>& values) {
        write("in", name, "f32", values.data(), values.size(), 4);
        Tensor t = tensor_alloc(ctx.device, DType::F32, (int64_t)values.size());
        tensor_from_host_f32(t, values.data());
        return t;
    }
    Tensor input_i32(const char* name, const std::vector<int32_t>& values) {
        write("in", name, "i32", values.data(), values.size(), 4);
        Tensor t = tensor_alloc(ctx.device, DType::I32, (int64_t)values.size());
        if (ctx.device == Device::CPU) memcpy(t.data, values.data(), values.size() * 4);
        else CUDA_CHECK(cudaMemcpy(t.data, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
        return t;
    }
    // Normal(mean, std) values.
    std::vector<float> normal(int64_t n, float mean, float std) {
        std::normal_distribution<float> d(mean, std);
        std::vector<float> v((size_t)n);
        for (float& x : v) x = d(rng);
        return v;
    }
    Tensor zeros(int64_t n) { return tensor_zeros(ctx.device, DType::F32, n); }
    void output(const char* name, Tensor t) {
        const std::vector<float> v = tensor_to_host_f32(t);
        write("out", name, "f32", v.data(), v.size(), 4);
    }
    void free(std::initializer_list<Tensor*> ts) {
        for (Tensor* t : ts) tensor_free(*t);
    }
};

// ---- the ops, in the order a layer runs them ------------------------------------------------------------

// Token + position embedding; backward: the token table's gradient (rows summed per token) and the
// positions' (summed over the batch).
static void op_embedding(Case& k) {
    std::vector<int32_t> tok(kN);
    for (int32_t& t : tok) t = std::uniform_int_distribution<int>(0, kV - 1)(k.rng);
    k.param("S", kS), k.param("B", kB), k.param("C", kC), k.param("Vp", kVp);
    Tensor tokens = k.input_i32("tokens", tok), wte = k.input("wte", k.normal((int64_t)kVp * kC, 0, 0.02f));
    Tensor wpe = k.input("wpe", k.normal((int64_t)kS * kC, 0, 0.01f)), dout = k.input("dout", k.normal((int64_t)kN * kC, 0, 1));
    Tensor out = k.zeros((int64_t)kN * kC), dwte = k.zeros((int64_t)kVp * kC), dwpe = k.zeros((int64_t)kS * kC);
    token_embedding_forward(k.ctx, out, tokens, wte, 0, kVp, kN, kC);
    position_embedding_forward(k.ctx, out, wpe, 0, kS, kB, kC);
    EmbeddingIndex idx;
    embedding_index_build(idx, tok.data(), kN, 0, kVp, k.ctx);
    token_embedding_backward(k.ctx, dwte, dout, idx, kC);
    position_embedding_backward(k.ctx, dwpe, dout, 0, kS, kB, kC);
    k.output("out", out), k.output("dwte", dwte), k.output("dwpe", dwpe);
    embedding_index_free(idx);
    k.free({&tokens, &wte, &wpe, &dout, &out, &dwte, &dwpe});
}

// LayerNorm on a residual-stream-like input (rows with a mean offset, as after a few layers).
static void op_layernorm(Case& k) {
    k.param("N", kN), k.param("C", kC);
    std::vector<float> x = k.normal((int64_t)kN * kC, 0, 1);
    for (int r = 0; r < kN; r++)
        for (int c = 0; c < kC; c++) x[(size_t)r * kC + c] += 0.5f * (float)(r % 7);  // per-row means 0 .. 3
    Tensor in = k.input("in", x), w = k.input("weight", k.normal(kC, 1, 0.1f)), b = k.input("bias", k.normal(kC, 0, 0.1f));
    Tensor dout = k.input("dout", k.normal((int64_t)kN * kC, 0, 1));
    Tensor out = k.zeros((int64_t)kN * kC), mean = k.zeros(kN), rstd = k.zeros(kN);
    Tensor din = k.zeros((int64_t)kN * kC), dw = k.zeros(kC), db = k.zeros(kC);
    layernorm_forward(k.ctx, out, mean, rstd, in, w, b, kN, kC);
    layernorm_backward(k.ctx, din, dw, db, dout, in, w, mean, rstd, kN, kC, GradWrite::Overwrite);
    k.output("out", out), k.output("din", din), k.output("dweight", dw), k.output("dbias", db);
    k.free({&in, &w, &b, &dout, &out, &mean, &rstd, &din, &dw, &db});
}

// Linear (the GEMMs of matmul.cu): the QKV projection's shape, C -> 3C.
static void op_linear(Case& k) {
    const int IC = kC, OC = 3 * kC;
    k.param("N", kN), k.param("IC", IC), k.param("OC", OC);
    Tensor in = k.input("in", k.normal((int64_t)kN * IC, 0, 1)), w = k.input("weight", k.normal((int64_t)OC * IC, 0, 0.02f));
    Tensor b = k.input("bias", k.normal(OC, 0, 0.02f)), dout = k.input("dout", k.normal((int64_t)kN * OC, 0, 1));
    Tensor out = k.zeros((int64_t)kN * OC), din = k.zeros((int64_t)kN * IC), dw = k.zeros((int64_t)OC * IC), db = k.zeros(OC);
    linear_forward(k.ctx, out, in, w, b, kN, IC, OC);
    linear_backward(k.ctx, din, dw, db, dout, in, w, kN, IC, OC, false, GradWrite::Overwrite);
    k.output("out", out), k.output("din", din), k.output("dweight", dw), k.output("dbias", db);
    k.free({&in, &w, &b, &dout, &out, &din, &dw, &db});
}

// Core attention, unfused (attention.cu), no dropout: out from qkv, dqkv from dout.
static void op_attention(Case& k) {
    const AttnShape sh{kS, kB, kNH, kC / kNH, 0, kB, 0, kNH};
    const int64_t ss = (int64_t)kB * kNH * kS * kS;
    k.param("S", kS), k.param("B", kB), k.param("NH", kNH), k.param("HD", kC / kNH);
    Tensor qkv = k.input("qkv", k.normal((int64_t)kN * 3 * kC, 0, 1)), dout = k.input("dout", k.normal((int64_t)kN * kC, 0, 1));
    Tensor probs = k.zeros(ss), probs_drop = k.zeros(ss), scratch = k.zeros(ss);
    Tensor mask = tensor_zeros(k.ctx.device, DType::U8, ss);
    Tensor out = k.zeros((int64_t)kN * kC), dqkv = k.zeros((int64_t)kN * 3 * kC);
    attention_probs_forward(k.ctx, probs, mask, probs_drop, qkv, sh, 0.f, 1, 0);
    attention_context_forward(k.ctx, out, probs_drop, qkv, sh);
    attention_backward(k.ctx, dqkv, dout, qkv, probs, mask, probs_drop, scratch, sh, 0.f);
    k.output("out", out), k.output("dqkv", dqkv);
    k.free({&qkv, &dout, &probs, &probs_drop, &scratch, &mask, &out, &dqkv});
}

// Core attention, flash (flash_attention_cpu.cu), no dropout: the same inputs' shapes, out and dqkv; PyTorch's
// side is the same math as "attention" (the reference does not depend on how the kernel tiles it).
static void op_flash_attention(Case& k) {
    const AttnShape sh{kS, kB, kNH, kC / kNH, 0, kB, 0, kNH};
    k.param("S", kS), k.param("B", kB), k.param("NH", kNH), k.param("HD", kC / kNH);
    Tensor qkv = k.input("qkv", k.normal((int64_t)kN * 3 * kC, 0, 1)), dout = k.input("dout", k.normal((int64_t)kN * kC, 0, 1));
    Tensor out = k.zeros((int64_t)kN * kC), dqkv = k.zeros((int64_t)kN * 3 * kC), lse = k.zeros((int64_t)kB * kNH * kS);
    flash_attention_forward(k.ctx, out, lse, qkv, sh, 0.f, 1, 0);
    flash_attention_backward(k.ctx, dqkv, dout, out, lse, qkv, sh, 0.f, 1, 0);
    k.output("out", out), k.output("dqkv", dqkv);
    k.free({&qkv, &dout, &out, &dqkv, &lse});
}

// GeLU (tanh form) on fc1's output.
static void op_gelu(Case& k) {
    const int64_t n = (int64_t)kN * 4 * kC;
    Tensor in = k.input("in", k.normal(n, 0, 2)), dout = k.input("dout", k.normal(n, 0, 1));
    Tensor out = k.zeros(n), din = k.zeros(n);
    gelu_forward(k.ctx, out, in, n);
    gelu_backward(k.ctx, din, in, dout, n);
    k.output("out", out), k.output("din", din);
    k.free({&in, &dout, &out, &din});
}

// Bias + dropout + residual at p = 0 (the loss-deviation runs have no dropout); backward: dropout's.
static void op_bias_dropout_residual(Case& k) {
    k.param("N", kN), k.param("C", kC);
    Tensor x = k.input("x", k.normal((int64_t)kN * kC, 0, 1)), b = k.input("bias", k.normal(kC, 0, 0.1f));
    Tensor resid = k.input("resid", k.normal((int64_t)kN * kC, 0, 3)), dout = k.input("dout", k.normal((int64_t)kN * kC, 0, 1));
    Tensor out = k.zeros((int64_t)kN * kC), dx = k.zeros((int64_t)kN * kC);
    Tensor mask = tensor_zeros(k.ctx.device, DType::U8, (int64_t)kN * kC);
    bias_dropout_residual_forward(k.ctx, out, mask, x, b, resid, 0.f, 1, 0, kS, kB, kC, DropoutCoords{0, 0, kB});
    dropout_backward(k.ctx, dx, dout, mask, 0.f, (int64_t)kN * kC);
    k.output("out", out), k.output("dx", dx);
    k.free({&x, &b, &resid, &dout, &out, &dx, &mask});
}

// Cross-entropy over the padded vocabulary, mean over the rows (GPT-2's loss): the per-row losses and the
// gradient of the mean.
static void op_cross_entropy(Case& k) {
    std::vector<int32_t> tgt(kN);
    for (int32_t& t : tgt) t = std::uniform_int_distribution<int>(0, kV - 1)(k.rng);
    k.param("N", kN), k.param("V", kV), k.param("Vp", kVp);
    Tensor logits = k.input("logits", k.normal((int64_t)kN * kVp, 0, 2)), targets = k.input_i32("targets", tgt);
    Tensor rowmax = k.zeros(kN), sumexp = k.zeros(kN), zt = k.zeros(kN), losses = k.zeros(kN);
    Tensor dlogits = k.zeros((int64_t)kN * kVp);
    ce_forward_stats(k.ctx, rowmax, sumexp, zt, Tensor(), logits, targets, kN, kVp, 0, kV);
    ce_losses(k.ctx, losses, rowmax, sumexp, zt, kN);
    ce_backward(k.ctx, dlogits, logits, rowmax, sumexp, targets, 1.f / kN, kN, kVp, 0, kV);
    k.output("losses", losses), k.output("dlogits", dlogits);
    k.free({&logits, &targets, &rowmax, &sumexp, &zt, &losses, &dlogits});
}

// One AdamW step (moments of a few steps' gradients), the loss-deviation run's constants, at step t: 10, and 2,
// where the bias correction 1 − β2^t = 0.002 cancels most (issue 41: it was computed in float).
static void op_adamw_at(Case& k, int t) {
    const int64_t n = (int64_t)kC * kC;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.f;
    k.param("lr", lr), k.param("beta1", b1), k.param("beta2", b2), k.param("eps", eps), k.param("weight_decay", wd);
    k.param("t", t);
    std::vector<float> vv = k.normal(n, 0, 1e-3f);
    for (float& x : vv) x = x * x + 1e-8f;  // a second moment: positive
    Tensor p = k.input("param", k.normal(n, 0, 0.02f)), g = k.input("grad", k.normal(n, 0, 1e-3f));
    Tensor m = k.input("m", k.normal(n, 0, 1e-3f)), v = k.input("v", vv);
    adamw_update(k.ctx, p, g, m, v, n, lr, b1, b2, eps, wd, t, 1.f);
    k.output("param", p), k.output("m", m), k.output("v", v);
    k.free({&p, &g, &m, &v});
}
static void op_adamw(Case& k) { op_adamw_at(k, 10); }
static void op_adamw_t2(Case& k) { op_adamw_at(k, 2); }

struct OpEntry {
    const char* name;
    void (*run)(Case&);
};
static const OpEntry kOps[] = {
    {"embedding", op_embedding}, {"layernorm", op_layernorm}, {"linear", op_linear}, {"attention", op_attention},
    {"flash_attention", op_flash_attention},
    {"gelu", op_gelu}, {"bias_dropout_residual", op_bias_dropout_residual}, {"cross_entropy", op_cross_entropy},
    {"adamw", op_adamw}, {"adamw_t2", op_adamw_t2},
};

int main(int argc, char** argv) {
    std::string dir, device = "cpu";
    unsigned seed = 1;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--out" && i + 1 < argc) dir = argv[++i];
        else if (a == "--device" && i + 1 < argc) device = argv[++i];
        else if (a == "--seed" && i + 1 < argc) seed = (unsigned)std::stoul(argv[++i]);
        else mm_fatal("usage: op_accuracy --out DIR [--device cpu|cuda] [--seed N] (got %s)", a.c_str());
    }
    if (dir.empty()) mm_fatal("usage: op_accuracy --out DIR [--device cpu|cuda] [--seed N]");
    if (device != "cpu" && device != "cuda") mm_fatal("op_accuracy: --device cpu|cuda (got %s)", device.c_str());
    Ctx ctx = ctx_create(device == "cpu" ? Device::CPU : Device::CUDA);
    FILE* manifest = fopen((dir + "/manifest.txt").c_str(), "w");
    if (!manifest) mm_fatal("op_accuracy: cannot write %s/manifest.txt (does the folder exist?)", dir.c_str());
    fprintf(manifest, "device %s\n", device.c_str());
    for (const OpEntry& e : kOps) {
        std::mt19937 rng(seed);  // each op's inputs depend on the seed only, not on the ops before it
        Case k{ctx, rng, manifest, dir, e.name};
        e.run(k);
        ctx_sync(ctx);
    }
    fclose(manifest);
    ctx_destroy(ctx);
    printf("op_accuracy: %zu ops written to %s\n", sizeof(kOps) / sizeof(kOps[0]), dir.c_str());
    return 0;
}
