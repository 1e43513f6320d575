// zero_scopes.cu — ZeRO-2 and ZeRO-3 in a pipeline stage's loops (see the header).
#include "zero_scopes.h"
#include "zero_bubble_schedule.h"
#include "../layers/test_hooks.h"

// The edges are read by the embeddings' forward (the first virtual stage) and by the head, forward and backward
// (the last); the embeddings' backward scatter-adds into the gradient and reads no weight.
bool zero_chunk_reads_edges(const PipelineStage& st, int chunk, ZeroPass pass) {
    const int v = st.virtual_stage(chunk);
    const bool first = v == 0, last = v == st.num_virtual() - 1;
    return pass == ZeroPass::Forward ? first || last : last;
}

ZeroChunkScope::ZeroChunkScope(const ZeroLoop& loop, int chunk, ZeroPass pass) : loop_(loop) {
    ZeroSharding& z = loop.z;
    if (z.stage != 3) return;
    Comm& c = weight_comm(loop.grid);
    edges_ = z.edges >= 0 && zero_chunk_reads_edges(loop.stage, chunk, pass);
    if (edges_) zero_gather(c, loop.ctx, z, loop.states, z.edges, pass);
    // The chunk's first layer (in this pass's order) gathers while the embeddings or the head run.
    const int first = pass == ZeroPass::Forward ? loop.stage.chunk_begin(chunk) : loop.stage.chunk_end(chunk) - 1;
    zero_prefetch(c, loop.ctx, z, loop.states, z.unit(first), pass);
}

ZeroChunkScope::~ZeroChunkScope() {
    if (edges_) zero_release_gathered(loop_.z, loop_.z.edges);
}

ZeroLayerScope::ZeroLayerScope(const ZeroLoop& loop, int j, int chunk, int layer, ZeroPass pass)
    : loop_(loop), j_(j), pass_(pass) {
    ZeroSharding& z = loop.z;
    if (!z.on()) return;
    unit_ = z.unit(layer);
    if (z.stage == 3) {
        Comm& c = weight_comm(loop.grid);
        // Under full recompute the backward reruns the layer's forward first, on these weights (counted).
        zero_gather(c, loop.ctx, z, loop.states, unit_, pass, pass == ZeroPass::Backward && loop.rerun_forward);
        const int next = pass == ZeroPass::Forward ? layer + 1 : layer - 1;
        if (next >= loop.stage.chunk_begin(chunk) && next < loop.stage.chunk_end(chunk))
            zero_prefetch(c, loop.ctx, z, loop.states, z.unit(next), pass);
    }
    if (pass == ZeroPass::Backward) {
        zero_open_bucket(z, loop.ctx, j, unit_);
        deferred_ = is_zero_bubble(loop.schedule) && loop.stage.pp > 1;  // gpt_backward_chunk's split: W comes later
    }
}

// A layer's bucket of micro-batch j is complete: SP's sum over the TP group, the reduce-scatter into the shard.
static void reduce_bucket(const ZeroLoop& loop, int j, int unit) {
    const bool sp_sum = loop.grid.sp && !g_test_hooks.skip_sequence_parallel_sum;
    zero_reduce_bucket(weight_comm(loop.grid), loop.grid.tp_comm, sp_sum, loop.ctx, loop.z, loop.states.grads, j, unit);
}

ZeroLayerScope::~ZeroLayerScope() {
    if (unit_ < 0) return;
    ZeroSharding& z = loop_.z;
    zero_release_gathered(z, unit_);
    if (pass_ != ZeroPass::Backward) return;
    z.open_grads[(size_t)unit_] = Tensor();  // no more views into it (a deferred W holds its own)
    if (!deferred_) reduce_bucket(loop_, j_, unit_);
}

void zero_after_weight_pass(const ZeroLoop& loop, int j, int chunk) {
    if (!loop.z.on()) return;
    for (int l = loop.stage.chunk_begin(chunk); l < loop.stage.chunk_end(chunk); l++)
        reduce_bucket(loop, j, loop.z.unit(l));
}
