// memory_techniques.cu — ZeRO's step bytes and buffers, offloading's bytes (see the header).
#include "memory_techniques.h"

#include <algorithm>

// The ring model's per-rank share of an all-gather or reduce-scatter of `bytes` over d ranks.
static double ring(double bytes, int d) { return d > 1 ? bytes * (d - 1) / d : 0; }

ZeroStepFormula zero_step_formula(const ZeroStepInput& in) {
    ZeroStepFormula f;
    const ZeroUnitSizes& u = in.units;
    const int d = in.d, M = in.micro_batches;
    const double w = in.weight_bytes, P = u.padded();
    f.all_reduce = 2 * ring(4 * P, d);
    if (in.stage < 1 || d <= 1) return f;
    if (in.stage == 1) {  // one reduce-scatter of the flat gradients, one all-gather of the updated weights
        f.reduce_scatter = ring(4 * P, d);
        f.reduce_scatters = 1;
        f.optimizer_gather = ring(w * P, d);
        return f;
    }
    // ZeRO-2/3: each layer's bucket per micro-batch, the edges' once per step.
    f.reduce_scatter = M * u.layers * ring(4 * u.layer, d) + ring(4 * u.edges, d);
    f.reduce_scatters = M * u.layers + (u.edges > 0 ? 1 : 0);
    f.bucket_peak = 4 * (u.edges + in.pending_buckets * u.layer);
    if (in.stage == 2) {
        f.optimizer_gather = ring(w * P, d);
        f.gathered_peak = w * std::max(u.layer, u.edges);
        return f;
    }
    const bool ef = u.edges_forward && u.edges > 0, eb = u.edges_backward && u.edges > 0;
    f.forward_gather = M * (u.layers * ring(w * u.layer, d) + (ef ? ring(w * u.edges, d) : 0));
    f.backward_gather = M * (u.layers * ring(w * u.layer, d) + (eb ? ring(w * u.edges, d) : 0));
    f.forward_gathers = M * (u.layers + (ef ? 1 : 0));
    f.backward_gathers = M * (u.layers + (eb ? 1 : 0));
    f.gathered_peak = w * ((ef || eb ? u.edges : 0) + std::min(2, u.layers_per_chunk) * u.layer);
    return f;
}

double layernorm_statistics_bytes(const LayerFormulaInput& in) {
    if (in.rc == Recompute::Full) return 0;
    const double tokens = in.s / (in.sp ? in.t : 1) * in.b;  // the rank's shard outside the TP regions
    return 4 * 4 * tokens;                                          // LN1 and LN2: mean and 1/σ, fp32
}

double offload_layer_bytes(const LayerFormulaInput& in) { return layer_bytes(in) + layernorm_statistics_bytes(in); }

double layer_train_flops(const LayerFormulaInput& in, int c) {
    // A CP rank computes its s/c queries (in.s) against all s keys: the attention term keeps the whole s.
    return 72.0 * in.b * in.s * in.h * in.h * (1 + in.s * c / (6 * in.h)) / in.t;
}
