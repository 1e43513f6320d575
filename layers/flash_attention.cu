// flash_attention.cu — core attention in tiles, without the s×s tensors (see flash_attention.h).
// The plain math this file computes fast: layers/reference/flash_attention.h
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
#include "flash_attention_tc.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>
#include "fast_exp.h"
#include "matmul.h"
#include "op_timer.h"
#include "philox.h"
#include "vec8.h"

#include "warp_reduce.cuh"

// Everything a kernel needs, passed by value. One call is the queries of S consecutive positions against the
// keys of Sk consecutive positions: one rank's whole sequence (S = Sk = S_total, q_pos = k_pos = 0), or one
// block of ring attention (context parallelism: flash_block_forward below).
struct FlashArgs {
    int S, B, NH, HD;    // S: queries per (sequence, head)
    int Sk;              // keys per (sequence, head)
    float scale;         // 1/√HD
    uint32_t threshold;  // dropout_threshold(p)
    float inv_keep;      // 1/(1 − p)
    uint64_t seed;
    uint32_t stream;
    int64_t b_offset, head_offset, NH_total;
    int64_t q_pos, k_pos;    // global positions of the first query and the first key: the causal mask's
    int64_t S_total;         // and the dropout index's (the whole sequence's length)
    int q_width, kv_width;   // row widths of the Q and of the K, V matrices ([S·B, width])
    int dq_width, dkv_width; // and of their gradients' (the backward's outputs)
    int64_t lse_ld;          // elements between the lse rows of two (sequence, head) pairs
    int64_t d_ld;            // and between the rows of the backward's D = rowsum(dO ⊙ O)
};

static FlashArgs flash_args(const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    FlashArgs a;
    a.S = sh.S;
    a.Sk = sh.S;
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
    a.q_pos = a.k_pos = 0;
    a.S_total = sh.S;
    a.q_width = a.kv_width = 3 * sh.NH * sh.HD;  // Q, K and V side by side in qkv (and dqkv)
    a.dq_width = a.dkv_width = a.q_width;
    a.lse_ld = sh.S;
    a.d_ld = sh.S;
    return a;
}

// The global dropout index of (b, n, q, k) of this call's block (attention.h): q, k count from the block's
// first query and key.
__host__ __device__ inline uint64_t flash_keep_index(const FlashArgs& a, int b, int n, int q, int k) {
    return attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, a.S_total, a.q_pos + q, a.k_pos + k);
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

// Keys of key tile k0 .. k0 + cols − 1 (block-local) that query q sees: those at or before it in the GLOBAL
// positions (a ring-attention block's queries and keys start at q_pos and k_pos; 0 and 0 for one rank's whole
// sequence). 0 to cols: a tile that is visited may still hide every key from some rows of a block.
static inline int visible_keys(const FlashArgs& a, int q, int k0, int cols) {
    const int64_t v = a.q_pos + q - (a.k_pos + k0) + 1;
    return v <= 0 ? 0 : v >= cols ? cols : (int)v;
}

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

// This thread's work space: grown to the largest call seen, never freed, so that the calls of a training step
// allocate nothing once the first step has run (docs/design.md, "Performance direction"). OpenMP keeps its
// threads, and with them these buffers.
static float* thread_floats(size_t n) {
    static thread_local std::vector<float> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}
static uint8_t* thread_bytes(size_t n) {
    static thread_local std::vector<uint8_t> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

// Query tiles of `a` against its key tiles: Q, K, V are the (sequence, head) matrices of rows q_width or
// kv_width elements apart per batch entry (row s·B + b of a [S·B, width] matrix, head n at column n·HD); out
// has rows of NH·HD; O is the activation dtype, or f32 for a ring-attention block (flash_block_forward).
template <class T, class O>
MM_CPU_LOOP static void flash_forward_cpu(O* out, float* lse, const T* Qm, const T* Km, const T* Vm, const FlashArgs& a) {
    const int S = a.S, HD = a.HD, NH = a.NH, Bt = kTileCpu;
    const int tiles = (S + Bt - 1) / Bt, key_tiles = (a.Sk + Bt - 1) / Bt;
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * NH * HD;
    const int64_t tasks = (int64_t)a.B * NH * tiles;
#pragma omp parallel if (cpu_gemm_single_threaded())
    {
        const size_t tile = (size_t)Bt * HD;  // Q_i, K_j, V_j, o: [Bt, HD]; x: [Bt, Bt]; m, l: [Bt]
        float* q = thread_floats(4 * tile + (size_t)Bt * Bt + 2 * Bt);
        float *k = q + tile, *v = k + tile, *o = v + tile, *x = o + tile, *m = x + (size_t)Bt * Bt, *l = m + Bt;
        uint8_t* keep = thread_bytes(Bt);
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int i = tiles - 1 - (int)(task % tiles);  // the longest rows first
            const int64_t bn = task / tiles;
            const int n = (int)(bn % NH), b = (int)(bn / NH);
            const T* Q = Qm + (int64_t)b * a.q_width + (int64_t)n * HD;
            const T* K = Km + (int64_t)b * a.kv_width + (int64_t)n * HD;
            const T* V = Vm + (int64_t)b * a.kv_width + (int64_t)n * HD;
            const int q0 = i * Bt, rows = std::min(Bt, S - q0);
            // The key tiles that hold a key at or before the tile's last query (global positions).
            const int64_t last_key = a.q_pos + q0 + rows - 1 - a.k_pos;
            const int last_tile = last_key < 0 ? -1 : (int)std::min<int64_t>(key_tiles - 1, last_key / Bt);
            load_rows(q, Q, R, q0, rows, HD);
            std::fill(m, m + Bt, -INFINITY);
            std::fill(l, l + Bt, 0.f);
            std::fill(o, o + tile, 0.f);
            for (int j = 0; j <= last_tile; j++) {
                const int k0 = j * Bt, cols = std::min(Bt, a.Sk - k0);
                load_rows(k, K, RK, k0, cols, HD);
                load_rows(v, V, RK, k0, cols, HD);
                gemm_f32_here(false, true, rows, cols, HD, a.scale, q, HD, k, HD, 0.f, x, Bt);
                for (int r = 0; r < rows; r++) {
                    const int len = visible_keys(a, q0 + r, k0, cols);
                    if (a.threshold)
                        dropout_keep_run(keep, a.seed, a.stream, flash_keep_index(a, b, n, q0 + r, k0), len,
                                         a.threshold);
                    const float alpha = online_softmax_row(&x[(size_t)r * Bt], len, cols, m[r], l[r],
                                                           a.threshold ? keep : nullptr);
                    float* orow = &o[(size_t)r * HD];
#pragma omp simd
                    for (int c = 0; c < HD; c++) orow[c] *= alpha;
                }
                gemm_f32_here(false, false, rows, HD, cols, 1.f, x, Bt, v, HD, 1.f, o, HD);
            }
            for (int r = 0; r < rows; r++) {
                // A row that sees no key of the block (possible in a ring block only) contributes nothing:
                // output 0 and lse = −inf, which the merge (flash_block_merge) gives weight 0.
                const float f = l[r] > 0.f ? a.inv_keep / l[r] : 0.f;
                float* orow = &o[(size_t)r * HD];
#pragma omp simd
                for (int c = 0; c < HD; c++) orow[c] *= f;
                lse[bn * a.lse_ld + q0 + r] = l[r] > 0.f ? m[r] + logf(l[r]) : -INFINITY;
            }
            store_rows(out + (int64_t)b * NH * HD + (int64_t)n * HD, RO, q0, rows, HD, o);
        }
    }
}

// Rows r0 .. r0 + rows − 1 of `m` (row stride ld) += src (G = f32: a ring block's accumulators), or = src.
template <bool kAdd, class G>
static void put_rows(G* m, int64_t ld, int r0, int rows, int HD, const float* src) {
    if constexpr (!kAdd) {
        store_rows(m, ld, r0, rows, HD, src);
    } else {
        for (int r = 0; r < rows; r++) {
            G* d = m + (int64_t)(r0 + r) * ld;
            const float* s = src + (int64_t)r * HD;
#pragma omp simd
            for (int c = 0; c < HD; c++) d[c] = from_f32<G>(to_f32(d[c]) + s[c]);
        }
    }
}

