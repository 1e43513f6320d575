// test_attention.cu — causal self-attention with dropout on the probabilities (layers/attention.cu): the fast
// CPU path (--cpu, label unit) and the CUDA kernels (--gpu, label gpu) against its plain math,
// layers/reference/attention.h.
//
// CPU checks: probs, probs_drop, out and dqkv against the reference, its tensors kept in double (masks from
// dropout_keep at the documented global index); exactly 0 above the diagonal, softmax rows sum to 1;
// end-to-end directional finite differences of L = Σ G ⊙ attention(qkv), also for Q, K and V separately;
// the dropout rate; a rank holding heads [h0, h0 + NH) of batches [b0, b0 + B) reproduces that slice of the
// single-rank result, masks included (what the TP and DP equivalence tests rely on); bf16 storage; S = 7 and
// 37 (the CPU softmax's packs of 16 keys, full and partial); the same bits with 1, 2 and 3 threads; the
// blocks above the diagonal, which the GEMMs and the softmax kernels skip, poisoned with NaN in every s×s
// buffer (S = 37, 64, 133, 1024) are never read and never written.
// GPU checks, f32 and bf16, p = 0 and 0.1, the shapes of test/layers/gpu_shapes.h (sizes that are no multiple
// of any tile, every softmax kernel instantiation, several causal blocks with a partial last one; sub-ranges
// of heads and batches): masks bit-identical to the CPU's and the reference's, probs, probs_drop, out,
// dqkv against the CPU and the reference (outputs poisoned first), exactly 0 above the diagonal within
// each device's causal blocks and the poison untouched above them, the backward twice and the forward
// twice give identical bits (selective recompute relies on it).
#include <omp.h>
#include <algorithm>
#include <functional>
#include "layers/attention.h"
#include "layers/philox.h"
#include "layers/reference/attention.h"
#include "test/layers/gpu_shapes.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/attention.h
// =========================================================================================================

// The reference (layers/reference/attention.h) on a [S·B, 3·NH·HD] qkv block, its tensors kept in double:
// probs, mask, probs_drop, out, and dqkv when dout is given.
struct AttnRef {
    std::vector<double> probs, probs_drop, out, dqkv;
    std::vector<uint8_t> mask;
};
static AttnRef attention_ref(const std::vector<float>& qkv, const std::vector<float>& dout, const AttnShape& sh,
                             float p, uint64_t seed, uint32_t stream) {
    const size_t SS = (size_t)sh.B * sh.NH * sh.S * sh.S, NO = (size_t)sh.S * sh.B * sh.NH * sh.HD;
    AttnRef r;
    r.probs.resize(SS), r.probs_drop.resize(SS), r.mask.resize(SS), r.out.resize(NO);
    ref_attention_forward(r.probs.data(), r.mask.data(), r.probs_drop.data(), r.out.data(), qkv.data(), sh, p, seed,
                          stream);
    if (!dout.empty()) {
        r.dqkv.resize(qkv.size());
        ref_attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.probs.data(), r.mask.data(),
                               r.probs_drop.data(), sh, p);
    }
    return r;
}

struct AttnRun {
    std::vector<float> probs, probs_drop, out, dqkv;
    std::vector<uint8_t> mask;
    bool above_untouched = true;  // the s×s entries above the causal blocks still hold the fill
};

// The s×s tensors hold row q only up to the end of its causal block (attention.h): entries from there on are
// never written. Check that they still hold what the buffer was filled with (`fill`, NaN counting as equal
// to NaN; `mask_fill` for the mask), then set them to 0, the value they stand for, so that the rest of the
// checks compare whole tensors.
template <class M>
static bool clear_above_blocks(std::vector<float>& probs, std::vector<float>& probs_drop, std::vector<M>& mask,
                               const AttnShape& sh, int blk, float fill, float mask_fill) {
    bool untouched = true;
    auto same = [&](float v, float want) { return std::isnan(want) ? std::isnan(v) : v == want; };
    for (int64_t bn = 0; bn < (int64_t)sh.B * sh.NH; bn++)
        for (int q = 0; q < sh.S; q++)
            for (int k = std::min(sh.S, (q / blk + 1) * blk); k < sh.S; k++) {
                const size_t i = ((size_t)bn * sh.S + q) * sh.S + k;
                untouched &= same(probs[i], fill) && same(probs_drop[i], fill) && same((float)mask[i], mask_fill);
                probs[i] = probs_drop[i] = 0.f;
                mask[i] = 0;
            }
    return untouched;
}

