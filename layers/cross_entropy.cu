// cross_entropy.cu — softmax cross-entropy over a padded, possibly vocab-sharded vocabulary (see
// cross_entropy.h), in pieces that a tensor-parallel group can combine without gathering logits.
// The plain math this file computes fast: layers/reference/cross_entropy.h
//
// For one row with logits z over the vocabulary and target t:
//   loss = log Σ_v exp(z_v) − z_t = log Σ_v exp(z_v − m) + m − z_t,   m = max_v z_v (for stability).
//
// Two passes over the logits (they are the largest tensor of a step: N × V_local fp32, 1.65 GB at GPT-2 XL):
//  1. ce_forward_stats reads each row once and keeps the pair (m, s) "online": m the maximum so far, s the
//     sum of exp(z − m) so far; a value above m first rescales s by exp(m_old − m_new). It also picks the
//     target's logit. (The earlier version read the logits twice here: a max pass, then a sum pass that
//     needed the max; with the gradient that made three passes.)
//  2. ce_backward writes the gradient dz_v = softmax_v − [v = t] from the row's m and s.
// With the vocabulary split over ranks (Megatron's vocab-parallel cross-entropy) each rank's pair covers its
// own columns; parallel/vocab_parallel.cu combines them: all-reduce MAX of m, each rank rescales its s to the
// global m (ce_rescale_sumexp, N numbers, no pass over the logits), all-reduce SUMs of s and of z_t (owned by
// exactly one rank). Every rank then has the loss, and writes its own columns' gradient locally.
//
// GPT-2 pads the vocabulary (V = 50257 real, Vp = 50304 stored) for efficient GEMMs; the padded columns
// (global id ≥ V) must not take part in the softmax, and get a zero gradient (llm.c does the same).
//
// GPU: one block per row in both passes (the row index is blockIdx.x: no 64-bit division or modulo per
// element), each thread takes packs of 8 columns (vec8.h: 16-byte loads and stores when the rows allow), and
// pass 1 combines the threads' pairs in a fixed-order tree: the same bits every run, no atomics.
// CPU: rows over OpenMP threads; within a row, fixed-length SIMD loops over packs of 16 (vec8.h) with one
// fast_exp per element (fast_exp.h), partial sums in a fixed order: the bits depend on the shape only.
#include "cross_entropy.h"
#include "fast_exp.h"
#include "op_timer.h"
#include "vec8.h"
#include "warp_reduce.cuh"

#include <cmath>

// Number of this rank's columns that are real vocabulary entries (the rest is padding).
static inline int valid_columns(int V_local, int64_t v_begin, int V) {
    int64_t n = (int64_t)V - v_begin;
    if (n < 0) n = 0;
    if (n > V_local) n = V_local;
    return (int)n;
}

constexpr int kCeThreads = 256;

static void check_common(const char* op, const Tensor& logits, int N, int V_local) {
    if (logits.n != (int64_t)N * V_local) mm_fatal("%s: logits have %lld elements, expected N*V_local = %lld", op,
                                                   (long long)logits.n, (long long)N * V_local);
}
static void check_f32(const char* op, const char* name, const Tensor& t, int N) {
    if (t.n != N || t.dtype != DType::F32) mm_fatal("%s: %s must be f32 [N=%d]", op, name, N);
}

// Column of target t on this rank, or -1 when another rank owns it (or it is padding / out of range).
__host__ __device__ inline int64_t owned_column(int32_t t, int64_t v_begin, int valid) {
    int64_t j = (int64_t)t - v_begin;
    return (j >= 0 && j < valid) ? j : -1;
}

// The cross-rank combine of one pair: a rank's sum s relative to its own maximum lm, made relative to the
// global maximum M >= lm. lm == M (always so at tp = 1) leaves s as it is; a rank with no real columns has
// lm = -inf and s = 0, and stays 0.
__host__ __device__ inline float rescaled_sum(float s, float lm, float M) { return lm == M ? s : s * expf(lm - M); }

