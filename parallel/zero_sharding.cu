// zero_sharding.cu — ZeRO-2 and ZeRO-3 over the data- (and context-) parallel ranks (see the header).
//
// Reading order: the unit layout and the states at rest; the views the model's layers read; the step (ZeRO-3's
// gathers, ZeRO-2's gradient buckets, the step's end, AdamW on the shard); the gradient norm's sums; the
// consolidation that keeps checkpoints in one format; the report line.
#include "zero_sharding.h"

#include <algorithm>
#include <climits>
#include "sequence_parallel.h"
#include "../layers/adamw.h"
#include "../layers/trace.h"

// ---- the unit layout ----------------------------------------------------------------------------------------
int ZeroSharding::unit(int layer) const {
    auto it = unit_of_layer.find(layer);
    if (it == unit_of_layer.end()) mm_fatal("ZeRO-%d: layer %d is not on this pipeline stage", stage, layer);
    return it->second;
}

// Rank r's piece of every unit, cut by tensor: [r·piece, (r+1)·piece) of each unit met with its segments.
static std::vector<ZeroSegment> owned_of(const ZeroSharding& z, int r) {
    std::vector<ZeroSegment> out;
    for (const ZeroUnit& u : z.units) {
        const int64_t lo_piece = r * u.piece, hi_piece = lo_piece + u.piece;
        for (const ZeroSegment& s : u.segs) {
            const int64_t lo = std::max(s.at, lo_piece), hi = std::min(s.at + s.n, hi_piece);
            if (hi <= lo) continue;
            out.push_back({s.id, s.layer, s.flat + (lo - s.at), u.shard_at + (lo - lo_piece), hi - lo});
        }
    }
    return out;
}

void zero_layout(ZeroSharding& z, int stage, int64_t n, const int64_t* offsets, const int64_t* sizes,
                 const std::vector<int>& layers, int d, int rank, DType weights, Device device) {
    z = ZeroSharding();
    if (stage < 2 || d <= 1) return;  // nothing to shard: every state whole (or ZeRO-1's own layout)
    z.stage = stage, z.d = d, z.rank = rank, z.n = n, z.weights = weights;
    const int64_t nl = (int64_t)layers.size();
    auto add = [&](ZeroUnit& u, int id, int layer, int64_t flat, int64_t count) {
        if (count > 0) u.segs.push_back({id, layer, flat, u.n, count}), u.n += count;
    };
    for (int64_t li = 0; li < nl; li++) {  // a layer's 12 tensors: the li-th slice of each stacked tensor
        ZeroUnit u;
        u.layer = layers[(size_t)li];
        for (int id = 0; id < NUM_PARAM_TENSORS; id++)
            if (is_layer_param(id)) add(u, id, u.layer, offsets[id] + li * (sizes[id] / nl), sizes[id] / nl);
        z.unit_of_layer[u.layer] = (int)z.units.size();
        z.units.push_back(u);
    }
    ZeroUnit edges;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++)
        if (!is_layer_param(id)) add(edges, id, -1, offsets[id], sizes[id]);
    if (edges.n > 0) z.edges = (int)z.units.size(), z.units.push_back(edges);
    for (ZeroUnit& u : z.units) {
        u.padded = (u.n + d - 1) / d * d;
        u.piece = u.padded / d;
        u.shard_at = z.shard;
        z.shard += u.piece;
        z.padded += u.padded;
    }
    z.owned = owned_of(z, rank);
    z.pool.reset(new ActivationAllocator(device));
    z.gathered.assign(z.units.size(), Tensor());
    z.gathered_users.assign(z.units.size(), 0);
    z.open_grads.assign(z.units.size(), Tensor());
    z.written.assign(z.units.size(), false);
}

static void count_live(size_t& live, size_t& peak, int64_t delta) {
    live = (size_t)((int64_t)live + delta);
    peak = std::max(peak, live);
}

