// test_cross_entropy.cu — the vocab-parallel cross-entropy and its gradient (layers/cross_entropy.cu): the
// CPU reference (--cpu, label unit) and the CUDA kernels against it (--gpu, label gpu).
//
// The loss is computed in steps (row max, sum of exponentials and target logit, losses, gradient) so that
// under TP each rank works on its own vocabulary columns and only per-row numbers cross the network.
// CPU checks: losses and dlogits against a log-softmax over the real columns in double; padded columns
// ignored and given exactly zero gradient; finite differences; the Vp columns split over two "ranks",
// combined by hand, equal the unsplit loss and gradient; a rank holding only padding contributes nothing;
// bf16 logits (same losses: the math is fp32).
// GPU checks, f32 and bf16, a 300-token vocabulary padded to 304 in two ranges: rowmax and target logit
// bit for bit, sumexp, losses and dlogits against the CPU (outputs poisoned first), padding gets zero
// gradient.
#include <algorithm>
#include <functional>
#include "layers/cross_entropy.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the reference against math done by hand
// =========================================================================================================

struct CePieces {
    std::vector<float> rowmax, sumexp, tl, losses, dlogits;
};

// All the local steps on one rank's [N, V_local] logits, with the rank's own rowmax and sumexp (tp = 1), or
// with given global ones.
static CePieces ce_local(Ctx& ctx, std::vector<float>& logits, std::vector<int32_t>& targets, int N, int V_local,
                         int64_t v_begin, int V, float scale, const std::vector<float>* gmax = nullptr,
                         const std::vector<float>* gsum = nullptr) {
    CePieces r;
    r.rowmax.assign(N, NAN);
    r.sumexp.assign(N, NAN);
    r.tl.assign(N, NAN);
    r.losses.assign(N, NAN);
    r.dlogits.assign((size_t)N * V_local, NAN);
    ce_row_max(ctx, cpu_view(r.rowmax), cpu_view(logits), N, V_local, v_begin, V);
    std::vector<float> m = gmax ? *gmax : r.rowmax;
    ce_sumexp_target(ctx, cpu_view(r.sumexp), cpu_view(r.tl), cpu_view(logits), cpu_view(m), cpu_view(targets), N,
                     V_local, v_begin, V);
    std::vector<float> se = gsum ? *gsum : r.sumexp;
    ce_losses(ctx, cpu_view(r.losses), cpu_view(m), cpu_view(se), cpu_view(r.tl), N);
    ce_backward(ctx, cpu_view(r.dlogits), cpu_view(logits), cpu_view(m), cpu_view(se), cpu_view(targets), scale, N,
                V_local, v_begin, V);
    return r;
}

