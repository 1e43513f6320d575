// test_flash_attention.cu — tiled attention (layers/flash_attention.cu): the fast CPU path (--cpu, label
// unit) and the CUDA kernels against it (--gpu, label gpu).
//
// CPU checks:
//  - out, lse and dqkv against the plain math, kept in double: layers/reference/attention.h (through the s×s
//    probabilities) and layers/reference/flash_attention.h (lse, and the backward rebuilt from it; the two
//    references agree), p = 0 and 0.1,
//    S = 7, 37, 64, 133, 200 (one tile, a partial tile, exactly one tile, several with a partial last one);
//    a rank's heads and batches of a bigger global tensor (the TP / DP coordinates of dropout);
//  - against the unfused path (layers/attention.cu) on the same inputs: the two paths agree to fp32 rounding;
//  - the keep bits, read through the kernels themselves: with V[k] the unit vector e_k (HD >= S) the forward's
//    out[q][k] is P_d(q, k), nonzero exactly where the probability is kept; with dO[q] = e_q the backward's
//    dV[k][q] is P_d(q, k) again. Both must equal the unfused path's attn_mask, bit for bit;
//  - directional finite differences of L = Σ G ⊙ out, also for Q, K and V separately;
//  - the same bits with 1, 2 and 3 threads; bf16 storage against the fp32 run;
//  - ring attention's blocks: a whole attention cut into runs of queries × runs of keys off the 64-tile grid,
//    blocks merged (flash_block_forward, flash_block_merge) == the whole out and lse, the blocks' backward terms
//    summed (flash_block_backward) == the whole dqkv, p = 0 and 0.1; a block's rows that see no key (o = 0,
//    lse = −inf, dQ unchanged) and keys no query sees (dK, dV unchanged).
// GPU checks (the shapes of test/layers/gpu_shapes.h, f32 and bf16, p = 0 and 0.1): out, lse, dqkv against
// the CPU path and the reference, outputs poisoned first; the keep bits through the one-hot V on the GPU
// equal the CPU's; the forward and the backward twice give identical bits. Ring attention's blocks
// (gpu_shapes.h, kFlashBlockGpuCases): the block's o and lse, the merge, and the terms the backward adds,
// against the CPU.
// Tensor-core checks (--gpu-tc, label gpu): the bf16 kernels of layers/flash_attention_tc.cu over the shapes of
// gpu_shapes.h's kFlashTcGpuCases (S 1 to 1024, HD 64 and 128, heads 1 to 25, p = 0 and 0.1) against the CPU path
// and the reference, twice for the same bits; their keep bits through one-hot V and dO against the unfused mask.
// (--gpu runs them too, on its bf16 cases and ring blocks: every bf16 call on a GPU goes to them.)
#include <omp.h>
#include <algorithm>
#include <functional>
#include "layers/flash_attention.h"
#include "layers/philox.h"
#include "layers/reference/attention.h"
#include "layers/reference/flash_attention.h"
#include "test/layers/gpu_shapes.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// The two references, their tensors kept in double: attention's (layers/reference/attention.h: out and dqkv
// through the s×s probabilities) and flash attention's own (layers/reference/flash_attention.h: out and lse,
// and dqkv rebuilt from them). They are one function, which the CPU checks hold them to.
struct AttnRef {
    std::vector<double> out, lse, dqkv;
};
static AttnRef attention_ref(const std::vector<float>& qkv, const std::vector<float>& dout, const AttnShape& sh,
                             float p, uint64_t seed, uint32_t stream) {
    const size_t SS = (size_t)sh.B * sh.NH * sh.S * sh.S, NO = (size_t)sh.S * sh.B * sh.NH * sh.HD;
    std::vector<double> probs(SS), probs_drop(SS);
    std::vector<uint8_t> mask(SS);
    AttnRef r;
    r.out.resize(NO), r.dqkv.resize(qkv.size());
    ref_attention_forward(probs.data(), mask.data(), probs_drop.data(), r.out.data(), qkv.data(), sh, p, seed, stream);
    ref_attention_backward(r.dqkv.data(), dout.data(), qkv.data(), probs.data(), mask.data(), probs_drop.data(), sh, p);
    return r;
}
static AttnRef flash_ref(const std::vector<float>& qkv, const std::vector<float>& dout, const AttnShape& sh, float p,
                         uint64_t seed, uint32_t stream) {
    AttnRef r;
    r.out.resize((size_t)sh.S * sh.B * sh.NH * sh.HD), r.lse.resize((size_t)sh.B * sh.NH * sh.S);
    r.dqkv.resize(qkv.size());
    ref_flash_attention_forward(r.out.data(), r.lse.data(), qkv.data(), sh, p, seed, stream);
    ref_flash_attention_backward(r.dqkv.data(), dout.data(), r.out.data(), r.lse.data(), qkv.data(), sh, p, seed,
                                 stream);
    return r;
}

struct FlashRun {
    std::vector<float> out, lse, dqkv;
};

// Forward (and backward when dout is given) in `dtype` on `dev`; outputs start as NaN, so an element a kernel
// should write and does not shows up.
static FlashRun flash_run(Device dev, DType dtype, const std::vector<float>& qkv, const std::vector<float>& dout,
                          const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    Ctx& ctx = ctx_of(dev);
    const int64_t NO = (int64_t)sh.S * sh.B * sh.NH * sh.HD, NL = (int64_t)sh.B * sh.NH * sh.S;
    Tensor tq = make_tensor(dev, dtype, qkv);
    Tensor out = poisoned_tensor(dev, dtype, NO), lse = poisoned_tensor(dev, DType::F32, NL);
    flash_attention_forward(ctx, out, lse, tq, sh, p, seed, stream);
    FlashRun r;
    r.out = tensor_to_host_f32(out);
    r.lse = tensor_to_host_f32(lse);
    if (!dout.empty()) {
        Tensor td = make_tensor(dev, dtype, dout), dq = poisoned_tensor(dev, dtype, tq.n);
        flash_attention_backward(ctx, dq, td, out, lse, tq, sh, p, seed, stream);
        r.dqkv = tensor_to_host_f32(dq);
        free_all({&td, &dq});
    }
    free_all({&tq, &out, &lse});
    return r;
}

