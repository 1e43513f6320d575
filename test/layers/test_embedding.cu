// test_embedding.cu — token and position embeddings (layers/embedding.cu): the fast CPU path (--cpu, label
// unit) and the CUDA kernels (--gpu, label gpu) against their plain math, layers/reference/embedding.h.
//
// CPU checks: a vocabulary split into two ranges (vocab-parallel, as under TP): each rank looks up its own
// rows and writes exactly 0 for the others (the reference's values), the two lookups sum to the full lookup;
// the backward scatters the rows that used each token (repeated tokens included) onto a prefilled gradient,
// through an index that is rebuilt per batch reusing its buffers, against the reference; U = 0 for a batch
// with no owned token; the position embedding on a sequence shard (SP) forward, backward (against the
// reference) and by finite differences; bf16 tables and outputs.
// GPU checks, f32 and bf16, a 300-token vocabulary padded to 304 in two ranges: the forward gives the CPU's
// bits and the reference's values (a copy), the backward agrees with the CPU and the reference and is
// bitwise reproducible; the same for the position embedding on a sequence shard.
#include <algorithm>
#include <functional>
#include "layers/embedding.h"
#include "layers/reference/embedding.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/embedding.h
// =========================================================================================================

// Equal values element by element (0 and -0 alike).
static bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (!(a[i] == b[i])) return false;
    return true;
}

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
        token_embedding_forward(ctx, cpu_view(out), cpu_view(tokens), cpu_view(wl), v_begin, half, N, C);
        std::vector<float> want(N * C);  // the reference (layers/reference/embedding.h)
        ref_token_embedding_forward(want.data(), tokens.data(), wl.data(), v_begin, half, N, C);
        bool ok = same_values(out, want);
        for (int r = 0; r < N * C; r++) sum[r] += out[r];
        CHECK(ok, "token embedding rank %d: own rows looked up, foreign rows exactly 0", rank);
        // Backward: dwte_local[t] += Σ of the rows that used t (prefilled gradient).
        std::vector<float> dw0 = random_vec((size_t)half * C, g_rng), dw = dw0;
        embedding_index_build(idx, tokens.data(), N, v_begin, half, g_cpu);
        token_embedding_backward(ctx, cpu_view(dw), cpu_view(G), idx, C);
        std::vector<double> ref(dw0.begin(), dw0.end());
        ref_token_embedding_backward(ref.data(), G.data(), tokens.data(), v_begin, half, N, C);
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
        embedding_index_build(idx, t2.data(), N, 0, Vp, g_cpu);
        CHECK(idx.rows.data == before || idx.rows.n >= N, "index capacity reused or grown");
        std::vector<float> dw(Vp * C, 0.f);
        token_embedding_backward(ctx, cpu_view(dw), cpu_view(G), idx, C);
        std::vector<double> ref(Vp * C, 0.0);
        ref_token_embedding_backward(ref.data(), G.data(), t2.data(), 0, Vp, N, C);
        CHECK(max_rel_err(dw, to_float(ref)) < 1e-6, "token embedding backward after rebuild");
        std::vector<int32_t> foreign(N, V + 100);
        embedding_index_build(idx, foreign.data(), N, 0, Vp, g_cpu);
        CHECK(idx.U == 0, "no owned tokens: U=%d", idx.U);
    }
    embedding_index_free(idx);
    // Position embedding on a sequence shard [s_offset, s_offset + S_loc) (SP): out += wpe rows of the shard.
    const int S_loc = 3, s_offset = 2;
    std::vector<float> wpe = random_vec((size_t)S * C, g_rng);
    std::vector<float> base = random_vec((size_t)S_loc * B * C, g_rng), out = base;
    position_embedding_forward(ctx, cpu_view(out), cpu_view(wpe), s_offset, S_loc, B, C);
    std::vector<float> ref = base;
    ref_position_embedding_forward(ref.data(), wpe.data(), s_offset, S_loc, B, C);
    CHECK(max_rel_err(out, ref) < 1e-7, "position embedding forward with s_offset");
    std::vector<float> Gp = random_vec(out.size(), g_rng);
    std::vector<float> dwpe0 = random_vec(wpe.size(), g_rng), dwpe = dwpe0;
    position_embedding_backward(ctx, cpu_view(dwpe), cpu_view(Gp), s_offset, S_loc, B, C);
    std::vector<double> dref(dwpe0.begin(), dwpe0.end());
    ref_position_embedding_backward(dref.data(), Gp.data(), s_offset, S_loc, B, C);
    CHECK(max_rel_err(dwpe, to_float(dref)) < 1e-6, "position embedding backward: shard rows only");
    // Finite differences for the position embedding: L = Σ Gp ⊙ (base + wpe rows).
    std::vector<float> dgrad(wpe.size(), 0.f);
    position_embedding_backward(ctx, cpu_view(dgrad), cpu_view(Gp), s_offset, S_loc, B, C);
    auto loss = [&]() {
        std::vector<float> o = base;
        position_embedding_forward(ctx, cpu_view(o), cpu_view(wpe), s_offset, S_loc, B, C);
        return dot(Gp, o);
    };
    std::vector<float> d = random_vec(wpe.size(), g_rng);
    check_fd("position embedding FD", fd_directional(wpe, d, 1e-2f, loss), dot(dgrad, d), 1e-4);
}

