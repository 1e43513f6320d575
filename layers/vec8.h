// vec8.h — packs of 8 elements for the memory-bound CUDA kernels (layernorm, dropout, gelu, attention
// softmax).
//
// Why: an element-wise kernel that moves one bf16 (2 bytes) per thread per load issues 8× more memory
// instructions than one that moves 16 bytes, and on an H100/H200 (3–5 TB/s) the instruction issue, not
// DRAM, then becomes the limit. A Pack8 holds 8 consecutive elements: one 16-byte access for bf16, two for
// f32 (a Hopper and Ampere rule of thumb: 16-byte accesses per thread, coalesced across the warp).
//
// The vector access needs the address to be 16-byte aligned and all 8 elements to exist. Tensors can be
// views at any element offset and rows can have any length (the GPU tests use C = 129), so every kernel
// also has a scalar path: load8/store8 take `vec` (decided once per launch on the host from the real
// pointers, see vec8_aligned) and the number of valid elements, and fall back to element-by-element
// accesses. The *arithmetic* never depends on which path loaded the data: a kernel gives the same bits
// whether its tensors happened to be aligned or not (recompute policies are compared bitwise).
#pragma once
#include <cstdint>
#include <cstring>
#include "tensor.h"

template <class T>
struct alignas(16) Pack8 {
    T v[8];
};

// True when p is 16-byte aligned (host side: decides whether a launch may use vector accesses).
inline bool vec8_aligned(const void* p) { return p == nullptr || ((uintptr_t)p & 15u) == 0; }

// Elements [0, count) of p (count <= 8); the rest of the pack is zero. One vector access when `vec` (the
// launch's pointers are aligned, so p is 16-byte aligned) and the pack is full (count == 8); a partial pack
// (the end of a row or tensor) is always read element by element.
template <class T>
__device__ inline Pack8<T> load8(const T* p, int count, bool vec) {
    Pack8<T> r;
    if (vec && count == 8) {
        constexpr int kPer16 = 16 / (int)sizeof(T);  // elements per 16-byte access (8 bf16, 4 f32)
#pragma unroll
        for (int k = 0; k < 8 / kPer16; k++) {
            uint4 bits = reinterpret_cast<const uint4*>(p)[k];
            memcpy(&r.v[k * kPer16], &bits, 16);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) r.v[k] = k < count ? p[k] : from_f32<T>(0.0f);
    }
    return r;
}

// Store elements [0, count) of the pack to p (count <= 8), with the same vector / scalar rule as load8.
template <class T>
__device__ inline void store8(T* p, const Pack8<T>& r, int count, bool vec) {
    if (vec && count == 8) {
        constexpr int kPer16 = 16 / (int)sizeof(T);
#pragma unroll
        for (int k = 0; k < 8 / kPer16; k++) {
            uint4 bits;
            memcpy(&bits, &r.v[k * kPer16], 16);
            reinterpret_cast<uint4*>(p)[k] = bits;
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < count) p[k] = r.v[k];
    }
}

// 8 one-byte dropout mask entries: one 8-byte access when vec (p then 8-byte aligned), else byte by byte.
__device__ inline uint64_t load_mask8(const uint8_t* p, int count, bool vec) {
    if (vec && count == 8) return *reinterpret_cast<const uint64_t*>(p);
    uint64_t bits = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (k < count) bits |= (uint64_t)p[k] << (8 * k);
    return bits;
}
__device__ inline void store_mask8(uint8_t* p, uint64_t bits, int count, bool vec) {
    if (vec && count == 8) {
        *reinterpret_cast<uint64_t*>(p) = bits;
        return;
    }
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (k < count) p[k] = (uint8_t)(bits >> (8 * k));
}
__device__ inline bool mask8_get(uint64_t bits, int k) { return ((bits >> (8 * k)) & 0xFFu) != 0; }

