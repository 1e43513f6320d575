// test_distributed_optimizer.cu — the distributed optimizer (ZeRO-1, parallel/distributed_optimizer.cu) against
// the ordinary one, and the model states it holds against their formula (recompute/model_state_memory.h).
//
// Run under mpirun, world = tp × dp × pp; every rank builds both models on MPI_COMM_WORLD.
//   --compare [--tp T] [--sp] [--pp P (a 4-layer model, 2 micro-batches per step)] [--dtype fp32|bf16] [--clip X] [--odd] [--steps N] [--tolerance R]
//       N training steps with and without it, dropout and weight decay on. Clipping not triggered (the
//       default, --clip 1e6): losses, gathered parameters and gathered moments bit for bit. --clip small
//       enough to be triggered (checked): equal within float rounding (the norm is summed from the shards, in
//       another order). --odd: a model whose parameter count is odd (a padded shard, tensors across shards).
//       --tolerance R: dp > 2, where MPI may sum more than two ranks in another order: within R, not bitwise.
//   --memory   measured model-state bytes == the formula exactly (fp32 and bf16, with and without, on this
//              world's dp), each kind and the total; the totals also against 18 / 6 + 12/d / 16 / 8 + 8/d
//              written out here; the optimizer state at this dp is 1/dp of the single-rank one up to the
//              stated padding; requested at dp 1 it changes nothing.
//   --bytes    one fp32 step: reduce-scatter + all-gather bytes == the all-reduce's bytes; in bf16 the
//              all-gather moves half (3/4 of the all-reduce in all).
//   --nan      a NaN injected into one gradient: both optimizers refuse the step and name the same tensor.
//   --device cuda   (label gpu) the same on one GPU shared by the ranks (MPI backend); exit 77 without one.
#include <cstring>
#include "../model/model_fixture.h"
#include "../../parallel/distributed_optimizer.h"

static int g_rank = 0;

// A model with an odd parameter count (C = 33, 3 heads, 3 layers): the shards of dp 2 need one padding
// element and several tensors lie across the shard boundary.
static GPTConfig odd_config() { return tiny_config(3, 3, 33, 61, 64, 32); }

static Device g_device = Device::CPU;
// A spec of `cfg` on this test's device (the MPI backend: on one GPU the ranks share it).
static ModelSpec spec_of(const GPTConfig& cfg) {
    ModelSpec s;
    s.cfg = cfg;
    s.device = g_device;
    return s;
}

static Trained train(ModelSpec spec, int steps, float clip) {
    OptimConfig oc;
    oc.weight_decay = 0.01f;
    oc.grad_clip = clip;
    return train_repeated_batch(spec, steps, 4, 16, spec.pp > 1 ? 2 : 1, oc, 3e-3f);
}

static void compare(ModelSpec spec, int steps, float clip, double tolerance) {
    ModelSpec zero = spec;
    zero.distributed_optimizer = true;
    Trained a = train(spec, steps, clip), z = train(zero, steps, clip);
    int dp = 0, world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    dp = world / (spec.tp * spec.pp);
    const bool clipped = a.norms[0] > clip;
    double worst_norm = 0;
    for (int i = 0; i < steps; i++) worst_norm = std::max(worst_norm, (double)std::fabs(a.norms[i] - z.norms[i]) / a.norms[i]);
    if (g_rank == 0)
        printf("  tp %d dp %d pp %d sp %s %s, clip %g (%s): loss %.7f -> %.7f; gradient norm %.6f, with/without differ by %.2e (rel)\n",
               spec.tp, dp, spec.pp, spec.sp ? "on" : "off", dtype_name(spec.dtype), clip, clipped ? "triggered" : "not triggered", a.losses[0],
               a.losses[steps - 1], a.norms[0], worst_norm);
    // The norm is summed from the shards in another order: double-precision rounding only, unless the
    // gradients themselves are summed in another order (dp > 2, --tolerance).
    CHECK(worst_norm < (tolerance > 0 ? tolerance : 1e-9), "gradient norms differ by %.3e", worst_norm);
    CHECK(a.losses[steps - 1] < a.losses[0], "the loss did not fall (%.6f -> %.6f)", a.losses[0], a.losses[steps - 1]);
    if (!clipped && tolerance == 0) {
        CHECK(same_bits(a.losses, z.losses), "losses differ");
        CHECK(same_bits(a.params, z.params), "parameters differ");
        CHECK(same_bits(a.adam_m, z.adam_m) && same_bits(a.adam_v, z.adam_v), "gathered moments differ");
        if (g_rank == 0) printf("  %d steps: losses, %zu parameters and both moments bit for bit\n", steps, a.params.size());
    } else {
        const double tol = tolerance > 0 ? tolerance : 1e-5;
        double wl = 0;
        for (int i = 0; i < steps; i++) wl = std::max(wl, (double)std::fabs(a.losses[i] - z.losses[i]) / a.losses[i]);
        const double wp = norm_rel_err(z.params, a.params), wm = norm_rel_err(z.adam_m, a.adam_m), wv = norm_rel_err(z.adam_v, a.adam_v);
        if (g_rank == 0) printf("  %d steps: losses rel %.2e, parameters %.2e, m %.2e, v %.2e (tolerance %.0e)\n", steps, wl, wp, wm, wv, tol);
        CHECK(wl < tol && wp < tol && wm < 100 * tol && wv < 100 * tol, "beyond float rounding: %.3e %.3e %.3e %.3e", wl, wp, wm, wv);
        if (clip < 1e5) CHECK(clipped, "clip %g was meant to be triggered (norm %.4f)", clip, a.norms[0]);
    }
}

