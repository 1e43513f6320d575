// gpt.cu — the model on one rank: weights, initialization, and the forward / backward of a step.
#include "gpt.h"
#include "../layers/test_hooks.h"
#include "offload_layers.h"           // activation offloading in the layer loops
#include "../parallel/zero_scopes.h"  // ZeRO-2/3 in the chunk and layer loops

#include <algorithm>
#include <cmath>
#include <cstring>
#include "../layers/adamw.h"
#include "../layers/cross_entropy.h"
#include "../layers/dropout.h"
#include "../layers/layernorm.h"
#include "../layers/linear.h"
#include "../layers/matmul.h"
#include "../layers/philox.h"
#include "../parallel/sequence_parallel.h"
#include "../parallel/zero_bubble_schedule.h"
#include "../parallel/vocab_parallel.h"

void gpt_create(GPT& m, const GPTConfig& cfg, ProcessGrid& grid, Ctx& ctx, ActivationAllocator& alloc, DType dtype,
                Recompute recompute, float dropout, uint64_t seed, int chunks, int zero_stage) {
    m.cfg = cfg;
    m.grid = &grid;
    m.ctx = &ctx;
    m.alloc = &alloc;
    m.dtype = dtype;
    m.recompute = recompute;
    m.dropout = dropout;
    m.seed = seed;
    m.stage = pipeline_stage(cfg, grid.pp, grid.pp_rank, chunks);
    local_param_sizes(cfg, grid.tp, m.tp_sizes);
    stage_param_sizes(m.stage, cfg, m.tp_sizes, m.sizes);
    m.n_params = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        m.offsets[i] = m.n_params;
        m.n_params += m.sizes[i];
    }
    // parallel/distributed_optimizer.cu: whole or sharded over DP.
    // The distributed optimizer shards over every rank that holds these weights: DP's and CP's.
    m.zero = optimizer_shard_layout(m.n_params, m.offsets, m.sizes, weight_ranks(grid), weight_rank(grid),
                                    zero_stage == 1);
    // ZeRO-2/3 (parallel/zero_sharding.h): the unit layout, and the states as shards.
    zero_layout(m.sharded, zero_stage, m.n_params, m.offsets, m.sizes, m.stage.layers, weight_ranks(grid),
                weight_rank(grid), dtype, ctx.device);
    const ModelStates s = m.sharded.on() ? zero_states_allocate(m.state_memory, m.sharded, ctx.device, dtype)
                                         : model_states_allocate(m.state_memory, m.zero, ctx.device, dtype);
    m.master = s.master, m.weights = s.weights, m.grads = s.grads, m.adam_m = s.adam_m, m.adam_v = s.adam_v;
}

void gpt_destroy(GPT& m) {
    ModelStates s = gpt_model_states(m);
    model_states_free(m.state_memory, s);
    m.master = m.weights = m.grads = m.adam_m = m.adam_v = Tensor();
    for (MicroBatchState& f : m.flight) {
        tensor_free(f.tokens);
        tensor_free(f.targets);
        embedding_index_free(f.emb_index);
    }
}

static Tensor param_view(const GPT& m, Tensor flat, int id, int layer) {
    int64_t off = m.offsets[id], n = m.sizes[id];
    if (layer >= 0) {
        if (!is_layer_param(id)) mm_fatal("param_view: %s is not a per-layer tensor", param_name(id));
        n /= (int64_t)m.stage.layers.size();
        off += n * m.stage.local_layer(layer);
    }
    return flat.slice(off, n);
}
// Under ZeRO-3 the weights are those of the gathered unit, under ZeRO-2/3 the gradients those of the open bucket.
Tensor gpt_param(GPT& m, int id, int layer) {
    return m.sharded.stage == 3 ? zero_weight_view(m.sharded, id, layer) : param_view(m, m.weights, id, layer);
}
Tensor gpt_grad(GPT& m, int id, int layer) {
    return m.sharded.on() ? zero_grad_view(m.sharded, id, layer) : param_view(m, m.grads, id, layer);
}

