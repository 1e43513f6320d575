// gpu_shapes.h — the shapes the GPU op tests run, as data: the gpu tests (test_attention, test_layernorm,
// test_linear, test_runtime --gpu) iterate over these tables, and test_kernel_coverage (label unit, no GPU
// needed) reads the same tables to prove that every kernel instantiation the trainer can pick is reached by
// some GPU test shape. A shape added for coverage goes here, never into a test's own list: that is what makes
// the coverage claim checkable on a machine without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include "layers/linear.h"

// Which dtypes a case runs in (each GPU test loops over the dtypes of its case).
enum GpuDtypes : uint8_t { kF32Only = 1, kBF16Only = 2, kBothDtypes = 3 };
inline bool runs_in(GpuDtypes d, DType dt) { return (d & (dt == DType::BF16 ? kBF16Only : kF32Only)) != 0; }

// Core attention (test_attention --gpu): probs, mask, out and dqkv against the CPU, p = 0 and 0.1.
struct AttnGpuCase {
    int S, B, NH, HD;
    int64_t b_offset, B_total, head_offset, NH_total;  // a TP rank's heads of a DP rank's batches
    GpuDtypes dtypes;
};
// Softmax kernels (attention_softmax_slots): S <= 256 one pack of 8 keys per lane (37, 133, 64), <= 512 two
// (300), <= 1024 four (600, 1024), <= 2048 eight in bf16 (2048), longer the general kernel (2100; and f32
// above 1024). 300 and 600 also run several causal blocks of 256 with a partial last one (S % 256 != 0):
// 300 with element-by-element loads (S % 8 != 0), 600 with 16-byte loads.
inline constexpr AttnGpuCase kAttnGpuCases[] = {
    {37, 3, 3, 24, 0, 3, 0, 3, kBothDtypes},    {133, 2, 3, 24, 1, 5, 2, 6, kBothDtypes},
    {64, 2, 2, 32, 0, 2, 0, 2, kBothDtypes},    {1024, 1, 2, 16, 1, 2, 0, 2, kBothDtypes},
    {2100, 1, 1, 16, 0, 1, 1, 2, kBothDtypes},  {300, 2, 2, 16, 1, 3, 0, 2, kBothDtypes},
    {600, 1, 2, 16, 0, 1, 2, 4, kBothDtypes},   {2048, 1, 1, 16, 0, 1, 0, 1, kBF16Only},
};

// Flash attention (test_flash_attention --gpu): out, lse and dqkv against the CPU, p = 0 and 0.1. One tile
// and less (37), several tiles with a partial last one (133, 300, 2100), exactly whole tiles (64, 1024); head
// dimensions 16 to 128; a TP rank's heads of a DP rank's batches.
struct FlashGpuCase {
    int S, B, NH, HD;
    int64_t b_offset, B_total, head_offset, NH_total;
    GpuDtypes dtypes;
};
inline constexpr FlashGpuCase kFlashGpuCases[] = {
    {37, 3, 3, 24, 0, 3, 0, 3, kBothDtypes},   {133, 2, 3, 32, 1, 5, 2, 6, kBothDtypes},
    {64, 2, 2, 64, 0, 2, 0, 2, kBothDtypes},   {300, 2, 2, 16, 1, 3, 0, 2, kBothDtypes},
    {1024, 1, 2, 64, 1, 2, 0, 2, kBothDtypes}, {257, 1, 2, 128, 0, 1, 2, 4, kBothDtypes},
    {2100, 1, 1, 32, 0, 1, 1, 2, kBF16Only},
};

