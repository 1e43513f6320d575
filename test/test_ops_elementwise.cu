// test_ops_elementwise.cu — CPU unit tests of the element-wise ops (label: unit).
//
//  * Philox4x32-10 against the published Random123 known-answer vectors.
//  * LayerNorm, GeLU, dropout, residual: backward against central finite differences of the forward, for a
//    scalar loss L = Σ w_i · out_i with random w (per element on small tensors, along a random direction on
//    larger ones); accumulating outputs are prefilled, so "+=" is checked too.
//  * Dropout: keep fraction ≈ 1 - p; masks keyed by *global* coordinates (a sub-block computed with offsets
//    equals the slice of the full tensor's mask, bit for bit); p = 0 writes an all-ones mask.
//  * AdamW against a hand-written double-precision reference for 3 steps; sum_of_squares, scale_inplace.
//  * bf16 storage against fp32 storage (same values) within bf16 tolerance.
//  * Reductions do not depend on the number of OpenMP threads (bitwise).
#include <omp.h>
#include <cstdint>
#include "../layers/adamw.h"
#include "../layers/dropout.h"
#include "../layers/gelu.h"
#include "../layers/layernorm.h"
#include "../layers/philox.h"
#include "../layers/residual.h"
#include "test_util.h"

typedef std::vector<float> vf;
static Ctx g_cpu;