// ---- initialization -----------------------------------------------------------------------------------
// A standard normal from two counter-based uniforms (Box–Muller): element i of tensor id gets the same value
// whatever the parallel layout and however the loop is split across threads.
static float init_normal(uint64_t seed, uint32_t stream, uint64_t i) {
    PhiloxOut o = philox4x32_10((uint32_t)i, (uint32_t)(i >> 32), stream, 0x696e6974u /*"init"*/, (uint32_t)seed,
                                (uint32_t)(seed >> 32));
    double u1 = ((double)o.x[0] + 1.0) / 4294967297.0, u2 = (double)o.x[1] / 4294967296.0;
    return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void gpt_init_full(const GPTConfig& cfg, uint64_t seed, std::vector<float>& full) {
    int64_t sizes[NUM_PARAM_TENSORS];
    param_sizes(cfg, sizes);
    full.assign((size_t)param_count(cfg), 0.f);
    int64_t off = 0;
    const float std_resid = 0.02f / std::sqrt(2.0f * cfg.layers);  // GPT-2: residual projections scaled down
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        float* p = full.data() + off;
        int64_t n = sizes[id];
        bool weight = param_decays(id);  // matrices and embeddings: random; biases zero, LN gains one
        bool gain = id == P_LN1W || id == P_LN2W || id == P_LNFW;
        float std = (id == P_ATTPROJW || id == P_FCPROJW) ? std_resid : 0.02f;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) p[i] = weight ? std * init_normal(seed, 1000u + id, i) : (gain ? 1.f : 0.f);
        // Padded vocabulary rows are never used by a real token; keep them zero (as llm.c does).
        if (id == P_WTE)
            for (int64_t i = (int64_t)cfg.vocab * cfg.channels; i < n; i++) p[i] = 0.f;
        off += n;
    }
}

void gpt_refresh_compute_weights(GPT& m) {
    // With the distributed optimizer the master is sharded: a collective over DP.
    if (m.zero.on) return refresh_weights_from_shards(weight_comm(*m.grid), *m.ctx, m.zero, gpt_model_states(m));
    if (m.sharded.on()) return zero_refresh_weights(weight_comm(*m.grid), *m.ctx, m.sharded, gpt_model_states(m));
    if (m.weights.data != m.master.data) tensor_convert(*m.ctx, m.weights, m.master);
}

// This rank's part of a full llm.c-layout buffer: its TP slice of every tensor, then its stage's part of that.
static std::vector<float> local_part(const GPT& m, const float* full) {
    std::vector<float> slice((size_t)param_count_of(m.tp_sizes)), local((size_t)m.n_params);
    shard_params(m.cfg, m.grid->tp, m.grid->tp_rank, full, slice.data());
    stage_extract(m.stage, m.cfg, m.tp_sizes, slice.data(), local.data());
    return local;
}

// A state buffer from this rank's whole local values, keeping its shard under any ZeRO stage; and back.
static void load_local(GPT& m, Tensor state, const float* local) {
    if (m.sharded.on()) zero_load_local_values(m.sharded, state, local);
    else load_local_values(m.zero, state, local);
}
static std::vector<float> local_of(GPT& m, Tensor state) {
    if (m.sharded.on()) return zero_local_values(weight_comm(*m.grid), m.sharded, state);
    return local_values(weight_comm(*m.grid), m.zero, gpt_model_states(m), state);
}

void gpt_load_full(GPT& m, const float* full) {
    load_local(m, m.master, local_part(m, full).data());  // the DP shard of it with the distributed optimizer
    gpt_refresh_compute_weights(m);
    ctx_sync(*m.ctx);
}

void gpt_init_random(GPT& m, uint64_t seed) {
    std::vector<float> full;
    gpt_init_full(m.cfg, seed, full);
    gpt_load_full(m, full.data());
}

