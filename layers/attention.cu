// attention.cu — core attention, unfused on purpose (see attention.h):
//
//   scores = Q Kᵀ                                   per (batch, head): an S×S GEMM
//   probs  = softmax(causal_mask(scores / sqrt(HD)))  one fused kernel, which also applies dropout:
//   mask   = keep(seed, stream, global index) for k <= q, 0 for k > q;   probs_drop = probs ⊙ mask / (1 - p)
//   out    = probs_drop · V                         per (batch, head): an S×HD GEMM
//
// The plain math this file computes fast: layers/reference/attention.h
//
// The s×s tensors (probs, mask, probs_drop) are what Korthikanti et al. count as the 5as²b bytes of a layer
// (2as²b softmax output, as²b dropout mask, 2as²b dropout output, Table 2) and what *selective
// recomputation* (§5) drops and rebuilds in backward by calling attention_probs_forward again. Because the
// dropout mask is a pure function of (seed, stream, global index) (philox.h), that rebuild reproduces the
// forward bits exactly, with no RNG state to save.
//
// The stored mask also carries the causal mask: entries with k > q are 0 ("dropped") without drawing a random
// number. Their probability is 0 anyway, so nothing downstream changes, but about half of the random numbers
// of the s×s tensor (the softmax kernel's main cost, paid again by selective recompute) are never generated.
//
// Layout. qkv is [S·B, 3·NH·HD] with row s·B + b. For batch b and head n, Q is the S×HD matrix starting at
// element b·3·NH·HD + n·HD with row stride R = B·3·NH·HD (consecutive s are B rows apart); K and V are the
// same, shifted by NH·HD and 2·NH·HD columns: heads HD elements apart, sequences 3·NH·HD apart. So one
// two-level batched GEMM (gemm_batched, matmul.h) per block of queries covers all heads of all sequences
// ("Causal blocking" below) and no transpose of Q, K or V is ever materialized (on the CPU in fp32 the
// products read compact copies of them, same orientation: "The operands" below). probs etc. are [B, NH, S, S].
//
// Precision (as Megatron's fused softmax): the scores GEMM writes the activation dtype (bf16 in a bf16 run),
// the softmax reads it and does all its math in fp32.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>
#include "fast_exp.h"
#include "matmul.h"
#include "op_timer.h"
#include "philox.h"
#include "vec8.h"
#include "warp_reduce.cuh"

static inline const void* elem_ptr(const Tensor& t, int64_t offset) {
    return static_cast<const char*>(t.data) + (size_t)offset * dtype_size(t.dtype);
}

// The (sequence b, head n) matrices of the three layouts as two-level batches for gemm_batched (outer = b,
// inner = n), starting `offset` elements in (a row or column offset of a causal block):
//  - Q, K or V (`part` 0, 1, 2) of qkv / dqkv [S·B, 3·NH·HD]: row stride R, b at 3·NH·HD, n at HD;
//  - out / dout [S·B, NH·HD]: row stride RO, b at NH·HD, n at HD;
//  - an s×s tensor [B, NH, S, S]: row stride S, b at NH·S², n at S².
static inline GemmBatchOperand qkv_part(const Tensor& t, int part, int64_t offset, int64_t R, int NH, int HD) {
    return GemmBatchOperand{elem_ptr(t, (int64_t)part * NH * HD + offset), R, 3 * (int64_t)NH * HD, HD};
}
static inline GemmBatchOperand out_part(const Tensor& t, int64_t offset, int64_t RO, int NH, int HD) {
    return GemmBatchOperand{elem_ptr(t, offset), RO, (int64_t)NH * HD, HD};
}
static inline GemmBatchOperand ss_part(const Tensor& t, int64_t offset, int S, int NH) {
    const int64_t SS = (int64_t)S * S;
    return GemmBatchOperand{elem_ptr(t, offset), S, NH * SS, SS};
}

// The operands Q, K, V and dO as the products read them. In place, a (b, n) matrix has its rows R (or RO)
// elements apart: 24 KB at the CPU peer's shape (h 256, 8 sequences), so every row of a 64 × 32 operand is a
// cache line on a page of its own. On the CPU in fp32 each op first copies the operands it reads into compact
// [B, NH, S, HD] buffers (rows HD apart), which made the per-(sequence, head) products 1.3-1.5× faster on one
// core at that shape (QKᵀ 42 -> 59 GFLOP/s, P·V 54 -> 84, dV 56 -> 80, alone; in the step, less: see
// bench/PERF_NOTES.md "Attention's operands, compact"). OpenBLAS computes an element the same way whatever
// the operands' strides, so the results are bit for bit those of the operands in place (checkpoints
// byte-identical). What the products write (the
// s×s tensors, dQ, dK, dV in dqkv) stays in place. bf16 operands are widened into compact fp32 tiles by
// gemm() anyway, and the GPU reads them in place. The buffers are scratch, not activations (the allocator
// does not count them), and only grow: one per operand, reused by every layer and call.
struct HeadsOperand {
    const char* base;  // the (0, 0) matrix's first element
    size_t elem;       // bytes per element
    int64_t ld, outer_stride, stride;  // as GemmBatchOperand
    GemmBatchOperand rows(int64_t r0) const {  // the matrices from their row r0 on
        return GemmBatchOperand{base + (size_t)(r0 * ld) * elem, ld, outer_stride, stride};
    }
};
enum HeadsBuffer { kHeadsQ, kHeadsK, kHeadsV, kHeadsDout, kHeadsBuffers };
static std::vector<float> g_compact_heads[kHeadsBuffers];