// The unfused path's out, dqkv and mask on the same inputs (CPU, f32).
struct UnfusedRun {
    std::vector<float> out, dqkv;
    std::vector<uint8_t> mask;
};
static UnfusedRun unfused_run(const std::vector<float>& qkv, const std::vector<float>& dout, const AttnShape& sh,
                              float p, uint64_t seed, uint32_t stream) {
    Ctx& ctx = g_cpu;
    const int64_t SS = (int64_t)sh.B * sh.NH * sh.S * sh.S, NO = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    Tensor tq = cpu_tensor(DType::F32, qkv), probs = tensor_zeros(Device::CPU, DType::F32, SS),
           pd = tensor_zeros(Device::CPU, DType::F32, SS), mask = tensor_zeros(Device::CPU, DType::U8, SS),
           out = tensor_zeros(Device::CPU, DType::F32, NO), td = cpu_tensor(DType::F32, dout),
           dq = tensor_zeros(Device::CPU, DType::F32, tq.n), scratch = tensor_zeros(Device::CPU, DType::F32, SS);
    attention_probs_forward(ctx, probs, mask, pd, tq, sh, p, seed, stream);
    attention_context_forward(ctx, out, pd, tq, sh);
    attention_backward(ctx, dq, td, tq, probs, mask, pd, scratch, sh, p);
    UnfusedRun r;
    r.out = tensor_to_host_f32(out);
    r.dqkv = tensor_to_host_f32(dq);
    const std::vector<float> m = tensor_to_host_f32(mask);
    r.mask.assign(m.begin(), m.end());
    // Keep only the causal entries (k <= q): the others are 0 within the causal blocks and unwritten above.
    for (int64_t i = 0; i < SS; i++)
        if (i % sh.S > (i / sh.S) % sh.S) r.mask[i] = 0;
    free_all({&tq, &probs, &pd, &mask, &out, &td, &dq, &scratch});
    return r;
}

static AttnShape shape(int S, int B, int NH, int HD, int64_t b_off = 0, int64_t B_tot = 0, int64_t h_off = 0,
                       int64_t NH_tot = 0) {
    AttnShape sh;
    sh.S = S;
    sh.B = B;
    sh.NH = NH;
    sh.HD = HD;
    sh.b_offset = b_off;
    sh.B_total = B_tot ? B_tot : B;
    sh.head_offset = h_off;
    sh.NH_total = NH_tot ? NH_tot : NH;
    return sh;
}

// =========================================================================================================
// CPU checks (--cpu)
// =========================================================================================================

static void test_against_references(const AttnShape& sh) {
    const int W = 3 * sh.NH * sh.HD;
    const uint64_t seed = 42;
    const uint32_t stream = dropout_stream(3, kSiteAttnProbs);
    for (float p : {0.f, 0.1f}) {
        std::vector<float> qkv = random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f);
        std::vector<float> G = random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng);
        FlashRun run = flash_run(Device::CPU, DType::F32, qkv, G, sh, p, seed, stream);
        AttnRef ref = attention_ref(qkv, G, sh, p, seed, stream), fref = flash_ref(qkv, G, sh, p, seed, stream);
        ref.lse = fref.lse;  // the unfused path keeps no lse
        char what[96];
        snprintf(what, sizeof what, "S=%d B=%d NH=%d HD=%d heads %lld+ of %lld, p=%g", sh.S, sh.B, sh.NH, sh.HD,
                 (long long)sh.head_offset, (long long)sh.NH_total, p);
        // The two references are one function: they agree to double rounding.
        CHECK(max_rel_err(to_float(fref.out), to_float(ref.out)) < 1e-6 &&
                  max_rel_err(to_float(fref.dqkv), to_float(ref.dqkv)) < 1e-6,
              "reference/flash_attention.h == reference/attention.h (%s): out %g dqkv %g", what,
              max_rel_err(to_float(fref.out), to_float(ref.out)), max_rel_err(to_float(fref.dqkv), to_float(ref.dqkv)));
        const double out_tol = sh.S > 16 ? 1e-4 : 1e-5;  // as test_attention: sums of up to S products near 0
        CHECK(max_rel_err(run.out, to_float(ref.out)) < out_tol, "flash out vs double (%s): %g", what,
              max_rel_err(run.out, to_float(ref.out)));
        CHECK(max_abs_diff(run.lse, to_float(ref.lse)) < 1e-5 * (1 + rms(to_float(ref.lse))),
              "flash lse vs double (%s): %g", what, max_abs_diff(run.lse, to_float(ref.lse)));
        // dqkv: its elements near 0 (the 1e-3 floor of max_rel_err) carry absolute errors of about 2e-7, twice
        // the unfused path's there (D = dO·O and P = e^{x − lse} each round once more than the unfused
        // path's row sums); over the whole tensor the two paths are equally accurate, which the second check
        // holds them to.
        const std::vector<float> ref_dqkv = to_float(ref.dqkv);
        CHECK(max_rel_err(run.dqkv, ref_dqkv) < 3e-4, "flash dqkv vs double (%s): %g", what,
              max_rel_err(run.dqkv, ref_dqkv));
        // and against flash attention's own reference (its backward from out and lse), with the same bounds
        CHECK(max_rel_err(run.out, to_float(fref.out)) < out_tol && max_rel_err(run.dqkv, to_float(fref.dqkv)) < 3e-4,
              "flash out, dqkv vs reference/flash_attention.h (%s): %g, %g", what,
              max_rel_err(run.out, to_float(fref.out)), max_rel_err(run.dqkv, to_float(fref.dqkv)));
        UnfusedRun un = unfused_run(qkv, G, sh, p, seed, stream);
        CHECK(norm_rel_err(run.dqkv, ref_dqkv) <= 1.5 * norm_rel_err(un.dqkv, ref_dqkv) + 5e-8,
              "flash dqkv no less accurate than the unfused path's (%s): %g vs %g", what,
              norm_rel_err(run.dqkv, ref_dqkv), norm_rel_err(un.dqkv, ref_dqkv));
        CHECK(max_rel_err(run.out, un.out) < 2 * out_tol, "flash out vs the unfused path (%s): %g", what,
              max_rel_err(run.out, un.out));
        CHECK(max_rel_err(run.dqkv, un.dqkv) < 3e-4, "flash dqkv vs the unfused path (%s): %g", what,
              max_rel_err(run.dqkv, un.dqkv));
    }
}

