// vocab_parallel.cu — vocabulary-parallel embedding and cross-entropy (see the header).
#include "vocab_parallel.h"

#include <vector>
#include "sequence_parallel.h"
#include "../layers/cross_entropy.h"

void vocab_parallel_embedding_forward(Region& r, Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local,
                                      int64_t v_begin, int V_local, int N_full, int C) {
    if (r.sp) return sp_vocab_parallel_embedding_forward(r, ctx, out, tokens, wte_local, v_begin, V_local, N_full, C);
    token_embedding_forward(ctx, out, tokens, wte_local, v_begin, V_local, N_full, C);
    fbar_forward(*r.tp, ctx, out);  // each row is non-zero on exactly one rank: the sum completes it
}

void vocab_parallel_embedding_backward(Region& r, Ctx& ctx, Tensor dwte_local, Tensor dout,
                                       const EmbeddingIndex& idx, int N_full, int C) {
    if (r.sp) return sp_vocab_parallel_embedding_backward(r, ctx, dwte_local, dout, idx, N_full, C);
    token_embedding_backward(ctx, dwte_local, dout, idx, C);  // f̄'s backward is the identity
}

float vocab_parallel_cross_entropy(Comm& tp, Ctx& ctx, Tensor logits, Tensor targets, Tensor rowmax, Tensor sumexp,
                                   Tensor target_logit, Tensor losses, int N, int V_local, int64_t v_begin, int V,
                                   std::vector<float>* host_losses) {
    // Pass 1 over the logits: each rank's (max, sum of exp(z - max)) pair over its own columns, and the
    // target's logit where it owns the target (layers/cross_entropy.h).
    const bool split = tp.size > 1;
    // Under TP, `losses` holds this rank's own maxima until ce_losses overwrites it: the rescale needs them
    // after rowmax has been all-reduced in place (no extra buffer, no copy).
    ce_forward_stats(ctx, rowmax, sumexp, target_logit, split ? losses : Tensor(), logits, targets, N, V_local,
                     v_begin, V);
    // Combining the pairs over the group: max first, then sums. A pair (m, s) is combined by
    // (m, s) + (m', s') = (M, s·e^(m−M) + s'·e^(m'−M)), M = max(m, m'), which no built-in reduction does:
    // NCCL has no user-defined operators. So an all-reduce MAX gives M, each rank rescales its own sum to
    // M (N numbers, not a pass over the logits), and an all-reduce SUM adds them; the target's logit lives
    // on exactly one rank, so a SUM delivers it. These are the three collectives of N floats the earlier
    // three-pass version made, so the communication (and the byte counters the tests read) is unchanged.
    // (An all-gather of every rank's pairs, combined locally in rank order, would be one collective instead
    // of three, so less latency, for t times the bytes; not done here, to keep the collectives as they were.)
    all_reduce(tp, ctx, rowmax, ReduceOp::MAX);
    if (split) ce_rescale_sumexp(ctx, sumexp, losses, rowmax, N);
    all_reduce(tp, ctx, sumexp, ReduceOp::SUM);
    all_reduce(tp, ctx, target_logit, ReduceOp::SUM);
    ce_losses(ctx, losses, rowmax, sumexp, target_logit, N);
    // Read back on ctx's stream (ce_losses ran there): no device-wide wait in the step (layers/runtime.h).
    std::vector<float> l = tensor_to_host_f32(ctx, losses);
    double s = 0;
    for (float x : l) s += x;
    if (host_losses) *host_losses = std::move(l);
    return (float)(s / N);
}