// The full llm.c-layout tensor from every rank's part: over the TP group first (each stage's tensors made
// whole), then over the pipeline, each stage contributing the tensors it owns (the word embedding: the first
// stage's copy, equal to the last's).
static void gather_full(GPT& m, Tensor flat, std::vector<float>& full) {
    // Gathered over DP with the distributed optimizer.
    std::vector<float> stage_local = local_of(m, flat);
    const int64_t n_slice = param_count_of(m.tp_sizes);
    std::vector<float> local((size_t)n_slice, 0.f);
    stage_insert(m.stage, m.cfg, m.tp_sizes, stage_local.data(), local.data(), false);
    full.assign((size_t)param_count(m.cfg), 0.f);
    int tp = m.grid->tp;
    std::vector<float> all((size_t)n_slice * tp);
    if (tp == 1) all = local;
    else MPI_CHECK(MPI_Allgather(local.data(), (int)n_slice, MPI_FLOAT, all.data(), (int)n_slice, MPI_FLOAT,
                                 m.grid->tp_comm.mpi));
    std::vector<const float*> locals;
    for (int r = 0; r < tp; r++) locals.push_back(all.data() + (size_t)r * n_slice);
    unshard_params(m.cfg, tp, locals, full.data());
    if (m.grid->pp == 1) return;
    int64_t sizes[NUM_PARAM_TENSORS];
    param_sizes(m.cfg, sizes);
    std::vector<float> pack;
    for (int s = 0; s < m.grid->pp; s++) {
        const PipelineStage st = pipeline_stage(m.cfg, m.grid->pp, s, m.stage.chunks);
        pack.resize((size_t)stage_owned_count(st, m.cfg, sizes));
        if (s == m.grid->pp_rank) stage_pack_owned(st, m.cfg, sizes, full.data(), pack.data());
        MPI_CHECK(MPI_Bcast(pack.data(), (int)pack.size(), MPI_FLOAT, s, m.grid->pp_comm.mpi));
        if (s != m.grid->pp_rank) stage_unpack_owned(st, m.cfg, sizes, pack.data(), full.data());
    }
}
void gpt_gather_full(GPT& m, std::vector<float>& full) { gather_full(m, m.master, full); }
void gpt_gather_full_grads(GPT& m, std::vector<float>& full) { gather_full(m, m.grads, full); }
void gpt_gather_full_optimizer(GPT& m, std::vector<float>& adam_m, std::vector<float>& adam_v) {
    gather_full(m, m.adam_m, adam_m);
    gather_full(m, m.adam_v, adam_v);
}
void gpt_load_full_optimizer(GPT& m, const float* adam_m, const float* adam_v) {
    load_local(m, m.adam_m, local_part(m, adam_m).data());
    load_local(m, m.adam_v, local_part(m, adam_v).data());
    ctx_sync(*m.ctx);
}

void gpt_zero_grad(GPT& m) {
    // llm.c's order: wte, wpe, the 12 layer tensors, lnfw, lnfb, then the padding of the distributed
    // optimizer. The embeddings' gradients need zeros (a scatter-add writes them, and the tied wte gets two
    // uses); the final LayerNorm's and the padding are small.
    m.layer_grads_stale.assign((size_t)m.stage.chunks, true);
    if (m.sharded.on()) return zero_begin_step(m.sharded, *m.ctx);  // ZeRO-2/3: the edges' bucket, fresh pieces
    const int64_t layers_begin = m.offsets[P_LN1W], layers_end = m.offsets[P_LNFW];
    tensor_zero(*m.ctx, m.grads.slice(0, layers_begin));
    tensor_zero(*m.ctx, m.grads.slice(layers_end, m.grads.n - layers_end));
}

// ---- the step's shapes and one layer's context ---------------------------------------------------------
StepShape gpt_step_shape(const GPT& m, int B_local, int S, int j, int M) {
    const ProcessGrid& g = *m.grid;
    StepShape sh;
    sh.S = S;
    sh.B = B_local;
    // Context parallelism first (the CP rank's zigzag chunks), then SP's shard of those positions.
    sh.S_cp = S / g.cp;
    sh.cp_positions = cp_runs(S, g.cp, g.cp_rank);
    const SeqShard shard = sp_shard(sh.S_cp, g.tp, g.tp_rank, g.sp);
    sh.S_loc = shard.S_loc;
    sh.positions = runs_slice(sh.cp_positions, (int)shard.s_offset, shard.S_loc);
    sh.N_shard = sh.S_loc * B_local;
    sh.N_full = sh.S_cp * B_local;
    sh.V_local = m.cfg.padded_vocab / g.tp;
    sh.v_begin = (int64_t)g.tp_rank * sh.V_local;
    // DP rank r holds sequences [r·M·B, (r+1)·M·B) of the global batch; micro-batch j of them starts at j·B.
    sh.b_first = ((int64_t)g.dp_rank * M + j) * B_local;
    sh.B_global = (int64_t)g.dp * M * B_local;
    return sh;
}