// The keep bits, read out of the forward and the backward. HD = S: V[k] = e_k makes out[q] the row of
// P_d = P ⊙ z/(1 − p); dO[q] = e_q makes dV[k] the column k of P_d. Every probability is > 0 (a softmax of
// finite scores), so out[q][k] != 0 exactly where z(q, k) = 1. The flash path runs on `dev` in `dt` (the GPU's
// bf16 kernels: test_flash_tc_keep_bits), the unfused one on the CPU.
static void test_keep_bits(const AttnShape& sh, float p, Device dev = Device::CPU, DType dt = DType::F32) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD;
    CHECK(HD == S, "test_keep_bits needs HD == S");
    const uint64_t seed = 7;
    const uint32_t stream = dropout_stream(1, kSiteAttnProbs);
    std::vector<float> qkv = round_to(dt, random_vec((size_t)S * B * W, g_rng, -0.5f, 0.5f));
    std::vector<float> G((size_t)S * B * NH * HD, 0.f);
    for (int s = 0; s < S; s++)
        for (int b = 0; b < B; b++)
            for (int n = 0; n < NH; n++) {
                float* v = &qkv[(size_t)(s * B + b) * W + 2 * NH * HD + n * HD];
                for (int d = 0; d < HD; d++) v[d] = d == s ? 1.f : 0.f;
                G[(size_t)(s * B + b) * NH * HD + n * HD + s] = 1.f;
            }
    UnfusedRun un = unfused_run(qkv, G, sh, p, seed, stream);
    FlashRun fl = flash_run(dev, dt, qkv, G, sh, p, seed, stream);
    const char* where = dev == Device::CUDA ? "GPU" : "CPU";
    int64_t fwd_diff = 0, bwd_diff = 0, dropped = 0;
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++)
            for (int q = 0; q < S; q++)
                for (int k = 0; k <= q; k++) {
                    const bool kept = un.mask[(((size_t)b * NH + n) * S + q) * S + k] != 0;
                    const bool fwd = fl.out[(size_t)(q * B + b) * NH * HD + n * HD + k] != 0.f;
                    const bool bwd = fl.dqkv[(size_t)(k * B + b) * W + 2 * NH * HD + n * HD + q] != 0.f;
                    fwd_diff += fwd != kept;
                    bwd_diff += bwd != kept;
                    dropped += !kept;
                }
    CHECK(fwd_diff == 0, "flash forward keep bits == the unfused attn_mask (%s %s, S=%d, p=%g): %lld differ", where,
          dtype_name(dt), S, p, (long long)fwd_diff);
    CHECK(bwd_diff == 0, "flash backward keep bits == the unfused attn_mask (%s %s, S=%d, p=%g): %lld differ", where,
          dtype_name(dt), S, p, (long long)bwd_diff);
    if (p > 0) CHECK(dropped > 0, "p=%g drops something (S=%d)", p, S);
    else CHECK(dropped == 0, "p=0 keeps every probability (%lld dropped)", (long long)dropped);
}

static void test_finite_differences() {
    const AttnShape sh = shape(70, 2, 2, 8);  // two tiles, the second partial
    const int W = 3 * sh.NH * sh.HD;
    const uint64_t seed = 9;
    const uint32_t stream = dropout_stream(0, kSiteAttnProbs);
    for (float p : {0.f, 0.1f}) {
        std::vector<float> qkv = random_vec((size_t)sh.S * sh.B * W, g_rng, -1.f, 1.f);
        std::vector<float> G = random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng);
        FlashRun run = flash_run(Device::CPU, DType::F32, qkv, G, sh, p, seed, stream);
        auto loss = [&]() { return dot(G, flash_run(Device::CPU, DType::F32, qkv, {}, sh, p, seed, stream).out); };
        for (int part = -1; part < 3; part++) {  // -1: all of qkv; 0, 1, 2: Q, K, V alone
            std::vector<float> d(qkv.size(), 0.f);
            for (size_t r = 0; r < (size_t)sh.S * sh.B; r++)
                for (int c = 0; c < W; c++)
                    if (part < 0 || c / (sh.NH * sh.HD) == part)
                        d[r * W + c] = std::uniform_real_distribution<float>(-1, 1)(g_rng);
            char what[64];
            snprintf(what, sizeof what, "flash d%s FD (p=%g)", part < 0 ? "qkv" : part == 0 ? "Q" : part == 1 ? "K" : "V",
                     p);
            check_fd(what, fd_directional(qkv, d, 1e-2f, loss), dot(run.dqkv, d), 2e-3);
        }
    }
}

static void test_threads_and_bf16() {
    const AttnShape sh = shape(133, 2, 3, 16);
    const int W = 3 * sh.NH * sh.HD;
    std::vector<float> qkv = random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f);
    std::vector<float> G = random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng);
    const uint32_t stream = dropout_stream(2, kSiteAttnProbs);
    const int threads = omp_get_max_threads();
    std::vector<FlashRun> runs;
    for (int t : {1, 2, 3}) {
        omp_set_num_threads(t);
        runs.push_back(flash_run(Device::CPU, DType::F32, qkv, G, sh, 0.1f, 5, stream));
    }
    omp_set_num_threads(threads);
    for (int i = 1; i < 3; i++)
        CHECK(bitwise_equal(runs[i].out, runs[0].out) && bitwise_equal(runs[i].lse, runs[0].lse) &&
                  bitwise_equal(runs[i].dqkv, runs[0].dqkv),
              "flash: the same bits with %d threads as with 1", i + 1);
    // bf16 storage: inputs rounded to bf16, fp32 math inside; compared with the fp32 run on the rounded inputs.
    const std::vector<float> qb = round_bf16(qkv), gb = round_bf16(G);
    FlashRun f = flash_run(Device::CPU, DType::F32, qb, gb, sh, 0.1f, 5, stream);
    FlashRun h = flash_run(Device::CPU, DType::BF16, qb, gb, sh, 0.1f, 5, stream);
    CHECK(norm_rel_err(h.out, f.out) < 1e-2, "flash bf16 out vs f32: %g", norm_rel_err(h.out, f.out));
    CHECK(max_abs_diff(h.lse, f.lse) < 1e-5 * (1 + rms(f.lse)), "flash bf16 lse (fp32 inside) vs f32: %g",
          max_abs_diff(h.lse, f.lse));
    CHECK(norm_rel_err(h.dqkv, f.dqkv) < 2e-2, "flash bf16 dqkv vs f32: %g", norm_rel_err(h.dqkv, f.dqkv));
}

// ---- the blocks of ring attention (flash_block_forward, flash_block_merge, flash_block_backward) ----------

static AttnBlock block_of(const AttnShape& sh, int Sq, int Sk, int64_t q_pos, int64_t k_pos, int64_t S_total,
                          int q_width, int kv_width, int64_t lse_ld) {
    AttnBlock blk;
    blk.attn = sh;
    blk.Sq = Sq;
    blk.Sk = Sk;
    blk.q_pos = q_pos;
    blk.k_pos = k_pos;
    blk.S_total = S_total;
    blk.q_width = q_width;
    blk.kv_width = kv_width;
    blk.lse_ld = lse_ld;
    return blk;
}

