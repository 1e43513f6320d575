// flash_attention_tc.cu — flash attention on tensor cores: bf16, forward and backward (flash_attention_tc.h).
// The plain math this file computes fast: layers/reference/flash_attention.h
//
// The algorithm is layers/flash_attention.cu's (read its header first): FlashAttention-2 (Dao 2023), with the
// online softmax, lse = m + log l kept per query, P = e^{x − lse} rebuilt in the backward pass with
// D = rowsum(dO ⊙ O), and the keep bits of dropout drawn from Philox at the global index of each (sequence,
// head, query, key). What changes here is who does the multiplications: every product of two tiles is a chain
// of mma.sync.m16n8k16 (bf16 operands, fp32 accumulators) on the tensor cores, fed from shared memory by
// ldmatrix; the tiles arrive in shared memory by cp.async (layers/mma.cuh: the wrappers and their layouts).
//
// Three kernels, one block of 4 warps (128 threads) each; block x is (tile rank, sequence, head) as in
// flash_attention.cu, the longest rows first:
//  - forward: a block owns 64 queries, warp w the 16 queries 16w .. 16w + 15 (FlashAttention-2's split of Q
//    over the warps, §3.3: no warp waits for another's partial sums). Per key tile of 64: S = Q·Kᵀ, the online
//    softmax in fp32 registers, O += P·V. Key tiles wholly above the causal diagonal are never loaded; a warp
//    whose queries all precede a tile skips its products.
//  - dK, dV: a block owns 64 keys, warp w 16 of them, and walks the query tiles from the first one that sees
//    its keys to the end: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, then P, the keep bits and dS in registers, then
//    dV += P_dᵀ·dO and dK += dSᵀ·Q. dK and dV stay in registers until the end: written once, by their owner.
//  - dQ: a block owns 64 queries, warp w 16 of them, and walks the key tiles up to the diagonal: S and dP again,
//    then dQ += dS·K. FlashAttention-2 adds dQ from the dK-dV kernel with float atomics, whose order varies from
//    run to run; here dQ has one owner, which sums its terms in a fixed order, so two runs give the same bits.
//    The price: S = Q·Kᵀ and dP = dO·Vᵀ are computed twice, 7 tile products instead of 5 (1.4× the backward's
//    tensor-core work; the non-deterministic alternative is the atomics).
// D = rowsum(dO ⊙ O) comes from flash_attention.cu's own kernel, once per layer (ring attention: once for all
// its blocks), before these.
//
// The fragments. A warp's product of a 16-row tile gives C fragments: lane l (g = l >> 2, t = l & 3) holds, of
// each 16 × 8 block nt, c[nt][0..1] = row g, columns 8nt + 2t, 2t + 1 and c[nt][2..3] = row g + 8, the same
// columns. So a row of S lives in the four lanes of a group: its max and sum are two xor-shuffles (quad_max,
// quad_sum), and two neighbouring blocks of a C fragment, rounded to bf16, are an A fragment of the next
// product as they are (warp_mma_pm). Every kernel below names the rows and columns of its fragments where it
// touches them.
//
// Design choices, what each buys, and the source of its figure (none of this is measured on a GPU yet:
// bench/PERF_NOTES.md, "Flash attention on tensor cores", says what it should reach and why):
//  - Tiles of 64 queries × 64 keys, 4 warps. FlashAttention-2 §3.3 ("Tuning block sizes"): blocks of {64, 128} ×
//    {64, 128} by head dimension and shared memory, 4 or 8 warps. 64 × 64 at every head dimension keeps one code
//    path; 128-query tiles would halve the reloads of K and V per query in the forward and are the first thing to
//    try on a GPU. The dK-dV kernel steps over the queries 64 at a time, 32 at HDB = 128 (its registers, below).
//  - Shared rows padded by 16 bytes (HDB + 8 bf16), no swizzle. ldmatrix reads 8 rows of 16 bytes at a time, and
//    shared memory has 32 banks of 4 bytes (CUDA C++ Programming Guide, "Shared Memory"). Rows of 2·HDB bytes (128
//    or 256) would all start on the same bank: an 8-way conflict (4-way for 64). With 16 bytes more, row r starts
//    4r (mod 32) banks further for HDB = 64 and 128, 20r for 32: the 8 rows cover the 32 banks once. It costs 8/HDB of
//    the tile (12.5% at HDB = 64); an XOR swizzle of the 16-byte chunks would cost nothing but is harder to read.
//  - Double buffering with cp.async (sm_80 and later): the copy of tile j + 1 is issued before tile j's products,
//    so the loads from global memory overlap the mma's, and the bytes do not pass through registers (PTX ISA,
//    "cp.async"). Two buffers, one cp.async group per tile, wait_group 1 (the newest group may still be in
//    flight), then __syncthreads so that every thread's copies are seen; a second __syncthreads at the end of the
//    tile keeps the next copy from overwriting a buffer another warp still reads. When HD, a row width or a
//    pointer is not a multiple of 16 bytes (cp.async copies aligned 16-byte chunks), plain loads and stores fill
//    the same tiles (stage_rows): the same numbers, without the overlap.
//  - Shared memory per block: forward 25.0 / 45.0 / 85.0 KB at HDB = 32 / 64 / 128, dK-dV 31.0 / 55.0 / 68.5 KB,
//    dQ 30.0 / 54.0 / 102.0 KB; above 48 KB a launch opts in. sm_80 (A100) allows 163 KB per block, sm_86 and sm_89
//    99 KB (the dQ kernel at HDB = 128 is refused there, naming the bytes), sm_90 227 KB (Programming Guide,
//    "Technical Specifications per Compute Capability"). At HDB = 128 two blocks fit an H100/H200 SM (228 KB),
//    but one forward or dQ block an A100 SM (164 KB): 4 warps to hide the latencies.
//  - The register budget, per thread. Accumulators: forward O = HDB/2 floats plus S, 32 (96 at HDB = 128); dK-dV
//    2 × HDB/2 for dK and dV plus Sᵀ and dPᵀ, 2 × QT/2 (160 at HDB = 128, QT = 32: with QT = 64 ptxas took all
//    255 registers and spilled); dQ HDB/2 plus S and dP, 64. The fragments of Q, K, V and dO are not held across
//    tiles but read again from shared memory by ldmatrix for each product (FlashAttention-2 keeps Q in registers),
//    which leaves their HDB/4 registers to the accumulators. __launch_bounds__(128, 2): two blocks per SM, so
//    ptxas may use up to 255 registers (without the 2, it held sm_80's counts at 96, 128 or 168 and spilled up to
//    36 bytes). ptxas -v (CUDA 13), registers per thread, no spill in any instantiation:
//                 HDB = 32     HDB = 64     HDB = 128    (sm_80 / sm_90; f32 and bf16 outputs alike)
//      forward    142 / 154    158 / 168    190 / 203
//      dK-dV      174 / 186    228 / 220    242 / 240
//      dQ         180 / 188    206 / 206    238 / 238
//    32 query rows per warp (two m16 tiles, FlashAttention-2's split) would read each K and V fragment once for
//    two mma's, but doubles O and S: 64 + 128 fp32 accumulators at HDB = 128 alone, past the 255 registers.
//  - The instruction budget: a warp issues one instruction per clock and an HMMA.16816 every 4 clocks at the
//    tensor cores' peak, so the instructions around each mma bound the rate. bench/sass_budget.py counts them on
//    the sm_90 SASS (bench/PERF_NOTES.md has the counts). Three things keep them down:
//     - the mask only where it can hide a key: a tile that reaches past the causal diagonal or an end of the
//       block (tc_tile_unmasked). The others, most tiles of a long sequence, compare nothing;
//     - 2^x by ex2.approx.ftz (layers/mma.cuh) on scores pre-multiplied by log2(e)/√HD, one fma per element
//       (FlashAttention-2 does the same; exp2f without -ftz adds a guard for subnormals around the same
//       instruction). The scalar kernels and the CPU use e^x, so the paths agree to fp32 rounding, not bit for
//       bit;
//     - the keep bits of dropout from Philox blocks shared across the lanes that use them (a block is 4
//       consecutive indices): tc_keep_rows for the forward's and dQ's fragments (8 or 9 calls per lane per tile),
//       tc_keep_cols for dK-dV's, whose neighbouring indices sit in lanes 4 apart (4 or 5 calls per 8 columns).
//       The bits are dropout_random's at each global index, as before.
#include "flash_attention_tc.h"

