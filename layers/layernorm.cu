// layernorm.cu — LayerNorm over the channels of each row (see layernorm.h), GPT-2 flavour (eps 1e-5).
// The plain math this file computes fast: layers/reference/layernorm.h
//
// forward, per row x of C channels:
//   mean = Σx / C,  var = Σ(x - mean)² / C,  rstd = 1 / sqrt(var + eps)
//   n    = (x - mean) · rstd                          (the normalized row)
//   out  = n · weight + bias
// backward, with g = dout · weight (the gradient reaching n):
//   din     += rstd · (g - mean(g) - n · mean(g · n))
//   dweight += Σ_rows dout · n,     dbias += Σ_rows dout    (= on a step's first write: GradWrite)
//
// dweight and dbias are sums over rows. Under sequence parallelism each rank sums over its own s/t rows
// only; after the backward, parallel/sequence_parallel.cu sums these partial gradients over the TP group,
// with the other parameters that are replicated across it (paper §4.2.2).
// These sums are computed in a fixed order on both devices (no float atomics), so the selective / full
// recomputation policies, which run exactly these kernels on exactly these inputs, give bitwise identical
// gradients.
#include "layernorm.h"
#include <cmath>
#include "op_timer.h"
#include "vec8.h"
#include "warp_reduce.cuh"

// ---- fast CPU path -------------------------------------------------------------------------------------
// Rows are independent (OpenMP splits them). A row's sums use kCpuPack partial sums: partial k adds the
// channels c ≡ k (mod kCpuPack) in increasing c, and the partials are then added in order 0, 1, ...
// (cpu_row_partials and cpu_partials_total, vec8.h). This order is written down, so the loop over a pack is
// element-wise and the compiler vectorises it, which it may not do for one running sum (that would reorder
// the additions). The order depends only on C: the same bits for any thread count, in every recompute
// policy.

template <class T>
MM_CPU_LOOP static void layernorm_forward_cpu(T* out, float* mean, float* rstd, const T* in, const T* weight, const T* bias,
                                  int N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const T* x = in + r * C;
        T* y = out + r * C;
        float acc[kCpuPack] = {0};
        cpu_row_partials(C, [&](int j, int64_t c) { acc[j] += to_f32(x[c]); });
        // The row's two statistics from the partials in double: once per row, and it saves the roundings
        // of the total, the division and the square root (the forward was 1.14x PyTorch's error in float).
        const float m = (float)(cpu_partials_total_f64(acc) / C);
        // Two passes (mean first, then squared deviations): Σx² - mean² loses everything to cancellation
        // when |mean| >> std, which is common for the residual stream.
        for (int j = 0; j < kCpuPack; j++) acc[j] = 0.0f;
        cpu_row_partials(C, [&](int j, int64_t c) {
            const float d = to_f32(x[c]) - m;
            acc[j] += d * d;
        });
        const float s = (float)(1.0 / sqrt(cpu_partials_total_f64(acc) / C + kLayerNormEps));
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float n = (to_f32(x[c]) - m) * s;
            y[c] = from_f32<T>(n * to_f32(weight[c]) + to_f32(bias[c]));  // y may alias x: x[c] read first
        }
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