// This rank's block of the global [S, B, C] activations outside the TP regions: its sequences of the global
// batch (DP, micro-batch) here, its positions (SP shard, CP chunks) run by run (sh.positions: each run's
// first position is its s_offset). Dropout masks are keyed by these global coordinates.
static DropoutCoords step_coords(const StepShape& sh) {
    DropoutCoords where;
    where.s_offset = sh.positions.first[0];
    where.b_offset = sh.b_first;
    where.B_total = sh.B_global;
    return where;
}

LayerContext gpt_layer_context(GPT& m, int l) { return gpt_layer_context(m, l, m.shape); }

LayerContext gpt_layer_context(GPT& m, int l, const StepShape& sh) {
    const ProcessGrid& g = *m.grid;
    LayerContext r;
    r.ctx = m.ctx;
    r.alloc = m.alloc;
    r.region.tp = &m.grid->tp_comm;
    r.region.sp = g.sp;
    r.region.alloc = m.alloc;
    r.region.layer = l;
    r.dtype = m.dtype;
    r.attention = m.attention;
    r.layer = l;
    r.S = sh.S_cp;
    r.B = sh.B;
    r.C = m.cfg.channels;
    r.S_loc = sh.S_loc;
    r.positions = sh.positions;
    if (g.cp > 1) r.flash = ring_attention_core(m.grid->cp_comm, *m.alloc, l, sh.S);  // context parallelism
    int hd = m.cfg.channels / m.cfg.heads, nh = m.cfg.heads / g.tp;
    r.C_loc = nh * hd;
    r.F_loc = 4 * m.cfg.channels / g.tp;
    r.attn.S = sh.S_cp;
    r.attn.B = sh.B;
    r.attn.NH = nh;
    r.attn.HD = hd;
    r.where = step_coords(sh);
    r.attn.b_offset = r.where.b_offset;
    r.attn.B_total = r.where.B_total;
    r.attn.head_offset = (int64_t)g.tp_rank * nh;
    r.attn.NH_total = m.cfg.heads;
    r.dropout = m.dropout;
    r.seed = dropout_step_seed(m.seed, (uint64_t)m.step);
    Tensor* w[] = {&r.w.ln1w, &r.w.ln1b, &r.w.qkvw, &r.w.qkvb, &r.w.attprojw, &r.w.attprojb,
                   &r.w.ln2w, &r.w.ln2b, &r.w.fcw,  &r.w.fcb,  &r.w.fcprojw,  &r.w.fcprojb};
    Tensor* gr[] = {&r.g.ln1w, &r.g.ln1b, &r.g.qkvw, &r.g.qkvb, &r.g.attprojw, &r.g.attprojb,
                    &r.g.ln2w, &r.g.ln2b, &r.g.fcw,  &r.g.fcb,  &r.g.fcprojw,  &r.g.fcprojb};
    for (int i = 0; i < 12; i++) {
        *w[i] = gpt_param(m, P_LN1W + i, l);
        *gr[i] = gpt_grad(m, P_LN1W + i, l);
    }
    return r;
}

static void upload_i32(Ctx& ctx, Tensor& dst, const std::vector<int32_t>& host) {
    if (dst.n != (int64_t)host.size()) {
        tensor_free(dst);
        dst = tensor_alloc(ctx.device, DType::I32, (int64_t)host.size());
    }
    Tensor src;
    src.data = (void*)host.data();
    src.n = (int64_t)host.size();
    src.dtype = DType::I32;
    src.device = Device::CPU;
    tensor_copy(ctx, dst, src);
}

void gpt_release_activations(GPT& m) {
    ActivationAllocator& A = *m.alloc;
    for (MicroBatchState& f : m.flight) {
        for (auto& sl : f.saved) release_saved(sl, A);
        Tensor* t[] = {&f.embed_drop_mask, &f.lnf_mean, &f.lnf_rstd, &f.lmhead_in, &f.logits, &f.ce_rowmax,
                       &f.ce_sumexp, &f.lnf_in};
        for (Tensor* x : t) A.release(*x);
    }
}

