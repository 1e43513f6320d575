// attention.cu — core attention, unfused on purpose (see attention.h):
//
//   scores = Q Kᵀ                                   per (batch, head): an S×S GEMM
//   probs  = softmax(causal_mask(scores / sqrt(HD)))  one fused kernel, which also applies dropout:
//   mask   = keep(seed, stream, global index),  probs_drop = probs ⊙ mask / (1 - p)
//   out    = probs_drop · V                         per (batch, head): an S×HD GEMM
//
// The s×s tensors (probs, mask, probs_drop) are what Korthikanti et al. count as the 5as²b bytes of a layer
// (2as²b softmax output, as²b dropout mask, 2as²b dropout output, Table 2) and what *selective
// recomputation* (§5) drops and rebuilds in backward by calling attention_probs_forward again. Because the
// dropout mask is a pure function of (seed, stream, global index) (philox.h), that rebuild reproduces the
// forward bits exactly, with no RNG state to save.
//
// Layout. qkv is [S·B, 3·NH·HD] with row s·B + b. For batch b and head n, Q is the S×HD matrix starting at
// element b·3·NH·HD + n·HD with row stride R = B·3·NH·HD (consecutive s are B rows apart); K and V are the
// same, shifted by NH·HD and 2·NH·HD columns. So one strided-batched GEMM per batch index covers all heads
// (the head stride is HD elements) and no transpose of Q, K or V is ever materialized. probs etc. are
// [B, NH, S, S].
//
// Precision (as Megatron's fused softmax): the scores GEMM writes the activation dtype (bf16 in a bf16 run),
// the softmax reads it and does all its math in fp32.
#include "attention.h"

#include <cmath>
#include "matmul.h"
#include "philox.h"

static inline const void* elem_ptr(const Tensor& t, int64_t offset) {
    return static_cast<const char*>(t.data) + (size_t)offset * dtype_size(t.dtype);
}
static inline void* elem_ptr_mut(const Tensor& t, int64_t offset) {
    return static_cast<char*>(t.data) + (size_t)offset * dtype_size(t.dtype);
}

// Global dropout index of element (b, n, q, k) of this rank's [B, NH, S, S] block: the position of the same
// element in the single-rank tensor [B_total, NH_total, S, S] (attention.h).
__host__ __device__ inline uint64_t attn_dropout_index(int64_t b_glob, int64_t h_glob, int64_t NH_total, int S,
                                                       int q, int k) {
    return (((uint64_t)b_glob * (uint64_t)NH_total + (uint64_t)h_glob) * (uint64_t)S + (uint64_t)q) *
               (uint64_t)S + (uint64_t)k;
}

// Everything the softmax + dropout kernel needs, passed by value.
struct SoftmaxDropoutArgs {
    int64_t rows;        // B·NH·S
    int S, NH;
    float scale;         // 1/sqrt(HD)
    uint32_t threshold;  // dropout_threshold(p)
    float inv_keep;      // 1/(1-p)
    uint64_t seed;
    uint32_t stream;
    int64_t b_offset, head_offset, NH_total;
};

// ---------------------------------------------------------------------------------------------------------
// CPU reference: one row (b, n, q) at a time, keys 0..q (causal), fp32 math.
// ---------------------------------------------------------------------------------------------------------

