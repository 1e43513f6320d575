// model_fixture.h — a tiny GPT on a process grid, synthetic batches, and comparison helpers for the
// parallel-vs-single-rank tests. Every test compares against a single-rank run of the same model on the
// same global batch (the reference runs on MPI_COMM_SELF inside the same program).
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include "../test_util.h"
#include "../../model/gpt.h"
#include "../../model/train_step.h"
#include "../../parallel/data_parallel.h"

struct ModelSpec {
    GPTConfig cfg;
    int tp = 1;
    bool sp = false;
    int pp = 1, chunks = 1;  // pipeline stages, model chunks per stage (interleaved schedule)
    int cp = 1;              // context parallelism (parallel/context_parallel.h; flash attention)
    PipeSchedule schedule = PipeSchedule::OneFOneB;
    Recompute rc = Recompute::None;
    Attention attention = Attention::Unfused;  // core attention's form (layers/flash_attention.h)
    DType dtype = DType::F32;
    Device device = Device::CPU;
    CommBackend backend = CommBackend::MPI;
    CommRules rules;  // --comm mpi-strict, --comm-timeout (parallel/comm.h)
    float dropout = 0.1f;
    uint64_t seed = 42;
    bool distributed_optimizer = false;  // ZeRO-1 over the DP group (parallel/distributed_optimizer.h)
    int zero = 0;                        // the ZeRO stage (2, 3: parallel/zero_sharding.h); 1 = distributed_optimizer
};

inline GPTConfig tiny_config(int layers = 2, int heads = 4, int hidden = 32, int vocab = 61, int padded = 64, int max_seq = 32) {
    GPTConfig c;
    c.layers = layers;
    c.heads = heads;
    c.channels = hidden;
    c.vocab = vocab;
    c.padded_vocab = padded;
    c.max_seq = max_seq;
    return c;
}

// A model with its context, allocator and grid, on the ranks of `comm`.
struct ModelHarness {
    Ctx ctx;
    std::unique_ptr<ActivationAllocator> alloc;
    ProcessGrid grid;
    GPT model;
    ModelHarness(const ModelSpec& s, MPI_Comm comm) {
        // One GPU per rank of the node when there are several (NCCL needs that); otherwise they share GPU 0. The
        // ranks of `comm` only: rank 0 alone builds the single-rank reference (MPI_COMM_SELF), and a collective
        // over MPI_COMM_WORLD there paired with the other ranks' next one (a hang at the loss curve on any GPU).
        int gpu = 0, ndev = 0;
        if (s.device == Device::CUDA && cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) gpu = local_rank(comm).rank % ndev;
        ctx = ctx_create(s.device, gpu);
        alloc.reset(new ActivationAllocator(s.device));
        grid = grid_create(comm, s.tp, s.sp, s.backend, ctx, s.pp, s.rules, s.cp);
        gpt_create(model, s.cfg, grid, ctx, *alloc, s.dtype, s.rc, s.dropout, s.seed, s.chunks,
                   std::max(s.zero, s.distributed_optimizer ? 1 : 0));
        model.schedule = s.schedule;
        model.attention = s.attention;
        gpt_init_random(model, s.seed);
    }
    ~ModelHarness() {
        gpt_destroy(model);
        grid_destroy(grid);
        ctx_destroy(ctx);
    }
};

// The global batch [B, S+1] of token ids for `step` (deterministic), and this DP rank's slice as
// inputs/targets [B_local, S].
struct Batch {
    std::vector<int32_t> inputs, targets;
};
inline Batch make_batch(const GPTConfig& cfg, int B, int S, int step, int dp, int dp_rank) {
    std::mt19937 rng(1000 + step);
    std::uniform_int_distribution<int> tok(0, cfg.vocab - 1);
    std::vector<int32_t> all((size_t)B * (S + 1));
    for (auto& t : all) t = tok(rng);
    int Bl = B / dp;
    Batch b;
    for (int i = dp_rank * Bl; i < (dp_rank + 1) * Bl; i++)
        for (int s = 0; s < S; s++) {
            b.inputs.push_back(all[(size_t)i * (S + 1) + s]);
            b.targets.push_back(all[(size_t)i * (S + 1) + s + 1]);
        }
    return b;
}

