// sequence_parallel.h — sequence parallelism (paper §4.2.2, Figures 5–6, Eq. 3), all of it: the conjugate
// pair g / ḡ, the SP halves of the column- and row-parallel linear layers and of the vocabulary-parallel
// embedding, which positions of the sequence a rank holds, and the gradient sum of the replicated parameters
// used on sequence shards.
// sequence_parallel.cu opens with an index of every place SP touches the code.
#pragma once
#include "collectives.h"
#include "tensor_parallel.h"  // Region
#include "../layers/embedding.h"
#include "../layers/model_shape.h"

// ---- g / ḡ (`full` is [S·B, C], `shard` is this rank's [S/t·B, C]; never in place) -----------------------
// g: all-gather along the sequence forward (shard -> full), reduce-scatter backward.
void g_forward(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard);
void g_backward(Comm& tp, const Ctx& ctx, Tensor dshard, Tensor dfull);
// ḡ: reduce-scatter forward (partial full [S·B, C] -> summed shard), all-gather backward.
void gbar_forward(Comm& tp, const Ctx& ctx, Tensor shard, Tensor partial_full);
void gbar_backward(Comm& tp, const Ctx& ctx, Tensor dfull, Tensor dshard);
// The backward re-gather of a shard saved in forward (the same all-gather as g_forward) on the
// communication stream, to overlap with compute; its bytes are also counted in tp.counters.regather_bytes.
// regather_wait joins it.
void regather_shard_async(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard);
void regather_wait(Comm& tp, const Ctx& ctx);

// ---- the SP halves of the tensor-parallel linear layers (tensor_parallel.h dispatches here when r.sp) -----
// Column-parallel: out[N_full, OC_local] = g(in) · W_localᵀ + b_local; `in` is this rank's shard
// [N_full/t, IC] and is all that the caller saves; the gathered copy is transient.
void sp_column_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, Tensor b, int N_full, int IC,
                                int OC_local);
// din [N_full/t, IC] = g_backward(dout · W_local); dW += doutᵀ · g(in), db += Σ dout (= with
// GradWrite::Overwrite). The saved shard is re-gathered while the input gradient is computed (§4.2.2).
void sp_column_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor db, Tensor dout, Tensor in,
                                 Tensor W, int N_full, int IC, int OC_local, GradWrite grads);
// Row-parallel: out [N_full/t, OC] = ḡ(in · W_localᵀ), the partial products reduce-scattered into this
// rank's shard. No bias (added after the reduction by the caller).
void sp_row_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, int N_full, int IC_local, int OC);
// dout is this rank's shard of the output gradient; din [N_full, IC_local] = ḡ_backward(dout) · W_local;
// dW += ḡ_backward(dout)ᵀ · in (= with GradWrite::Overwrite).
void sp_row_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor dout, Tensor in, Tensor W,
                              int N_full, int IC_local, int OC, GradWrite grads);

// ---- the SP half of the vocabulary-parallel embedding (vocab_parallel.h dispatches here when r.sp) ---------
// out [N_full/t, C] = ḡ(lookup): each rank's partial lookup (zeros outside its vocabulary rows) reduce-scattered
// into its sequence shard. Backward: dwte_local += rows of ḡ_backward(dout), the shards all-gathered.
void sp_vocab_parallel_embedding_forward(Region& r, Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local,
                                         int64_t v_begin, int V_local, int N_full, int C);
void sp_vocab_parallel_embedding_backward(Region& r, Ctx& ctx, Tensor dwte_local, Tensor dout,
                                          const EmbeddingIndex& idx, int N_full, int C);

// ---- which part of the sequence a rank holds -------------------------------------------------------------
// Outside the TP regions, rank tp_rank of the TP group holds positions [s_offset, s_offset + S_loc) of the
// sequence: S/t of them under SP, all S without it. (The [s, b, h] layout makes that a contiguous block of
// S_loc·B rows.)
struct SeqShard {
    int S_loc = 0;         // positions held
    int64_t s_offset = 0;  // first global position
};
SeqShard sp_shard(int S, int tp, int tp_rank, bool sp);

// ---- the gradient sum over the TP group --------------------------------------------------------------------
// True for the parameters that are replicated over the TP group (param_shard_kind == Replicated in
// layers/model_shape.h: layer norms, row-parallel biases, position embeddings). Under SP each rank applies them
// to its own shard of tokens only, so each rank's gradient is a partial sum over its tokens.
bool is_sequence_parallel_param(int param_id);
// Under SP: sum (not average) those gradients over the TP group, so every rank holds the gradient of the
// whole sequence. grads is the flat f32 gradient buffer, offsets/sizes its per-tensor layout (model/gpt.h).
// Forgetting this is the classic SP bug (test_equivalence_sp_without_grad_sum shows it).
void sum_sequence_parallel_grads(Comm& tp, const Ctx& ctx, Tensor grads, const int64_t offsets[NUM_PARAM_TENSORS],
                                 const int64_t sizes[NUM_PARAM_TENSORS]);
