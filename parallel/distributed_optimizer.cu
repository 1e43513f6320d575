// distributed_optimizer.cu — ZeRO-1 over the data-parallel group (see the header for the design).
//
// Reading order: the shard layout, allocation, the three steps of an optimizer step (reduce-scatter, AdamW on
// the shard, all-gather; between them the trainer takes the norm of the owned parts), then consolidation for
// checkpoints and the reports.
#include "distributed_optimizer.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include "../layers/adamw.h"
#include "../layers/trace.h"

// ---- the shard layout ----------------------------------------------------------------------------------
OptimizerShard optimizer_shard_layout(int64_t n, const int64_t* offsets, const int64_t* sizes, int d, int rank,
                                      bool distributed) {
    OptimizerShard s;
    s.on = distributed && d > 1;
    s.d = s.on ? d : 1;
    s.rank = s.on ? rank : 0;
    s.n = n;
    s.padded = (n + s.d - 1) / s.d * s.d;
    s.shard = s.padded / s.d;
    s.begin = (int64_t)s.rank * s.shard;
    const int64_t end = s.begin + s.shard;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const int64_t lo = std::max(offsets[id], s.begin), hi = std::min(offsets[id] + sizes[id], end);
        s.own_begin[id] = lo;
        s.own_n[id] = hi > lo ? hi - lo : 0;
    }
    return s;
}

// ---- allocation ------------------------------------------------------------------------------------------
ModelStates model_states_allocate(ModelStateMemory& mem, const OptimizerShard& z, Device device, DType dtype) {
    ModelStates s;
    // Weights and gradients are whole (padded to P, so that the collectives see d equal blocks in place).
    // The fp32 weights are the master weights in fp32 training; in bf16 the master exists as the shard only
    // (what Megatron-LM's distributed optimizer holds too: bf16 model weights and fp32 gradients whole, the
    // fp32 master copy and the moments of its shard; its gradient buffer is whole as well, ZeRO-1).
    if (dtype != DType::F32) {
        s.weights = mem.alloc(device, dtype, z.padded, kStateWeights);
        s.master = mem.alloc(device, DType::F32, z.shard, kStateMaster);  // z.shard == n without sharding
    } else {
        s.master = mem.alloc(device, DType::F32, z.padded, kStateMaster);
        s.weights = s.master;
    }
    s.grads = mem.alloc(device, DType::F32, z.padded, kStateGrads);
    s.adam_m = mem.alloc(device, DType::F32, z.shard, kStateMomentM);
    s.adam_v = mem.alloc(device, DType::F32, z.shard, kStateMomentV);
    return s;
}

void model_states_free(ModelStateMemory& mem, ModelStates& s) {
    if (s.weights.data != s.master.data) mem.release(s.weights, kStateWeights);
    s.weights = Tensor();
    mem.release(s.master, kStateMaster);
    mem.release(s.grads, kStateGrads);
    mem.release(s.adam_m, kStateMomentM);
    mem.release(s.adam_v, kStateMomentV);
}

// ---- step 1: the gradients reduce-scattered --------------------------------------------------------------
static Tensor grad_shard(const OptimizerShard& z, Tensor grads) { return grads.slice(z.begin, z.shard); }

void reduce_scatter_gradients(Comm& dp, Ctx& ctx, OptimizerShard& z, Tensor grads) {
    const uint64_t before = dp.counters.bytes[kReduceScatter];
    // In place: rank r's block of the summed buffer lands on its own block (both backends allow it).
    Tensor mine = grad_shard(z, grads);
    TraceLabel label("the gradients' shards (distributed optimizer)");  // the timeline's name (--trace)
    reduce_scatter(dp, ctx, mine, grads);
    // The same float operation as average_gradients' all-reduce path: x · (1/d) after the sum.
    scale_inplace(ctx, mine, 1.0f / dp.size);
    z.step_reduce_scatter_bytes = dp.counters.bytes[kReduceScatter] - before;
}

Tensor owned_part(const OptimizerShard& z, Tensor grads, Tensor grad_view) {
    if (!z.on) return grad_view;
    const int64_t off = (const float*)grad_view.data - (const float*)grads.data;
    const int64_t lo = std::max(off, z.begin), hi = std::min(off + grad_view.n, z.begin + z.shard);
    return grads.slice(hi > lo ? lo : z.begin, hi > lo ? hi - lo : 0);
}

// ---- step 2: AdamW on the shard ------------------------------------------------------------------------------
// AdamW on this rank's shard: one span on the timeline (--trace), the all-gather after it its own event.
static void shard_adamw(Ctx& ctx, const OptimizerShard& z, const ModelStates& s, const AdamWStep& a) {
    TraceScope span(TraceThread::Compute, "optimizer", "AdamW (shard)",
                    trace_recording() ? "\"elements\":" + std::to_string(z.shard) : std::string());
    const bool bf16 = s.weights.data != s.master.data;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const int64_t at = z.own_begin[id], k = z.own_n[id], in_shard = at - z.begin;
        if (k == 0) continue;
        // bf16: the master is the shard (index from its start) and the new weight is rounded into the compute
        // copy in the same pass; fp32: the master is whole (flat index), nothing to round.
        Tensor master = bf16 ? s.master.slice(in_shard, k) : s.master.slice(at, k);
        Tensor compute = bf16 ? s.weights.slice(at, k) : Tensor();
        adamw_update_fused(ctx, master, compute, s.grads.slice(at, k), s.adam_m.slice(in_shard, k),
                           s.adam_v.slice(in_shard, k), k, a.lr, a.beta1, a.beta2, a.eps,
                           param_decays(id) ? a.weight_decay : 0.f, a.t, a.grad_scale);
    }
}