// One row's loss log Σ + m − z_t, in double: one value per row (N of them, nothing next to the passes over
// the logits), and it saves the roundings of the log and of the two additions (in float the losses were 1.1x
// PyTorch fp32's error, bench/PERF_NOTES.md "Accuracy"). Shared by the CPU loop and the kernel.
__host__ __device__ inline float row_loss(float m, float s, float zt) {
    return (float)(log((double)s) + (double)m - (double)zt);
}

// ---------------------------------------------------------------------------------------------------------
// Fast CPU path, in the order the ops run: the row statistics (pass 1), the losses, the gradient (pass 2)
// ---------------------------------------------------------------------------------------------------------

// Pass 1 on the CPU walks a row in chunks of kCeChunk columns (8 KB of fp32, so the chunk is still in the L1
// cache when it is read the second time): the chunk's maximum first (16 partial maxima, exact in any order),
// then, if it is above the row's maximum so far, the 16 partial sums are rescaled once by exp(m_old − m_new),
// then the chunk's exponentials are added. The logits are read from memory once, and the online rescale costs
// one exponential per chunk instead of one per element. Partial j takes the columns ≡ j (mod 16); where the
// rescales happen depends on the values and V_local only, so the bits never depend on the thread count.
constexpr int kCeChunk = 2048;  // a multiple of kCpuPack: only the row's last pack can be partial

template <class T>
MM_CPU_LOOP static void ce_stats_cpu(float* rowmax, float* sumexp, float* target_logit, float* local_max, const T* logits,
                         const int32_t* targets, int N, int V_local, int64_t v_begin, int valid) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const T* z = logits + (int64_t)i * V_local;
        float m = -INFINITY;  // stays -inf, and the sum 0, when this rank holds only padding
        float acc[kCpuPack] = {0}, buf[kCpuPack];
        for (int c0 = 0; c0 < valid; c0 += kCeChunk) {
            const int c1 = valid - c0 < kCeChunk ? valid : c0 + kCeChunk;
            float cm[kCpuPack];
            for (int j = 0; j < kCpuPack; j++) cm[j] = -INFINITY;
            int k = c0;
            for (; k + kCpuPack <= c1; k += kCpuPack) {  // full packs, read in place
#pragma omp simd
                for (int j = 0; j < kCpuPack; j++) {
                    const float x = to_f32(z[k + j]);
                    cm[j] = select_f(x > cm[j], x, cm[j]);
                }
            }
            if (k < c1) {  // the row's partial last pack, through a buffer
                const int count = cpu_load_pack(buf, z, k, c1);  // the tail is zero-filled: keep it out
#pragma omp simd
                for (int j = 0; j < kCpuPack; j++) cm[j] = select_f(j < count && buf[j] > cm[j], buf[j], cm[j]);
            }
            float mc = -INFINITY;
            for (int j = 0; j < kCpuPack; j++) mc = cm[j] > mc ? cm[j] : mc;
            if (mc > m) {  // the sums so far were relative to m: make them relative to mc (0 stays 0)
                const float f = fast_exp(m - mc);
                for (int j = 0; j < kCpuPack; j++) acc[j] *= f;
                m = mc;
            }
            for (k = c0; k + kCpuPack <= c1; k += kCpuPack) {
#pragma omp simd
                for (int j = 0; j < kCpuPack; j++) acc[j] += fast_exp(to_f32(z[k + j]) - m);
            }
            if (k < c1) {
                const int count = cpu_load_pack(buf, z, k, c1);
#pragma omp simd
                for (int j = 0; j < kCpuPack; j++) acc[j] += select_f(j < count, fast_exp(buf[j] - m), 0.f);
            }
        }
        rowmax[i] = m;
        sumexp[i] = cpu_partials_total(acc);
        if (local_max) local_max[i] = m;
        const int64_t j = owned_column(targets[i], v_begin, valid);
        target_logit[i] = j >= 0 ? to_f32(z[j]) : 0.f;
    }
}