// A whole causal attention of S positions cut into query runs × key runs (the cuts `at`), each block computed
// alone with flash_block_forward, merged with flash_block_merge, and the summed flash_block_backward terms:
// against flash_attention_forward's out, lse and flash_attention_backward's dqkv on the same inputs. The runs
// cut the CPU's 64-query tiles off-grid, and the blocks above the diagonal (no query sees a key) are merged
// too: they must change nothing. Q, K, V are read in place from qkv (widths 3C), dK and dV accumulate in one
// [S·B, 2C] buffer (dkv_width 2C), lse rows are lse_ld = Sq + 3 apart with NaN in the gaps.
static void test_blocks_against_whole(const AttnShape& sh, const std::vector<int>& at, float p) {
    const int S = sh.S, B = sh.B, C = sh.NH * sh.HD, W = 3 * C, BN = sh.B * sh.NH;
    const uint64_t seed = 21;
    const uint32_t stream = dropout_stream(6, kSiteAttnProbs);
    const std::vector<float> qkv = random_vec((size_t)S * B * W, g_rng, -1.5f, 1.5f);
    const std::vector<float> G = random_vec((size_t)S * B * C, g_rng);
    const FlashRun whole = flash_run(Device::CPU, DType::F32, qkv, G, sh, p, seed, stream);
    Tensor tq = cpu_tensor(DType::F32, qkv), tg = cpu_tensor(DType::F32, G);
    Tensor dkv = tensor_zeros(Device::CPU, DType::F32, (int64_t)S * B * 2 * C);
    std::vector<float> out(whole.out.size()), lse(whole.lse.size()), dqkv(whole.dqkv.size());
    char what[128];
    snprintf(what, sizeof what, "S=%d B=%d NH=%d HD=%d, %zu runs, p=%g", S, B, sh.NH, sh.HD, at.size() - 1, p);
    bool pads_untouched = true;
    for (size_t i = 0; i + 1 < at.size(); i++) {
        const int q_pos = at[i], Sq = at[i + 1] - at[i];
        const int64_t ld = Sq + 3;
        std::vector<float> lse0((size_t)BN * ld, NAN);
        for (int bn = 0; bn < BN; bn++)
            for (int q = 0; q < Sq; q++) lse0[(size_t)bn * ld + q] = -INFINITY;
        Tensor o = tensor_zeros(Device::CPU, DType::F32, (int64_t)Sq * B * C), L = cpu_tensor(DType::F32, lse0);
        const Tensor q = tq.slice((int64_t)q_pos * B * W, (int64_t)Sq * B * W);
        std::vector<AttnBlock> blocks;
        for (size_t j = 0; j + 1 < at.size(); j++) {
            const int k_pos = at[j], Sk = at[j + 1] - at[j];
            const AttnBlock blk = block_of(sh, Sq, Sk, q_pos, k_pos, S, W, W, ld);
            const Tensor k = tq.slice((int64_t)k_pos * B * W + C, (int64_t)Sk * B * W - C);
            const Tensor v = tq.slice((int64_t)k_pos * B * W + 2 * C, (int64_t)Sk * B * W - 2 * C);
            Tensor ob = poisoned_tensor(Device::CPU, DType::F32, o.n), lb = cpu_tensor(DType::F32, lse0);
            flash_block_forward(g_cpu, ob, lb, q, k, v, blk, p, seed, stream);
            flash_block_merge(g_cpu, o, L, ob, lb, blk);
            free_all({&ob, &lb});
            blocks.push_back(blk);
        }
        // The merged result is the whole path's for these queries.
        const std::vector<float> ho = tensor_to_host_f32(o), hl = tensor_to_host_f32(L);
        std::copy(ho.begin(), ho.end(), out.begin() + (size_t)q_pos * B * C);
        for (int bn = 0; bn < BN; bn++) {
            for (int r = 0; r < Sq; r++) lse[(size_t)bn * S + q_pos + r] = hl[(size_t)bn * ld + r];
            for (int r = Sq; r < ld; r++) pads_untouched &= std::isnan(hl[(size_t)bn * ld + r]);
        }
        // Backward from the merged out and lse: dQ of the run summed over its blocks, dK, dV over all runs.
        Tensor dq = tensor_zeros(Device::CPU, DType::F32, o.n);
        const Tensor dout = tg.slice((int64_t)q_pos * B * C, (int64_t)Sq * B * C);
        for (const AttnBlock& blk : blocks) {
            const Tensor k = tq.slice(blk.k_pos * B * W + C, (int64_t)blk.Sk * B * W - C);
            const Tensor v = tq.slice(blk.k_pos * B * W + 2 * C, (int64_t)blk.Sk * B * W - 2 * C);
            const Tensor dk = dkv.slice(blk.k_pos * B * 2 * C, (int64_t)blk.Sk * B * 2 * C);
            const Tensor dv = dkv.slice(blk.k_pos * B * 2 * C + C, (int64_t)blk.Sk * B * 2 * C - C);
            flash_block_backward(g_cpu, dq, dk, dv, 2 * C, dout, o, L, q, k, v, blk, p, seed, stream);
        }
        const std::vector<float> hdq = tensor_to_host_f32(dq);
        for (int64_t r = 0; r < (int64_t)Sq * B; r++)
            std::copy(&hdq[r * C], &hdq[r * C] + C, &dqkv[(q_pos * B + r) * W]);
        free_all({&o, &L, &dq});
    }
    const std::vector<float> hkv = tensor_to_host_f32(dkv);
    for (int64_t r = 0; r < (int64_t)S * B; r++)
        std::copy(&hkv[r * 2 * C], &hkv[r * 2 * C] + 2 * C, &dqkv[r * W + C]);
    free_all({&tq, &tg, &dkv});
    // Only the order of the sums differs (block by block, merged by the log-sum-exp rule, against the tiles'
    // running maximum): fp32 rounding.
    CHECK(max_rel_err(out, whole.out, 1e-2) < 2e-5 && norm_rel_err(out, whole.out) < 1e-6,
          "blocks merged == whole out (%s): max %g, norm %g", what, max_rel_err(out, whole.out, 1e-2),
          norm_rel_err(out, whole.out));
    CHECK(max_abs_diff(lse, whole.lse) < 1e-6 * (1 + rms(whole.lse)), "blocks merged == whole lse (%s): %g", what,
          max_abs_diff(lse, whole.lse));
    CHECK(pads_untouched, "blocks: the lse entries between rows (lse_ld > Sq) are never written (%s)", what);
    CHECK(max_rel_err(dqkv, whole.dqkv, 1e-2) < 5e-5 && norm_rel_err(dqkv, whole.dqkv) < 1e-6,
          "blocks' summed backward == whole dqkv (%s): max %g, norm %g", what, max_rel_err(dqkv, whole.dqkv, 1e-2),
          norm_rel_err(dqkv, whole.dqkv));
}