static Tensor host(DType dt, const vf& v) { return make_tensor(Device::CPU, dt, v); }
static vf get(Tensor t) { return tensor_to_host_f32(t); }
static void free_all(std::initializer_list<Tensor*> ts) {
    for (Tensor* t : ts) tensor_free(*t);
}
static double dot(const vf& a, const vf& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += (double)a[i] * (double)b[i];
    return s;
}
static vf axpy(const vf& x, double h, const vf& d) {  // x + h·d
    vf r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = (float)((double)x[i] + h * (double)d[i]);
    return r;
}
static vf minus(const vf& a, const vf& b) {
    vf r(a.size());
    for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
    return r;
}
static double max_abs_diff(const vf& a, const vf& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = std::fabs((double)a[i] - (double)b[i]);
        if (std::isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}
// Finite-difference agreement: |numeric - analytic| <= kFdTol · (|analytic| + scale), where `scale` is the
// typical size of the gradient (so entries that are ~0 are judged on an absolute scale). Central differences
// with h = 1e-2 on fp32 ops land within ~2e-4 here (truncation h² plus fp32 rounding / h); 2e-3 leaves a 10x
// margin and still catches a gradient that is off by 1%.
constexpr double kFdTol = 2e-3;
static bool fd_close(double numeric, double analytic, double scale) {
    return std::fabs(numeric - analytic) <= kFdTol * (std::fabs(analytic) + scale);
}
static double rms(const vf& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return std::sqrt(s / (v.empty() ? 1 : v.size()));
}

// ---------------------------------------------------------------------------------------------------------
// Philox4x32-10 known answers (Random123's kat_vectors file, "philox4x32 10" lines).
static void test_philox_kat() {
    struct Kat { uint32_t ctr[4], key[2], out[4]; };
    const Kat kats[3] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (int k = 0; k < 3; k++) {
        const Kat& t = kats[k];
        PhiloxOut o = philox4x32_10(t.ctr[0], t.ctr[1], t.ctr[2], t.ctr[3], t.key[0], t.key[1]);
        for (int j = 0; j < 4; j++)
            CHECK(o.x[j] == t.out[j], "philox KAT %d word %d: got %08x want %08x", k, j, o.x[j], t.out[j]);
    }
    CHECK(dropout_threshold(0.0f) == 0u, "threshold(0)");
    CHECK(dropout_threshold(0.5f) == 0x80000000u, "threshold(0.5) = %08x", dropout_threshold(0.5f));
    CHECK(dropout_threshold(1.0f) == 0xFFFFFFFFu, "threshold(1)");
}

// ---------------------------------------------------------------------------------------------------------
// LayerNorm
struct LnFwd { vf out, mean, rstd; };
static LnFwd ln_forward(DType dt, const vf& x, const vf& w, const vf& b, int N, int C) {
    Tensor tx = host(dt, x), tw = host(dt, w), tb = host(dt, b);
    Tensor to = tensor_alloc(Device::CPU, dt, (int64_t)N * C);
    Tensor tm = tensor_alloc(Device::CPU, DType::F32, N), tr = tensor_alloc(Device::CPU, DType::F32, N);
    layernorm_forward(g_cpu, to, tm, tr, tx, tw, tb, N, C);
    LnFwd r{get(to), get(tm), get(tr)};
    free_all({&tx, &tw, &tb, &to, &tm, &tr});
    return r;
}
static double ln_loss(const vf& x, const vf& w, const vf& b, const vf& wl, int N, int C) {
    return dot(ln_forward(DType::F32, x, w, b, N, C).out, wl);
}
struct LnGrad { vf din, dw, db; };
// Runs the backward on prefilled accumulators (din0, dw0, db0) and returns the accumulated values.
static LnGrad ln_backward(DType dt, const vf& x, const vf& w, const vf& b, const vf& dout, const vf& din0,
                          const vf& dw0, const vf& db0, int N, int C) {
    Tensor tx = host(dt, x), tw = host(dt, w), tb = host(dt, b), tdo = host(dt, dout), tdi = host(dt, din0);
    Tensor tdw = host(DType::F32, dw0), tdb = host(DType::F32, db0);
    Tensor to = tensor_alloc(Device::CPU, dt, (int64_t)N * C);
    Tensor tm = tensor_alloc(Device::CPU, DType::F32, N), tr = tensor_alloc(Device::CPU, DType::F32, N);
    layernorm_forward(g_cpu, to, tm, tr, tx, tw, tb, N, C);
    layernorm_backward(g_cpu, tdi, tdw, tdb, tdo, tx, tw, tm, tr, N, C);
    LnGrad g{get(tdi), get(tdw), get(tdb)};
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
    double worst = 0, worst_stat = 0;
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[(size_t)r * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[(size_t)r * C + c] - m) * (x[(size_t)r * C + c] - m);
        double s = 1.0 / std::sqrt(v / C + 1e-5);
        worst_stat = std::fmax(worst_stat, std::fabs(f.mean[r] - m) / (std::fabs(m) + 1e-3));
        worst_stat = std::fmax(worst_stat, std::fabs(f.rstd[r] - s) / s);
        for (int c = 0; c < C; c++) {
            double want = (x[(size_t)r * C + c] - m) * s * w[c] + b[c];
            worst = std::fmax(worst, std::fabs(f.out[(size_t)r * C + c] - want));
        }
    }
    CHECK(worst_stat < 1e-4, "layernorm mean/rstd vs double: rel err %.3g", worst_stat);
    CHECK(worst < 1e-3, "layernorm out vs double reference: max abs err %.3g", worst);
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

// ---------------------------------------------------------------------------------------------------------
// GeLU
static vf gelu_fwd(DType dt, const vf& x) {
    Tensor tx = host(dt, x), to = tensor_alloc(Device::CPU, dt, (int64_t)x.size());
    gelu_forward(g_cpu, to, tx, (int64_t)x.size());
    vf r = get(to);
    free_all({&tx, &to});
    return r;
}
static vf gelu_bwd(DType dt, const vf& x, const vf& dout, bool in_place) {
    Tensor tx = host(dt, x), tdo = host(dt, dout);
    Tensor tdi = in_place ? tdo : tensor_alloc(Device::CPU, dt, (int64_t)x.size());
    gelu_backward(g_cpu, tdi, tx, tdo, (int64_t)x.size());
    vf r = get(tdi);
    if (!in_place) tensor_free(tdi);
    free_all({&tx, &tdo});
    return r;
}

static void test_gelu(std::mt19937& rng) {
    vf x = random_vec(1000, rng, -4.f, 4.f);
    for (float e : {-100.f, -50.f, -10.f, -0.75f, 0.f, 10.f, 50.f, 100.f}) x.push_back(e);
    const size_t n = x.size();
    // forward against the formula in double
    vf y = gelu_fwd(DType::F32, x);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i], u = std::sqrt(2.0 / M_PI) * (xi + 0.044715 * xi * xi * xi);
        double want = 0.5 * xi * (1.0 + std::tanh(u));
        // 1 + tanh(u) cancels for x << 0, so judge errors against O(1) there: 1e-5 relative + 1e-6 absolute
        worst = std::fmax(worst, std::fabs(y[i] - want) / (1e-5 * std::fabs(want) + 1e-6));
    }
    CHECK(worst <= 1, "gelu forward vs double formula: error / allowed = %.3g", worst);
    // backward against central differences, per element
    vf w = random_vec(n, rng);
    vf g = gelu_bwd(DType::F32, x, w, false);
    const float h = 1e-2f;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        vf p = {x[i] + h}, m = {x[i] - h};
        double num = w[i] * ((double)gelu_fwd(DType::F32, p)[0] - (double)gelu_fwd(DType::F32, m)[0]) / (2.0 * h);
        if (!std::isfinite(g[i]) || !fd_close(num, g[i], 0.1)) {
            bad++;
            if (bad < 5) fprintf(stderr, "  gelu x=%g: numeric %.6f analytic %.6f\n", x[i], num, g[i]);
        }
    }
    CHECK(bad == 0, "gelu finite differences: %d mismatches of %zu", bad, n);
    // in place (din aliases dout) gives the same result
    CHECK(bitwise_equal(gelu_bwd(DType::F32, x, w, true), g), "gelu backward in place differs");
    // bf16 storage vs f32 storage, same values
    vf xb = round_bf16(x), wb = round_bf16(w);
    CHECK(max_rel_err(gelu_fwd(DType::BF16, xb), gelu_fwd(DType::F32, xb), 1e-2) < 1e-2, "gelu bf16 forward");
    CHECK(max_rel_err(gelu_bwd(DType::BF16, xb, wb, false), gelu_bwd(DType::F32, xb, wb, false), 1e-2) < 1e-2,
          "gelu bf16 backward");
}

