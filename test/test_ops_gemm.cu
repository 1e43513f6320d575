// test_ops_gemm.cu — CPU unit tests of the GEMM-based ops (matmul, linear, attention) and of the embedding
// and cross-entropy ops: against straightforward double-precision references, by directional finite
// differences, and for the properties that tensor/data parallelism relies on (vocab split, head/batch
// sub-ranges reproducing the single-rank slice including dropout masks). Also bf16 vs fp32 agreement.
#include <algorithm>
#include <functional>
#include "../layers/attention.h"
#include "../layers/cross_entropy.h"
#include "../layers/embedding.h"
#include "../layers/linear.h"
#include "../layers/matmul.h"
#include "../layers/philox.h"
#include "test_util.h"

static std::mt19937 g_rng(1234);

// A CPU f32 tensor that aliases a host vector: the op sees every change made to the vector (finite
// differences perturb the vector in place).
static Tensor view(std::vector<float>& v) {
    Tensor t;
    t.data = v.data();
    t.n = (int64_t)v.size();
    t.dtype = DType::F32;
    t.device = Device::CPU;
    return t;
}
static Tensor view_i32(std::vector<int32_t>& v) {
    Tensor t;
    t.data = v.data();
    t.n = (int64_t)v.size();
    t.dtype = DType::I32;
    t.device = Device::CPU;
    return t;
}
static double dot(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += (double)a[i] * b[i];
    return s;
}
static std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// Directional derivative of f at x along d by central differences: (f(x + εd) − f(x − εd)) / 2ε.
// x is perturbed in place and restored.
static double fd_directional(std::vector<float>& x, const std::vector<float>& d, float eps,
                             const std::function<double()>& f) {
    std::vector<float> x0 = x;
    for (size_t i = 0; i < x.size(); i++) x[i] = x0[i] + eps * d[i];
    double fp = f();
    for (size_t i = 0; i < x.size(); i++) x[i] = x0[i] - eps * d[i];
    double fm = f();
    x = x0;
    return (fp - fm) / (2.0 * eps);
}
static void check_fd(const char* what, double fd, double analytic, double tol) {
    double rel = std::fabs(fd - analytic) / (std::fabs(analytic) + 1e-3);
    CHECK(rel < tol, "%s: finite difference %.8g vs analytic %.8g (rel %.3g, tol %.1g)", what, fd, analytic, rel,
          tol);
}

// =========================================================================================================
// gemm
// =========================================================================================================

static void test_gemm(Ctx& ctx) {
    const int M = 7, N = 5, K = 9, PAD = 3;
    const float alpha = 0.75f;
    int cases = 0;
    for (int batch : {1, 3})
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (DType ab : {DType::F32, DType::BF16})
                    for (DType cd : {DType::F32, DType::BF16})
                        for (float beta : {0.f, 1.f}) {
                            if (ab == DType::F32 && cd == DType::BF16) continue;  // not a supported combination
                            // Stored shapes and leading dimensions larger than the minimum.
                            int a_rows = ta ? K : M, a_cols = ta ? M : K;
                            int b_rows = tb ? N : K, b_cols = tb ? K : N;
                            int64_t lda = a_cols + PAD, ldb = b_cols + PAD + 1, ldc = N + PAD;
                            int64_t sA = a_rows * lda + 5, sB = b_rows * ldb + 2, sC = M * ldc + 4;
                            std::vector<float> hA = random_vec(sA * batch, g_rng), hB = random_vec(sB * batch, g_rng),
                                               hC = random_vec(sC * batch, g_rng);
                            if (ab == DType::BF16) { hA = round_bf16(hA); hB = round_bf16(hB); }
                            if (cd == DType::BF16) hC = round_bf16(hC);
                            // beta = 0: C must not be read (BLAS semantics), so poison it.
                            if (beta == 0.f)
                                for (int64_t bt = 0; bt < batch; bt++)
                                    for (int i = 0; i < M; i++)
                                        for (int j = 0; j < N; j++) hC[bt * sC + i * ldc + j] = NAN;
                            Tensor A = make_tensor(Device::CPU, ab, hA), B = make_tensor(Device::CPU, ab, hB),
                                   C = make_tensor(Device::CPU, cd, hC);
                            gemm(ctx, ta, tb, M, N, K, alpha, GemmOperand{A.data, lda, sA}, GemmOperand{B.data, ldb, sB},
                                 beta, C.data, ldc, sC, ab, cd, batch);
                            std::vector<float> got = tensor_to_host_f32(C);
                            // Naive triple loop in double; entries outside the M×N windows must be untouched.
                            std::vector<float> ref = hC;
                            for (int bt = 0; bt < batch; bt++)
                                for (int i = 0; i < M; i++)
                                    for (int j = 0; j < N; j++) {
                                        double s = 0;
                                        for (int k = 0; k < K; k++) {
                                            double a = ta ? hA[bt * sA + k * lda + i] : hA[bt * sA + i * lda + k];
                                            double b = tb ? hB[bt * sB + j * ldb + k] : hB[bt * sB + k * ldb + j];
                                            s += a * b;
                                        }
                                        size_t at = bt * sC + i * ldc + j;
                                        ref[at] = (float)(alpha * s + (beta != 0.f ? beta * hC[at] : 0.0));
                                    }
                            // f32 C: summation-order noise only. bf16 C: one rounding of the fp32 result.
                            double tol = cd == DType::BF16 ? 8e-3 : 1e-5;
                            double err = max_rel_err(got, ref, 1e-2);
                            CHECK(err < tol, "gemm batch=%d tA=%d tB=%d ab=%s c=%s beta=%g: max rel err %.3g", batch,
                                  ta, tb, dtype_name(ab), dtype_name(cd), beta, err);
                            cases++;
                            tensor_free(A);
                            tensor_free(B);
                            tensor_free(C);
                        }
    printf("gemm: %d cases checked\n", cases);
}