// Run the ops (forward, then backward when dout is given) in `dtype` on ctx's device.
// The s×s buffers and the outputs start filled with `fill` (NaN unless told: an entry an op should write but
// does not shows up as NaN).
static AttnRun attention_run(Ctx& ctx, DType dtype, const std::vector<float>& qkv, const std::vector<float>& dout,
                             const AttnShape& sh, float p, uint64_t seed, uint32_t stream, float fill = NAN) {
    const int64_t SSBN = (int64_t)sh.B * sh.NH * sh.S * sh.S, NO = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    Device dev = ctx.device;
    Tensor tq = make_tensor(dev, dtype, qkv);
    Tensor probs = tensor_alloc(dev, dtype, SSBN), pd = tensor_alloc(dev, dtype, SSBN),
           mask = tensor_alloc(dev, DType::U8, SSBN), out = tensor_alloc(dev, dtype, NO);
    tensor_fill_f32(probs, fill);
    tensor_fill_f32(pd, fill);
    tensor_fill_f32(mask, 7);
    tensor_fill_f32(out, fill);
    attention_probs_forward(ctx, probs, mask, pd, tq, sh, p, seed, stream);
    attention_context_forward(ctx, out, pd, tq, sh);
    AttnRun r;
    r.probs = tensor_to_host_f32(probs);
    r.probs_drop = tensor_to_host_f32(pd);
    r.out = tensor_to_host_f32(out);
    std::vector<float> m = tensor_to_host_f32(mask);
    r.mask.assign(m.begin(), m.end());
    const float fill_stored = round_to(dtype, {fill})[0];
    r.above_untouched = clear_above_blocks(r.probs, r.probs_drop, r.mask, sh, attention_causal_block(ctx, sh.S),
                                           fill_stored, 7.f);
    if (!dout.empty()) {
        Tensor td = make_tensor(dev, dtype, dout), dq = tensor_alloc(dev, dtype, tq.n),
               scratch = tensor_alloc(dev, dtype, SSBN);
        tensor_fill_f32(dq, fill);
        tensor_fill_f32(scratch, fill);
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

static void test_attention(Ctx& ctx, int S) {
    AttnShape sh;
    sh.S = S;
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
        // out sums up to S products into values near 0 (relative floor 1e-3): longer rows round further
        const double out_tol = S > 16 ? 1e-4 : 1e-5;
        CHECK(max_rel_err(run.out, to_float(ref.out)) < out_tol, "attention out (p=%g): %g", p,
              max_rel_err(run.out, to_float(ref.out)));
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
        CHECK(run.above_untouched, "probs, probs_drop and mask above the causal blocks never written (p=%g)", p);
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

// bf16 storage vs fp32: inputs rounded to bf16; results agree within bf16 precision.
static void test_attention_bf16(Ctx& ctx) {
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

// The CPU softmax walks a row's keys in packs of 16 (attention.cu): the same bits with 1, 2 and 3 OpenMP
// threads, forward and backward, with and without dropout.
static void test_attention_threads(Ctx& ctx) {
    AttnShape sh;
    sh.S = 37;
    sh.B = 2;
    sh.NH = 3;
    sh.HD = 8;
    sh.B_total = 2;
    sh.NH_total = 3;
    const int W = 3 * sh.NH * sh.HD, saved = omp_get_max_threads();
    std::vector<float> qkv = random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f);
    std::vector<float> G = random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng);
    for (float p : {0.f, 0.1f}) {
        std::vector<AttnRun> runs;
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            runs.push_back(attention_run(ctx, DType::F32, qkv, G, sh, p, 42, dropout_stream(3, kSiteAttnProbs)));
        }
        omp_set_num_threads(saved);
        for (int t = 1; t < 3; t++)
            CHECK(bitwise_equal(runs[t].probs, runs[0].probs) &&
                      bitwise_equal(runs[t].probs_drop, runs[0].probs_drop) &&
                      bitwise_equal(runs[t].out, runs[0].out) && bitwise_equal(runs[t].dqkv, runs[0].dqkv) &&
                      runs[t].mask == runs[0].mask,
                  "attention (p=%g): %d threads differ from 1 thread", p, t + 1);
    }
}

// The attention GEMMs and softmax kernels skip the blocks above the diagonal (attention.cu "Causal
// blocking"): no s×s tensor (raw scores, probs, mask, probs_drop, dP_d, dS) is written there, so nothing may
// read it. Runs with all s×s buffers poisoned with NaN and filled with 0 give the same bits, with no NaN
// anywhere, leave the entries above the blocks as they were, and match the double-precision reference, on
// sequence lengths that are no multiple of the block (37, 133) and ones that are (64; 1024, 16 blocks, with
// one sequence and one head).
static void test_attention_causal_blocks(Ctx& ctx) {
    for (int S : {37, 64, 133, 1024}) {
        AttnShape sh;
        sh.S = S;
        sh.B = S > 256 ? 1 : 2;
        sh.NH = S > 256 ? 1 : 2;
        sh.HD = 8;
        sh.B_total = sh.B;
        sh.NH_total = sh.NH;
        const int W = 3 * sh.NH * sh.HD;
        std::vector<float> qkv = random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f);
        std::vector<float> G = random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng);
        const uint32_t stream = dropout_stream(3, kSiteAttnProbs);
        for (float p : {0.f, 0.1f}) {
            AttnRun nan_run = attention_run(ctx, DType::F32, qkv, G, sh, p, 42, stream, NAN);
            AttnRun zero_run = attention_run(ctx, DType::F32, qkv, G, sh, p, 42, stream, 0.f);
            CHECK(nan_run.above_untouched && zero_run.above_untouched,
                  "attention S=%d p=%g: an entry above the causal blocks was written", S, p);
            CHECK(bitwise_equal(nan_run.probs, zero_run.probs) &&
                      bitwise_equal(nan_run.probs_drop, zero_run.probs_drop) &&
                      bitwise_equal(nan_run.out, zero_run.out) && bitwise_equal(nan_run.dqkv, zero_run.dqkv) &&
                      nan_run.mask == zero_run.mask,
                  "attention S=%d p=%g: the result depends on what the s×s buffers held (a skipped block was read)", S,
                  p);
            AttnRef ref = attention_ref(qkv, G, sh, p, 42, stream);
            // An element of dqkv sums up to 2·S fp32 products with cancellation: at S = 1024 its error against
            // the double reference reaches 1.3e-4 of the element (1e-3 floor), so the bound grows with S.
            const double dqkv_tol = S > 256 ? 5e-4 : 1e-4;
            CHECK(max_rel_err(nan_run.probs, to_float(ref.probs)) < 1e-5 &&
                      max_rel_err(nan_run.out, to_float(ref.out)) < 1e-4 &&
                      max_rel_err(nan_run.dqkv, to_float(ref.dqkv)) < dqkv_tol,
                  "attention S=%d p=%g with poisoned buffers vs the double reference: probs %g out %g dqkv %g", S, p,
                  max_rel_err(nan_run.probs, to_float(ref.probs)), max_rel_err(nan_run.out, to_float(ref.out)),
                  max_rel_err(nan_run.dqkv, to_float(ref.dqkv)));
        }
    }
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_attention(g_cpu, 7);
    test_attention(g_cpu, 37);  // rows longer than the CPU softmax's packs of 16 keys, with a partial pack
    test_attention_threads(g_cpu);
    test_attention_causal_blocks(g_cpu);
    test_attention_subrange(g_cpu);
    test_attention_bf16(g_cpu);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