template <class T>
static void softmax_dropout_cpu(T* probs, uint8_t* mask, T* probs_drop, const SoftmaxDropoutArgs& a) {
    const int S = a.S;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < a.rows; row++) {
        const int q = (int)(row % S);
        const int64_t bn = row / S;
        const int64_t n = bn % a.NH, b = bn / a.NH;
        T* x = probs + row * S;  // holds the raw scores Q·Kᵀ on entry, probs on exit
        float m = -INFINITY;
        for (int k = 0; k <= q; k++) m = fmaxf(m, to_f32(x[k]) * a.scale);
        float sum = 0.f;
        for (int k = 0; k <= q; k++) sum += expf(to_f32(x[k]) * a.scale - m);
        const float inv_sum = 1.f / sum;
        for (int k = 0; k < S; k++) {
            // Keys after the query are masked: probability exactly 0 (the causal mask of GPT-2).
            float pk = k <= q ? expf(to_f32(x[k]) * a.scale - m) * inv_sum : 0.f;
            bool keep = dropout_keep(a.seed, a.stream,
                                     attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, S, q, k),
                                     a.threshold);
            x[k] = from_f32<T>(pk);
            mask[row * S + k] = keep ? 1 : 0;
            probs_drop[row * S + k] = from_f32<T>(keep ? pk * a.inv_keep : 0.f);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA: one warp per row. Lane l handles keys l, l+32, ...; the max and the sum are combined with an xor
// butterfly, which is a fixed order (and gives every lane the same bits), so the result is reproducible.
// ---------------------------------------------------------------------------------------------------------

__device__ inline float warp_max(float v) {
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
__device__ inline float warp_sum(float v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

constexpr int kRowsPerBlock = 4;  // warps per block

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
    for (int k = lane; k < S; k += 32) {
        float pk = k <= q ? expf(to_f32(x[k]) * a.scale - m) * inv_sum : 0.f;
        bool keep = dropout_keep(a.seed, a.stream,
                                 attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, S, q, k),
                                 a.threshold);
        x[k] = from_f32<T>(pk);
        mask[row * S + k] = keep ? 1 : 0;
        probs_drop[row * S + k] = from_f32<T>(keep ? pk * a.inv_keep : 0.f);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Backward of dropout + softmax, fused. On entry d holds dP_d = dO·Vᵀ (gradient w.r.t. probs_drop); on exit
// it holds dS, the gradient w.r.t. the raw scores Q·Kᵀ:
//   dP = dP_d ⊙ mask / (1-p)                        (dropout backward)
//   dS = P ⊙ (dP − Σ_k dP⊙P) / sqrt(HD)             (softmax Jacobian-vector product, then the scale)
// Masked keys (k > q) have P = 0 and get dS = 0 exactly.
// ---------------------------------------------------------------------------------------------------------

struct SoftmaxBackArgs {
    int64_t rows;
    int S;
    float scale, inv_keep;
};

template <class T>
static void softmax_dropout_backward_cpu(T* d, const T* probs, const uint8_t* mask, const SoftmaxBackArgs& a) {
    const int S = a.S;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < a.rows; row++) {
        const int q = (int)(row % S);
        T* dr = d + row * S;
        const T* pr = probs + row * S;
        const uint8_t* mr = mask + row * S;
        float dot = 0.f;
        for (int k = 0; k <= q; k++) dot += (mr[k] ? to_f32(dr[k]) * a.inv_keep : 0.f) * to_f32(pr[k]);
        for (int k = 0; k < S; k++) {
            float ds = 0.f;
            if (k <= q) {
                float dp = mr[k] ? to_f32(dr[k]) * a.inv_keep : 0.f;
                ds = to_f32(pr[k]) * (dp - dot) * a.scale;
            }
            dr[k] = from_f32<T>(ds);
        }
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
    for (int k = lane; k < S; k += 32) {
        float ds = 0.f;
        if (k <= q) {
            float dp = mr[k] ? to_f32(dr[k]) * a.inv_keep : 0.f;
            ds = to_f32(pr[k]) * (dp - dot) * a.scale;
        }
        dr[k] = from_f32<T>(ds);
    }
}

static unsigned row_blocks(int64_t rows) { return (unsigned)((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// ---------------------------------------------------------------------------------------------------------
// ops
// ---------------------------------------------------------------------------------------------------------

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
    const int64_t R = (int64_t)B * 3 * NH * HD;  // row stride of Q, K, V
    const int64_t SS = (int64_t)S * S;
    // scores[b, n] = Q[b, n] · K[b, n]ᵀ, written straight into probs (the kernel below works in place).
    for (int b = 0; b < B; b++) {
        int64_t q0 = (int64_t)b * 3 * NH * HD;
        gemm(ctx, false, true, S, S, HD, 1.f, GemmOperand{elem_ptr(qkv, q0), R, HD},
             GemmOperand{elem_ptr(qkv, q0 + (int64_t)NH * HD), R, HD}, 0.f, elem_ptr_mut(probs, b * NH * SS), S,
             SS, qkv.dtype, probs.dtype, NH);
    }
    SoftmaxDropoutArgs a;
    a.rows = (int64_t)B * NH * S;
    a.S = S;
    a.NH = NH;
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
            softmax_dropout_kernel<T><<<row_blocks(a.rows), 32 * kRowsPerBlock, 0, ctx.stream>>>(
                probs.as<T>(), mask.as<uint8_t>(), probs_drop.as<T>(), a);
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
    const int64_t R = (int64_t)B * 3 * NH * HD, RO = (int64_t)B * NH * HD, SS = (int64_t)S * S;
    // out[b, n] = probs_drop[b, n] · V[b, n]; the heads of out sit side by side in its [S·B, NH·HD] rows.
    for (int b = 0; b < B; b++) {
        int64_t v0 = (int64_t)b * 3 * NH * HD + 2 * (int64_t)NH * HD;
        gemm(ctx, false, false, S, HD, S, 1.f, GemmOperand{elem_ptr(probs_drop, b * NH * SS), S, SS},
             GemmOperand{elem_ptr(qkv, v0), R, HD}, 0.f, elem_ptr_mut(out, (int64_t)b * NH * HD), RO, HD,
             qkv.dtype, out.dtype, NH);
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
    const int64_t R = (int64_t)B * 3 * NH * HD, RO = (int64_t)B * NH * HD, SS = (int64_t)S * S;
    const DType dt = qkv.dtype;
    for (int b = 0; b < B; b++) {
        const int64_t v0 = (int64_t)b * 3 * NH * HD + 2 * (int64_t)NH * HD;
        const GemmOperand dO{elem_ptr(dout, (int64_t)b * NH * HD), RO, HD};
        // dV = P_dᵀ · dO
        gemm(ctx, true, false, S, HD, S, 1.f, GemmOperand{elem_ptr(probs_drop, b * NH * SS), S, SS}, dO, 0.f,
             elem_ptr_mut(dqkv, v0), R, HD, dt, dt, NH);
        // dP_d = dO · Vᵀ  (into scratch)
        gemm(ctx, false, true, S, S, HD, 1.f, dO, GemmOperand{elem_ptr(qkv, v0), R, HD}, 0.f,
             elem_ptr_mut(scratch, b * NH * SS), S, SS, dt, dt, NH);
    }
    SoftmaxBackArgs a;
    a.rows = (int64_t)B * NH * S;
    a.S = S;
    a.scale = 1.f / sqrtf((float)HD);
    a.inv_keep = 1.f / (1.f - p);
    MM_DISPATCH_ACT(dt, {
        if (ctx.device == Device::CUDA) {
            softmax_dropout_backward_kernel<T><<<row_blocks(a.rows), 32 * kRowsPerBlock, 0, ctx.stream>>>(
                scratch.as<T>(), probs.as<T>(), mask.as<uint8_t>(), a);
            CUDA_CHECK_LAST();
        } else {
            softmax_dropout_backward_cpu<T>(scratch.as<T>(), probs.as<T>(), mask.as<uint8_t>(), a);
        }
    });
    for (int b = 0; b < B; b++) {
        const int64_t q0 = (int64_t)b * 3 * NH * HD, k0 = q0 + (int64_t)NH * HD;
        const GemmOperand dS{elem_ptr(scratch, b * NH * SS), S, SS};
        // dQ = dS · K,   dK = dSᵀ · Q
        gemm(ctx, false, false, S, HD, S, 1.f, dS, GemmOperand{elem_ptr(qkv, k0), R, HD}, 0.f,
             elem_ptr_mut(dqkv, q0), R, HD, dt, dt, NH);
        gemm(ctx, true, false, S, HD, S, 1.f, dS, GemmOperand{elem_ptr(qkv, q0), R, HD}, 0.f,
             elem_ptr_mut(dqkv, k0), R, HD, dt, dt, NH);
    }
}