// ---------------------------------------------------------------------------------------------------------
// Dropout (+ bias + residual)
struct DropOut { vf out, mask; };
static DropOut bdr_forward(DType dt, const vf& x, const vf* bias, const vf* resid, float p, uint64_t seed,
                           uint32_t stream, int S, int B, int C, DropoutCoords where, bool out_aliases_x = false) {
    const int64_t n = (int64_t)S * B * C;
    Tensor tx = host(dt, x), tb, tr;
    if (bias) tb = host(dt, *bias);
    if (resid) tr = host(dt, *resid);
    Tensor to = out_aliases_x ? tx : tensor_alloc(Device::CPU, dt, n);
    Tensor tm = tensor_alloc(Device::CPU, DType::U8, n);
    tensor_fill_f32(tm, 7.0f);  // neither 0 nor 1: every byte must be written
    bias_dropout_residual_forward(g_cpu, to, tm, tx, tb, tr, p, seed, stream, S, B, C, where);
    DropOut r{get(to), get(tm)};
    if (!out_aliases_x) tensor_free(to);
    free_all({&tx, &tb, &tr, &tm});
    return r;
}
static vf drop_backward(DType dt, const vf& dout, const vf& mask, float p, bool in_place) {
    Tensor tdo = host(dt, dout), tm = host(DType::U8, mask);
    Tensor tdx = in_place ? tdo : tensor_alloc(Device::CPU, dt, (int64_t)dout.size());
    dropout_backward(g_cpu, tdx, tdo, tm, p, (int64_t)dout.size());
    vf r = get(tdx);
    if (!in_place) tensor_free(tdx);
    free_all({&tdo, &tm});
    return r;
}