// D_q = dO_q · O_q for one query: its dO row (fp32, HD) against its row of O, in vec8.h's fixed order. The
// backward's loop below and flash_rowdot_cpu (D once per layer for ring attention) both use it: the same bits.
template <class T>
inline float flash_rowdot(const float* g, const T* orow, int HD) {
    float acc[kCpuPack] = {0};
    cpu_row_partials(HD, [&](int j, int64_t c) { acc[j] += g[c] * to_f32(orow[c]); });
    return cpu_partials_total(acc);
}

// D[(b·NH + n)·d_ld + q] for the S queries of `a`, out and dout [S·B, NH·HD].
template <class T>
MM_CPU_LOOP static void flash_rowdot_cpu(float* D, const T* dout, const T* out, const FlashArgs& a) {
    const int S = a.S, HD = a.HD, NH = a.NH;
    const int64_t RO = (int64_t)a.B * NH * HD;
#pragma omp parallel for if (cpu_gemm_single_threaded())
    for (int64_t bn = 0; bn < (int64_t)a.B * NH; bn++) {
        const int64_t out_at = (bn / NH) * NH * HD + (bn % NH) * HD;
        std::vector<float> g((size_t)HD);
        for (int q = 0; q < S; q++) {
            load_rows(g.data(), dout + out_at, RO, q, 1, HD);
            D[bn * a.d_ld + q] = flash_rowdot(g.data(), out + out_at + (int64_t)q * RO, HD);
        }
    }
}