// A block whose first queries come before its first key (q_pos < k_pos): those rows see no key, so o = 0 and
// lse = −inf (merge weight 0), and the backward adds exactly nothing to their dQ; the other rows are finite.
// The keys nobody sees (after the last query) get no dK, dV either.
static void test_block_rows_without_keys() {
    const AttnShape sh = shape(0, 2, 2, 8);
    const int C = sh.NH * sh.HD, B = sh.B, Sq = 10, Sk = 12, BN = B * sh.NH;
    const int64_t q_pos = 20, k_pos = 25, S_total = 40;  // queries 20..29, keys 25..36
    const AttnBlock blk = block_of(sh, Sq, Sk, q_pos, k_pos, S_total, C, 2 * C, Sq);
    const std::vector<float> q = random_vec((size_t)Sq * B * C, g_rng), kv = random_vec((size_t)Sk * B * 2 * C, g_rng);
    Tensor tq = cpu_tensor(DType::F32, q), tkv = cpu_tensor(DType::F32, kv);
    const Tensor tk = tkv.slice(0, tkv.n), tv = tkv.slice(C, tkv.n - C);
    Tensor o = poisoned_tensor(Device::CPU, DType::F32, (int64_t)Sq * B * C);
    Tensor L = poisoned_tensor(Device::CPU, DType::F32, (int64_t)BN * Sq);
    flash_block_forward(g_cpu, o, L, tq, tk, tv, blk, 0.1f, 3, dropout_stream(0, kSiteAttnProbs));
    const std::vector<float> ho = tensor_to_host_f32(o), hl = tensor_to_host_f32(L);
    int bad = 0;
    for (int bn = 0; bn < BN; bn++)
        for (int r = 0; r < Sq; r++) {
            const bool none = q_pos + r < k_pos;
            const float l = hl[(size_t)bn * Sq + r];
            bad += none ? !(l == -INFINITY) : !std::isfinite(l);
            const int b = bn / sh.NH, n = bn % sh.NH;
            for (int c = 0; c < sh.HD; c++) {
                const float x = ho[((size_t)r * B + b) * C + n * sh.HD + c];
                bad += none ? x != 0.f : !std::isfinite(x);
            }
        }
    CHECK(bad == 0, "block rows that see no key: o = 0 and lse = -inf, the others finite (%d wrong)", bad);
    // Backward with a finite (merged) lse everywhere, as the other blocks of the ring would give.
    const std::vector<float> lfin = random_vec((size_t)BN * Sq, g_rng, 2.f, 3.f), dq0 = random_vec(ho.size(), g_rng),
                             dkv0 = random_vec(kv.size(), g_rng);
    Tensor tl = cpu_tensor(DType::F32, lfin), dout = cpu_tensor(DType::F32, random_vec(ho.size(), g_rng));
    Tensor dq = cpu_tensor(DType::F32, dq0), dkv = cpu_tensor(DType::F32, dkv0);
    flash_block_backward(g_cpu, dq, dkv.slice(0, dkv.n), dkv.slice(C, dkv.n - C), 2 * C, dout, o, tl, tq, tk, tv, blk,
                         0.f, 3, dropout_stream(0, kSiteAttnProbs));  // p = 0: every seen key's dV changes
    const std::vector<float> hdq = tensor_to_host_f32(dq), hdkv = tensor_to_host_f32(dkv);
    int unchanged_q = 0, changed_q = 0, unchanged_k = 0, changed_k = 0;
    for (size_t i = 0; i < hdq.size(); i++) {
        const bool none = q_pos + (int64_t)(i / ((size_t)B * C)) < k_pos;
        (none ? unchanged_q : changed_q) += none ? hdq[i] == dq0[i] : hdq[i] != dq0[i];
    }
    for (size_t i = 0; i < hdkv.size(); i++) {
        const bool none = k_pos + (int64_t)(i / ((size_t)B * 2 * C)) > q_pos + Sq - 1;
        (none ? unchanged_k : changed_k) += none ? hdkv[i] == dkv0[i] : hdkv[i] != dkv0[i];
    }
    const int rows_none = (int)(k_pos - q_pos), keys_none = (int)(k_pos + Sk - q_pos - Sq);
    CHECK(unchanged_q == rows_none * B * C && changed_q == (Sq - rows_none) * B * C,
          "block backward: dQ of the rows that see no key unchanged (%d of %d), the others changed (%d of %d)",
          unchanged_q, rows_none * B * C, changed_q, (Sq - rows_none) * B * C);
    CHECK(unchanged_k == keys_none * B * 2 * C && changed_k == (Sk - keys_none) * B * 2 * C,
          "block backward: dK, dV of the keys no query sees unchanged (%d of %d), the others changed (%d of %d)",
          unchanged_k, keys_none * B * 2 * C, changed_k, (Sk - keys_none) * B * 2 * C);
    free_all({&tq, &tkv, &o, &L, &tl, &dout, &dq, &dkv});
}