ModelStates zero_states_allocate(ModelStateMemory& mem, ZeroSharding& z, Device device, DType dtype) {
    ModelStates s;
    // ZeRO-2: the compute weights whole (the forward and backward read them); ZeRO-3: the shard, gathered
    // per unit when a layer runs. In fp32 training the master IS the weights (model_state_memory.h).
    const int64_t weights = z.stage == 3 ? z.shard : z.n;
    if (dtype != DType::F32) {
        s.weights = mem.alloc(device, dtype, weights, kStateWeights);
        s.master = mem.alloc(device, DType::F32, z.shard, kStateMaster);
    } else {
        s.master = mem.alloc(device, DType::F32, weights, kStateMaster);
        s.weights = s.master;
    }
    s.grads = mem.alloc(device, DType::F32, z.shard, kStateGrads);
    s.adam_m = mem.alloc(device, DType::F32, z.shard, kStateMomentM);
    s.adam_v = mem.alloc(device, DType::F32, z.shard, kStateMomentV);
    if (z.edges >= 0) {  // held through every step: the embeddings' gradients are scatter-added into it
        z.edges_bucket = z.pool->alloc(DType::F32, z.units[(size_t)z.edges].padded, kModelLevel, "grad_bucket");
        count_live(z.bucket_live, z.bucket_peak, (int64_t)z.edges_bucket.bytes());
    }
    return s;
}

// ---- views -------------------------------------------------------------------------------------------------
static const ZeroSegment* find_segment(const ZeroUnit& u, int id) {
    for (const ZeroSegment& s : u.segs)
        if (s.id == id) return &s;
    return nullptr;
}

static int unit_of(const ZeroSharding& z, int id, int layer, const char* what) {
    if (is_layer_param(id) && layer < 0)
        mm_fatal("ZeRO-%d: %s of every layer of %s at once: under ZeRO-2/3 a layer's %s exist only while it runs",
                 z.stage, what, param_name(id), what);
    if (layer >= 0) return z.unit(layer);
    if (z.edges < 0) mm_fatal("ZeRO-%d: %s of %s: this pipeline stage holds no edge tensors", z.stage, what, param_name(id));
    return z.edges;
}

static Tensor view_of(const ZeroUnit& u, Tensor buffer, int id) {
    const ZeroSegment* s = find_segment(u, id);
    return s ? buffer.slice(s->at, s->n) : buffer.slice(0, 0);  // a tensor this stage does not hold: empty
}

Tensor zero_weight_view(const ZeroSharding& z, int id, int layer) {
    const int u = unit_of(z, id, layer, "weights");
    if (z.gathered[(size_t)u].empty())
        mm_fatal("ZeRO-3: the weights of %s (%s) are used while not gathered (a use outside the scopes that gather "
                 "them: model/zero_model.h)", param_name(id), layer >= 0 ? ("layer " + std::to_string(layer)).c_str() : "edges");
    return view_of(z.units[(size_t)u], z.gathered[(size_t)u], id);
}

Tensor zero_grad_view(const ZeroSharding& z, int id, int layer) {
    const int u = unit_of(z, id, layer, "gradients");
    const Tensor b = u == z.edges ? z.edges_bucket : z.open_grads[(size_t)u];
    // No bucket open (a forward's layer context names the gradients too): an empty view, which any op writing
    // into it refuses by name (check_tensor), so a write outside the backward cannot go unseen.
    return b.empty() ? Tensor() : view_of(z.units[(size_t)u], b, id);
}

// ---- the step -------------------------------------------------------------------------------------------------
void zero_begin_step(ZeroSharding& z, Ctx& ctx) {
    if (!z.edges_bucket.empty()) tensor_zero(ctx, z.edges_bucket);
    z.written.assign(z.units.size(), false);
    z.step = ZeroStepBytes();
    z.in_step = true;  // gathers count until the optimizer step (an evaluation's do not)
}

// The gather of unit u into a fresh buffer: this rank's piece of the weights shard to every rank.
static void issue_gather(Comm& c, Ctx& ctx, ZeroSharding& z, const ModelStates& s, int u, ZeroPass pass, bool async,
                         bool rerun) {
    const ZeroUnit& unit = z.units[(size_t)u];
    Tensor& g = z.gathered[(size_t)u];
    g = z.pool->alloc(s.weights.dtype, unit.padded, unit.layer >= 0 ? unit.layer : kModelLevel, "gathered");
    count_live(z.gathered_live, z.gathered_peak, (int64_t)g.bytes());
    const uint64_t before = c.counters.bytes[kAllGather];
    TraceLabel label(pass == ZeroPass::Forward ? "a unit's weights for its forward (ZeRO-3)" : "a unit's weights for its backward (ZeRO-3)");
    if (async) all_gather_async(c, ctx, g, s.weights.slice(unit.shard_at, unit.piece));
    else all_gather(c, ctx, g, s.weights.slice(unit.shard_at, unit.piece));
    const uint64_t moved = c.counters.bytes[kAllGather] - before;
    if (!z.in_step) return;
    (pass == ZeroPass::Forward ? z.step.forward_gather : z.step.backward_gather) += moved;
    (pass == ZeroPass::Forward ? z.step.forward_gathers : z.step.backward_gathers) += 1;
    if (rerun) z.step.rerun_gathers += 1;
}

