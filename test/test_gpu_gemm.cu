// test_gpu_gemm.cu — every GPU op of matmul / linear / attention / embedding / cross_entropy, forward and
// backward, against the CPU reference (the oracle, docs/design.md "Ops"), in fp32 and bf16, with random inputs.
//  - outputs are poisoned with NaN before each call (accumulating outputs are prefilled with known values),
//    so an element a kernel forgets to write fails the comparison;
//  - sizes are not multiples of any block or tile size (S=37, B=3, NH=3, HD=24; N=37, IC=129, OC=67; a
//    300-token vocabulary split into two ranges with padding);
//  - dropout masks must be bit-identical to the CPU's; running a backward twice must give identical bits.
// Tolerances: fp32 ~1e-4 relative (cuBLAS sums in another order, but never in TF32), bf16 ~2e-2.
// Exits 77 (skipped) when no GPU is visible.
#include <algorithm>
#include "../layers/attention.h"
#include "../layers/cross_entropy.h"
#include "../layers/embedding.h"
#include "../layers/linear.h"
#include "../layers/matmul.h"
#include "../layers/philox.h"
#include "test_util.h"

static std::mt19937 g_rng(4321);
static Ctx g_gpu, g_cpu;

static double tol_for(DType dt) { return dt == DType::BF16 ? 2e-2 : 1e-4; }

// GPU result vs CPU reference: ‖g − c‖/‖c‖ < tol and max|g − c| / max|c| < 4·tol. NaN (a poisoned element
// never written) fails.
static void compare(const char* what, DType dt, const std::vector<float>& got, const std::vector<float>& ref,
                    double tol = -1) {
    if (tol < 0) tol = tol_for(dt);
    double nre = norm_rel_err(got, ref);
    double maxref = 0, maxdiff = 0;
    bool nan = got.size() != ref.size();
    for (size_t i = 0; i < got.size() && i < ref.size(); i++) {
        if (std::isnan(got[i]) || std::isnan(ref[i])) nan = true;
        maxref = std::max(maxref, (double)std::fabs(ref[i]));
        maxdiff = std::max(maxdiff, (double)std::fabs(got[i] - ref[i]));
    }
    double mre = maxdiff / (maxref > 0 ? maxref : 1e-30);
    CHECK(!nan && nre < tol && mre < 4 * tol, "%s [%s]: norm rel err %.3g, max err / max %.3g (tol %.1g)%s", what,
          dtype_name(dt), nre, mre, tol, nan ? ", NaN" : "");
}

static Tensor on(Device dev, DType dt, const std::vector<float>& v) { return make_tensor(dev, dt, v); }
static Tensor poisoned(Device dev, DType dt, int64_t n, float value = NAN) {
    Tensor t = tensor_alloc(dev, dt, n);
    tensor_fill_f32(t, value);
    return t;
}
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }
static std::vector<float> host(Tensor t) { return tensor_to_host_f32(t); }
static std::vector<float> round_to(DType dt, std::vector<float> v) { return dt == DType::BF16 ? round_bf16(v) : v; }

// =========================================================================================================
// gemm: all transpose combinations, batched, non-minimal leading dimensions, beta 0 (C poisoned) and 1
// =========================================================================================================

