// test_layernorm.cu — LayerNorm (layers/layernorm.cu): the fast CPU path (--cpu, label unit) and the CUDA
// kernels (--gpu, label gpu) against its plain math, layers/reference/layernorm.h.
//
// CPU checks:
//  * the forward against the reference on rows with a large common offset (a one-pass Σx² - mean²
//    variance would lose most digits there);
//  * the backward against central finite differences of the forward, for a scalar loss L = Σ w_i · out_i with
//    random w: per element on a small tensor, along random directions on a larger one (there also against
//    the reference's backward); din, dweight and dbias accumulate onto prefilled buffers, so "+=" is checked
//    too;
//  * bf16 storage against fp32 storage (same values) within bf16 tolerance;
//  * the backward's reductions give the same bits with 1 and 3 OpenMP threads (fixed order);
//  * GradWrite::Overwrite into NaN-filled dweight / dbias gives the bits of accumulating into zeros;
//  * dbias over 8192 rows against the reference's double sums within 4e-7 (a running sum down the rows
//    fails it).
// GPU checks, f32 and bf16, the shapes of test/layers/gpu_shapes.h (not multiples of any block size; every
// forward kernel instantiation): forward (out, mean, rstd; the same output bits without mean/rstd) and
// backward (accumulated din, dweight, dbias) against the CPU and the reference, outputs poisoned with NaN
// first; the backward twice gives bitwise identical results; GradWrite::Overwrite into poisoned dweight /
// dbias against the CPU's accumulation into zeros.
#include <omp.h>
#include "layers/layernorm.h"
#include "layers/reference/layernorm.h"
#include "test/layers/gpu_shapes.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

typedef std::vector<float> vf;
static Ctx g_cpu, g_gpu;

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/layernorm.h
// =========================================================================================================

struct LnFwd { vf out, mean, rstd; };
static LnFwd ln_forward(DType dt, const vf& x, const vf& w, const vf& b, int N, int C) {
    Tensor tx = cpu_tensor(dt, x), tw = cpu_tensor(dt, w), tb = cpu_tensor(dt, b);
    Tensor to = tensor_alloc(Device::CPU, dt, (int64_t)N * C);
    Tensor tm = tensor_alloc(Device::CPU, DType::F32, N), tr = tensor_alloc(Device::CPU, DType::F32, N);
    layernorm_forward(g_cpu, to, tm, tr, tx, tw, tb, N, C);
    LnFwd r{to_host(to), to_host(tm), to_host(tr)};
    free_all({&tx, &tw, &tb, &to, &tm, &tr});
    return r;
}
static double ln_loss(const vf& x, const vf& w, const vf& b, const vf& wl, int N, int C) {
    return dot(ln_forward(DType::F32, x, w, b, N, C).out, wl);
}
struct LnGrad { vf din, dw, db; };
// Runs the backward on prefilled accumulators (din0, dw0, db0) and returns the accumulated values.
// Overwrite: dweight / dbias start as NaN instead (dw0, db0 unused) and are overwritten.
static LnGrad ln_backward(DType dt, const vf& x, const vf& w, const vf& b, const vf& dout, const vf& din0,
                          const vf& dw0, const vf& db0, int N, int C, GradWrite grads = GradWrite::Accumulate) {
    Tensor tx = cpu_tensor(dt, x), tw = cpu_tensor(dt, w), tb = cpu_tensor(dt, b), tdo = cpu_tensor(dt, dout);
    Tensor tdi = cpu_tensor(dt, din0);
    const bool over = grads == GradWrite::Overwrite;
    Tensor tdw = over ? poisoned_tensor(Device::CPU, DType::F32, C) : cpu_tensor(DType::F32, dw0);
    Tensor tdb = over ? poisoned_tensor(Device::CPU, DType::F32, C) : cpu_tensor(DType::F32, db0);
    Tensor to = tensor_alloc(Device::CPU, dt, (int64_t)N * C);
    Tensor tm = tensor_alloc(Device::CPU, DType::F32, N), tr = tensor_alloc(Device::CPU, DType::F32, N);
    layernorm_forward(g_cpu, to, tm, tr, tx, tw, tb, N, C);
    layernorm_backward(g_cpu, tdi, tdw, tdb, tdo, tx, tw, tm, tr, N, C, grads);
    LnGrad g{to_host(tdi), to_host(tdw), to_host(tdb)};
    free_all({&tx, &tw, &tb, &tdo, &tdi, &tdw, &tdb, &to, &tm, &tr});
    return g;
}