// The backward of `a`'s queries against its keys. dQ, dK, dV have the row widths dq_width and dkv_width; kAdd: they are f32 accumulators and the block's terms are added (flash_block_backward), else
// they are written. out, dout: [S·B, NH·HD], the forward's output (whole: for a ring block, the merged one).
// Dg: the queries' D (rows a.d_ld apart), or null: computed here.
template <bool kAdd, class T, class G>
MM_CPU_LOOP static void flash_backward_cpu(G* dQm, G* dKm, G* dVm, const T* dout, const T* out, const float* lse,
                                           const float* Dg, const T* Qm, const T* Km, const T* Vm, const FlashArgs& a) {
    const int S = a.S, Sk = a.Sk, HD = a.HD, NH = a.NH, Bt = kTileCpu;
    const int tiles = (S + Bt - 1) / Bt, key_tiles = (Sk + Bt - 1) / Bt;
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * NH * HD;
    const int64_t RdQ = (int64_t)a.B * a.dq_width, RdK = (int64_t)a.B * a.dkv_width;
    const int64_t tasks = (int64_t)a.B * NH;
#pragma omp parallel if (cpu_gemm_single_threaded())
    {
        // The (sequence, head)'s Q, dO, dQ [S, HD] and K, V [Sk, HD], whole, as compact fp32; tiles of one
        // key tile.
        const size_t wq = (size_t)S * HD, wk = (size_t)Sk * HD, sq = (size_t)Bt * Bt, tile = (size_t)Bt * HD;
        float* Q = thread_floats(3 * wq + 2 * wk + S + 3 * sq + 2 * tile);
        float *dO = Q + wq, *dQ = dO + wq, *K = dQ + wq, *V = K + wk, *D = V + wk;
        float *P = D + S, *Pd = P + sq, *dS = Pd + sq, *dK = dS + sq, *dV = dK + tile;
        uint8_t* keep = thread_bytes(sq);
#pragma omp for schedule(dynamic, 1)
        for (int64_t bn = 0; bn < tasks; bn++) {
            const int n = (int)(bn % NH), b = (int)(bn / NH);
            const int64_t q_at = (int64_t)b * a.q_width + (int64_t)n * HD;
            const int64_t kv_at = (int64_t)b * a.kv_width + (int64_t)n * HD, out_at = (int64_t)b * NH * HD + n * HD;
            const int64_t dq_at = (int64_t)b * a.dq_width + (int64_t)n * HD, dkv_at = (int64_t)b * a.dkv_width + (int64_t)n * HD;
            load_rows(Q, Qm + q_at, R, 0, S, HD);
            load_rows(K, Km + kv_at, RK, 0, Sk, HD);
            load_rows(V, Vm + kv_at, RK, 0, Sk, HD);
            load_rows(dO, dout + out_at, RO, 0, S, HD);
            for (int qi = 0; qi < S; qi++)  // D_q = dO_q · O_q, or the caller's (ring attention: once per layer)
                D[qi] = Dg ? Dg[bn * a.d_ld + qi] : flash_rowdot(&dO[(size_t)qi * HD], out + out_at + (int64_t)qi * RO, HD);
            std::fill(dQ, dQ + wq, 0.f);
            const float* L = lse + bn * a.lse_ld;
            for (int j = 0; j < key_tiles; j++) {
                const int k0 = j * Bt, cols = std::min(Bt, Sk - k0);
                std::fill(dK, dK + tile, 0.f);
                std::fill(dV, dV + tile, 0.f);
                const float* Kj = &K[(size_t)k0 * HD];
                const float* Vj = &V[(size_t)k0 * HD];
                // The first query tile with a query at or after the tile's first key (global positions).
                const int64_t first_q = a.k_pos + k0 - a.q_pos;
                for (int i = first_q <= 0 ? 0 : (int)(first_q / Bt); i < tiles; i++) {
                    const int q0 = i * Bt, rows = std::min(Bt, S - q0);
                    const float* Qi = &Q[(size_t)q0 * HD];
                    const float* dOi = &dO[(size_t)q0 * HD];
                    // P (the forward's probabilities) and P ⊙ Z/(1 − p), row by row.
                    gemm_f32_here(false, true, rows, cols, HD, a.scale, Qi, HD, Kj, HD, 0.f, P, Bt);
                    for (int r = 0; r < rows; r++) {
                        const int qg = q0 + r, len = visible_keys(a, qg, k0, cols);
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
                    gemm_f32_here(true, false, cols, HD, rows, 1.f, Pd, Bt, dOi, HD, 1.f, dV, HD);
                    // dP_d = dO_i V_jᵀ, then dS in place.
                    gemm_f32_here(false, true, rows, cols, HD, 1.f, dOi, HD, Vj, HD, 0.f, dS, Bt);
                    for (int r = 0; r < rows; r++) {
                        const int qg = q0 + r, len = visible_keys(a, qg, k0, cols);
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
                    gemm_f32_here(false, false, rows, HD, cols, 1.f, dS, Bt, Kj, HD, 1.f, &dQ[(size_t)q0 * HD],
                                  HD);
                    gemm_f32_here(true, false, cols, HD, rows, 1.f, dS, Bt, Qi, HD, 1.f, dK, HD);
                }
                put_rows<kAdd>(dKm + dkv_at, RdK, k0, cols, HD, dK);
                put_rows<kAdd>(dVm + dkv_at, RdK, k0, cols, HD, dV);
            }
            put_rows<kAdd>(dQm + dq_at, RdQ, 0, S, HD, dQ);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA kernels. The same algorithm as the CPU path, in four kernels; all arithmetic in fp32. They run fp32
// calls: a bf16 call goes to the tensor-core kernels of flash_attention_tc.cu (flash_forward_cuda and
// flash_backward_cuda hand it over), whose tile products take bf16 operands.
//
// One launch is one FlashArgs call, as on the CPU: S queries against Sk keys, Q, K and V read through their
// own pointers and row widths (q_width, kv_width: the one qkv buffer of width 3·NH·HD for the whole sequence;
// a rank's qkv and the received K | V buffer for a ring block). The causal mask compares GLOBAL positions:
// block-local query q sees key k iff k_pos + k <= q_pos + q, i.e. k <= q + dg with dg = q_pos − k_pos (0 for
// the whole sequence; flash_diagonal). So a block below the diagonal is unmasked, one above it masks every
// key, and the key tiles (query tiles, in the dK-dV kernel) visited are those that hold a visible pair. The
// outputs are templated: the forward writes O = T (whole sequence) or f32 (a ring block), lse rows lse_ld
// apart; the backward writes dQ, dK, dV in T, or (kAdd) adds the block's terms into f32 accumulators. A query
// that sees no key of a block gets o = 0 and lse = −inf (merge weight 0) and, in the backward, P = 0.
//
// Shape of the work. A block is 4 warps (128 threads). Every tile a block stages goes to shared memory as
// fp32, columns HD .. HDB − 1 and rows past the sequence's end filled with 0, where HDB is the kernel's
// compile-time bound on the head dimension (32, 64 or 128: flash_attention_hd_bound). With a compile-time
// HDB, each lane's share of a row (HDB/32 columns c = lane + 32·j) lives in a fixed number of registers.
// Each warp alternates two phases on every tile:
//  - phase A, lanes over keys (or over queries): lane l computes one score x = q·k of a key tile of 32 keys
//    (32 = the warp size, so there is no loop over key chunks), its probability, its keep bit from Philox and
//    (backward) dS. Each lane draws its own element's Philox block: four neighbouring lanes compute the same
//    block, about the cost of one score at HD = 64 (sharing it by shuffles would save 3/4 of that: left for
//    later, correctness first); p = 0 draws nothing. One of the two rows it dots is read by all lanes at
//    once (a shared-memory broadcast), the other is the lane's own row: those rows are padded to HDB + 1
//    floats, so the 32 lanes hit 32 different banks. The row statistics (max, sum) are xor-butterfly
//    shuffles (warp_reduce.cuh): a fixed order.
//  - phase B, lanes over the head dimension: the accumulations o += p·V, dV += P_d·dO, dK += dS·Q, dQ += dS·K,
//    reading the probabilities phase A left in shared memory (a broadcast) and one row of V, dO, Q or K per
//    key (consecutive columns across the lanes: no bank conflict). The accumulators stay in registers for
//    the whole block: rows per warp × HDB/32 floats.
//
// Registers per thread, accumulators only, at HDB = 128: forward 16 queries × 4 = 64 floats; dK, dV kernel
// 2 × 8 keys × 4 = 64; dQ kernel 8 queries × 4 = 32. ptxas -v (CUDA 13), all instantiations (the ring
// blocks' included), no spills: sm_90 forward 102 to 124 registers, dK-dV 56 to 94, dQ 42 to 70, D 29 to
// 30; sm_80 111 to 123, 48 to 91, 43 to 70, 29 to 30. The ring blocks' instantiations (f32 output, kAdd)
// take the same counts as the whole sequence's at the same HDB; the merge kernels 26 and 16.
// Shared memory per block (floats): forward 64·HDB (Q) + 32·(HDB+1) (K) + 32·HDB (V) + 64·32 (P); dK, dV
// 2·32·HDB (K, V) + 2·32·(HDB+1) (Q, dO) + 2·32 (lse, D) + 2·32·32 (P_d, dS); dQ the same less one 32×32.
// That is 20.5 to 40.5 KiB up to HDB = 64 and 68.5 to 72.5 KiB at HDB = 128: above the 48 KB default, so
// those launches opt in (cudaFuncSetAttribute; every GPU from sm_80 on allows at least 99 KB per block).
//
// Determinism: every output element is summed by one thread, in an order fixed by the shape (key tiles in
// order, keys in order, then the butterflies), and written once (or, kAdd, read, added to and written once,
// by the one block that owns it in the launch). No atomics, so two runs give the same bits.
//  - forward: one block per (query tile of 64, head, sequence), warp w the queries 16w .. 16w + 15; the key
//    tiles of 32 from key 0 up to the last key the tile's last query sees (the ones wholly after it are
//    never staged); a warp skips a tile whose keys all come after its queries. Lane r < 16 keeps query r's
//    running max and sum; the other lanes get them by shuffle.
//  - D_q = dO_q · O_q: one warp per query, compact [B, NH, S] in the context's scratch
//    (flash_attention_scratch_bytes), whatever the lse's row stride.
//  - dK, dV: one block per (key tile of 32, head, sequence): ceil(Sk/32) tiles; warp w the keys 8w .. 8w + 7,
//    over the query tiles of 32 from the first one with a query that sees the tile's first key to the end;
//    lane l is query q0 + l in phase A.
//  - dQ: one block per (query tile of 32, head, sequence), warp w the queries 8w .. 8w + 7, over the key
//    tiles of 32 up to the last key the tile sees; lane l is key k0 + l in phase A.
// Both backward kernels rebuild P = e^{x − lse} and the keep bits (the same formulas and summation order,
// so the same bits in the two). Long rows first where the work differs per block (the blockIdx order).
// Exponentials are fast_exp (fast_exp.h), as on the CPU path: the two devices use one approximation of e^x.
// ---------------------------------------------------------------------------------------------------------

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = 32 * kFlashWarps;
constexpr int kFwdRows = 64;                                 // queries per forward block
constexpr int kFwdRowsPerWarp = kFwdRows / kFlashWarps;      // 16
constexpr int kKeyTile = 32;                                 // keys per tile: one per lane in phase A
constexpr int kBwdTile = 32;                                 // queries (dQ) or keys (dK, dV) per backward block
constexpr int kBwdPerWarp = kBwdTile / kFlashWarps;          // 8
constexpr unsigned kFullWarp = 0xffffffffu;
static_assert(kKeyTile == 32 && kBwdTile == 32, "phase A maps one key (or query) to each of the 32 lanes");

constexpr size_t flash_fwd_smem_bytes(int HDB) {
    return sizeof(float) * ((size_t)kFwdRows * HDB + kKeyTile * (HDB + 1) + kKeyTile * HDB + kFwdRows * kKeyTile);
}
constexpr size_t flash_bwd_kv_smem_bytes(int HDB) {
    return sizeof(float) * ((size_t)2 * kBwdTile * HDB + 2 * kBwdTile * (HDB + 1) + 2 * kBwdTile +
                            2 * kBwdTile * kKeyTile);
}
constexpr size_t flash_bwd_q_smem_bytes(int HDB) {
    return sizeof(float) * ((size_t)2 * kBwdTile * HDB + 2 * kKeyTile * (HDB + 1) + 2 * kBwdTile +
                            kBwdTile * kKeyTile);
}

// Rows r0 .. r0 + rows − 1 of a (sequence, head) matrix with row stride ld into shared memory as fp32 with
// row stride lds; only the first `valid` rows exist (the sequence ends), the others and columns HD .. HDB − 1
// are 0, so phase B can run over whole tiles without reading NaNs. All threads of the block take part.
template <int HDB, class T>
__device__ inline void stage_rows(float* dst, int lds, const T* m, int64_t ld, int r0, int rows, int valid,
                                  int HD) {
    for (int idx = threadIdx.x; idx < rows * HDB; idx += blockDim.x) {
        const int r = idx / HDB, c = idx % HDB;  // consecutive threads, consecutive columns: coalesced
        dst[r * lds + c] = r < valid && c < HD ? to_f32(m[(int64_t)(r0 + r) * ld + c]) : 0.f;
    }
}
__device__ inline void stage_vec(float* dst, const float* v, int r0, int rows, int valid) {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) dst[r] = r < valid ? v[r0 + r] : 0.f;
}

// Σ_c a[c]·b[c] over the real head dimension, in order.
__device__ inline float dot_hd(const float* a, const float* b, int HD) {
    float acc = 0.f;
#pragma unroll 4
    for (int c = 0; c < HD; c++) acc = fmaf(a[c], b[c], acc);
    return acc;
}

// The keep bit z of (q, k) for a visible key; no Philox call when p = 0.
__device__ inline bool flash_keep(const FlashArgs& a, int b, int n, int q, int k) {
    return a.threshold == 0 || dropout_keep(a.seed, a.stream, flash_keep_index(a, b, n, q, k), a.threshold);
}

// Block x → (tile rank, sequence b, head n): the B·NH blocks of one tile rank are consecutive, so that the
// launch starts with one rank's tiles for every head.
struct FlashBlock {
    int rank, b, n;
    int64_t bn;  // b·NH + n: the row of lse and D
};
__device__ inline FlashBlock flash_block(const FlashArgs& a) {
    const int64_t BN = (int64_t)a.B * a.NH;
    FlashBlock f;
    f.rank = (int)(blockIdx.x / BN);
    f.bn = blockIdx.x % BN;
    f.n = (int)(f.bn % a.NH);
    f.b = (int)(f.bn / a.NH);
    return f;
}

// q_pos − k_pos: query q sees key k (both block-local) iff k <= q + flash_diagonal (0 for the whole sequence).
// An int: the host checks that the positions fit (flash_check_positions).
__device__ inline int flash_diagonal(const FlashArgs& a) { return (int)(a.q_pos - a.k_pos); }

// One gradient element: added to a ring block's f32 accumulator (kAdd) or written in the gradient's dtype.
template <bool kAdd, class G>
__device__ inline void store_grad(G* at, float v) {
    static_assert(!kAdd || std::is_same<G, float>::value, "the accumulators are f32");
    if constexpr (kAdd) *at += v;
    else *at = from_f32<G>(v);
}

// (128, 4): at most 128 registers a thread, 4 blocks an SM by registers. With the thread count alone, ptxas
// kept the HDB = 64 instantiation at 72 registers and spilled 4 bytes; with this bound no instantiation spills.
// O: the output's dtype (T for the whole sequence, f32 for a ring block).
template <class T, class O, int HDB>
__global__ void __launch_bounds__(kFlashThreads, 4)
    flash_forward_kernel(O* out, float* lse, const T* Qm, const T* Km, const T* Vm, FlashArgs a) {
    constexpr int J = HDB / 32, RW = kFwdRowsPerWarp;
    extern __shared__ float smem[];
    float* Qs = smem;                       // [64][HDB]     broadcast in phase A
    float* Ks = Qs + kFwdRows * HDB;        // [32][HDB + 1] lane k reads row k in phase A
    float* Vs = Ks + kKeyTile * (HDB + 1);  // [32][HDB]     lanes over columns in phase B
    float* Ps = Vs + kKeyTile * HDB;        // [64][32]      z_k·e_k of the warp's queries, from phase A to B
    const int S = a.S, Sk = a.Sk, HD = a.HD, NH = a.NH, dg = flash_diagonal(a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const FlashBlock blk = flash_block(a);
    const int tiles = (S + kFwdRows - 1) / kFwdRows;
    const int q0 = (tiles - 1 - blk.rank) * kFwdRows;  // rank 0: the last query tile, the most keys
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * NH * HD;
    const T* Q = Qm + (int64_t)blk.b * a.q_width + (int64_t)blk.n * HD;
    const T* K = Km + (int64_t)blk.b * a.kv_width + (int64_t)blk.n * HD;
    const T* V = Vm + (int64_t)blk.b * a.kv_width + (int64_t)blk.n * HD;
    stage_rows<HDB>(Qs, HDB, Q, R, q0, kFwdRows, min(kFwdRows, S - q0), HD);

    const int row0 = warp * RW, qw = q0 + row0;  // this warp's queries qw .. qw + 15
    float m_mine = -INFINITY, l_mine = 0.f, alpha_mine = 1.f;  // of query qw + lane, lanes 0 .. 15
    float o[RW][J];
#pragma unroll
    for (int r = 0; r < RW; r++)
#pragma unroll
        for (int j = 0; j < J; j++) o[r][j] = 0.f;

    // The last key the tile's last query sees (block-local; < 0: none, a ring block above the diagonal).
    const int last_key = min(min(q0 + kFwdRows, S) - 1 + dg, Sk - 1);
    for (int k0 = 0; k0 <= last_key; k0 += kKeyTile) {  // key tiles wholly above the diagonal: never
        const int cols = min(kKeyTile, Sk - k0);
        __syncthreads();  // the previous tile's K, V and P are read by now (and Q is staged, the first time)
        stage_rows<HDB>(Ks, HDB + 1, K, RK, k0, kKeyTile, cols, HD);
        stage_rows<HDB>(Vs, HDB, V, RK, k0, kKeyTile, cols, HD);
        __syncthreads();
        if (k0 > qw + RW - 1 + dg) continue;  // every key of the tile comes after this warp's queries

        // Phase A, lane = key k0 + lane: scores, the online softmax, the keep bits.
        const int k = k0 + lane;
        for (int r = 0; r < RW; r++) {
            const int q = qw + r;
            // The causal mask by global position (k_pos + k <= q_pos + q), and the ends of the block.
            const bool visible = k <= q + dg && k < Sk && q < S;
            const float x = dot_hd(&Qs[(row0 + r) * HDB], &Ks[lane * (HDB + 1)], HD) * a.scale;
            const float m_old = __shfl_sync(kFullWarp, m_mine, r);
            const float mt = fmaxf(m_old, warp_max(visible ? x : -INFINITY));
            const float e = visible ? fast_exp(x - mt) : 0.f;
            const float alpha = m_old == -INFINITY ? 0.f : fast_exp(m_old - mt);
            const float tsum = warp_sum(e);  // l counts every visible key, kept or dropped
            const bool keep = visible && flash_keep(a, blk.b, blk.n, q, k);
            Ps[(row0 + r) * kKeyTile + lane] = keep ? e : 0.f;
            if (lane == r) {
                m_mine = mt;
                l_mine = l_mine * alpha + tsum;
                alpha_mine = alpha;
            }
        }
        __syncwarp();  // Ps of all lanes written before any lane reads them

        // Phase B, lane = columns lane + 32·j: o ← α·o + Σ_k (z·e)_k · V_k.
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const float alpha = __shfl_sync(kFullWarp, alpha_mine, r);
#pragma unroll
            for (int j = 0; j < J; j++) o[r][j] *= alpha;
        }
        const int kend = min(cols, qw + RW + dg - k0);  // keys after the warp's last query add 0
        for (int kk = 0; kk < kend; kk++) {
            float v[J];
#pragma unroll
            for (int j = 0; j < J; j++) v[j] = Vs[kk * HDB + lane + 32 * j];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                const float pk = Ps[(row0 + r) * kKeyTile + kk];
#pragma unroll
                for (int j = 0; j < J; j++) o[r][j] = fmaf(pk, v[j], o[r][j]);
            }
        }
    }

    // out_q = o_q / l_q / (1 − p), lse_q = m_q + log l_q. A query that sees no key of a ring block (l = 0)
    // gets 0 and −inf, as on the CPU: the merge gives it weight 0.
    O* obase = out + (int64_t)blk.b * NH * HD + (int64_t)blk.n * HD;
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const int q = qw + r;
        const float l = __shfl_sync(kFullWarp, l_mine, r), m = __shfl_sync(kFullWarp, m_mine, r);
        if (q < S) {
            const float f = l > 0.f ? a.inv_keep / l : 0.f;
            O* orow = obase + (int64_t)q * RO;
#pragma unroll
            for (int j = 0; j < J; j++) {
                const int c = lane + 32 * j;
                if (c < HD) orow[c] = from_f32<O>(o[r][j] * f);
            }
            if (lane == 0) lse[blk.bn * a.lse_ld + q] = l > 0.f ? m + logf(l) : -INFINITY;
        }
    }
}

// D_q = Σ_c dO[q, c]·O[q, c], f32 [B, NH, S] like lse: one warp per (sequence, head, query).
template <class T>
__global__ void __launch_bounds__(kFlashThreads) flash_dot_kernel(float* D, const T* dout, const T* out, FlashArgs a) {
    const int64_t row = (int64_t)blockIdx.x * kFlashWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (int64_t)a.B * a.NH * a.S) return;  // whole warps: the butterfly sees full warps
    const int q = (int)(row % a.S);
    const int64_t bn = row / a.S;
    const int64_t n = bn % a.NH, b = bn / a.NH;
    const int64_t at = ((int64_t)q * a.B + b) * a.NH * a.HD + n * a.HD;
    float acc = 0.f;
    for (int c = lane; c < a.HD; c += 32) acc = fmaf(to_f32(dout[at + c]), to_f32(out[at + c]), acc);
    acc = warp_sum(acc);
    if (lane == 0) D[bn * a.d_ld + q] = acc;
}

// dK, dV of one key tile: Σ over the query tiles from the diagonal on of dV += P_dᵀ dO, dK += dSᵀ Q. G: the
// gradients' dtype; kAdd: they are a ring block's f32 accumulators, and the tile's sums are added to them
// (this block is their only writer in the launch, so a plain read-add-write: no atomics), else written.
template <class T, class G, bool kAdd, int HDB>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kv_kernel(G* dKm, G* dVm, const T* dout, const float* lse, const float* D, const T* Qm, const T* Km,
                             const T* Vm, FlashArgs a) {
    constexpr int J = HDB / 32, KW = kBwdPerWarp;
    extern __shared__ float smem[];
    float* Ks = smem;                        // [32][HDB]     the block's keys: broadcast in phase A
    float* Vs = Ks + kBwdTile * HDB;         // [32][HDB]
    float* Qs = Vs + kBwdTile * HDB;         // [32][HDB + 1] lane q reads row q in phase A, rows in phase B
    float* dOs = Qs + kBwdTile * (HDB + 1);  // [32][HDB + 1]
    float* Ls = dOs + kBwdTile * (HDB + 1);  // [32] lse of the query tile
    float* Ds = Ls + kBwdTile;               // [32] D of the query tile
    float* Pds = Ds + kBwdTile;              // [32 keys][32 queries] P ⊙ z/(1 − p)
    float* dSs = Pds + kBwdTile * kKeyTile;  // [32 keys][32 queries] dS
    const int S = a.S, Sk = a.Sk, HD = a.HD, NH = a.NH, dg = flash_diagonal(a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const FlashBlock blk = flash_block(a);
    const int tiles = (S + kBwdTile - 1) / kBwdTile;
    const int k0 = blk.rank * kBwdTile;  // key tile: rank 0 = keys 0 .. 31, which every query sees
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * NH * HD;
    const T* Q = Qm + (int64_t)blk.b * a.q_width + (int64_t)blk.n * HD;
    const T* K = Km + (int64_t)blk.b * a.kv_width + (int64_t)blk.n * HD;
    const T* V = Vm + (int64_t)blk.b * a.kv_width + (int64_t)blk.n * HD;
    const T* dO = dout + (int64_t)blk.b * NH * HD + (int64_t)blk.n * HD;
    const float* L = lse + blk.bn * a.lse_ld;
    const float* Dq = D + blk.bn * a.d_ld;  // D's rows are d_ld apart (flash_dot_kernel)
    stage_rows<HDB>(Ks, HDB, K, RK, k0, kBwdTile, min(kBwdTile, Sk - k0), HD);
    stage_rows<HDB>(Vs, HDB, V, RK, k0, kBwdTile, min(kBwdTile, Sk - k0), HD);

    const int kr0 = warp * KW;  // this warp's keys k0 + kr0 .. k0 + kr0 + 7
    float dk[KW][J], dv[KW][J];
#pragma unroll
    for (int kk = 0; kk < KW; kk++)
#pragma unroll
        for (int j = 0; j < J; j++) dk[kk][j] = dv[kk][j] = 0.f;

    // The query tiles on and below the diagonal, in order: from the one that holds the first query to see key
    // k0 (q + dg >= k0; the tile of k0 itself for the whole sequence).
    const int first_q = k0 - dg;
    for (int it = first_q <= 0 ? 0 : first_q / kBwdTile; it < tiles; it++) {
        const int q0 = it * kBwdTile, rows = min(kBwdTile, S - q0);
        __syncthreads();  // the previous query tile is read by now (and K, V staged, the first time)
        stage_rows<HDB>(Qs, HDB + 1, Q, R, q0, kBwdTile, rows, HD);
        stage_rows<HDB>(dOs, HDB + 1, dO, RO, q0, kBwdTile, rows, HD);
        stage_vec(Ls, L, q0, kBwdTile, rows);
        stage_vec(Ds, Dq, q0, kBwdTile, rows);
        __syncthreads();

        // Phase A, lane = query q0 + lane: P, the keep bit, P_d and dS of the warp's 8 keys.
        const int q = q0 + lane;
        for (int kk = 0; kk < KW; kk++) {
            const int k = k0 + kr0 + kk;
            const bool visible = k <= q + dg && k < Sk && q < S;  // the mask by global position, the block's ends
            const float x = dot_hd(&Qs[lane * (HDB + 1)], &Ks[(kr0 + kk) * HDB], HD) * a.scale;
            const float pk = visible ? fast_exp(x - Ls[lane]) : 0.f;
            const bool keep = visible && flash_keep(a, blk.b, blk.n, q, k);
            const float dpd = dot_hd(&dOs[lane * (HDB + 1)], &Vs[(kr0 + kk) * HDB], HD);  // (dO Vᵀ)[q, k]
            const float dp = keep ? dpd * a.inv_keep : 0.f;
            Pds[(kr0 + kk) * kKeyTile + lane] = keep ? pk * a.inv_keep : 0.f;
            dSs[(kr0 + kk) * kKeyTile + lane] = visible ? pk * (dp - Ds[lane]) * a.scale : 0.f;
        }
        __syncwarp();

        // Phase B, lane = columns lane + 32·j: dV_k += Σ_q P_d[q, k]·dO_q, dK_k += Σ_q dS[q, k]·Q_q.
        for (int r = 0; r < rows; r++) {
            float g[J], qv[J];
#pragma unroll
            for (int j = 0; j < J; j++) {
                g[j] = dOs[r * (HDB + 1) + lane + 32 * j];
                qv[j] = Qs[r * (HDB + 1) + lane + 32 * j];
            }
#pragma unroll
            for (int kk = 0; kk < KW; kk++) {
                const float pd = Pds[(kr0 + kk) * kKeyTile + r], ds = dSs[(kr0 + kk) * kKeyTile + r];
#pragma unroll
                for (int j = 0; j < J; j++) {
                    dv[kk][j] = fmaf(pd, g[j], dv[kk][j]);
                    dk[kk][j] = fmaf(ds, qv[j], dk[kk][j]);
                }
            }
        }
    }

    const int64_t RdK = (int64_t)a.B * a.dkv_width, dkv_at = (int64_t)blk.b * a.dkv_width + (int64_t)blk.n * HD;
    G* dK = dKm + dkv_at;
    G* dV = dVm + dkv_at;
#pragma unroll
    for (int kk = 0; kk < KW; kk++) {
        const int k = k0 + kr0 + kk;
        if (k >= Sk) break;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = lane + 32 * j;
            if (c < HD) {
                store_grad<kAdd>(&dK[(int64_t)k * RdK + c], dk[kk][j]);
                store_grad<kAdd>(&dV[(int64_t)k * RdK + c], dv[kk][j]);
            }
        }
    }
}

// dQ of one query tile: Σ over the key tiles up to the diagonal of dQ += dS K. G, kAdd: as the dK, dV kernel.
template <class T, class G, bool kAdd, int HDB>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q_kernel(G* dQm, const T* dout, const float* lse, const float* D, const T* Qm, const T* Km,
                            const T* Vm, FlashArgs a) {
    constexpr int J = HDB / 32, QW = kBwdPerWarp;
    extern __shared__ float smem[];
    float* Qs = smem;                       // [32][HDB]     broadcast in phase A
    float* dOs = Qs + kBwdTile * HDB;       // [32][HDB]     broadcast in phase A
    float* Ks = dOs + kBwdTile * HDB;       // [32][HDB + 1] lane k reads row k in phase A, rows in phase B
    float* Vs = Ks + kKeyTile * (HDB + 1);  // [32][HDB + 1]
    float* Ls = Vs + kKeyTile * (HDB + 1);  // [32]
    float* Ds = Ls + kBwdTile;              // [32]
    float* dSs = Ds + kBwdTile;             // [32 queries][32 keys]
    const int S = a.S, Sk = a.Sk, HD = a.HD, NH = a.NH, dg = flash_diagonal(a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const FlashBlock blk = flash_block(a);
    const int tiles = (S + kBwdTile - 1) / kBwdTile;
    const int q0 = (tiles - 1 - blk.rank) * kBwdTile, rows = min(kBwdTile, S - q0);  // rank 0: the most keys
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * NH * HD;
    const T* Q = Qm + (int64_t)blk.b * a.q_width + (int64_t)blk.n * HD;
    const T* K = Km + (int64_t)blk.b * a.kv_width + (int64_t)blk.n * HD;
    const T* V = Vm + (int64_t)blk.b * a.kv_width + (int64_t)blk.n * HD;
    const T* dO = dout + (int64_t)blk.b * NH * HD + (int64_t)blk.n * HD;
    stage_rows<HDB>(Qs, HDB, Q, R, q0, kBwdTile, rows, HD);
    stage_rows<HDB>(dOs, HDB, dO, RO, q0, kBwdTile, rows, HD);
    stage_vec(Ls, lse + blk.bn * a.lse_ld, q0, kBwdTile, rows);
    stage_vec(Ds, D + blk.bn * a.d_ld, q0, kBwdTile, rows);

    const int qr0 = warp * QW, qw = q0 + qr0;  // this warp's queries qw .. qw + 7
    float dq[QW][J];
#pragma unroll
    for (int r = 0; r < QW; r++)
#pragma unroll
        for (int j = 0; j < J; j++) dq[r][j] = 0.f;

    const int key_end = min(q0 + rows + dg, Sk);  // keys 0 .. key_end − 1 are seen by some query of the tile
    for (int k0 = 0; k0 < key_end; k0 += kKeyTile) {  // key tiles up to the diagonal, in order
        const int cols = min(kKeyTile, Sk - k0);
        __syncthreads();
        stage_rows<HDB>(Ks, HDB + 1, K, RK, k0, kKeyTile, cols, HD);
        stage_rows<HDB>(Vs, HDB + 1, V, RK, k0, kKeyTile, cols, HD);
        __syncthreads();
        if (k0 > qw + QW - 1 + dg) continue;  // every key of the tile comes after this warp's queries

        // Phase A, lane = key k0 + lane.
        const int k = k0 + lane;
        for (int r = 0; r < QW; r++) {
            const int q = qw + r;
            const bool visible = k <= q + dg && k < Sk && q < S;
            const float x = dot_hd(&Qs[(qr0 + r) * HDB], &Ks[lane * (HDB + 1)], HD) * a.scale;
            const float pk = visible ? fast_exp(x - Ls[qr0 + r]) : 0.f;
            const bool keep = visible && flash_keep(a, blk.b, blk.n, q, k);
            const float dpd = dot_hd(&dOs[(qr0 + r) * HDB], &Vs[lane * (HDB + 1)], HD);
            const float dp = keep ? dpd * a.inv_keep : 0.f;
            dSs[(qr0 + r) * kKeyTile + lane] = visible ? pk * (dp - Ds[qr0 + r]) * a.scale : 0.f;
        }
        __syncwarp();

        // Phase B, lane = columns: dQ_q += Σ_k dS[q, k]·K_k.
        const int kend = min(cols, qw + QW + dg - k0);
        for (int kk = 0; kk < kend; kk++) {
            float kv[J];
#pragma unroll
            for (int j = 0; j < J; j++) kv[j] = Ks[kk * (HDB + 1) + lane + 32 * j];
#pragma unroll
            for (int r = 0; r < QW; r++) {
                const float ds = dSs[(qr0 + r) * kKeyTile + kk];
#pragma unroll
                for (int j = 0; j < J; j++) dq[r][j] = fmaf(ds, kv[j], dq[r][j]);
            }
        }
    }

    const int64_t RdQ = (int64_t)a.B * a.dq_width;
    G* dQ = dQm + (int64_t)blk.b * a.dq_width + (int64_t)blk.n * HD;
#pragma unroll
    for (int r = 0; r < QW; r++) {
        const int q = qw + r;
        if (q >= S) break;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = lane + 32 * j;
            if (c < HD) store_grad<kAdd>(&dQ[(int64_t)q * RdQ + c], dq[r][j]);
        }
    }
}

// ---- host side of the kernels ----------------------------------------------------------------------------

// flash_attention_hd_bound (flash_attention.h) picks the instantiation; call launch(integral_constant<HDB>).
template <class Launch>
static void launch_by_hd(const char* op, int HD, Launch&& launch) {
    switch (flash_attention_hd_bound(HD)) {
        case 32: launch(std::integral_constant<int, 32>()); break;
        case 64: launch(std::integral_constant<int, 64>()); break;
        case 128: launch(std::integral_constant<int, 128>()); break;
        default:
            mm_fatal("%s: head dimension HD=%d: the flash attention CUDA kernels take HD from 1 to 128; use "
                     "--attention unfused",
                     op, HD);
    }
}

// A kernel's dynamic shared memory above the 48 KB every launch may take must be opted into, per kernel. The
// bytes are a constant of the instantiation, so each launch site calls this once, to initialize a static of
// its own (the lambdas of launch_by_hd below, in function templates of the kernel's types, have one per kernel
// instantiation): three runtime calls once per kernel instantiation, not on every launch.
template <class Kernel>
static bool flash_allow_smem(const char* op, Kernel* kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return true;
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < bytes)
        mm_fatal("%s: the kernel needs %zu bytes of shared memory per block, device %d allows %d; use "
                 "--attention unfused",
                 op, bytes, dev, optin);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return true;
}