// =========================================================================================================
// linear
// =========================================================================================================

static void test_linear(Ctx& ctx) {
    const int N = 5, IC = 7, OC = 6;
    std::vector<float> x = random_vec(N * IC, g_rng), W = random_vec(OC * IC, g_rng), b = random_vec(OC, g_rng);
    std::vector<float> G = random_vec(N * OC, g_rng);  // dL/dout for L = Σ G ⊙ out
    std::vector<float> out(N * OC, NAN);
    Tensor none;
    // Forward against a double reference, with and without bias.
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        linear_forward(ctx, view(out), view(x), view(W), with_bias ? view(b) : none, N, IC, OC);
        std::vector<double> ref(N * OC);
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) {
                double s = with_bias ? b[o] : 0.0;
                for (int k = 0; k < IC; k++) s += (double)x[i * IC + k] * W[o * IC + k];
                ref[i * OC + o] = s;
            }
        CHECK(max_rel_err(out, to_float(ref)) < 1e-5, "linear_forward bias=%d", with_bias);
    }
    // Backward with accumulating outputs prefilled: dW and dbias always accumulate; din when asked.
    std::vector<float> din0 = random_vec(N * IC, g_rng), dW0 = random_vec(OC * IC, g_rng), db0 = random_vec(OC, g_rng);
    for (int acc = 0; acc < 2; acc++) {
        std::vector<float> din = acc ? din0 : std::vector<float>(N * IC, NAN), dW = dW0, db = db0;
        linear_backward(ctx, view(din), view(dW), view(db), view(G), view(x), view(W), N, IC, OC, acc == 1);
        std::vector<double> rdin(N * IC), rdW(OC * IC), rdb(OC);
        for (int i = 0; i < N; i++)
            for (int k = 0; k < IC; k++) {
                double s = acc ? din0[i * IC + k] : 0.0;
                for (int o = 0; o < OC; o++) s += (double)G[i * OC + o] * W[o * IC + k];
                rdin[i * IC + k] = s;
            }
        for (int o = 0; o < OC; o++) {
            for (int k = 0; k < IC; k++) {
                double s = dW0[o * IC + k];
                for (int i = 0; i < N; i++) s += (double)G[i * OC + o] * x[i * IC + k];
                rdW[o * IC + k] = s;
            }
            double s = db0[o];
            for (int i = 0; i < N; i++) s += G[i * OC + o];
            rdb[o] = s;
        }
        CHECK(max_rel_err(din, to_float(rdin)) < 1e-5, "linear din (accumulate_din=%d)", acc);
        CHECK(max_rel_err(dW, to_float(rdW)) < 1e-5, "linear dweight accumulates (acc=%d)", acc);
        CHECK(max_rel_err(db, to_float(rdb)) < 1e-5, "linear dbias accumulates (acc=%d)", acc);
    }
    // Finite differences of L = Σ G ⊙ linear(x, W, b) along random directions.
    std::vector<float> din(N * IC), dW(OC * IC, 0.f), db(OC, 0.f);
    linear_backward(ctx, view(din), view(dW), view(db), view(G), view(x), view(W), N, IC, OC);
    auto loss = [&]() {
        linear_forward(ctx, view(out), view(x), view(W), view(b), N, IC, OC);
        return dot(G, out);
    };
    std::vector<float> dx = random_vec(x.size(), g_rng), dw = random_vec(W.size(), g_rng), dbb = random_vec(OC, g_rng);
    check_fd("linear din", fd_directional(x, dx, 1e-2f, loss), dot(din, dx), 1e-3);
    check_fd("linear dweight", fd_directional(W, dw, 1e-2f, loss), dot(dW, dw), 1e-3);
    check_fd("linear dbias", fd_directional(b, dbb, 1e-2f, loss), dot(db, dbb), 1e-3);
    // Empty gradients are skipped.
    std::vector<float> only_db(OC, 0.f);
    linear_backward(ctx, none, none, view(only_db), view(G), view(x), view(W), N, IC, OC);
    for (int o = 0; o < OC; o++) {
        double s = 0;
        for (int i = 0; i < N; i++) s += G[i * OC + o];
        CHECK(std::fabs(only_db[o] - s) < 1e-5, "bias-only backward col %d", o);
    }
}