static void test_dropout(std::mt19937& rng) {
    const uint64_t seed = 0x1234abcd5678ull;
    const uint32_t stream = dropout_stream(3, kSiteMlpOut);
    // keep fraction ≈ 1 - p within 5 standard deviations
    for (float p : {0.1f, 0.5f}) {
        const int S = 64, B = 4, C = 256;
        const double n = (double)S * B * C;
        vf x((size_t)n, 1.0f);
        DropoutCoords where;
        where.B_total = B;
        DropOut d = bdr_forward(DType::F32, x, nullptr, nullptr, p, seed, stream, S, B, C, where);
        double kept = 0;
        for (float m : d.mask) kept += m;
        double frac = kept / n, sigma = std::sqrt(p * (1.0 - p) / n);
        CHECK(std::fabs(frac - (1.0 - p)) < 5 * sigma, "p=%.2f: keep fraction %.5f, expected %.5f ± %.5f", p, frac,
              1.0 - p, 5 * sigma);
    }
    // values, mask bits from the documented global index, p = 0, empty bias/resid, aliasing
    {
        const int S = 16, B = 6, C = 37;
        const size_t n = (size_t)S * B * C;
        vf x = random_vec(n, rng), bias = random_vec(C, rng), resid = random_vec(n, rng);
        DropoutCoords full;
        full.B_total = B;
        const float p = 0.1f, scale = 1.0f / (1.0f - p);
        DropOut d = bdr_forward(DType::F32, x, &bias, &resid, p, seed, stream, S, B, C, full);
        int bad_mask = 0, bad_val = 0;
        for (size_t i = 0; i < n; i++) {
            bool keep = dropout_keep(seed, stream, i, dropout_threshold(p));  // full block: local index = global
            if (d.mask[i] != (keep ? 1.0f : 0.0f)) bad_mask++;
            float want = resid[i] + (keep ? (x[i] + bias[i % C]) * scale : 0.0f);
            if (std::fabs(d.out[i] - want) > 1e-6f * (1 + std::fabs(want))) bad_val++;
        }
        CHECK(bad_mask == 0, "dropout mask != dropout_keep(global index): %d elements", bad_mask);
        CHECK(bad_val == 0, "dropout output values: %d wrong", bad_val);

        // sub-block with offsets == slice of the full tensor (mask bits and values, bitwise)
        DropoutCoords sub;
        sub.s_offset = 5, sub.b_offset = 2, sub.B_total = B;
        const int Sl = 7, Bl = 3;
        vf xs, rs, mask_slice, out_slice;
        for (int s = 0; s < Sl; s++)
            for (int b = 0; b < Bl; b++)
                for (int c = 0; c < C; c++) {
                    size_t g = ((size_t)(sub.s_offset + s) * B + (sub.b_offset + b)) * C + c;
                    xs.push_back(x[g]), rs.push_back(resid[g]);
                    mask_slice.push_back(d.mask[g]), out_slice.push_back(d.out[g]);
                }
        DropOut ds = bdr_forward(DType::F32, xs, &bias, &rs, p, seed, stream, Sl, Bl, C, sub);
        CHECK(bitwise_equal(ds.mask, mask_slice), "sub-block mask differs from the full mask's slice");
        CHECK(bitwise_equal(ds.out, out_slice), "sub-block output differs from the full output's slice");
        // sequence-parallel shards (all batches, S/4 positions each) concatenate to the full mask
        vf cat;
        for (int k = 0; k < 4; k++) {
            DropoutCoords sh;
            sh.s_offset = k * (S / 4), sh.B_total = B;
            vf xk(x.begin() + (size_t)k * (S / 4) * B * C, x.begin() + (size_t)(k + 1) * (S / 4) * B * C);
            DropOut dk = bdr_forward(DType::F32, xk, &bias, nullptr, p, seed, stream, S / 4, B, C, sh);
            cat.insert(cat.end(), dk.mask.begin(), dk.mask.end());
        }
        CHECK(bitwise_equal(cat, d.mask), "SP shards' masks do not concatenate to the full mask");

        // another stream or seed gives another mask
        DropOut other = bdr_forward(DType::F32, x, &bias, &resid, p, seed, stream + 1, S, B, C, full);
        DropOut other2 = bdr_forward(DType::F32, x, &bias, &resid, p, seed + 1, stream, S, B, C, full);
        CHECK(!bitwise_equal(other.mask, d.mask), "different stream, same mask");
        CHECK(!bitwise_equal(other2.mask, d.mask), "different seed, same mask");

        // p = 0: all-ones mask, out = resid + x + bias
        DropOut d0 = bdr_forward(DType::F32, x, &bias, &resid, 0.0f, seed, stream, S, B, C, full);
        int bad0 = 0;
        for (size_t i = 0; i < n; i++)
            if (d0.mask[i] != 1.0f || d0.out[i] != resid[i] + (x[i] + bias[i % C])) bad0++;
        CHECK(bad0 == 0, "p = 0: %d elements not (mask 1, out = resid + x + bias)", bad0);

        // no bias, no residual: out = mask · x · scale; and out aliasing x gives the same
        DropOut dn = bdr_forward(DType::F32, x, nullptr, nullptr, p, seed, stream, S, B, C, full);
        int badn = 0;
        for (size_t i = 0; i < n; i++)
            if (dn.mask[i] != d.mask[i] || dn.out[i] != (d.mask[i] ? x[i] * scale : 0.0f)) badn++;
        CHECK(badn == 0, "no bias / no residual: %d wrong", badn);
        DropOut da = bdr_forward(DType::F32, x, &bias, &resid, p, seed, stream, S, B, C, full, true);
        CHECK(bitwise_equal(da.out, d.out) && bitwise_equal(da.mask, d.mask), "out aliasing x differs");

        // backward: dx = dout ⊙ mask / (1-p), and it is the derivative of L = Σ w · out along a direction
        vf w = random_vec(n, rng), dir = random_vec(n, rng);
        vf dx = drop_backward(DType::F32, w, d.mask, p, false);
        int badb = 0;
        for (size_t i = 0; i < n; i++)
            if (dx[i] != (d.mask[i] ? w[i] * scale : 0.0f)) badb++;
        CHECK(badb == 0, "dropout_backward values: %d wrong", badb);
        CHECK(bitwise_equal(drop_backward(DType::F32, w, d.mask, p, true), dx), "dropout_backward in place differs");
        const double h = 1e-2;
        double lp = dot(bdr_forward(DType::F32, axpy(x, h, dir), &bias, &resid, p, seed, stream, S, B, C, full).out, w);
        double lm = dot(bdr_forward(DType::F32, axpy(x, -h, dir), &bias, &resid, p, seed, stream, S, B, C, full).out, w);
        double num = (lp - lm) / (2 * h), ana = dot(dx, dir);
        CHECK(std::fabs(num - ana) <= kFdTol * std::fabs(ana), "dropout dL/dx·d: numeric %.6f analytic %.6f", num, ana);

        // bf16 storage: same mask bits, values within bf16 tolerance
        vf xb = round_bf16(x), bb = round_bf16(bias), rb = round_bf16(resid);
        DropOut f32 = bdr_forward(DType::F32, xb, &bb, &rb, p, seed, stream, S, B, C, full);
        DropOut b16 = bdr_forward(DType::BF16, xb, &bb, &rb, p, seed, stream, S, B, C, full);
        CHECK(bitwise_equal(f32.mask, b16.mask), "bf16 mask differs from f32 mask");
        CHECK(max_rel_err(b16.out, f32.out, 1e-2) < 1e-2, "bf16 dropout out: %.3g", max_rel_err(b16.out, f32.out, 1e-2));
        vf wb = round_bf16(w);
        CHECK(max_rel_err(drop_backward(DType::BF16, wb, d.mask, p, false), drop_backward(DType::F32, wb, d.mask, p, false),
                          1e-2) < 1e-2, "bf16 dropout_backward");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Residual add and gradient accumulation
static void test_residual(std::mt19937& rng) {
    const int64_t n = 1001;
    vf a = random_vec(n, rng), b = random_vec(n, rng), w = random_vec(n, rng), d = random_vec(n, rng);
    for (DType dt : {DType::F32, DType::BF16}) {
        vf ar = dt == DType::BF16 ? round_bf16(a) : a, br = dt == DType::BF16 ? round_bf16(b) : b;
        Tensor ta = host(dt, ar), tb = host(dt, br), to = tensor_alloc(Device::CPU, dt, n);
        residual_forward(g_cpu, to, ta, tb, n);
        vf out = get(to);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = dt == DType::BF16 ? to_f32(from_f32<bf16>(ar[i] + br[i])) : ar[i] + br[i];
            if (out[i] != want) bad++;
        }
        CHECK(bad == 0, "residual_forward %s: %d wrong", dtype_name(dt), bad);
        residual_forward(g_cpu, ta, ta, tb, n);  // out aliasing a
        CHECK(bitwise_equal(get(ta), out), "residual_forward in place (%s) differs", dtype_name(dt));
        accumulate(g_cpu, tb, to, n);  // b += (a + b)
        vf acc = get(tb);
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = dt == DType::BF16 ? to_f32(from_f32<bf16>(br[i] + out[i])) : br[i] + out[i];
            if (acc[i] != want) bad++;
        }
        CHECK(bad == 0, "accumulate %s: %d wrong", dtype_name(dt), bad);
        free_all({&ta, &tb, &to});
    }
    // gradient: L = Σ w · (a + b) has dL/da = dL/db = w; the backward of the residual branch is
    // "dst += src" — check it accumulates the finite-difference gradient onto a prefilled buffer.
    auto loss = [&](const vf& aa) {
        Tensor ta = host(DType::F32, aa), tb = host(DType::F32, b), to = tensor_alloc(Device::CPU, DType::F32, n);
        residual_forward(g_cpu, to, ta, tb, n);
        double l = dot(get(to), w);
        free_all({&ta, &tb, &to});
        return l;
    };
    const double h = 1e-2;
    double num = (loss(axpy(a, h, d)) - loss(axpy(a, -h, d))) / (2 * h);
    vf g0 = random_vec(n, rng);
    Tensor tg = host(DType::F32, g0), tw = host(DType::F32, w);
    accumulate(g_cpu, tg, tw, n);
    double ana = dot(minus(get(tg), g0), d);
    CHECK(std::fabs(num - ana) <= kFdTol * std::fabs(ana), "residual dL/da·d: numeric %.6f analytic %.6f", num, ana);
    free_all({&tg, &tw});
}

