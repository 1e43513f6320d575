// zero_model.cu — the model under ZeRO-2 and ZeRO-3 (see the header).
#include "zero_model.h"
#include "gpt.h"
#include "../layers/test_hooks.h"

#include <algorithm>
#include "../parallel/sequence_parallel.h"
#include "../parallel/zero_bubble_schedule.h"

bool zero_sharded(const GPT& m) { return m.sharded.on(); }

void zero_model_create(GPT& m, int stage, DType dtype) {
    zero_layout(m.sharded, stage, m.n_params, m.offsets, m.sizes, m.stage.layers, weight_ranks(*m.grid),
                weight_rank(*m.grid), dtype, m.ctx->device);
    if (!m.sharded.on()) return;
    const ModelStates s = zero_states_allocate(m.state_memory, m.sharded, m.ctx->device, dtype);
    m.master = s.master, m.weights = s.weights, m.grads = s.grads, m.adam_m = s.adam_m, m.adam_v = s.adam_v;
}

// ---- the scopes of gpt.cu's loops ------------------------------------------------------------------------------
// The edges are read by the embeddings' forward (the first virtual stage) and by the head, forward and backward
// (the last); the embeddings' backward scatter-adds into the gradient and reads no weight.
static bool chunk_reads_edges(const GPT& m, int chunk, ZeroPass pass) {
    const int v = m.stage.virtual_stage(chunk);
    const bool first = v == 0, last = v == m.stage.num_virtual() - 1;
    return pass == ZeroPass::Forward ? first || last : last;
}

ZeroChunkScope::ZeroChunkScope(GPT& m, int chunk, ZeroPass pass) : m_(m) {
    ZeroSharding& z = m.sharded;
    if (z.stage != 3) return;
    Comm& c = weight_comm(*m.grid);
    edges_ = z.edges >= 0 && chunk_reads_edges(m, chunk, pass);
    if (edges_) zero_gather(c, *m.ctx, z, gpt_model_states(m), z.edges, pass);
    // The chunk's first layer (in this pass's order) gathers while the embeddings or the head run.
    const int first = pass == ZeroPass::Forward ? m.stage.chunk_begin(chunk) : m.stage.chunk_end(chunk) - 1;
    zero_prefetch(c, *m.ctx, z, gpt_model_states(m), z.unit(first), pass);
}

ZeroChunkScope::~ZeroChunkScope() {
    if (edges_) zero_release_gathered(m_.sharded, m_.sharded.edges);
}

ZeroLayerScope::ZeroLayerScope(GPT& m, int j, int chunk, int layer, ZeroPass pass) : m_(m), j_(j), pass_(pass) {
    ZeroSharding& z = m.sharded;
    if (!z.on()) return;
    unit_ = z.unit(layer);
    if (z.stage == 3) {
        Comm& c = weight_comm(*m.grid);
        // Under full recompute the backward reruns the layer's forward first, on these weights (counted).
        zero_gather(c, *m.ctx, z, gpt_model_states(m), unit_, pass, pass == ZeroPass::Backward && m.recompute == Recompute::Full);
        const int next = pass == ZeroPass::Forward ? layer + 1 : layer - 1;
        if (next >= m.stage.chunk_begin(chunk) && next < m.stage.chunk_end(chunk))
            zero_prefetch(c, *m.ctx, z, gpt_model_states(m), z.unit(next), pass);
    }
    if (pass == ZeroPass::Backward) {
        zero_open_bucket(z, *m.ctx, j, unit_);
        deferred_ = is_zero_bubble(m.schedule) && m.stage.pp > 1;  // gpt_backward_chunk's split: W comes later
    }
}

