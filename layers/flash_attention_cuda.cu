// flash_attention_cuda.cu — flash attention's CUDA kernels in fp32: the algorithm of flash_attention.cu, forward
// and backward, for the whole sequence and for ring attention's blocks (flash_attention_call.h). A bf16 call goes
// on to the tensor-core kernels (flash_attention_tc.cu). The plain math: layers/reference/flash_attention.h
#include "flash_attention_call.h"
#include "flash_attention.h"
#include "flash_attention_tc.h"

#include <cmath>
#include <type_traits>
#include "fast_exp.h"
#include "vec8.h"

#include "warp_reduce.cuh"

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
void flash_forward_cuda(Ctx& ctx, const char* op, O* out, float* lse, const T* Q, const T* K, const T* V,
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
void flash_rowdot_cuda(Ctx& ctx, const char* op, float* D, const T* dout, const T* out, const FlashArgs& a) {
    const int64_t rows = (int64_t)a.B * a.NH * a.S;
    const int64_t dot_blocks = (rows + kFlashWarps - 1) / kFlashWarps;
    if (dot_blocks > INT32_MAX) mm_fatal("%s: %lld blocks in one launch (at most 2^31 - 1)", op, (long long)dot_blocks);
    flash_dot_kernel<T><<<(unsigned)dot_blocks, kFlashThreads, 0, ctx.stream>>>(D, dout, out, a);
    CUDA_CHECK_LAST();
}

// Dg: the queries' D (rows a.d_ld apart), or null: computed first.
template <bool kAdd, class T, class G>
void flash_backward_cuda(Ctx& ctx, const char* op, G* dQ, G* dK, G* dV, const T* dout, const T* out,
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

// The calls flash_attention.cu and flash_attention_blocks.cu make (flash_attention_call.h).
template void flash_forward_cuda<float, float>(Ctx&, const char*, float*, float*, const float*, const float*,
                                               const float*, const FlashArgs&);
template void flash_forward_cuda<bf16, bf16>(Ctx&, const char*, bf16*, float*, const bf16*, const bf16*, const bf16*,
                                             const FlashArgs&);
template void flash_forward_cuda<bf16, float>(Ctx&, const char*, float*, float*, const bf16*, const bf16*, const bf16*,
                                              const FlashArgs&);
template void flash_backward_cuda<false, float, float>(Ctx&, const char*, float*, float*, float*, const float*,
                                                       const float*, const float*, const float*, const float*,
                                                       const float*, const float*, FlashArgs);
template void flash_backward_cuda<false, bf16, bf16>(Ctx&, const char*, bf16*, bf16*, bf16*, const bf16*, const bf16*,
                                                     const float*, const float*, const bf16*, const bf16*, const bf16*,
                                                     FlashArgs);
template void flash_backward_cuda<true, float, float>(Ctx&, const char*, float*, float*, float*, const float*,
                                                      const float*, const float*, const float*, const float*,
                                                      const float*, const float*, FlashArgs);
template void flash_backward_cuda<true, bf16, float>(Ctx&, const char*, float*, float*, float*, const bf16*,
                                                     const bf16*, const float*, const float*, const bf16*, const bf16*,
                                                     const bf16*, FlashArgs);
template void flash_rowdot_cuda<float>(Ctx&, const char*, float*, const float*, const float*, const FlashArgs&);
template void flash_rowdot_cuda<bf16>(Ctx&, const char*, float*, const bf16*, const bf16*, const FlashArgs&);