static void test_gemm() {
    const int M = 37, N = 67, K = 129, PAD = 5;
    const float alpha = 0.5f;
    for (int batch : {1, 3})
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (DType ab : {DType::F32, DType::BF16})
                    for (DType cd : {DType::F32, DType::BF16})
                        for (float beta : {0.f, 1.f}) {
                            if (ab == DType::F32 && cd == DType::BF16) continue;
                            int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
                            int64_t lda = a_cols + PAD, ldb = b_cols + PAD + 2, ldc = N + PAD;
                            int64_t sA = a_rows * lda + 3, sB = b_rows * ldb + 1, sC = M * ldc + 7;
                            std::vector<float> hA = random_vec(sA * batch, g_rng), hB = random_vec(sB * batch, g_rng);
                            std::vector<float> hC = beta == 0.f ? std::vector<float>(sC * batch, NAN)
                                                                : round_to(cd, random_vec(sC * batch, g_rng));
                            std::vector<float> res[2];
                            for (Device dev : {Device::CPU, Device::CUDA}) {
                                Tensor A = on(dev, ab, hA), B = on(dev, ab, hB), C = on(dev, cd, hC);
                                gemm(ctx_of(dev), ta, tb, M, N, K, alpha, GemmOperand{A.data, lda, sA},
                                     GemmOperand{B.data, ldb, sB}, beta, C.data, ldc, sC, ab, cd, batch);
                                res[dev == Device::CUDA] = host(C);
                                tensor_free(A);
                                tensor_free(B);
                                tensor_free(C);
                            }
                            // Compare the M×N windows; the gaps between rows and matrices must be untouched.
                            std::vector<float> g, c;
                            bool gaps_ok = true;
                            for (int64_t i = 0; i < sC * batch; i++) {
                                int64_t in_mat = i % sC, row = in_mat / ldc, col = in_mat % ldc;
                                if (row < M && col < N) {
                                    g.push_back(res[1][i]);
                                    c.push_back(res[0][i]);
                                } else {
                                    float want = round_to(cd, {hC[i]})[0];
                                    gaps_ok &= memcmp(&res[1][i], &want, 4) == 0 || (std::isnan(want) && std::isnan(res[1][i]));
                                }
                            }
                            char what[128];
                            snprintf(what, sizeof what, "gemm batch=%d tA=%d tB=%d ab=%s beta=%g", batch, ta, tb,
                                     dtype_name(ab), beta);
                            compare(what, cd, g, c, cd == DType::BF16 ? 1e-2 : 1e-5);
                            CHECK(gaps_ok, "%s: elements outside C's windows untouched", what);
                        }
}

// =========================================================================================================
// linear
// =========================================================================================================

struct LinearOut {
    std::vector<float> out, din, dW, db;
};

static LinearOut linear_run(Device dev, DType dt, DType out_dt, const std::vector<float>& x, const std::vector<float>& W,
                            const std::vector<float>& b, const std::vector<float>& G, const std::vector<float>& din0,
                            const std::vector<float>& dW0, const std::vector<float>& db0, int N, int IC, int OC,
                            bool acc_din, int repeats = 1, bool* repeat_bitwise = nullptr) {
    Ctx& ctx = ctx_of(dev);
    Tensor tx = on(dev, dt, x), tw = on(dev, dt, W), tb = b.empty() ? Tensor() : on(dev, dt, b), tg = on(dev, dt, G);
    Tensor out = poisoned(dev, out_dt, (int64_t)N * OC);
    linear_forward(ctx, out, tx, tw, tb, N, IC, OC);
    LinearOut r;
    r.out = host(out);
    for (int rep = 0; rep < repeats; rep++) {
        Tensor din = acc_din ? on(dev, dt, din0) : poisoned(dev, dt, (int64_t)N * IC);
        Tensor dW = on(dev, DType::F32, dW0), db = on(dev, DType::F32, db0);
        linear_backward(ctx, din, dW, b.empty() ? Tensor() : db, tg, tx, tw, N, IC, OC, acc_din);
        LinearOut cur{{}, host(din), host(dW), host(db)};
        if (rep == 0) {
            r.din = cur.din;
            r.dW = cur.dW;
            r.db = cur.db;
        } else if (repeat_bitwise) {
            *repeat_bitwise &= bitwise_equal(cur.din, r.din) && bitwise_equal(cur.dW, r.dW) && bitwise_equal(cur.db, r.db);
        }
        tensor_free(din);
        tensor_free(dW);
        tensor_free(db);
    }
    for (Tensor* t : {&tx, &tw, &tb, &tg, &out}) tensor_free(*t);
    return r;
}