ZeroLayerScope::~ZeroLayerScope() {
    if (unit_ < 0) return;
    ZeroSharding& z = m_.sharded;
    zero_release_gathered(z, unit_);
    if (pass_ != ZeroPass::Backward) return;
    z.open_grads[(size_t)unit_] = Tensor();  // no more views into it (a deferred W holds its own)
    if (!deferred_)
        zero_reduce_bucket(weight_comm(*m_.grid), m_.grid->tp_comm, m_.grid->sp && !g_test_hooks.skip_sequence_parallel_sum,
                           *m_.ctx, z, m_.grads, j_, unit_);
}

void zero_after_weight_pass(GPT& m, int j, int chunk) {
    if (!m.sharded.on()) return;
    for (int l = m.stage.chunk_begin(chunk); l < m.stage.chunk_end(chunk); l++)
        zero_reduce_bucket(weight_comm(*m.grid), m.grid->tp_comm, m.grid->sp && !g_test_hooks.skip_sequence_parallel_sum,
                           *m.ctx, m.sharded, m.grads, j, m.sharded.unit(l));
}

// ---- the step's pieces -----------------------------------------------------------------------------------------
void zero_sync_gradients(GPT& m) {
    ZeroSharding& z = m.sharded;
    if (z.edges >= 0) {  // the order of sync_gradients (model/train_step.cu): SP sum, tied sum, then DP
        if (m.grid->sp && !g_test_hooks.skip_sequence_parallel_sum) {
            int64_t offsets[NUM_PARAM_TENSORS], sizes[NUM_PARAM_TENSORS];
            zero_edges_offsets(z, offsets, sizes);
            sum_sequence_parallel_grads(m.grid->tp_comm, *m.ctx, z.edges_bucket, offsets, sizes);
        }
        if (m.grid->pp > 1 && !g_test_hooks.skip_tied_embedding_sum) all_reduce(m.grid->emb_comm, *m.ctx, gpt_grad(m, P_WTE));
    }
    zero_finish_gradients(weight_comm(*m.grid), *m.ctx, z, m.grads);
}

std::vector<double> zero_gradient_sums(GPT& m) { return zero_sums_of_squares(*m.ctx, m.sharded, m.grads); }

Tensor zero_owned_gradient(GPT& m, int id, int layer) { return zero_owned_grad(m.sharded, m.grads, id, layer); }

void zero_model_optimizer_step(GPT& m, const AdamWStep& a) {
    zero_optimizer_step(weight_comm(*m.grid), *m.ctx, m.sharded, gpt_model_states(m), a);
}

// ---- measured next to the formula ------------------------------------------------------------------------------
// Under a zero-bubble schedule a layer's bucket lives from its B to its W: the most micro-batches with B run
// and W not, over the stage's ops, times the chunk's layers. Otherwise one bucket at a time.
static int most_pending_buckets(const GPT& m, int M) {
    if (!is_zero_bubble(m.schedule) || m.stage.pp == 1) return 1;
    int pending = 0, most = 0;
    for (const PipeOp& op : pipe_schedule(m.schedule, m.stage.pp, m.stage.rank, M, m.stage.chunks)) {
        if (op.kind == PipeOp::Backward) most = std::max(most, ++pending);
        else if (op.kind == PipeOp::WeightGrad) pending--;
    }
    return most * m.stage.layers_per_chunk;
}

ZeroStepInput zero_step_input(const GPT& m, int micro_batches) {
    ZeroStepInput in;
    in.d = weight_ranks(*m.grid);
    in.weight_bytes = (int)dtype_size(m.weights.dtype);
    in.micro_batches = micro_batches;
    in.pending_buckets = most_pending_buckets(m, micro_batches);
    if (m.zero.on) {  // ZeRO-1: the flat buffer, padded to d, is one unit
        in.stage = 1;
        in.units.edges = (double)m.zero.padded;
        return in;
    }
    const ZeroSharding& z = m.sharded;
    in.stage = z.on() ? z.stage : 0;
    if (!z.on()) return in;
    ZeroUnitSizes& u = in.units;
    u.layers = (int)m.stage.layers.size();
    u.layers_per_chunk = m.stage.layers_per_chunk;
    u.layer = u.layers > 0 ? (double)z.units[0].padded : 0;
    u.edges = z.edges >= 0 ? (double)z.units[(size_t)z.edges].padded : 0;
    for (int c = 0; c < m.stage.chunks; c++) {
        u.edges_forward = u.edges_forward || chunk_reads_edges(m, c, ZeroPass::Forward);
        u.edges_backward = u.edges_backward || chunk_reads_edges(m, c, ZeroPass::Backward);
    }
    return in;
}