// Blocks of a launch with one block per (tile, sequence, head).
static unsigned flash_grid(const char* op, int tiles, const FlashArgs& a) {
    const int64_t blocks = (int64_t)tiles * a.B * a.NH;
    if (blocks > INT32_MAX) mm_fatal("%s: %lld blocks in one launch (at most 2^31 - 1)", op, (long long)blocks);
    return (unsigned)blocks;
}

// bf16 runs on tensor cores (flash_attention_tc.h, flash_attention_uses_tensor_cores): its kernels take the same
// fields as FlashArgs.
static FlashTcArgs tc_args(const FlashArgs& a) {
    FlashTcArgs t;
    t.S = a.S, t.Sk = a.Sk, t.B = a.B, t.NH = a.NH, t.HD = a.HD;
    t.scale = a.scale, t.threshold = a.threshold, t.inv_keep = a.inv_keep, t.seed = a.seed, t.stream = a.stream;
    t.b_offset = a.b_offset, t.head_offset = a.head_offset, t.NH_total = a.NH_total;
    t.q_pos = a.q_pos, t.k_pos = a.k_pos, t.S_total = a.S_total;
    t.q_width = a.q_width, t.kv_width = a.kv_width, t.dq_width = a.dq_width, t.dkv_width = a.dkv_width;
    t.lse_ld = a.lse_ld, t.d_ld = a.d_ld;
    t.hd_bound = flash_attention_hd_bound(a.HD);
    return t;
}

