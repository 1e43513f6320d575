// cross_entropy.cu — softmax cross-entropy over a padded, possibly vocab-sharded vocabulary (see
// cross_entropy.h), in pieces that a tensor-parallel group can combine without gathering logits.
//
// For one row with logits z over the vocabulary and target t:
//   loss = log Σ_v exp(z_v) − z_t = log Σ_v exp(z_v − m) + m − z_t,   m = max_v z_v (for stability).
// With the vocabulary split over ranks (Megatron's vocab-parallel cross-entropy), each rank computes its
// local max; an all-reduce MAX gives m; each rank computes its local Σ exp(z_v − m) and, if it owns t, z_t;
// all-reduce SUMs give the totals; every rank then has the loss. The gradient dz_v = softmax_v − [v = t]
// needs only the row's m and Σ, so each rank writes its own columns' gradient locally.
//
// GPT-2 pads the vocabulary (V = 50257 real, Vp = 50304 stored) for efficient GEMMs; the padded columns
// (global id ≥ V) must not take part in the softmax, and get a zero gradient (llm.c does the same).
//
// GPU reductions: one block per row, each thread strides over the columns, then a fixed-order tree: the
// same bits every run, no atomics.
#include "cross_entropy.h"
#include "op_timer.h"
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

// Fixed-order block reductions (every thread gets the result): each warp reduces its 32 values
// (warp_reduce.cuh), then every warp reduces the warps' results, read back from shared memory.
__device__ inline float block_reduce(float v, bool is_max) {
    __shared__ float sm[32];
    v = is_max ? warp_max(v) : warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    __syncthreads();  // sm may still be read by a previous call
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    v = lane < nwarps ? sm[lane] : (is_max ? -INFINITY : 0.f);
    return is_max ? warp_max(v) : warp_sum(v);
}

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

// ---------------------------------------------------------------------------------------------------------
// CPU reference, in the order the ops run: row max, sum of exponentials and target logit, losses, gradient
// ---------------------------------------------------------------------------------------------------------

template <class T>
static void ce_row_max_cpu(float* rowmax, const T* logits, int N, int V_local, int valid) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float m = -INFINITY;  // stays -inf when this rank holds only padding
        for (int j = 0; j < valid; j++) m = fmaxf(m, to_f32(logits[(int64_t)i * V_local + j]));
        rowmax[i] = m;
    }
}

template <class T>
static void ce_sumexp_target_cpu(float* sumexp, float* target_logit, const T* logits, const float* rowmax,
                                 const int32_t* targets, int N, int V_local, int64_t v_begin, int valid) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const T* z = logits + (int64_t)i * V_local;
        float s = 0.f;
        for (int j = 0; j < valid; j++) s += expf(to_f32(z[j]) - rowmax[i]);
        sumexp[i] = s;
        int64_t j = owned_column(targets[i], v_begin, valid);
        target_logit[i] = j >= 0 ? to_f32(z[j]) : 0.f;
    }
}

// (The per-row losses log Σ + m − z_t are computed inline by ce_losses.)

// gradient: dlogits = scale · (softmax − onehot(target)); padded columns get 0. `scale` is typically
// 1/(B·S) (mean over all targets, GPT-2) times the loss scale.
template <class TG, class TL>
static void ce_backward_cpu(TG* dlogits, const TL* logits, const float* rowmax, const float* sumexp,
                            const int32_t* targets, float scale, int N, int V_local, int64_t v_begin, int valid) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const int64_t t = owned_column(targets[i], v_begin, valid);
        for (int j = 0; j < V_local; j++) {
            const int64_t at = (int64_t)i * V_local + j;
            float g = 0.f;
            if (j < valid) {
                float sm = expf(to_f32(logits[at]) - rowmax[i]) / sumexp[i];
                g = scale * (sm - (t == j ? 1.f : 0.f));
            }
            dlogits[at] = from_f32<TG>(g);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA kernels: one block per row for the reductions (block_reduce), one thread per element otherwise
// ---------------------------------------------------------------------------------------------------------

template <class T>
__global__ void ce_row_max_kernel(float* rowmax, const T* logits, int V_local, int valid) {
    const T* z = logits + (int64_t)blockIdx.x * V_local;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, to_f32(z[j]));
    m = block_reduce(m, true);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

template <class T>
__global__ void ce_sumexp_target_kernel(float* sumexp, float* target_logit, const T* logits, const float* rowmax,
                                        const int32_t* targets, int V_local, int64_t v_begin, int valid) {
    const int64_t i = blockIdx.x;
    const T* z = logits + i * V_local;
    const float m = rowmax[i];
    float s = 0.f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) s += expf(to_f32(z[j]) - m);
    s = block_reduce(s, false);
    if (threadIdx.x == 0) {
        sumexp[i] = s;
        int64_t j = owned_column(targets[i], v_begin, valid);
        target_logit[i] = j >= 0 ? to_f32(z[j]) : 0.f;
    }
}