static void test_layernorm_forward_values(std::mt19937& rng) {
    // Rows with a large common offset: a one-pass Σx² - mean² variance would lose most digits here.
    const int N = 5, C = 97;
    vf x = random_vec((size_t)N * C, rng);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = x[(size_t)r * C + c] * (float)(r + 1) + 300.0f * r;
    vf w = random_vec(C, rng, 0.5f, 1.5f), b = random_vec(C, rng);
    LnFwd f = ln_forward(DType::F32, x, w, b, N, C);
    // The reference (layers/reference/layernorm.h): two passes per row in double, kept in double here.
    std::vector<double> ref_out((size_t)N * C), ref_mean(N), ref_rstd(N);
    ref_layernorm_forward(ref_out.data(), ref_mean.data(), ref_rstd.data(), x.data(), w.data(), b.data(), N, C);
    double worst = 0, worst_stat = 0;
    for (int r = 0; r < N; r++) {
        const double m = ref_mean[r], s = ref_rstd[r];
        worst_stat = std::fmax(worst_stat, std::fabs(f.mean[r] - m) / (std::fabs(m) + 1e-3));
        worst_stat = std::fmax(worst_stat, std::fabs(f.rstd[r] - s) / s);
        for (int c = 0; c < C; c++)
            worst = std::fmax(worst, std::fabs(f.out[(size_t)r * C + c] - ref_out[(size_t)r * C + c]));
    }
    CHECK(worst_stat < 1e-4, "layernorm mean/rstd vs the reference: rel err %.3g", worst_stat);
    CHECK(worst < 1e-3, "layernorm out vs the reference: max abs err %.3g", worst);
}