// The forward: O = T (the whole sequence) or f32 (a ring block). Q, K, V: element 0 of the first position's
// first sequence, head 0, rows a.q_width and a.kv_width apart.
template <class T, class O>
static void flash_forward_cuda(Ctx& ctx, const char* op, O* out, float* lse, const T* Q, const T* K, const T* V,
                               const FlashArgs& a) {
    if constexpr (std::is_same<T, bf16>::value) {
        flash_tc_forward(ctx, op, out, lse, Q, K, V, tc_args(a));
    } else {
        const unsigned blocks = flash_grid(op, (a.S + kFwdRows - 1) / kFwdRows, a);
        launch_by_hd(op, a.HD, [&](auto hdb) {
            constexpr int HDB = decltype(hdb)::value;
            constexpr size_t smem = flash_fwd_smem_bytes(HDB);
            static const bool smem_ok = flash_allow_smem(op, flash_forward_kernel<T, O, HDB>, smem);  // once (above)
            (void)smem_ok;
            flash_forward_kernel<T, O, HDB><<<blocks, kFlashThreads, smem, ctx.stream>>>(out, lse, Q, K, V, a);
            CUDA_CHECK_LAST();
        });
    }
}

// The backward: D, then the dK-dV kernel (one block per key tile: a.Sk keys) and the dQ kernel (one block per
// query tile: a.S queries). kAdd: G = f32 accumulators of a ring block, added into (flash_backward_kv_kernel).
// D = rowsum(dO ⊙ O) of a's S queries into D (rows a.d_ld apart): one warp per (sequence, head, query).
template <class T>
static void flash_rowdot_cuda(Ctx& ctx, const char* op, float* D, const T* dout, const T* out, const FlashArgs& a) {
    const int64_t rows = (int64_t)a.B * a.NH * a.S;
    const int64_t dot_blocks = (rows + kFlashWarps - 1) / kFlashWarps;
    if (dot_blocks > INT32_MAX) mm_fatal("%s: %lld blocks in one launch (at most 2^31 - 1)", op, (long long)dot_blocks);
    flash_dot_kernel<T><<<(unsigned)dot_blocks, kFlashThreads, 0, ctx.stream>>>(D, dout, out, a);
    CUDA_CHECK_LAST();
}