// The device scratch the ops of a step take (ctx_scratch, runtime.h), reserved before the step's first kernel:
// grown later, it would free its old block inside the step (cudaFree waits for the whole device, streams
// of communication included), in step 1's backward. Each size is the op's own count (layers/*.h) at this
// shape's rows (N_shard outside the TP regions, N_full inside) and widths (C, 3C/t, 4C/t).
static void reserve_step_scratch(GPT& m, const StepShape& sh) {
    if (m.ctx->device != Device::CUDA) return;
    const int C = m.cfg.channels, t = m.grid->tp;
    size_t bytes = gemm_batched_scratch_bytes(sh.B, m.cfg.heads / t);  // core attention's batched GEMMs
    for (int rows : {sh.N_shard, sh.N_full}) {
        bytes = std::max(bytes, layernorm_backward_scratch_bytes(rows, C));
        for (int cols : {C, 3 * C / t, 4 * C / t}) bytes = std::max(bytes, bias_backward_scratch_bytes(rows, cols));
    }
    std::vector<int64_t> norm_parts(m.sizes, m.sizes + NUM_PARAM_TENSORS);  // the gradient norm's tensors
    if (m.sharded.on()) norm_parts.clear();                                // (ZeRO-2/3: the owned pieces)
    for (const ZeroSegment& o : m.sharded.owned) norm_parts.push_back(o.n);
    bytes = std::max(bytes, sums_of_squares_scratch_bytes(norm_parts));
    if (m.attention == Attention::Flash)  // the backward's D = rowsum(dO ⊙ O)
        bytes = std::max(bytes, flash_attention_scratch_bytes(sh.S_cp, sh.B, m.cfg.heads / t));
    ctx_scratch(*m.ctx, bytes);  // a no-op once it is large enough (every later micro-batch and step)
}

void gpt_begin_microbatch(GPT& m, int j, int M, const int32_t* inputs, const int32_t* targets, int B_local, int S,
                          bool keep) {
    if ((int)m.flight.size() <= j) m.flight.resize((size_t)j + 1);
    MicroBatchState& f = m.flight[(size_t)j];
    f.saved.resize(m.stage.layers.size());
    f.count = M;
    f.shape = gpt_step_shape(m, B_local, S, j, M);
    m.shape = f.shape;
    reserve_step_scratch(m, f.shape);
    const int N_full = f.shape.N_full;
    // The tokens feed the first stage, the targets the last. The loader gives [B, S]; the activations are
    // [S, B, C] (sequence-major), so transpose the tokens once. Under CP the rank keeps its positions only
    // (its two zigzag chunks), each token and target at its global position.
    std::vector<int32_t> tok(N_full), tgt(N_full);
    for (int s = 0; s < f.shape.S_cp; s++) {
        const int64_t at = runs_position(f.shape.cp_positions, s);
        for (int b = 0; b < B_local; b++) {
            tok[(size_t)s * B_local + b] = inputs[(size_t)b * S + at];
            tgt[(size_t)s * B_local + b] = targets[(size_t)b * S + at];
        }
    }
    if (m.stage.first()) {
        upload_i32(*m.ctx, f.tokens, tok);
        if (keep) embedding_index_build(f.emb_index, tok.data(), N_full, f.shape.v_begin, f.shape.V_local, *m.ctx);
    }
    if (m.stage.last()) upload_i32(*m.ctx, f.targets, tgt);
}

