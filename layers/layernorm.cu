// layernorm.cu — LayerNorm over the channels of each row (see layernorm.h), GPT-2 flavour (eps 1e-5).
//
// forward, per row x of C channels:
//   mean = Σx / C,  var = Σ(x - mean)² / C,  rstd = 1 / sqrt(var + eps)
//   n    = (x - mean) · rstd                          (the normalized row)
//   out  = n · weight + bias
// backward, with g = dout · weight (the gradient reaching n):
//   din     += rstd · (g - mean(g) - n · mean(g · n))
//   dweight += Σ_rows dout · n,     dbias += Σ_rows dout
//
// dweight and dbias are sums over rows. Under sequence parallelism each rank sums over its own s/t rows
// only and parallel/sequence_parallel.cu all-reduces the partial sums over the TP group (paper §4.2.2).
// These sums are computed in a fixed order on both devices (no float atomics), so the selective / full
// recomputation policies, which run exactly these kernels on exactly these inputs, give bitwise identical
// gradients.
#include "layernorm.h"

// ---- CPU reference -------------------------------------------------------------------------------------

template <class T>
static void layernorm_forward_cpu(T* out, float* mean, float* rstd, const T* in, const T* weight, const T* bias,
                                  int N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const T* x = in + r * C;
        T* y = out + r * C;
        float sum = 0.0f;
        for (int c = 0; c < C; c++) sum += to_f32(x[c]);
        const float m = sum / C;
        // Two passes (mean first, then squared deviations): Σx² - mean² loses everything to cancellation
        // when |mean| >> std, which is common for the residual stream.
        float sq = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = to_f32(x[c]) - m;
            sq += d * d;
        }
        const float s = 1.0f / sqrtf(sq / C + kLayerNormEps);
        for (int c = 0; c < C; c++) {
            float n = (to_f32(x[c]) - m) * s;
            y[c] = from_f32<T>(n * to_f32(weight[c]) + to_f32(bias[c]));  // y may alias x: x[c] read first
        }
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

template <class T>
static void layernorm_backward_cpu(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                                   const T* weight, const float* mean, const float* rstd, int N, int C) {
    // din: rows are independent.
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const T* x = in + r * C;
        const T* dy = dout + r * C;
        T* dx = din + r * C;
        const float m = mean[r], s = rstd[r];
        float sum_g = 0.0f, sum_gn = 0.0f;
        for (int c = 0; c < C; c++) {
            float n = (to_f32(x[c]) - m) * s;
            float g = to_f32(dy[c]) * to_f32(weight[c]);
            sum_g += g;
            sum_gn += g * n;
        }
        const float mean_g = sum_g / C, mean_gn = sum_gn / C;
        for (int c = 0; c < C; c++) {
            float n = (to_f32(x[c]) - m) * s;
            float g = to_f32(dy[c]) * to_f32(weight[c]);
            dx[c] = from_f32<T>(to_f32(dx[c]) + (g - mean_g - n * mean_gn) * s);
        }
    }
    // dweight, dbias: sums over rows. Threads split the *columns* (64 at a time, so the inner loop walks
    // contiguous memory) and each sums its columns over all rows in row order: the result does not depend
    // on the number of OpenMP threads.
    const int kCols = 64;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += kCols) {
        const int c1 = c0 + kCols < C ? c0 + kCols : C;
        float acc_w[kCols] = {0}, acc_b[kCols] = {0};
        for (int64_t r = 0; r < N; r++) {
            const T* x = in + r * C;
            const T* dy = dout + r * C;
            for (int c = c0; c < c1; c++) {
                float n = (to_f32(x[c]) - mean[r]) * rstd[r];
                float d = to_f32(dy[c]);
                acc_w[c - c0] += d * n;
                acc_b[c - c0] += d;
            }
        }
        for (int c = c0; c < c1; c++) {
            dweight[c] += acc_w[c - c0];
            dbias[c] += acc_b[c - c0];
        }
    }
}