// The operand whose (b, n) matrix starts at element col + b·outer_stride + n·HD of t, rows ld apart.
static HeadsOperand heads(const Ctx& ctx, const Tensor& t, int64_t col, int64_t ld, int64_t outer_stride,
                          const AttnShape& sh, HeadsBuffer which) {
    const size_t es = dtype_size(t.dtype);
    const char* src = static_cast<const char*>(t.data) + (size_t)col * es;
    if (ctx.device != Device::CPU || t.dtype != DType::F32) return HeadsOperand{src, es, ld, outer_stride, sh.HD};
    const int S = sh.S, NH = sh.NH, HD = sh.HD;
    const int64_t pairs = (int64_t)sh.B * NH, m = (int64_t)S * HD;
    std::vector<float>& buf = g_compact_heads[which];
    if ((int64_t)buf.size() < pairs * m) buf.resize((size_t)(pairs * m));
    float* dst = buf.data();
    const float* from = reinterpret_cast<const float*>(src);
#pragma omp parallel for schedule(static)
    for (int64_t pair = 0; pair < pairs; pair++) {
        const float* x = from + (pair / NH) * outer_stride + (pair % NH) * HD;
        for (int s = 0; s < S; s++) memcpy(dst + pair * m + (int64_t)s * HD, x + s * ld, sizeof(float) * HD);
    }
    return HeadsOperand{reinterpret_cast<const char*>(dst), sizeof(float), HD, NH * m, m};
}
static HeadsOperand qkv_heads(const Ctx& ctx, const Tensor& qkv, int part, const AttnShape& sh) {
    return heads(ctx, qkv, (int64_t)part * sh.NH * sh.HD, (int64_t)sh.B * 3 * sh.NH * sh.HD, 3 * (int64_t)sh.NH * sh.HD,
                 sh, (HeadsBuffer)part);
}

// The end (exclusive) of the keys row q of the s×s tensors holds: the end of q's block of queries (see
// "Causal blocking" below). Keys q+1 .. end-1 are written as 0; keys from end on are neither written nor read.
__host__ __device__ inline int causal_row_end(int q, int block, int S) {
    const int end = (q / block + 1) * block;  // once per row, never per element
    return end < S ? end : S;
}

// Everything the softmax + dropout kernel needs, passed by value.
struct SoftmaxDropoutArgs {
    int64_t rows;        // B·NH·S
    int S, NH;
    int block;           // causal block rows (attention_causal_block): row q is written up to its block's end
    float scale;         // 1/sqrt(HD)
    uint32_t threshold;  // dropout_threshold(p)
    float inv_keep;      // 1/(1-p)
    uint64_t seed;
    uint32_t stream;
    int64_t b_offset, head_offset, NH_total;
};

// Backward of dropout + softmax, fused. On entry d holds dP_d = dO·Vᵀ (gradient w.r.t. probs_drop); on exit
// it holds dS, the gradient w.r.t. the raw scores Q·Kᵀ:
//   dP = dP_d ⊙ mask / (1-p)                        (dropout backward)
//   dS = P ⊙ (dP − Σ_k dP⊙P) / sqrt(HD)             (softmax Jacobian-vector product, then the scale)
// Masked keys (k > q) have P = 0 and get dS = 0 exactly.
struct SoftmaxBackArgs {
    int64_t rows;
    int S;
    int block;  // as in SoftmaxDropoutArgs
    float scale, inv_keep;
};

// ---------------------------------------------------------------------------------------------------------
// Fast CPU path: one row (b, n, q) at a time, keys 0..q (causal), fp32 math. OpenMP splits the rows. Within a
// row the loops over keys are vectorised: the maximum is exact in any order; the sums use kCpuPack partial
// sums in a fixed order (partial j adds keys k ≡ j mod kCpuPack; cpu_row_partials, vec8.h), so a row's bits depend
// only on S and q, never on the thread count. One exponential per key, fast_exp (fast_exp.h, within 2 ulp
// of e^x): e_k = exp(x_k·scale − m) is kept in a row buffer between the sum and the output.
// ---------------------------------------------------------------------------------------------------------