template <class T>
MM_CPU_LOOP static void layernorm_backward_cpu(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                                   const T* weight, const float* mean, const float* rstd, int N, int C,
                                   bool accumulate) {
    // din: rows are independent.
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const T* x = in + r * C;
        const T* dy = dout + r * C;
        T* dx = din + r * C;
        const float m = mean[r], s = rstd[r];
        float acc_g[kCpuPack] = {0}, acc_gn[kCpuPack] = {0};
        cpu_row_partials(C, [&](int j, int64_t c) {
            const float n = (to_f32(x[c]) - m) * s;
            const float g = to_f32(dy[c]) * to_f32(weight[c]);
            acc_g[j] += g;
            acc_gn[j] += g * n;
        });
        const float mean_g = cpu_partials_total(acc_g) / C, mean_gn = cpu_partials_total(acc_gn) / C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float n = (to_f32(x[c]) - m) * s;
            float g = to_f32(dy[c]) * to_f32(weight[c]);
            dx[c] = from_f32<T>(to_f32(dx[c]) + (g - mean_g - n * mean_gn) * s);
        }
    }
    // dweight, dbias: sums over rows. Threads split the *columns* (64 at a time, so the inner loop walks
    // contiguous memory and is vectorised across columns) and each sums its columns over all rows in the
    // fixed pairwise order of vec8.h (cpu_pairwise_row_sums: a running sum down the rows was 1.4x less
    // accurate than PyTorch's): the result does not depend on the number of OpenMP threads.
    constexpr int kCols = 64;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += kCols) {
        const int w = C - c0 < kCols ? C - c0 : kCols;
        float sum[2 * kCols];  // dweight's columns, then dbias's
        cpu_pairwise_row_sums<2 * kCols>(N, sum, [&](float* acc, int64_t r) {
            const T* x = in + r * C + c0;
            const T* dy = dout + r * C + c0;
            const float m = mean[r], s = rstd[r];
#pragma omp simd
            for (int j = 0; j < w; j++) {
                float n = (to_f32(x[j]) - m) * s;
                float d = to_f32(dy[j]);
                acc[j] += d * n;
                acc[kCols + j] += d;
            }
        });
        for (int j = 0; j < w; j++) {
            dweight[c0 + j] = (accumulate ? dweight[c0 + j] : 0.0f) + sum[j];
            dbias[c0 + j] = (accumulate ? dbias[c0 + j] : 0.0f) + sum[kCols + j];
        }
    }
}

// ---- CUDA kernels, vectorized (the common case) --------------------------------------------------------
//
// One warp per row, the row cut into packs of 8 consecutive channels (vec8.h): lane l owns packs
// l, l + 32, l + 64, ... (so a warp's 32 lanes touch 32 consecutive 16-byte pieces: coalesced). In bf16 a
// pack is one 16-byte load instead of eight 2-byte loads. The forward keeps the lane's packs in registers
// (kSlots packs per lane, a compile-time bound so the array really stays in registers), so the input is
// read from memory once, not three times. Sums run in a fixed order (each lane over its packs in order, then
// the xor butterfly), and that order depends only on C: loading a pack with one vector access or eight
// scalar ones (vec false: C % 8 != 0 or a misaligned view) gives the same bits.

constexpr int kVecWarps = 4;  // rows per block of the vectorized kernels (128 threads)

// Forward. kSlots * 32 * 8 >= C (the dispatch picks the smallest instantiated kSlots that fits).
template <class T, int kSlots>
__global__ void __launch_bounds__(kVecWarps * 32)
    layernorm_forward_vec_kernel(T* out, float* mean, float* rstd, const T* in, const T* weight, const T* bias,
                                 int N, int C, bool vec) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * kVecWarps + threadIdx.x / 32;
    if (r >= N) return;  // whole warps leave together, so the shuffles below see all 32 lanes
    const T* x = in + r * C;
    T* y = out + r * C;

    // Read the row once: slot i of this lane is pack lane + 32 i, channels c0 .. c0 + 7 (fewer at the end).
    Pack8<T> xs[kSlots];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 < C) {
            const int count = C - c0 < 8 ? C - c0 : 8;
            xs[i] = load8(x + c0, count, vec);  // zero beyond count: adds nothing to the sum
#pragma unroll
            for (int k = 0; k < 8; k++) sum += to_f32(xs[i].v[k]);
        }
    }
    const float m = warp_sum(sum) / C;
    // Second pass (squared deviations, as the fast CPU path) over the registers, not memory.
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 < C) {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float d = to_f32(xs[i].v[k]) - m;
                if (c0 + k < C) sq += d * d;  // padding elements are 0, and 0 - m is not: skip them
            }
        }
    }
    // 1/sqrtf rather than rsqrtf: rsqrtf is an approximation and would move the GPU away from the CPU oracle.
    const float s = 1.0f / sqrtf(warp_sum(sq) / C + kLayerNormEps);
