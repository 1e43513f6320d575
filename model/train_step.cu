// train_step.cu — forward, backward, gradient synchronization, clipping, AdamW.
#include "train_step.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include "../layers/adamw.h"
#include "../parallel/data_parallel.h"
#include "../parallel/sequence_parallel.h"

void sync_gradients(GPT& m) {
    // Under SP the replicated parameters saw only this rank's sequence shard: sum their gradients over TP
    // (parallel/sequence_parallel.cu says which and why). Without SP they are already complete.
    if (m.grid->sp && !g_test_hooks.skip_sequence_parallel_sum)
        sum_sequence_parallel_grads(m.grid->tp_comm, *m.ctx, m.grads, m.offsets, m.sizes);
    // Then the mean over DP: all-reduced, or reduce-scattered to each shard's owner (distributed optimizer).
    if (m.zero.on) reduce_scatter_gradients(m);
    else average_gradients(m.grid->dp_comm, *m.ctx, m.grads);
}

double gradient_norm(GPT& m) {
    if (m.zero.on) return sharded_gradient_norm(m);  // from the owned shards (parallel/distributed_optimizer.cu)
    // All 16 sums are reduced on the device and come back together: one host synchronization per step.
    std::vector<Tensor> grads;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) grads.push_back(gpt_grad(m, id));
    const std::vector<double> ss = sums_of_squares(*m.ctx, grads);
    double split = 0, replicated = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        if (param_shard_kind(id) == ShardKind::Replicated) replicated += ss[id];
        else split += ss[id];
    }
    // Slices add up over the TP group; replicated tensors are identical on every rank: count them once.
    double total = split;
    if (m.grid->tp > 1) MPI_CHECK(MPI_Allreduce(&split, &total, 1, MPI_DOUBLE, MPI_SUM, m.grid->tp_comm.mpi));
    return std::sqrt(total + replicated);
}

float forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches,
                       const std::function<void()>& after_forward) {
    const int M = micro_batches, b = B_local / M;
    if (M < 1 || b * M != B_local) mm_fatal("forward_backward: %d sequences do not split into %d micro-batches", B_local, M);
    gpt_zero_grad(m);
    double loss = 0;
    for (int j = 0; j < M; j++) {
        // Micro-batch j: its sequences, placed at their global coordinates (dropout), gradient scaled by 1/M.
        m.micro = {j, M};
        const size_t first = (size_t)j * b * S;
        loss += gpt_forward(m, inputs + first, targets + first, b, S, true);
        if (j == 0 && after_forward) after_forward();
        gpt_backward(m);  // accumulates into m.grads; frees this micro-batch's activations
    }
    m.micro = {};
    return (float)(loss / M);  // each micro-batch's loss is a mean over the same number of targets
}

StepStats train_step(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S,
                     const OptimConfig& opt, int step, float lr, const std::function<void()>& after_forward,
                     int micro_batches) {
    StepStats st;
    m.step = step;
    float local_loss = forward_backward(m, inputs, targets, B_local, S, micro_batches, after_forward);
    sync_gradients(m);
    if (step == g_test_hooks.inject_nan_at_step && m.cfg.layers > 0)
        tensor_fill_f32(gpt_grad(m, P_ATTPROJW, m.cfg.layers - 1).slice(0, 1), NAN);
    st.loss = (float)average_scalar(m.grid->dp_comm, local_loss);
    double norm = gradient_norm(m);
    st.grad_norm = (float)norm;
    // A NaN or Inf never reaches the weights or the moments: every rank sees the same (all-reduced) loss and
    // norm, so every rank skips together, and the caller decides whether to stop or go on.
    // (The verdict is also agreed on explicitly, so that a fault on one rank alone cannot split the job.)
    int bad = !std::isfinite(st.loss) || !std::isfinite(norm), any_tp = bad, any = bad;
    if (m.grid->tp > 1) MPI_CHECK(MPI_Allreduce(&bad, &any_tp, 1, MPI_INT, MPI_LOR, m.grid->tp_comm.mpi));
    if (m.grid->dp > 1) MPI_CHECK(MPI_Allreduce(&any_tp, &any, 1, MPI_INT, MPI_LOR, m.grid->dp_comm.mpi));
    else any = any_tp;
    if (any) {
        st.applied = false;
        return st;
    }
    float scale = 1.0f;
    if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = (float)(opt.grad_clip / (norm + 1e-6));
    if (m.zero.on) {  // AdamW on this rank's shard, then the weights all-gathered
        sharded_optimizer_step(m, opt, step, lr, scale);
        return st;
    }
    // AdamW on every tensor, the bf16 compute copy written in the same pass (fp32: the weights are the master).
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
    int ordinal = 0, first = INT32_MAX;
    for (int id = 0; id < NUM_PARAM_TENSORS && first == INT32_MAX; id++) {
        bool per_layer = is_layer_param(id);
        for (int l = 0; l < (per_layer ? m.cfg.layers : 1); l++, ordinal++)
            // (with the distributed optimizer only the owned shard holds the reduced gradient: look there)
            if (!std::isfinite(sum_of_squares(*m.ctx, owned_part(m, gpt_grad(m, id, per_layer ? l : -1))))) {
                first = ordinal;
                break;
            }
    }
    // The smallest ordinal over the grid, and the lowest rank holding it (MINLOC over TP, then DP).
    struct { int value, rank; } mine = {first, m.grid->rank}, tp_min, all_min;
    MPI_CHECK(MPI_Allreduce(&mine, &tp_min, 1, MPI_2INT, MPI_MINLOC, m.grid->tp_comm.mpi));
    MPI_CHECK(MPI_Allreduce(&tp_min, &all_min, 1, MPI_2INT, MPI_MINLOC, m.grid->dp_comm.mpi));
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
    float local = gpt_forward(m, inputs, targets, B_local, S, false);
    m.dropout = dropout;
    return (float)average_scalar(m.grid->dp_comm, local);
}
