// zero_model.cu — the model under ZeRO-2 and ZeRO-3 (see the header).
#include "zero_model.h"
#include "pipeline_step.h"  // pipeline_embedding_sum_finish: post-validation's early tied sum
#include "../layers/test_hooks.h"

#include <algorithm>
#include "../parallel/sequence_parallel.h"
#include "../parallel/zero_bubble_schedule.h"
#include "../parallel/zero_scopes.h"  // zero_chunk_reads_edges: the gathers the formula counts

bool zero_sharded(const GPT& m) { return m.sharded.on(); }

// ---- the step's pieces -----------------------------------------------------------------------------------------
void zero_sync_gradients(GPT& m) {
    ZeroSharding& z = m.sharded;
    if (z.edges >= 0) {  // the order of sync_gradients (model/train_step.cu): SP sum, tied sum, then DP
        if (m.grid->sp && !g_test_hooks.skip_sequence_parallel_sum) {
            int64_t offsets[NUM_PARAM_TENSORS], sizes[NUM_PARAM_TENSORS];
            zero_edges_offsets(z, offsets, sizes);
            sum_sequence_parallel_grads(m.grid->tp_comm, *m.ctx, z.edges_bucket, offsets, sizes);
        }
        // The tied sum as sync_gradients does it: none under ZB-V (the first stage holds both uses, and the last
        // stage no edges: an all-reduce here would wait for it forever), and under post-validation the one the
        // executor started early (model/pipeline_step.h), finished here (its part added into the edges' bucket).
        if (m.grid->pp > 1 && !m.grid->pipeline_v && !g_test_hooks.skip_tied_embedding_sum) {
            if (!pipeline_embedding_sum_finish(m)) all_reduce(m.grid->emb_comm, *m.ctx, gpt_grad(m, P_WTE));
        }
    }
    zero_finish_gradients(weight_comm(*m.grid), *m.ctx, z, m.grads);
}

std::vector<double> zero_gradient_sums(GPT& m) { return zero_sums_of_squares(*m.ctx, m.sharded, m.grads); }

Tensor zero_owned_gradient(GPT& m, int id, int layer) { return zero_owned_grad(m.sharded, m.grads, id, layer); }

void zero_model_optimizer_step(GPT& m, const AdamWStep& a) {
    zero_optimizer_step(weight_comm(*m.grid), *m.ctx, m.sharded, gpt_model_states(m), a);
}

// ---- measured next to the formula ------------------------------------------------------------------------------
// From the shape alone (recompute/formulas.h's stage_params counts the same parameters): a layer holds
// 12h²/t + 7h/t + 6h of them on a TP rank (QKV, fc1 and their biases and the two projections split by t; the
// layer norms and the row-parallel biases whole); the edges are the word embedding's Vp/t rows (the first
// stage, and the head's tied copy), the positions' max_seq rows (the first stage) and the final norm's 2h
// (the head's stage), as the pipeline places them (parallel/pipeline_stage.h).
ZeroShapeUnits zero_units_from_shape(const GPT& m) {
    ZeroShapeUnits u;
    const int64_t h = m.cfg.channels, t = m.grid->tp, d = weight_ranks(*m.grid);
    auto round_up = [&](int64_t x) { return (x + d - 1) / d * d; };
    u.layers = (int)m.stage.layers.size();
    u.layer = (12 * h * h + 7 * h) / t + 6 * h;
    if (m.stage.holds(P_WTE)) u.edges += (int64_t)m.cfg.padded_vocab / t * h;
    if (m.stage.holds(P_WPE)) u.edges += (int64_t)m.cfg.max_seq * h;
    if (m.stage.holds(P_LNFW)) u.edges += 2 * h;
    u.layer_padded = round_up(u.layer);
    u.edges_padded = round_up(u.edges);
    return u;
}

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
    const ZeroShapeUnits shape = zero_units_from_shape(m);  // the model's shape, not the layout measured
    u.layer = u.layers > 0 ? (double)shape.layer_padded : 0;
    u.edges = (double)shape.edges_padded;
    for (int c = 0; c < m.stage.chunks; c++) {
        u.edges_forward = u.edges_forward || zero_chunk_reads_edges(m.stage, c, ZeroPass::Forward);
        u.edges_backward = u.edges_backward || zero_chunk_reads_edges(m.stage, c, ZeroPass::Backward);
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
