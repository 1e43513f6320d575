// flash_attention.h — core attention without the s×s tensors: FlashAttention-2's tiled form (Dao 2023),
// with the unfused path's own dropout masks.
// The plain math this file computes fast: layers/reference/flash_attention.h
//
// The unfused path (attention.h) materialises softmax(QKᵀ/√d), its dropout mask and the dropped-out
// probabilities: the 5as²b bytes of Table 2 that selective recomputation drops and rebuilds. Flash attention
// never stores them, not even in the forward pass. It walks the keys tile by tile with a running maximum and
// sum per query (the online softmax), so one query tile needs only its own row statistics. For the backward
// pass it keeps one fp32 log-sum-exp per query and head (lse = m + log Σ_k e^{x_k − m}); the backward pass
// rebuilds each tile's probabilities from Q, K and lse, P = e^{x − lse}. That is selective recomputation
// done inside one kernel: the same FLOPs the paper's selective policy pays (§5), and 4·asb/t bytes kept
// instead of 5as²b/t (recompute/memory_formulas.h, term "lse").
//
// Dropout. The keep bit of probability (b, n, q, k) is dropout_keep(seed, stream,
// attn_dropout_index(b_glob, h_glob, NH_total, S, q, k)) (attention.h, philox.h): the index of that element in
// the single-rank s×s tensor, under any parallel layout. Nothing is stored: the forward and the backward pass
// both draw the bits again, and they are the bits of the unfused path's attn_mask.
//
// Layouts and shapes as attention.h: qkv [S·B, 3·NH·HD] (row s·B + b; Q | K | V, head n at column n·HD of its
// block), out / dout [S·B, NH·HD], lse f32 [B, NH, S]. All arithmetic in fp32 (bf16 is storage only), except
// on a GPU in bf16, whose tile products run on tensor cores with bf16 operands (P and dS rounded to bf16) and
// fp32 sums (flash_attention_tc.h).
#pragma once
#include <functional>
#include "attention.h"

// out = dropout(softmax(causal(Q Kᵀ / √HD))) · V and lse (f32 [B, NH, S]), p the dropout probability.
void flash_attention_forward(Ctx& ctx, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, float p,
                             uint64_t seed, uint32_t stream);

// dqkv (written, not accumulated) from dout, the forward's out and lse, and qkv. FlashAttention-2's
// backward: D_q = Σ_c dO[q, c] · O[q, c] stands in for the row sum Σ_k dP_k · P_k of the softmax Jacobian
// (the two are equal, dropout included: O = Σ_k P_k · z_k/(1 − p) · V_k).
void flash_attention_backward(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                              const AttnShape& sh, float p, uint64_t seed, uint32_t stream);

// Core attention in tiles as one value, the pair the transformer layer calls (model/transformer_layer.h): so
// the layer names no parallelism but its own. flash_attention_core() is the two functions above, on the
// rank's whole sequence; under context parallelism the model puts ring attention in its place
// (ring_attention_core, parallel/context_parallel.h), which brings the other ranks' keys and values round.
struct FlashCore {
    std::function<void(Ctx& ctx, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, float p, uint64_t seed,
                       uint32_t stream)>
        forward;
    std::function<void(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh,
                       float p, uint64_t seed, uint32_t stream)>
        backward;
};
FlashCore flash_attention_core();

// The CUDA kernels' compile-time bound on the head dimension for HD (32, 64 or 128: the instantiation that
// runs), or 0 when no kernel takes HD (HD < 1 or HD > 128: the model must use --attention unfused on a GPU).
// Inline, so that a caller checks a model (and test_kernel_coverage lists the instantiations) with no device.
inline int flash_attention_hd_bound(int HD) {
    return HD < 1 ? 0 : HD <= 32 ? 32 : HD <= 64 ? 64 : HD <= 128 ? 128 : 0;
}