// ---------------------------------------------------------------------------------------------------------
// AdamW, sum of squares, scale
static void test_adamw(std::mt19937& rng) {
    const int64_t n = 777;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    vf p0 = random_vec(n, rng);
    std::vector<vf> grads;
    for (int t = 0; t < 3; t++) grads.push_back(random_vec(n, rng));
    grads[0][0] = 0.0f;  // a zero gradient on the first step: only weight decay moves it
    // hand-written reference, in double
    std::vector<double> P(p0.begin(), p0.end()), M(n, 0.0), V(n, 0.0);
    for (int t = 1; t <= 3; t++)
        for (int64_t i = 0; i < n; i++) {
            double g = (double)grads[t - 1][i] * gs;
            M[i] = b1 * M[i] + (1 - (double)b1) * g;
            V[i] = b2 * V[i] + (1 - (double)b2) * g * g;
            double mh = M[i] / (1 - std::pow((double)b1, t)), vh = V[i] / (1 - std::pow((double)b2, t));
            P[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * P[i]);
        }
    for (DType gdt : {DType::F32, DType::BF16}) {
        Tensor tp = host(DType::F32, p0), tm = tensor_zeros(Device::CPU, DType::F32, n);
        Tensor tv = tensor_zeros(Device::CPU, DType::F32, n);
        for (int t = 1; t <= 3; t++) {
            Tensor tg = host(gdt, grads[t - 1]);
            adamw_update(g_cpu, tp, tg, tm, tv, n, lr, b1, b2, eps, wd, t, gs);
            tensor_free(tg);
        }
        vf ref_p(P.begin(), P.end()), ref_m(M.begin(), M.end()), ref_v(V.begin(), V.end());
        double tol = gdt == DType::F32 ? 1e-5 : 1e-2;
        CHECK(max_rel_err(get(tp), ref_p) < tol, "adamw (%s grads) params: %.3g", dtype_name(gdt),
              max_rel_err(get(tp), ref_p));
        CHECK(norm_rel_err(get(tm), ref_m) < tol, "adamw (%s grads) m: %.3g", dtype_name(gdt), norm_rel_err(get(tm), ref_m));
        CHECK(norm_rel_err(get(tv), ref_v) < tol, "adamw (%s grads) v: %.3g", dtype_name(gdt), norm_rel_err(get(tv), ref_v));
        free_all({&tp, &tm, &tv});
    }
}