// ---- the CPU loops ------------------------------------------------------------------------------------
// An element-wise CPU loop is one `#pragma omp simd` loop over the elements (gelu.cu): its element function
// is IEEE operations only, so a vector lane and the scalar tail give the same bits. A reduction over a row
// (layernorm.cu, the softmax, the loss) keeps kCpuPack partial sums, partial j taking the elements ≡ j
// (mod kCpuPack), added in a fixed order at the end: the loops over a pack vectorise, and the order depends
// on the row's length only, never on the thread count. Full packs are read in place; a row's partial last
// pack goes through a scalar loop (cpu_row_partials) or, in the loss's chunked loop, through a float buffer
// (cpu_load_pack). Copying every pack through a buffer on the stack is slow: the compiler splits the copy
// into accesses of unequal widths, which defeats store-to-load forwarding.
constexpr int kCpuPack = 16;

// The CPU loops over packs are compiled three times, for AVX-512 (16 floats per register), AVX2 (8) and the
// x86-64 baseline (SSE2, 4), and the program picks the widest copy the CPU it starts on has (GCC's
// target_clones, resolved once by the dynamic loader). No copy fuses a multiply and an add (the build sets
// -ffp-contract=off: AVX-512 has FMA instructions, and GCC would otherwise use them), so every copy runs the
// same IEEE operations on each element in the same order: the same bits on any x86-64 machine, only fewer
// instructions. A pack of kCpuPack floats is one AVX-512 register. Why AVX-512 pays even where a core
// executes it as two 256-bit halves (AMD Zen 4): an element's math is one long chain of dependent operations
// (GeLU's is ~40), and a 16-lane register carries twice the elements down each chain; GeLU's forward took
// 0.76 ms instead of 1.19 for 1 M elements on one Zen 4 core (bench/PERF_NOTES.md "AVX-512 copies"). The
// build can turn the copies off (CMake option MM_CPU_CLONES).
#if defined(MM_CPU_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDA_ARCH__)
#define MM_CPU_LOOP __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MM_CPU_LOOP
#endif
// A helper of the CPU loops (a row function, a reduction) must be inlined into the MM_CPU_LOOP function that
// calls it: called instead, it runs as compiled for the x86-64 baseline, 4 lanes wide, whatever copy calls it.
// GCC's inliner declined the softmax row (attention.cu) and cpu_pairwise_row_sums below, which then ran at
// SSE2 width inside the AVX-512 and AVX2 copies (bench/PERF_NOTES.md "AVX-512 copies"). So they say so.
#define MM_CPU_INLINE __attribute__((always_inline)) inline

// A row reduction in the fixed order: add(j, i) folds element i of the row into partial j, for every i in
// [0, n), with j = i mod kCpuPack. Full packs go through one SIMD loop (the partials are independent, so
// the lanes are), the row's last, partial pack through a scalar loop that does the same operations; either
// way each partial sees its elements in increasing i. The caller starts the partials (0, or -inf for a
// maximum) and combines them in a fixed order at the end (cpu_partials_total for a sum).
template <class Add>
MM_CPU_INLINE void cpu_row_partials(int64_t n, Add&& add) {
    const int64_t full = n - n % kCpuPack;  // elements in full packs
    for (int64_t i0 = 0; i0 < full; i0 += kCpuPack) {
#pragma omp simd
        for (int j = 0; j < kCpuPack; j++) add(j, i0 + j);
    }
    for (int64_t i = full; i < n; i++) add((int)(i - full), i);
}

// The same fold with the row's partial last pack in the SIMD loop too, where the row has room for a whole
// pack there (elements up to i0 + kCpuPack exist in memory, though past n they are not the row's: `room`).
// add(j, i, in) is called with in = (i < n) and must leave partial j as it was when !in, by a select, not a
// branch: then every partial sees exactly cpu_row_partials's operations in its order, and the same bits.
// Why: a causal softmax row has q + 1 keys, so its last pack is partial in 15 rows of 16, and in the scalar
// loop those up to 15 keys (an exponential each) cost as much as the rest of a 128-key row together.
template <class Add>
MM_CPU_INLINE void cpu_row_partials_padded(int64_t n, int64_t room, Add&& add) {
    const int64_t full = n - n % kCpuPack;
    for (int64_t i0 = 0; i0 < full; i0 += kCpuPack) {
#pragma omp simd
        for (int j = 0; j < kCpuPack; j++) add(j, i0 + j, true);
    }
    if (full == n) return;
    if (full + kCpuPack <= room) {
        const int rem = (int)(n - full);
#pragma omp simd
        for (int j = 0; j < kCpuPack; j++) add(j, full + j, j < rem);
    } else {
        for (int64_t i = full; i < n; i++) add((int)(i - full), i, true);
    }
}