void print_zero_report(FILE* f, const GPT& m, int micro_batches) {
    const ZeroStepInput in = zero_step_input(m, micro_batches);
    if (in.stage == 0) return;
    const ZeroStepFormula F = zero_step_formula(in);
    const ZeroSharding& z = m.sharded;
    fprintf(f, "\nZeRO-%d over %d ranks: the step's buffers and data-parallel bytes (measured next to "
               "recompute/memory_techniques.h)\n", in.stage, in.d);
    fprintf(f, "  %-28s %14s %14s %10s\n", "", "measured", "formula", "diff");
    auto row = [&](const char* what, double measured, double formula, const char* note) {
        fprintf(f, "  %-28s %14.0f %14.0f %10.0f   %s\n", what, measured, formula, measured - formula, note);
    };
    if (in.stage >= 2) {
        row("gathered weights, peak", (double)z.gathered_peak, F.gathered_peak,
            in.stage == 3 ? "w(E + min(2, layers/chunk) U): a layer, the next one prefetched, the edges"
                          : "w max(U, E): the optimizer's all-gather, one unit at a time");
        char note[160];
        snprintf(note, sizeof note, "4(E + %d U): the edges' bucket for the step, %d layer bucket%s at once", in.pending_buckets,
                 in.pending_buckets, in.pending_buckets == 1 ? "" : "s");
        row("gradient buckets, peak", (double)z.bucket_peak, F.bucket_peak, note);
    }
    // The step's bytes: ZeRO-1's from its own counters, ZeRO-2/3's by what moved them.
    const double rs = in.stage == 1 ? (double)m.zero.step_reduce_scatter_bytes : (double)z.step.reduce_scatter;
    const double ag = in.stage == 1 ? (double)m.zero.step_all_gather_bytes : (double)z.step.optimizer_gather;
    char note[200];
    snprintf(note, sizeof note, "%d per step (%s)", F.reduce_scatters,
             in.stage == 1 ? "once, the flat buffer" : "each layer per micro-batch, the edges once");
    row("reduce-scatter bytes", rs, F.reduce_scatter, note);
    row("optimizer all-gather bytes", ag, F.optimizer_gather, in.stage == 3 ? "none: the shard is the weights" : "the updated weights");
    double total = rs + ag;
    if (in.stage == 3) {
        snprintf(note, sizeof note, "%d gathers (the layers, per micro-batch%s)", F.forward_gathers, in.units.edges_forward ? ", and the edges" : "");
        row("forward gather bytes", (double)z.step.forward_gather, F.forward_gather, note);
        snprintf(note, sizeof note, "%d gathers, %d of them reused by a full-recompute rerun of the forward", F.backward_gathers,
                 z.step.rerun_gathers);
        row("backward gather bytes", (double)z.step.backward_gather, F.backward_gather, note);
        total += (double)(z.step.forward_gather + z.step.backward_gather);
    }
    row("data-parallel bytes, total", total, F.total(), "");
    fprintf(f, "  an all-reduce of the fp32 gradients would send %.0f bytes: the step sends %.3f times that (%s)\n",
            F.all_reduce, F.all_reduce > 0 ? total / F.all_reduce : 0.0,
            in.stage == 3 ? "1.5 in fp32 at one micro-batch: a reduce-scatter and two gathers"
                          : in.micro_batches > 1 && in.stage == 2 ? "ZeRO-2 reduce-scatters every micro-batch"
                                                                  : "1 in fp32: a reduce-scatter and an all-gather");
}