// =========================================================================================================
// attention
// =========================================================================================================

struct AttnRef {
    std::vector<double> probs, probs_drop, out, dqkv;
    std::vector<uint8_t> mask;
};

// Straightforward double-precision attention for a [S·B, 3·NH·HD] qkv block with global coordinates.
static AttnRef attention_ref(const std::vector<float>& qkv, const std::vector<float>& dout, const AttnShape& sh,
                             float p, uint64_t seed, uint32_t stream) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD;
    auto Q = [&](int s, int b, int n, int d) { return (double)qkv[(s * B + b) * W + n * HD + d]; };
    auto K = [&](int s, int b, int n, int d) { return (double)qkv[(s * B + b) * W + NH * HD + n * HD + d]; };
    auto V = [&](int s, int b, int n, int d) { return (double)qkv[(s * B + b) * W + 2 * NH * HD + n * HD + d]; };
    AttnRef r;
    size_t SS = (size_t)S * S;
    r.probs.assign(B * NH * SS, 0);
    r.probs_drop.assign(B * NH * SS, 0);
    r.mask.assign(B * NH * SS, 0);
    r.out.assign((size_t)S * B * NH * HD, 0);
    r.dqkv.assign(qkv.size(), 0);
    const double scale = 1.0 / std::sqrt((double)HD), inv_keep = 1.0 / (1.0 - p);
    const uint32_t thr = dropout_threshold(p);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++) {
            double* P = &r.probs[(b * NH + n) * SS];
            double* PD = &r.probs_drop[(b * NH + n) * SS];
            uint8_t* Mk = &r.mask[(b * NH + n) * SS];
            for (int q = 0; q < S; q++) {
                std::vector<double> sc(q + 1);
                double m = -1e300, sum = 0;
                for (int k = 0; k <= q; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += Q(q, b, n, d) * K(k, b, n, d);
                    sc[k] = s * scale;
                    m = std::max(m, sc[k]);
                }
                for (int k = 0; k <= q; k++) sum += std::exp(sc[k] - m);
                for (int k = 0; k < S; k++) {
                    uint64_t gi = (((uint64_t)(sh.b_offset + b) * sh.NH_total + (sh.head_offset + n)) * S + q) * S + k;
                    Mk[q * S + k] = k <= q && dropout_keep(seed, stream, gi, thr) ? 1 : 0;  // causal keys only
                    P[q * S + k] = k <= q ? std::exp(sc[k] - m) / sum : 0.0;
                    PD[q * S + k] = Mk[q * S + k] ? P[q * S + k] * inv_keep : 0.0;
                }
            }
            // out = PD · V ; backward
            std::vector<double> dPD(SS, 0), dS(SS, 0);
            for (int q = 0; q < S; q++)
                for (int d = 0; d < HD; d++) {
                    double s = 0;
                    for (int k = 0; k < S; k++) s += PD[q * S + k] * V(k, b, n, d);
                    r.out[(q * B + b) * NH * HD + n * HD + d] = s;
                }
            if (dout.empty()) continue;
            auto dO = [&](int s, int d) { return (double)dout[(s * B + b) * NH * HD + n * HD + d]; };
            for (int q = 0; q < S; q++)
                for (int k = 0; k < S; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += dO(q, d) * V(k, b, n, d);
                    dPD[q * S + k] = s;
                }
            for (int q = 0; q < S; q++) {
                double dotp = 0;
                for (int k = 0; k <= q; k++) dotp += dPD[q * S + k] * Mk[q * S + k] * inv_keep * P[q * S + k];
                for (int k = 0; k <= q; k++)
                    dS[q * S + k] = P[q * S + k] * (dPD[q * S + k] * Mk[q * S + k] * inv_keep - dotp) * scale;
            }
            for (int s = 0; s < S; s++)
                for (int d = 0; d < HD; d++) {
                    double dq = 0, dk = 0, dv = 0;
                    for (int t = 0; t < S; t++) {
                        dq += dS[s * S + t] * K(t, b, n, d);
                        dk += dS[t * S + s] * Q(t, b, n, d);
                        dv += PD[t * S + s] * dO(t, d);
                    }
                    size_t row = (size_t)(s * B + b) * W;
                    r.dqkv[row + n * HD + d] = dq;
                    r.dqkv[row + NH * HD + n * HD + d] = dk;
                    r.dqkv[row + 2 * NH * HD + n * HD + d] = dv;
                }
        }
    return r;
}

struct AttnRun {
    std::vector<float> probs, probs_drop, out, dqkv;
    std::vector<uint8_t> mask;
};