// (The rescale is ce_rescale_sumexp; the per-row losses are ce_losses, with row_loss below.)

// Pass 2: dlogits = scale · (softmax − onehot(target)); padded columns get 0. `scale` is typically 1/(B·S)
// (mean over all targets, GPT-2) times the loss scale. One division per row (1/Σ).
template <class TG, class TL>
MM_CPU_LOOP static void ce_backward_cpu(TG* dlogits, const TL* logits, const float* rowmax, const float* sumexp,
                            const int32_t* targets, float scale, int N, int V_local, int64_t v_begin, int valid) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const TL* z = logits + (int64_t)i * V_local;
        TG* d = dlogits + (int64_t)i * V_local;
        const int t = (int)owned_column(targets[i], v_begin, valid);  // -1: not on this rank
        const float m = rowmax[i], inv_sum = 1.f / sumexp[i];
        // One SIMD loop over the row (no reduction: each column is on its own, so vector lanes and the scalar
        // tail give the same bits).
#pragma omp simd
        for (int col = 0; col < V_local; col++) {
            const float g = scale * (fast_exp(to_f32(z[col]) - m) * inv_sum - select_f(col == t, 1.f, 0.f));
            d[col] = from_f32<TG>(select_f(col < valid, g, 0.f));  // a bit select: padding's value never leaks in
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA kernels: one block per row (blockIdx.x), packs of 8 columns per thread (vec8.h)
// ---------------------------------------------------------------------------------------------------------

// Add the pair (m2, s2) to (m, s): both become relative to the larger maximum. Symmetric in its two
// arguments (fmaxf and a sum of two terms are), so every lane of the xor butterfly ends with the same bits.
__device__ inline void online_pair_add(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    s = rescaled_sum(s, m, M) + rescaled_sum(s2, m2, M);
    m = M;
}

// The block's (m, s) pairs combined in a fixed order (each warp's butterfly, then the warps' results in one
// more butterfly); every thread gets the result. For blocks of kCeThreads threads: one slot per warp.
constexpr int kCeWarps = kCeThreads / 32;
__device__ inline void block_online_reduce(float& m, float& s) {
    __shared__ float sm_m[kCeWarps], sm_s[kCeWarps];
    for (int offset = 16; offset > 0; offset >>= 1)
        online_pair_add(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();
    m = lane < nwarps ? sm_m[lane] : -INFINITY;
    s = lane < nwarps ? sm_s[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1)
        online_pair_add(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
}

// Pass 1. Thread t takes the packs t, t + blockDim.x, ... of the row's valid columns: the pack's maximum,
// one rescale of the thread's sum if that maximum is new, then the pack's 8 exponentials.
template <class T>
__global__ void __launch_bounds__(kCeThreads)
    ce_stats_kernel(float* rowmax, float* sumexp, float* target_logit, float* local_max, const T* logits,
                    const int32_t* targets, int V_local, int64_t v_begin, int valid, bool vec) {
    const int64_t i = blockIdx.x;
    const T* z = logits + i * V_local;
    float m = -INFINITY, s = 0.f;
    for (int c0 = threadIdx.x * 8; c0 < valid; c0 += blockDim.x * 8) {
        const int count = valid - c0 < 8 ? valid - c0 : 8;
        const Pack8<T> x = load8(z + c0, count, vec);
        float pm = -INFINITY;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < count) pm = fmaxf(pm, to_f32(x.v[k]));
        if (pm > m) {
            s = rescaled_sum(s, m, pm);
            m = pm;
        }
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < count) s += expf(to_f32(x.v[k]) - m);
    }
    block_online_reduce(m, s);
    if (threadIdx.x == 0) {
        rowmax[i] = m;
        sumexp[i] = s;
        if (local_max) local_max[i] = m;
        const int64_t j = owned_column(targets[i], v_begin, valid);
        target_logit[i] = j >= 0 ? to_f32(z[j]) : 0.f;
    }
}

__global__ void ce_rescale_kernel(float* sumexp, const float* local_max, const float* rowmax, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) sumexp[i] = rescaled_sum(sumexp[i], local_max[i], rowmax[i]);
}