// A prefetch still in flight is waited for before anything else runs on the communicator (one in flight:
// all_gather_async's events are the communicator's, collectives.h).
static void finish_prefetch(Comm& c, Ctx& ctx, ZeroSharding& z) {
    if (z.prefetching < 0) return;
    comm_wait(c, ctx);
    z.prefetching = -1;
}

void zero_gather(Comm& c, Ctx& ctx, ZeroSharding& z, const ModelStates& s, int u, ZeroPass pass, bool rerun) {
    if (z.stage != 3) return;
    if (z.gathered[(size_t)u].empty()) {
        finish_prefetch(c, ctx, z);
        issue_gather(c, ctx, z, s, u, pass, false, rerun);
    } else if (z.prefetching == u) {
        finish_prefetch(c, ctx, z);  // ctx.stream waits for the gather issued ahead
        if (rerun && z.in_step) z.step.rerun_gathers += 1;
    }
    z.gathered_users[(size_t)u] += 1;
}

void zero_prefetch(Comm& c, Ctx& ctx, ZeroSharding& z, const ModelStates& s, int u, ZeroPass pass) {
    if (z.stage != 3 || !z.gathered[(size_t)u].empty()) return;
    finish_prefetch(c, ctx, z);
    issue_gather(c, ctx, z, s, u, pass, true, false);
    z.prefetching = u;
}

void zero_release_gathered(ZeroSharding& z, int u) {
    if (z.stage != 3) return;
    int& users = z.gathered_users[(size_t)u];
    if (users <= 0) mm_fatal("ZeRO-3: unit %d released more often than gathered", u);
    if (--users > 0) return;
    count_live(z.gathered_live, z.gathered_peak, -(int64_t)z.gathered[(size_t)u].bytes());
    z.pool->release(z.gathered[(size_t)u]);  // a later gather into this block waits for ctx.stream (collectives.h)
}

Tensor zero_open_bucket(ZeroSharding& z, Ctx& ctx, int j, int u) {
    const ZeroUnit& unit = z.units[(size_t)u];
    Tensor& b = z.buckets[{j, u}];
    if (!b.empty()) mm_fatal("ZeRO-%d: the gradient bucket of unit %d, micro-batch %d, is open twice", z.stage, u, j);
    b = z.pool->alloc(DType::F32, unit.padded, unit.layer, "grad_bucket");
    count_live(z.bucket_live, z.bucket_peak, (int64_t)b.bytes());
    if (unit.padded > unit.n) tensor_zero(ctx, b.slice(unit.n, unit.padded - unit.n));  // the padding sums to 0
    z.open_grads[(size_t)u] = b;
    return b;
}

// Reduce-scatter a unit's bucket in place (rank r's summed piece lands on its own block) and write that piece
// into the shard: the first time in a step a copy, then an addition.
static void reduce_into_shard(Comm& dp, Ctx& ctx, ZeroSharding& z, Tensor grads, int u, Tensor bucket) {
    const ZeroUnit& unit = z.units[(size_t)u];
    Tensor mine = bucket.slice(z.rank * unit.piece, unit.piece), dst = grads.slice(unit.shard_at, unit.piece);
    const uint64_t before = dp.counters.bytes[kReduceScatter];
    TraceLabel label(u == z.edges ? "the edges' gradients (ZeRO-2/3)" : "a layer's gradients (ZeRO-2/3)");
    reduce_scatter(dp, ctx, mine, bucket);
    z.step.reduce_scatter += dp.counters.bytes[kReduceScatter] - before;
    z.step.reduce_scatters += 1;
    if (z.written[(size_t)u]) add_inplace(ctx, dst, mine);
    else tensor_convert(ctx, dst, mine);
    z.written[(size_t)u] = true;
}

void zero_reduce_bucket(Comm& dp, Comm& tp, bool sp_sum, Ctx& ctx, ZeroSharding& z, Tensor grads, int j, int u) {
    auto it = z.buckets.find({j, u});
    if (it == z.buckets.end()) mm_fatal("ZeRO-%d: no gradient bucket of unit %d for micro-batch %d", z.stage, u, j);
    Tensor bucket = it->second;
    if (sp_sum) {  // SP: the replicated tensors saw this rank's sequence shard only (sequence_parallel.h)
        int64_t offsets[NUM_PARAM_TENSORS] = {}, sizes[NUM_PARAM_TENSORS] = {};
        for (const ZeroSegment& s : z.units[(size_t)u].segs) offsets[s.id] = s.at, sizes[s.id] = s.n;
        sum_sequence_parallel_grads(tp, ctx, bucket, offsets, sizes);
    }
    reduce_into_shard(dp, ctx, z, grads, u, bucket);
    if (z.open_grads[(size_t)u].data == bucket.data) z.open_grads[(size_t)u] = Tensor();
    count_live(z.bucket_live, z.bucket_peak, -(int64_t)bucket.bytes());
    z.pool->release(it->second);
    z.buckets.erase(it);
}

