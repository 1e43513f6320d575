// tensor_parallel.h — Megatron tensor parallelism (paper §2, Figure 4): the conjugate operators f and f̄,
// the column- and row-parallel linear layers built from them, and which slice of each weight a rank holds.
//
// With sequence parallelism (sequence_parallel.h) the same linear layers use g and ḡ instead of f and f̄:
// the `Region` says which pair applies.
#pragma once
#include "comm.h"
#include "../model/config.h"
#include "../recompute/activation_allocator.h"

// f: identity forward, all-reduce backward. f̄: all-reduce forward, identity backward. (In place.)
void f_backward(Comm& tp, const Ctx& ctx, Tensor grad);
void fbar_forward(Comm& tp, const Ctx& ctx, Tensor x);

// Where a tensor-parallel region starts and ends: plain TP (f / f̄ on replicated [S·B, C] tensors) or
// TP + SP (g / ḡ, the tensors outside the region are sequence shards [S/t·B, C]).
struct Region {
    Comm* tp = nullptr;
    bool sp = false;
    ActivationAllocator* alloc = nullptr;  // for the gathered copies (transient work buffers)
    int layer = kModelLevel;
};

// Column-parallel linear (weight rows split; Fig. 3a): out[N_full, OC_local] = X · W_localᵀ + b_local, where
// X = f(in) (TP: in is the full input) or X = g(in) (SP: in is this rank's sequence shard, all-gathered
// here into a transient buffer). `in` is what the caller saves for backward: under SP only the shard.
void column_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, Tensor b, int N_full, int IC,
                             int OC_local);
// din (same shape as `in`: shard under SP) = f_backward / g_backward of dout · W_local; dW += , db +=.
// Under SP the saved shard is all-gathered again first (§4.2.2), on GPU overlapped with the dX GEMM.
void column_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor db, Tensor dout, Tensor in,
                              Tensor W, int N_full, int IC, int OC_local);

// Row-parallel linear (weight columns split; Fig. 3b): out = f̄(in · W_localᵀ) (TP: full [N_full, OC]) or
// ḡ(...) (SP: reduce-scattered to this rank's shard [N_full/t, OC]). The bias is NOT added here: it is added
// once, after the reduction (fused with dropout and the residual add).
void row_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, int N_full, int IC_local, int OC);
// dout is the gradient of `out` (full under TP, shard under SP: all-gathered here, ḡ's backward);
// din[N_full, IC_local] = dout · W_local; dW += doutᵀ · in.
void row_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor dout, Tensor in, Tensor W,
                           int N_full, int IC_local, int OC);

// ---- which slice of each weight a rank holds ------------------------------------------------------------
// Replicated: every rank holds it all (layer norms, row-parallel biases, position embeddings).
// Rows: contiguous block of output rows (fc1 weight and bias; the vocabulary rows of the token table).
// QKVRows: llm.c's qkv weight is (3C, C) = [Q; K; V]; a rank holds its heads' rows of each of Q, K and V
//          (three strided row ranges), stored as [Q_local; K_local; V_local].
// Cols: contiguous block of input columns (attention projection and fc2 weights).
enum class ShardKind { Replicated, Rows, QKVRows, Cols };
ShardKind param_shard_kind(int param_id);
// Local element counts of the 16 tensors at tensor-parallel size tp.
void local_param_sizes(const GPTConfig& cfg, int tp, int64_t out[NUM_PARAM_TENSORS]);
// full (llm.c layout, all 16 tensors) -> this rank's local buffer (local layout, all 16 tensors).
void shard_params(const GPTConfig& cfg, int tp, int tp_rank, const float* full, float* local);
// The inverse: locals[r] is rank r's local buffer; writes the full llm.c-layout buffer.
void unshard_params(const GPTConfig& cfg, int tp, const std::vector<const float*>& locals, float* full);