// ---- model-state memory --------------------------------------------------------------------------------------
static int64_t expected_total(int64_t n, int d, bool zero, bool bf16) {
    // Written out independently of model_state_formula: bytes per parameter × parameters (P padded to d).
    const int64_t P = zero ? (n + d - 1) / d * d : n;
    if (bf16) return zero ? 6 * P + 12 * (P / d) : 18 * n;
    return zero ? 8 * P + 8 * (P / d) : 16 * n;
}

static void memory(const GPTConfig& cfg) {
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const int dp = world;
    for (DType dt : {DType::F32, DType::BF16}) {
        const bool bf16 = dt == DType::BF16;
        int64_t single_opt = 0;
        {
            ModelSpec one = spec_of(cfg);
            one.dtype = dt;
            ModelHarness h(one, MPI_COMM_SELF);
            single_opt = h.model.state_memory.optimizer(bf16);
        }
        for (bool zero : {false, true}) {
            ModelSpec s = spec_of(cfg);
            s.dtype = dt;
            s.distributed_optimizer = zero;
            ModelHarness h(s, MPI_COMM_WORLD);
            const GPT& m = h.model;
            const ModelStateMemory& got = m.state_memory;
            const ModelStateFormula f = model_state_formula(m.n_params, dp, m.zero.on, bf16);
            CHECK(m.zero.on == (zero && dp > 1), "sharded %d with zero %d at dp %d", m.zero.on, zero, dp);
            for (int k = 0; k < kNumStateKinds; k++)
                CHECK(got.bytes[k] == f.bytes[k], "%s %s zero %d: %s measured %lld, formula %lld", dtype_name(dt), zero ? "with" : "without",
                      zero, model_state_name(k), (long long)got.bytes[k], (long long)f.bytes[k]);
            const int64_t want = expected_total(m.n_params, dp, zero && dp > 1, bf16);
            CHECK(got.total() == f.total && got.total() == want, "total measured %lld, formula %lld, by hand %lld", (long long)got.total(),
                  (long long)f.total, (long long)want);
            CHECK(f.per_param * (double)f.padded == (double)f.total, "%.4f bytes/param x %lld != %lld", f.per_param, (long long)f.padded,
                  (long long)f.total);
            CHECK(got.optimizer(bf16) == f.optimizer, "optimizer state measured %lld, formula %lld", (long long)got.optimizer(bf16),
                  (long long)f.optimizer);
            // Sharded: the optimizer state is 1/dp of the single rank's, up to the stated padding.
            const int64_t per = bf16 ? 12 : 8, pad = f.padded - f.n;
            if (zero && dp > 1)
                CHECK(got.optimizer(bf16) * dp == single_opt + per * pad, "optimizer state %lld x %d != %lld + %lld x padding %lld",
                      (long long)got.optimizer(bf16), dp, (long long)single_opt, (long long)per, (long long)pad);
            else
                CHECK(got.optimizer(bf16) == single_opt, "without sharding the optimizer state %lld != single rank %lld",
                      (long long)got.optimizer(bf16), (long long)single_opt);
            if (g_rank == 0)
                printf("  dp %d %s %-7s: %lld params (+%lld padding): model states %lld B = formula %.4g B/param; optimizer state %lld B "
                       "(single rank %lld)\n", dp, dtype_name(dt), zero ? "ZeRO-1" : "whole", (long long)m.n_params, (long long)pad,
                       (long long)got.total(), f.per_param, (long long)got.optimizer(bf16), (long long)single_opt);
        }
    }
}