// One row (b, n, q) of the softmax + dropout; e is the caller's row buffer of S floats. Inlined into the
// vectorised loops below (their MM_CPU_LOOP copies), never called on its own.
template <class T>
MM_CPU_INLINE static void softmax_dropout_row_cpu(T* probs, uint8_t* mask, T* probs_drop, const SoftmaxDropoutArgs& a,
                                           int64_t row, float* e) {
    const int S = a.S;
    const int q = (int)(row % S);
    const int64_t bn = row / S;
    const int64_t n = bn % a.NH, b = bn / a.NH;
    T* x = probs + row * S;  // holds the raw scores Q·Kᵀ on entry, probs on exit
    const int len = q + 1;  // keys 0..q
    float acc[kCpuPack];
    for (int j = 0; j < kCpuPack; j++) acc[j] = -INFINITY;
    // The row's last, partial pack in the SIMD loops too (cpu_row_partials_padded, vec8.h): the keys after q
    // read there are not the row's (raw scores of later keys, or never written) and are selected away.
    cpu_row_partials_padded(len, S, [&](int j, int64_t k, bool in) {
        const float v = to_f32(x[k]) * a.scale;
        acc[j] = select_f(in & (v > acc[j]), v, acc[j]);  // a bit-mask select: see fast_exp.h
    });
    float m = -INFINITY;
    for (int j = 0; j < kCpuPack; j++) m = acc[j] > m ? acc[j] : m;
    for (int j = 0; j < kCpuPack; j++) acc[j] = 0.f;
    cpu_row_partials_padded(len, S, [&](int j, int64_t k, bool in) {
        e[k] = fast_exp(to_f32(x[k]) * a.scale - m);  // past q: not used (the loops below take keys <= q)
        acc[j] = select_f(in, acc[j] + e[k], acc[j]);
    });
    const float inv_sum = 1.f / cpu_partials_total(acc);
    uint8_t* mr = mask + row * S;
    T* pd = probs_drop + row * S;
    const int end = causal_row_end(q, a.block, S);  // the keys of q's block row: nothing beyond
    if (a.threshold == 0) {  // no dropout: every key up to q is kept, no random numbers to draw
#pragma omp simd
        for (int k = 0; k < end; k++) {
            const float pk = k <= q ? e[k] * inv_sum : 0.f;
            x[k] = from_f32<T>(pk);
            mr[k] = k <= q ? 1 : 0;
            pd[k] = from_f32<T>(pk * a.inv_keep);
        }
    } else {
        // The keep bytes of keys 0..q first: their global indices are consecutive, so one run of Philox
        // blocks in SIMD lanes (philox.h) draws them; then the row in one SIMD loop. Keys after the
        // query are masked: probability exactly 0 (the causal mask of GPT-2), mask 0.
        dropout_keep_run(mr, a.seed, a.stream,
                         attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, S, q, 0), len,
                         a.threshold);
#pragma omp simd
        for (int k = 0; k < end; k++) {
            const float pk = k <= q ? e[k] * inv_sum : 0.f;
            const bool keep = (k <= q) & (mr[k] != 0);  // mr[k] past q is not drawn yet: masked out
            x[k] = from_f32<T>(pk);
            mr[k] = keep ? 1 : 0;
            pd[k] = from_f32<T>(select_f(keep, pk * a.inv_keep, 0.f));
        }
    }
}

template <class T>
MM_CPU_LOOP static void softmax_dropout_cpu(T* probs, uint8_t* mask, T* probs_drop, const SoftmaxDropoutArgs& a) {
#pragma omp parallel
    {
        std::vector<float> e(a.S);  // this thread's row of exponentials
#pragma omp for schedule(static)
        for (int64_t row = 0; row < a.rows; row++) softmax_dropout_row_cpu(probs, mask, probs_drop, a, row, e.data());
    }
}

// One row of the softmax + dropout backward, inlined as softmax_dropout_row_cpu is.
template <class T>
MM_CPU_INLINE static void softmax_dropout_backward_row_cpu(T* d, const T* probs, const uint8_t* mask, const SoftmaxBackArgs& a,
                                                    int64_t row) {
    const int S = a.S;
    const int q = (int)(row % S);
    T* dr = d + row * S;
    const T* pr = probs + row * S;
    const uint8_t* mr = mask + row * S;
    const int len = q + 1;
    // Every load is unconditional and the mask picks with a bit-mask select (fast_exp.h): with a load
    // under `mr[k] ? ... :`, or a `?:` the compiler threads into a branch, the loop would stay scalar.
    float acc[kCpuPack] = {0};
    cpu_row_partials_padded(len, S, [&](int j, int64_t k, bool in) {
        const float dv = to_f32(dr[k]) * a.inv_keep, pv = to_f32(pr[k]);
        acc[j] = select_f(in, acc[j] + select_f(mr[k] != 0, dv, 0.f) * pv, acc[j]);
    });
    const float dot = cpu_partials_total(acc);
    const int end = causal_row_end(q, a.block, S);
#pragma omp simd
    for (int k = 0; k < end; k++) {
        const float dv = to_f32(dr[k]) * a.inv_keep;
        const float dp = select_f(mr[k] != 0, dv, 0.f);
        const float v = to_f32(pr[k]) * (dp - dot) * a.scale;
        const float ds = select_f(k <= q, v, 0.f);
        dr[k] = from_f32<T>(ds);
    }
}