static void test_linear() {
    const int N = 37, IC = 129, OC = 67;
    for (DType dt : {DType::F32, DType::BF16})
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int acc = 0; acc < 2; acc++) {
                std::vector<float> x = round_to(dt, random_vec(N * IC, g_rng)), W = round_to(dt, random_vec(OC * IC, g_rng)),
                                   b = with_bias ? round_to(dt, random_vec(OC, g_rng)) : std::vector<float>(),
                                   G = round_to(dt, random_vec(N * OC, g_rng)),
                                   din0 = round_to(dt, random_vec(N * IC, g_rng)), dW0 = random_vec(OC * IC, g_rng),
                                   db0 = random_vec(OC, g_rng);
                bool bitwise = true;
                LinearOut c = linear_run(Device::CPU, dt, dt, x, W, b, G, din0, dW0, db0, N, IC, OC, acc);
                LinearOut g = linear_run(Device::CUDA, dt, dt, x, W, b, G, din0, dW0, db0, N, IC, OC, acc, 2, &bitwise);
                char what[96];
                snprintf(what, sizeof what, "linear bias=%d acc_din=%d", with_bias, acc);
                std::string w(what);
                compare((w + " out").c_str(), dt, g.out, c.out);
                compare((w + " din").c_str(), dt, g.din, c.din);
                // dW and dbias are f32 buffers: their error comes from the inputs' dtype only.
                compare((w + " dweight").c_str(), dt, g.dW, c.dW);
                if (with_bias) compare((w + " dbias").c_str(), dt, g.db, c.db);
                CHECK(bitwise, "%s: backward twice gives identical bits [%s]", what, dtype_name(dt));
            }
    // The LM head: bf16 input and weight, f32 logits.
    {
        std::vector<float> x = round_bf16(random_vec(N * IC, g_rng)), W = round_bf16(random_vec(OC * IC, g_rng));
        std::vector<float> G(N * OC, 0.f);
        LinearOut c = linear_run(Device::CPU, DType::BF16, DType::F32, x, W, {}, G, {}, std::vector<float>(OC * IC, 0.f),
                                 std::vector<float>(OC, 0.f), N, IC, OC, false);
        LinearOut g = linear_run(Device::CUDA, DType::BF16, DType::F32, x, W, {}, G, {}, std::vector<float>(OC * IC, 0.f),
                                 std::vector<float>(OC, 0.f), N, IC, OC, false);
        compare("linear bf16 -> f32 logits", DType::F32, g.out, c.out, 1e-5);
    }
    // bias_backward over many rows (several row chunks in the two-stage GPU reduction), twice: same bits.
    for (DType dt : {DType::F32, DType::BF16}) {
        const int NR = 1500, C = 67;
        std::vector<float> dout = round_to(dt, random_vec((size_t)NR * C, g_rng)), db0 = random_vec(C, g_rng);
        std::vector<float> res[2], again;
        for (Device dev : {Device::CPU, Device::CUDA}) {
            for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
                Tensor td = on(dev, dt, dout), db = on(dev, DType::F32, db0);
                bias_backward(ctx_of(dev), db, td, NR, C);
                (rep ? again : res[dev == Device::CUDA]) = host(db);
                tensor_free(td);
                tensor_free(db);
            }
        }
        compare("bias_backward N=1500", dt, res[1], res[0], 1e-5);
        CHECK(bitwise_equal(res[1], again), "bias_backward twice: identical bits [%s]", dtype_name(dt));
    }
}

// =========================================================================================================
// attention
// =========================================================================================================

struct AttnRun {
    std::vector<float> probs, probs_drop, out, dqkv, dqkv_again;
    std::vector<float> mask;
};