#pragma unroll
    for (int i = 0; i < kSlots; i++) {
        const int c0 = (lane + 32 * i) * 8;
        if (c0 < C) {
            const int count = C - c0 < 8 ? C - c0 : 8;
            const Pack8<T> w = load8(weight + c0, count, vec), b = load8(bias + c0, count, vec);
            Pack8<T> o;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float n = (to_f32(xs[i].v[k]) - m) * s;
                o.v[k] = from_f32<T>(n * to_f32(w.v[k]) + to_f32(b.v[k]));
            }
            store8(y + c0, o, count, vec);  // y may alias x: the whole row is in registers by now
        }
    }
    if (lane == 0) {
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

// din, one warp per row with the same pack layout. The row would not fit in registers for the widest
// layers (x and dout: 192 registers per lane at C = 6144), so the second pass reads the lane's packs
// again; this warp read them a moment ago, so they mostly come from L1/L2, not DRAM.
// __restrict__: din never aliases the inputs (it is its own accumulator). Without it the compiler must assume
// the store to dx may change x, dy or weight, so each iteration's loads wait for the previous store and the
// kernel becomes latency-bound (bench/PERF_NOTES.md has the measurement).
template <class T>
__global__ void __launch_bounds__(kVecWarps * 32)
    layernorm_backward_din_vec_kernel(T* __restrict__ din, const T* __restrict__ dout, const T* __restrict__ in,
                                      const T* __restrict__ weight, const float* __restrict__ mean,
                                      const float* __restrict__ rstd, int N, int C, bool vec) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * kVecWarps + threadIdx.x / 32;
    if (r >= N) return;
    const T* x = in + r * C;
    const T* dy = dout + r * C;
    T* dx = din + r * C;
    const float m = mean[r], s = rstd[r];

    float sum_g = 0.0f, sum_gn = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        const int count = C - c0 < 8 ? C - c0 : 8;
        const Pack8<T> xv = load8(x + c0, count, vec), dyv = load8(dy + c0, count, vec),
                       wv = load8(weight + c0, count, vec);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            // Padding elements have dy = w = 0, so g = 0 and they add nothing.
            float n = (to_f32(xv.v[k]) - m) * s;
            float g = to_f32(dyv.v[k]) * to_f32(wv.v[k]);
            sum_g += g;
            sum_gn += g * n;
        }
    }
    const float mean_g = warp_sum(sum_g) / C, mean_gn = warp_sum(sum_gn) / C;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        const int count = C - c0 < 8 ? C - c0 : 8;
        const Pack8<T> xv = load8(x + c0, count, vec), dyv = load8(dy + c0, count, vec),
                       wv = load8(weight + c0, count, vec);
        Pack8<T> d = load8(dx + c0, count, vec);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float n = (to_f32(xv.v[k]) - m) * s;
            float g = to_f32(dyv.v[k]) * to_f32(wv.v[k]);
            d.v[k] = from_f32<T>(to_f32(d.v[k]) + (g - mean_g - n * mean_gn) * s);
        }
        store8(dx + c0, d, count, vec);
    }
}

// dweight / dbias, step 1 of 2: the rows are cut into `chunks` consecutive ranges; block (x, y) owns
// 64 packs of 8 columns (one pack per thread) of row range y and sums them over its rows in order. Each
// chunk writes its own partial sums to scratch (partial_w[y][c], partial_b[y][c]): no two blocks ever add
// into the same address, so no atomics and no run-to-run variation.
constexpr int kPartialThreads = 64;  // 512 columns per block

template <class T>
__global__ void layernorm_backward_partials_kernel(float* __restrict__ partial_w, float* __restrict__ partial_b,
                                                   const T* __restrict__ dout, const T* __restrict__ in,
                                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                                   int N, int C, int rows_per_chunk, bool vec) {
    const int c0 = (blockIdx.x * kPartialThreads + threadIdx.x) * 8;
    if (c0 >= C) return;
    const int count = C - c0 < 8 ? C - c0 : 8;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float acc_w[8], acc_b[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc_w[k] = acc_b[k] = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const Pack8<T> xv = load8(in + r * C + c0, count, vec), dv = load8(dout + r * C + c0, count, vec);
        const float m = mean[r], s = rstd[r];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float n = (to_f32(xv.v[k]) - m) * s;
            float d = to_f32(dv.v[k]);
            acc_w[k] += d * n;
            acc_b[k] += d;
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (k < count) {
            partial_w[(int64_t)blockIdx.y * C + c0 + k] = acc_w[k];
            partial_b[(int64_t)blockIdx.y * C + c0 + k] = acc_b[k];
        }
    }
}

