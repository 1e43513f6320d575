// test_flash_attention.cu — tiled attention (layers/flash_attention.cu): the fast CPU path (--cpu, label
// unit) and the CUDA kernels against it (--gpu, label gpu).
//
// CPU checks:
//  - out, lse and dqkv against attention written out in double (test/layers/attention_ref.h), p = 0 and 0.1,
//    S = 7, 37, 64, 133, 200 (one tile, a partial tile, exactly one tile, several with a partial last one);
//    a rank's heads and batches of a bigger global tensor (the TP / DP coordinates of dropout);
//  - against the unfused path (layers/attention.cu) on the same inputs: the two paths agree to fp32 rounding;
//  - the keep bits, read through the kernels themselves: with V[k] the unit vector e_k (HD >= S) the forward's
//    out[q][k] is P_d(q, k), nonzero exactly where the probability is kept; with dO[q] = e_q the backward's
//    dV[k][q] is P_d(q, k) again. Both must equal the unfused path's attn_mask, bit for bit;
//  - directional finite differences of L = Σ G ⊙ out, also for Q, K and V separately;
//  - the same bits with 1, 2 and 3 threads; bf16 storage against the fp32 run.
// GPU checks (the shapes of test/layers/gpu_shapes.h, f32 and bf16, p = 0 and 0.1): out, lse, dqkv against
// the CPU path, outputs poisoned first; the keep bits through the one-hot V on the GPU equal the CPU's; the
// forward and the backward twice give identical bits.
#include <omp.h>
#include <algorithm>
#include <functional>
#include "layers/flash_attention.h"
#include "layers/philox.h"
#include "test/layers/attention_ref.h"
#include "test/layers/gpu_shapes.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

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
        AttnRef ref = attention_ref(qkv, G, sh, p, seed, stream);
        char what[96];
        snprintf(what, sizeof what, "S=%d B=%d NH=%d HD=%d heads %lld+ of %lld, p=%g", sh.S, sh.B, sh.NH, sh.HD,
                 (long long)sh.head_offset, (long long)sh.NH_total, p);
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
// finite scores), so out[q][k] != 0 exactly where z(q, k) = 1.
static void test_keep_bits(const AttnShape& sh, float p) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD;
    CHECK(HD == S, "test_keep_bits needs HD == S");
    const uint64_t seed = 7;
    const uint32_t stream = dropout_stream(1, kSiteAttnProbs);
    std::vector<float> qkv = random_vec((size_t)S * B * W, g_rng, -0.5f, 0.5f);
    std::vector<float> G((size_t)S * B * NH * HD, 0.f);
    for (int s = 0; s < S; s++)
        for (int b = 0; b < B; b++)
            for (int n = 0; n < NH; n++) {
                float* v = &qkv[(size_t)(s * B + b) * W + 2 * NH * HD + n * HD];
                for (int d = 0; d < HD; d++) v[d] = d == s ? 1.f : 0.f;
                G[(size_t)(s * B + b) * NH * HD + n * HD + s] = 1.f;
            }
    UnfusedRun un = unfused_run(qkv, G, sh, p, seed, stream);
    FlashRun fl = flash_run(Device::CPU, DType::F32, qkv, G, sh, p, seed, stream);
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
    CHECK(fwd_diff == 0, "flash forward keep bits == the unfused attn_mask (S=%d, p=%g): %lld differ", S, p,
          (long long)fwd_diff);
    CHECK(bwd_diff == 0, "flash backward keep bits == the unfused attn_mask (S=%d, p=%g): %lld differ", S, p,
          (long long)bwd_diff);
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

static void cpu_checks() {
    g_rng.seed(1234);
    for (int S : {7, 37, 64, 133, 200}) test_against_references(shape(S, 2, 3, 8));
    test_against_references(shape(90, 2, 2, 16, 1, 4, 3, 8));  // a rank's heads 3..4 of 8, batches 1..2 of 4
    for (float p : {0.f, 0.1f, 0.5f}) test_keep_bits(shape(130, 2, 2, 130, 1, 3, 1, 4), p);
    test_finite_differences();
    test_threads_and_bf16();
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path
// =========================================================================================================

static void test_flash_gpu() {
    for (const FlashGpuCase& c : kFlashGpuCases)
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

static void gpu_checks() {
    g_rng.seed(4321);
    test_flash_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_flash_attention", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
