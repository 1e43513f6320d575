// flash_attention.cu — core attention in tiles, without the s×s tensors (see flash_attention.h).
//
// Forward, for one query tile Q_i of one (sequence, head), over the key tiles K_j, V_j on and below the
// diagonal (tiles wholly above it are skipped: the causal mask zeroes them), with per query q a running
// maximum m_q, a running sum l_q and an unnormalised output o_q (Dao 2023, FlashAttention-2, Algorithm 1):
//   x    = Q_i K_jᵀ / √HD                      (the keys k > q of the diagonal tile masked out)
//   m'   = max(m, max_k x_k);   α = e^{m − m'}  (rescales what the earlier tiles summed)
//   e_k  = e^{x_k − m'};        l ← α·l + Σ_k e_k
//   o    ← α·o + Σ_k z_k·e_k·V_k                (z_k: the unfused path's keep bit of (q, k), 0 or 1)
// and at the end out_q = o_q / l_q / (1 − p), lse_q = m_q + log l_q. The softmax sum l counts every key
// (dropout acts on the normalised probabilities, as in the unfused path), the output only the kept ones.
//
// Backward, for one key tile K_j, V_j over the query tiles Q_i on and below the diagonal, with
// D_q = Σ_c dO[q, c]·O[q, c] computed once per query (FlashAttention-2, Algorithm 2):
//   P    = e^{Q_i K_jᵀ/√HD − lse}               (exactly the forward's probabilities, up to rounding)
//   dV_j += (P ⊙ Z/(1−p))ᵀ dO_i
//   dP   = (dO_i V_jᵀ) ⊙ Z/(1−p)
//   dS   = P ⊙ (dP − D) / √HD
//   dQ_i += dS K_j,   dK_j += dSᵀ Q_i
// The keep bits Z are drawn again from Philox at their global indices (flash_attention.h): nothing random is
// stored between the passes.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include "fast_exp.h"
#include "matmul.h"
#include "op_timer.h"
#include "philox.h"
#include "vec8.h"

// Everything a kernel needs, passed by value.
struct FlashArgs {
    int S, B, NH, HD;
    float scale;         // 1/√HD
    uint32_t threshold;  // dropout_threshold(p)
    float inv_keep;      // 1/(1 − p)
    uint64_t seed;
    uint32_t stream;
    int64_t b_offset, head_offset, NH_total;
};

static FlashArgs flash_args(const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    FlashArgs a;
    a.S = sh.S;
    a.B = sh.B;
    a.NH = sh.NH;
    a.HD = sh.HD;
    a.scale = 1.f / sqrtf((float)sh.HD);
    a.threshold = dropout_threshold(p);
    a.inv_keep = 1.f / (1.f - p);
    a.seed = seed;
    a.stream = stream;
    a.b_offset = sh.b_offset;
    a.head_offset = sh.head_offset;
    a.NH_total = sh.NH_total;
    return a;
}

// The global dropout index of (b, n, q, k) of this rank's block (attention.h).
__host__ __device__ inline uint64_t flash_keep_index(const FlashArgs& a, int b, int n, int q, int k) {
    return attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, a.S, q, k);
}

// ---------------------------------------------------------------------------------------------------------
// Fast CPU path. Tiles of kTileCpu queries by kTileCpu keys, so that the diagonal tile of query tile i is key
// tile i. The tile products are fp32 GEMMs on the calling thread (gemm_f32_here: OpenBLAS single-threaded);
// the row work (max, exponentials, sums, keep bits) is SIMD loops with fixed-order partial sums
// (cpu_row_partials, vec8.h). Every output element is computed by one task in a fixed order, so the bits do
// not depend on the thread count.
//  - forward: one task per (sequence, head, query tile); the tiles with most keys first (dynamic schedule).
//  - backward: one task per (sequence, head). A key tile's dK, dV and a query tile's dQ gather terms from
//    many tiles of the other kind; inside one (sequence, head) they are summed in a fixed order in the task's
//    own buffers, with no atomics and no second pass. B·NH tasks keep 2 to 16 cores busy at the shapes here.
// ---------------------------------------------------------------------------------------------------------
constexpr int kTileCpu = 64;

// Rows r0 .. r0 + rows − 1 of a (sequence, head) matrix stored with row stride ld, as compact fp32 [rows, HD].
template <class T>
static void load_rows(float* dst, const T* m, int64_t ld, int r0, int rows, int HD) {
    for (int r = 0; r < rows; r++) {
        const T* src = m + (int64_t)(r0 + r) * ld;
        float* d = dst + (int64_t)r * HD;
#pragma omp simd
        for (int c = 0; c < HD; c++) d[c] = to_f32(src[c]);
    }
}
template <class T>
static void store_rows(T* m, int64_t ld, int r0, int rows, int HD, const float* src) {
    for (int r = 0; r < rows; r++) {
        T* d = m + (int64_t)(r0 + r) * ld;
        const float* s = src + (int64_t)r * HD;
#pragma omp simd
        for (int c = 0; c < HD; c++) d[c] = from_f32<T>(s[c]);
    }
}