template <class T>
MM_CPU_LOOP static void softmax_dropout_backward_cpu(T* d, const T* probs, const uint8_t* mask, const SoftmaxBackArgs& a) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < a.rows; row++) softmax_dropout_backward_row_cpu(d, probs, mask, a, row);
}

// ---------------------------------------------------------------------------------------------------------
// CUDA kernels, vectorized (the common case: rows of up to 2048 keys in bf16, 1024 in f32). One warp per row,
// the row cut into packs of 8 keys (vec8.h): lane l owns packs l, l + 32, ... and keeps them in registers
// (kSlots packs, a compile-time bound so the arrays stay in registers). Compared with a scalar kernel (the
// fallback at the end of this file):
//  - the row is read from memory once (not once per pass), with 16-byte loads in bf16 (vec);
//  - packs entirely after the query (c0 > q, about half of a causal row) are never read and draw no random
//    numbers: their probabilities and mask bytes are 0, just written;
//  - probs, mask and probs_drop are written in the same pass, 16 / 8 / 16 bytes per pack.
// The sums run in a fixed order that depends only on S (each lane over its packs in order, then the xor
// butterfly), so loading with vector or scalar accesses (vec false: S % 8 != 0 or misaligned) gives the same
// bits. The keep bits come from the same Philox words as dropout_keep (philox.h: dropout_keep8), so the mask
// equals the fast CPU path's bit for bit.
// ---------------------------------------------------------------------------------------------------------

constexpr int kRowsPerBlock = 4;  // warps per block

template <class T, int kSlots>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    softmax_dropout_vec_kernel(T* probs, uint8_t* mask, T* probs_drop, SoftmaxDropoutArgs a, bool vec) {
    const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= a.rows) return;  // whole warps exit together: the shuffles below see full warps
    const int S = a.S;
    const int q = (int)(row % S);
    const int64_t bn = row / S;
    const int64_t n = bn % a.NH, b = bn / a.NH;
    T* x = probs + row * S;
    // Global dropout index of key 0 of this row; key k is g0 + k (attn_dropout_index is linear in k).
    const uint64_t g0 = attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, S, q, 0);

    Pack8<T> xs[kSlots];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 <= q) {  // q < S, so the pack exists; keys after q are not needed
            xs[i] = load8(x + c0, S - c0 < 8 ? S - c0 : 8, vec);
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (c0 + k <= q) m = fmaxf(m, to_f32(xs[i].v[k]) * a.scale);
        }
    }
    m = warp_max(m);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 <= q) {
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (c0 + k <= q) sum += expf(to_f32(xs[i].v[k]) * a.scale - m);
        }
    }
    sum = warp_sum(sum);
    const float inv_sum = 1.f / sum;
    const int end = causal_row_end(q, a.block, S);  // packs from end on belong to blocks above the diagonal
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 < end) {
            const int count = end - c0 < 8 ? end - c0 : 8;
            Pack8<T> pv, dv;
            uint64_t mbits = 0;
            // Keys k <= q only: the pack straddling the diagonal keeps its first q - c0 + 1 bits, a pack after it
            // none (and skips Philox altogether).
            uint32_t keep8 = 0;
            if (c0 <= q) {
                keep8 = dropout_keep8(a.seed, a.stream, g0 + (uint64_t)c0, a.threshold);  // philox.h
                if (q - c0 < 7) keep8 &= (1u << (q - c0 + 1)) - 1u;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                // Keys after the query are masked: probability exactly 0 (the causal mask of GPT-2).
                const float pk = c0 + k <= q ? expf(to_f32(xs[i].v[k]) * a.scale - m) * inv_sum : 0.f;
                const bool keep = (keep8 >> k) & 1u;
                pv.v[k] = from_f32<T>(pk);
                dv.v[k] = from_f32<T>(keep ? pk * a.inv_keep : 0.f);
                mbits |= (uint64_t)(keep ? 1 : 0) << (8 * k);
            }
            store8(x + c0, pv, count, vec);  // in place: this lane read these keys above
            store_mask8(mask + row * S + c0, mbits, count, vec);
            store8(probs_drop + row * S + c0, dv, count, vec);
        }
    }
}