static void test_layernorm_gradients(std::mt19937& rng) {
    // (a) every element, small tensor
    {
        const int N = 3, C = 7;
        vf x = random_vec((size_t)N * C, rng), w = random_vec(C, rng, 0.5f, 1.5f), b = random_vec(C, rng);
        vf wl = random_vec((size_t)N * C, rng);
        vf din0 = random_vec((size_t)N * C, rng), dw0 = random_vec(C, rng), db0 = random_vec(C, rng);
        LnGrad g = ln_backward(DType::F32, x, w, b, wl, din0, dw0, db0, N, C);
        vf gx = minus(g.din, din0), gw = minus(g.dw, dw0), gb = minus(g.db, db0);
        const double h = 1e-2;
        int bad = 0;
        double sx = rms(gx), sw = rms(gw), sb = rms(gb);
        for (size_t i = 0; i < x.size(); i++) {
            vf xp = x, xm = x;
            xp[i] += (float)h, xm[i] -= (float)h;
            double num = (ln_loss(xp, w, b, wl, N, C) - ln_loss(xm, w, b, wl, N, C)) / (2 * h);
            if (!fd_close(num, gx[i], sx)) {
                bad++;
                fprintf(stderr, "  din[%zu]: numeric %.6f analytic %.6f\n", i, num, gx[i]);
            }
        }
        for (int c = 0; c < C; c++) {
            vf wp = w, wm = w, bp = b, bm = b;
            wp[c] += (float)h, wm[c] -= (float)h, bp[c] += (float)h, bm[c] -= (float)h;
            double nw = (ln_loss(x, wp, b, wl, N, C) - ln_loss(x, wm, b, wl, N, C)) / (2 * h);
            double nb = (ln_loss(x, w, bp, wl, N, C) - ln_loss(x, w, bm, wl, N, C)) / (2 * h);
            if (!fd_close(nw, gw[c], sw)) bad++, fprintf(stderr, "  dweight[%d]: %.6f vs %.6f\n", c, nw, gw[c]);
            if (!fd_close(nb, gb[c], sb)) bad++, fprintf(stderr, "  dbias[%d]: %.6f vs %.6f\n", c, nb, gb[c]);
        }
        CHECK(bad == 0, "layernorm per-element finite differences: %d mismatches", bad);
    }
    // (b) directional derivatives on a larger tensor (C not a multiple of anything)
    {
        const int N = 16, C = 129;
        vf x = random_vec((size_t)N * C, rng, -2.f, 2.f), w = random_vec(C, rng, 0.5f, 1.5f);
        vf b = random_vec(C, rng), wl = random_vec((size_t)N * C, rng);
        vf din0 = random_vec((size_t)N * C, rng), dw0 = random_vec(C, rng), db0 = random_vec(C, rng);
        LnGrad g = ln_backward(DType::F32, x, w, b, wl, din0, dw0, db0, N, C);
        vf gx = minus(g.din, din0), gw = minus(g.dw, dw0), gb = minus(g.db, db0);
        vf dx = random_vec(x.size(), rng), dw = random_vec(C, rng), db = random_vec(C, rng);
        const double h = 1e-2;
        double nx = (ln_loss(axpy(x, h, dx), w, b, wl, N, C) - ln_loss(axpy(x, -h, dx), w, b, wl, N, C)) / (2 * h);
        double nw = (ln_loss(x, axpy(w, h, dw), b, wl, N, C) - ln_loss(x, axpy(w, -h, dw), b, wl, N, C)) / (2 * h);
        double nb = (ln_loss(x, w, axpy(b, h, db), wl, N, C) - ln_loss(x, w, axpy(b, -h, db), wl, N, C)) / (2 * h);
        double ax = dot(gx, dx), aw = dot(gw, dw), ab = dot(gb, db);
        // and against the reference's backward (onto the same prefilled accumulators)
        vf rm(N), rr(N), ro((size_t)N * C), rdin = din0, rdw = dw0, rdb = db0;
        ref_layernorm_forward(ro.data(), rm.data(), rr.data(), x.data(), w.data(), b.data(), N, C);
        ref_layernorm_backward(rdin.data(), rdw.data(), rdb.data(), wl.data(), x.data(), w.data(), rm.data(), rr.data(), N,
                               C);
        // din = rstd · (g − mean(g) − n · mean(g · n)) cancels in fp32: 1e-4 of the element (1e-3 floor)
        CHECK(max_rel_err(g.din, rdin) < 1e-4, "layernorm din vs the reference: %.3g", max_rel_err(g.din, rdin));
        CHECK(max_rel_err(g.dw, rdw) < 1e-5, "layernorm dweight vs the reference: %.3g", max_rel_err(g.dw, rdw));
        CHECK(max_rel_err(g.db, rdb) < 1e-5, "layernorm dbias vs the reference: %.3g", max_rel_err(g.db, rdb));
        CHECK(std::fabs(nx - ax) <= kFdTol * std::fabs(ax), "layernorm dL/dx·d: numeric %.6f analytic %.6f", nx, ax);
        CHECK(std::fabs(nw - aw) <= kFdTol * std::fabs(aw), "layernorm dL/dw·d: numeric %.6f analytic %.6f", nw, aw);
        CHECK(std::fabs(nb - ab) <= kFdTol * std::fabs(ab), "layernorm dL/db·d: numeric %.6f analytic %.6f", nb, ab);
    }
}

static void test_layernorm_bf16(std::mt19937& rng) {
    const int N = 37, C = 129;
    vf x = round_bf16(random_vec((size_t)N * C, rng, -2.f, 2.f)), w = round_bf16(random_vec(C, rng, 0.5f, 1.5f));
    vf b = round_bf16(random_vec(C, rng)), dout = round_bf16(random_vec((size_t)N * C, rng));
    vf din0 = round_bf16(random_vec((size_t)N * C, rng)), dw0 = random_vec(C, rng), db0 = random_vec(C, rng);
    LnFwd f32 = ln_forward(DType::F32, x, w, b, N, C), f16 = ln_forward(DType::BF16, x, w, b, N, C);
    CHECK(max_abs_diff(f16.out, f32.out) < 2e-2, "layernorm bf16 vs f32 out: %.3g", max_abs_diff(f16.out, f32.out));
    CHECK(max_rel_err(f16.rstd, f32.rstd) < 1e-5, "layernorm bf16 vs f32 rstd (same inputs): %.3g",
          max_rel_err(f16.rstd, f32.rstd));
    LnGrad g32 = ln_backward(DType::F32, x, w, b, dout, din0, dw0, db0, N, C);
    LnGrad g16 = ln_backward(DType::BF16, x, w, b, dout, din0, dw0, db0, N, C);
    CHECK(norm_rel_err(g16.din, g32.din) < 1e-2, "layernorm bf16 din: %.3g", norm_rel_err(g16.din, g32.din));
    CHECK(norm_rel_err(g16.dw, g32.dw) < 1e-2, "layernorm bf16 dweight: %.3g", norm_rel_err(g16.dw, g32.dw));
    CHECK(norm_rel_err(g16.db, g32.db) < 1e-2, "layernorm bf16 dbias: %.3g", norm_rel_err(g16.db, g32.db));
}