__global__ void ce_losses_kernel(float* losses, const float* rowmax, const float* sumexp, const float* tl, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) losses[i] = row_loss(rowmax[i], sumexp[i], tl[i]);
}

// Pass 2: the row's maximum, 1/Σ and target column are read once per block; every column of the row,
// padding included (it gets 0), in packs of 8.
template <class TG, class TL>
__global__ void __launch_bounds__(kCeThreads)
    ce_backward_kernel(TG* dlogits, const TL* logits, const float* rowmax, const float* sumexp,
                       const int32_t* targets, float scale, int V_local, int64_t v_begin, int valid, bool vec) {
    const int64_t i = blockIdx.x;
    const TL* z = logits + i * V_local;
    TG* d = dlogits + i * V_local;
    const float m = rowmax[i], inv_sum = 1.f / sumexp[i];
    const int t = (int)owned_column(targets[i], v_begin, valid);  // -1: not on this rank
    for (int c0 = threadIdx.x * 8; c0 < V_local; c0 += blockDim.x * 8) {
        const int count = V_local - c0 < 8 ? V_local - c0 : 8;
        const Pack8<TL> x = load8(z + c0, count, vec);
        Pack8<TG> g;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int col = c0 + k;
            float v = 0.f;
            if (col < valid) v = scale * (expf(to_f32(x.v[k]) - m) * inv_sum - (col == t ? 1.f : 0.f));
            g.v[k] = from_f32<TG>(v);
        }
        store8(d + c0, g, count, vec);
    }
}

// ---------------------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------------------

// 16-byte accesses need every row to start 16-byte aligned: V_local a multiple of 8 (a pack is 16 bytes in
// bf16, 32 in f32) and aligned base pointers.
static bool rows_vec8(int V_local, std::initializer_list<const void*> ptrs) {
    if (V_local % 8 != 0) return false;
    for (const void* p : ptrs)
        if (!vec8_aligned(p)) return false;
    return true;
}

void ce_forward_stats(Ctx& ctx, Tensor rowmax, Tensor sumexp, Tensor target_logit, Tensor local_max, Tensor logits,
                      Tensor targets, int N, int V_local, int64_t v_begin, int V) {
    OpScope scope(ctx, "ce_forward_stats");
    const char* op = "ce_forward_stats";
    check_common(op, logits, N, V_local);
    check_f32(op, "rowmax", rowmax, N);
    check_f32(op, "sumexp", sumexp, N);
    check_f32(op, "target_logit", target_logit, N);
    if (local_max.data) check_f32(op, "local_max", local_max, N);
    if (targets.n != N || targets.dtype != DType::I32) mm_fatal("%s: targets must be i32 [N=%d]", op, N);
    if (N == 0) return;
    const int valid = valid_columns(V_local, v_begin, V);
    float* lm = local_max.data ? local_max.as<float>() : nullptr;
    MM_DISPATCH_ACT(logits.dtype, {
        const T* z = logits.as<T>();
        if (ctx.device == Device::CUDA) {
            const bool vec = rows_vec8(V_local, {logits.data});
            ce_stats_kernel<T><<<N, kCeThreads, 0, ctx.stream>>>(rowmax.as<float>(), sumexp.as<float>(),
                                                                 target_logit.as<float>(), lm, z,
                                                                 targets.as<int32_t>(), V_local, v_begin, valid, vec);
            CUDA_CHECK_LAST();
        } else {
            ce_stats_cpu<T>(rowmax.as<float>(), sumexp.as<float>(), target_logit.as<float>(), lm, z,
                            targets.as<int32_t>(), N, V_local, v_begin, valid);
        }
    });
}

