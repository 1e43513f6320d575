// vocab_parallel.cu — vocabulary-parallel embedding and cross-entropy (see the header).
#include "vocab_parallel.h"

#include <vector>
#include "sequence_parallel.h"
#include "../layers/cross_entropy.h"

void vocab_parallel_embedding_forward(Region& r, Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local,
                                      int64_t v_begin, int V_local, int N_full, int C) {
    if (!r.sp) {
        token_embedding_forward(ctx, out, tokens, wte_local, v_begin, V_local, N_full, C);
        fbar_forward(*r.tp, ctx, out);  // each row is non-zero on exactly one rank: the sum completes it
        return;
    }
    Tensor partial = r.alloc->alloc(out.dtype, (int64_t)N_full * C, kModelLevel, "tmp:embedding_partial");
    token_embedding_forward(ctx, partial, tokens, wte_local, v_begin, V_local, N_full, C);
    gbar_forward(*r.tp, ctx, out, partial);  // reduce-scatter into this rank's sequence shard
    r.alloc->release(partial);
}

void vocab_parallel_embedding_backward(Region& r, Ctx& ctx, Tensor dwte_local, Tensor dout,
                                       const EmbeddingIndex& idx, int N_full, int C) {
    if (!r.sp) {
        token_embedding_backward(ctx, dwte_local, dout, idx, C);
        return;
    }
    Tensor dfull = r.alloc->alloc(dout.dtype, (int64_t)N_full * C, kModelLevel, "tmp:dembedding_gathered");
    gbar_backward(*r.tp, ctx, dfull, dout);
    token_embedding_backward(ctx, dwte_local, dfull, idx, C);
    r.alloc->release(dfull);
}

float vocab_parallel_cross_entropy(Comm& tp, Ctx& ctx, Tensor logits, Tensor targets, Tensor rowmax, Tensor sumexp,
                                   Tensor target_logit, Tensor losses, int N, int V_local, int64_t v_begin, int V,
                                   std::vector<float>* host_losses) {
    // softmax needs the max over the whole vocabulary: reduce the local maxima (all-reduce MAX).
    ce_row_max(ctx, rowmax, logits, N, V_local, v_begin, V);
    all_reduce(tp, ctx, rowmax, ReduceOp::MAX);
    // Σ exp over the whole vocabulary = Σ over ranks; the target's logit lives on exactly one rank.
    ce_sumexp_target(ctx, sumexp, target_logit, logits, rowmax, targets, N, V_local, v_begin, V);
    all_reduce(tp, ctx, sumexp, ReduceOp::SUM);
    all_reduce(tp, ctx, target_logit, ReduceOp::SUM);
    ce_losses(ctx, losses, rowmax, sumexp, target_logit, N);
    std::vector<float> l = tensor_to_host_f32(losses);
    double s = 0;
    for (float x : l) s += x;
    if (host_losses) *host_losses = std::move(l);
    return (float)(s / N);
}