// Step 2 of 2: one thread per column adds the chunks' partial sums in chunk order and accumulates (or, on a
// step's first write, overwrites).
__global__ void layernorm_backward_sum_partials_kernel(float* dweight, float* dbias, const float* partial_w,
                                                       const float* partial_b, int chunks, int C,
                                                       bool accumulate) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sw += partial_w[(int64_t)k * C + c];
        sb += partial_b[(int64_t)k * C + c];
    }
    dweight[c] = (accumulate ? dweight[c] : 0.0f) + sw;
    dbias[c] = (accumulate ? dbias[c] : 0.0f) + sb;
}

// ---- dispatch ------------------------------------------------------------------------------------------

// The fallback forward, defined at the end of this file.
constexpr int kWarpsPerBlock = 8;  // 256 threads: 8 rows per block, one row per warp
template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in, const T* weight,
                                         const T* bias, int N, int C, bool vec);

// Launch the register-resident forward with the smallest kSlots (packs of 8 per lane) that holds a row:
// kSlots = 4 covers C <= 1024, 8 C <= 2048, 16 C <= 4096, 24 C <= 6144 (bf16 only: 24 packs are 96
// registers in bf16 but 192 in f32, which would spill). Returns false when the row is wider (the caller
// then runs the fallback kernel at the end of this file). The choice depends only on C and the dtype, never
// on alignment.
template <class T, int kSlots>
static void launch_ln_forward_vec(Ctx& ctx, T* out, float* mean, float* rstd, const T* in, const T* weight,
                                  const T* bias, int N, int C, bool vec) {
    const int blocks = (N + kVecWarps - 1) / kVecWarps;
    layernorm_forward_vec_kernel<T, kSlots><<<blocks, kVecWarps * 32, 0, ctx.stream>>>(out, mean, rstd, in, weight,
                                                                                     bias, N, C, vec);
    CUDA_CHECK_LAST();
}

int layernorm_forward_slots(int C, DType dtype) {
    if (C <= 0) return 0;
    const int slots = ((C + 7) / 8 + 31) / 32;  // packs per lane
    if (slots <= 4) return 4;
    if (slots <= 8) return 8;
    if (slots <= 16) return 16;
    if (dtype == DType::BF16 && slots <= 24) return 24;
    return 0;
}

template <class T>
static bool layernorm_forward_vec(Ctx& ctx, T* out, float* mean, float* rstd, const T* in, const T* weight,
                                  const T* bias, int N, int C) {
    // 16-byte accesses need every row start aligned: C % 8 == 0 and aligned base pointers.
    const bool vec = C % 8 == 0 && vec8_aligned(out) && vec8_aligned(in) && vec8_aligned(weight) &&
                     vec8_aligned(bias);
    switch (layernorm_forward_slots(C, sizeof(T) == 2 ? DType::BF16 : DType::F32)) {
        case 4: launch_ln_forward_vec<T, 4>(ctx, out, mean, rstd, in, weight, bias, N, C, vec); return true;
        case 8: launch_ln_forward_vec<T, 8>(ctx, out, mean, rstd, in, weight, bias, N, C, vec); return true;
        case 16: launch_ln_forward_vec<T, 16>(ctx, out, mean, rstd, in, weight, bias, N, C, vec); return true;
        case 24:  // (the template argument only avoids instantiating <float, 24>, which the choice never gives)
            launch_ln_forward_vec<T, sizeof(T) == 2 ? 24 : 16>(ctx, out, mean, rstd, in, weight, bias, N, C, vec);
            return true;
        default: return false;
    }
}