struct AttnRunGpu {
    std::vector<float> probs, probs_drop, out, dqkv, dqkv_again;
    std::vector<float> mask;
    bool above_untouched = true;
};

static AttnRunGpu attention_run_gpu(Device dev, DType dt, const std::vector<float>& qkv, const std::vector<float>& dout,
                             const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    Ctx& ctx = ctx_of(dev);
    const int64_t SS = (int64_t)sh.B * sh.NH * sh.S * sh.S, NO = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    Tensor tq = make_tensor(dev, dt, qkv), probs = poisoned_tensor(dev, dt, SS), pd = poisoned_tensor(dev, dt, SS),
           mask = poisoned_tensor(dev, DType::U8, SS), out = poisoned_tensor(dev, dt, NO);
    attention_probs_forward(ctx, probs, mask, pd, tq, sh, p, seed, stream);
    attention_context_forward(ctx, out, pd, tq, sh);
    AttnRunGpu r;
    r.probs = to_host(probs);
    r.probs_drop = to_host(pd);
    r.out = to_host(out);
    r.mask = to_host(mask);
    // Each device has its own block size (64 rows on the CPU, 256 on the GPU): above its blocks the poison
    // must still be there; those entries are then compared as the zeros they stand for.
    r.above_untouched = clear_above_blocks(r.probs, r.probs_drop, r.mask, sh, attention_causal_block(ctx, sh.S),
                                           NAN, 7.f);
    Tensor td = make_tensor(dev, dt, dout);
    for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
        Tensor dq = poisoned_tensor(dev, dt, tq.n), scratch = poisoned_tensor(dev, dt, SS);
        attention_backward(ctx, dq, td, tq, probs, mask, pd, scratch, sh, p);
        (rep ? r.dqkv_again : r.dqkv) = to_host(dq);
        tensor_free(dq);
        tensor_free(scratch);
    }
    free_all({&tq, &probs, &pd, &mask, &out, &td});
    return r;
}

