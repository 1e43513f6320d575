// tensor_parallel.h — Megatron tensor parallelism (paper §2, Figure 4): the conjugate operators f and f̄,
// the column- and row-parallel linear layers built from them, and which slice of each weight a rank holds.
//
// With sequence parallelism the same linear layers use g and ḡ instead of f and f̄ (parallel/
// sequence_parallel.h, where all of SP lives): the `Region` says which pair applies.
//
// Names, for a reader who also reads Megatron-LM or picotron:
//   this paper (2022)  Megatron-LM (megatron/core/tensor_parallel/mappings.py)   forward / backward
//   f                  copy_to_tensor_model_parallel_region                      identity / all-reduce
//   f̄                  reduce_from_tensor_model_parallel_region                  all-reduce / identity
//   g                  gather_from_sequence_parallel_region                      all-gather / reduce-scatter
//   ḡ                  reduce_scatter_to_sequence_parallel_region                reduce-scatter / all-gather
// picotron follows the 2019 Megatron paper (Shoeybi et al.), whose pair is "f and g": its `g` is this
// paper's f̄, not this paper's g (which only exists with sequence parallelism).
#pragma once
#include "collectives.h"
#include "../layers/model_shape.h"
#include "../layers/activation_allocator.h"

// ---- the conjugate pair f / f̄ (in place) -----------------------------------------------------------------
// f where a TP region begins: the input is replicated and every rank uses all of it, so forward is the
// identity and backward sums the ranks' partial input gradients.
inline void f_forward(Comm&, const Ctx&, Tensor) {}  // identity: nothing to do
void f_backward(Comm& tp, const Ctx& ctx, Tensor grad);
// f̄ where it ends: each rank holds a partial sum of the output, so forward sums them; the gradient of a
// replicated output is already what every rank needs, so backward is the identity.
void fbar_forward(Comm& tp, const Ctx& ctx, Tensor x);
inline void fbar_backward(Comm&, const Ctx&, Tensor) {}  // identity: nothing to do

// Where a tensor-parallel region starts and ends: plain TP (f / f̄ on replicated [S·B, C] tensors) or
// TP + SP (g / ḡ, the tensors outside the region are sequence shards [S/t·B, C]).
struct Region {
    Comm* tp = nullptr;
    bool sp = false;
    ActivationAllocator* alloc = nullptr;  // for the gathered copies (transient work buffers)
    int layer = kModelLevel;
};

// Column-parallel linear (the first linear of each block in the paper's Figure 4, QKV and fc1). W is stored
// [out, in] as in llm.c (Y = X·Wᵀ), so splitting the outputs splits W's rows; in Megatron's Y = XA it is A's
// columns, hence the name: out[N_full, OC_local] = X · W_localᵀ + b_local, where
// X = f(in) (TP: in is the full input) or X = g(in) (SP: in is this rank's sequence shard, all-gathered
// into a transient buffer by sp_column_parallel_forward). `in` is what the caller saves for backward: under
// SP only the shard.
void column_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, Tensor b, int N_full, int IC,
                             int OC_local);
// din (same shape as `in`: shard under SP) = f_backward / g_backward of dout · W_local; dW += , db +=
// (= with GradWrite::Overwrite, runtime.h). Under SP (sp_column_parallel_backward) the saved shard is
// all-gathered again (§4.2.2), on GPU overlapped with the dX GEMM.
void column_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor db, Tensor dout, Tensor in,
                              Tensor W, int N_full, int IC, int OC_local, GradWrite grads = GradWrite::Accumulate);

// Row-parallel linear (the second linear of each block in Figure 4, the attention projection and fc2): the
// inputs split, which are W's columns here and A's rows in Megatron's Y = XA: out = f̄(in · W_localᵀ) (TP: full
// [N_full, OC]) or ḡ(...) (SP: reduce-scattered to this rank's shard [N_full/t, OC]). The bias is NOT added
// here: it is added once, after the reduction (fused with dropout and the residual add).
void row_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, int N_full, int IC_local, int OC);
// dout is the gradient of `out` (full under TP; a shard under SP, all-gathered by sp_row_parallel_backward);
// din[N_full, IC_local] = dout · W_local; dW += doutᵀ · in (= with GradWrite::Overwrite).
void row_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor dout, Tensor in, Tensor W,
                           int N_full, int IC_local, int OC, GradWrite grads = GradWrite::Accumulate);

// ---- which slice of each weight a rank holds ------------------------------------------------------------
// The slice of each tensor is its row of kParamTable (layers/model_shape.h: ShardKind, param_shard_kind).

// Local element counts of the 16 tensors at tensor-parallel size tp.
void local_param_sizes(const GPTConfig& cfg, int tp, int64_t out[NUM_PARAM_TENSORS]);
// full (llm.c layout, all 16 tensors) -> this rank's local buffer (local layout, all 16 tensors).
void shard_params(const GPTConfig& cfg, int tp, int tp_rank, const float* full, float* local);
// The inverse: locals[r] is rank r's local buffer; writes the full llm.c-layout buffer.
void unshard_params(const GPTConfig& cfg, int tp, const std::vector<const float*>& locals, float* full);