void layernorm_forward(Ctx& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias,
                       int N, int C) {
    const char* op = "layernorm_forward";
    const DType dt = in.dtype;
    check_tensor(ctx, out, dt, (int64_t)N * C, op, "out");
    check_tensor(ctx, in, dt, (int64_t)N * C, op, "in");
    check_tensor(ctx, weight, dt, C, op, "weight");
    check_tensor(ctx, bias, dt, C, op, "bias");
    if (!mean.empty()) check_tensor(ctx, mean, DType::F32, N, op, "mean");
    if (!rstd.empty()) check_tensor(ctx, rstd, DType::F32, N, op, "rstd");
    OpScope scope(ctx, op);
    if (N == 0 || C == 0) return;
    float* mp = mean.empty() ? nullptr : mean.as<float>();
    float* rp = rstd.empty() ? nullptr : rstd.as<float>();
    MM_DISPATCH_ACT(dt, {
        if (ctx.device == Device::CPU) {
            layernorm_forward_cpu<T>(out.as<T>(), mp, rp, in.as<T>(), weight.as<T>(), bias.as<T>(), N, C);
        } else if (!layernorm_forward_vec<T>(ctx, out.as<T>(), mp, rp, in.as<T>(), weight.as<T>(), bias.as<T>(),
                                             N, C)) {
            int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
            // 16-byte accesses need every row start aligned: C % 8 == 0 and aligned base pointers.
            const bool vec = C % 8 == 0 && vec8_aligned(out.data) && vec8_aligned(in.data) &&
                             vec8_aligned(weight.data) && vec8_aligned(bias.data);
            layernorm_forward_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(
                out.as<T>(), mp, rp, in.as<T>(), weight.as<T>(), bias.as<T>(), N, C, vec);
            CUDA_CHECK_LAST();
        }
    });
}

// How many row chunks the backward's partial sums use: enough blocks to keep ~4 MB of loads in flight
// (~2048 blocks of 64 threads, 32 bytes each per row), derived only from N and C, so the same shapes always
// reduce in the same order (bitwise reproducible).
static int ln_partial_chunks(int N, int C, int* rows_per_chunk) {
    const int col_blocks = ((C + 7) / 8 + kPartialThreads - 1) / kPartialThreads;
    int chunks = 2048 / col_blocks;
    if (chunks < 1) chunks = 1;
    if (chunks > N) chunks = N;
    if (chunks < 1) chunks = 1;  // N = 0: no rows (the backward returns before it needs a chunk)
    const int rows = N > 0 ? (N + chunks - 1) / chunks : 1;
    if (rows_per_chunk) *rows_per_chunk = rows;
    return N > 0 ? (N + rows - 1) / rows : 1;  // no empty chunk at the end
}

size_t layernorm_backward_scratch_bytes(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return 2 * sizeof(float) * (size_t)ln_partial_chunks(N, C, nullptr) * C;
}