// The backward's dweight/dbias sums over rows give the same bits with 1 and with 3 OpenMP threads (fixed
// order, not thread-count order): runs do not depend on the machine.
static void test_thread_independence(std::mt19937& rng) {
    const int N = 300, C = 200;
    vf x = random_vec((size_t)N * C, rng), w = random_vec(C, rng), b = random_vec(C, rng);
    vf dout = random_vec((size_t)N * C, rng), z((size_t)N * C, 0.0f), zc(C, 0.0f);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    LnGrad g1 = ln_backward(DType::F32, x, w, b, dout, z, zc, zc, N, C);
    omp_set_num_threads(3);
    LnGrad g3 = ln_backward(DType::F32, x, w, b, dout, z, zc, zc, N, C);
    omp_set_num_threads(saved);
    CHECK(bitwise_equal(g1.dw, g3.dw) && bitwise_equal(g1.db, g3.db) && bitwise_equal(g1.din, g3.din),
          "layernorm backward depends on the number of threads");
}

// The first write of a step: Overwrite gives the bits of zeroing and accumulating (din still accumulates).
static void test_overwrite(std::mt19937& rng) {
    const int N = 300, C = 200;
    vf x = random_vec((size_t)N * C, rng), w = random_vec(C, rng), b = random_vec(C, rng);
    vf dout = random_vec((size_t)N * C, rng), din0 = random_vec((size_t)N * C, rng), zc(C, 0.0f);
    for (DType dt : {DType::F32, DType::BF16}) {
        LnGrad acc = ln_backward(dt, x, w, b, dout, din0, zc, zc, N, C);
        LnGrad over = ln_backward(dt, x, w, b, dout, din0, zc, zc, N, C, GradWrite::Overwrite);
        CHECK(bitwise_equal(over.dw, acc.dw) && bitwise_equal(over.db, acc.db) && bitwise_equal(over.din, acc.din),
              "layernorm_backward Overwrite differs from zeros + accumulate [%s]", dtype_name(dt));
    }
}

// dbias (and dweight, in the same loop) sum over all the step's rows. Summed down the rows in one running
// float, the error grows with N; the pairwise order (vec8.h, cpu_pairwise_row_sums) keeps it near one
// rounding. dout in [0.5, 1.5] (a sum that only grows), N = 8192: the running sum's error was 2e-6 relative
// (bench/PERF_NOTES.md "Accuracy"), the bound here is 4e-7.
static void test_backward_sums_accuracy(std::mt19937& rng) {
    const int N = 8192, C = 67;
    vf x = random_vec((size_t)N * C, rng), w = random_vec(C, rng), b = random_vec(C, rng);
    vf dout = random_vec((size_t)N * C, rng, 0.5f, 1.5f), z((size_t)N * C, 0.0f), zc(C, 0.0f);
    LnGrad g = ln_backward(DType::F32, x, w, b, dout, z, zc, zc, N, C, GradWrite::Overwrite);
    // The reference's gradients kept in double (the bound is below one fp32 rounding of the sum).
    std::vector<double> rm(N), rr(N), ro((size_t)N * C), rdin((size_t)N * C, 0.0), rdw(C, 0.0), want(C, 0.0);
    ref_layernorm_forward(ro.data(), rm.data(), rr.data(), x.data(), w.data(), b.data(), N, C);
    ref_layernorm_backward(rdin.data(), rdw.data(), want.data(), dout.data(), x.data(), w.data(), rm.data(), rr.data(),
                           N, C);
    double worst = 0;
    for (int c = 0; c < C; c++) worst = std::fmax(worst, std::fabs(g.db[c] - want[c]) / want[c]);
    CHECK(worst < 4e-7, "layernorm dbias over %d rows vs double: relative error %.3g (bound 4e-7)", N, worst);
}

