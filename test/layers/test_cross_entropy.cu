// test_cross_entropy.cu — the vocab-parallel cross-entropy and its gradient (layers/cross_entropy.cu): the
// fast CPU path (--cpu, label unit) and the CUDA kernels against it (--gpu, label gpu).
//
// The loss is computed in two passes over the logits (the row statistics as online (max, sum) pairs plus the
// target logit, then the gradient), so that under TP each rank works on its own vocabulary columns and only
// per-row numbers cross the network.
// The plain math both paths are held to: layers/reference/cross_entropy.h.
// CPU checks: losses and dlogits against the reference in double (a log-softmax over the real columns), and
// against the same reference in float (the earlier three-pass float computation: max pass, sum pass,
// gradient with a division per element), within float rounding; rows long enough for several online chunks, with the
// maximum moving in every chunk, in the first one only, and large magnitudes; padded columns ignored and
// given exactly zero gradient; finite differences; the Vp columns split over two "ranks", combined by hand
// (max, rescale, sum), equal the unsplit loss and gradient; a rank holding only padding contributes nothing;
// bf16 logits (same losses: the math is fp32); 1, 2 and 3 threads give the same bits.
// GPU checks, f32 and bf16, a vocabulary split in two ranges with V_local a multiple of 8 (16-byte path) and
// not (scalar path), and a long row: rowmax and target logit bit for bit, sumexp, losses, the rescale and
// dlogits against the CPU (outputs poisoned first), padding gets zero gradient; on the long rows (the whole
// vocabulary on one rank) losses and dlogits against the reference too.
#include <omp.h>
#include <algorithm>
#include <functional>
#include "layers/cross_entropy.h"
#include "layers/reference/cross_entropy.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/cross_entropy.h
// =========================================================================================================

struct CePieces {
    std::vector<float> rowmax, sumexp, tl, losses, dlogits;
};

// Both passes on one rank's [N, V_local] logits with the rank's own statistics (tp = 1).
static CePieces ce_local(Ctx& ctx, std::vector<float>& logits, std::vector<int32_t>& targets, int N, int V_local,
                         int64_t v_begin, int V, float scale) {
    CePieces r;
    r.rowmax.assign(N, NAN);
    r.sumexp.assign(N, NAN);
    r.tl.assign(N, NAN);
    r.losses.assign(N, NAN);
    r.dlogits.assign((size_t)N * V_local, NAN);
    ce_forward_stats(ctx, cpu_view(r.rowmax), cpu_view(r.sumexp), cpu_view(r.tl), Tensor(), cpu_view(logits),
                     cpu_view(targets), N, V_local, v_begin, V);
    ce_losses(ctx, cpu_view(r.losses), cpu_view(r.rowmax), cpu_view(r.sumexp), cpu_view(r.tl), N);
    ce_backward(ctx, cpu_view(r.dlogits), cpu_view(logits), cpu_view(r.rowmax), cpu_view(r.sumexp), cpu_view(targets),
                scale, N, V_local, v_begin, V);
    return r;
}

// The earlier three-pass float version (row max; Σ expf(z − m) in column order; expf(z − m)/Σ per element),
// as it was before the two-pass change: the reference computed in float (layers/reference/cross_entropy.h).
// The new one must agree with it within float rounding.
static CePieces ce_three_pass(const std::vector<float>& logits, const std::vector<int32_t>& targets, int N, int Vp,
                              int V, float scale) {
    CePieces r;
    r.losses.resize(N);
    r.dlogits.resize((size_t)N * Vp);
    ref_cross_entropy<float>(r.losses.data(), r.dlogits.data(), logits.data(), targets.data(), N, Vp, V, scale);
    return r;
}

