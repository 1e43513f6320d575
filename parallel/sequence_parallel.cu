// sequence_parallel.cu — sequence parallelism (paper §4.2.2), all of it; docs/design.md "Sequence parallelism".
//
// Outside the tensor-parallel regions (layer norms, dropouts, residual adds) the activations are split
// along the sequence: with the [s, b, h] layout a rank's shard is a contiguous block of S/t·B rows, so g and
// ḡ are plain collectives on contiguous buffers. Where a region starts, g all-gathers the shards for the
// column-parallel linear (which saves only its shard and re-gathers it in backward); where it ends, ḡ
// reduce-scatters the row-parallel partial sums straight into shards. An all-reduce is a reduce-scatter
// followed by an all-gather, so this moves the same bytes as plain tensor parallelism while every
// element-wise op and its saved activations shrink by t.
//
// Where SP touches the code (everything else runs unchanged on whatever rows it is given):
//   this file                    g_forward/backward, gbar_*   the collectives at the region boundaries
//   this file                    sp_column_parallel_*         g in front of a column-parallel linear
//   this file                    sp_row_parallel_*            ḡ behind a row-parallel linear
//   this file                    sp_vocab_parallel_embedding_* ḡ behind the vocabulary-parallel lookup
//   this file                    sp_shard                     which S/t positions a rank holds
//   this file                    sum_sequence_parallel_grads  the TP sum of the replicated parameters' gradients
//   parallel/tensor_parallel.cu  column_/row_parallel_*       `if (r.sp) return sp_...(...)`
//   parallel/vocab_parallel.cu   vocab_parallel_embedding_*   `if (r.sp) return sp_...(...)`
//   model/gpt.cu                 gpt_step_shape               S_loc and the positions held, from sp_shard (of a
//                                                             CP rank's positions under CP: context_parallel.h)
//   model/train_step.cu          sync_gradients               calls sum_sequence_parallel_grads
//   layers/model_shape.h         kParamTable                  its Replicated rows are the summed parameters
#include "sequence_parallel.h"

#include "../layers/linear.h"

// ---- g / ḡ ---------------------------------------------------------------------------------------------
void g_forward(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard) { all_gather(tp, ctx, full, shard); }
void g_backward(Comm& tp, const Ctx& ctx, Tensor dshard, Tensor dfull) { reduce_scatter(tp, ctx, dshard, dfull); }
void gbar_forward(Comm& tp, const Ctx& ctx, Tensor shard, Tensor partial_full) {
    reduce_scatter(tp, ctx, shard, partial_full);
}
void gbar_backward(Comm& tp, const Ctx& ctx, Tensor dfull, Tensor dshard) { all_gather(tp, ctx, dfull, dshard); }

// Not a third operator: g's all-gather once more, in backward, because forward kept only the shard. Its
// bytes are counted apart so that test_sp_comm_bytes can show the paper's "same bytes as TP" for the rest.
void regather_shard_async(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard) {
    uint64_t before = tp.counters.bytes[kAllGather];
    all_gather_async(tp, ctx, full, shard);
    tp.counters.regather_bytes += tp.counters.bytes[kAllGather] - before;
}
void regather_wait(Comm& tp, const Ctx& ctx) { comm_wait(tp, ctx); }

// ---- column-parallel linear under SP: g in front -------------------------------------------------------
void sp_column_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, Tensor b, int N_full, int IC,
                                int OC_local) {
    // X = g(in): all-gather the sequence shards into a transient full copy; only the shard stays saved.
    Tensor x = r.alloc->alloc(in.dtype, (int64_t)N_full * IC, r.layer, "tmp:gathered_input");
    g_forward(*r.tp, ctx, x, in);
    linear_forward(ctx, out, x, W, b, N_full, IC, OC_local);
    r.alloc->release(x);
}

