// flash_attention_cpu.cu — flash attention's fast CPU path: the algorithm of flash_attention.cu in tiles of
// fp32 GEMMs and SIMD row loops, forward and backward, for the whole sequence and for ring attention's blocks
// (flash_attention_call.h). The plain math it computes fast: layers/reference/flash_attention.h
#include "flash_attention_call.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include "fast_exp.h"
#include "matmul.h"
#include "vec8.h"

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
MM_CPU_LOOP void flash_forward_cpu(O* out, float* lse, const T* Qm, const T* Km, const T* Vm, const FlashArgs& a) {
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
MM_CPU_LOOP void flash_rowdot_cpu(float* D, const T* dout, const T* out, const FlashArgs& a) {
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
MM_CPU_LOOP void flash_backward_cpu(G* dQm, G* dKm, G* dVm, const T* dout, const T* out, const float* lse,
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

// The calls flash_attention.cu and flash_attention_blocks.cu make (flash_attention_call.h).
template void flash_forward_cpu<float, float>(float*, float*, const float*, const float*, const float*, const FlashArgs&);
template void flash_forward_cpu<bf16, bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*, const FlashArgs&);
template void flash_forward_cpu<bf16, float>(float*, float*, const bf16*, const bf16*, const bf16*, const FlashArgs&);
template void flash_backward_cpu<false, float, float>(float*, float*, float*, const float*, const float*, const float*,
                                                      const float*, const float*, const float*, const float*,
                                                      const FlashArgs&);
template void flash_backward_cpu<false, bf16, bf16>(bf16*, bf16*, bf16*, const bf16*, const bf16*, const float*,
                                                    const float*, const bf16*, const bf16*, const bf16*, const FlashArgs&);
template void flash_backward_cpu<true, float, float>(float*, float*, float*, const float*, const float*, const float*,
                                                     const float*, const float*, const float*, const float*,
                                                     const FlashArgs&);
template void flash_backward_cpu<true, bf16, float>(float*, float*, float*, const bf16*, const bf16*, const float*,
                                                    const float*, const bf16*, const bf16*, const bf16*, const FlashArgs&);
template void flash_rowdot_cpu<float>(float*, const float*, const float*, const FlashArgs&);
template void flash_rowdot_cpu<bf16>(float*, const bf16*, const bf16*, const FlashArgs&);