// bf16 tables and outputs vs fp32: the f32 gradients are exact sums of the same values.
static void test_embedding_bf16(Ctx& ctx) {
    const int S = 4, B = 2, C = 8, V = 10, N = S * B;
    std::vector<float> wte = round_bf16(random_vec((size_t)V * C, g_rng)), wpe = round_bf16(random_vec(S * C, g_rng));
    std::vector<int32_t> tokens(N);
    for (auto& t : tokens) t = std::uniform_int_distribution<int>(0, V - 1)(g_rng);
    std::vector<float> G = round_bf16(random_vec((size_t)N * C, g_rng));
    EmbeddingIndex idx;
    embedding_index_build(idx, tokens.data(), N, 0, V, g_cpu);
    std::vector<float> res[2][3];
    for (int k = 0; k < 2; k++) {
        DType dt = k ? DType::BF16 : DType::F32;
        Tensor tw = make_tensor(Device::CPU, dt, wte), tp = make_tensor(Device::CPU, dt, wpe),
               tg = make_tensor(Device::CPU, dt, G), out = tensor_alloc(Device::CPU, dt, N * C),
               dw = tensor_zeros(Device::CPU, DType::F32, V * C), dp = tensor_zeros(Device::CPU, DType::F32, S * C);
        token_embedding_forward(ctx, out, cpu_view(tokens), tw, 0, V, N, C);
        position_embedding_forward(ctx, out, tp, 0, S, B, C);
        token_embedding_backward(ctx, dw, tg, idx, C);
        position_embedding_backward(ctx, dp, tg, 0, S, B, C);
        res[k][0] = tensor_to_host_f32(out);
        res[k][1] = tensor_to_host_f32(dw);
        res[k][2] = tensor_to_host_f32(dp);
        free_all({&tw, &tp, &tg, &out, &dw, &dp});
    }
    CHECK(max_rel_err(res[1][0], res[0][0]) < 8e-3, "bf16 embedding output within one rounding");
    CHECK(max_rel_err(res[1][1], res[0][1]) < 1e-6, "bf16 dout, f32 dwte: exact sums of the same values");
    CHECK(max_rel_err(res[1][2], res[0][2]) < 1e-6, "bf16 dout, f32 dwpe");
    embedding_index_free(idx);
}

static void cpu_checks() {
    g_rng.seed(1235);
    test_embedding(g_cpu);
    test_embedding_bf16(g_cpu);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

static void test_embedding_gpu() {
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
                Tensor tt = make_tensor(dev, DType::I32, tok_f), tw = make_tensor(dev, dt, wte),
                       out = poisoned_tensor(dev, dt, (int64_t)N * C), tg = make_tensor(dev, dt, G);
                token_embedding_forward(ctx, out, tt, tw, v_begin, VL, N, C);
                res[dev == Device::CUDA][0] = to_host(out);
                EmbeddingIndex idx;
                for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
                    // Built again each time, as each training step does (the second build reuses the buffers).
                    embedding_index_build(idx, tokens.data(), N, v_begin, VL, ctx);
                    Tensor dw = make_tensor(dev, DType::F32, dw0);
                    token_embedding_backward(ctx, dw, tg, idx, C);
                    (rep ? again : res[dev == Device::CUDA][1]) = to_host(dw);
                    tensor_free(dw);
                }
                embedding_index_free(idx);
                free_all({&tt, &tw, &out, &tg});
            }
            char what[64];
            snprintf(what, sizeof what, "token embedding rank %d", rank);
            CHECK(bitwise_equal(res[1][0], res[0][0]), "%s forward: same bits as the CPU (a copy) [%s]", what,
                  dtype_name(dt));
            check_close_norm((std::string(what) + " backward").c_str(), DType::F32, res[1][1], res[0][1], 1e-5);
            // The reference (layers/reference/embedding.h): the forward is a copy, so the same values exactly.
            std::vector<float> r_out((size_t)N * C), r_dw = dw0;
            ref_token_embedding_forward(r_out.data(), tokens.data(), wte.data(), v_begin, VL, N, C);
            ref_token_embedding_backward(r_dw.data(), G.data(), tokens.data(), v_begin, VL, N, C);
            CHECK(same_values(res[0][0], r_out) && same_values(res[1][0], r_out),
                  "%s forward: the reference's values on the CPU and the GPU [%s]", what, dtype_name(dt));
            check_norm_vs_reference(std::string(what) + " backward", DType::F32, res[1][1], res[0][1], r_dw, 1e-5);
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
            Tensor tw = make_tensor(dev, dt, wpe), out = make_tensor(dev, dt, base), tg = make_tensor(dev, dt, G);
            position_embedding_forward(ctx, out, tw, s_offset, S_loc, B, C);
            res[dev == Device::CUDA][0] = to_host(out);
            for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
                Tensor dp = make_tensor(dev, DType::F32, dp0);
                position_embedding_backward(ctx, dp, tg, s_offset, S_loc, B, C);
                (rep ? again : res[dev == Device::CUDA][1]) = to_host(dp);
                tensor_free(dp);
            }
            free_all({&tw, &out, &tg});
        }
        CHECK(bitwise_equal(res[1][0], res[0][0]), "position embedding forward: same bits as the CPU [%s]",
              dtype_name(dt));
        check_close_norm("position embedding backward", DType::F32, res[1][1], res[0][1], 1e-5);
        std::vector<float> r_out = base, r_dp = dp0;
        ref_position_embedding_forward(r_out.data(), wpe.data(), s_offset, S_loc, B, C);
        ref_position_embedding_backward(r_dp.data(), G.data(), s_offset, S_loc, B, C);
        check_norm_vs_reference("position embedding forward", dt, res[1][0], res[0][0], r_out,
                                dt == DType::BF16 ? 1e-2 : 1e-6);
        check_norm_vs_reference("position embedding backward", DType::F32, res[1][1], res[0][1], r_dp, 1e-5);
        CHECK(bitwise_equal(res[1][1], again), "position embedding backward twice: identical bits [%s]", dtype_name(dt));
    }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_embedding_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_embedding", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