// Backward of dropout + softmax, vectorized like the forward: the lane's packs of dP_d, P and the mask are
// loaded once into registers (only packs with keys <= q: the others have dS = 0 and are just written).
template <class T, int kSlots>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    softmax_dropout_backward_vec_kernel(T* d, const T* probs, const uint8_t* mask, SoftmaxBackArgs a, bool vec) {
    const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= a.rows) return;
    const int S = a.S;
    const int q = (int)(row % S);
    T* dr = d + row * S;
    const T* pr = probs + row * S;
    const uint8_t* mr = mask + row * S;

    Pack8<T> ds[kSlots], ps[kSlots];
    uint64_t ms[kSlots];
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 <= q) {
            const int count = S - c0 < 8 ? S - c0 : 8;
            ds[i] = load8(dr + c0, count, vec);
            ps[i] = load8(pr + c0, count, vec);
            ms[i] = load_mask8(mr + c0, count, vec);
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (c0 + k <= q)
                    dot += (mask8_get(ms[i], k) ? to_f32(ds[i].v[k]) * a.inv_keep : 0.f) * to_f32(ps[i].v[k]);
        }
    }
    dot = warp_sum(dot);
    const int end = causal_row_end(q, a.block, S);
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 < end) {
            Pack8<T> o;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float dsk = 0.f;
                if (c0 + k <= q) {
                    float dp = mask8_get(ms[i], k) ? to_f32(ds[i].v[k]) * a.inv_keep : 0.f;
                    dsk = to_f32(ps[i].v[k]) * (dp - dot) * a.scale;
                }
                o.v[k] = from_f32<T>(dsk);
            }
            store8(dr + c0, o, end - c0 < 8 ? end - c0 : 8, vec);  // in place: this lane read these keys above
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// dispatch and the ops
// ---------------------------------------------------------------------------------------------------------

// The fallback kernels, defined at the end of this file.
template <class T>
__global__ void softmax_dropout_kernel(T* probs, uint8_t* mask, T* probs_drop, SoftmaxDropoutArgs a);
template <class T>
__global__ void softmax_dropout_backward_kernel(T* d, const T* probs, const uint8_t* mask, SoftmaxBackArgs a);

// Packs of 8 keys per lane for a row of S keys, or 0 when the row is too long for the vectorized kernels
// (the fallback kernels then run). Up to 8 packs (S <= 2048) in bf16; up to 4 (S <= 1024) in f32, where a
// pack takes twice the registers. Depends only on S and the dtype, never on alignment, so that the choice is
// a plain host function the coverage test can call without a GPU (attention.h).
int attention_softmax_slots(int S, DType dtype) {
    if (S <= 0) return 0;
    const int slots = ((S + 7) / 8 + 31) / 32;
    const int max_slots = dtype == DType::BF16 ? 8 : 4;
    if (slots > max_slots) return 0;
    return slots <= 1 ? 1 : slots <= 2 ? 2 : slots <= 4 ? 4 : 8;
}

// Call launch(std::integral_constant<int, kSlots>()) with the kSlots that holds a row of S keys, so that the
// caller instantiates its vectorized kernel for exactly that bound. Returns false when no kSlots does.
template <class Launch>
static bool launch_by_slots(int S, DType dtype, Launch&& launch) {
    switch (attention_softmax_slots(S, dtype)) {
        case 1: launch(std::integral_constant<int, 1>()); return true;
        case 2: launch(std::integral_constant<int, 2>()); return true;
        case 4: launch(std::integral_constant<int, 4>()); return true;
        case 8: launch(std::integral_constant<int, 8>()); return true;
        default: return false;
    }
}