// One forward + backward + gradient synchronization (no optimizer step): the global loss and the full
// (gathered, llm.c-layout) gradients. The gradient buffer is filled with NaN first, as if an earlier step had
// left its values there: the step must zero or overwrite every one of them (gpt_zero_grad, GradWrite), and
// every test that compares these gradients shows that it does.
inline float loss_and_grads(ModelHarness& h, int B, int S, int step, std::vector<float>& full_grads, bool sum_sp = true,
                            int micro = 1, bool sum_tied = true) {
    GPT& m = h.model;
    tensor_fill_f32(m.grads, NAN);
    Batch b = make_batch(m.cfg, B, S, step, h.grid.dp, h.grid.dp_rank);
    // micro > 1: the rank's sequences as `micro` micro-batches, gradients accumulated (model/train_step.h).
    float local = forward_backward(m, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, micro);
    g_test_hooks.skip_sequence_parallel_sum = !sum_sp;
    g_test_hooks.skip_tied_embedding_sum = !sum_tied;
    sync_gradients(m);
    g_test_hooks.skip_sequence_parallel_sum = false;
    g_test_hooks.skip_tied_embedding_sum = false;
    float loss = (float)average_scalar(h.grid.dp_comm, local);
    gpt_gather_full_grads(m, full_grads);
    return loss;
}

// Training losses of `steps` optimizer steps.
inline std::vector<float> loss_curve(ModelHarness& h, int B, int S, int steps, int micro = 1) {
    OptimConfig oc;
    oc.weight_decay = 0.01f;
    std::vector<float> losses;
    for (int st = 1; st <= steps; st++) {
        Batch b = make_batch(h.model.cfg, B, S, st, h.grid.dp, h.grid.dp_rank);
        losses.push_back(train_step(h.model, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, oc, st, 1e-3f, micro).loss);
    }
    return losses;
}

// Bit-for-bit equality of two float vectors (0.0 and -0.0 differ; so do two NaNs with other bits).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `steps` optimizer steps on one batch again and again (dropout masks still change with the step, so the loss
// must fall), M micro-batches each: every step's loss and gradient norm, then the gathered parameters and AdamW
// moments. The comparisons of one optimizer layout with another (test_distributed_optimizer,
// test_zero_sharding).
struct Trained {
    std::vector<float> losses, norms, params, adam_m, adam_v;
};
inline Trained train_repeated_batch(const ModelSpec& spec, int steps, int B, int S, int micro, const OptimConfig& oc, float lr) {
    ModelHarness h(spec, MPI_COMM_WORLD);
    Trained t;
    for (int st = 1; st <= steps; st++) {
        Batch b = make_batch(h.model.cfg, B, S, 1, h.grid.dp, h.grid.dp_rank);
        StepStats s = train_step(h.model, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, oc, st, lr, micro);
        CHECK(s.applied, "step %d not applied", st);
        t.losses.push_back(s.loss);
        t.norms.push_back(s.grad_norm);
    }
    gpt_gather_full(h.model, t.params);
    gpt_gather_full_optimizer(h.model, t.adam_m, t.adam_v);
    return t;
}

// One step with a NaN injected into a gradient (layers/test_hooks.h): whether it was applied, its gradient norm,
// the first non-finite gradient the trainer names, and whether the weights stayed as they were.
struct StepWithNaN {
    bool applied = false, weights_kept = false;
    float grad_norm = 0;
    std::string first_nonfinite;
};
inline StepWithNaN step_with_nan(const ModelSpec& spec) {
    ModelHarness h(spec, MPI_COMM_WORLD);
    std::vector<float> before, after;
    gpt_gather_full(h.model, before);
    Batch b = make_batch(h.model.cfg, 4, 16, 1, h.grid.dp, h.grid.dp_rank);
    g_test_hooks.inject_nan_at_step = 1;
    StepStats st = train_step(h.model, b.inputs.data(), b.targets.data(), 4 / h.grid.dp, 16, OptimConfig(), 1, 1e-3f);
    g_test_hooks.inject_nan_at_step = 0;
    StepWithNaN r;
    r.first_nonfinite = first_nonfinite_gradient(h.model);
    gpt_gather_full(h.model, after);
    r.applied = st.applied, r.grad_norm = st.grad_norm, r.weights_kept = same_bits(before, after);
    return r;
}