// Keys of key tile k0 .. k0 + cols − 1 that query q sees: up to q itself (at least one: tiles above the
// diagonal are never visited).
static inline int visible_keys(int q, int k0, int cols) { return std::min(cols, q - k0 + 1); }

// One row of a score tile: x[0 .. len) holds the scaled scores. Folds them into the running (m, l) and leaves
// in x the exponentials e_k = e^{x_k − m'} of the kept keys (0 for dropped ones and for k >= len, up to
// cols), so that x · V_j adds this tile to the output. Returns α, the factor the row's output is rescaled by.
static inline float online_softmax_row(float* x, int len, int cols, float& m, float& l, const uint8_t* keep) {
    float acc[kCpuPack];
    for (int j = 0; j < kCpuPack; j++) acc[j] = -INFINITY;
    cpu_row_partials(len, [&](int j, int64_t k) { acc[j] = select_f(x[k] > acc[j], x[k], acc[j]); });
    float mt = m;
    for (int j = 0; j < kCpuPack; j++) mt = acc[j] > mt ? acc[j] : mt;
    const float alpha = m == -INFINITY ? 0.f : fast_exp(m - mt);
    for (int j = 0; j < kCpuPack; j++) acc[j] = 0.f;
    cpu_row_partials(len, [&](int j, int64_t k) {
        x[k] = fast_exp(x[k] - mt);
        acc[j] += x[k];
    });
    l = l * alpha + cpu_partials_total(acc);
    m = mt;
    if (keep) {
#pragma omp simd
        for (int k = 0; k < len; k++) x[k] = select_f(keep[k] != 0, x[k], 0.f);
    }
    for (int k = len; k < cols; k++) x[k] = 0.f;
    return alpha;
}

template <class T>
MM_CPU_LOOP static void flash_forward_cpu(T* out, float* lse, const T* qkv, const FlashArgs& a) {
    const int S = a.S, HD = a.HD, NH = a.NH, Bt = kTileCpu;
    const int tiles = (S + Bt - 1) / Bt;
    const int64_t R = (int64_t)a.B * 3 * NH * HD, RO = (int64_t)a.B * NH * HD;
    const int64_t tasks = (int64_t)a.B * NH * tiles;
#pragma omp parallel if (cpu_gemm_single_threaded())
    {
        std::vector<float> q(Bt * HD), k(Bt * HD), v(Bt * HD), x(Bt * Bt), o(Bt * HD), m(Bt), l(Bt);
        std::vector<uint8_t> keep(Bt);
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int i = tiles - 1 - (int)(task % tiles);  // the longest rows first
            const int64_t bn = task / tiles;
            const int n = (int)(bn % NH), b = (int)(bn / NH);
            const T* Q = qkv + (int64_t)b * 3 * NH * HD + (int64_t)n * HD;
            const T* K = Q + (int64_t)NH * HD;
            const T* V = Q + 2 * (int64_t)NH * HD;
            const int q0 = i * Bt, rows = std::min(Bt, S - q0);
            load_rows(q.data(), Q, R, q0, rows, HD);
            std::fill(m.begin(), m.end(), -INFINITY);
            std::fill(l.begin(), l.end(), 0.f);
            std::fill(o.begin(), o.end(), 0.f);
            for (int j = 0; j <= i; j++) {
                const int k0 = j * Bt, cols = std::min(Bt, S - k0);
                load_rows(k.data(), K, R, k0, cols, HD);
                load_rows(v.data(), V, R, k0, cols, HD);
                gemm_f32_here(false, true, rows, cols, HD, a.scale, q.data(), HD, k.data(), HD, 0.f, x.data(), Bt);
                for (int r = 0; r < rows; r++) {
                    const int len = visible_keys(q0 + r, k0, cols);
                    if (a.threshold)
                        dropout_keep_run(keep.data(), a.seed, a.stream, flash_keep_index(a, b, n, q0 + r, k0), len,
                                         a.threshold);
                    const float alpha = online_softmax_row(&x[(size_t)r * Bt], len, cols, m[r], l[r],
                                                           a.threshold ? keep.data() : nullptr);
                    float* orow = &o[(size_t)r * HD];
#pragma omp simd
                    for (int c = 0; c < HD; c++) orow[c] *= alpha;
                }
                gemm_f32_here(false, false, rows, HD, cols, 1.f, x.data(), Bt, v.data(), HD, 1.f, o.data(), HD);
            }
            for (int r = 0; r < rows; r++) {
                const float f = a.inv_keep / l[r];
                float* orow = &o[(size_t)r * HD];
#pragma omp simd
                for (int c = 0; c < HD; c++) orow[c] *= f;
                lse[bn * S + q0 + r] = m[r] + logf(l[r]);
            }
            store_rows(out + (int64_t)b * NH * HD + (int64_t)n * HD, RO, q0, rows, HD, o.data());
        }
    }
}