static void test_sum_of_squares_and_scale(std::mt19937& rng) {
    const int64_t n = 200003;  // several of the CPU's fixed chunks, and a ragged end
    vf x = random_vec(n, rng, -3.f, 3.f);
    double want = 0;
    for (float v : x) want += (double)v * v;
    Tensor t = host(DType::F32, x);
    double got = sum_of_squares(g_cpu, t);
    CHECK(std::fabs(got - want) <= 1e-12 * want, "sum_of_squares %.17g vs %.17g", got, want);
    scale_inplace(g_cpu, t, 0.25f);
    vf s = get(t);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (s[i] != x[i] * 0.25f) bad++;
    CHECK(bad == 0, "scale_inplace: %d wrong", bad);
    tensor_free(t);
    Tensor e = tensor_alloc(Device::CPU, DType::F32, 0);
    CHECK(sum_of_squares(g_cpu, e) == 0.0, "sum_of_squares of an empty tensor");
    // Batched (the gradient norm's form): the same bits as one call per tensor, mixed dtypes, empty ones 0.
    vf y = random_vec(70001, rng);
    Tensor ty = host(DType::F32, y), tyb = host(DType::BF16, y), tx = host(DType::F32, x);
    const double s_x = sum_of_squares(g_cpu, tx), s_y = sum_of_squares(g_cpu, ty), s_yb = sum_of_squares(g_cpu, tyb);
    std::vector<double> batch = sums_of_squares(g_cpu, {tx, e, ty, tyb});
    CHECK(batch.size() == 4 && memcmp(&batch[0], &s_x, sizeof(double)) == 0 && batch[1] == 0.0 &&
              memcmp(&batch[2], &s_y, sizeof(double)) == 0 && memcmp(&batch[3], &s_yb, sizeof(double)) == 0,
          "sums_of_squares: batched sums differ from single calls");
    CHECK(s_yb != s_y, "bf16 storage rounds (the batched check saw two different dtypes)");
    tensor_free(ty);
    tensor_free(tyb);
    tensor_free(tx);
}