static void cpu_checks() {
    std::mt19937 rng(1234);
    test_layernorm_forward_values(rng);
    test_layernorm_gradients(rng);
    test_layernorm_bf16(rng);
    test_thread_independence(rng);
    test_overwrite(rng);
    test_backward_sums_accuracy(rng);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

static void test_layernorm_gpu(DType dt, int N, int C, std::mt19937& rng) {
    const ElementwiseTol tol = elementwise_tol(dt);
    const char* dn = dtype_name(dt);
    const int64_t n = (int64_t)N * C;
    vf xv = random_vec(n, rng, -2.f, 2.f);
    for (int r = 0; r < N; r++)  // per-row offsets, as in the residual stream
        for (int c = 0; c < C; c++) xv[(size_t)r * C + c] += 0.1f * (r % 7);
    const vf wv = random_vec(C, rng, 0.5f, 1.5f), bv = random_vec(C, rng);
    TensorPair x = on_both(dt, xv), w = on_both(dt, wv), b = on_both(dt, bv);
    TensorPair out = poisoned_pair(dt, n), mean = poisoned_pair(DType::F32, N), rstd = poisoned_pair(DType::F32, N);
    layernorm_forward(g_cpu, out.c, mean.c, rstd.c, x.c, w.c, b.c, N, C);
    layernorm_forward(g_gpu, out.g, mean.g, rstd.g, x.g, w.g, b.g, N, C);
    vf out_g = to_host(out.g);
    check_close(out_g, to_host(out.c), tol.rtol, tol.atol, "layernorm_forward out", dn, N, C);
    check_close(to_host(mean.g), to_host(mean.c), 1e-5, 1e-5, "layernorm_forward mean", dn, N, C);
    check_close(to_host(rstd.g), to_host(rstd.c), 1e-5, 1e-5, "layernorm_forward rstd", dn, N, C);
    // The reference (layers/reference/layernorm.h) on the same rounded inputs.
    const vf xr = round_to(dt, xv), wr = round_to(dt, wv), br = round_to(dt, bv);
    vf r_out(n), r_mean(N), r_rstd(N);
    ref_layernorm_forward(r_out.data(), r_mean.data(), r_rstd.data(), xr.data(), wr.data(), br.data(), N, C);
    check_close_vs_reference("layernorm_forward out", dt, out_g, to_host(out.c), r_out, tol.rtol, tol.atol, N, C);
    check_close_vs_reference("layernorm_forward mean", dt, to_host(mean.g), to_host(mean.c), r_mean, 1e-5, 1e-5, N, C);
    check_close_vs_reference("layernorm_forward rstd", dt, to_host(rstd.g), to_host(rstd.c), r_rstd, 1e-5, 1e-5, N, C);
    // without mean/rstd (a caller that does not keep them): the same output bits
    TensorPair out2 = poisoned_pair(dt, n);
    layernorm_forward(g_gpu, out2.g, Tensor(), Tensor(), x.g, w.g, b.g, N, C);
    CHECK(bitwise_equal(to_host(out2.g), out_g), "layernorm_forward without mean/rstd differs [%s N=%d C=%d]", dn, N, C);

    // backward: both devices get the CPU's mean/rstd, so only the backward is compared
    Tensor mean_g2 = make_tensor(Device::CUDA, DType::F32, to_host(mean.c));
    Tensor rstd_g2 = make_tensor(Device::CUDA, DType::F32, to_host(rstd.c));
    vf din0 = random_vec(n, rng), dw0 = random_vec(C, rng), db0 = random_vec(C, rng);
    const vf dv = random_vec(n, rng);
    TensorPair dout = on_both(dt, dv);
    TensorPair din = on_both(dt, din0), dw = on_both(DType::F32, dw0), db = on_both(DType::F32, db0);
    layernorm_backward(g_cpu, din.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, N, C);
    layernorm_backward(g_gpu, din.g, dw.g, db.g, dout.g, x.g, w.g, mean_g2, rstd_g2, N, C);
    vf din_1 = to_host(din.g), dw_1 = to_host(dw.g), db_1 = to_host(db.g);
    check_close(din_1, to_host(din.c), tol.rtol, tol.atol, "layernorm_backward din (accumulated)", dn, N, C);
    check_close(dw_1, to_host(dw.c), tol.rtol, tol.atol_reduce, "layernorm_backward dweight (accumulated)", dn, N, C);
    check_close(db_1, to_host(db.c), tol.rtol, tol.atol_reduce, "layernorm_backward dbias (accumulated)", dn, N, C);
    vf r_din = round_to(dt, din0), r_dw = dw0, r_db = db0;
    const vf dr = round_to(dt, dv);
    ref_layernorm_backward(r_din.data(), r_dw.data(), r_db.data(), dr.data(), xr.data(), wr.data(), r_mean.data(),
                           r_rstd.data(), N, C);
    check_close_vs_reference("layernorm_backward din (accumulated)", dt, din_1, to_host(din.c), r_din, tol.rtol, tol.atol,
                             N, C);
    check_close_vs_reference("layernorm_backward dweight (accumulated)", dt, dw_1, to_host(dw.c), r_dw, tol.rtol,
                             tol.atol_reduce, N, C);
    check_close_vs_reference("layernorm_backward dbias (accumulated)", dt, db_1, to_host(db.c), r_db, tol.rtol,
                             tol.atol_reduce, N, C);
    // determinism: the same call again from the same prefilled values gives the same bits
    tensor_from_host_f32(din.g, din0.data());
    tensor_from_host_f32(dw.g, dw0.data());
    tensor_from_host_f32(db.g, db0.data());
    layernorm_backward(g_gpu, din.g, dw.g, db.g, dout.g, x.g, w.g, mean_g2, rstd_g2, N, C);
    CHECK(bitwise_equal(to_host(dw.g), dw_1) && bitwise_equal(to_host(db.g), db_1) &&
              bitwise_equal(to_host(din.g), din_1),
          "layernorm_backward is not bitwise reproducible [%s N=%d C=%d]", dn, N, C);
    // The first write of a step: poisoned dweight / dbias overwritten, against the CPU accumulating into zeros.
    const vf zc(C, 0.0f);
    TensorPair dw0z = on_both(DType::F32, zc), db0z = on_both(DType::F32, zc);
    TensorPair dwp = poisoned_pair(DType::F32, C), dbp = poisoned_pair(DType::F32, C);
    tensor_from_host_f32(din.c, din0.data());
    tensor_from_host_f32(din.g, din0.data());
    layernorm_backward(g_cpu, din.c, dw0z.c, db0z.c, dout.c, x.c, w.c, mean.c, rstd.c, N, C);
    layernorm_backward(g_gpu, din.g, dwp.g, dbp.g, dout.g, x.g, w.g, mean_g2, rstd_g2, N, C, GradWrite::Overwrite);
    check_close(to_host(dwp.g), to_host(dw0z.c), tol.rtol, tol.atol_reduce, "layernorm_backward dweight (Overwrite)", dn,
                N, C);
    check_close(to_host(dbp.g), to_host(db0z.c), tol.rtol, tol.atol_reduce, "layernorm_backward dbias (Overwrite)", dn, N,
                C);
    free_all({&dw0z, &db0z, &dwp, &dbp});
    tensor_free(mean_g2);
    tensor_free(rstd_g2);
    free_all({&x, &w, &b, &out, &mean, &rstd, &out2, &dout, &din, &dw, &db});
}

static void gpu_checks() {
    std::mt19937 rng(4321);
    // The shapes (test/layers/gpu_shapes.h, where test_kernel_coverage reads them too): every forward kernel
    // instantiation, and the fallback kernel with 16-byte packs and element by element.
    for (DType dt : {DType::F32, DType::BF16})
        for (const LnGpuCase& s : kLayerNormGpuCases)
            if (runs_in(s.dtypes, dt)) test_layernorm_gpu(dt, s.N, s.C, rng);
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_layernorm", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