// Flash attention on tensor cores (bf16 only: layers/flash_attention_tc.cu; test_flash_attention --gpu-tc): out,
// lse and dqkv against the CPU path and the reference, p = 0 and 0.1, twice for the same bits. S 1 (less than one
// fragment row), 63, 64, 65 (one query and key tile of 64, less, exactly, one more), 1000 and 1024 (many tiles,
// the last partial or whole); HD 64 and 128 with each S (tiles by cp.async); heads 1 to 25, with a TP rank's heads
// of a DP rank's batches. Batch and heads per case are kept small where S is large: the emulated GPU runs these
// in CI. The last case's HD 37 is odd, not a multiple of 8 bf16 (16 bytes): its tiles come by plain loads, not
// cp.async. (kFlashGpuCases's bf16 cases and the ring blocks' run the same kernels at HD 16 to 128.)
inline constexpr FlashGpuCase kFlashTcGpuCases[] = {
    {1, 2, 25, 64, 0, 2, 0, 25, kBF16Only},     {1, 1, 3, 128, 1, 3, 2, 6, kBF16Only},
    {63, 2, 3, 64, 1, 3, 0, 3, kBF16Only},      {63, 1, 7, 128, 0, 1, 5, 12, kBF16Only},
    {64, 2, 2, 64, 0, 2, 1, 4, kBF16Only},      {64, 1, 3, 128, 0, 1, 0, 3, kBF16Only},
    {65, 1, 5, 64, 0, 1, 0, 5, kBF16Only},      {65, 2, 1, 128, 1, 4, 0, 1, kBF16Only},
    {1000, 1, 1, 64, 0, 1, 1, 2, kBF16Only},    {1000, 1, 1, 128, 0, 1, 0, 1, kBF16Only},
    {1024, 1, 1, 64, 0, 1, 0, 1, kBF16Only},    {1024, 1, 1, 128, 0, 2, 0, 1, kBF16Only},
    {65, 2, 2, 37, 0, 2, 0, 2, kBF16Only},
};

// Ring attention's blocks (test_flash_attention --gpu): flash_block_forward, flash_block_merge and
// flash_block_backward against the CPU, p = 0 and 0.1, Q in rows of 3C and K, V in rows of 2C, lse rows
// lse_ld = Sq + 5 apart, the accumulators of the backward holding earlier blocks' values. A block on the
// diagonal (q_pos == k_pos), a full one (k_pos + Sk <= q_pos), partially masked ones whose first queries see
// no key (q_pos < k_pos) or all of it (Sq != Sk); lengths off the tile sizes (40, 72, 100); every HD bound.
struct FlashBlockGpuCase {
    int Sq, Sk;
    int64_t q_pos, k_pos, S_total;
    int B, NH, HD;
    int64_t b_offset, B_total, head_offset, NH_total;
    GpuDtypes dtypes;
};
inline constexpr FlashBlockGpuCase kFlashBlockGpuCases[] = {
    {72, 72, 72, 72, 288, 2, 2, 64, 0, 2, 0, 2, kBothDtypes},       // diagonal
    {40, 72, 200, 40, 288, 2, 3, 32, 1, 4, 2, 6, kBothDtypes},      // full: every key before every query
    {72, 40, 100, 120, 288, 1, 2, 100, 0, 1, 0, 2, kBothDtypes},    // queries 100..119 see no key; HD bound 128
    {40, 100, 30, 0, 288, 2, 2, 24, 0, 2, 1, 3, kBothDtypes},       // keys 71..99 seen by no query
    {100, 72, 130, 100, 288, 1, 1, 128, 0, 1, 0, 1, kBothDtypes},   // partly below, partly on the diagonal
};

// LayerNorm (test_layernorm --gpu): forward and backward against the CPU. Forward kernels
// (layernorm_forward_slots): C <= 1024 four packs per lane (129, 768, 1), <= 2048 eight (1600, GPT-2 XL),
// <= 4096 sixteen (2500), <= 6144 twenty-four in bf16 (6144, the 22B model), wider the general kernel
// (6400 with 16-byte packs, 6403 element by element; and f32 above 4096).
struct LnGpuCase {
    int N, C;
    GpuDtypes dtypes;
};
inline constexpr LnGpuCase kLayerNormGpuCases[] = {
    {37, 129, kBothDtypes}, {1000, 768, kBothDtypes}, {5, 1, kBothDtypes},   {3, 2500, kBothDtypes},
    {4, 6400, kBothDtypes}, {3, 6403, kBothDtypes},   {64, 1600, kBothDtypes}, {16, 6144, kBF16Only},
};