static void cpu_checks() {
    g_rng.seed(1234);
    for (int S : {7, 37, 64, 133, 200}) test_against_references(shape(S, 2, 3, 8));
    test_against_references(shape(90, 2, 2, 16, 1, 4, 3, 8));  // a rank's heads 3..4 of 8, batches 1..2 of 4
    for (float p : {0.f, 0.1f, 0.5f}) test_keep_bits(shape(130, 2, 2, 130, 1, 3, 1, 4), p);
    test_finite_differences();
    test_threads_and_bf16();
    for (float p : {0.f, 0.1f}) {
        test_blocks_against_whole(shape(100, 2, 2, 8), {0, 40, 100}, p);
        test_blocks_against_whole(shape(150, 2, 2, 16, 1, 3, 2, 5), {0, 33, 97, 150}, p);  // a rank's heads, batches
    }
    test_block_rows_without_keys();
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

static void test_flash_gpu() {
    for (const FlashGpuCase& c : gpu_cases(kFlashGpuCases, kFlashGpuCasesSmall))
        for (DType dt : {DType::F32, DType::BF16}) {
            if (!runs_in(c.dtypes, dt)) continue;
            const AttnShape sh = shape(c.S, c.B, c.NH, c.HD, c.b_offset, c.B_total, c.head_offset, c.NH_total);
            const int W = 3 * sh.NH * sh.HD;
            for (float p : {0.f, 0.1f}) {
                // Inputs rounded to the dtype first, so that both devices read the same numbers.
                const std::vector<float> qkv = round_to(dt, random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f));
                const std::vector<float> G = round_to(dt, random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng));
                const uint32_t stream = dropout_stream(5, kSiteAttnProbs);
                FlashRun cpu = flash_run(Device::CPU, dt, qkv, G, sh, p, 11, stream);
                FlashRun gpu = flash_run(Device::CUDA, dt, qkv, G, sh, p, 11, stream);
                char what[96];
                snprintf(what, sizeof what, "flash GPU S=%d B=%d NH=%d HD=%d p=%g [%s]", sh.S, sh.B, sh.NH, sh.HD, p,
                         dtype_name(dt));
                const double tol = dt == DType::BF16 ? 2e-2 : 1e-5;
                CHECK(norm_rel_err(gpu.out, cpu.out) < tol, "%s: out %g", what, norm_rel_err(gpu.out, cpu.out));
                CHECK(max_abs_diff(gpu.lse, cpu.lse) < 1e-4 * (1 + rms(cpu.lse)), "%s: lse %g", what,
                      max_abs_diff(gpu.lse, cpu.lse));
                CHECK(norm_rel_err(gpu.dqkv, cpu.dqkv) < (dt == DType::BF16 ? 3e-2 : 1e-4), "%s: dqkv %g", what,
                      norm_rel_err(gpu.dqkv, cpu.dqkv));
                // Both against flash attention's reference on the same rounded inputs (the CPU within the bounds
                // of the CPU checks and of bf16 storage against fp32, the GPU within 2.1 times them).
                const AttnRef ref = flash_ref(qkv, G, sh, p, 11, stream);
                const bool bf = dt == DType::BF16;
                check_norm_vs_reference(std::string(what) + " out", dt, gpu.out, cpu.out, to_float(ref.out),
                                        bf ? 2e-2 : 1e-5);
                check_norm_vs_reference(std::string(what) + " dqkv", dt, gpu.dqkv, cpu.dqkv, to_float(ref.dqkv),
                                        bf ? 3e-2 : 1e-4);
                const std::vector<float> ref_lse = to_float(ref.lse);
                CHECK(max_abs_diff(cpu.lse, ref_lse) < 1e-4 * (1 + rms(ref_lse)) &&
                          max_abs_diff(gpu.lse, ref_lse) < 2.1e-4 * (1 + rms(ref_lse)),
                      "%s: lse vs the reference: cpu %g gpu %g", what, max_abs_diff(cpu.lse, ref_lse),
                      max_abs_diff(gpu.lse, ref_lse));
                FlashRun again = flash_run(Device::CUDA, dt, qkv, G, sh, p, 11, stream);
                CHECK(bitwise_equal(again.out, gpu.out) && bitwise_equal(again.lse, gpu.lse) &&
                          bitwise_equal(again.dqkv, gpu.dqkv),
                      "%s: forward and backward twice give identical bits", what);
            }
        }
    // The keep bits on the GPU, through the one-hot V (HD = S): the nonzero pattern of out equals the CPU's.
    for (int S : {64, 100}) {
        const AttnShape sh = shape(S, 1, 2, S, 0, 2, 1, 3);
        const int W = 3 * sh.NH * sh.HD;
        std::vector<float> qkv = random_vec((size_t)S * W, g_rng, -0.5f, 0.5f);
        for (int s = 0; s < S; s++)
            for (int n = 0; n < sh.NH; n++)
                for (int d = 0; d < S; d++) qkv[(size_t)s * W + 2 * sh.NH * S + n * S + d] = d == s ? 1.f : 0.f;
        const uint32_t stream = dropout_stream(4, kSiteAttnProbs);
        FlashRun cpu = flash_run(Device::CPU, DType::F32, qkv, {}, sh, 0.1f, 3, stream);
        FlashRun gpu = flash_run(Device::CUDA, DType::F32, qkv, {}, sh, 0.1f, 3, stream);
        int64_t diff = 0;
        for (size_t i = 0; i < cpu.out.size(); i++) diff += (cpu.out[i] != 0.f) != (gpu.out[i] != 0.f);
        CHECK(diff == 0, "flash GPU keep bits == CPU keep bits (S=%d): %lld differ", S, (long long)diff);
    }
}

// lse entries of a block (B·NH rows of Sq, lse_ld apart) from an [B·NH·lse_ld] buffer; `pads_nan` tells whether
// every entry between the rows is still NaN (the poison: nothing may write there).
static std::vector<float> lse_rows(const std::vector<float>& l, int BN, int Sq, int64_t ld, bool* pads_nan) {
    std::vector<float> r;
    for (int bn = 0; bn < BN; bn++)
        for (int64_t q = 0; q < ld; q++) {
            const float x = l[(size_t)(bn * ld + q)];
            if (q < Sq) r.push_back(x);
            else *pads_nan &= std::isnan(x);
        }
    return r;
}
// Two lse vectors agree: −inf at the same entries, the finite ones within tol.
static bool lse_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
    std::vector<float> fa, fb;
    for (size_t i = 0; i < a.size(); i++) {
        if ((a[i] == -INFINITY) != (b[i] == -INFINITY)) return false;
        if (a[i] != -INFINITY) fa.push_back(a[i]), fb.push_back(b[i]);
    }
    return max_abs_diff(fa, fb) < tol * (1 + rms(fb));
}