// The embeddings (first virtual stage): vocab-parallel lookup, summed over TP (f̄) or reduce-scattered into
// sequence shards (ḡ); position embeddings of the global positions of this shard; dropout with its mask saved.
// The result is the first layer's input.
static Tensor embed_forward(GPT& m, MicroBatchState& f, int first_layer, bool no_layers) {
    Ctx& ctx = *m.ctx;
    ActivationAllocator& A = *m.alloc;
    const StepShape& sh = f.shape;
    const int C = m.cfg.channels;
    Region region{&m.grid->tp_comm, m.grid->sp, m.alloc, kModelLevel};
    Tensor x = A.alloc(m.dtype, (int64_t)sh.N_shard * C, no_layers ? kModelLevel : first_layer, no_layers ? "lnf_in" : "ln1_in");
    vocab_parallel_embedding_forward(region, ctx, x, f.tokens, gpt_param(m, P_WTE), sh.v_begin, sh.V_local, sh.N_full, C);
    f.embed_drop_mask = A.alloc(DType::U8, (int64_t)sh.N_shard * C, kModelLevel, "embed_drop_mask");
    // Position embeddings and dropout by global position, run by run (two runs under CP).
    for_each_run(sh.positions, [&](int local, int64_t global, int len) {
        const int64_t at = (int64_t)local * sh.B * C;
        position_embedding_forward(ctx, x.slice(at, (int64_t)len * sh.B * C), gpt_param(m, P_WPE), global, len, sh.B, C);
    });
    bias_dropout_residual_runs(ctx, x, f.embed_drop_mask, x, Tensor(), Tensor(), m.dropout,
                               dropout_step_seed(m.seed, (uint64_t)m.step), kEmbeddingStream, sh.positions, sh.B, C,
                               step_coords(sh));
    return x;
}

// The final layer norm (on the shard under SP), then the LM head: a column-parallel linear over the
// vocabulary with the tied token table, producing this rank's slice of the fp32 logits; then the loss.
static float head_forward(GPT& m, MicroBatchState& f, Tensor x, std::vector<float>* token_losses) {
    Ctx& ctx = *m.ctx;
    ActivationAllocator& A = *m.alloc;
    const StepShape& sh = f.shape;
    const int C = m.cfg.channels, N_shard = sh.N_shard, N_full = sh.N_full;
    Region region{&m.grid->tp_comm, m.grid->sp, m.alloc, kModelLevel};
    f.lnf_in = x;
    f.lnf_mean = A.alloc(DType::F32, N_shard, kModelLevel, "lnf_mean");
    f.lnf_rstd = A.alloc(DType::F32, N_shard, kModelLevel, "lnf_rstd");
    f.lmhead_in = A.alloc(m.dtype, (int64_t)N_shard * C, kModelLevel, "lmhead_in");
    layernorm_forward(ctx, f.lmhead_in, f.lnf_mean, f.lnf_rstd, f.lnf_in, gpt_param(m, P_LNFW), gpt_param(m, P_LNFB),
                      N_shard, C);
    f.logits = A.alloc(DType::F32, (int64_t)N_full * sh.V_local, kModelLevel, "logits");
    column_parallel_forward(region, ctx, f.logits, f.lmhead_in, gpt_param(m, P_WTE), Tensor(), N_full, C, sh.V_local);

    f.ce_rowmax = A.alloc(DType::F32, N_full, kModelLevel, "ce_rowmax");
    f.ce_sumexp = A.alloc(DType::F32, N_full, kModelLevel, "ce_sumexp");
    Tensor target_logit = A.alloc(DType::F32, N_full, kModelLevel, "tmp:target_logit");
    Tensor losses = A.alloc(DType::F32, N_full, kModelLevel, "tmp:losses");
    std::vector<float> l;  // the per-position losses, [S, B], when the caller asked for them
    float loss = vocab_parallel_cross_entropy(m.grid->tp_comm, ctx, f.logits, f.targets, f.ce_rowmax, f.ce_sumexp,
                                              target_logit, losses, N_full, sh.V_local, sh.v_begin, m.cfg.vocab,
                                              token_losses ? &l : nullptr);
    if (token_losses) cp_token_losses(m.grid->cp_comm, l, sh.S, sh.B, token_losses);  // back to the loader's [B, S]
    loss = cp_mean_loss(m.grid->cp_comm, loss);  // the whole sequences' mean (c = 1: this rank's)
    A.release(target_logit);
    A.release(losses);
    return loss;
}

// What ZeRO's scopes in the loops below read of the model (parallel/zero_scopes.h).
static ZeroLoop zero_loop(GPT& m) {
    return {m.sharded, *m.ctx, *m.grid, m.stage, gpt_model_states(m), m.recompute == Recompute::Full, m.schedule};
}