// Run the ops (forward, then backward when dout is given) in `dtype` on ctx's device.
static AttnRun attention_run(Ctx& ctx, DType dtype, const std::vector<float>& qkv, const std::vector<float>& dout,
                             const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    const int64_t SSBN = (int64_t)sh.B * sh.NH * sh.S * sh.S, NO = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    Device dev = ctx.device;
    Tensor tq = make_tensor(dev, dtype, qkv);
    Tensor probs = tensor_alloc(dev, dtype, SSBN), pd = tensor_alloc(dev, dtype, SSBN),
           mask = tensor_alloc(dev, DType::U8, SSBN), out = tensor_alloc(dev, dtype, NO);
    tensor_fill_f32(probs, NAN);
    tensor_fill_f32(pd, NAN);
    tensor_fill_f32(mask, 7);
    tensor_fill_f32(out, NAN);
    attention_probs_forward(ctx, probs, mask, pd, tq, sh, p, seed, stream);
    attention_context_forward(ctx, out, pd, tq, sh);
    AttnRun r;
    r.probs = tensor_to_host_f32(probs);
    r.probs_drop = tensor_to_host_f32(pd);
    r.out = tensor_to_host_f32(out);
    std::vector<float> m = tensor_to_host_f32(mask);
    r.mask.assign(m.begin(), m.end());
    if (!dout.empty()) {
        Tensor td = make_tensor(dev, dtype, dout), dq = tensor_alloc(dev, dtype, tq.n),
               scratch = tensor_alloc(dev, dtype, SSBN);
        tensor_fill_f32(dq, NAN);
        tensor_fill_f32(scratch, NAN);
        attention_backward(ctx, dq, td, tq, probs, mask, pd, scratch, sh, p);
        r.dqkv = tensor_to_host_f32(dq);
        tensor_free(td);
        tensor_free(dq);
        tensor_free(scratch);
    }
    tensor_free(tq);
    tensor_free(probs);
    tensor_free(pd);
    tensor_free(mask);
    tensor_free(out);
    return r;
}

static void test_attention(Ctx& ctx) {
    AttnShape sh;
    sh.S = 7;
    sh.B = 2;
    sh.NH = 3;
    sh.HD = 8;
    sh.B_total = 2;
    sh.NH_total = 3;
    const int W = 3 * sh.NH * sh.HD;
    const uint64_t seed = 42;
    const uint32_t stream = dropout_stream(3, kSiteAttnProbs);
    for (float p : {0.f, 0.1f}) {
        std::vector<float> qkv = random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f);
        std::vector<float> G = random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng);
        AttnRun run = attention_run(ctx, DType::F32, qkv, G, sh, p, seed, stream);
        AttnRef ref = attention_ref(qkv, G, sh, p, seed, stream);
        CHECK(run.mask == ref.mask, "attention mask (p=%g) equals dropout_keep at the documented global index", p);
        CHECK(max_rel_err(run.probs, to_float(ref.probs)) < 1e-5, "attention probs (p=%g)", p);
        CHECK(max_rel_err(run.probs_drop, to_float(ref.probs_drop)) < 1e-5, "attention probs_drop (p=%g)", p);
        CHECK(max_rel_err(run.out, to_float(ref.out)) < 1e-5, "attention out (p=%g)", p);
        CHECK(max_rel_err(run.dqkv, to_float(ref.dqkv)) < 1e-4, "attention dqkv vs double reference (p=%g): %g", p,
              max_rel_err(run.dqkv, to_float(ref.dqkv)));
        // Causal mask: keys after the query have probability exactly 0; rows sum to 1.
        bool causal_zero = true, rows_one = true;
        int dropped = 0;
        for (int bn = 0; bn < sh.B * sh.NH; bn++)
            for (int q = 0; q < sh.S; q++) {
                double s = 0;
                for (int k = 0; k < sh.S; k++) {
                    size_t i = ((size_t)bn * sh.S + q) * sh.S + k;
                    if (k > q && (run.probs[i] != 0.f || run.probs_drop[i] != 0.f || run.mask[i] != 0)) causal_zero = false;
                    s += run.probs[i];
                    dropped += k <= q && run.mask[i] == 0;
                }
                if (std::fabs(s - 1.0) > 1e-5) rows_one = false;
            }
        CHECK(causal_zero, "probs, probs_drop and mask above the diagonal are exactly 0 (p=%g)", p);
        CHECK(rows_one, "softmax rows sum to 1 (p=%g)", p);
        if (p == 0.f) CHECK(dropped == 0, "p=0 keeps everything (%d dropped)", dropped);
        else CHECK(dropped > 0, "p=%g drops something", p);
        // End to end finite differences: L(qkv) = Σ G ⊙ attention(qkv); with a fixed seed the mask is a fixed
        // function of the index, so L is smooth in qkv.
        auto loss = [&]() { return dot(G, attention_run(ctx, DType::F32, qkv, {}, sh, p, seed, stream).out); };
        for (int rep = 0; rep < 3; rep++) {
            std::vector<float> d = random_vec(qkv.size(), g_rng);
            char what[64];
            snprintf(what, sizeof what, "attention dqkv FD (p=%g, dir %d)", p, rep);
            check_fd(what, fd_directional(qkv, d, 1e-2f, loss), dot(run.dqkv, d), 2e-3);
        }
        // Q, K, V separately (a wrong Q/K swap could hide in a mixed direction).
        for (int part = 0; part < 3; part++) {
            std::vector<float> d(qkv.size(), 0.f);
            for (size_t r = 0; r < (size_t)sh.S * sh.B; r++)
                for (int c = 0; c < sh.NH * sh.HD; c++)
                    d[r * W + part * sh.NH * sh.HD + c] = std::uniform_real_distribution<float>(-1, 1)(g_rng);
            char what[64];
            snprintf(what, sizeof what, "attention d%c FD (p=%g)", "QKV"[part], p);
            check_fd(what, fd_directional(qkv, d, 1e-2f, loss), dot(run.dqkv, d), 2e-3);
        }
    }
    // Dropout rate on a bigger block: about p of the entries are dropped.
    {
        AttnShape big = sh;
        big.S = 64;
        std::vector<float> qkv = random_vec((size_t)big.S * big.B * W, g_rng);
        AttnRun run = attention_run(ctx, DType::F32, qkv, {}, big, 0.1f, seed, stream);
        // Only keys k <= q draw a keep bit (the others are causally masked, mask 0).
        int64_t causal = 0, dropped = 0;
        for (int64_t i = 0; i < (int64_t)run.mask.size(); i++) {
            const int64_t q = (i / big.S) % big.S, k = i % big.S;
            if (k > q) continue;
            causal++;
            dropped += run.mask[i] == 0;
        }
        double frac = dropped / (double)causal;
        CHECK(std::fabs(frac - 0.1) < 0.015, "attention dropout rate %.4f ~ 0.1 over the causal entries", frac);
    }
}