// Loss and gradient of a log-softmax over the V real columns: the reference in double.
static void ce_double(const std::vector<float>& logits, const std::vector<int32_t>& targets, int N, int Vp, int V,
                      float scale, std::vector<double>& loss, std::vector<double>& grad) {
    loss.assign(N, 0.0);
    grad.assign((size_t)N * Vp, 0.0);
    ref_cross_entropy<double>(loss.data(), grad.data(), logits.data(), targets.data(), N, Vp, V, scale);
}

static bool padding_zero(const std::vector<float>& d, int N, int Vp, int V) {
    bool ok = true;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) ok &= d[(size_t)i * Vp + j] == 0.f;
    return ok;
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
    std::vector<double> ref_loss, ref_grad;
    ce_double(logits, targets, N, Vp, V, scale, ref_loss, ref_grad);
    CHECK(max_rel_err(full.losses, to_float(ref_loss)) < 1e-5, "cross-entropy losses vs log-softmax");
    CHECK(max_rel_err(full.dlogits, to_float(ref_grad), 1e-4) < 1e-4, "cross-entropy dlogits vs reference");
    CHECK(padding_zero(full.dlogits, N, Vp, V), "padded columns get exactly zero gradient");
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
    // Vocab-parallel: split the Vp columns over 2 "ranks"; combine by hand as vocab_parallel.cu does: the max
    // of the maxima, each rank's sum rescaled to it (ce_rescale_sumexp), the sum of the sums and of the target
    // logits. The loss equals the unsplit loss and each rank's gradient equals its columns.
    const int VL = Vp / 2;
    std::vector<float> part[2], rm[2], se[2], tl[2], lm[2];
    for (int r = 0; r < 2; r++) {
        part[r].resize((size_t)N * VL);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++) part[r][i * VL + j] = logits[i * Vp + r * VL + j];
        rm[r].assign(N, NAN), se[r].assign(N, NAN), tl[r].assign(N, NAN), lm[r].assign(N, NAN);
        ce_forward_stats(ctx, cpu_view(rm[r]), cpu_view(se[r]), cpu_view(tl[r]), cpu_view(lm[r]), cpu_view(part[r]),
                         cpu_view(targets), N, VL, r * VL, V);
        CHECK(bitwise_equal(lm[r], rm[r]), "rank %d: local_max is a copy of rowmax", r);
    }
    std::vector<float> gmax(N), gsum(N, 0.f), gtl(N, 0.f), gloss(N, NAN);
    for (int i = 0; i < N; i++) gmax[i] = std::max(rm[0][i], rm[1][i]);
    CHECK(bitwise_equal(gmax, full.rowmax), "max of the ranks' maxima equals the unsplit row max");
    for (int r = 0; r < 2; r++) {
        ce_rescale_sumexp(ctx, cpu_view(se[r]), cpu_view(lm[r]), cpu_view(gmax), N);
        for (int i = 0; i < N; i++) gsum[i] += se[r][i], gtl[i] += tl[r][i];
    }
    ce_losses(ctx, cpu_view(gloss), cpu_view(gmax), cpu_view(gsum), cpu_view(gtl), N);
    CHECK(max_rel_err(gloss, full.losses) < 1e-5, "vocab-split loss equals the unsplit loss");
    CHECK(max_rel_err(gsum, full.sumexp) < 1e-5, "vocab-split rescaled sums equal the unsplit sum");
    bool grads_eq = true;
    for (int r = 0; r < 2; r++) {
        std::vector<float> g((size_t)N * VL, NAN);
        ce_backward(ctx, cpu_view(g), cpu_view(part[r]), cpu_view(gmax), cpu_view(gsum), cpu_view(targets), scale, N,
                    VL, r * VL, V);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++) grads_eq &= std::fabs(g[i * VL + j] - full.dlogits[i * Vp + r * VL + j]) <= 1e-6f;
    }
    CHECK(grads_eq, "vocab-split gradients equal the unsplit gradient's columns");
    // A rank holding only padding: rowmax -inf, sumexp 0, target 0, and its sum stays 0 after the rescale.
    {
        std::vector<float> pad((size_t)N * 3, 1.f);
        std::vector<float> prm(N), pse(N), ptl(N), plm(N);
        ce_forward_stats(ctx, cpu_view(prm), cpu_view(pse), cpu_view(ptl), cpu_view(plm), cpu_view(pad),
                         cpu_view(targets), N, 3, V, V);
        bool ok = true;
        for (int i = 0; i < N; i++) ok &= std::isinf(prm[i]) && prm[i] < 0 && pse[i] == 0.f && ptl[i] == 0.f;
        ce_rescale_sumexp(ctx, cpu_view(pse), cpu_view(plm), cpu_view(gmax), N);
        for (int i = 0; i < N; i++) ok &= pse[i] == 0.f;
        CHECK(ok, "a padding-only shard contributes nothing");
    }
}

