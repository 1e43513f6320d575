// sequence_parallel.h — sequence parallelism (paper §4.2.2, Figures 5–6, Eq. 3): the conjugate pair g / ḡ,
// and the gradient sum of the replicated parameters used on sequence shards.
#pragma once
#include <vector>
#include "comm.h"

// g: all-gather along the sequence forward (shard [S/t·B, C] -> full [S·B, C]), reduce-scatter backward.
void g_forward(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard);
void g_backward(Comm& tp, const Ctx& ctx, Tensor dshard, Tensor dfull);
// The same all-gather on the communication stream, to overlap with compute; g_wait joins it.
void g_forward_async(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard);
void g_wait(Comm& tp, const Ctx& ctx);
// ḡ: reduce-scatter forward (partial full [S·B, C] -> summed shard), all-gather backward.
void gbar_forward(Comm& tp, const Ctx& ctx, Tensor shard, Tensor partial_full);
void gbar_backward(Comm& tp, const Ctx& ctx, Tensor dfull, Tensor dshard);

// Parameters replicated across the TP group but applied to sequence shards (layer norms, row-parallel
// biases, position embeddings) receive on each rank only the gradient of its own shard of tokens: the full
// gradient is the SUM over the TP group (not the average). Forgetting this is the classic SP bug.
void sum_sequence_parallel_grads(Comm& tp, const Ctx& ctx, const std::vector<Tensor>& grads);