#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include "attention.h"
#include "mma.cuh"  // layers/mma.cuh; the emulated build's own copy replaces it (test/emulator/include/mma.cuh)
#include "philox.h"

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 16;                   // one m16 tile of the mma per warp
constexpr int kQTile = kWarps * kRowsPerWarp;      // 64 queries per block (forward, dQ)
constexpr int kKTile = 64;                         // 64 keys per tile (forward, dQ) and per block (dK, dV)
// Queries per step of the dK-dV kernel: 64, and 32 at HDB = 128, where dK and dV alone take 128 registers of
// the 255 a thread can have (with 64, ptxas -v showed 255 registers and spills there).
constexpr int bwd_q_tile(int HDB) { return HDB >= 128 ? 32 : 64; }
constexpr int kPad = 8;                            // bf16 after each row of a shared tile (16 bytes)
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------------------
// Warp-level products of tiles in shared memory (bf16, row-major, rows LD elements apart)
// ---------------------------------------------------------------------------------------------------------

// c (16 × 8·NT, C fragments) = A (16 × KD) · Bᵀ, B (8·NT × KD): the score-like products S = Q·Kᵀ, dP = dO·Vᵀ, and
// the transposed Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ. Both operands are rows of a tile: A's 16 rows start at `A`, B's 8·NT rows
// at `B`. Per 16 columns of KD: one ldmatrix.x4 gives the A fragment (lane l points at row l & 15, column
// 8·(l >> 4)); per pair of n-blocks one ldmatrix.x4 gives two B fragments — B's rows are the columns of Bᵀ, so an
// 8 × 8 block of B read without .trans is already the B operand (mma.cuh): matrix j of lane l is rows
// 16np + 8·(j >> 1) .. +7, columns 8·(j & 1) .. +7, i.e. lane l points at row 16np + 8·(l >> 4) + (l & 7),
// column k0 + 8·((l >> 3) & 1); registers 0, 1 are block 2np's b[0], b[1], registers 2, 3 block 2np + 1's.
template <int NT, int KD, int LD>
__device__ inline void warp_mma_abt(float c[NT][4], const bf16* A, const bf16* B, int lane) {
    static_assert(NT % 2 == 0 && KD % 16 == 0, "whole pairs of n-blocks, whole k-steps of 16");
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) c[nt][i] = 0.f;
#pragma unroll
    for (int k0 = 0; k0 < KD; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, A + (lane & 15) * LD + k0 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, B + (16 * np + (lane >> 4) * 8 + (lane & 7)) * LD + k0 + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(c[2 * np], a, b);
            mma_bf16_16816(c[2 * np + 1], a, b + 2);
        }
    }
}

// The 16 bits of a bf16, in the lower half of a word.
__device__ inline uint32_t bf16_bits(bf16 v) {
    uint16_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}
// Two fp32 values as one register of two bf16, round to nearest even (the lower index in the lower half).
__device__ inline uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

// c (16 × 8·NT) += P (16 × 16·KT) · M (16·KT × 8·NT): the products whose left side is a tile just computed in
// registers — O += P·V, dV += P_dᵀ·dO, dK += dSᵀ·Q, dQ += dS·K. P is given as C fragments p[2·KT] (fp32); for
// k-step kk, blocks 2kk and 2kk + 1 side by side are A's 16 × 16 tile, and their registers are A's fragment as
// they are: a[0] = p[2kk][0..1] (row g), a[1] = p[2kk][2..3] (row g + 8), a[2] = p[2kk+1][0..1], a[3] =
// p[2kk+1][2..3] (columns + 8), rounded to bf16. M is a row-major tile whose rows are the k index (keys for V,
// queries for dO and Q): its B fragment is an 8 × 8 block read with .trans. Matrix j of lane l is rows
// 16kk + 8·(j & 1) .. +7, columns 16np + 8·(j >> 1) .. +7: registers 0, 1 are block 2np's b[0], b[1].
template <int KT, int NT, int LD>
__device__ inline void warp_mma_pm(float c[NT][4], const float p[2 * KT][4], const bf16* M, int lane) {
    static_assert(NT % 2 == 0, "whole pairs of n-blocks");
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        const uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                               pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                               pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, M + (16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + 16 * np + (lane >> 4) * 8);
            mma_bf16_16816(c[2 * np], a, b);
            mma_bf16_16816(c[2 * np + 1], a, b + 2);
        }
    }
}