// Rows of several online chunks (kCeChunk = 2048 columns on the CPU): the maximum rising in every chunk (a
// rescale each time), only in the first chunk (no rescale), random, and logits of large magnitude.
static void test_cross_entropy_long_rows(Ctx& ctx) {
    const int N = 4, V = 5000, Vp = 5008;
    const float scale = 0.25f;
    std::vector<float> logits((size_t)N * Vp, 1e4f);  // padding: huge, must be ignored
    for (int j = 0; j < V; j++) {
        logits[0 * Vp + j] = -8.f + 16.f * j / V;           // increasing: the max moves in every chunk
        logits[1 * Vp + j] = j == 3 ? 9.f : -1.f + 0.3f * std::sin(0.01f * j);  // max in the first chunk
        logits[3 * Vp + j] = 60.f * std::cos(0.37f * j);   // large magnitudes, e^(z − m) spans e^-120 .. 1
    }
    std::vector<float> r2 = random_vec(V, g_rng, -6.f, 6.f);
    for (int j = 0; j < V; j++) logits[2 * Vp + j] = r2[j];
    std::vector<int32_t> targets = {V - 1, 3, 2047, 2048};
    CePieces got = ce_local(ctx, logits, targets, N, Vp, 0, V, scale);
    std::vector<double> ref_loss, ref_grad;
    ce_double(logits, targets, N, Vp, V, scale, ref_loss, ref_grad);
    CHECK(max_rel_err(got.losses, to_float(ref_loss)) < 2e-6, "long rows: losses vs double (%.3g)",
          max_rel_err(got.losses, to_float(ref_loss)));
    CHECK(norm_rel_err(got.dlogits, to_float(ref_grad)) < 1e-5, "long rows: dlogits vs double (%.3g)",
          norm_rel_err(got.dlogits, to_float(ref_grad)));
    CePieces old = ce_three_pass(logits, targets, N, Vp, V, scale);
    // The loss is log Σ + ...: an absolute difference of the losses is a relative one of Σ. The three-pass
    // version summed 5000 terms one after the other (up to ~1e-5 relative here); the 16 partial sums of the
    // new one are closer to the double result, which is checked too (1e-7 of slack for the rest of the sum).
    bool close = true, no_worse = true;
    for (int i = 0; i < N; i++) {
        close &= std::fabs(got.losses[i] - old.losses[i]) <= 1e-5 * std::max(1.0, std::fabs(ref_loss[i]));
        no_worse &= std::fabs(got.losses[i] - ref_loss[i]) <= std::fabs(old.losses[i] - ref_loss[i]) + 1e-7 * std::max(1.0, std::fabs(ref_loss[i]));
    }
    CHECK(close, "long rows: losses equal the three-pass version's within its rounding");
    CHECK(no_worse, "long rows: losses no farther from double than the three-pass version's");
    CHECK(norm_rel_err(got.dlogits, old.dlogits) < 1e-5, "long rows: dlogits equal the three-pass version's (%.3g)",
          norm_rel_err(got.dlogits, old.dlogits));
    CHECK(padding_zero(got.dlogits, N, Vp, V), "long rows: padding gets zero gradient");
    // Against the three-pass version on a random batch of ordinary rows too.
    const int N2 = 64, V2 = 1000, Vp2 = 1024;
    std::vector<float> lg = random_vec((size_t)N2 * Vp2, g_rng, -10.f, 10.f);
    std::vector<int32_t> tg(N2);
    for (auto& t : tg) t = std::uniform_int_distribution<int>(0, V2 - 1)(g_rng);
    CePieces a = ce_local(ctx, lg, tg, N2, Vp2, 0, V2, 1.f / N2), b = ce_three_pass(lg, tg, N2, Vp2, V2, 1.f / N2);
    CHECK(max_abs_diff(a.losses, b.losses) < 2e-6, "random rows: losses equal the three-pass version's (%.3g)",
          max_abs_diff(a.losses, b.losses));
    CHECK(norm_rel_err(a.dlogits, b.dlogits) < 1e-5, "random rows: dlogits equal the three-pass version's (%.3g)",
          norm_rel_err(a.dlogits, b.dlogits));
}