void ce_rescale_sumexp(Ctx& ctx, Tensor sumexp, Tensor local_max, Tensor rowmax, int N) {
    OpScope scope(ctx, "ce_rescale_sumexp");
    const char* op = "ce_rescale_sumexp";
    check_f32(op, "sumexp", sumexp, N);
    check_f32(op, "local_max", local_max, N);
    check_f32(op, "rowmax", rowmax, N);
    if (N == 0) return;
    if (ctx.device == Device::CUDA) {
        ce_rescale_kernel<<<(N + 255) / 256, 256, 0, ctx.stream>>>(sumexp.as<float>(), local_max.as<float>(),
                                                                   rowmax.as<float>(), N);
        CUDA_CHECK_LAST();
    } else {
        float* se = sumexp.as<float>();
        const float *lm = local_max.as<float>(), *rm = rowmax.as<float>();
        for (int i = 0; i < N; i++) se[i] = rescaled_sum(se[i], lm[i], rm[i]);
    }
}

void ce_losses(Ctx& ctx, Tensor losses, Tensor rowmax, Tensor sumexp, Tensor target_logit, int N) {
    OpScope scope(ctx, "ce_losses");
    const char* op = "ce_losses";
    check_f32(op, "losses", losses, N);
    check_f32(op, "rowmax", rowmax, N);
    check_f32(op, "sumexp", sumexp, N);
    check_f32(op, "target_logit", target_logit, N);
    if (N == 0) return;
    if (ctx.device == Device::CUDA) {
        ce_losses_kernel<<<(N + 255) / 256, 256, 0, ctx.stream>>>(losses.as<float>(), rowmax.as<float>(),
                                                                  sumexp.as<float>(), target_logit.as<float>(), N);
        CUDA_CHECK_LAST();
    } else {
        float* l = losses.as<float>();
        const float *rm = rowmax.as<float>(), *se = sumexp.as<float>(), *tl = target_logit.as<float>();
        for (int i = 0; i < N; i++) l[i] = row_loss(rm[i], se[i], tl[i]);
    }
}

void ce_backward(Ctx& ctx, Tensor dlogits, Tensor logits, Tensor rowmax, Tensor sumexp, Tensor targets,
                 float scale, int N, int V_local, int64_t v_begin, int V) {
    OpScope scope(ctx, "ce_backward");
    const char* op = "ce_backward";
    check_common(op, logits, N, V_local);
    check_f32(op, "rowmax", rowmax, N);
    check_f32(op, "sumexp", sumexp, N);
    if (dlogits.n != logits.n) mm_fatal("%s: dlogits must have the shape of logits", op);
    if (targets.n != N || targets.dtype != DType::I32) mm_fatal("%s: targets must be i32 [N=%d]", op, N);
    if (N == 0 || V_local == 0) return;
    const int valid = valid_columns(V_local, v_begin, V);
    MM_DISPATCH_ACT(logits.dtype, {
        using TL = T;
        MM_DISPATCH_ACT(dlogits.dtype, {
            if (ctx.device == Device::CUDA) {
                const bool vec = rows_vec8(V_local, {logits.data, dlogits.data});
                ce_backward_kernel<T, TL><<<N, kCeThreads, 0, ctx.stream>>>(
                    dlogits.as<T>(), logits.as<TL>(), rowmax.as<float>(), sumexp.as<float>(),
                    targets.as<int32_t>(), scale, V_local, v_begin, valid, vec);
                CUDA_CHECK_LAST();
            } else {
                ce_backward_cpu<T, TL>(dlogits.as<T>(), logits.as<TL>(), rowmax.as<float>(), sumexp.as<float>(),
                                       targets.as<int32_t>(), scale, N, V_local, v_begin, valid);
            }
        });
    });
}