void layernorm_backward(Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                        Tensor weight, Tensor mean, Tensor rstd, int N, int C, GradWrite grads) {
    const char* op = "layernorm_backward";
    const DType dt = in.dtype;
    check_tensor(ctx, din, dt, (int64_t)N * C, op, "din");
    check_tensor(ctx, dout, dt, (int64_t)N * C, op, "dout");
    check_tensor(ctx, in, dt, (int64_t)N * C, op, "in");
    check_tensor(ctx, weight, dt, C, op, "weight");
    check_tensor(ctx, dweight, DType::F32, C, op, "dweight");
    check_tensor(ctx, dbias, DType::F32, C, op, "dbias");
    check_tensor(ctx, mean, DType::F32, N, op, "mean");
    check_tensor(ctx, rstd, DType::F32, N, op, "rstd");
    OpScope scope(ctx, op);
    const bool accumulate = grads == GradWrite::Accumulate;
    if (C == 0) return;
    if (N == 0) {  // no rows: the sums are 0
        if (!accumulate) {
            tensor_zero(ctx, dweight);
            tensor_zero(ctx, dbias);
        }
        return;
    }
    MM_DISPATCH_ACT(dt, {
        if (ctx.device == Device::CPU) {
            layernorm_backward_cpu<T>(din.as<T>(), dweight.as<float>(), dbias.as<float>(), dout.as<T>(),
                                      in.as<T>(), weight.as<T>(), mean.as<float>(), rstd.as<float>(), N, C,
                                      accumulate);
        } else {
            // 16-byte accesses need every row start aligned: C % 8 == 0 and aligned base pointers.
            const bool vec = C % 8 == 0 && vec8_aligned(din.data) && vec8_aligned(dout.data) &&
                             vec8_aligned(in.data) && vec8_aligned(weight.data);
            int blocks = (N + kVecWarps - 1) / kVecWarps;
            layernorm_backward_din_vec_kernel<T><<<blocks, kVecWarps * 32, 0, ctx.stream>>>(
                din.as<T>(), dout.as<T>(), in.as<T>(), weight.as<T>(), mean.as<float>(), rstd.as<float>(), N, C,
                vec);
            CUDA_CHECK_LAST();

            const int col_blocks = ((C + 7) / 8 + kPartialThreads - 1) / kPartialThreads;
            int rows_per_chunk = 0;
            const int chunks = ln_partial_chunks(N, C, &rows_per_chunk);
            float* partial_w = static_cast<float*>(ctx_scratch(ctx, 2 * sizeof(float) * (size_t)chunks * C));
            float* partial_b = partial_w + (size_t)chunks * C;
            layernorm_backward_partials_kernel<T><<<dim3(col_blocks, chunks), kPartialThreads, 0, ctx.stream>>>(
                partial_w, partial_b, dout.as<T>(), in.as<T>(), mean.as<float>(), rstd.as<float>(), N, C,
                rows_per_chunk, vec);
            CUDA_CHECK_LAST();
            layernorm_backward_sum_partials_kernel<<<(C + 255) / 256, 256, 0, ctx.stream>>>(
                dweight.as<float>(), dbias.as<float>(), partial_w, partial_b, chunks, C, accumulate);
            CUDA_CHECK_LAST();
        }
    });
}

// ---- fallback: rows wider than the vectorized forward holds ---------------------------------------------

// Forward for rows too wide to keep in registers: C > 6144 in bf16 (e.g. the hidden sizes of the paper's
// 175B, 530B and 1T models), C > 4096 in f32 (the largest kSlots of layernorm_forward_vec). One warp per row:
// lane l handles the packs of 8 channels l, l+32, l+64, ... (vec8.h: one 16-byte access per pack in bf16 when
// the row allows, element by element otherwise and for the row's last partial pack), then the warp combines
// its 32 partial sums with shuffles. The second and third passes over the row hit L1/L2, not DRAM. The order
// of every sum depends only on C (pack by pack, each pack's channels in order), never on the access path.
template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in, const T* weight,
                                         const T* bias, int N, int C, bool vec) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
    if (r >= N) return;  // whole warps leave together, so the shuffles below see all 32 lanes
    const T* x = in + r * C;
    T* y = out + r * C;

    float sum = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        const int count = C - c0 < 8 ? C - c0 : 8;
        const Pack8<T> xv = load8(x + c0, count, vec);  // zero-filled beyond count
#pragma unroll
        for (int k = 0; k < 8; k++) sum += to_f32(xv.v[k]);
    }
    const float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        const int count = C - c0 < 8 ? C - c0 : 8;
        const Pack8<T> xv = load8(x + c0, count, vec);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float d = k < count ? to_f32(xv.v[k]) - m : 0.0f;
            sq += d * d;
        }
    }
    // 1/sqrtf rather than rsqrtf: rsqrtf is an approximation and would move the GPU away from the CPU oracle.
    const float s = 1.0f / sqrtf(warp_sum(sq) / C + kLayerNormEps);
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        const int count = C - c0 < 8 ? C - c0 : 8;
        const Pack8<T> xv = load8(x + c0, count, vec), wv = load8(weight + c0, count, vec),
                       bv = load8(bias + c0, count, vec);
        Pack8<T> yv;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float n = (to_f32(xv.v[k]) - m) * s;
            yv.v[k] = from_f32<T>(n * to_f32(wv.v[k]) + to_f32(bv.v[k]));
        }
        store8(y + c0, yv, count, vec);
    }
    if (lane == 0) {
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}