// The max and the sum of a fragment row over its group of four lanes (xor 1, then xor 2: a fixed order, the
// same bits in all four). A shuffle exchanges values only; no memory is ordered by it.
__device__ inline float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, 1));
    return fmaxf(v, __shfl_xor_sync(kFullWarp, v, 2));
}
__device__ inline float quad_sum(float v) {
    v += __shfl_xor_sync(kFullWarp, v, 1);
    return v + __shfl_xor_sync(kFullWarp, v, 2);
}

// ---------------------------------------------------------------------------------------------------------
// Tiles into shared memory, the block's coordinates, the keep bits
// ---------------------------------------------------------------------------------------------------------

// Rows r0 .. r0 + kRows − 1 of one (sequence, head) matrix m (row r at m + r·ld, HD elements) into a shared tile
// of kRows rows of HDB + kPad bf16. Rows at or past `valid` and columns HD .. HDB − 1 become zeros, so that
// the products run over whole tiles (a zero column adds nothing to a dot product; a zero key row is masked).
// Thread i moves 16-byte chunks i, i + 128, ... (8 bf16: consecutive threads, consecutive chunks of a row).
// async: by cp_async_16, which the caller commits and waits for; else by plain loads and stores.
template <int HDB, int kRows>
__device__ inline void stage_rows(bf16* tile, const bf16* m, int64_t ld, int r0, int valid, int HD, bool async) {
    constexpr int kChunks = HDB / 8;
    const bf16* first = m + (int64_t)r0 * ld;
    for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
        const int r = i / kChunks, c = (i % kChunks) * 8;
        bf16* dst = tile + r * (HDB + kPad) + c;
        if (async) {
            const bool in = r < valid && c < HD;  // HD is a multiple of 8 here: a chunk is all in or all out
            cp_async_16(dst, in ? first + (int64_t)r * ld + c : first, in ? 16 : 0);
        } else {
            uint32_t w[4];  // the 8 values, two to a word (lower index in the lower half), then one 16-byte store
#pragma unroll
            for (int e = 0; e < 8; e += 2) {
                const bf16 zero = from_f32<bf16>(0.f);
                const bf16 lo = r < valid && c + e < HD ? first[(int64_t)r * ld + c + e] : zero;
                const bf16 hi = r < valid && c + e + 1 < HD ? first[(int64_t)r * ld + c + e + 1] : zero;
                w[e / 2] = bf16_bits(lo) | (bf16_bits(hi) << 16);
            }
            *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}
// Entries r0 .. r0 + n − 1 of an f32 row (lse or D) into shared memory, 0 past `valid`: plain loads.
__device__ inline void stage_f32(float* dst, const float* v, int r0, int n, int valid) {
    for (int r = threadIdx.x; r < n; r += kThreads) dst[r] = r < valid ? v[r0 + r] : 0.f;
}
// lse·log2 e of a query in the backward's units (2^{x·sl2 − lse·log2 e} = e^{x·scale − lse}): 0 for a query past
// the end, or one that sees no key (lse = −inf), whose scores are all masked to −inf: 2^{−inf − 0} = 0, where
// −inf − (−inf) would be NaN.
__device__ inline float tc_lse2(const float* lse, int q, int valid) {
    const float v = q < valid ? lse[q] : -INFINITY;
    return v == -INFINITY ? 0.f : v * kLog2e;
}

// What block x works on: its tile rank and (sequence b, head n), as in flash_attention.cu (the B·NH blocks of
// one rank consecutive, so that a launch starts with one rank's tiles for every head), and that pair's Q, K, V
// (row s at + s·B·width, as the layer's [S·B, width] matrices) and row of lse and D.
struct TcBlock {
    int rank, b, n;
    int64_t bn;  // b·NH + n: the row of lse and D
    const bf16 *Q, *K, *V;
};
__device__ inline TcBlock tc_block(const FlashTcArgs& a, const bf16* Qm, const bf16* Km, const bf16* Vm) {
    const int64_t BN = (int64_t)a.B * a.NH;
    TcBlock f;
    f.rank = (int)(blockIdx.x / BN);
    f.bn = blockIdx.x % BN;
    f.n = (int)(f.bn % a.NH);
    f.b = (int)(f.bn / a.NH);
    f.Q = Qm + (int64_t)f.b * a.q_width + (int64_t)f.n * a.HD;
    f.K = Km + (int64_t)f.b * a.kv_width + (int64_t)f.n * a.HD;
    f.V = Vm + (int64_t)f.b * a.kv_width + (int64_t)f.n * a.HD;
    return f;
}

// The global dropout index of (q, k) of this call (block-local query and key): attention.h's, so that every
// layout draws the single-rank run's bits.
__device__ inline uint64_t tc_keep_index(const FlashTcArgs& a, const TcBlock& blk, int q, int k) {
    return attn_dropout_index(a.b_offset + blk.b, a.head_offset + blk.n, a.NH_total, a.S_total, a.q_pos + q,
                              a.k_pos + k);
}
// Whether every query qr .. qr + nq − 1 of a warp sees every key kc .. kc + nk − 1 of a tile: all before the causal
// diagonal (the last key at most the first query's position, dg = q_pos − k_pos) and inside both ends of the
// block. Such a tile takes no per-element mask; the tiles on the diagonal and at the ends do. Uniform in a warp.
__device__ inline bool tc_tile_unmasked(int qr, int nq, int kc, int nk, int dg, int S, int Sk) {
    return kc + nk - 1 <= qr + dg && kc + nk <= Sk && qr + nq <= S;
}
// The masks of a warp's 16 × 64 score tile whose fragment rows are queries (forward, dQ): a score whose key comes
// after its query, or whose query or key is past the block's end, becomes −inf. Only a tile on the diagonal or at
// an end has any: the others take no compare.
__device__ inline void tc_mask_rows(float (&s)[8][4], int qw, int k0, int dg, const FlashTcArgs& a, int lane) {
    if (tc_tile_unmasked(qw, kRowsPerWarp, k0, kKTile, dg, a.S, a.Sk)) return;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = qw + g + 8 * (i >> 1), k = k0 + 8 * nt + 2 * t + (i & 1);
            if (!(k <= q + dg && k < a.Sk && q < a.S)) s[nt][i] = -INFINITY;
        }
}

