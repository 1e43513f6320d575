// train_step.cu — forward, backward, gradient synchronization, clipping, AdamW.
#include "train_step.h"
#include "pipeline_ops.h"
#include "pipeline_step.h"
#include "offload_model.h"
#include "zero_model.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include "../layers/adamw.h"
#include "../layers/trace.h"
#include "../parallel/data_parallel.h"
#include "../parallel/sequence_parallel.h"

// The gradient synchronization, in its one place and order:
//  1. under SP the replicated parameters saw only this rank's sequence shard: sum their gradients over TP
//     (parallel/sequence_parallel.cu says which and why); without SP they are already complete;
//  2. under pipeline parallelism the word embedding is used twice, by the first stage (the lookup) and by the
//     last (the LM head): each copy holds one use's gradient, and their sum over {first, last} is the tied
//     weight's gradient, so both copies take the same update and stay equal;
//  3. the average over DP and CP (the CP ranks hold the same weights and each saw s/c of every sequence:
//     the whole sequence's mean loss is the mean of theirs, parallel/context_parallel.h).
void sync_gradients(GPT& m) {
    if (zero_sharded(m)) return zero_sync_gradients(m);  // ZeRO-2/3: the same order, the layers done already
    if (m.grid->sp && !g_test_hooks.skip_sequence_parallel_sum)
        sum_sequence_parallel_grads(m.grid->tp_comm, *m.ctx, m.grads, m.offsets, m.sizes);
    if (m.grid->pp > 1 && !g_test_hooks.skip_tied_embedding_sum) all_reduce(m.grid->emb_comm, *m.ctx, gpt_grad(m, P_WTE));
    // Then the mean over DP × CP: all-reduced, or reduce-scattered to each shard's owner (distributed optimizer).
    if (m.zero.on) reduce_scatter_gradients(weight_comm(*m.grid), *m.ctx, m.zero, m.grads);
    else average_gradients(weight_comm(*m.grid), *m.ctx, m.grads);
}

double gradient_norm(GPT& m) {
    // All 16 sums are reduced on the device and come back together: one host synchronization per step. With
    // the distributed optimizer each rank holds the reduced gradient of its shard only: sum the shards over DP.
    std::vector<Tensor> grads;
    for (int id = 0; id < NUM_PARAM_TENSORS && !zero_sharded(m); id++) grads.push_back(owned_part(m.zero, m.grads, gpt_grad(m, id)));
    const std::vector<double> ss = zero_sharded(m) ? zero_gradient_sums(m) : sums_of_squares(*m.ctx, grads);  // ZeRO-2/3: pieces
    double sums[2] = {0, 0};  // split over TP, replicated over TP
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        // The last stage's copy of the tied word embedding is the first stage's: count it once.
        if (id == P_WTE && m.grid->pp > 1 && !m.stage.first()) continue;
        sums[param_shard_kind(id) == ShardKind::Replicated ? 1 : 0] += ss[id];
    }
    if (m.zero.on || zero_sharded(m)) all_reduce_host(weight_comm(*m.grid), sums, 2, MPI_DOUBLE, MPI_SUM, "all-reduce of the gradient norm");
    // Slices add up over the TP group; replicated tensors are identical on every rank: count them once.
    // Stages hold different tensors: their sums add up over the pipeline.
    double total = sums[0];
    all_reduce_host(m.grid->tp_comm, &total, 1, MPI_DOUBLE, MPI_SUM, "all-reduce of the gradient norm");
    total += sums[1];
    all_reduce_host(m.grid->pp_comm, &total, 1, MPI_DOUBLE, MPI_SUM, "all-reduce of the gradient norm");
    return std::sqrt(total);
}

// Gradient accumulation on one stage: micro-batch by micro-batch, forward then backward (what 1F1B is at one
// stage), the loss gradient scaled by 1/M (gpt.cu's head), the gradients summed in micro-batch order.
static float accumulate_micro_batches(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int M) {
    const int b = B_local / M;
    if (M < 1 || b * M != B_local) mm_fatal("forward_backward: %d sequences do not split into %d micro-batches", B_local, M);
    gpt_zero_grad(m);
    double loss = 0;
    for (int j = 0; j < M; j++) {
        gpt_begin_microbatch(m, j, M, inputs + (size_t)j * b * S, targets + (size_t)j * b * S, b, S, true);
        float l = 0;
        gpt_forward_chunk(m, j, 0, Tensor(), &l, nullptr);
        loss += l;
        if (j == 0) m.alloc->mark_peak();  // one micro-batch in flight, as many as ever (the memory report)
        gpt_backward_chunk(m, j, 0, Tensor());
    }
    return (float)(loss / M);  // each micro-batch's loss is a mean over the same number of targets
}

float forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches) {
    OffloadStep offload(m, micro_batches);  // --offload-activations: this step's plan (model/offload_model.h)
    if (m.stage.pp > 1) return pipeline_forward_backward(m, inputs, targets, B_local, S, micro_batches);
    return accumulate_micro_batches(m, inputs, targets, B_local, S, micro_batches);
}