// Dg: the queries' D (rows a.d_ld apart), or null: computed first.
template <bool kAdd, class T, class G>
static void flash_backward_cuda(Ctx& ctx, const char* op, G* dQ, G* dK, G* dV, const T* dout, const T* out,
                                const float* lse, const float* Dg, const T* Q, const T* K, const T* V, FlashArgs a) {
    const float* D = Dg;
    if (!D) {
        // D in the context's scratch, compact [B, NH, a.S] whatever lse_ld is: the three kernels run in order on
        // ctx.stream, so the next user of the scratch runs after the dQ kernel has read it. The bytes the model
        // reserves before the step for the rank's S (flash_attention_scratch_bytes, model/gpt.cu) hold it, and
        // a block's Sq is at most that S, so the scratch does not grow here.
        float* scratch = static_cast<float*>(ctx_scratch(ctx, flash_attention_scratch_bytes(a.S, a.B, a.NH)));
        a.d_ld = a.S;
        flash_rowdot_cuda<T>(ctx, op, scratch, dout, out, a);
        D = scratch;
    }
    if constexpr (std::is_same<T, bf16>::value) {  // on tensor cores, as the forward
        flash_tc_backward(ctx, op, dQ, dK, dV, dout, lse, D, Q, K, V, tc_args(a));
    } else {
        const unsigned kv_blocks = flash_grid(op, (a.Sk + kBwdTile - 1) / kBwdTile, a);
        const unsigned q_blocks = flash_grid(op, (a.S + kBwdTile - 1) / kBwdTile, a);
        launch_by_hd(op, a.HD, [&](auto hdb) {
            constexpr int HDB = decltype(hdb)::value;
            constexpr size_t smem_kv = flash_bwd_kv_smem_bytes(HDB), smem_q = flash_bwd_q_smem_bytes(HDB);
            static const bool smem_kv_ok = flash_allow_smem(op, flash_backward_kv_kernel<T, G, kAdd, HDB>, smem_kv);
            (void)smem_kv_ok;
            flash_backward_kv_kernel<T, G, kAdd, HDB>
                <<<kv_blocks, kFlashThreads, smem_kv, ctx.stream>>>(dK, dV, dout, lse, D, Q, K, V, a);
            CUDA_CHECK_LAST();
            static const bool smem_q_ok = flash_allow_smem(op, flash_backward_q_kernel<T, G, kAdd, HDB>, smem_q);
            (void)smem_q_ok;
            flash_backward_q_kernel<T, G, kAdd, HDB>
                <<<q_blocks, kFlashThreads, smem_q, ctx.stream>>>(dQ, dout, lse, D, Q, K, V, a);
            CUDA_CHECK_LAST();
        });
    }
}