// The keep bits of a warp's 16 × 64 tile whose fragment rows are queries and whose columns are keys (forward,
// dQ): bit 4nt + i of the result is element s[nt][i] of the lane's C fragments, query q = qw + g + 8(i >> 1), key
// k = k0 + 8nt + 2t + (i & 1). The same bits as dropout_random at each global index, with the Philox blocks shared
// by the lanes that use them: a row's 64 keys are 64 consecutive indices i0 .. i0 + 63 (i0 of key k0), so 16
// blocks, 17 when i0 is not a multiple of 4 (al = i0 & 3 ≠ 0). Rows g and g + 8 are 8·S_total indices apart: the
// same al. Step s (0 .. 7, and 8 when al ≠ 0) draws the blocks of relative keys 8s − al .. 8s + 7 − al of both
// rows, one block per lane of the group: lane t the block 2s + (t >> 1) of row g + 8(t & 1), whose 4 keep bits it
// places at bit 8(t & 1) + 4(t >> 1); two xor-shuffles give every lane of the group the step's 16 bits. Key
// 8nt + 2t + e is then bit al + 2t + e of steps nt and nt + 1 side by side. 8 or 9 Philox calls per lane per
// tile, where one call per pair of keys made 16 or more.
__device__ inline uint32_t tc_keep_rows(const FlashTcArgs& a, const TcBlock& blk, int qw, int k0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const uint64_t i0 = tc_keep_index(a, blk, qw + g + 8 * (t & 1), k0);  // the row this lane draws for
    const uint32_t al = (uint32_t)(i0 & 3);
    const uint64_t mine = (i0 >> 2) + (uint64_t)(t >> 1);
    uint32_t step[9];
#pragma unroll
    for (int st = 0; st < 9; st++) {
        uint32_t bits = 0;
        if (st < 8 || al != 0) {  // the 17th block only when the row's keys start inside a block
            const PhiloxOut o = dropout_block(a.seed, a.stream, mine + 2 * (uint64_t)st);
#pragma unroll
            for (int w = 0; w < 4; w++) bits |= (o.x[w] >= a.threshold ? 1u : 0u) << w;
        }
        bits <<= 8 * (t & 1) + 4 * (t >> 1);
        bits |= __shfl_xor_sync(kFullWarp, bits, 1);
        step[st] = bits | __shfl_xor_sync(kFullWarp, bits, 2);
    }
    uint32_t keep = 0;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t window = ((step[nt] >> (8 * h)) & 0xffu) | (((step[nt + 1] >> (8 * h)) & 0xffu) << 8);
            keep |= ((window >> (al + 2 * t)) & 3u) << (4 * nt + 2 * h);
        }
    return keep;
}

// The keep bits of the dK-dV kernel's tile, whose fragment rows are keys and whose columns are queries: bit
// 4nt + i is element s[nt][i], key kw + g + 8(i >> 1), query q0 + 8nt + 2t + (i & 1), nt < QN. Consecutive keys
// are lanes 4 apart: a query column's 16 keys are 16 consecutive indices held by the 8 lanes of one t, 4 blocks
// (5 when the column's al = index & 3 ≠ 0). Per 8 columns c (2nt + e), those 8 lanes draw the 32 blocks c, jb
// (jb < 4) in 4 rounds, lane g block 4c + jb = g + 8r in round r, then the fifth blocks (lane g that of column
// g) only where some al ≠ 0; each lane keeps its blocks' keep bits in one word (round r at bit 4r, the fifth
// at 16), and each element reads its bit from the lane that drew it with one shuffle. 4 or 5 Philox calls per
// 8 columns, where one call per element made 16.
template <int QN>
__device__ inline uint32_t tc_keep_cols(const FlashTcArgs& a, const TcBlock& blk, int q0, int kw, int lane) {
    static_assert(QN % 4 == 0, "whole groups of 8 columns");
    const int g = lane >> 2, t = lane & 3;
    uint32_t keep = 0;
#pragma unroll
    for (int c0 = 0; c0 < 2 * QN; c0 += 8) {
        auto column = [&](int c) { return tc_keep_index(a, blk, q0 + 8 * ((c0 + c) >> 1) + 2 * t + (c & 1), kw); };
        uint32_t bits = 0;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int p = g + 8 * r;  // column p >> 2, block p & 3
            const PhiloxOut o = dropout_block(a.seed, a.stream, (column(p >> 2) >> 2) + (uint64_t)(p & 3));
#pragma unroll
            for (int w = 0; w < 4; w++) bits |= (o.x[w] >= a.threshold ? 1u : 0u) << (4 * r + w);
        }
        const uint64_t i5 = column(g);
        if (i5 & 3) {  // column g's keys end inside a fifth block
            const PhiloxOut o = dropout_block(a.seed, a.stream, (i5 >> 2) + 4);
#pragma unroll
            for (int w = 0; w < 4; w++) bits |= (o.x[w] >= a.threshold ? 1u : 0u) << (16 + w);
        }
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int rel = (int)(column(c) & 3) + g + 8 * h, jb = rel >> 2;
                const int p = 4 * c + jb;  // jb < 4: lane p & 7, round p >> 3; jb = 4: lane c, bit 16
                const int src = jb < 4 ? (p & 7) : c, bit = (jb < 4 ? 4 * (p >> 3) : 16) + (rel & 3);
                const uint32_t v = __shfl_sync(kFullWarp, bits, 4 * src + t);
                keep |= ((v >> bit) & 1u) << (4 * ((c0 + c) >> 1) + 2 * h + (c & 1));
            }
    }
    return keep;
}

// A warp's 16 rows of C fragments c (16 × 8·NT) out to the matrix m (row r at m + r·ld): fragment row h of the
// lane (rows g and g + 8) is row r0 + g + 8h, times scale[h]; only the rows below `rows` and the columns below HD
// exist. kAdd: a ring block's f32 accumulators, to which the terms are added (this block is their only writer
// in the launch: a plain read-add-write), else written in G. Each lane writes its two neighbouring columns of
// each 8-column block; the four lanes of a group, 16 consecutive bytes of a bf16 row.
template <bool kAdd, int NT, class G>
__device__ inline void tc_store_rows(G* m, int64_t ld, int r0, int rows, int HD, const float c[NT][4],
                                     const float scale[2], int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + g + 8 * h;
        if (r >= rows) continue;
        G* row = m + (int64_t)r * ld;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int col = 8 * nt + 2 * t + e;
                if (col >= HD) continue;
                const float v = c[nt][2 * h + e] * scale[h];
                if constexpr (kAdd) row[col] += v;
                else row[col] = from_f32<G>(v);
            }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Forward: O and lse of 64 queries
// ---------------------------------------------------------------------------------------------------------