StepStats train_step(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S,
                     const OptimConfig& opt, int step, float lr, int micro_batches) {
    StepStats st;
    m.step = step;
    const double t0 = MPI_Wtime(), wait0 = m.grid->pp_comm.counters.recv_wait_s;
    float local_loss = forward_backward(m, inputs, targets, B_local, S, micro_batches);
    st.pipeline_seconds = MPI_Wtime() - t0;
    st.recv_wait_seconds = m.grid->pp_comm.counters.recv_wait_s - wait0;
    sync_gradients(m);
    if (step == g_test_hooks.inject_nan_at_step && m.cfg.layers > 0 && m.stage.holds_layer(m.cfg.layers - 1)) {
        Tensor g = zero_sharded(m) ? zero_owned_gradient(m, P_ATTPROJW, m.cfg.layers - 1) : gpt_grad(m, P_ATTPROJW, m.cfg.layers - 1);
        if (g.n > 0) tensor_fill_f32(*m.ctx, g.slice(0, 1), NAN);  // (ZeRO-2/3: in the owners' pieces)
    }
    st.loss = (float)average_scalar(m.grid->dp_comm, local_loss);
    double norm = gradient_norm(m);
    st.grad_norm = (float)norm;
    // A NaN or Inf never reaches the weights or the moments: every rank sees the same (all-reduced) loss and
    // norm, so every rank skips together, and the caller decides whether to stop or go on.
    // (The verdict is also agreed on explicitly, so that a fault on one rank alone cannot split the job.)
    int any = !std::isfinite(st.loss) || !std::isfinite(norm);
    for (Comm* c : {&m.grid->tp_comm, &m.grid->cp_comm, &m.grid->dp_comm, &m.grid->pp_comm})  // the whole grid
        all_reduce_host(*c, &any, 1, MPI_INT, MPI_LOR, "all-reduce of the non-finite verdict");
    if (any) {
        st.applied = false;
        return st;
    }
    float scale = 1.0f;
    if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = (float)(opt.grad_clip / (norm + 1e-6));
    if (m.zero.on || zero_sharded(m)) {  // AdamW on this rank's shard, then (ZeRO-1/2) the weights all-gathered
        const AdamWStep a{lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, step, scale};
        if (m.zero.on) sharded_optimizer_step(weight_comm(*m.grid), *m.ctx, m.zero, gpt_model_states(m), a);
        else zero_model_optimizer_step(m, a);  // ZeRO-2/3 (model/zero_model.h)
        return st;
    }
    // AdamW on every tensor, the bf16 compute copy written in the same pass (fp32: the weights are the master).
    TraceScope span(TraceThread::Compute, "optimizer", "AdamW");  // --trace (layers/trace.h)
    const bool bf16 = m.weights.data != m.master.data;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const int64_t off = m.offsets[id], n = m.sizes[id];
        adamw_update_fused(*m.ctx, m.master.slice(off, n), bf16 ? m.weights.slice(off, n) : Tensor(), gpt_grad(m, id),
                           m.adam_m.slice(off, n), m.adam_v.slice(off, n), n, lr, opt.beta1, opt.beta2, opt.eps,
                           param_decays(id) ? opt.weight_decay : 0.f, step, scale);
    }
    return st;
}

std::string first_nonfinite_gradient(GPT& m) {
    // Ordinal of a (tensor, layer) pair in llm.c order: per-layer tensors count once per layer.
    // A stage checks the (tensor, layer) pairs it holds, numbered as in the whole model.
    int ordinal = 0, first = INT32_MAX;
    for (int id = 0; id < NUM_PARAM_TENSORS && first == INT32_MAX; id++) {
        bool per_layer = is_layer_param(id);
        for (int l = 0; l < (per_layer ? m.cfg.layers : 1); l++, ordinal++) {
            const bool held = per_layer ? m.stage.holds_layer(l) : m.stage.holds(id);
            // (with the distributed optimizer only the owned shard holds the reduced gradient: look there)
            const int at = per_layer ? l : -1;
            const Tensor g = !held ? Tensor() : zero_sharded(m) ? zero_owned_gradient(m, id, at) : owned_part(m.zero, m.grads, gpt_grad(m, id, at));
            if (held && !std::isfinite(sum_of_squares(*m.ctx, g))) {
                first = ordinal;
                break;
            }
        }
    }
    // The smallest ordinal over the grid, and the lowest rank holding it.
    struct { int value, rank; } all_min = {first, m.grid->rank};
    for (Comm* c : {&m.grid->tp_comm, &m.grid->cp_comm, &m.grid->dp_comm, &m.grid->pp_comm})  // MINLOC, group by group
        all_reduce_host(*c, &all_min, 1, MPI_2INT, MPI_MINLOC, "all-reduce of the first non-finite gradient");
    if (all_min.value == INT32_MAX) return "";
    ordinal = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        bool per_layer = is_layer_param(id);
        for (int l = 0; l < (per_layer ? m.cfg.layers : 1); l++, ordinal++)
            if (ordinal == all_min.value)
                return std::string(param_name(id)) + (per_layer ? " (layer " + std::to_string(l) + ")" : "") + " on rank " +
                       std::to_string(all_min.rank);
    }
    return "";
}

float eval_loss(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S) {
    // Evaluation runs the model without dropout (a deterministic estimate of the loss).
    float dropout = m.dropout;
    m.dropout = 0.f;
    float local = evaluation_forward(m, inputs, targets, B_local, S, false);
    m.dropout = dropout;
    return (float)average_scalar(m.grid->dp_comm, local);
}