// A rank that holds heads [h0, h0 + NH) of batches [b0, b0 + B) of the global problem must reproduce that slice
// of the single-rank result, dropout masks included (the property TP and DP tests rely on).
static void test_attention_subrange(Ctx& ctx) {
    AttnShape full;
    full.S = 6;
    full.B = 3;
    full.NH = 4;
    full.HD = 5;
    full.B_total = 3;
    full.NH_total = 4;
    AttnShape sub = full;
    sub.B = 2;
    sub.b_offset = 1;
    sub.NH = 2;
    sub.head_offset = 1;
    const float p = 0.2f;
    const uint64_t seed = 7;
    const uint32_t stream = dropout_stream(1, kSiteAttnProbs);
    const int HD = full.HD, Wf = 3 * full.NH * HD, Ws = 3 * sub.NH * HD;
    std::vector<float> qkv = random_vec((size_t)full.S * full.B * Wf, g_rng, -1.5f, 1.5f);
    std::vector<float> G = random_vec((size_t)full.S * full.B * full.NH * HD, g_rng);
    std::vector<float> qkv_s((size_t)sub.S * sub.B * Ws), G_s((size_t)sub.S * sub.B * sub.NH * HD);
    for (int s = 0; s < full.S; s++)
        for (int b = 0; b < sub.B; b++)
            for (int n = 0; n < sub.NH; n++)
                for (int d = 0; d < HD; d++) {
                    size_t rf = (size_t)s * full.B + sub.b_offset + b, rs = (size_t)s * sub.B + b;
                    int nf = (int)sub.head_offset + n;
                    for (int part = 0; part < 3; part++)
                        qkv_s[rs * Ws + part * sub.NH * HD + n * HD + d] = qkv[rf * Wf + part * full.NH * HD + nf * HD + d];
                    G_s[rs * sub.NH * HD + n * HD + d] = G[rf * full.NH * HD + nf * HD + d];
                }
    AttnRun rf = attention_run(ctx, DType::F32, qkv, G, full, p, seed, stream);
    AttnRun rs = attention_run(ctx, DType::F32, qkv_s, G_s, sub, p, seed, stream);
    const int S = full.S;
    bool mask_eq = true;
    std::vector<float> pf, ps, pdf, pds, of, os, df, ds;
    for (int b = 0; b < sub.B; b++)
        for (int n = 0; n < sub.NH; n++)
            for (int i = 0; i < S * S; i++) {
                size_t f = ((size_t)(sub.b_offset + b) * full.NH + sub.head_offset + n) * S * S + i;
                size_t l = ((size_t)b * sub.NH + n) * S * S + i;
                if (rf.mask[f] != rs.mask[l]) mask_eq = false;
                pf.push_back(rf.probs[f]);
                ps.push_back(rs.probs[l]);
                pdf.push_back(rf.probs_drop[f]);
                pds.push_back(rs.probs_drop[l]);
            }
    for (int s = 0; s < S; s++)
        for (int b = 0; b < sub.B; b++)
            for (int n = 0; n < sub.NH; n++)
                for (int d = 0; d < HD; d++) {
                    size_t rfi = (size_t)s * full.B + sub.b_offset + b, rsi = (size_t)s * sub.B + b;
                    int nf = (int)sub.head_offset + n;
                    of.push_back(rf.out[rfi * full.NH * HD + nf * HD + d]);
                    os.push_back(rs.out[rsi * sub.NH * HD + n * HD + d]);
                    for (int part = 0; part < 3; part++) {
                        df.push_back(rf.dqkv[rfi * Wf + part * full.NH * HD + nf * HD + d]);
                        ds.push_back(rs.dqkv[rsi * Ws + part * sub.NH * HD + n * HD + d]);
                    }
                }
    int dropped = (int)std::count(rs.mask.begin(), rs.mask.end(), 0);
    CHECK(mask_eq && dropped > 0, "sub-range dropout masks equal the full run's slice (%d dropped)", dropped);
    CHECK(max_rel_err(ps, pf) < 1e-6, "sub-range probs");
    CHECK(max_rel_err(pds, pdf) < 1e-6, "sub-range probs_drop");
    CHECK(max_rel_err(os, of) < 1e-5, "sub-range out");
    CHECK(max_rel_err(ds, df) < 1e-5, "sub-range dqkv");
}