// ---- CUDA kernels --------------------------------------------------------------------------------------

// Sum of `v` over the 32 lanes of a warp, returned to every lane. The xor butterfly adds the same pairs in
// the same order on every run, and every lane ends with the same bits (a + b == b + a in IEEE arithmetic),
// so this reduction is deterministic.
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

constexpr int kWarpsPerBlock = 8;  // 256 threads: 8 rows per block, one row per warp

// One warp per row: lane l handles channels l, l+32, l+64, ... (consecutive lanes touch consecutive
// addresses, so every load is coalesced), then the warp combines its 32 partial sums with shuffles: no
// shared memory and no __syncthreads. The second and third passes over the row hit L1/L2, not DRAM.
template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in, const T* weight,
                                         const T* bias, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
    if (r >= N) return;  // whole warps leave together, so the shuffles below see all 32 lanes
    const T* x = in + r * C;
    T* y = out + r * C;

    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
    const float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_f32(x[c]) - m;
        sq += d * d;
    }
    // 1/sqrtf rather than rsqrtf: rsqrtf is an approximation and would move the GPU away from the CPU oracle.
    const float s = 1.0f / sqrtf(warp_sum(sq) / C + kLayerNormEps);
    for (int c = lane; c < C; c += 32) {
        float n = (to_f32(x[c]) - m) * s;
        y[c] = from_f32<T>(n * to_f32(weight[c]) + to_f32(bias[c]));
    }
    if (lane == 0) {
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

// din, one warp per row (same layout as the forward kernel).
// __restrict__: din never aliases the inputs (it is its own accumulator). Without it the compiler must assume
// the store to dx[c] may change x, dy or weight, so each iteration's loads wait for the previous store and the
// kernel becomes latency-bound (measured on an H200, bf16 [8192 x 1024]: this kernel took 250 us without it;
// the whole backward then dropped from 209 us to 50 us).
template <class T>
__global__ void layernorm_backward_din_kernel(T* __restrict__ din, const T* __restrict__ dout,
                                              const T* __restrict__ in, const T* __restrict__ weight,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              int N, int C) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
    if (r >= N) return;
    const T* x = in + r * C;
    const T* dy = dout + r * C;
    T* dx = din + r * C;
    const float m = mean[r], s = rstd[r];

    float sum_g = 0.0f, sum_gn = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float n = (to_f32(x[c]) - m) * s;
        float g = to_f32(dy[c]) * to_f32(weight[c]);
        sum_g += g;
        sum_gn += g * n;
    }
    const float mean_g = warp_sum(sum_g) / C, mean_gn = warp_sum(sum_gn) / C;
    for (int c = lane; c < C; c += 32) {
        float n = (to_f32(x[c]) - m) * s;
        float g = to_f32(dy[c]) * to_f32(weight[c]);
        dx[c] = from_f32<T>(to_f32(dx[c]) + (g - mean_g - n * mean_gn) * s);
    }
}

// dweight / dbias, step 1 of 2: the rows are cut into `chunks` consecutive ranges; block (x, y) owns 256
// columns (one per thread) of row range y and sums them over its rows in order. Each chunk writes its own
// partial sums to scratch (partial_w[y][c], partial_b[y][c]): no two blocks ever add into the same address,
// so no atomics and no run-to-run variation.
constexpr int kColsPerBlock = 256;

template <class T>
__global__ void layernorm_backward_partials_kernel(float* __restrict__ partial_w, float* __restrict__ partial_b,
                                                   const T* __restrict__ dout, const T* __restrict__ in,
                                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                                   int N, int C, int rows_per_chunk) {
    const int c = blockIdx.x * kColsPerBlock + threadIdx.x;
    if (c >= C) return;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float acc_w = 0.0f, acc_b = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        float n = (to_f32(in[r * C + c]) - mean[r]) * rstd[r];
        float d = to_f32(dout[r * C + c]);
        acc_w += d * n;
        acc_b += d;
    }
    partial_w[(int64_t)blockIdx.y * C + c] = acc_w;
    partial_b[(int64_t)blockIdx.y * C + c] = acc_b;
}