// Reductions give the same bits with 1 and with 3 OpenMP threads (fixed order, not thread-count order).
static void test_thread_independence(std::mt19937& rng) {
    const int N = 300, C = 200;
    vf x = random_vec((size_t)N * C, rng), w = random_vec(C, rng), b = random_vec(C, rng);
    vf dout = random_vec((size_t)N * C, rng), z((size_t)N * C, 0.0f), zc(C, 0.0f);
    vf big = random_vec(300000, rng);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    LnGrad g1 = ln_backward(DType::F32, x, w, b, dout, z, zc, zc, N, C);
    Tensor tb = host(DType::F32, big);
    double s1 = sum_of_squares(g_cpu, tb);
    omp_set_num_threads(3);
    LnGrad g3 = ln_backward(DType::F32, x, w, b, dout, z, zc, zc, N, C);
    double s3 = sum_of_squares(g_cpu, tb);
    omp_set_num_threads(saved);
    CHECK(bitwise_equal(g1.dw, g3.dw) && bitwise_equal(g1.db, g3.db) && bitwise_equal(g1.din, g3.din),
          "layernorm backward depends on the number of threads");
    CHECK(memcmp(&s1, &s3, sizeof(double)) == 0, "sum_of_squares depends on the number of threads");
    tensor_free(tb);
}

// dropout_keep8 (one Philox block per four elements, used by the GPU kernels) gives exactly the bits of
// dropout_keep element by element, at any alignment of the first index.
static void test_dropout_keep8() {
    const uint32_t thr = dropout_threshold(0.3f);
    int mismatches = 0;
    for (uint64_t first = 0; first < 40; first++)
        for (uint64_t base : {0ull, 1ull << 33, 123456789ull}) {
            uint32_t bits = dropout_keep8(77, 5, base + first, thr);
            for (int k = 0; k < 8; k++)
                if (((bits >> k) & 1u) != (dropout_keep(77, 5, base + first + k, thr) ? 1u : 0u)) mismatches++;
        }
    CHECK(mismatches == 0, "dropout_keep8 differs from dropout_keep in %d bits", mismatches);
    CHECK(dropout_keep8(77, 5, 3, 0) == 0xFFu, "p = 0 keeps everything");
}

int main() {
    g_cpu = ctx_create(Device::CPU);
    std::mt19937 rng(1234);
    test_philox_kat();
    test_dropout_keep8();
    test_layernorm_forward_values(rng);
    test_layernorm_gradients(rng);
    test_layernorm_bf16(rng);
    test_gelu(rng);
    test_dropout(rng);
    test_residual(rng);
    test_adamw(rng);
    test_sum_of_squares_and_scale(rng);
    test_thread_independence(rng);
    ctx_destroy(g_cpu);
    return test_finish("test_ops_elementwise");
}