// The kernels keep positions block-local in ints (flash_diagonal, q + dg): a sequence past 2^30 positions is
// refused rather than wrapped.
static void flash_check_positions(const char* op, const FlashArgs& a) {
    if (a.S_total > (int64_t)1 << 30)
        mm_fatal("%s: sequence of %lld positions: the CUDA kernels take at most 2^30", op, (long long)a.S_total);
}

// Ring attention's blocks on the GPU: the kernels above with a block's positions, widths and f32 outputs (o
// written; dQ, dK, dV added into).
template <class T>
static void flash_block_forward_cuda(Ctx& ctx, const char* op, float* o, float* lse, const T* Q, const T* K,
                                     const T* V, const FlashArgs& a) {
    flash_check_positions(op, a);
    flash_forward_cuda<T, float>(ctx, op, o, lse, Q, K, V, a);
}
template <class T>
static void flash_block_backward_cuda(Ctx& ctx, const char* op, float* dq, float* dk, float* dv, const T* dout,
                                      const T* out, const float* lse, const float* D, const T* Q, const T* K,
                                      const T* V, const FlashArgs& a) {
    flash_check_positions(op, a);
    flash_backward_cuda<true, T, float>(ctx, op, dq, dk, dv, dout, out, lse, D, Q, K, V, a);
}

size_t flash_attention_scratch_bytes(int S, int B, int NH) { return (size_t)S * B * NH * sizeof(float); }

// ---------------------------------------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------------------------------------

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
    const int64_t C = (int64_t)sh.NH * sh.HD;  // K starts C columns after Q, V 2C
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA)
            flash_forward_cuda<T, T>(ctx, op, out.as<T>(), lse.as<float>(), qkv.as<T>(), qkv.as<T>() + C,
                                     qkv.as<T>() + 2 * C, a);
        else
            flash_forward_cpu<T, T>(out.as<T>(), lse.as<float>(), qkv.as<T>(), qkv.as<T>() + C, qkv.as<T>() + 2 * C, a);
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
    const int64_t C = (int64_t)sh.NH * sh.HD;  // K starts C columns after Q, V 2C
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA)
            flash_backward_cuda<false, T, T>(ctx, op, dqkv.as<T>(), dqkv.as<T>() + C, dqkv.as<T>() + 2 * C,
                                             dout.as<T>(), out.as<T>(), lse.as<float>(), nullptr, qkv.as<T>(),
                                             qkv.as<T>() + C, qkv.as<T>() + 2 * C, a);
        else
            flash_backward_cpu<false, T, T>(dqkv.as<T>(), dqkv.as<T>() + C, dqkv.as<T>() + 2 * C, dout.as<T>(),
                                            out.as<T>(), lse.as<float>(), nullptr, qkv.as<T>(), qkv.as<T>() + C,
                                            qkv.as<T>() + 2 * C, a);
    });
}

void flash_attention_rowdot(Ctx& ctx, Tensor D, Tensor dout, Tensor out, const AttnShape& sh) {
    const char* op = "flash_attention_rowdot";
    if (sh.S <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape S=%d B=%d NH=%d HD=%d", op, sh.S, sh.B, sh.NH, sh.HD);
    const int64_t n = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    check_tensor(ctx, out, out.dtype, n, op, "out");
    check_tensor(ctx, dout, out.dtype, n, op, "dout");
    check_tensor(ctx, D, DType::F32, (int64_t)sh.B * sh.NH * sh.S, op, "D");
    OpScope scope(ctx, op, 2.0 * n);
    const FlashArgs a = flash_args(sh, 0.f, 0, 0);
    MM_DISPATCH_ACT(out.dtype, {
        if (ctx.device == Device::CUDA)
            flash_rowdot_cuda<T>(ctx, op, D.as<float>(), dout.as<T>(), out.as<T>(), a);
        else
            flash_rowdot_cpu<T>(D.as<float>(), dout.as<T>(), out.as<T>(), a);
    });
}

FlashCore flash_attention_core() { return {flash_attention_forward, flash_attention_backward}; }

// ---------------------------------------------------------------------------------------------------------
// The blocks of ring attention (flash_attention.h, parallel/context_parallel.cu)
// ---------------------------------------------------------------------------------------------------------

static FlashArgs block_args(const AttnBlock& blk, float p, uint64_t seed, uint32_t stream) {
    FlashArgs a = flash_args(blk.attn, p, seed, stream);
    a.S = blk.Sq;
    a.Sk = blk.Sk;
    a.q_pos = blk.q_pos;
    a.k_pos = blk.k_pos;
    a.S_total = blk.S_total;
    a.q_width = blk.q_width;
    a.kv_width = blk.kv_width;
    a.lse_ld = blk.lse_ld;
    return a;
}

static void check_block(const char* op, const AttnBlock& b, float p) {
    const AttnShape& sh = b.attn;
    if (b.Sq <= 0 || b.Sk <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape Sq=%d Sk=%d B=%d NH=%d HD=%d", op, b.Sq, b.Sk, sh.B, sh.NH, sh.HD);
    if (b.q_pos < 0 || b.k_pos < 0 || b.q_pos + b.Sq > b.S_total || b.k_pos + b.Sk > b.S_total)
        mm_fatal("%s: positions q %lld+%d, k %lld+%d outside the sequence of %lld", op, (long long)b.q_pos, b.Sq,
                 (long long)b.k_pos, b.Sk, (long long)b.S_total);
    if (b.q_width < sh.NH * sh.HD || b.kv_width < sh.NH * sh.HD || b.lse_ld < b.Sq)
        mm_fatal("%s: row widths q %d, kv %d or lse stride %lld smaller than the block", op, b.q_width, b.kv_width,
                 (long long)b.lse_ld);
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
}

// A view that must hold `rows` rows of `width` elements, the last one `used` elements long.
static void check_rows(const Ctx& ctx, const Tensor& t, DType dt, int64_t rows, int64_t width, int64_t used,
                       const char* op, const char* name) {
    check_tensor(ctx, t, dt, t.n, op, name);
    if (t.n < (rows - 1) * width + used)
        mm_fatal("%s: %s holds %lld elements, the block needs %lld", op, name, (long long)t.n,
                 (long long)((rows - 1) * width + used));
}

static void check_lse(const Ctx& ctx, const Tensor& t, const AttnBlock& b, const char* op, const char* name) {
    check_rows(ctx, t, DType::F32, (int64_t)b.attn.B * b.attn.NH, b.lse_ld, b.Sq, op, name);
}

// The views every block op reads: Q, K, V (the activation dtype of q) and the lse.
static void check_block_operands(const char* op, const Ctx& ctx, const AttnBlock& b, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& lse) {
    const int64_t C = (int64_t)b.attn.NH * b.attn.HD, rows_q = (int64_t)b.Sq * b.attn.B, rows_k = (int64_t)b.Sk * b.attn.B;
    check_rows(ctx, q, q.dtype, rows_q, b.q_width, C, op, "q");
    check_rows(ctx, k, q.dtype, rows_k, b.kv_width, C, op, "k");
    check_rows(ctx, v, q.dtype, rows_k, b.kv_width, C, op, "v");
    check_lse(ctx, lse, b, op, "lse");
}

double flash_block_pairs(const AttnBlock& b) {
    // Query q (block-local) sees the keys up to its global position: clamp(q_pos + q − k_pos + 1, 0, Sk).
    double pairs = 0;
    for (int q = 0; q < b.Sq; q++) pairs += (double)std::clamp<int64_t>(b.q_pos + q - b.k_pos + 1, 0, b.Sk);
    return pairs;
}

// The log-sum-exp rule for one query's two partial results, in fp32, shared by the CPU loop and the CUDA
// kernels: lse' = log(e^l + e^lb) = mx + log(e^(l − mx) + e^(lb − mx)), mx = max(l, lb), and the two weights
// e^(l − lse'), e^(lb − lse') of the outputs. −inf (no key seen yet) gets weight 0; both −inf stay −inf.
__host__ __device__ inline void flash_merge_weights(float l, float lb, float* w, float* wb, float* merged) {
    const float mx = l > lb ? l : lb;
    if (mx == -INFINITY) {
        *w = 0.f, *wb = 0.f, *merged = -INFINITY;
        return;
    }
    const float el = expf(l - mx), eb = expf(lb - mx), sum = el + eb;
    *merged = mx + logf(sum);
    *w = el / sum;
    *wb = eb / sum;
}

// o' = w·o + wb·o_blk, one thread per element of o; lse is rewritten afterwards (flash_merge_lse_kernel), so
// that every thread reads the old lse.
__global__ void flash_merge_out_kernel(float* o, const float* lse, const float* ob, const float* lb, int Sq, int B,
                                       int NH, int HD, int64_t lse_ld) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, C = (int64_t)NH * HD;
    if (i >= (int64_t)Sq * B * C) return;
    const int64_t row = i / C;
    const int n = (int)((i % C) / HD), b = (int)(row % B), q = (int)(row / B);
    const int64_t at = ((int64_t)b * NH + n) * lse_ld + q;
    float w, wb, merged;
    flash_merge_weights(lse[at], lb[at], &w, &wb, &merged);
    o[i] = w * o[i] + wb * ob[i];
}
__global__ void flash_merge_lse_kernel(float* lse, const float* lb, int Sq, int BNH, int64_t lse_ld) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)Sq * BNH) return;
    const int64_t at = (i / Sq) * lse_ld + i % Sq;
    float w, wb;
    flash_merge_weights(lse[at], lb[at], &w, &wb, &lse[at]);
}