// Step 2 of 2: one thread per column adds the chunks' partial sums in chunk order and accumulates.
__global__ void layernorm_backward_sum_partials_kernel(float* dweight, float* dbias, const float* partial_w,
                                                       const float* partial_b, int chunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sw += partial_w[(int64_t)k * C + c];
        sb += partial_b[(int64_t)k * C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
}

// ---- dispatch ------------------------------------------------------------------------------------------

static void check_tensor(const Ctx& ctx, const Tensor& t, DType dtype, int64_t n, const char* op,
                         const char* name) {
    if (t.empty() || t.device != ctx.device || t.dtype != dtype || t.n < n)
        mm_fatal("%s: %s must be %s on %s with >= %lld elements (got %s%s on %s, %lld)", op, name,
                 dtype_name(dtype), device_name(ctx.device), (long long)n, t.empty() ? "empty " : "",
                 dtype_name(t.dtype), device_name(t.device), (long long)t.n);
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
    if (N == 0 || C == 0) return;
    float* mp = mean.empty() ? nullptr : mean.as<float>();
    float* rp = rstd.empty() ? nullptr : rstd.as<float>();
    MM_DISPATCH_ACT(dt, {
        if (ctx.device == Device::CPU) {
            layernorm_forward_cpu<T>(out.as<T>(), mp, rp, in.as<T>(), weight.as<T>(), bias.as<T>(), N, C);
        } else {
            int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
            layernorm_forward_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(
                out.as<T>(), mp, rp, in.as<T>(), weight.as<T>(), bias.as<T>(), N, C);
            CUDA_CHECK_LAST();
        }
    });
}

void layernorm_backward(Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                        Tensor weight, Tensor mean, Tensor rstd, int N, int C) {
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
    if (N == 0 || C == 0) return;
    MM_DISPATCH_ACT(dt, {
        if (ctx.device == Device::CPU) {
            layernorm_backward_cpu<T>(din.as<T>(), dweight.as<float>(), dbias.as<float>(), dout.as<T>(),
                                      in.as<T>(), weight.as<T>(), mean.as<float>(), rstd.as<float>(), N, C);
        } else {
            int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
            layernorm_backward_din_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(
                din.as<T>(), dout.as<T>(), in.as<T>(), weight.as<T>(), mean.as<float>(), rstd.as<float>(), N, C);
            CUDA_CHECK_LAST();

            // How many row chunks: enough blocks to fill the GPU (~1024 of 256 threads), derived only from
            // N and C, so the same shapes always reduce in the same order (bitwise reproducible).
            const int col_blocks = (C + kColsPerBlock - 1) / kColsPerBlock;
            int chunks = 1024 / col_blocks;
            if (chunks < 1) chunks = 1;
            if (chunks > N) chunks = N;
            const int rows_per_chunk = (N + chunks - 1) / chunks;
            chunks = (N + rows_per_chunk - 1) / rows_per_chunk;  // no empty chunk at the end

            float* partial_w = static_cast<float*>(ctx_scratch(ctx, 2 * sizeof(float) * (size_t)chunks * C));
            float* partial_b = partial_w + (size_t)chunks * C;
            layernorm_backward_partials_kernel<T><<<dim3(col_blocks, chunks), kColsPerBlock, 0, ctx.stream>>>(
                partial_w, partial_b, dout.as<T>(), in.as<T>(), mean.as<float>(), rstd.as<float>(), N, C,
                rows_per_chunk);
            CUDA_CHECK_LAST();
            layernorm_backward_sum_partials_kernel<<<(C + 255) / 256, 256, 0, ctx.stream>>>(
                dweight.as<float>(), dbias.as<float>(), partial_w, partial_b, chunks, C);
            CUDA_CHECK_LAST();
        }
    });
}