// Bytes of ctx_scratch (runtime.h) flash_attention_backward takes on the GPU for a rank's S, B and NH (the
// fp32 D = rowsum(dO ⊙ O), [B, NH, S]): the model reserves them before its first step, so the scratch never
// grows inside a step. flash_block_backward without a D takes the same for its Sq queries: no more, since a
// block's queries are some of the rank's positions (ring attention hands it a D: no scratch).
size_t flash_attention_scratch_bytes(int S, int B, int NH);

// ---- the blocks of ring attention (context parallelism: parallel/context_parallel.h) ----------------------
// Under context parallelism a rank holds the queries of a few runs of consecutive positions and receives the
// keys and values of the other ranks' runs one at a time. One block is the queries of one run against the keys
// of one run: the same tiles as above, with the causal mask and the dropout bits of the GLOBAL positions (so a
// block strictly below the diagonal is unmasked, one on it is the triangle above, and every keep bit is the
// single-rank run's). The online softmax is what makes the blocks separable: a block's output and its lse are
// merged into the running ones by the log-sum-exp rule, exactly as the tiles of one call are.
struct AttnBlock {
    AttnShape attn;                 // B, NH, HD and the global batch and head coordinates (attn.S is unused)
    int Sq = 0, Sk = 0;             // the block's queries and keys (positions)
    int64_t q_pos = 0, k_pos = 0;   // their first global positions
    int64_t S_total = 0;            // the whole sequence's length: the dropout index's S
    int q_width = 0, kv_width = 0;  // row widths (elements) of the Q matrix and of the K and V matrices
    int64_t lse_ld = 0;             // elements between the lse rows of two (sequence, head) pairs
};

// The (query, key) pairs of one (sequence, head) the block's causal mask leaves visible: Sq·Sk below the
// diagonal, Sq(Sq+1)/2 on it, 0 above it (the work, and ring attention's per-rank count).
double flash_block_pairs(const AttnBlock& blk);

// The block alone: o (f32 [Sq·B, NH·HD]) = dropout(softmax over the block's keys) · V and its lse (f32,
// lse[(b·NH + n)·lse_ld + q]). A query that sees no key of the block
// gets o = 0 and lse = −inf. q, k, v are views whose element 0 is Q (K, V) of the block's first position,
// first sequence, head 0; row s·B + b is q_width (kv_width) elements further.
void flash_block_forward(Ctx& ctx, Tensor o, Tensor lse, Tensor q, Tensor k, Tensor v, const AttnBlock& blk, float p,
                         uint64_t seed, uint32_t stream);
// (o, lse) ← the merge of (o, lse) with a block's (o_blk, lse_blk), all f32 with the layout above and Sq, B, NH,
// HD of blk: lse' = log(e^lse + e^lse_blk), o' = e^(lse − lse')·o + e^(lse_blk − lse')·o_blk. Start from o = 0,
// lse = −inf.
void flash_block_merge(Ctx& ctx, Tensor o, Tensor lse, Tensor o_blk, Tensor lse_blk, const AttnBlock& blk);
// The block's terms of dQ, dK and dV added into f32 accumulators dq [Sq·B, NH·HD] and dk, dv (rows dkv_width
// elements apart, element 0 at the block's first key), from the MERGED out and lse of the queries (out, dout:
// [Sq·B, NH·HD], activation dtype): FlashAttention-2's backward needs only the final statistics, so each block's
// gradient is computed on its own and the sums over blocks are plain additions.
// D (optional): the queries' D = rowsum(dO ⊙ O), laid out like lse (flash_attention_rowdot's rows, lse_ld
// apart): ring attention computes it once per layer for all the rank's queries rather than once per block;
// empty, the block computes its own.
void flash_block_backward(Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, int dkv_width, Tensor dout, Tensor out,
                          Tensor lse, Tensor q, Tensor k, Tensor v, const AttnBlock& blk, float p, uint64_t seed,
                          uint32_t stream, Tensor D = Tensor());
// D = rowsum(dO ⊙ O) (f32 [B, NH, S] like lse) of every query of out and dout ([S·B, NH·HD]): the backward's
// D_q, for flash_block_backward's D.
void flash_attention_rowdot(Ctx& ctx, Tensor D, Tensor dout, Tensor out, const AttnShape& sh);