__global__ void ce_losses_kernel(float* losses, const float* rowmax, const float* sumexp, const float* tl, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) losses[i] = logf(sumexp[i]) + rowmax[i] - tl[i];
}

template <class TG, class TL>
__global__ void ce_backward_kernel(TG* dlogits, const TL* logits, const float* rowmax, const float* sumexp,
                                   const int32_t* targets, float scale, int V_local, int64_t v_begin, int valid,
                                   int64_t total) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    int64_t i = idx / V_local;
    int j = (int)(idx % V_local);
    float g = 0.f;
    if (j < valid) {
        float sm = expf(to_f32(logits[idx]) - rowmax[i]) / sumexp[i];
        float onehot = owned_column(targets[i], v_begin, valid) == j ? 1.f : 0.f;
        g = scale * (sm - onehot);
    }
    dlogits[idx] = from_f32<TG>(g);
}

// ---------------------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------------------

void ce_row_max(Ctx& ctx, Tensor rowmax, Tensor logits, int N, int V_local, int64_t v_begin, int V) {
    OpScope scope(ctx, "ce_row_max");
    check_common("ce_row_max", logits, N, V_local);
    check_f32("ce_row_max", "rowmax", rowmax, N);
    if (N == 0) return;
    const int valid = valid_columns(V_local, v_begin, V);
    MM_DISPATCH_ACT(logits.dtype, {
        const T* z = logits.as<T>();
        float* out = rowmax.as<float>();
        if (ctx.device == Device::CUDA) {
            ce_row_max_kernel<T><<<N, kCeThreads, 0, ctx.stream>>>(out, z, V_local, valid);
            CUDA_CHECK_LAST();
        } else {
            ce_row_max_cpu<T>(out, z, N, V_local, valid);
        }
    });
}

void ce_sumexp_target(Ctx& ctx, Tensor sumexp, Tensor target_logit, Tensor logits, Tensor rowmax, Tensor targets,
                      int N, int V_local, int64_t v_begin, int V) {
    OpScope scope(ctx, "ce_sumexp_target");
    const char* op = "ce_sumexp_target";
    check_common(op, logits, N, V_local);
    check_f32(op, "sumexp", sumexp, N);
    check_f32(op, "target_logit", target_logit, N);
    check_f32(op, "rowmax", rowmax, N);
    if (targets.n != N || targets.dtype != DType::I32) mm_fatal("%s: targets must be i32 [N=%d]", op, N);
    if (N == 0) return;
    const int valid = valid_columns(V_local, v_begin, V);
    MM_DISPATCH_ACT(logits.dtype, {
        const T* z = logits.as<T>();
        if (ctx.device == Device::CUDA) {
            ce_sumexp_target_kernel<T><<<N, kCeThreads, 0, ctx.stream>>>(
                sumexp.as<float>(), target_logit.as<float>(), z, rowmax.as<float>(), targets.as<int32_t>(),
                V_local, v_begin, valid);
            CUDA_CHECK_LAST();
        } else {
            ce_sumexp_target_cpu<T>(sumexp.as<float>(), target_logit.as<float>(), z, rowmax.as<float>(),
                                    targets.as<int32_t>(), N, V_local, v_begin, valid);
        }
    });
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
        for (int i = 0; i < N; i++) l[i] = logf(se[i]) + rm[i] - tl[i];
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
    const int64_t total = (int64_t)N * V_local;
    if (total == 0) return;
    const int valid = valid_columns(V_local, v_begin, V);
    MM_DISPATCH_ACT(logits.dtype, {
        using TL = T;
        MM_DISPATCH_ACT(dlogits.dtype, {
            if (ctx.device == Device::CUDA) {
                ce_backward_kernel<T, TL><<<(unsigned)((total + 255) / 256), 256, 0, ctx.stream>>>(
                    dlogits.as<T>(), logits.as<TL>(), rowmax.as<float>(), sumexp.as<float>(),
                    targets.as<int32_t>(), scale, V_local, v_begin, valid, total);
                CUDA_CHECK_LAST();
            } else {
                ce_backward_cpu<T, TL>(dlogits.as<T>(), logits.as<TL>(), rowmax.as<float>(), sumexp.as<float>(),
                                       targets.as<int32_t>(), scale, N, V_local, v_begin, valid);
            }
        });
    });
}
