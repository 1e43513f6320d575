// attention.h — core attention, unfused on purpose: QKᵀ → scale + causal mask + softmax → dropout → ·V, with
// the s×s tensors materialized, because that is what the paper measures (5as²b per layer) and what
// selective recomputation removes.
//
// Layouts. qkv: [S·B, 3·NH·HD] with rows sequence-major (row = s·B + b); columns are Q | K | V, each NH·HD
// wide, head n at columns n·HD of its block. probs, mask, probs_drop: [B, NH, S, S]. out: [S·B, NH·HD].
// NH is the number of heads on this rank (tensor parallelism splits heads); dropout keys use the global
// head and batch index so that any parallel layout reproduces the single-rank masks.
//
// The plain math this file computes fast: layers/reference/attention.h
#pragma once
#include "runtime.h"

struct AttnShape {
    int S = 0, B = 0, NH = 0, HD = 0;  // local sizes: sequence, batch (this DP rank), heads (this TP rank)
    int64_t b_offset = 0, B_total = 1;    // global batch coordinates
    int64_t head_offset = 0, NH_total = 1;  // global head coordinates
};

// Global dropout index of element (b, n, q, k) of this rank's [B, NH, S, S] block: the position of the same
// element in the single-rank tensor [B_total, NH_total, S, S]. Flash attention (flash_attention.h) draws its
// keep bits at the same indices, so both paths drop the same probabilities.
__host__ __device__ inline uint64_t attn_dropout_index(int64_t b_glob, int64_t h_glob, int64_t NH_total, int64_t S,
                                                       int64_t q, int64_t k) {
    return (((uint64_t)b_glob * (uint64_t)NH_total + (uint64_t)h_glob) * (uint64_t)S + (uint64_t)q) *
               (uint64_t)S + (uint64_t)k;
}

// The part selective recompute reruns: probs = softmax(mask_causal(Q Kᵀ / sqrt(HD))), then dropout:
// mask[i] = keep(seed, stream, ((b_glob·NH_total + h_glob)·S + q)·S + k) for k <= q, 0 for k > q (no random
// number is drawn for masked keys); probs_drop = probs ⊙ mask/(1-p).
// probs, probs_drop: activation dtype; mask: u8. Causal blocks: the queries are cut into blocks of
// attention_causal_block(ctx, S) rows, and row q holds keys up to the end of its block only: keys k <= q the
// values, keys q < k < end exactly 0 in all three, keys from end on never written (nor read by any op here).
int attention_causal_block(const Ctx& ctx, int S);  // rows per causal block on ctx's device (S at most)

// The softmax kernel a CUDA launch picks (forward and backward alike), decided on the host from S and the
// dtype alone: the 8-key packs per lane of the row-in-registers kernels (1, 2, 4 or 8), or 0 for the general
// kernel (S > 1024 in f32, S > 2048 in bf16). test/layers/test_kernel_coverage.cu lists every value against
// the shapes the GPU tests run.
int attention_softmax_slots(int S, DType dtype);

void attention_probs_forward(Ctx& ctx, Tensor probs, Tensor mask, Tensor probs_drop, Tensor qkv,
                             const AttnShape& sh, float p, uint64_t seed, uint32_t stream);

// out = probs_drop · V for every (batch, head).
void attention_context_forward(Ctx& ctx, Tensor out, Tensor probs_drop, Tensor qkv, const AttnShape& sh);

// dqkv (written, not accumulated) from dout [S·B, NH·HD] and the saved or recomputed probs, mask and
// probs_drop. scratch: activation dtype, [B, NH, S, S] (holds dprobs, then dscores; like probs, only the
// causal blocks on and below the diagonal are written).
void attention_backward(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor qkv, Tensor probs, Tensor mask,
                        Tensor probs_drop, Tensor scratch, const AttnShape& sh, float p);