// Linear (test_linear --gpu): forward with a bias, backward, against the CPU. The forward path is pinned
// (linear_forward_pin) where the case names one, so that each path is tested whatever cuBLASLt takes;
// `pin` NoBias means "not pinned" (the trainer's choice, which at odd shapes may be either path).
// out_f32: bf16 input and weight with f32 output (the LM head's logits): always the broadcast path.
struct LinearGpuCase {
    int N, IC, OC;
    LinearForwardPath pin;
    GpuDtypes dtypes;
    bool out_f32;
};
inline constexpr LinearGpuCase kLinearGpuCases[] = {
    {37, 129, 67, LinearForwardPath::NoBias, kBothDtypes, false},
    {37, 129, 67, LinearForwardPath::Broadcast, kBothDtypes, false},
    {64, 128, 256, LinearForwardPath::FusedBias, kBothDtypes, false},
    {37, 129, 67, LinearForwardPath::NoBias, kBF16Only, true},
};

// tensor_convert (test_runtime --gpu): the GPU conversion against the CPU's, bit for bit, both directions
// and the same-dtype copy; n = 1, a partial last block of 256 threads, and a few million elements.
struct ConvertGpuCase {
    DType dst, src;
    int64_t n;
};
inline constexpr ConvertGpuCase kConvertGpuCases[] = {
    {DType::BF16, DType::F32, 1},       {DType::BF16, DType::F32, 1000003}, {DType::F32, DType::BF16, 1},
    {DType::F32, DType::BF16, 1000003}, {DType::F32, DType::F32, 4099},     {DType::BF16, DType::BF16, 4099},
};

// ---- the race mode's shapes ----------------------------------------------------------------------------------
// make test-emulated runs the kernel tests once more under ThreadSanitizer (build-emulated-race/, 5 to 20 times
// slower than the memcheck build), with MM_GPU_TEST_SMALL=1 in their environment: a test then takes the small
// table of its op where one is given here, a case or two that still launch each of its kernels (every kernel,
// not every instantiation: the full tables run in the other builds). gpu_cases(full, small) is the table to
// iterate over.
inline bool gpu_test_small() {
    static const bool small = [] {
        const char* v = std::getenv("MM_GPU_TEST_SMALL");
        return v && *v && *v != '0';
    }();
    return small;
}
template <class T>
struct GpuCases {
    const T* first;
    const T* last;
    const T* begin() const { return first; }
    const T* end() const { return last; }
};
template <class T, size_t N, size_t M>
inline GpuCases<T> gpu_cases(const T (&full)[N], const T (&small)[M]) {
    return gpu_test_small() ? GpuCases<T>{small, small + M} : GpuCases<T>{full, full + N};
}
// Attention: the vectorized kernels (S 37, one pack of keys a lane) and the general one (S above 1024, f32).
inline constexpr AttnGpuCase kAttnGpuCasesSmall[] = {
    {37, 3, 3, 24, 0, 3, 0, 3, kBothDtypes},
    {1030, 1, 1, 16, 0, 1, 1, 2, kF32Only},
};
// Flash attention: several tiles with a partial last one, a TP rank's heads; a ring block on the diagonal, and
// one whose keys all come before its queries (there only the key bound ends a partial key tile).
inline constexpr FlashGpuCase kFlashGpuCasesSmall[] = {
    {133, 2, 3, 32, 1, 5, 2, 6, kBothDtypes},
};
// Flash attention on tensor cores: four query and key tiles, the last partial (S 200: the double buffer is
// refilled, so its write-after-read barrier is needed), at HD 64 (tiles by cp.async); two tiles at HD 128 and
// HD 37 (by plain loads).
inline constexpr FlashGpuCase kFlashTcGpuCasesSmall[] = {
    {200, 1, 2, 64, 0, 1, 0, 2, kBF16Only}, {65, 1, 1, 128, 0, 2, 1, 2, kBF16Only}, {65, 1, 1, 37, 0, 1, 0, 1, kBF16Only},
};
inline constexpr FlashBlockGpuCase kFlashBlockGpuCasesSmall[] = {
    {72, 72, 72, 72, 288, 2, 2, 64, 0, 2, 0, 2, kBF16Only},
    {40, 72, 200, 40, 288, 2, 3, 32, 1, 4, 2, 6, kF32Only},
};