Tensor gpt_forward_chunk(GPT& m, int j, int chunk, Tensor x, float* loss, std::vector<float>* token_losses) {
    MicroBatchState& f = m.flight[(size_t)j];
    ActivationAllocator& A = *m.alloc;
    const PipelineStage& st = m.stage;
    const int v = st.virtual_stage(chunk), b = st.chunk_begin(chunk), e = st.chunk_end(chunk);
    const bool first = v == 0, last = v == st.num_virtual() - 1;
    ZeroChunkScope zero_chunk(zero_loop(m), chunk, ZeroPass::Forward);  // ZeRO-3: the edges gathered
    if (first) x = embed_forward(m, f, b, last && b == e);
    for (int l = b; l < e; l++) {
        ZeroLayerScope zero(zero_loop(m), j, chunk, l, ZeroPass::Forward);  // ZeRO-3: this layer's weights gathered
        LayerContext run = gpt_layer_context(m, l, f.shape);
        SavedLayer& saved = f.saved[(size_t)st.local_layer(l)];
        saved.ln1_in = x;
        // The output is the next layer's saved input, the final norm's input, or what goes to the next stage.
        const bool end = l + 1 == e;
        const int level = end ? kModelLevel : l + 1;
        const char* tag = !end ? "ln1_in" : last ? "lnf_in" : "tmp:stage_out";
        Tensor out = A.alloc(m.dtype, (int64_t)f.shape.N_shard * m.cfg.channels, level, tag);
        layer_forward(run, saved, out, m.recompute);
        offload_after_forward(m.offload, st, j, chunk, l, saved);  // --offload-activations: to the host
        x = out;
    }
    if (!last) return x;
    *loss = head_forward(m, f, x, token_losses);
    return Tensor();
}

// The loss's gradient back through the head and the final layer norm: the gradient of the last layer's output.
static Tensor head_backward(GPT& m, MicroBatchState& f) {
    Ctx& ctx = *m.ctx;
    ActivationAllocator& A = *m.alloc;
    const StepShape& sh = f.shape;
    const int C = m.cfg.channels, N_shard = sh.N_shard, N_full = sh.N_full;
    Region region{&m.grid->tp_comm, m.grid->sp, m.alloc, kModelLevel};
    // The step's loss is the mean over this rank's targets of all its micro-batches: d loss / d logits =
    // (softmax - onehot) / (N_full · M), N_full targets per micro-batch (llm.c's 1/(B·T·accumulation)).
    const float inv_targets = g_test_hooks.skip_microbatch_scale ? 1.0f / N_full : 1.0f / ((float)N_full * f.count);
    Tensor dlogits = A.alloc(m.dtype, (int64_t)N_full * sh.V_local, kModelLevel, "tmp:dlogits");
    ce_backward(ctx, dlogits, f.logits, f.ce_rowmax, f.ce_sumexp, f.targets, inv_targets, N_full, sh.V_local,
                sh.v_begin, m.cfg.vocab);
    A.release(f.logits);
    A.release(f.ce_rowmax);
    A.release(f.ce_sumexp);
    Tensor dlnf = A.alloc(m.dtype, (int64_t)N_shard * C, kModelLevel, "tmp:dlmhead_in");
    column_parallel_backward(region, ctx, dlnf, gpt_grad(m, P_WTE), Tensor(), dlogits, f.lmhead_in, gpt_param(m, P_WTE),
                             N_full, C, sh.V_local);
    A.release(dlogits);
    A.release(f.lmhead_in);

    Tensor dresid = A.alloc(m.dtype, (int64_t)N_shard * C, kModelLevel, "tmp:dresidual");
    tensor_zero(ctx, dresid);
    layernorm_backward(ctx, dresid, gpt_grad(m, P_LNFW), gpt_grad(m, P_LNFB), dlnf, f.lnf_in, gpt_param(m, P_LNFW),
                       f.lnf_mean, f.lnf_rstd, N_shard, C);
    A.release(dlnf);
    A.release(f.lnf_mean);
    A.release(f.lnf_rstd);
    A.release(f.lnf_in);
    return dresid;
}