struct BlockRun {
    std::vector<float> o, lse, o_m, lse_m, dq, dkv;  // forward; merge; backward (accumulators after)
};
// The three block ops on `dev`: forward into poisoned o, lse; merge of (o_prev, lse_prev) with the given block
// result (o_in, lse_in: the CPU forward's, so that the merge is compared on its own); backward from (out, lse_b)
// added into dq0, dkv0. q: [Sq·B, 3C] (Q at column 0), kv: [Sk·B, 2C] (K | V), dkv: [Sk·B, 2C] (dK | dV).
static BlockRun block_run(Device dev, DType dt, const AttnBlock& blk, const std::vector<float>& q,
                          const std::vector<float>& kv, const std::vector<float>& o_prev,
                          const std::vector<float>& lse_prev, const std::vector<float>& o_in,
                          const std::vector<float>& lse_in, const std::vector<float>& out,
                          const std::vector<float>& lse_b, const std::vector<float>& dout,
                          const std::vector<float>& dq0, const std::vector<float>& dkv0, float p, uint64_t seed,
                          uint32_t stream) {
    Ctx& ctx = ctx_of(dev);
    const int C = blk.attn.NH * blk.attn.HD;
    const int64_t NO = (int64_t)blk.Sq * blk.attn.B * C, NL = (int64_t)blk.attn.B * blk.attn.NH * blk.lse_ld;
    Tensor tq = make_tensor(dev, dt, q), tkv = make_tensor(dev, dt, kv);
    const Tensor tk = tkv.slice(0, tkv.n), tv = tkv.slice(C, tkv.n - C);
    Tensor o = poisoned_tensor(dev, DType::F32, NO), l = poisoned_tensor(dev, DType::F32, NL);
    flash_block_forward(ctx, o, l, tq, tk, tv, blk, p, seed, stream);
    BlockRun r;
    r.o = tensor_to_host_f32(o);
    r.lse = tensor_to_host_f32(l);
    Tensor om = make_tensor(dev, DType::F32, o_prev), lm = make_tensor(dev, DType::F32, lse_prev),
           oi = make_tensor(dev, DType::F32, o_in), li = make_tensor(dev, DType::F32, lse_in);
    flash_block_merge(ctx, om, lm, oi, li, blk);
    r.o_m = tensor_to_host_f32(om);
    r.lse_m = tensor_to_host_f32(lm);
    Tensor to = make_tensor(dev, dt, out), tl = make_tensor(dev, DType::F32, lse_b), td = make_tensor(dev, dt, dout),
           dq = make_tensor(dev, DType::F32, dq0), dkv = make_tensor(dev, DType::F32, dkv0);
    flash_block_backward(ctx, dq, dkv.slice(0, dkv.n), dkv.slice(C, dkv.n - C), 2 * C, td, to, tl, tq, tk, tv, blk, p,
                         seed, stream);
    r.dq = tensor_to_host_f32(dq);
    r.dkv = tensor_to_host_f32(dkv);
    free_all({&tq, &tkv, &o, &l, &om, &lm, &oi, &li, &to, &tl, &td, &dq, &dkv});
    return r;
}

static void test_flash_block_gpu() {
    for (const FlashBlockGpuCase& c : gpu_cases(kFlashBlockGpuCases, kFlashBlockGpuCasesSmall))
        for (DType dt : {DType::F32, DType::BF16}) {
            if (!runs_in(c.dtypes, dt)) continue;
            const AttnShape sh = shape(0, c.B, c.NH, c.HD, c.b_offset, c.B_total, c.head_offset, c.NH_total);
            const int C = c.NH * c.HD, BN = c.B * c.NH;
            const int64_t ld = c.Sq + 5;
            const AttnBlock blk = block_of(sh, c.Sq, c.Sk, c.q_pos, c.k_pos, c.S_total, 3 * C, 2 * C, ld);
            const size_t NO = (size_t)c.Sq * c.B * C, NKV = (size_t)c.Sk * c.B * 2 * C;
            for (float p : {0.f, 0.1f}) {
                const std::vector<float> q = round_to(dt, random_vec(NO * 3, g_rng, -1.5f, 1.5f));
                const std::vector<float> kv = round_to(dt, random_vec(NKV, g_rng, -1.5f, 1.5f));
                const uint32_t stream = dropout_stream(7, kSiteAttnProbs);
                // An earlier partial result to merge into: finite lse, and −inf on some rows (no key seen yet).
                std::vector<float> lse_prev = random_vec((size_t)BN * ld, g_rng, 0.f, 4.f);
                for (size_t i = 0; i < lse_prev.size(); i += 7) lse_prev[i] = -INFINITY;
                const std::vector<float> o_prev = random_vec(NO, g_rng);
                const std::vector<float> dout = round_to(dt, random_vec(NO, g_rng));
                const std::vector<float> dq0 = random_vec(NO, g_rng), dkv0 = random_vec(NKV, g_rng);
                // The CPU first: its forward feeds both merges, its merge both backwards (the merged out and lse,
                // finite on every row, as after a whole ring).
                BlockRun cpu = block_run(Device::CPU, dt, blk, q, kv, o_prev, lse_prev, o_prev, lse_prev, o_prev,
                                         lse_prev, dout, dq0, dkv0, p, 11, stream);
                cpu = block_run(Device::CPU, dt, blk, q, kv, o_prev, lse_prev, cpu.o, cpu.lse, o_prev, lse_prev,
                                dout, dq0, dkv0, p, 11, stream);
                std::vector<float> lse_b = cpu.lse_m;
                for (float& x : lse_b)
                    if (!std::isfinite(x)) x = 1.f;  // the rows no block has reached yet (and the pads)
                const std::vector<float> out = round_to(dt, cpu.o_m);
                cpu = block_run(Device::CPU, dt, blk, q, kv, o_prev, lse_prev, cpu.o, cpu.lse, out, lse_b, dout, dq0,
                                dkv0, p, 11, stream);
                BlockRun gpu = block_run(Device::CUDA, dt, blk, q, kv, o_prev, lse_prev, cpu.o, cpu.lse, out, lse_b,
                                         dout, dq0, dkv0, p, 11, stream);
                char what[128];
                snprintf(what, sizeof what, "flash block GPU Sq=%d Sk=%d q_pos=%lld k_pos=%lld HD=%d p=%g [%s]", c.Sq,
                         c.Sk, (long long)c.q_pos, (long long)c.k_pos, c.HD, p, dtype_name(dt));
                const double tol = dt == DType::BF16 ? 2e-2 : 1e-5;
                CHECK(norm_rel_err(gpu.o, cpu.o) < tol, "%s: o %g", what, norm_rel_err(gpu.o, cpu.o));
                bool pads = true;
                const std::vector<float> gl = lse_rows(gpu.lse, BN, c.Sq, ld, &pads);
                const std::vector<float> cl = lse_rows(cpu.lse, BN, c.Sq, ld, &pads);
                CHECK(lse_close(gl, cl, 1e-4), "%s: lse (and its -inf rows)", what);
                CHECK(pads, "%s: the forward writes no lse entry between rows", what);
                // The rows that see no key: exactly 0 on the GPU too.
                bool zero = true;
                for (int bn = 0; bn < BN; bn++)
                    for (int r = 0; r < c.Sq; r++)
                        if (cl[(size_t)bn * c.Sq + r] == -INFINITY)
                            for (int d = 0; d < c.HD; d++)
                                zero &= gpu.o[((size_t)r * c.B + bn / c.NH) * C + (bn % c.NH) * c.HD + d] == 0.f;
                CHECK(zero, "%s: o = 0 on the rows that see no key", what);
                CHECK(norm_rel_err(gpu.o_m, cpu.o_m) < 1e-6, "%s: merged o %g", what, norm_rel_err(gpu.o_m, cpu.o_m));
                bool mpads = true;
                CHECK(lse_close(lse_rows(gpu.lse_m, BN, c.Sq, ld, &mpads), lse_rows(cpu.lse_m, BN, c.Sq, ld, &mpads),
                                1e-6),
                      "%s: merged lse", what);
                // The backward's terms: what each device added to the same accumulators.
                const double btol = dt == DType::BF16 ? 3e-2 : 1e-4;
                const std::vector<float> gq = minus(gpu.dq, dq0), cq = minus(cpu.dq, dq0);
                const std::vector<float> gkv = minus(gpu.dkv, dkv0), ckv = minus(cpu.dkv, dkv0);
                CHECK(norm_rel_err(gq, cq) < btol, "%s: dq added %g", what, norm_rel_err(gq, cq));
                CHECK(norm_rel_err(gkv, ckv) < btol, "%s: dk, dv added %g", what, norm_rel_err(gkv, ckv));
                BlockRun again = block_run(Device::CUDA, dt, blk, q, kv, o_prev, lse_prev, cpu.o, cpu.lse, out, lse_b,
                                           dout, dq0, dkv0, p, 11, stream);
                CHECK(bitwise_equal(again.o, gpu.o) && bitwise_equal(again.dq, gpu.dq) &&
                          bitwise_equal(again.dkv, gpu.dkv),
                      "%s: forward and backward twice give identical bits", what);
            }
        }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_flash_gpu();
    test_flash_block_gpu();
}