void zero_edges_offsets(const ZeroSharding& z, int64_t offsets[NUM_PARAM_TENSORS], int64_t sizes[NUM_PARAM_TENSORS]) {
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) offsets[id] = sizes[id] = 0;
    if (z.edges < 0) return;
    for (const ZeroSegment& s : z.units[(size_t)z.edges].segs) offsets[s.id] = s.at, sizes[s.id] = s.n;
}

void zero_finish_gradients(Comm& dp, Ctx& ctx, ZeroSharding& z, Tensor grads) {
    if (!z.buckets.empty()) mm_fatal("ZeRO-%d: the step ended with %zu gradient buckets not reduce-scattered", z.stage, z.buckets.size());
    if (z.edges >= 0) reduce_into_shard(dp, ctx, z, grads, z.edges, z.edges_bucket);
    for (size_t u = 0; u < z.units.size(); u++)
        if (!z.written[u]) mm_fatal("ZeRO-%d: unit %zu got no gradient this step", z.stage, u);
    scale_inplace(ctx, grads, 1.0f / z.d);  // the same x · (1/d) as the all-reduce path (data_parallel.cu)
}

// ---- AdamW on the shard -------------------------------------------------------------------------------------
// ZeRO-2: every unit's pieces to every rank, into the whole buffer `whole` (bf16 compute weights, or the fp32
// master): its segments packed into a unit buffer, all-gathered in place, unpacked.
static void gather_whole(Comm& dp, Ctx& ctx, ZeroSharding& z, Tensor whole, bool count) {
    for (size_t u = 0; u < z.units.size(); u++) {
        const ZeroUnit& unit = z.units[u];
        Tensor g = z.pool->alloc(whole.dtype, unit.padded, unit.layer >= 0 ? unit.layer : kModelLevel, "gathered");
        count_live(z.gathered_live, z.gathered_peak, (int64_t)g.bytes());
        for (const ZeroSegment& s : unit.segs) tensor_convert(ctx, g.slice(s.at, s.n), whole.slice(s.flat, s.n));
        if (unit.padded > unit.n) tensor_zero(ctx, g.slice(unit.n, unit.padded - unit.n));
        const uint64_t before = dp.counters.bytes[kAllGather];
        TraceLabel label("the updated weights (ZeRO-2)");
        all_gather(dp, ctx, g, g.slice(z.rank * unit.piece, unit.piece));
        if (count) z.step.optimizer_gather += dp.counters.bytes[kAllGather] - before;
        for (const ZeroSegment& s : unit.segs) tensor_convert(ctx, whole.slice(s.flat, s.n), g.slice(s.at, s.n));
        count_live(z.gathered_live, z.gathered_peak, -(int64_t)g.bytes());
        z.pool->release(g);
    }
}

void zero_optimizer_step(Comm& dp, Ctx& ctx, ZeroSharding& z, const ModelStates& s, const AdamWStep& a) {
    {
        TraceScope span(TraceThread::Compute, "optimizer", "AdamW (ZeRO shard)",
                        trace_recording() ? "\"elements\":" + std::to_string(z.shard) : std::string());
        const bool bf16 = s.weights.data != s.master.data, whole_master = !bf16 && z.stage == 2;
        for (const ZeroSegment& o : z.owned) {
            // The master is the shard, except ZeRO-2 in fp32 (whole: it is the weights); the bf16 compute copy
            // is rounded in the same pass, into the whole weights (ZeRO-2) or the weight shard (ZeRO-3).
            Tensor master = whole_master ? s.master.slice(o.flat, o.n) : s.master.slice(o.at, o.n);
            Tensor compute = !bf16 ? Tensor() : z.stage == 3 ? s.weights.slice(o.at, o.n) : s.weights.slice(o.flat, o.n);
            adamw_update_fused(ctx, master, compute, s.grads.slice(o.at, o.n), s.adam_m.slice(o.at, o.n),
                               s.adam_v.slice(o.at, o.n), o.n, a.lr, a.beta1, a.beta2, a.eps,
                               param_decays(o.id) ? a.weight_decay : 0.f, a.t, a.grad_scale);
        }
    }
    if (z.stage == 2) gather_whole(dp, ctx, z, s.weights, true);  // fp32: weights == master (whole)
    z.in_step = false;
}