// The same bits for 1, 2 and 3 OpenMP threads (rows move between threads; a row's arithmetic must not).
static void test_cross_entropy_threads(Ctx& ctx) {
    const int N = 7, V = 3000, Vp = 3001;  // odd V_local: a partial last pack
    std::vector<float> logits = random_vec((size_t)N * Vp, g_rng, -5.f, 5.f);
    std::vector<int32_t> targets(N);
    for (auto& t : targets) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    const int saved = omp_get_max_threads();
    CePieces res[3];
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(k + 1);
        res[k] = ce_local(ctx, logits, targets, N, Vp, 0, V, 0.5f);
    }
    omp_set_num_threads(saved);
    for (int k = 1; k < 3; k++) {
        CHECK(bitwise_equal(res[k].sumexp, res[0].sumexp) && bitwise_equal(res[k].rowmax, res[0].rowmax),
              "cross-entropy statistics: %d threads differ from 1 thread", k + 1);
        CHECK(bitwise_equal(res[k].dlogits, res[0].dlogits), "cross-entropy dlogits: %d threads differ from 1", k + 1);
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
        ce_forward_stats(ctx, cpu_view(rm), cpu_view(se), cpu_view(tl), Tensor(), lg, tt, N, Vp, 0, V);
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
    test_cross_entropy_long_rows(g_cpu);
    test_cross_entropy_threads(g_cpu);
    test_cross_entropy_bf16(g_cpu);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

// One rank's slice [N, VL] of a vocabulary of V real ids starting at v_begin, on both devices.
static void gpu_case(DType dt, int N, int VL, int64_t v_begin, int V, const std::vector<int32_t>& targets,
                     const std::vector<float>& logits_in, const char* what) {
    std::vector<float> logits = round_to(dt, logits_in);
    std::vector<float> tg_f(targets.begin(), targets.end());
    std::vector<float> res[2][7];
    for (Device dev : {Device::CPU, Device::CUDA}) {
        Ctx& ctx = ctx_of(dev);
        Tensor lg = make_tensor(dev, dt, logits), tt = make_tensor(dev, DType::I32, tg_f);
        Tensor rm = poisoned_tensor(dev, DType::F32, N), se = poisoned_tensor(dev, DType::F32, N),
               tl = poisoned_tensor(dev, DType::F32, N), ls = poisoned_tensor(dev, DType::F32, N),
               lm = poisoned_tensor(dev, DType::F32, N), dl = poisoned_tensor(dev, dt, (int64_t)N * VL);
        ce_forward_stats(ctx, rm, se, tl, lm, lg, tt, N, VL, v_begin, V);
        ce_losses(ctx, ls, rm, se, tl, N);
        ce_backward(ctx, dl, lg, rm, se, tt, 0.37f, N, VL, v_begin, V);
        const int k = dev == Device::CUDA;
        res[k][0] = to_host(rm);
        res[k][1] = to_host(se);
        res[k][2] = to_host(tl);
        res[k][3] = to_host(ls);
        res[k][4] = to_host(dl);
        res[k][5] = to_host(lm);
        // The rescale, against a maximum 0.75 above this rank's own (as if another rank held it).
        std::vector<float> gm = res[k][0];
        for (float& x : gm) x += 0.75f;
        Tensor g = make_tensor(dev, DType::F32, gm);
        ce_rescale_sumexp(ctx, se, lm, g, N);
        res[k][6] = to_host(se);
        free_all({&lg, &tt, &rm, &se, &tl, &ls, &lm, &dl, &g});
    }
    std::string w(what);
    CHECK(bitwise_equal(res[1][0], res[0][0]), "%s rowmax: same bits [%s]", what, dtype_name(dt));
    CHECK(bitwise_equal(res[1][2], res[0][2]), "%s target logit: same bits [%s]", what, dtype_name(dt));
    CHECK(bitwise_equal(res[1][5], res[1][0]), "%s local_max is rowmax on the GPU [%s]", what, dtype_name(dt));
    check_close_norm((w + " sumexp").c_str(), DType::F32, res[1][1], res[0][1], 1e-5);
    check_close_norm((w + " losses").c_str(), DType::F32, res[1][3], res[0][3], 1e-5);
    check_close_norm((w + " rescaled sumexp").c_str(), DType::F32, res[1][6], res[0][6], 1e-5);
    check_close_norm((w + " dlogits").c_str(), dt, res[1][4], res[0][4]);
    if (v_begin == 0 && VL >= V) {
        // The whole vocabulary on one rank: the loss and the gradient are the reference's
        // (layers/reference/cross_entropy.h, in double) on the same rounded logits.
        std::vector<double> rl, rg;
        ce_double(logits, targets, N, VL, V, 0.37f, rl, rg);
        check_norm_vs_reference(w + " losses", DType::F32, res[1][3], res[0][3], to_float(rl), 1e-5);
        check_norm_vs_reference(w + " dlogits", dt, res[1][4], res[0][4], to_float(rg));
    }
    bool pad_zero = true;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < VL; j++)
            if (v_begin + j >= V) pad_zero &= res[1][4][(size_t)i * VL + j] == 0.f;
    CHECK(pad_zero, "%s: padded columns get zero gradient on the GPU [%s]", what, dtype_name(dt));
}