// =========================================================================================================
// embedding
// =========================================================================================================

static void test_embedding(Ctx& ctx) {
    const int S = 5, B = 3, C = 4, V = 11, Vp = 12, half = Vp / 2;
    const int N = S * B;
    std::vector<float> wte = random_vec((size_t)Vp * C, g_rng);
    std::vector<int32_t> tokens(N);
    for (auto& t : tokens) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    tokens[0] = tokens[4] = tokens[9] = 3;  // repeated tokens: several rows add into one gradient row
    std::vector<float> G = random_vec((size_t)N * C, g_rng);
    std::vector<float> sum(N * C, 0.f);
    EmbeddingIndex idx;
    for (int rank = 0; rank < 2; rank++) {
        int64_t v_begin = rank * half;
        std::vector<float> wl(wte.begin() + v_begin * C, wte.begin() + (v_begin + half) * C);
        std::vector<float> out(N * C, NAN);
        token_embedding_forward(ctx, view(out), view_i32(tokens), view(wl), v_begin, half, N, C);
        bool ok = true;
        for (int r = 0; r < N; r++) {
            bool own = tokens[r] >= v_begin && tokens[r] < v_begin + half;
            for (int c = 0; c < C; c++) {
                float want = own ? wte[tokens[r] * C + c] : 0.f;
                if (out[r * C + c] != want) ok = false;
                sum[r * C + c] += out[r * C + c];
            }
        }
        CHECK(ok, "token embedding rank %d: own rows looked up, foreign rows exactly 0", rank);
        // Backward: dwte_local[t] += Σ of the rows that used t (prefilled gradient).
        std::vector<float> dw0 = random_vec((size_t)half * C, g_rng), dw = dw0;
        embedding_index_build(idx, tokens.data(), N, v_begin, half, Device::CPU);
        token_embedding_backward(ctx, view(dw), view(G), idx, C);
        std::vector<double> ref(dw0.begin(), dw0.end());
        for (int r = 0; r < N; r++)
            if (tokens[r] >= v_begin && tokens[r] < v_begin + half)
                for (int c = 0; c < C; c++) ref[(tokens[r] - v_begin) * C + c] += G[r * C + c];
        CHECK(max_rel_err(dw, to_float(ref)) < 1e-6, "token embedding backward rank %d", rank);
    }
    bool full_ok = true;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) full_ok &= sum[r * C + c] == wte[tokens[r] * C + c];
    CHECK(full_ok, "summing the two vocab shards' lookups gives the full lookup");
    // Rebuilding the index for another batch reuses the buffers and is correct; a batch with no owned tokens
    // gives U = 0 and leaves the gradient alone.
    {
        std::vector<int32_t> t2(N);
        for (auto& t : t2) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
        void* before = idx.rows.data;
        embedding_index_build(idx, t2.data(), N, 0, Vp, Device::CPU);
        CHECK(idx.rows.data == before || idx.rows.n >= N, "index capacity reused or grown");
        std::vector<float> dw(Vp * C, 0.f);
        token_embedding_backward(ctx, view(dw), view(G), idx, C);
        std::vector<double> ref(Vp * C, 0.0);
        for (int r = 0; r < N; r++)
            for (int c = 0; c < C; c++) ref[t2[r] * C + c] += G[r * C + c];
        CHECK(max_rel_err(dw, to_float(ref)) < 1e-6, "token embedding backward after rebuild");
        std::vector<int32_t> foreign(N, V + 100);
        embedding_index_build(idx, foreign.data(), N, 0, Vp, Device::CPU);
        CHECK(idx.U == 0, "no owned tokens: U=%d", idx.U);
    }
    embedding_index_free(idx);
    // Position embedding on a sequence shard [s_offset, s_offset + S_loc) (SP): out += wpe rows of the shard.
    const int S_loc = 3, s_offset = 2;
    std::vector<float> wpe = random_vec((size_t)S * C, g_rng);
    std::vector<float> base = random_vec((size_t)S_loc * B * C, g_rng), out = base;
    position_embedding_forward(ctx, view(out), view(wpe), s_offset, S_loc, B, C);
    std::vector<float> ref(out.size());
    for (int s = 0; s < S_loc; s++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                ref[(s * B + b) * C + c] = base[(s * B + b) * C + c] + wpe[(s_offset + s) * C + c];
    CHECK(max_rel_err(out, ref) < 1e-7, "position embedding forward with s_offset");
    std::vector<float> Gp = random_vec(out.size(), g_rng);
    std::vector<float> dwpe0 = random_vec(wpe.size(), g_rng), dwpe = dwpe0;
    position_embedding_backward(ctx, view(dwpe), view(Gp), s_offset, S_loc, B, C);
    std::vector<double> dref(dwpe0.begin(), dwpe0.end());
    for (int s = 0; s < S_loc; s++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++) dref[(s_offset + s) * C + c] += Gp[(s * B + b) * C + c];
    CHECK(max_rel_err(dwpe, to_float(dref)) < 1e-6, "position embedding backward: shard rows only");
    // Finite differences for the position embedding: L = Σ Gp ⊙ (base + wpe rows).
    std::vector<float> dgrad(wpe.size(), 0.f);
    position_embedding_backward(ctx, view(dgrad), view(Gp), s_offset, S_loc, B, C);
    auto loss = [&]() {
        std::vector<float> o = base;
        position_embedding_forward(ctx, view(o), view(wpe), s_offset, S_loc, B, C);
        return dot(Gp, o);
    };
    std::vector<float> d = random_vec(wpe.size(), g_rng);
    check_fd("position embedding FD", fd_directional(wpe, d, 1e-2f, loss), dot(dgrad, d), 1e-4);
}