static void test_cross_entropy(Ctx& ctx) {
    const int N = 6, V = 13, Vp = 16;
    const float scale = 1.f / N;
    std::vector<float> logits = random_vec((size_t)N * Vp, g_rng, -3.f, 3.f);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[i * Vp + j] = 50.f;  // padding must be ignored, however large
    std::vector<int32_t> targets(N);
    for (auto& t : targets) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    targets[1] = V - 1;  // the last real column
    targets[2] = 0;
    CePieces full = ce_local(ctx, logits, targets, N, Vp, 0, V, scale);
    // Loss against a straightforward log-softmax over the V real columns, in double.
    std::vector<double> ref_loss(N), ref_grad((size_t)N * Vp, 0.0);
    for (int i = 0; i < N; i++) {
        double m = -1e300, s = 0;
        for (int j = 0; j < V; j++) m = std::max(m, (double)logits[i * Vp + j]);
        for (int j = 0; j < V; j++) s += std::exp(logits[i * Vp + j] - m);
        double lse = m + std::log(s);
        ref_loss[i] = lse - logits[i * Vp + targets[i]];
        for (int j = 0; j < V; j++)
            ref_grad[i * Vp + j] = scale * (std::exp(logits[i * Vp + j] - lse) - (j == targets[i] ? 1.0 : 0.0));
    }
    CHECK(max_rel_err(full.losses, to_float(ref_loss)) < 1e-5, "cross-entropy losses vs log-softmax");
    CHECK(max_rel_err(full.dlogits, to_float(ref_grad), 1e-4) < 1e-4, "cross-entropy dlogits vs reference");
    bool pad_zero = true;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) pad_zero &= full.dlogits[i * Vp + j] == 0.f;
    CHECK(pad_zero, "padded columns get exactly zero gradient");
    // Finite differences of L = scale · Σ losses along random directions over the real columns.
    auto loss = [&]() {
        CePieces r = ce_local(ctx, logits, targets, N, Vp, 0, V, scale);
        double s = 0;
        for (float l : r.losses) s += l;
        return scale * s;
    };
    for (int rep = 0; rep < 3; rep++) {
        std::vector<float> d = random_vec(logits.size(), g_rng);
        check_fd("cross-entropy FD", fd_directional(logits, d, 1e-2f, loss), dot(full.dlogits, d), 2e-3);
    }
    // Vocab-parallel: split the Vp columns over 2 "ranks"; combine max of maxes, sum of sumexps, sum of
    // target logits by hand; the loss equals the unsplit loss and each rank's gradient equals its columns.
    const int VL = Vp / 2;
    std::vector<float> part[2];
    CePieces loc[2];
    for (int r = 0; r < 2; r++) {
        part[r].resize((size_t)N * VL);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++) part[r][i * VL + j] = logits[i * Vp + r * VL + j];
        loc[r] = ce_local(ctx, part[r], targets, N, VL, r * VL, V, scale);
    }
    std::vector<float> gmax(N), gsum(N, 0.f), gtl(N, 0.f), gloss(N, NAN);
    for (int i = 0; i < N; i++) gmax[i] = std::max(loc[0].rowmax[i], loc[1].rowmax[i]);
    for (int r = 0; r < 2; r++) loc[r] = ce_local(ctx, part[r], targets, N, VL, r * VL, V, scale, &gmax);
    for (int i = 0; i < N; i++) {
        gsum[i] = loc[0].sumexp[i] + loc[1].sumexp[i];
        gtl[i] = loc[0].tl[i] + loc[1].tl[i];
    }
    ce_losses(ctx, cpu_view(gloss), cpu_view(gmax), cpu_view(gsum), cpu_view(gtl), N);
    CHECK(max_rel_err(gloss, full.losses) < 1e-5, "vocab-split loss equals the unsplit loss");
    bool grads_eq = true;
    for (int r = 0; r < 2; r++) {
        CePieces g = ce_local(ctx, part[r], targets, N, VL, r * VL, V, scale, &gmax, &gsum);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++)
                grads_eq &= std::fabs(g.dlogits[i * VL + j] - full.dlogits[i * Vp + r * VL + j]) <= 1e-6f;
    }
    CHECK(grads_eq, "vocab-split gradients equal the unsplit gradient's columns");
    // A rank holding only padding: rowmax -inf, sumexp 0, target 0.
    {
        std::vector<float> pad((size_t)N * 3, 1.f);
        std::vector<float> rm(N), se(N), tl(N), gm(N, 0.f);
        ce_row_max(ctx, cpu_view(rm), cpu_view(pad), N, 3, V, V);
        ce_sumexp_target(ctx, cpu_view(se), cpu_view(tl), cpu_view(pad), cpu_view(gm), cpu_view(targets), N, 3, V, V);
        bool ok = true;
        for (int i = 0; i < N; i++) ok &= std::isinf(rm[i]) && rm[i] < 0 && se[i] == 0.f && tl[i] == 0.f;
        CHECK(ok, "a padding-only shard contributes nothing");
    }
}