void sp_column_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor db, Tensor dout, Tensor in,
                                 Tensor W, int N_full, int IC, int OC_local, GradWrite grads) {
    // Paper §4.2.2: the input was saved as a sequence shard, so the weight gradient needs it all-gathered
    // again. Issue that all-gather first, on its own stream, and compute the input gradient meanwhile (it
    // needs only dout and W).
    Tensor x = r.alloc->alloc(in.dtype, (int64_t)N_full * IC, r.layer, "tmp:regathered_input");
    regather_shard_async(*r.tp, ctx, x, in);
    Tensor dx_full = r.alloc->alloc(dout.dtype, (int64_t)N_full * IC, r.layer, "tmp:dinput_partial");
    linear_backward(ctx, dx_full, Tensor(), Tensor(), dout, Tensor(), W, N_full, IC, OC_local);
    regather_wait(*r.tp, ctx);
    linear_backward(ctx, Tensor(), dW, db, dout, x, W, N_full, IC, OC_local, false, grads);
    r.alloc->release(x);
    // g's backward: dx_full is a partial sum (this rank saw only its output columns); reduce-scatter sums
    // the partials of all ranks and keeps this rank's shard.
    g_backward(*r.tp, ctx, din, dx_full);
    r.alloc->release(dx_full);
}

// ---- row-parallel linear under SP: ḡ behind -----------------------------------------------------------
void sp_row_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, int N_full, int IC_local, int OC) {
    // ḡ: reduce-scatter the partial products straight into this rank's sequence shard.
    Tensor partial = r.alloc->alloc(out.dtype, (int64_t)N_full * OC, r.layer, "tmp:partial_output");
    linear_forward(ctx, partial, in, W, Tensor(), N_full, IC_local, OC);
    gbar_forward(*r.tp, ctx, out, partial);
    r.alloc->release(partial);
}

void sp_row_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor dout, Tensor in, Tensor W,
                              int N_full, int IC_local, int OC, GradWrite grads) {
    // ḡ's backward: all-gather the shards of the output gradient; then the plain row-parallel backward.
    Tensor dy = r.alloc->alloc(dout.dtype, (int64_t)N_full * OC, r.layer, "tmp:doutput_gathered");
    gbar_backward(*r.tp, ctx, dy, dout);
    linear_backward(ctx, din, dW, Tensor(), dy, in, W, N_full, IC_local, OC, false, grads);
    r.alloc->release(dy);
}

// ---- the vocabulary-parallel embedding under SP: ḡ behind the lookup ------------------------------------
void sp_vocab_parallel_embedding_forward(Region& r, Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local,
                                         int64_t v_begin, int V_local, int N_full, int C) {
    Tensor partial = r.alloc->alloc(out.dtype, (int64_t)N_full * C, kModelLevel, "tmp:embedding_partial");
    token_embedding_forward(ctx, partial, tokens, wte_local, v_begin, V_local, N_full, C);
    gbar_forward(*r.tp, ctx, out, partial);  // reduce-scatter into this rank's sequence shard
    r.alloc->release(partial);
}

void sp_vocab_parallel_embedding_backward(Region& r, Ctx& ctx, Tensor dwte_local, Tensor dout,
                                          const EmbeddingIndex& idx, int N_full, int C) {
    Tensor dfull = r.alloc->alloc(dout.dtype, (int64_t)N_full * C, kModelLevel, "tmp:dembedding_gathered");
    gbar_backward(*r.tp, ctx, dfull, dout);
    token_embedding_backward(ctx, dwte_local, dfull, idx, C);
    r.alloc->release(dfull);
}

// ---- which part of the sequence a rank holds -----------------------------------------------------------
SeqShard sp_shard(int S, int tp, int tp_rank, bool sp) {
    SeqShard s;
    s.S_loc = sp ? S / tp : S;  // the trainer refuses an S that t does not divide (process_grid.cu)
    s.s_offset = sp ? (int64_t)tp_rank * s.S_loc : 0;
    return s;
}

// ---- the gradient sum over the TP group ----------------------------------------------------------------
// A replicated parameter is applied identically on every TP rank. Without SP every rank applies it to the
// whole sequence and so computes the whole gradient. Under SP rank i applies it to its S/t positions only,
// and its gradient is the part of the sum over those positions: the whole gradient is the SUM over the TP
// group. The split parameters (Rows / QKVRows / Cols) sit inside the TP regions, where every rank sees the
// whole sequence: their gradients are complete on every rank.
bool is_sequence_parallel_param(int id) { return param_shard_kind(id) == ShardKind::Replicated; }

void sum_sequence_parallel_grads(Comm& tp, const Ctx& ctx, Tensor grads, const int64_t offsets[NUM_PARAM_TENSORS],
                                 const int64_t sizes[NUM_PARAM_TENSORS]) {
    for (int id = 0; id < NUM_PARAM_TENSORS; id++)
        if (is_sequence_parallel_param(id)) all_reduce(tp, ctx, grads.slice(offsets[id], sizes[id]), ReduceOp::SUM);
}
