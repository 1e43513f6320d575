// flash_attention.h — core attention without the s×s tensors: FlashAttention-2's tiled form (Dao 2023),
// with the unfused path's own dropout masks.
//
// The unfused path (attention.h) materialises softmax(QKᵀ/√d), its dropout mask and the dropped-out
// probabilities: the 5as²b bytes of Table 2 that selective recomputation drops and rebuilds. Flash attention
// never stores them, not even in the forward pass. It walks the keys tile by tile with a running maximum and
// sum per query (the online softmax), so one query tile needs only its own row statistics. For the backward
// pass it keeps one fp32 log-sum-exp per query and head (lse = m + log Σ_k e^{x_k − m}); the backward pass
// rebuilds each tile's probabilities from Q, K and lse, P = e^{x − lse}. That is selective recomputation
// done inside one kernel: the same FLOPs the paper's selective policy pays (§5), and 4·asb/t bytes kept
// instead of 5as²b/t (recompute/formulas.h, term "lse").
//
// Dropout. The keep bit of probability (b, n, q, k) is dropout_keep(seed, stream,
// attn_dropout_index(b_glob, h_glob, NH_total, S, q, k)) (attention.h, philox.h): the index of that element in
// the single-rank s×s tensor, under any parallel layout. Nothing is stored: the forward and the backward pass
// both draw the bits again, and they are the bits of the unfused path's attn_mask.
//
// Layouts and shapes as attention.h: qkv [S·B, 3·NH·HD] (row s·B + b; Q | K | V, head n at column n·HD of its
// block), out / dout [S·B, NH·HD], lse f32 [B, NH, S]. All arithmetic in fp32 (bf16 is storage only).
#pragma once
#include "attention.h"

// out = dropout(softmax(causal(Q Kᵀ / √HD))) · V and lse (f32 [B, NH, S]), p the dropout probability.
void flash_attention_forward(Ctx& ctx, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, float p,
                             uint64_t seed, uint32_t stream);

// dqkv (written, not accumulated) from dout, the forward's out and lse, and qkv. FlashAttention-2's
// backward: D_q = Σ_c dO[q, c] · O[q, c] stands in for the row sum Σ_k dP_k · P_k of the softmax Jacobian
// (the two are equal, dropout included: O = Σ_k P_k · z_k/(1 − p) · V_k).
void flash_attention_backward(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                              const AttnShape& sh, float p, uint64_t seed, uint32_t stream);

// The CUDA kernels' compile-time bound on the head dimension for HD (32, 64 or 128: the instantiation that
// runs), or 0 when no kernel takes HD (HD < 1 or HD > 128: the model must use --attention unfused on a GPU).
// Inline, so that a caller checks a model (and test_kernel_coverage lists the instantiations) with no device.
inline int flash_attention_hd_bound(int HD) {
    return HD < 1 ? 0 : HD <= 32 ? 32 : HD <= 64 ? 64 : HD <= 128 ? 128 : 0;
}

// Bytes of ctx_scratch (runtime.h) flash_attention_backward takes on the GPU for a rank's S, B and NH (the
// fp32 D = rowsum(dO ⊙ O), [B, NH, S]): the model reserves them before its first step, so the scratch never
// grows inside a step.
size_t flash_attention_scratch_bytes(int S, int B, int NH);