// ---- communication bytes --------------------------------------------------------------------------------------
static void bytes(const GPTConfig& cfg) {
    uint64_t allreduce[2] = {0, 0}, rs[2] = {0, 0}, ag[2] = {0, 0};
    int64_t n = 0;
    for (int bf = 0; bf < 2; bf++)
        for (bool zero : {false, true}) {
            ModelSpec s = spec_of(cfg);
            s.dtype = bf ? DType::BF16 : DType::F32;
            s.distributed_optimizer = zero;
            ModelHarness h(s, MPI_COMM_WORLD);
            n = h.model.n_params;
            OptimConfig oc;
            Batch b = make_batch(cfg, 4, 16, 1, h.grid.dp, h.grid.dp_rank);
            h.grid.dp_comm.counters.reset();
            train_step(h.model, b.inputs.data(), b.targets.data(), 4 / h.grid.dp, 16, oc, 1, 1e-3f);
            const CommCounters& c = h.grid.dp_comm.counters;
            if (zero) rs[bf] = c.bytes[kReduceScatter], ag[bf] = c.bytes[kAllGather];
            else allreduce[bf] = c.bytes[kAllReduce];
            if (zero) CHECK(c.bytes[kAllReduce] == 0, "the distributed optimizer all-reduced %llu bytes", (unsigned long long)c.bytes[kAllReduce]);
        }
    if (g_rank == 0)
        printf("  %lld params: fp32 all-reduce %llu B vs reduce-scatter %llu + all-gather %llu B; bf16 all-gather %llu B\n", (long long)n,
               (unsigned long long)allreduce[0], (unsigned long long)rs[0], (unsigned long long)ag[0], (unsigned long long)ag[1]);
    CHECK(allreduce[0] > 0 && rs[0] + ag[0] == allreduce[0], "fp32: %llu + %llu != %llu", (unsigned long long)rs[0],
          (unsigned long long)ag[0], (unsigned long long)allreduce[0]);
    CHECK(rs[1] == rs[0] && 2 * ag[1] == ag[0], "bf16: reduce-scatter %llu (fp32 gradients), all-gather %llu (half of %llu)",
          (unsigned long long)rs[1], (unsigned long long)ag[1], (unsigned long long)ag[0]);
}

// ---- NaN verdict and naming ----------------------------------------------------------------------------------
static void nan_naming(const GPTConfig& cfg) {
    std::string names[2];
    for (int zero = 0; zero < 2; zero++) {
        ModelSpec s = spec_of(cfg);
        s.distributed_optimizer = zero;
        const StepWithNaN r = step_with_nan(s);
        names[zero] = r.first_nonfinite;
        CHECK(!r.applied && !std::isfinite(r.grad_norm), "zero %d: a NaN gradient was not refused (norm %g)", zero, r.grad_norm);
        CHECK(r.weights_kept, "zero %d: the weights moved on a refused step", zero);
    }
    if (g_rank == 0) printf("  NaN in a gradient: without '%s', with '%s'\n", names[0].c_str(), names[1].c_str());
    CHECK(!names[0].empty() && names[0] == names[1], "first non-finite gradient: '%s' vs '%s'", names[0].c_str(), names[1].c_str());
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    ModelSpec spec;
    spec.cfg = tiny_config();
    std::string mode;
    int steps = 10;
    float clip = 1e6f;
    double tolerance = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--compare") || !strcmp(argv[i], "--memory") || !strcmp(argv[i], "--bytes") || !strcmp(argv[i], "--nan"))
            mode = argv[i] + 2;
        else if (!strcmp(argv[i], "--tp")) spec.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) spec.sp = true;
        else if (!strcmp(argv[i], "--pp")) spec.pp = atoi(argv[++i]), spec.cfg = tiny_config(4);
        else if (!strcmp(argv[i], "--dtype")) spec.dtype = !strcmp(argv[++i], "bf16") ? DType::BF16 : DType::F32;
        else if (!strcmp(argv[i], "--clip")) clip = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tolerance")) tolerance = atof(argv[++i]);
        else if (!strcmp(argv[i], "--odd")) spec.cfg = odd_config();
        else if (!strcmp(argv[i], "--device")) g_device = spec.device = !strcmp(argv[++i], "cuda") ? Device::CUDA : Device::CPU;
        else {
            fprintf(stderr, "test_distributed_optimizer: unknown argument %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (g_device == Device::CUDA) {
        int ok = cuda_available() ? 1 : 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (g_rank == 0) printf("test_distributed_optimizer: no CUDA GPU visible, skipping\n");
            MPI_Finalize();
            return 77;
        }
    }
    if (g_rank == 0) printf("test_distributed_optimizer --%s on %s\n", mode.c_str(), device_name(g_device));
    if (mode == "compare") compare(spec, steps, clip, tolerance);
    else if (mode == "memory") { memory(tiny_config()); memory(odd_config()); }
    else if (mode == "bytes") bytes(spec.cfg);
    else if (mode == "nan") nan_naming(spec.cfg);
    else if (g_rank == 0) fprintf(stderr, "test_distributed_optimizer: give --compare, --memory, --bytes or --nan\n"), g_failures++;
    int failed = g_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_failures) fprintf(stderr, "rank %d: ", g_rank);
    int rc = g_rank == 0 || g_failures ? test_finish("test_distributed_optimizer") : 0;
    MPI_Finalize();
    return any ? 1 : rc;
}