template <class O, int HDB>
__global__ void __launch_bounds__(kThreads, 2)
    flash_tc_forward_kernel(O* out, float* lse, const bf16* Qm, const bf16* Km, const bf16* Vm, FlashTcArgs a,
                            bool async) {
    constexpr int LD = HDB + kPad, NT = HDB / 8;
    extern __shared__ uint4 tc_smem[];                   // uint4: 16-byte aligned, as cp.async and ldmatrix need
    bf16* Qs = reinterpret_cast<bf16*>(tc_smem);         // [64][LD]     the block's queries
    bf16* Ks = Qs + kQTile * LD;                          // [2][64][LD]  key tiles j and j + 1
    bf16* Vs = Ks + 2 * kKTile * LD;                      // [2][64][LD]
    const TcBlock blk = tc_block(a, Qm, Km, Vm);
    const bf16 *Q = blk.Q, *K = blk.K, *V = blk.V;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int tiles = (a.S + kQTile - 1) / kQTile;
    const int q0 = (tiles - 1 - blk.rank) * kQTile;    // rank 0: the last query tile, the most keys
    const int qw = q0 + kRowsPerWarp * warp;            // the warp's queries: fragment rows g, g + 8 are qw + g, + 8
    const int dg = (int)(a.q_pos - a.k_pos);            // query q sees key k iff k <= q + dg (global positions)
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width;
    const float sl2 = a.scale * kLog2e;                 // scores in log2 units: e^{x − m} = 2^{x·log2 e − m'}

    // The key tiles that hold a key some query of the block sees: 0 .. n_tiles − 1 (none: a ring block's
    // queries that all precede its keys).
    const int last_key = min(min(q0 + kQTile, a.S) - 1 + dg, a.Sk - 1);
    const int n_tiles = last_key < 0 ? 0 : last_key / kKTile + 1;
    stage_rows<HDB, kQTile>(Qs, Q, R, q0, a.S - q0, a.HD, async);
    if (n_tiles > 0) {
        stage_rows<HDB, kKTile>(Ks, K, RK, 0, a.Sk, a.HD, async);
        stage_rows<HDB, kKTile>(Vs, V, RK, 0, a.Sk, a.HD, async);
    }
    cp_async_commit();  // group 0: Q and key tile 0

    // The warp's unnormalised output O (16 × HDB: o[nt][0..1] row g, columns 8nt + 2t, + 1; o[nt][2..3] row g + 8)
    // and, per fragment row h (row g + 8h), the running max m (log2 units) and sum l, the same in the group's
    // four lanes.
    float o[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[nt][i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1, k0 = j * kKTile;
        if (j + 1 < n_tiles) {  // tile j + 1 into the other buffer, while this one is computed
            stage_rows<HDB, kKTile>(Ks + (buf ^ 1) * kKTile * LD, K, RK, k0 + kKTile, a.Sk - k0 - kKTile, a.HD, async);
            stage_rows<HDB, kKTile>(Vs + (buf ^ 1) * kKTile * LD, V, RK, k0 + kKTile, a.Sk - k0 - kKTile, a.HD, async);
        }
        cp_async_commit();   // group j + 1 (empty after the last tile)
        cp_async_wait<1>();  // this thread's copies of group j have landed (Q too, the first time) ...
        __syncthreads();     // ... and every thread's
        if (k0 <= qw + kRowsPerWarp - 1 + dg) {  // else every key of the tile comes after the warp's queries
            const bf16* Kj = Ks + buf * kKTile * LD;
            const bf16* Vj = Vs + buf * kKTile * LD;
            // S = Q_w·K_jᵀ (16 × 64): s[nt][i] is query qw + g + 8(i >> 1), key k0 + 8nt + 2t + (i & 1).
            float s[8][4];
            warp_mma_abt<8, HDB, LD>(s, Qs + kRowsPerWarp * warp * LD, Kj, lane);
            // The online softmax of the tile, row by row: mask (only a tile that reaches past the causal diagonal
            // or an end of the block: the others' keys are all seen by all the warp's queries), the new max mt,
            // α = 2^{m − mt} for what the earlier tiles summed, e = 2^{x − mt}. The max is taken on the raw scores
            // (sl2 > 0 keeps their order) and scaled once per row: 2^{x·sl2 − mt} is one fma per score.
            tc_mask_rows(s, qw, k0, dg, a, lane);
            float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) mt[i >> 1] = fmaxf(mt[i >> 1], s[nt][i]);
            float alpha[2], msub[2], rowsum[2] = {0.f, 0.f};
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mt[h] = fmaxf(m[h], quad_max(mt[h]) * sl2);
                alpha[h] = m[h] == -INFINITY ? 0.f : ex2_approx_ftz(m[h] - mt[h]);  // nothing summed yet: no rescale
                msub[h] = mt[h] == -INFINITY ? 0.f : mt[h];  // a row with no key yet: every 2^{−inf − 0} = 0
                m[h] = mt[h];
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    s[nt][i] = ex2_approx_ftz(fmaf(s[nt][i], sl2, -msub[i >> 1]));  // masked: 2^−inf = 0
                    rowsum[i >> 1] += s[nt][i];
                }
#pragma unroll
            for (int h = 0; h < 2; h++) l[h] = l[h] * alpha[h] + quad_sum(rowsum[h]);  // l counts every key
            // Dropout: the output sums only the kept probabilities (the softmax's l counts them all); the
            // 1/(1 − p) is applied at the end.
            if (a.threshold) {
                const uint32_t keep = tc_keep_rows(a, blk, qw, k0, lane);
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) s[nt][i] = (keep >> (4 * nt + i)) & 1u ? s[nt][i] : 0.f;
            }
            // O ← α·O + P·V_j: P (s, rounded to bf16) is the A operand as it stands, V_j's rows are the keys.
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) o[nt][i] *= alpha[i >> 1];
            warp_mma_pm<4, NT, LD>(o, s, Vj, lane);
        }
        __syncthreads();  // every warp is done with buffer buf before tile j + 2 is copied into it
    }
    cp_async_wait<0>();  // (only group 0 can still be pending: a block that had no key tile)

    // out_q = O_q / l_q / (1 − p), lse_q = m_q + log l_q (natural log: m is in log2 units). A query that sees no
    // key of a ring block gets 0 and −inf, as in flash_attention.cu: the merge gives it weight 0.
    const float f[2] = {l[0] > 0.f ? a.inv_keep / l[0] : 0.f, l[1] > 0.f ? a.inv_keep / l[1] : 0.f};
    tc_store_rows<false, NT>(out + (int64_t)blk.b * a.NH * a.HD + (int64_t)blk.n * a.HD, (int64_t)a.B * a.NH * a.HD,
                             qw, a.S, a.HD, o, f, lane);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = qw + g + 8 * h;
        if (t == 0 && q < a.S) lse[blk.bn * a.lse_ld + q] = l[h] > 0.f ? (m[h] + log2f(l[h])) * kLn2 : -INFINITY;
    }
}