// The embeddings' backward: the first layer's input gradient into the word and position tables.
static void embed_backward(GPT& m, MicroBatchState& f, Tensor dresid) {
    Ctx& ctx = *m.ctx;
    const StepShape& sh = f.shape;
    const int C = m.cfg.channels;
    Region region{&m.grid->tp_comm, m.grid->sp, m.alloc, kModelLevel};
    dropout_backward(ctx, dresid, dresid, f.embed_drop_mask, m.dropout, (int64_t)sh.N_shard * C);
    m.alloc->release(f.embed_drop_mask);
    for_each_run(sh.positions, [&](int local, int64_t global, int len) {
        const int64_t at = (int64_t)local * sh.B * C;
        position_embedding_backward(ctx, gpt_grad(m, P_WPE), dresid.slice(at, (int64_t)len * sh.B * C), global, len,
                                    sh.B, C);
    });
    vocab_parallel_embedding_backward(region, ctx, gpt_grad(m, P_WTE), dresid, f.emb_index, sh.N_full, C);
}

Tensor gpt_backward_chunk(GPT& m, int j, int chunk, Tensor dout) {
    MicroBatchState& f = m.flight[(size_t)j];
    const PipelineStage& st = m.stage;
    const int v = st.virtual_stage(chunk), b = st.chunk_begin(chunk), e = st.chunk_end(chunk);
    const bool first = v == 0, last = v == st.num_virtual() - 1;
    ZeroChunkScope zero_chunk(zero_loop(m), chunk, ZeroPass::Backward);  // ZeRO-3: the edges gathered for the head
    Tensor dresid = last ? head_backward(m, f) : dout;  // updated in place, layer by layer, down to the input
    // The chunk's first backward of the step overwrites its layers' gradients; later micro-batches add.
    const bool stale = chunk < (int)m.layer_grads_stale.size() && m.layer_grads_stale[(size_t)chunk];
    const bool split = is_zero_bubble(m.schedule) && st.pp > 1;  // B now, the layers' W later
    for (int l = e - 1; l >= b; l--) {
        ZeroLayerScope zero(zero_loop(m), j, chunk, l, ZeroPass::Backward);  // ZeRO-2/3: its bucket; ZeRO-3: weights
        reload_before_backward(m.offload, st, j, chunk, l, f.saved);  // offloaded activations back, the next one issued
        LayerContext run = gpt_layer_context(m, l, f.shape);
        run.grads = stale || zero.fresh_bucket() ? GradWrite::Overwrite : GradWrite::Accumulate;
        WeightGradDeferral defer(split ? &m.weight_grads : nullptr, *m.ctx, *m.alloc, j, chunk, l);
        layer_backward(run, f.saved[(size_t)st.local_layer(l)], dresid, m.recompute);
    }
    if (stale) m.layer_grads_stale[(size_t)chunk] = false;
    if (!first) return dresid;
    embed_backward(m, f, dresid);
    m.alloc->release(dresid);
    return Tensor();
}

void gpt_weight_gradients(GPT& m, int j, int chunk) {
    if (g_test_hooks.drop_first_weight_pass && j == 0) return m.weight_grads.discard(j, chunk);  // negative control
    m.weight_grads.run(*m.ctx, j, chunk);
    zero_after_weight_pass(zero_loop(m), j, chunk);  // ZeRO-2/3: the chunk's layers' gradients are complete now
}

// ---- the forward and backward of a whole batch on one stage ----------------------------------------------
// The batch as micro-batch 0 of 1 through this rank's whole model: the embeddings, the layers, the head and
// the loss, then back. Only at pp 1 does a rank hold the whole model; at pp > 1 the forward passes through
// every stage (model/pipeline_ops.h) and a step runs the pipeline schedule (model/pipeline_step.h).
float gpt_forward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, bool keep,
                  std::vector<float>* token_losses) {
    if (m.stage.pp > 1) mm_fatal("gpt_forward: this rank holds one of %d pipeline stages; use forward_through_stages", m.stage.pp);
    gpt_begin_microbatch(m, 0, 1, inputs, targets, B_local, S, keep);
    float loss = 0;
    gpt_forward_chunk(m, 0, 0, Tensor(), &loss, token_losses);
    if (!keep) gpt_release_activations(m);
    return loss;
}

void gpt_backward(GPT& m) {
    if (m.stage.pp > 1) mm_fatal("gpt_backward: this rank holds one of %d pipeline stages; a step runs the schedule", m.stage.pp);
    gpt_backward_chunk(m, 0, 0, Tensor());
}