static void test_cross_entropy_gpu() {
    for (DType dt : {DType::F32, DType::BF16}) {
        // V_local = 152 (packs of 8: the 16-byte path) and 151 (the scalar path), two ranks each.
        for (int VL : {152, 151}) {
            const int N = 111, Vp = 2 * VL, V = Vp - 4;
            std::vector<int32_t> targets(N);
            for (auto& t : targets) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
            targets[0] = V - 1;
            targets[1] = VL - 1;
            targets[2] = VL;
            for (int rank = 0; rank < 2; rank++) {
                char what[64];
                snprintf(what, sizeof what, "cross-entropy V_local %d rank %d", VL, rank);
                gpu_case(dt, N, VL, (int64_t)rank * VL, V, targets, random_vec((size_t)N * VL, g_rng, -5.f, 5.f), what);
            }
        }
        // Long rows (many packs per thread): the maximum rising along the row, and random.
        const int N = 3, V = 50257, Vp = 50304;
        std::vector<float> lg = random_vec((size_t)N * Vp, g_rng, -8.f, 8.f);
        for (int j = 0; j < Vp; j++) lg[j] = -20.f + 40.f * j / Vp;
        std::vector<int32_t> targets = {V - 1, 0, 12345};
        gpu_case(dt, N, Vp, 0, V, targets, lg, "cross-entropy long rows");
    }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_cross_entropy_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_cross_entropy", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
