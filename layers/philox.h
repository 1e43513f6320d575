// philox.h — counter-based random numbers for dropout: Philox4x32-10 (Salmon et al., SC 2011).
//
// Why counter-based: a dropout mask bit is a pure function of (seed, stream, element index). So
//  - the fast CPU path and the CUDA kernel produce the same bits;
//  - a tensor- or sequence-parallel rank evaluates the mask of the *global* element it holds, and so gets
//    exactly the mask a single-rank run would use (Megatron instead seeds per rank and forks RNG state);
//  - recomputation (selective or full) regenerates the same mask with no RNG state to save or restore.
#pragma once
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

struct PhiloxOut { uint32_t x[4]; };

__host__ __device__ inline uint32_t philox_mulhi(uint32_t a, uint32_t b) {
    return (uint32_t)(((uint64_t)a * (uint64_t)b) >> 32);
}

// Ten rounds of the Philox4x32 bijection of a 128-bit counter under a 64-bit key.
__host__ __device__ inline PhiloxOut philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                                   uint32_t k0, uint32_t k1) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = philox_mulhi(M0, c0), lo0 = M0 * c0;
        uint32_t hi1 = philox_mulhi(M1, c2), lo1 = M1 * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += W0; k1 += W1;
    }
    PhiloxOut o;
    o.x[0] = c0; o.x[1] = c1; o.x[2] = c2; o.x[3] = c3;
    return o;
}

// Dropout sites of one layer; the stream id of a mask is layer * 4 + site (the embedding uses layer -1,
// mapped to stream id kEmbeddingStream). Different sites never share random numbers.
enum DropoutSite : uint32_t { kSiteAttnProbs = 0, kSiteAttnOut = 1, kSiteMlpOut = 2 };
constexpr uint32_t kEmbeddingStream = 0xFFFFFFu;
__host__ __device__ inline uint32_t dropout_stream(int layer, DropoutSite site) {
    return (uint32_t)layer * 4u + (uint32_t)site;
}

// Keep an element iff its 32-bit random number is >= threshold, threshold = round(p * 2^32).
inline uint32_t dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    if (t <= 0) return 0;
    if (t >= 4294967295.0) return 0xFFFFFFFFu;
    return (uint32_t)(t + 0.5);
}

// The key of one training step's masks: every step draws fresh masks, while a recompute within the step
// (selective or full) regenerates exactly the same ones. splitmix64 of the run's seed and the step.
inline uint64_t dropout_step_seed(uint64_t seed, uint64_t step) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (step + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Word (index mod 4) of the Philox block at counter index / 4: one Philox call yields the random numbers of
// four consecutive elements, so kernels that handle consecutive elements call it once per four.
__host__ __device__ inline uint32_t philox_word(const PhiloxOut& o, uint32_t w) {
    return w == 0 ? o.x[0] : w == 1 ? o.x[1] : w == 2 ? o.x[2] : o.x[3];  // no run-time array index
}
__host__ __device__ inline PhiloxOut dropout_block(uint64_t seed, uint32_t stream, uint64_t block) {
    return philox4x32_10((uint32_t)block, (uint32_t)(block >> 32), stream, 0x6d6d6567u /*"mmeg"*/, (uint32_t)seed,
                         (uint32_t)(seed >> 32));
}

// The one random number for element `index` (its position in the *global* tensor) of mask `stream`.
__host__ __device__ inline uint32_t dropout_random(uint64_t seed, uint32_t stream, uint64_t index) {
    return philox_word(dropout_block(seed, stream, index >> 2), (uint32_t)(index & 3));
}
__host__ __device__ inline bool dropout_keep(uint64_t seed, uint32_t stream, uint64_t index, uint32_t threshold) {
    return threshold == 0 || dropout_random(seed, stream, index) >= threshold;
}
// The keep bits of the 8 consecutive elements first .. first + 7 (bit k for element first + k): the same
// bits as dropout_keep, with one Philox call per block of four (two or three calls instead of eight).
__host__ __device__ inline uint32_t dropout_keep8(uint64_t seed, uint32_t stream, uint64_t first, uint32_t threshold) {
    if (threshold == 0) return 0xFFu;
    uint32_t bits = 0;
    uint64_t block = first >> 2;
    PhiloxOut o = dropout_block(seed, stream, block);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint64_t idx = first + (uint64_t)k;
        if ((idx >> 2) != block) {
            block = idx >> 2;
            o = dropout_block(seed, stream, block);
        }
        if (philox_word(o, (uint32_t)(idx & 3)) >= threshold) bits |= 1u << k;
    }
    return bits;
}

// CPU: the keep bytes (1 keep, 0 drop) of the `count` consecutive elements first .. first + count - 1, the same
// bits as dropout_keep element by element. One SIMD loop over the Philox blocks that cover them (dropout_block,
// the ten rounds vectorised across blocks, 32 × 32 → 64-bit products included), one block per four elements;
// then each element compares its word.
inline void dropout_keep_run(uint8_t* keep, uint64_t seed, uint32_t stream, uint64_t first, int64_t count,
                             uint32_t threshold) {
    if (count <= 0) return;
    if (threshold == 0) {
        for (int64_t i = 0; i < count; i++) keep[i] = 1;
        return;
    }
    const uint64_t b0 = first >> 2, nblocks = ((first + (uint64_t)count - 1) >> 2) - b0 + 1;
    static thread_local std::vector<uint32_t> words;  // the blocks' words, 4 per block, in element order
    if (words.size() < nblocks * 4) words.resize(nblocks * 4);
    uint32_t* w = words.data();
#pragma omp simd
    for (uint64_t j = 0; j < nblocks; j++) {
        const PhiloxOut o = dropout_block(seed, stream, b0 + j);
        w[4 * j + 0] = o.x[0];
        w[4 * j + 1] = o.x[1];
        w[4 * j + 2] = o.x[2];
        w[4 * j + 3] = o.x[3];
    }
    w += first & 3;  // element first's word
#pragma omp simd
    for (int64_t i = 0; i < count; i++) keep[i] = w[i] >= threshold ? 1 : 0;
}