// =========================================================================================================
// cross-entropy
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
    ce_row_max(ctx, view(r.rowmax), view(logits), N, V_local, v_begin, V);
    std::vector<float> m = gmax ? *gmax : r.rowmax;
    ce_sumexp_target(ctx, view(r.sumexp), view(r.tl), view(logits), view(m), view_i32(targets), N, V_local, v_begin, V);
    std::vector<float> se = gsum ? *gsum : r.sumexp;
    ce_losses(ctx, view(r.losses), view(m), view(se), view(r.tl), N);
    ce_backward(ctx, view(r.dlogits), view(logits), view(m), view(se), view_i32(targets), scale, N, V_local, v_begin, V);
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
    ce_losses(ctx, view(gloss), view(gmax), view(gsum), view(gtl), N);
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
        ce_row_max(ctx, view(rm), view(pad), N, 3, V, V);
        ce_sumexp_target(ctx, view(se), view(tl), view(pad), view(gm), view_i32(targets), N, 3, V, V);
        bool ok = true;
        for (int i = 0; i < N; i++) ok &= std::isinf(rm[i]) && rm[i] < 0 && se[i] == 0.f && tl[i] == 0.f;
        CHECK(ok, "a padding-only shard contributes nothing");
    }
}

// =========================================================================================================
// bf16 storage vs fp32: same ops, inputs rounded to bf16; results agree within bf16 precision.
// =========================================================================================================