static unsigned row_blocks(int64_t rows) { return (unsigned)((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// Causal blocking of the attention GEMMs and of the softmax kernels, on both devices. The queries are cut
// into blocks of attention_causal_block(ctx, S) rows; block [r0, r1) needs only keys 0 .. r1-1, so the
// products that make or read the s×s tensors skip the blocks above the diagonal: QKᵀ and dO·Vᵀ write, P_d·V
// and dS·K read, only rows r0 .. r1-1 up to column r1-1, and the transposed products (dV, dK) of key block
// [r0, r1) read only the queries r0 .. S-1 of those columns (each such query's own block ends at or after
// r1). The softmax kernels, forward and backward, write row q only up to the end of q's block
// (causal_row_end): keys q+1 .. end-1 as 0, nothing beyond. So every entry above the blocks, in all the s×s
// tensors (raw scores, probs, mask, probs_drop, dP_d, dS), is neither written nor read; its bytes stay
// whatever the buffer held (test_attention poisons them with NaN). The skipped terms of the sums are exact
// zeros, so results change at most by the order of the BLAS sums. The tensors are still allocated in full:
// the memory accounting (5as²b per layer, Table 2) is unchanged.
//
// Each block is ONE gemm_batched call (matmul.h) over all B·NH (sequence, head) pairs of the layer: the
// heads of a sequence are HD columns apart, the sequences 3·NH·HD apart (a two-level batch, no single
// stride). Blocks: 64 rows on the CPU (the blocks on and below the diagonal are 75 % of the square at
// S = 128, 53 % at S = 1024; 32 was slower than 64 at S = 128 on a 2-core machine: more, smaller BLAS
// calls); 256 on the GPU, where each call should still fill the device (S = 1024: 4 calls per GEMM instead
// of B, 62.5 % of the square; S = 2048: 8 calls, 56 %); a sequence of at most one block is one call over
// the whole square.
constexpr int kCausalRowsCpu = 64, kCausalRowsGpu = 256;
int attention_causal_block(const Ctx& ctx, int S) {
    const int blk = ctx.device == Device::CPU ? kCausalRowsCpu : kCausalRowsGpu;
    return S < blk ? S : blk;
}

static void check_shape(const char* op, const AttnShape& sh, const Tensor& qkv) {
    if (sh.S <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape S=%d B=%d NH=%d HD=%d", op, sh.S, sh.B, sh.NH, sh.HD);
    if (qkv.n != (int64_t)sh.S * sh.B * 3 * sh.NH * sh.HD)
        mm_fatal("%s: qkv has %lld elements, expected S*B*3*NH*HD", op, (long long)qkv.n);
    if (sh.b_offset < 0 || sh.b_offset + sh.B > sh.B_total || sh.head_offset < 0 ||
        sh.head_offset + sh.NH > sh.NH_total)
        mm_fatal("%s: local block (b %lld+%d of %lld, heads %lld+%d of %lld) outside the global tensor", op,
                 (long long)sh.b_offset, sh.B, (long long)sh.B_total, (long long)sh.head_offset, sh.NH,
                 (long long)sh.NH_total);
}
static void check_ss(const char* op, const char* name, const Tensor& t, const AttnShape& sh, DType dtype) {
    if (t.n != (int64_t)sh.B * sh.NH * sh.S * sh.S || t.dtype != dtype)
        mm_fatal("%s: %s must be %s [B, NH, S, S]", op, name, dtype_name(dtype));
}

void attention_probs_forward(Ctx& ctx, Tensor probs, Tensor mask, Tensor probs_drop, Tensor qkv,
                             const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    check_shape("attention_probs_forward", sh, qkv);
    check_ss("attention_probs_forward", "probs", probs, sh, qkv.dtype);
    check_ss("attention_probs_forward", "probs_drop", probs_drop, sh, qkv.dtype);
    check_ss("attention_probs_forward", "mask", mask, sh, DType::U8);
    if (!(p >= 0.f && p < 1.f)) mm_fatal("attention_probs_forward: dropout p=%g outside [0, 1)", p);
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD;
    const double gemm_flops = 2.0 * B * NH * (double)S * S * HD;
    OpScope scope(ctx, "attention_probs_forward", gemm_flops);
    // scores[b, n] = Q[b, n] · K[b, n]ᵀ, written straight into probs (the kernel below works in place).
    const int blk = attention_causal_block(ctx, S);
    {
        OpScope part(ctx, "qk_gemm", gemm_flops);  // the GEMM and the softmax kernel are timed apart
        const HeadsOperand Q = qkv_heads(ctx, qkv, 0, sh), K = qkv_heads(ctx, qkv, 1, sh);
        for (int r0 = 0; r0 < S; r0 += blk) {  // queries r0 .. r1-1 against keys 0 .. r1-1
            const int r1 = std::min(S, r0 + blk);
            gemm_batched(ctx, false, true, r1 - r0, r1, HD, 1.f, Q.rows(r0), K.rows(0), 0.f,
                         ss_part(probs, (int64_t)r0 * S, S, NH), qkv.dtype, probs.dtype, B, NH);
        }
    }
    OpScope part(ctx, "softmax_dropout");
    SoftmaxDropoutArgs a;
    a.rows = (int64_t)B * NH * S;
    a.S = S;
    a.NH = NH;
    a.block = blk;
    a.scale = 1.f / sqrtf((float)HD);
    a.threshold = dropout_threshold(p);
    a.inv_keep = 1.f / (1.f - p);
    a.seed = seed;
    a.stream = stream;
    a.b_offset = sh.b_offset;
    a.head_offset = sh.head_offset;
    a.NH_total = sh.NH_total;
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA) {
            const bool vec = S % 8 == 0 && vec8_aligned(probs.data) && vec8_aligned(mask.data) &&
                             vec8_aligned(probs_drop.data);
            const unsigned blocks = row_blocks(a.rows), threads = 32 * kRowsPerBlock;
            T* pp = probs.as<T>();
            T* pd = probs_drop.as<T>();
            uint8_t* pm = mask.as<uint8_t>();
            const bool launched = launch_by_slots(S, qkv.dtype, [&](auto slots) {
                softmax_dropout_vec_kernel<T, decltype(slots)::value><<<blocks, threads, 0, ctx.stream>>>(pp, pm, pd, a,
                                                                                                        vec);
            });
            if (!launched) softmax_dropout_kernel<T><<<blocks, threads, 0, ctx.stream>>>(pp, pm, pd, a);
            CUDA_CHECK_LAST();
        } else {
            softmax_dropout_cpu<T>(probs.as<T>(), mask.as<uint8_t>(), probs_drop.as<T>(), a);
        }
    });
}

void attention_context_forward(Ctx& ctx, Tensor out, Tensor probs_drop, Tensor qkv, const AttnShape& sh) {
    check_shape("attention_context_forward", sh, qkv);
    check_ss("attention_context_forward", "probs_drop", probs_drop, sh, qkv.dtype);
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD;
    if (out.n != (int64_t)S * B * NH * HD || out.dtype != qkv.dtype)
        mm_fatal("attention_context_forward: out must be [S*B, NH*HD] of the qkv dtype");
    const int64_t RO = (int64_t)B * NH * HD;
    OpScope scope(ctx, "attention_context_forward", 2.0 * B * NH * (double)S * S * HD);
    // out[b, n] = probs_drop[b, n] · V[b, n]; the heads of out sit side by side in its [S·B, NH·HD] rows.
    const int blk = attention_causal_block(ctx, S);
    const HeadsOperand V = qkv_heads(ctx, qkv, 2, sh);
    for (int r0 = 0; r0 < S; r0 += blk) {  // rows r0 .. r1-1 of probs_drop are 0 beyond key r1-1
        const int r1 = std::min(S, r0 + blk);
        gemm_batched(ctx, false, false, r1 - r0, HD, r1, 1.f, ss_part(probs_drop, (int64_t)r0 * S, S, NH), V.rows(0),
                     0.f, out_part(out, r0 * RO, RO, NH, HD), qkv.dtype, out.dtype, B, NH);
    }
}

void attention_backward(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor qkv, Tensor probs, Tensor mask,
                        Tensor probs_drop, Tensor scratch, const AttnShape& sh, float p) {
    const char* op = "attention_backward";
    check_shape(op, sh, qkv);
    check_ss(op, "probs", probs, sh, qkv.dtype);
    check_ss(op, "probs_drop", probs_drop, sh, qkv.dtype);
    check_ss(op, "mask", mask, sh, DType::U8);
    check_ss(op, "scratch", scratch, sh, qkv.dtype);
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD;
    if (dqkv.n != qkv.n || dqkv.dtype != qkv.dtype || dout.n != (int64_t)S * B * NH * HD || dout.dtype != qkv.dtype)
        mm_fatal("%s: dqkv must match qkv and dout be [S*B, NH*HD], all of one dtype", op);
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
    const int64_t R = (int64_t)B * 3 * NH * HD, RO = (int64_t)B * NH * HD;
    const DType dt = qkv.dtype;
    OpScope scope(ctx, "attention_backward", 4 * 2.0 * B * NH * (double)S * S * HD);  // four GEMMs
    const int blk = attention_causal_block(ctx, S);
    {
        OpScope part(ctx, "dv_dp_gemm", 2 * 2.0 * B * NH * (double)S * S * HD);  // the parts timed apart (op_timer.h)
        const HeadsOperand dO = heads(ctx, dout, 0, RO, (int64_t)NH * HD, sh, kHeadsDout), V = qkv_heads(ctx, qkv, 2, sh);
        for (int r0 = 0; r0 < S; r0 += blk) {
            const int r1 = std::min(S, r0 + blk);
            // dV[keys r0 .. r1-1] = P_dᵀ · dO over the queries r0 .. S-1 (earlier queries do not see these keys)
            gemm_batched(ctx, true, false, r1 - r0, HD, S - r0, 1.f, ss_part(probs_drop, (int64_t)r0 * S + r0, S, NH),
                         dO.rows(r0), 0.f, qkv_part(dqkv, 2, r0 * R, R, NH, HD), dt, dt, B, NH);
            // dP_d[queries r0 .. r1-1] = dO · Vᵀ over the keys 0 .. r1-1  (into scratch)
            gemm_batched(ctx, false, true, r1 - r0, r1, HD, 1.f, dO.rows(r0), V.rows(0), 0.f,
                         ss_part(scratch, (int64_t)r0 * S, S, NH), dt, dt, B, NH);
        }
    }
    {
        OpScope part(ctx, "softmax_dropout_backward");
        SoftmaxBackArgs a;
        a.rows = (int64_t)B * NH * S;
        a.S = S;
        a.block = blk;
        a.scale = 1.f / sqrtf((float)HD);
        a.inv_keep = 1.f / (1.f - p);
        MM_DISPATCH_ACT(dt, {
            if (ctx.device == Device::CUDA) {
                const bool vec = S % 8 == 0 && vec8_aligned(scratch.data) && vec8_aligned(probs.data) &&
                                 vec8_aligned(mask.data);
                const unsigned blocks = row_blocks(a.rows), threads = 32 * kRowsPerBlock;
                T* d = scratch.as<T>();
                const T* pp = probs.as<T>();
                const uint8_t* pm = mask.as<uint8_t>();
                const bool launched = launch_by_slots(S, dt, [&](auto slots) {
                    softmax_dropout_backward_vec_kernel<T, decltype(slots)::value><<<blocks, threads, 0, ctx.stream>>>(
                        d, pp, pm, a, vec);
                });
                if (!launched) softmax_dropout_backward_kernel<T><<<blocks, threads, 0, ctx.stream>>>(d, pp, pm, a);
                CUDA_CHECK_LAST();
            } else {
                softmax_dropout_backward_cpu<T>(scratch.as<T>(), probs.as<T>(), mask.as<uint8_t>(), a);
            }
        });
    }
    OpScope part(ctx, "dq_dk_gemm", 2 * 2.0 * B * NH * (double)S * S * HD);
    const HeadsOperand Q = qkv_heads(ctx, qkv, 0, sh), K = qkv_heads(ctx, qkv, 1, sh);
    for (int r0 = 0; r0 < S; r0 += blk) {
        const int r1 = std::min(S, r0 + blk);
        // dQ[queries r0 .. r1-1] = dS · K over the keys 0 .. r1-1
        gemm_batched(ctx, false, false, r1 - r0, HD, r1, 1.f, ss_part(scratch, (int64_t)r0 * S, S, NH), K.rows(0), 0.f,
                     qkv_part(dqkv, 0, r0 * R, R, NH, HD), dt, dt, B, NH);
        // dK[keys r0 .. r1-1] = dSᵀ · Q over the queries r0 .. S-1
        gemm_batched(ctx, true, false, r1 - r0, HD, S - r0, 1.f, ss_part(scratch, (int64_t)r0 * S + r0, S, NH),
                     Q.rows(r0), 0.f, qkv_part(dqkv, 1, r0 * R, R, NH, HD), dt, dt, B, NH);
    }
}


// ---------------------------------------------------------------------------------------------------------
// Fallback: rows longer than the vectorized kernels hold in registers (S > 2048 in bf16, S > 1024 in f32).
// One warp per row, lane l handles keys l, l+32, ...; the row is read from memory once per pass. The max and
// the sums use the same xor butterflies as above (warp_reduce.cuh), so the result is reproducible.
// ---------------------------------------------------------------------------------------------------------

template <class T>
__global__ void softmax_dropout_kernel(T* probs, uint8_t* mask, T* probs_drop, SoftmaxDropoutArgs a) {
    const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= a.rows) return;  // whole warps exit together: the shuffles below see full warps
    const int S = a.S;
    const int q = (int)(row % S);
    const int64_t bn = row / S;
    const int64_t n = bn % a.NH, b = bn / a.NH;
    T* x = probs + row * S;
    float m = -INFINITY;
    for (int k = lane; k <= q; k += 32) m = fmaxf(m, to_f32(x[k]) * a.scale);
    m = warp_max(m);
    float sum = 0.f;
    for (int k = lane; k <= q; k += 32) sum += expf(to_f32(x[k]) * a.scale - m);
    sum = warp_sum(sum);
    const float inv_sum = 1.f / sum;
    // Each element is read and then overwritten by the same lane, so working in place is safe.
    const int end = causal_row_end(q, a.block, S);
    for (int k = lane; k < end; k += 32) {
        float pk = k <= q ? expf(to_f32(x[k]) * a.scale - m) * inv_sum : 0.f;
        bool keep = k <= q && dropout_keep(a.seed, a.stream,
                                           attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, S, q, k),
                                           a.threshold);
        x[k] = from_f32<T>(pk);
        mask[row * S + k] = keep ? 1 : 0;
        probs_drop[row * S + k] = from_f32<T>(keep ? pk * a.inv_keep : 0.f);
    }
}

template <class T>
__global__ void softmax_dropout_backward_kernel(T* d, const T* probs, const uint8_t* mask, SoftmaxBackArgs a) {
    const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= a.rows) return;
    const int S = a.S;
    const int q = (int)(row % S);
    T* dr = d + row * S;
    const T* pr = probs + row * S;
    const uint8_t* mr = mask + row * S;
    float dot = 0.f;
    for (int k = lane; k <= q; k += 32) dot += (mr[k] ? to_f32(dr[k]) * a.inv_keep : 0.f) * to_f32(pr[k]);
    dot = warp_sum(dot);
    const int end = causal_row_end(q, a.block, S);
    for (int k = lane; k < end; k += 32) {
        float ds = 0.f;
        if (k <= q) {
            float dp = mr[k] ? to_f32(dr[k]) * a.inv_keep : 0.f;
            ds = to_f32(pr[k]) * (dp - dot) * a.scale;
        }
        dr[k] = from_f32<T>(ds);
    }
}