void zero_refresh_weights(Comm& dp, Ctx& ctx, ZeroSharding& z, const ModelStates& s) {
    if (s.weights.data == s.master.data) return;  // fp32: the master is the weights (whole, or the shard)
    if (z.stage == 3) return tensor_convert(ctx, s.weights, s.master);
    for (const ZeroSegment& o : z.owned) tensor_convert(ctx, s.weights.slice(o.flat, o.n), s.master.slice(o.at, o.n));
    gather_whole(dp, ctx, z, s.weights, false);
}

// ---- the gradient norm's sums and the NaN report --------------------------------------------------------------
std::vector<double> zero_sums_of_squares(Ctx& ctx, const ZeroSharding& z, Tensor grads) {
    std::vector<Tensor> parts;
    for (const ZeroSegment& o : z.owned) parts.push_back(grads.slice(o.at, o.n));
    const std::vector<double> ss = sums_of_squares(ctx, parts);
    std::vector<double> by_id(NUM_PARAM_TENSORS, 0.0);
    for (size_t i = 0; i < z.owned.size(); i++) by_id[(size_t)z.owned[i].id] += ss[i];
    return by_id;
}

Tensor zero_owned_grad(const ZeroSharding& z, Tensor grads, int id, int layer) {
    for (const ZeroSegment& o : z.owned)
        if (o.id == id && o.layer == layer) return grads.slice(o.at, o.n);
    return grads.slice(0, 0);
}

// ---- consolidation (checkpoints) ---------------------------------------------------------------------------
std::vector<float> zero_local_values(Comm& dp, const ZeroSharding& z, Tensor state) {
    if (state.n == z.n && state.n != z.shard) return tensor_to_host_f32(state);  // whole (ZeRO-2's weights)
    if (state.n != z.shard)
        mm_fatal("zero_local_values: a buffer of %lld elements is neither whole (%lld) nor a shard (%lld)",
                 (long long)state.n, (long long)z.n, (long long)z.shard);
    if (z.shard > INT_MAX) mm_fatal("zero_local_values: a shard of %lld elements exceeds one MPI call", (long long)z.shard);
    const std::vector<float> mine = tensor_to_host_f32(state);
    std::vector<float> all((size_t)z.shard * z.d), local((size_t)z.n, 0.f);
    MPI_CHECK(MPI_Allgather(mine.data(), (int)z.shard, MPI_FLOAT, all.data(), (int)z.shard, MPI_FLOAT, dp.mpi));
    for (int r = 0; r < z.d; r++)
        for (const ZeroSegment& o : owned_of(z, r))
            std::copy_n(all.begin() + (int64_t)r * z.shard + o.at, o.n, local.begin() + o.flat);
    return local;
}

void zero_load_local_values(const ZeroSharding& z, Tensor state, const float* local) {
    if (state.n == z.n && state.n != z.shard) return tensor_from_host_f32(state, local);
    std::vector<float> mine((size_t)z.shard, 0.f);  // the padding stays zero
    for (const ZeroSegment& o : z.owned) std::copy_n(local + o.flat, o.n, mine.begin() + o.at);
    tensor_from_host_f32(state, mine.data());
}

// ---- the report line -------------------------------------------------------------------------------------------
std::string zero_comm_line(const ZeroSharding& z) {
    if (!z.on()) return "";
    const ZeroStepBytes& b = z.step;
    // What the all-reduce of the ordinary path would move: the ring model's 2(d-1)/d of the fp32 gradients.
    const double allreduce = 2.0 * (z.d - 1) / z.d * 4.0 * (double)z.padded;
    char line[512];
    snprintf(line, sizeof line,
             "DP communication per step (ZeRO-%d, bytes sent per rank): reduce-scatter %.2f MB (%d calls) + forward "
             "gathers %.2f MB (%d) + backward gathers %.2f MB (%d, %d of them for a full-recompute rerun first) + "
             "optimizer all-gather %.2f MB = %.2f MB | an all-reduce of the fp32 gradients would move %.2f MB",
             z.stage, b.reduce_scatter / 1e6, b.reduce_scatters, b.forward_gather / 1e6, b.forward_gathers,
             b.backward_gather / 1e6, b.backward_gathers, b.rerun_gathers, b.optimizer_gather / 1e6, b.total() / 1e6,
             allreduce / 1e6);
    return line;
}
