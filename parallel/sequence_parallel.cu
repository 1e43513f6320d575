// sequence_parallel.cu — sequence parallelism (paper §4.2.2).
//
// Outside the tensor-parallel regions (layer norms, dropouts, residual adds) the activations are split
// along the sequence: with the [s, b, h] layout a rank's shard is a contiguous block of S/t·B rows, so g and
// ḡ below are plain collectives on contiguous buffers. Where the region starts, g all-gathers the shards for
// the column-parallel linear (which saves only its shard and re-gathers it in backward:
// tensor_parallel.cu, column_parallel_backward); where it ends, ḡ reduce-scatters the row-parallel partial
// sums straight into shards. An all-reduce is a reduce-scatter followed by an all-gather, so this moves the
// same bytes as plain tensor parallelism while every element-wise op and its saved activations shrink by t.
#include "sequence_parallel.h"

void g_forward(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard) { all_gather(tp, ctx, full, shard); }
void g_backward(Comm& tp, const Ctx& ctx, Tensor dshard, Tensor dfull) { reduce_scatter(tp, ctx, dshard, dfull); }
// Used for the backward re-gather of a saved shard (tensor_parallel.cu): counted apart as well.
void g_forward_async(Comm& tp, const Ctx& ctx, Tensor full, Tensor shard) {
    uint64_t before = tp.counters.bytes[kAllGather];
    all_gather_async(tp, ctx, full, shard);
    tp.counters.regather_bytes += tp.counters.bytes[kAllGather] - before;
}
void g_wait(Comm& tp, const Ctx& ctx) { comm_wait(tp, ctx); }
void gbar_forward(Comm& tp, const Ctx& ctx, Tensor shard, Tensor partial_full) {
    reduce_scatter(tp, ctx, shard, partial_full);
}
void gbar_backward(Comm& tp, const Ctx& ctx, Tensor dfull, Tensor dshard) { all_gather(tp, ctx, dfull, dshard); }

void sum_sequence_parallel_grads(Comm& tp, const Ctx& ctx, const std::vector<Tensor>& grads) {
    for (const Tensor& g : grads) all_reduce(tp, ctx, g, ReduceOp::SUM);
}