// ---- tensor cores (--gpu-tc): the bf16 kernels of layers/flash_attention_tc.cu over the issue's shapes --------

// out, lse and dqkv of the bf16 kernels against the CPU path (bf16 storage, fp32 math) and against the reference
// on the same rounded inputs. P and dS enter their products as bf16 (the CPU keeps them in fp32), so the GPU
// differs from the CPU by about bf16's rounding: on the emulated GPU, norm-wise 1.8e-3 to 2.3e-3 for out and
// 2.5e-3 to 3.2e-3 for dqkv, and the lse by at most 1e-6 (fp32 sums in another order); the bounds are about 3
// and 10 times those (the real mma's rounding, layers/mma.cuh, moves fp32's last bits only). Forward and
// backward twice: the same bits (dQ has one owner).
static void test_flash_tc_shapes() {
    for (const FlashGpuCase& c : gpu_cases(kFlashTcGpuCases, kFlashTcGpuCasesSmall))
        for (float p : {0.f, 0.1f}) {
            const AttnShape sh = shape(c.S, c.B, c.NH, c.HD, c.b_offset, c.B_total, c.head_offset, c.NH_total);
            const int W = 3 * sh.NH * sh.HD;
            const std::vector<float> qkv = round_bf16(random_vec((size_t)sh.S * sh.B * W, g_rng, -1.5f, 1.5f));
            const std::vector<float> G = round_bf16(random_vec((size_t)sh.S * sh.B * sh.NH * sh.HD, g_rng));
            const uint32_t stream = dropout_stream(6, kSiteAttnProbs);
            FlashRun cpu = flash_run(Device::CPU, DType::BF16, qkv, G, sh, p, 17, stream);
            FlashRun gpu = flash_run(Device::CUDA, DType::BF16, qkv, G, sh, p, 17, stream);
            const AttnRef ref = flash_ref(qkv, G, sh, p, 17, stream);
            char what[112];
            snprintf(what, sizeof what, "flash tensor cores S=%d B=%d NH=%d HD=%d heads %lld+ of %lld p=%g", sh.S, sh.B,
                     sh.NH, sh.HD, (long long)sh.head_offset, (long long)sh.NH_total, p);
            CHECK(norm_rel_err(gpu.out, cpu.out) < 6e-3, "%s: out vs cpu %g", what, norm_rel_err(gpu.out, cpu.out));
            CHECK(max_abs_diff(gpu.lse, cpu.lse) < 1e-5 * (1 + rms(cpu.lse)), "%s: lse vs cpu %g", what,
                  max_abs_diff(gpu.lse, cpu.lse));
            CHECK(norm_rel_err(gpu.dqkv, cpu.dqkv) < 8e-3, "%s: dqkv vs cpu %g", what,
                  norm_rel_err(gpu.dqkv, cpu.dqkv));
            check_norm_vs_reference(std::string(what) + " out", DType::BF16, gpu.out, cpu.out, to_float(ref.out), 6e-3);
            check_norm_vs_reference(std::string(what) + " dqkv", DType::BF16, gpu.dqkv, cpu.dqkv, to_float(ref.dqkv),
                                    8e-3);
            const std::vector<float> ref_lse = to_float(ref.lse);
            CHECK(max_abs_diff(gpu.lse, ref_lse) < 2.1e-5 * (1 + rms(ref_lse)), "%s: lse vs the reference %g", what,
                  max_abs_diff(gpu.lse, ref_lse));
            FlashRun again = flash_run(Device::CUDA, DType::BF16, qkv, G, sh, p, 17, stream);
            CHECK(bitwise_equal(again.out, gpu.out) && bitwise_equal(again.lse, gpu.lse) &&
                      bitwise_equal(again.dqkv, gpu.dqkv),
                  "%s: forward and backward twice give identical bits", what);
        }
}

// The keep bits of the bf16 kernels, through one-hot V and dO (test_keep_bits), against the unfused mask. S 64:
// tiles by cp.async; S 100: by plain loads (HD = 100 is not a multiple of 8), with a partial key tile. S 63 and
// 67 (HD bounds 64 and 128: the dK-dV kernel's query steps of 64 and 32): a row of S_total = S indices starts
// anywhere in a Philox block of 4, so the kernels' shared blocks take their 17th (forward, dQ) and fifth (dK-dV)
// draws; 64 and 100 start every row on a block.
static void test_flash_tc_keep_bits() {
    for (int S : {64, 100, 63, 67}) test_keep_bits(shape(S, 2, 2, S, 1, 3, 1, 4), 0.1f, Device::CUDA, DType::BF16);
}

static void gpu_tc_checks() {
    g_rng.seed(9876);
    test_flash_tc_shapes();
    test_flash_tc_keep_bits();
}

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--gpu-tc") {  // label gpu, as --gpu (layers.cmake)
        require_gpu_or_skip("test_flash_attention --gpu-tc");
        g_cpu = ctx_create(Device::CPU);
        g_gpu = ctx_create(Device::CUDA, 0);
        gpu_tc_checks();
        ctx_destroy(g_gpu);
        ctx_destroy(g_cpu);
        return test_finish("test_flash_attention --gpu-tc");
    }
    return run_op_test(argc, argv, "test_flash_attention", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