void sharded_optimizer_step(Comm& dp, Ctx& ctx, OptimizerShard& z, const ModelStates& s, const AdamWStep& a) {
    shard_adamw(ctx, z, s, a);
    // Step 3: every rank's updated shard to every rank, in place.
    const uint64_t before = dp.counters.bytes[kAllGather];
    TraceLabel label("the updated weights (distributed optimizer)");  // the all-gather's name on the timeline
    all_gather(dp, ctx, s.weights, s.weights.slice(z.begin, z.shard));
    z.step_all_gather_bytes = dp.counters.bytes[kAllGather] - before;
}

void refresh_weights_from_shards(Comm& dp, Ctx& ctx, const OptimizerShard& z, const ModelStates& s) {
    if (s.weights.data == s.master.data) return;  // fp32: the weights are the (whole) master
    tensor_convert(ctx, s.weights.slice(z.begin, z.shard), s.master);
    all_gather(dp, ctx, s.weights, s.weights.slice(z.begin, z.shard));
}

// ---- consolidation (checkpoints) ---------------------------------------------------------------------------
std::vector<float> local_values(Comm& dp, const OptimizerShard& z, const ModelStates& s, Tensor state) {
    if (!z.on) return tensor_to_host_f32(state);
    // A whole buffer (fp32 master) is already complete; the gradients are complete on the shard only (after
    // the reduce-scatter); the moments and the bf16 master are shards.
    Tensor part = state.data == s.grads.data ? grad_shard(z, s.grads) : state;
    std::vector<float> all;
    if (part.n == z.padded) {
        all = tensor_to_host_f32(part);
    } else {
        if (part.n != z.shard) mm_fatal("local_values: a buffer of %lld elements is neither whole (%lld) nor a shard (%lld)",
                                        (long long)part.n, (long long)z.padded, (long long)z.shard);
        if (z.shard > INT_MAX) mm_fatal("local_values: a shard of %lld elements exceeds one MPI call", (long long)z.shard);
        std::vector<float> mine = tensor_to_host_f32(part);
        all.resize((size_t)z.padded);
        MPI_CHECK(MPI_Allgather(mine.data(), (int)z.shard, MPI_FLOAT, all.data(), (int)z.shard, MPI_FLOAT, dp.mpi));
    }
    all.resize((size_t)z.n);  // the padding is not part of the model
    return all;
}

void load_local_values(const OptimizerShard& z, Tensor state, const float* local) {
    if (!z.on) return tensor_from_host_f32(state, local);
    std::vector<float> padded(local, local + z.n);
    padded.resize((size_t)z.padded, 0.f);
    if (state.n == z.padded) tensor_from_host_f32(state, padded.data());
    else tensor_from_host_f32(state, padded.data() + z.begin);
}

// ---- reports ------------------------------------------------------------------------------------------------
std::string model_states_by_rank(const ModelStateMemory& mem, const ModelStateFormula& f, MPI_Comm world) {
    const int64_t mine[4] = {mem.total(), f.total, mem.optimizer(f.bf16), f.n};
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    std::vector<int64_t> all((size_t)size * 4);
    MPI_CHECK(MPI_Gather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, 0, world));
    std::string out;
    if (rank != 0) return out;
    char b[200];
    for (int r = 0; r < size; r++) {
        const int64_t* x = &all[(size_t)r * 4];
        snprintf(b, sizeof b, "  rank %d: %lld parameters, model states %lld B measured, %lld B formula, optimizer state %lld B\n", r,
                 (long long)x[3], (long long)x[0], (long long)x[1], (long long)x[2]);
        out += b;
    }
    return out;
}

// ---- the communication line ------------------------------------------------------------------------------
std::string distributed_optimizer_comm_line(const OptimizerShard& z, DType weights) {
    if (!z.on) return "";
    // What the all-reduce of the ordinary path would move: the ring model's 2(d-1)/d of the fp32 gradients.
    const double allreduce = 2.0 * (z.d - 1) / z.d * 4.0 * (double)z.n;
    char b[320];
    snprintf(b, sizeof b,
             "DP communication per step (distributed optimizer, bytes sent per rank): reduce-scatter %.2f MB + all-gather "
             "%.2f MB (%s) = %.2f MB | an all-reduce of the fp32 gradients would move %.2f MB",
             z.step_reduce_scatter_bytes / 1e6, z.step_all_gather_bytes / 1e6, weights == DType::F32 ? "fp32" : "bf16",
             (z.step_reduce_scatter_bytes + z.step_all_gather_bytes) / 1e6, allreduce / 1e6);
    return b;
}