static void test_bf16_agreement(Ctx& ctx) {
    // linear
    {
        const int N = 9, IC = 33, OC = 17;
        std::vector<float> x = round_bf16(random_vec(N * IC, g_rng)), W = round_bf16(random_vec(OC * IC, g_rng)),
                           b = round_bf16(random_vec(OC, g_rng)), G = round_bf16(random_vec(N * OC, g_rng));
        std::vector<float> res[2][4];
        for (int k = 0; k < 2; k++) {
            DType dt = k ? DType::BF16 : DType::F32;
            Tensor tx = make_tensor(Device::CPU, dt, x), tw = make_tensor(Device::CPU, dt, W),
                   tb = make_tensor(Device::CPU, dt, b), tg = make_tensor(Device::CPU, dt, G),
                   out = tensor_alloc(Device::CPU, dt, N * OC), din = tensor_alloc(Device::CPU, dt, N * IC),
                   dW = tensor_zeros(Device::CPU, DType::F32, OC * IC), db = tensor_zeros(Device::CPU, DType::F32, OC);
            linear_forward(ctx, out, tx, tw, tb, N, IC, OC);
            linear_backward(ctx, din, dW, db, tg, tx, tw, N, IC, OC);
            res[k][0] = tensor_to_host_f32(out);
            res[k][1] = tensor_to_host_f32(din);
            res[k][2] = tensor_to_host_f32(dW);
            res[k][3] = tensor_to_host_f32(db);
            for (Tensor* t : {&tx, &tw, &tb, &tg, &out, &din, &dW, &db}) tensor_free(*t);
        }
        const char* names[4] = {"out", "din", "dweight", "dbias"};
        for (int i = 0; i < 4; i++)
            CHECK(norm_rel_err(res[1][i], res[0][i]) < 1e-2, "bf16 linear %s: norm rel err %.3g", names[i],
                  norm_rel_err(res[1][i], res[0][i]));
    }
    // attention
    {
        AttnShape sh;
        sh.S = 11;
        sh.B = 2;
        sh.NH = 2;
        sh.HD = 16;
        sh.B_total = 2;
        sh.NH_total = 2;
        std::vector<float> qkv = round_bf16(random_vec((size_t)sh.S * sh.B * 3 * sh.NH * sh.HD, g_rng, -1.5f, 1.5f));
        std::vector<float> G = round_bf16(random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng));
        AttnRun f = attention_run(ctx, DType::F32, qkv, G, sh, 0.1f, 5, 2);
        AttnRun h = attention_run(ctx, DType::BF16, qkv, G, sh, 0.1f, 5, 2);
        CHECK(f.mask == h.mask, "bf16 attention masks equal the fp32 ones");
        CHECK(norm_rel_err(h.probs, f.probs) < 1e-2, "bf16 attention probs: %.3g", norm_rel_err(h.probs, f.probs));
        CHECK(norm_rel_err(h.out, f.out) < 2e-2, "bf16 attention out: %.3g", norm_rel_err(h.out, f.out));
        CHECK(norm_rel_err(h.dqkv, f.dqkv) < 3e-2, "bf16 attention dqkv: %.3g", norm_rel_err(h.dqkv, f.dqkv));
    }
    // cross-entropy with bf16 logits and gradient; embeddings with bf16 tables and outputs.
    {
        const int N = 5, V = 37, Vp = 40;
        std::vector<float> logits = round_bf16(random_vec((size_t)N * Vp, g_rng, -4.f, 4.f));
        std::vector<int32_t> targets(N);
        for (auto& t : targets) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
        Tensor tt = view_i32(targets);
        std::vector<float> res[2][2];
        for (int k = 0; k < 2; k++) {
            DType dt = k ? DType::BF16 : DType::F32;
            Tensor lg = make_tensor(Device::CPU, dt, logits), dl = tensor_alloc(Device::CPU, dt, N * Vp);
            std::vector<float> rm(N), se(N), tl(N), ls(N);
            ce_row_max(ctx, view(rm), lg, N, Vp, 0, V);
            ce_sumexp_target(ctx, view(se), view(tl), lg, view(rm), tt, N, Vp, 0, V);
            ce_losses(ctx, view(ls), view(rm), view(se), view(tl), N);
            ce_backward(ctx, dl, lg, view(rm), view(se), tt, 1.f / N, N, Vp, 0, V);
            res[k][0] = ls;
            res[k][1] = tensor_to_host_f32(dl);
            tensor_free(lg);
            tensor_free(dl);
        }
        CHECK(max_rel_err(res[1][0], res[0][0]) < 1e-5, "bf16-stored logits: same losses (math is fp32)");
        CHECK(norm_rel_err(res[1][1], res[0][1]) < 1e-2, "bf16 dlogits: %.3g", norm_rel_err(res[1][1], res[0][1]));
    }
    {
        const int S = 4, B = 2, C = 8, V = 10, N = S * B;
        std::vector<float> wte = round_bf16(random_vec((size_t)V * C, g_rng)), wpe = round_bf16(random_vec(S * C, g_rng));
        std::vector<int32_t> tokens(N);
        for (auto& t : tokens) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
        std::vector<float> G = round_bf16(random_vec((size_t)N * C, g_rng));
        EmbeddingIndex idx;
        embedding_index_build(idx, tokens.data(), N, 0, V, Device::CPU);
        std::vector<float> res[2][3];
        for (int k = 0; k < 2; k++) {
            DType dt = k ? DType::BF16 : DType::F32;
            Tensor tw = make_tensor(Device::CPU, dt, wte), tp = make_tensor(Device::CPU, dt, wpe),
                   tg = make_tensor(Device::CPU, dt, G), out = tensor_alloc(Device::CPU, dt, N * C),
                   dw = tensor_zeros(Device::CPU, DType::F32, V * C), dp = tensor_zeros(Device::CPU, DType::F32, S * C);
            token_embedding_forward(ctx, out, view_i32(tokens), tw, 0, V, N, C);
            position_embedding_forward(ctx, out, tp, 0, S, B, C);
            token_embedding_backward(ctx, dw, tg, idx, C);
            position_embedding_backward(ctx, dp, tg, 0, S, B, C);
            res[k][0] = tensor_to_host_f32(out);
            res[k][1] = tensor_to_host_f32(dw);
            res[k][2] = tensor_to_host_f32(dp);
            for (Tensor* t : {&tw, &tp, &tg, &out, &dw, &dp}) tensor_free(*t);
        }
        CHECK(max_rel_err(res[1][0], res[0][0]) < 8e-3, "bf16 embedding output within one rounding");
        CHECK(max_rel_err(res[1][1], res[0][1]) < 1e-6, "bf16 dout, f32 dwte: exact sums of the same values");
        CHECK(max_rel_err(res[1][2], res[0][2]) < 1e-6, "bf16 dout, f32 dwpe");
        embedding_index_free(idx);
    }
}

int main() {
    Ctx ctx = ctx_create(Device::CPU);
    test_gemm(ctx);
    test_linear(ctx);
    test_attention(ctx);
    test_attention_subrange(ctx);
    test_embedding(ctx);
    test_cross_entropy(ctx);
    test_bf16_agreement(ctx);
    ctx_destroy(ctx);
    return test_finish("test_ops_gemm");
}