template <class T>
MM_CPU_LOOP static void flash_backward_cpu(T* dqkv, const T* dout, const T* out, const float* lse, const T* qkv,
                                           const FlashArgs& a) {
    const int S = a.S, HD = a.HD, NH = a.NH, Bt = kTileCpu;
    const int tiles = (S + Bt - 1) / Bt;
    const int64_t R = (int64_t)a.B * 3 * NH * HD, RO = (int64_t)a.B * NH * HD;
    const int64_t tasks = (int64_t)a.B * NH;
#pragma omp parallel if (cpu_gemm_single_threaded())
    {
        // The (sequence, head)'s Q, K, V, dO and dQ, whole, as compact fp32 [S, HD]; tiles of one key tile.
        std::vector<float> Q((size_t)S * HD), K((size_t)S * HD), V((size_t)S * HD), dO((size_t)S * HD),
            dQ((size_t)S * HD), D(S);
        std::vector<float> P(Bt * Bt), Pd(Bt * Bt), dS(Bt * Bt), dK(Bt * HD), dV(Bt * HD);
        std::vector<uint8_t> keep(Bt * Bt);
#pragma omp for schedule(dynamic, 1)
        for (int64_t bn = 0; bn < tasks; bn++) {
            const int n = (int)(bn % NH), b = (int)(bn / NH);
            const int64_t qkv_at = (int64_t)b * 3 * NH * HD + (int64_t)n * HD, out_at = (int64_t)b * NH * HD + n * HD;
            load_rows(Q.data(), qkv + qkv_at, R, 0, S, HD);
            load_rows(K.data(), qkv + qkv_at + NH * HD, R, 0, S, HD);
            load_rows(V.data(), qkv + qkv_at + 2 * NH * HD, R, 0, S, HD);
            load_rows(dO.data(), dout + out_at, RO, 0, S, HD);
            for (int qi = 0; qi < S; qi++) {  // D_q = dO_q · O_q
                const T* orow = out + out_at + (int64_t)qi * RO;
                const float* g = &dO[(size_t)qi * HD];
                float acc[kCpuPack] = {0};
                cpu_row_partials(HD, [&](int j, int64_t c) { acc[j] += g[c] * to_f32(orow[c]); });
                D[qi] = cpu_partials_total(acc);
            }
            std::fill(dQ.begin(), dQ.end(), 0.f);
            const float* L = lse + bn * S;
            for (int j = 0; j < tiles; j++) {
                const int k0 = j * Bt, cols = std::min(Bt, S - k0);
                std::fill(dK.begin(), dK.end(), 0.f);
                std::fill(dV.begin(), dV.end(), 0.f);
                const float* Kj = &K[(size_t)k0 * HD];
                const float* Vj = &V[(size_t)k0 * HD];
                for (int i = j; i < tiles; i++) {
                    const int q0 = i * Bt, rows = std::min(Bt, S - q0);
                    const float* Qi = &Q[(size_t)q0 * HD];
                    const float* dOi = &dO[(size_t)q0 * HD];
                    // P (the forward's probabilities) and P ⊙ Z/(1 − p), row by row.
                    gemm_f32_here(false, true, rows, cols, HD, a.scale, Qi, HD, Kj, HD, 0.f, P.data(), Bt);
                    for (int r = 0; r < rows; r++) {
                        const int qg = q0 + r, len = visible_keys(qg, k0, cols);
                        float* pr = &P[(size_t)r * Bt];
                        float* pdr = &Pd[(size_t)r * Bt];
                        uint8_t* z = &keep[(size_t)r * Bt];
                        if (a.threshold)
                            dropout_keep_run(z, a.seed, a.stream, flash_keep_index(a, b, n, qg, k0), len, a.threshold);
                        else
                            std::fill(z, z + len, (uint8_t)1);
                        const float lq = L[qg];
#pragma omp simd
                        for (int k = 0; k < cols; k++) {
                            const float pk = select_f(k < len, fast_exp(pr[k] - lq), 0.f);
                            pr[k] = pk;
                            pdr[k] = select_f(k < len && z[k] != 0, pk * a.inv_keep, 0.f);
                        }
                    }
                    gemm_f32_here(true, false, cols, HD, rows, 1.f, Pd.data(), Bt, dOi, HD, 1.f, dV.data(), HD);
                    // dP_d = dO_i V_jᵀ, then dS in place.
                    gemm_f32_here(false, true, rows, cols, HD, 1.f, dOi, HD, Vj, HD, 0.f, dS.data(), Bt);
                    for (int r = 0; r < rows; r++) {
                        const int qg = q0 + r, len = visible_keys(qg, k0, cols);
                        const float* pr = &P[(size_t)r * Bt];
                        const uint8_t* z = &keep[(size_t)r * Bt];
                        float* dsr = &dS[(size_t)r * Bt];
                        const float Dq = D[qg];
#pragma omp simd
                        for (int k = 0; k < cols; k++) {
                            const float dp = select_f(k < len && z[k] != 0, dsr[k] * a.inv_keep, 0.f);
                            dsr[k] = pr[k] * (dp - Dq) * a.scale;  // P is 0 for k >= len
                        }
                    }
                    gemm_f32_here(false, false, rows, HD, cols, 1.f, dS.data(), Bt, Kj, HD, 1.f, &dQ[(size_t)q0 * HD],
                                  HD);
                    gemm_f32_here(true, false, cols, HD, rows, 1.f, dS.data(), Bt, Qi, HD, 1.f, dK.data(), HD);
                }
                store_rows(dqkv + qkv_at + NH * HD, R, k0, cols, HD, dK.data());
                store_rows(dqkv + qkv_at + 2 * NH * HD, R, k0, cols, HD, dV.data());
            }
            store_rows(dqkv + qkv_at, R, 0, S, HD, dQ.data());
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------------------------------------

constexpr int kTileGpu = 64;
int flash_attention_tile(const Ctx& ctx) { return ctx.device == Device::CPU ? kTileCpu : kTileGpu; }

static void check_flash(const char* op, const Ctx& ctx, const AttnShape& sh, const Tensor& qkv, const Tensor& o,
                        const Tensor& lse) {
    if (sh.S <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape S=%d B=%d NH=%d HD=%d", op, sh.S, sh.B, sh.NH, sh.HD);
    if (sh.b_offset < 0 || sh.b_offset + sh.B > sh.B_total || sh.head_offset < 0 ||
        sh.head_offset + sh.NH > sh.NH_total)
        mm_fatal("%s: local block (b %lld+%d of %lld, heads %lld+%d of %lld) outside the global tensor", op,
                 (long long)sh.b_offset, sh.B, (long long)sh.B_total, (long long)sh.head_offset, sh.NH,
                 (long long)sh.NH_total);
    const int64_t rows = (int64_t)sh.S * sh.B;
    check_tensor(ctx, qkv, qkv.dtype, rows * 3 * sh.NH * sh.HD, op, "qkv");
    check_tensor(ctx, o, qkv.dtype, rows * sh.NH * sh.HD, op, "out");
    check_tensor(ctx, lse, DType::F32, (int64_t)sh.B * sh.NH * sh.S, op, "lse");
}

void flash_attention_forward(Ctx& ctx, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, float p,
                             uint64_t seed, uint32_t stream) {
    const char* op = "flash_attention_forward";
    check_flash(op, ctx, sh, qkv, out, lse);
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
    OpScope scope(ctx, op, 2 * 2.0 * sh.B * sh.NH * (double)sh.S * sh.S * sh.HD);  // QKᵀ and P·V
    const FlashArgs a = flash_args(sh, p, seed, stream);
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA)
            mm_fatal("%s: the CUDA kernel is not built yet", op);
        else
            flash_forward_cpu<T>(out.as<T>(), lse.as<float>(), qkv.as<T>(), a);
    });
}

void flash_attention_backward(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                              const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    const char* op = "flash_attention_backward";
    check_flash(op, ctx, sh, qkv, out, lse);
    check_tensor(ctx, dqkv, qkv.dtype, qkv.n, op, "dqkv");
    check_tensor(ctx, dout, qkv.dtype, out.n, op, "dout");
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
    // QKᵀ again, then dV, dP, dQ, dK: five products of the full square's size.
    OpScope scope(ctx, op, 5 * 2.0 * sh.B * sh.NH * (double)sh.S * sh.S * sh.HD);
    const FlashArgs a = flash_args(sh, p, seed, stream);
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA)
            mm_fatal("%s: the CUDA kernel is not built yet", op);
        else
            flash_backward_cpu<T>(dqkv.as<T>(), dout.as<T>(), out.as<T>(), lse.as<float>(), qkv.as<T>(), a);
    });
}