// bf16-stored logits and gradient vs fp32.
static void test_cross_entropy_bf16(Ctx& ctx) {
    const int N = 5, V = 37, Vp = 40;
    std::vector<float> logits = round_bf16(random_vec((size_t)N * Vp, g_rng, -4.f, 4.f));
    std::vector<int32_t> targets(N);
    for (auto& t : targets) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    Tensor tt = cpu_view(targets);
    std::vector<float> res[2][2];
    for (int k = 0; k < 2; k++) {
        DType dt = k ? DType::BF16 : DType::F32;
        Tensor lg = make_tensor(Device::CPU, dt, logits), dl = tensor_alloc(Device::CPU, dt, N * Vp);
        std::vector<float> rm(N), se(N), tl(N), ls(N);
        ce_row_max(ctx, cpu_view(rm), lg, N, Vp, 0, V);
        ce_sumexp_target(ctx, cpu_view(se), cpu_view(tl), lg, cpu_view(rm), tt, N, Vp, 0, V);
        ce_losses(ctx, cpu_view(ls), cpu_view(rm), cpu_view(se), cpu_view(tl), N);
        ce_backward(ctx, dl, lg, cpu_view(rm), cpu_view(se), tt, 1.f / N, N, Vp, 0, V);
        res[k][0] = ls;
        res[k][1] = tensor_to_host_f32(dl);
        tensor_free(lg);
        tensor_free(dl);
    }
    CHECK(max_rel_err(res[1][0], res[0][0]) < 1e-5, "bf16-stored logits: same losses (math is fp32)");
    CHECK(norm_rel_err(res[1][1], res[0][1]) < 1e-2, "bf16 dlogits: %.3g", norm_rel_err(res[1][1], res[0][1]));
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_cross_entropy(g_cpu);
    test_cross_entropy_bf16(g_cpu);
}

// =========================================================================================================
// GPU-vs-CPU checks (--gpu): the CUDA kernels against the CPU reference
// =========================================================================================================

static void test_cross_entropy_gpu() {
    const int N = 111, V = 300, Vp = 304, VL = Vp / 2;
    std::vector<int32_t> targets(N);
    for (auto& t : targets) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    targets[0] = V - 1;
    targets[1] = VL - 1;
    targets[2] = VL;
    std::vector<float> tg_f(targets.begin(), targets.end());
    for (DType dt : {DType::F32, DType::BF16})
        for (int rank = 0; rank < 2; rank++) {
            const int64_t v_begin = rank * VL;
            std::vector<float> logits = round_to(dt, random_vec((size_t)N * VL, g_rng, -5.f, 5.f));
            std::vector<float> res[2][5];
            for (Device dev : {Device::CPU, Device::CUDA}) {
                Ctx& ctx = ctx_of(dev);
                Tensor lg = make_tensor(dev, dt, logits), tt = make_tensor(dev, DType::I32, tg_f);
                Tensor rm = poisoned_tensor(dev, DType::F32, N), se = poisoned_tensor(dev, DType::F32, N),
                       tl = poisoned_tensor(dev, DType::F32, N), ls = poisoned_tensor(dev, DType::F32, N),
                       dl = poisoned_tensor(dev, dt, (int64_t)N * VL);
                ce_row_max(ctx, rm, lg, N, VL, v_begin, V);
                ce_sumexp_target(ctx, se, tl, lg, rm, tt, N, VL, v_begin, V);
                ce_losses(ctx, ls, rm, se, tl, N);
                ce_backward(ctx, dl, lg, rm, se, tt, 0.37f, N, VL, v_begin, V);
                int k = dev == Device::CUDA;
                res[k][0] = to_host(rm);
                res[k][1] = to_host(se);
                res[k][2] = to_host(tl);
                res[k][3] = to_host(ls);
                res[k][4] = to_host(dl);
                free_all({&lg, &tt, &rm, &se, &tl, &ls, &dl});
            }
            char what[64];
            snprintf(what, sizeof what, "cross-entropy rank %d", rank);
            std::string w(what);
            CHECK(bitwise_equal(res[1][0], res[0][0]), "%s rowmax: same bits [%s]", what, dtype_name(dt));
            CHECK(bitwise_equal(res[1][2], res[0][2]), "%s target logit: same bits [%s]", what, dtype_name(dt));
            check_close_norm((w + " sumexp").c_str(), DType::F32, res[1][1], res[0][1], 1e-5);
            check_close_norm((w + " losses").c_str(), DType::F32, res[1][3], res[0][3], 1e-5);
            check_close_norm((w + " dlogits").c_str(), dt, res[1][4], res[0][4]);
            bool pad_zero = true;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < VL; j++)
                    if (v_begin + j >= V) pad_zero &= res[1][4][(size_t)i * VL + j] == 0.f;
            CHECK(pad_zero, "%s: padded columns get zero gradient on the GPU [%s]", what, dtype_name(dt));
        }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_cross_entropy_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_cross_entropy", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