static AttnRun attention_run(Device dev, DType dt, const std::vector<float>& qkv, const std::vector<float>& dout,
                             const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    Ctx& ctx = ctx_of(dev);
    const int64_t SS = (int64_t)sh.B * sh.NH * sh.S * sh.S, NO = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    Tensor tq = on(dev, dt, qkv), probs = poisoned(dev, dt, SS), pd = poisoned(dev, dt, SS),
           mask = poisoned(dev, DType::U8, SS, 7.f), out = poisoned(dev, dt, NO);
    attention_probs_forward(ctx, probs, mask, pd, tq, sh, p, seed, stream);
    attention_context_forward(ctx, out, pd, tq, sh);
    AttnRun r;
    r.probs = host(probs);
    r.probs_drop = host(pd);
    r.out = host(out);
    r.mask = host(mask);
    Tensor td = on(dev, dt, dout);
    for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
        Tensor dq = poisoned(dev, dt, tq.n), scratch = poisoned(dev, dt, SS);
        attention_backward(ctx, dq, td, tq, probs, mask, pd, scratch, sh, p);
        (rep ? r.dqkv_again : r.dqkv) = host(dq);
        tensor_free(dq);
        tensor_free(scratch);
    }
    for (Tensor* t : {&tq, &probs, &pd, &mask, &out, &td}) tensor_free(*t);
    return r;
}

static void test_attention() {
    struct Case {
        int S, B, NH, HD;
        int64_t b_offset, B_total, head_offset, NH_total;
    };
    // The second case is a sub-range (a TP rank's heads of a DP rank's batches) with S > 32 * 4.
    // S = 64 and 1024 take the aligned 16-byte paths of the row-in-registers softmax kernels; S = 2100 is
    // longer than those kernels hold (2048 in bf16) and takes the general kernel.
    const Case cases[] = {{37, 3, 3, 24, 0, 3, 0, 3}, {133, 2, 3, 24, 1, 5, 2, 6}, {64, 2, 2, 32, 0, 2, 0, 2},
                          {1024, 1, 2, 16, 1, 2, 0, 2}, {2100, 1, 1, 16, 0, 1, 1, 2}};
    for (const Case& cs : cases)
        for (DType dt : {DType::F32, DType::BF16})
            for (float p : {0.f, 0.1f}) {
                AttnShape sh;
                sh.S = cs.S;
                sh.B = cs.B;
                sh.NH = cs.NH;
                sh.HD = cs.HD;
                sh.b_offset = cs.b_offset;
                sh.B_total = cs.B_total;
                sh.head_offset = cs.head_offset;
                sh.NH_total = cs.NH_total;
                std::vector<float> qkv = round_to(dt, random_vec((size_t)sh.S * sh.B * 3 * sh.NH * sh.HD, g_rng, -1.5f, 1.5f));
                std::vector<float> G = round_to(dt, random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng));
                const uint64_t seed = 0x1234567890ull;
                const uint32_t stream = dropout_stream(5, kSiteAttnProbs);
                AttnRun c = attention_run(Device::CPU, dt, qkv, G, sh, p, seed, stream);
                AttnRun g = attention_run(Device::CUDA, dt, qkv, G, sh, p, seed, stream);
                char what[128];
                snprintf(what, sizeof what, "attention S=%d B=%d NH=%d HD=%d p=%g", sh.S, sh.B, sh.NH, sh.HD, p);
                std::string w(what);
                CHECK(bitwise_equal(g.mask, c.mask), "%s: masks bit-identical to the CPU [%s]", what, dtype_name(dt));
                compare((w + " probs").c_str(), dt, g.probs, c.probs);
                compare((w + " probs_drop").c_str(), dt, g.probs_drop, c.probs_drop);
                compare((w + " out").c_str(), dt, g.out, c.out);
                compare((w + " dqkv").c_str(), dt, g.dqkv, c.dqkv);
                CHECK(bitwise_equal(g.dqkv, g.dqkv_again), "%s: backward twice gives identical bits [%s]", what,
                      dtype_name(dt));
                bool causal = true;
                for (int64_t bn = 0; bn < (int64_t)sh.B * sh.NH; bn++)
                    for (int q = 0; q < sh.S; q++)
                        for (int k = q + 1; k < sh.S; k++) {
                            size_t i = ((size_t)bn * sh.S + q) * sh.S + k;
                            causal &= g.probs[i] == 0.f && g.probs_drop[i] == 0.f && g.mask[i] == 0.f;
                        }
                CHECK(causal, "%s: GPU probs, probs_drop and mask exactly 0 above the diagonal [%s]", what, dtype_name(dt));
                // Forward again: identical bits (selective recompute relies on it).
                AttnRun g2 = attention_run(Device::CUDA, dt, qkv, G, sh, p, seed, stream);
                CHECK(bitwise_equal(g2.probs, g.probs) && bitwise_equal(g2.probs_drop, g.probs_drop) &&
                          bitwise_equal(g2.out, g.out),
                      "%s: forward twice gives identical bits [%s]", what, dtype_name(dt));
            }
}