// ---------------------------------------------------------------------------------------------------------
// Backward, dK and dV of 64 keys
// ---------------------------------------------------------------------------------------------------------

template <class G, bool kAdd, int HDB>
__global__ void __launch_bounds__(kThreads, 2)
    flash_tc_backward_kv_kernel(G* dKm, G* dVm, const bf16* dout, const float* lse, const float* D, const bf16* Qm,
                                const bf16* Km, const bf16* Vm, FlashTcArgs a, bool async) {
    constexpr int LD = HDB + kPad, NT = HDB / 8, QT = bwd_q_tile(HDB), QN = QT / 8;
    extern __shared__ uint4 tc_smem[];
    bf16* Ks = reinterpret_cast<bf16*>(tc_smem);  // [64][LD]       the block's keys
    bf16* Vs = Ks + kKTile * LD;                   // [64][LD]
    bf16* Qs = Vs + kKTile * LD;                   // [2][QT][LD]   query tiles i and i + 1
    bf16* dOs = Qs + 2 * QT * LD;                  // [2][QT][LD]
    float* Ls = reinterpret_cast<float*>(dOs + 2 * QT * LD);  // [2][QT] their lse·log2 e (tc_lse2)
    float* Ds = Ls + 2 * QT;                                   // [2][QT] and D
    const TcBlock blk = tc_block(a, Qm, Km, Vm);
    const bf16 *Q = blk.Q, *K = blk.K, *V = blk.V;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int k0 = blk.rank * kKTile;                 // rank 0: keys 0 .. 63, which every query sees
    const int kw = k0 + kRowsPerWarp * warp;          // the warp's keys: fragment rows g, g + 8 are kw + g, + 8
    const int dg = (int)(a.q_pos - a.k_pos);
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * a.NH * a.HD;
    const bf16* dO = dout + (int64_t)blk.b * a.NH * a.HD + (int64_t)blk.n * a.HD;
    const float* L = lse + blk.bn * a.lse_ld;
    const float* Dq = D + blk.bn * a.d_ld;
    const float sl2 = a.scale * kLog2e;

    // The query tiles on and below the diagonal: from the one holding the first query that sees key k0.
    const int q_tiles = (a.S + QT - 1) / QT, first_q = k0 - dg;
    const int it0 = first_q <= 0 ? 0 : min(first_q / QT, q_tiles);
    auto stage_queries = [&](int it, int buf) {
        const int q0 = it * QT;
        stage_rows<HDB, QT>(Qs + buf * QT * LD, Q, R, q0, a.S - q0, a.HD, async);
        stage_rows<HDB, QT>(dOs + buf * QT * LD, dO, RO, q0, a.S - q0, a.HD, async);
        for (int r = threadIdx.x; r < QT; r += kThreads) Ls[buf * QT + r] = tc_lse2(L + q0, r, a.S - q0);
        stage_f32(Ds + buf * QT, Dq, q0, QT, a.S - q0);
    };
    stage_rows<HDB, kKTile>(Ks, K, RK, k0, a.Sk - k0, a.HD, async);
    stage_rows<HDB, kKTile>(Vs, V, RK, k0, a.Sk - k0, a.HD, async);
    if (it0 < q_tiles) stage_queries(it0, 0);
    cp_async_commit();

    // dK, dV of the warp's 16 keys (16 × HDB each; fragment rows g, g + 8 = keys kw + g, kw + g + 8).
    float dk[NT][4], dv[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) dk[nt][i] = dv[nt][i] = 0.f;

    for (int it = it0; it < q_tiles; it++) {
        const int buf = (it - it0) & 1, q0 = it * QT;
        if (it + 1 < q_tiles) stage_queries(it + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (q0 + QT - 1 + dg >= kw) {  // else the tile's last query precedes the warp's first key
            const bf16* Qi = Qs + buf * QT * LD;
            const bf16* dOi = dOs + buf * QT * LD;
            const float* Li = Ls + buf * QT;
            const float* Di = Ds + buf * QT;
            // Sᵀ = K_w·Q_iᵀ and dPᵀ = V_w·dO_iᵀ (16 keys × QT queries): s[nt][i] is key kw + g + 8(i >> 1), query
            // q0 + 8nt + 2t + (i & 1).
            float s[QN][4], dp[QN][4];
            warp_mma_abt<QN, HDB, LD>(s, Ks + kRowsPerWarp * warp * LD, Qi, lane);
            warp_mma_abt<QN, HDB, LD>(dp, Vs + kRowsPerWarp * warp * LD, dOi, lane);
            // P = 2^{x·log2 e − lse·log2 e}, the keep bit z, then in place: s ← P_d = P·z/(1 − p) (what dropout
            // kept, for dV) and dp ← dS/scale = P·(dP·z/(1 − p) − D) (the 1/√HD of dK is applied at the end). A
            // masked score (only in a tile on the diagonal or at an end) becomes −inf: P = 2^−inf = 0, so P_d and
            // dS are 0 whatever its keep bit.
            if (!tc_tile_unmasked(q0, QT, kw, kRowsPerWarp, dg, a.S, a.Sk)) {
#pragma unroll
                for (int nt = 0; nt < QN; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int k = kw + g + 8 * (i >> 1), q = q0 + 8 * nt + 2 * t + (i & 1);
                        if (!(k <= q + dg && k < a.Sk && q < a.S)) s[nt][i] = -INFINITY;
                    }
            }
            const uint32_t keep = a.threshold ? tc_keep_cols<QN>(a, blk, q0, kw, lane) : ~0u;
#pragma unroll
            for (int nt = 0; nt < QN; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int qi = 8 * nt + 2 * t + (i & 1);
                    const float p = ex2_approx_ftz(fmaf(s[nt][i], sl2, -Li[qi]));
                    const bool z = (keep >> (4 * nt + i)) & 1u;
                    s[nt][i] = z ? p * a.inv_keep : 0.f;
                    dp[nt][i] = p * ((z ? dp[nt][i] * a.inv_keep : 0.f) - Di[qi]);
                }
            warp_mma_pm<QT / 16, NT, LD>(dv, s, dOi, lane);  // dV_w += P_dᵀ·dO_i (dO_i's rows are the queries)
            warp_mma_pm<QT / 16, NT, LD>(dk, dp, Qi, lane);  // dK_w += dSᵀ·Q_i
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    const int64_t RdK = (int64_t)a.B * a.dkv_width, at = (int64_t)blk.b * a.dkv_width + (int64_t)blk.n * a.HD;
    const float scale[2] = {a.scale, a.scale}, one[2] = {1.f, 1.f};
    tc_store_rows<kAdd, NT>(dKm + at, RdK, kw, a.Sk, a.HD, dk, scale, lane);
    tc_store_rows<kAdd, NT>(dVm + at, RdK, kw, a.Sk, a.HD, dv, one, lane);
}

// ---------------------------------------------------------------------------------------------------------
// Backward, dQ of 64 queries
// ---------------------------------------------------------------------------------------------------------

template <class G, bool kAdd, int HDB>
__global__ void __launch_bounds__(kThreads, 2)
    flash_tc_backward_q_kernel(G* dQm, const bf16* dout, const float* lse, const float* D, const bf16* Qm,
                               const bf16* Km, const bf16* Vm, FlashTcArgs a, bool async) {
    constexpr int LD = HDB + kPad, NT = HDB / 8;
    extern __shared__ uint4 tc_smem[];
    bf16* Qs = reinterpret_cast<bf16*>(tc_smem);  // [64][LD]       the block's queries
    bf16* dOs = Qs + kQTile * LD;                  // [64][LD]
    bf16* Ks = dOs + kQTile * LD;                  // [2][64][LD]   key tiles j and j + 1
    bf16* Vs = Ks + 2 * kKTile * LD;               // [2][64][LD]
    const TcBlock blk = tc_block(a, Qm, Km, Vm);
    const bf16 *Q = blk.Q, *K = blk.K, *V = blk.V;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int tiles = (a.S + kQTile - 1) / kQTile;
    const int q0 = (tiles - 1 - blk.rank) * kQTile;  // rank 0: the most keys
    const int qw = q0 + kRowsPerWarp * warp;          // fragment rows g, g + 8 are queries qw + g, qw + g + 8
    const int dg = (int)(a.q_pos - a.k_pos);
    const int64_t R = (int64_t)a.B * a.q_width, RK = (int64_t)a.B * a.kv_width, RO = (int64_t)a.B * a.NH * a.HD;
    const bf16* dO = dout + (int64_t)blk.b * a.NH * a.HD + (int64_t)blk.n * a.HD;
    const float sl2 = a.scale * kLog2e;
    // lse·log2 e and D of the lane's two fragment rows (0 for rows past the end: their P is masked to 0).
    float L2[2], Drow[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = qw + g + 8 * h;
        L2[h] = tc_lse2(lse + blk.bn * a.lse_ld, q, a.S);
        Drow[h] = q < a.S ? D[blk.bn * a.d_ld + q] : 0.f;
    }

    const int last_key = min(min(q0 + kQTile, a.S) - 1 + dg, a.Sk - 1);
    const int n_tiles = last_key < 0 ? 0 : last_key / kKTile + 1;
    stage_rows<HDB, kQTile>(Qs, Q, R, q0, a.S - q0, a.HD, async);
    stage_rows<HDB, kQTile>(dOs, dO, RO, q0, a.S - q0, a.HD, async);
    if (n_tiles > 0) {
        stage_rows<HDB, kKTile>(Ks, K, RK, 0, a.Sk, a.HD, async);
        stage_rows<HDB, kKTile>(Vs, V, RK, 0, a.Sk, a.HD, async);
    }
    cp_async_commit();

    float dq[NT][4];  // dQ of the warp's 16 queries, times √HD (applied at the end)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) dq[nt][i] = 0.f;

    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1, k0 = j * kKTile;
        if (j + 1 < n_tiles) {
            stage_rows<HDB, kKTile>(Ks + (buf ^ 1) * kKTile * LD, K, RK, k0 + kKTile, a.Sk - k0 - kKTile, a.HD, async);
            stage_rows<HDB, kKTile>(Vs + (buf ^ 1) * kKTile * LD, V, RK, k0 + kKTile, a.Sk - k0 - kKTile, a.HD, async);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (k0 <= qw + kRowsPerWarp - 1 + dg) {
            const bf16* Kj = Ks + buf * kKTile * LD;
            const bf16* Vj = Vs + buf * kKTile * LD;
            // S = Q_w·K_jᵀ and dP = dO_w·V_jᵀ (16 × 64): s[nt][i] is query qw + g + 8(i >> 1), key
            // k0 + 8nt + 2t + (i & 1).
            float s[8][4], dp[8][4];
            warp_mma_abt<8, HDB, LD>(s, Qs + kRowsPerWarp * warp * LD, Kj, lane);
            warp_mma_abt<8, HDB, LD>(dp, dOs + kRowsPerWarp * warp * LD, Vj, lane);
            // dS/scale = P·(dP·z/(1 − p) − D) in place of dp, the same formulas as the dK-dV kernel (and the same
            // mask: only on the diagonal and at the ends).
            tc_mask_rows(s, qw, k0, dg, a, lane);
            const uint32_t keep = a.threshold ? tc_keep_rows(a, blk, qw, k0, lane) : ~0u;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int h = i >> 1;
                    const float p = ex2_approx_ftz(fmaf(s[nt][i], sl2, -L2[h]));
                    const bool z = (keep >> (4 * nt + i)) & 1u;
                    dp[nt][i] = p * ((z ? dp[nt][i] * a.inv_keep : 0.f) - Drow[h]);
                }
            warp_mma_pm<4, NT, LD>(dq, dp, Kj, lane);  // dQ_w += dS·K_j (K_j's rows are the keys)
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    const float scale[2] = {a.scale, a.scale};
    tc_store_rows<kAdd, NT>(dQm + (int64_t)blk.b * a.dq_width + (int64_t)blk.n * a.HD, (int64_t)a.B * a.dq_width, qw,
                            a.S, a.HD, dq, scale, lane);
}

// ---------------------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------------------

// Shared memory per block (bytes): the forward's Q and two K, V tiles; the dK-dV kernel's K, V and two Q, dO
// tiles with their lse and D; the dQ kernel's Q, dO and two K, V tiles (the figures in the header).
constexpr size_t tc_forward_smem(int HDB) { return sizeof(bf16) * (size_t)(kQTile + 4 * kKTile) * (HDB + kPad); }
constexpr size_t tc_kv_smem(int HDB) {
    const int QT = bwd_q_tile(HDB);
    return sizeof(bf16) * (size_t)(2 * kKTile + 4 * QT) * (HDB + kPad) + sizeof(float) * 4 * QT;
}
constexpr size_t tc_q_smem(int HDB) { return sizeof(bf16) * (size_t)(2 * kQTile + 4 * kKTile) * (HDB + kPad); }

// The instantiation for HD: the caller's a.hd_bound (flash_attention_hd_bound: 32, 64 or 128), as the scalar
// kernels. flash_attention.cu picks it, so that this file needs nothing of flash_attention.h (it sits below it).
template <class Launch>
static void tc_launch_by_hd(const char* op, int HD, int hd_bound, Launch&& launch) {
    switch (hd_bound) {
        case 32: launch(std::integral_constant<int, 32>()); break;
        case 64: launch(std::integral_constant<int, 64>()); break;
        case 128: launch(std::integral_constant<int, 128>()); break;
        default: mm_fatal("%s: head dimension HD=%d: the flash attention kernels take HD from 1 to 128; use "
                          "--attention unfused", op, HD);
    }
}

// The kernels need sm_80 (bf16 mma.sync, cp.async), and above 48 KB of shared memory an opt-in per kernel. Each
// launch site calls tc_prepare once per kernel instantiation (a static of the lambda's instantiation).
template <class Kernel>
static bool tc_prepare(const char* op, Kernel* kernel, size_t bytes) {
    int dev = 0, major = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 8)
        mm_fatal("%s: the bf16 flash attention kernels use the tensor-core instructions of sm_80 and later (mma.sync "
                 "with bf16, cp.async); device %d is sm_%d: use --attention unfused or --dtype fp32", op, dev,
                 major * 10);
    if (bytes <= 48 * 1024) return true;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < bytes)
        mm_fatal("%s: the kernel needs %zu bytes of shared memory per block, device %d allows %d; use --attention "
                 "unfused", op, bytes, dev, optin);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return true;
}

// Whether the tiles can come by cp.async: 16-byte chunks need HD and the row widths in multiples of 8 bf16 and
// 16-byte aligned matrices.
static bool tc_async(const FlashTcArgs& a, std::initializer_list<const void*> matrices) {
    if (a.HD % 8 || a.q_width % 8 || a.kv_width % 8) return false;
    for (const void* p : matrices)
        if (reinterpret_cast<uintptr_t>(p) % 16) return false;
    return true;
}

static unsigned tc_grid(const char* op, int tiles, const FlashTcArgs& a) {
    const int64_t blocks = (int64_t)tiles * a.B * a.NH;
    if (blocks > INT32_MAX) mm_fatal("%s: %lld blocks in one launch (at most 2^31 - 1)", op, (long long)blocks);
    return (unsigned)blocks;
}

template <class O>
static void tc_forward(Ctx& ctx, const char* op, O* out, float* lse, const bf16* Q, const bf16* K, const bf16* V,
                       const FlashTcArgs& a) {
    const unsigned blocks = tc_grid(op, (a.S + kQTile - 1) / kQTile, a);
    const bool async = tc_async(a, {Q, K, V});
    tc_launch_by_hd(op, a.HD, a.hd_bound, [&](auto hdb) {
        constexpr int HDB = decltype(hdb)::value;
        constexpr size_t smem = tc_forward_smem(HDB);
        static const bool ready = tc_prepare(op, flash_tc_forward_kernel<O, HDB>, smem);
        (void)ready;
        flash_tc_forward_kernel<O, HDB><<<blocks, kThreads, smem, ctx.stream>>>(out, lse, Q, K, V, a, async);
        CUDA_CHECK_LAST();
    });
}
void flash_tc_forward(Ctx& ctx, const char* op, bf16* out, float* lse, const bf16* Q, const bf16* K, const bf16* V,
                      const FlashTcArgs& a) {
    tc_forward(ctx, op, out, lse, Q, K, V, a);
}
void flash_tc_forward(Ctx& ctx, const char* op, float* out, float* lse, const bf16* Q, const bf16* K, const bf16* V,
                      const FlashTcArgs& a) {
    tc_forward(ctx, op, out, lse, Q, K, V, a);
}

// kAdd: G = f32 accumulators of a ring block, added into; else G = bf16, written.
template <bool kAdd, class G>
static void tc_backward(Ctx& ctx, const char* op, G* dQ, G* dK, G* dV, const bf16* dout, const float* lse,
                        const float* D, const bf16* Q, const bf16* K, const bf16* V, const FlashTcArgs& a) {
    const unsigned kv_blocks = tc_grid(op, (a.Sk + kKTile - 1) / kKTile, a);
    const unsigned q_blocks = tc_grid(op, (a.S + kQTile - 1) / kQTile, a);
    const bool async = tc_async(a, {Q, K, V, dout});
    tc_launch_by_hd(op, a.HD, a.hd_bound, [&](auto hdb) {
        constexpr int HDB = decltype(hdb)::value;
        constexpr size_t smem_kv = tc_kv_smem(HDB), smem_q = tc_q_smem(HDB);
        static const bool kv_ready = tc_prepare(op, flash_tc_backward_kv_kernel<G, kAdd, HDB>, smem_kv);
        static const bool q_ready = tc_prepare(op, flash_tc_backward_q_kernel<G, kAdd, HDB>, smem_q);
        (void)kv_ready, (void)q_ready;
        flash_tc_backward_kv_kernel<G, kAdd, HDB>
            <<<kv_blocks, kThreads, smem_kv, ctx.stream>>>(dK, dV, dout, lse, D, Q, K, V, a, async);
        CUDA_CHECK_LAST();
        flash_tc_backward_q_kernel<G, kAdd, HDB>
            <<<q_blocks, kThreads, smem_q, ctx.stream>>>(dQ, dout, lse, D, Q, K, V, a, async);
        CUDA_CHECK_LAST();
    });
}
void flash_tc_backward(Ctx& ctx, const char* op, bf16* dQ, bf16* dK, bf16* dV, const bf16* dout, const float* lse,
                       const float* D, const bf16* Q, const bf16* K, const bf16* V, const FlashTcArgs& a) {
    tc_backward<false>(ctx, op, dQ, dK, dV, dout, lse, D, Q, K, V, a);
}
void flash_tc_backward(Ctx& ctx, const char* op, float* dQ, float* dK, float* dV, const bf16* dout, const float* lse,
                       const float* D, const bf16* Q, const bf16* K, const bf16* V, const FlashTcArgs& a) {
    tc_backward<true>(ctx, op, dQ, dK, dV, dout, lse, D, Q, K, V, a);
}