// The kCpuPack partial sums of a row added in their fixed order (partial 0 first).
inline float cpu_partials_total(const float* acc) {
    float t = 0.0f;
    for (int j = 0; j < kCpuPack; j++) t += acc[j];
    return t;
}

// Sums over the rows of a matrix (the bias and LayerNorm weight gradients: N = batch × sequence rows, 1024
// to 8192 and more), for a strip of columns, in a fixed pairwise order. Why not one running sum per column
// down the rows: its rounding error grows with N (the n-th addition rounds a sum n times larger than each
// term), and at N = 1024 the bias gradients were 3× less accurate than PyTorch's, whose reductions add in a
// tree (bench/PERF_NOTES.md "Accuracy"). Here the rows go in leaves of kSumLeafRows, each summed top to
// bottom, and the leaves are added as a binary tree: leaf sums wait on a stack of levels, like a binary
// counter (level k holds the sum of 2^k leaves), so the error grows with kSumLeafRows + log2(N) instead of N,
// with one extra vector add per leaf. The order depends on N alone: the same bits for any thread count.
// add_row(acc, r) adds row r's terms for the strip into acc[0, kWidth); the column sums land in total[0, kWidth).
constexpr int kSumLeafRows = 16;
template <int kWidth, class AddRow>
MM_CPU_INLINE void cpu_pairwise_row_sums(int64_t N, float* total, AddRow&& add_row) {
    constexpr int kLevels = 40;  // 2^40 leaves: any row count an int64 index reaches here
    float level[kLevels][kWidth];
    int64_t leaves = 0;
    for (int64_t r0 = 0; r0 < N; r0 += kSumLeafRows, leaves++) {
        float acc[kWidth] = {0};
        const int64_t r1 = N - r0 < kSumLeafRows ? N : r0 + kSumLeafRows;
        for (int64_t r = r0; r < r1; r++) add_row(acc, r);
        // Carry: while level k is taken (bit k of the leaf count set), the two subtrees merge one level up.
        int k = 0;
        for (int64_t b = leaves; b & 1; b >>= 1, k++) {
#pragma omp simd
            for (int j = 0; j < kWidth; j++) acc[j] = level[k][j] + acc[j];
        }
        for (int j = 0; j < kWidth; j++) level[k][j] = acc[j];
    }
    // The levels still taken (the bits of the leaf count), the smallest first.
    for (int j = 0; j < kWidth; j++) total[j] = 0.0f;
    for (int k = 0; k < kLevels && (leaves >> k) != 0; k++)
        if ((leaves >> k) & 1)
            for (int j = 0; j < kWidth; j++) total[j] += level[k][j];
}

// The same total in double (for a row statistic computed once per row, where the extra precision is free).
inline double cpu_partials_total_f64(const float* acc) {
    double t = 0.0;
    for (int j = 0; j < kCpuPack; j++) t += acc[j];
    return t;
}

// Elements [i, min(i + kCpuPack, n)) of src as floats in dst[0, kCpuPack), zero-filled; returns the count
// (for a row's partial last pack).
template <class T>
inline int cpu_load_pack(float* dst, const T* src, int64_t i, int64_t n) {
    const int count = n - i < kCpuPack ? (int)(n - i) : kCpuPack;
    if (count == kCpuPack) {
        for (int k = 0; k < kCpuPack; k++) dst[k] = to_f32(src[i + k]);
    } else {
        for (int k = 0; k < kCpuPack; k++) dst[k] = k < count ? to_f32(src[i + k]) : 0.0f;
    }
    return count;
}

// Blocks for one thread per pack of 8 elements (capped: the kernels' grid-stride loops cover the rest).
inline unsigned grid_for_packs8(int64_t n, int threads) {
    int64_t packs = (n + 7) / 8;
    int64_t blocks = (packs + threads - 1) / threads;
    return (unsigned)(blocks < 65536 ? blocks : 65536);
}