// =========================================================================================================
// embedding
// =========================================================================================================

static void test_embedding() {
    const int S = 37, B = 3, C = 67, V = 300, Vp = 304, VL = Vp / 2, N = S * B;
    std::vector<int32_t> tokens(N);
    for (auto& t : tokens) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    for (int r = 0; r < N; r += 7) tokens[r] = 151;  // a frequent token right below the split
    std::vector<float> tok_f(tokens.begin(), tokens.end());
    for (DType dt : {DType::F32, DType::BF16})
        for (int rank = 0; rank < 2; rank++) {
            const int64_t v_begin = rank * VL;
            std::vector<float> wte = round_to(dt, random_vec((size_t)VL * C, g_rng));
            std::vector<float> G = round_to(dt, random_vec((size_t)N * C, g_rng));
            std::vector<float> dw0 = random_vec((size_t)VL * C, g_rng);
            std::vector<float> res[2][2], again;
            for (Device dev : {Device::CPU, Device::CUDA}) {
                Ctx& ctx = ctx_of(dev);
                Tensor tt = on(dev, DType::I32, tok_f), tw = on(dev, dt, wte), out = poisoned(dev, dt, (int64_t)N * C),
                       tg = on(dev, dt, G);
                token_embedding_forward(ctx, out, tt, tw, v_begin, VL, N, C);
                res[dev == Device::CUDA][0] = host(out);
                EmbeddingIndex idx;
                for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
                    // Built again each time, as each training step does (the second build reuses the buffers).
                    embedding_index_build(idx, tokens.data(), N, v_begin, VL, dev);
                    Tensor dw = on(dev, DType::F32, dw0);
                    token_embedding_backward(ctx, dw, tg, idx, C);
                    (rep ? again : res[dev == Device::CUDA][1]) = host(dw);
                    tensor_free(dw);
                }
                embedding_index_free(idx);
                for (Tensor* t : {&tt, &tw, &out, &tg}) tensor_free(*t);
            }
            char what[64];
            snprintf(what, sizeof what, "token embedding rank %d", rank);
            CHECK(bitwise_equal(res[1][0], res[0][0]), "%s forward: same bits as the CPU (a copy) [%s]", what,
                  dtype_name(dt));
            compare((std::string(what) + " backward").c_str(), DType::F32, res[1][1], res[0][1], 1e-5);
            CHECK(bitwise_equal(res[1][1], again), "%s backward twice: identical bits [%s]", what, dtype_name(dt));
        }
    // position embedding on a sequence shard
    for (DType dt : {DType::F32, DType::BF16}) {
        const int S_loc = 13, s_offset = 11;
        std::vector<float> wpe = round_to(dt, random_vec((size_t)S * C, g_rng));
        std::vector<float> base = round_to(dt, random_vec((size_t)S_loc * B * C, g_rng));
        std::vector<float> G = round_to(dt, random_vec((size_t)S_loc * B * C, g_rng));
        std::vector<float> dp0 = random_vec((size_t)S * C, g_rng);
        std::vector<float> res[2][2], again;
        for (Device dev : {Device::CPU, Device::CUDA}) {
            Ctx& ctx = ctx_of(dev);
            Tensor tw = on(dev, dt, wpe), out = on(dev, dt, base), tg = on(dev, dt, G);
            position_embedding_forward(ctx, out, tw, s_offset, S_loc, B, C);
            res[dev == Device::CUDA][0] = host(out);
            for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
                Tensor dp = on(dev, DType::F32, dp0);
                position_embedding_backward(ctx, dp, tg, s_offset, S_loc, B, C);
                (rep ? again : res[dev == Device::CUDA][1]) = host(dp);
                tensor_free(dp);
            }
            for (Tensor* t : {&tw, &out, &tg}) tensor_free(*t);
        }
        CHECK(bitwise_equal(res[1][0], res[0][0]), "position embedding forward: same bits as the CPU [%s]",
              dtype_name(dt));
        compare("position embedding backward", DType::F32, res[1][1], res[0][1], 1e-5);
        CHECK(bitwise_equal(res[1][1], again), "position embedding backward twice: identical bits [%s]", dtype_name(dt));
    }
}