void flash_block_merge(Ctx& ctx, Tensor o, Tensor lse, Tensor o_blk, Tensor lse_blk, const AttnBlock& blk) {
    const char* op = "flash_block_merge";
    check_block(op, blk, 0.f);
    const int Sq = blk.Sq, B = blk.attn.B, NH = blk.attn.NH, HD = blk.attn.HD;
    const int64_t C = (int64_t)NH * HD, n = (int64_t)Sq * B * C;
    check_rows(ctx, o, DType::F32, n, 1, 1, op, "o");
    check_rows(ctx, o_blk, DType::F32, n, 1, 1, op, "o_blk");
    check_lse(ctx, lse, blk, op, "lse");
    check_lse(ctx, lse_blk, blk, op, "lse_blk");
    OpScope scope(ctx, op, 3.0 * n);
    float *O = o.as<float>(), *L = lse.as<float>();
    const float *Ob = o_blk.as<float>(), *Lb = lse_blk.as<float>();
    if (ctx.device == Device::CUDA) {
        const int threads = 256;
        flash_merge_out_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, ctx.stream>>>(O, L, Ob, Lb, Sq, B,
                                                                                                    NH, HD, blk.lse_ld);
        CUDA_CHECK_LAST();
        const int64_t rows = (int64_t)Sq * B * NH;
        flash_merge_lse_kernel<<<(unsigned)((rows + threads - 1) / threads), threads, 0, ctx.stream>>>(L, Lb, Sq, B * NH,
                                                                                                     blk.lse_ld);
        CUDA_CHECK_LAST();
        return;
    }
#pragma omp parallel for if (cpu_gemm_single_threaded())
    for (int64_t bn = 0; bn < (int64_t)B * NH; bn++) {
        const int b = (int)(bn / NH), h = (int)(bn % NH);
        for (int q = 0; q < Sq; q++) {
            const int64_t at = bn * blk.lse_ld + q;
            float w, wb, merged;
            flash_merge_weights(L[at], Lb[at], &w, &wb, &merged);
            float* orow = O + ((int64_t)q * B + b) * C + (int64_t)h * HD;
            const float* brow = Ob + ((int64_t)q * B + b) * C + (int64_t)h * HD;
#pragma omp simd
            for (int c = 0; c < HD; c++) orow[c] = w * orow[c] + wb * brow[c];
            L[at] = merged;
        }
    }
}

void flash_block_forward(Ctx& ctx, Tensor o, Tensor lse, Tensor q, Tensor k, Tensor v, const AttnBlock& blk, float p,
                         uint64_t seed, uint32_t stream) {
    const char* op = "flash_block_forward";
    check_block(op, blk, p);
    const AttnShape& sh = blk.attn;
    const int64_t C = (int64_t)sh.NH * sh.HD, rows_q = (int64_t)blk.Sq * sh.B;
    check_block_operands(op, ctx, blk, q, k, v, lse);
    check_rows(ctx, o, DType::F32, rows_q * C, 1, 1, op, "o");
    // QKᵀ and P·V over the block's visible pairs
    OpScope scope(ctx, op, 2 * 2.0 * sh.B * sh.NH * flash_block_pairs(blk) * sh.HD);
    const FlashArgs a = block_args(blk, p, seed, stream);
    MM_DISPATCH_ACT(q.dtype, {
        if (ctx.device == Device::CUDA)
            flash_block_forward_cuda<T>(ctx, op, o.as<float>(), lse.as<float>(), q.as<T>(), k.as<T>(), v.as<T>(), a);
        else
            flash_forward_cpu<T, float>(o.as<float>(), lse.as<float>(), q.as<T>(), k.as<T>(), v.as<T>(), a);
    });
}

void flash_block_backward(Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, int dkv_width, Tensor dout, Tensor out,
                          Tensor lse, Tensor q, Tensor k, Tensor v, const AttnBlock& blk, float p, uint64_t seed,
                          uint32_t stream, Tensor D) {
    const char* op = "flash_block_backward";
    check_block(op, blk, p);
    const AttnShape& sh = blk.attn;
    const int64_t C = (int64_t)sh.NH * sh.HD, rows_q = (int64_t)blk.Sq * sh.B, rows_k = (int64_t)blk.Sk * sh.B;
    if (dkv_width < C) mm_fatal("%s: dK, dV row width %d below NH*HD = %lld", op, dkv_width, (long long)C);
    check_block_operands(op, ctx, blk, q, k, v, lse);
    check_rows(ctx, out, q.dtype, rows_q * C, 1, 1, op, "out");
    check_rows(ctx, dout, q.dtype, rows_q * C, 1, 1, op, "dout");
    check_rows(ctx, dq, DType::F32, rows_q * C, 1, 1, op, "dq");
    check_rows(ctx, dk, DType::F32, rows_k, dkv_width, C, op, "dk");
    check_rows(ctx, dv, DType::F32, rows_k, dkv_width, C, op, "dv");
    OpScope scope(ctx, op, 5 * 2.0 * sh.B * sh.NH * flash_block_pairs(blk) * sh.HD);
    if (D.data) check_lse(ctx, D, blk, op, "D");  // the caller's, laid out like lse
    FlashArgs a = block_args(blk, p, seed, stream);
    a.dq_width = (int)C;
    a.dkv_width = dkv_width;
    a.d_ld = blk.lse_ld;
    const float* Dp = D.data ? D.as<float>() : nullptr;
    MM_DISPATCH_ACT(q.dtype, {
        if (ctx.device == Device::CUDA)
            flash_block_backward_cuda<T>(ctx, op, dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<T>(),
                                         out.as<T>(), lse.as<float>(), Dp, q.as<T>(), k.as<T>(), v.as<T>(), a);
        else
            flash_backward_cpu<true, T, float>(dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<T>(),
                                               out.as<T>(), lse.as<float>(), Dp, q.as<T>(), k.as<T>(), v.as<T>(), a);
    });
}