static void test_attention_gpu() {
    // The shapes (test/layers/gpu_shapes.h, where test_kernel_coverage reads them too): sub-ranges (a TP rank's
    // heads of a DP rank's batches), every softmax kernel instantiation, several causal blocks with a partial
    // last one.
    for (const AttnGpuCase& cs : gpu_cases(kAttnGpuCases, kAttnGpuCasesSmall))
        for (DType dt : {DType::F32, DType::BF16})
            for (float p : {0.f, 0.1f}) {
                if (!runs_in(cs.dtypes, dt)) continue;
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
                AttnRunGpu c = attention_run_gpu(Device::CPU, dt, qkv, G, sh, p, seed, stream);
                AttnRunGpu g = attention_run_gpu(Device::CUDA, dt, qkv, G, sh, p, seed, stream);
                char what[128];
                snprintf(what, sizeof what, "attention S=%d B=%d NH=%d HD=%d p=%g", sh.S, sh.B, sh.NH, sh.HD, p);
                std::string w(what);
                CHECK(bitwise_equal(g.mask, c.mask), "%s: masks bit-identical to the CPU [%s]", what, dtype_name(dt));
                check_close_norm((w + " probs").c_str(), dt, g.probs, c.probs);
                check_close_norm((w + " probs_drop").c_str(), dt, g.probs_drop, c.probs_drop);
                check_close_norm((w + " out").c_str(), dt, g.out, c.out);
                check_close_norm((w + " dqkv").c_str(), dt, g.dqkv, c.dqkv);
                CHECK(bitwise_equal(g.dqkv, g.dqkv_again), "%s: backward twice gives identical bits [%s]", what,
                      dtype_name(dt));
                // Both against the reference on the same rounded inputs: the masks bit for bit, the values within
                // the CPU test's bounds for the dtype (bf16: those of bf16 storage against fp32).
                AttnRef ref = attention_ref(qkv, G, sh, p, seed, stream);
                const std::vector<float> ref_mask(ref.mask.begin(), ref.mask.end());
                CHECK(bitwise_equal(c.mask, ref_mask) && bitwise_equal(g.mask, ref_mask),
                      "%s: CPU and GPU masks equal the reference's [%s]", what, dtype_name(dt));
                const bool bf = dt == DType::BF16;
                check_norm_vs_reference(w + " probs", dt, g.probs, c.probs, to_float(ref.probs), bf ? 1e-2 : 1e-4);
                check_norm_vs_reference(w + " probs_drop", dt, g.probs_drop, c.probs_drop, to_float(ref.probs_drop),
                                        bf ? 1e-2 : 1e-4);
                check_norm_vs_reference(w + " out", dt, g.out, c.out, to_float(ref.out), bf ? 2e-2 : 1e-4);
                check_norm_vs_reference(w + " dqkv", dt, g.dqkv, c.dqkv, to_float(ref.dqkv), bf ? 3e-2 : 1e-4);
                bool causal = true;
                for (int64_t bn = 0; bn < (int64_t)sh.B * sh.NH; bn++)
                    for (int q = 0; q < sh.S; q++)
                        for (int k = q + 1; k < sh.S; k++) {
                            size_t i = ((size_t)bn * sh.S + q) * sh.S + k;
                            causal &= g.probs[i] == 0.f && g.probs_drop[i] == 0.f && g.mask[i] == 0.f;
                        }
                CHECK(causal, "%s: GPU probs, probs_drop and mask exactly 0 above the diagonal [%s]", what, dtype_name(dt));
                CHECK(g.above_untouched && c.above_untouched,
                      "%s: nothing written above the causal blocks (GPU %d, CPU %d) [%s]", what, (int)g.above_untouched,
                      (int)c.above_untouched, dtype_name(dt));
                // Forward again: identical bits (selective recompute relies on it).
                AttnRunGpu g2 = attention_run_gpu(Device::CUDA, dt, qkv, G, sh, p, seed, stream);
                CHECK(bitwise_equal(g2.probs, g.probs) && bitwise_equal(g2.probs_drop, g.probs_drop) &&
                          bitwise_equal(g2.out, g.out),
                      "%s: forward twice gives identical bits [%s]", what, dtype_name(dt));
            }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_attention_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_attention", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