// =========================================================================================================
// cross-entropy: a 300-token vocabulary padded to 304, split into two 152-column ranges
// =========================================================================================================

static void test_cross_entropy() {
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
                Tensor lg = on(dev, dt, logits), tt = on(dev, DType::I32, tg_f);
                Tensor rm = poisoned(dev, DType::F32, N), se = poisoned(dev, DType::F32, N),
                       tl = poisoned(dev, DType::F32, N), ls = poisoned(dev, DType::F32, N),
                       dl = poisoned(dev, dt, (int64_t)N * VL);
                ce_row_max(ctx, rm, lg, N, VL, v_begin, V);
                ce_sumexp_target(ctx, se, tl, lg, rm, tt, N, VL, v_begin, V);
                ce_losses(ctx, ls, rm, se, tl, N);
                ce_backward(ctx, dl, lg, rm, se, tt, 0.37f, N, VL, v_begin, V);
                int k = dev == Device::CUDA;
                res[k][0] = host(rm);
                res[k][1] = host(se);
                res[k][2] = host(tl);
                res[k][3] = host(ls);
                res[k][4] = host(dl);
                for (Tensor* t : {&lg, &tt, &rm, &se, &tl, &ls, &dl}) tensor_free(*t);
            }
            char what[64];
            snprintf(what, sizeof what, "cross-entropy rank %d", rank);
            std::string w(what);
            CHECK(bitwise_equal(res[1][0], res[0][0]), "%s rowmax: same bits [%s]", what, dtype_name(dt));
            CHECK(bitwise_equal(res[1][2], res[0][2]), "%s target logit: same bits [%s]", what, dtype_name(dt));
            compare((w + " sumexp").c_str(), DType::F32, res[1][1], res[0][1], 1e-5);
            compare((w + " losses").c_str(), DType::F32, res[1][3], res[0][3], 1e-5);
            compare((w + " dlogits").c_str(), dt, res[1][4], res[0][4]);
            bool pad_zero = true;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < VL; j++)
                    if (v_begin + j >= V) pad_zero &= res[1][4][(size_t)i * VL + j] == 0.f;
            CHECK(pad_zero, "%s: padded columns get zero gradient on the GPU [%s]", what, dtype_name(dt));
        }
}

int main() {
    require_gpu_or_skip("test_gpu_gemm");
    g_gpu = ctx_create(Device::CUDA, 0);
    g_cpu = ctx_create(Device::CPU);
    test_gemm();
    test_linear();
    test_attention();
    test_embedding();
    test_cross_entropy();
    ctx_destroy(g_gpu);
    ctx_destroy(g_cpu);
    return test_finish("test_gpu_gemm");
}
