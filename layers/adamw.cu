// adamw.cu — the optimizer step: AdamW with llm.c's update rule, and the reductions around it (see adamw.h).
// The plain math this file computes fast: layers/reference/adamw.h
//
// Per parameter, at step t (counting from 1), with g = grad · grad_scale (grad_scale is the clipping factor):
//   m      = β1 m + (1 - β1) g
//   v      = β2 v + (1 - β2) g²
//   m̂      = m / (1 - β1^t),   v̂ = v / (1 - β2^t)             (bias corrections)
//   param -= lr · ( m̂ / (sqrt(v̂) + eps) + weight_decay · param )   (decoupled weight decay, Loshchilov & Hutter)
// Parameters, m and v are fp32 (the master weights and optimizer state); grad may be f32 or bf16 storage.
// Under tensor/sequence parallelism every rank updates its own shard; replicated parameters receive the
// same summed gradient on every rank and so stay identical.
#include "adamw.h"
#include "op_timer.h"
#include "vec8.h"

#include <cmath>
#include <vector>

// ---- the update of one parameter, shared by the fast CPU path and the CUDA kernel ---------------------

__host__ __device__ inline void adamw_element(float* __restrict__ param, float* __restrict__ m, float* __restrict__ v,
                                              float grad, int64_t i, float lr,
                                              float beta1, float beta2, float eps, float weight_decay,
                                              float beta1_correction, float beta2_correction) {
    float g = grad;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float m_hat = mi / beta1_correction;
    float v_hat = vi / beta2_correction;
    param[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * param[i]);
}

// ---- fast CPU path -------------------------------------------------------------------------------------

// The loops vectorise (MM_CPU_LOOP, vec8.h: AVX-512 or AVX2 where the CPU has it, never FMA): division and square root are
// exact IEEE operations in any register width, so every lane gives the scalar loop's bits. The four arrays are
// distinct tensors (__restrict__), which lets the compiler keep m, v and param in registers.
// Fused: the update, then the new weight rounded once into the compute copy (the rounding of tensor_convert).
template <class G>
MM_CPU_LOOP static void adamw_fused_cpu(float* __restrict__ param, bf16* __restrict__ compute, const G* __restrict__ grad,
                            float* __restrict__ m, float* __restrict__ v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float c1, float c2,
                            float grad_scale) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        adamw_element(param, m, v, to_f32(grad[i]) * grad_scale, i, lr, beta1, beta2, eps, weight_decay, c1, c2);
        compute[i] = from_f32<bf16>(param[i]);
    }
}

template <class G>
MM_CPU_LOOP static void adamw_cpu(float* __restrict__ param, const G* __restrict__ grad, float* __restrict__ m,
                                  float* __restrict__ v, int64_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, float c1, float c2, float grad_scale) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        adamw_element(param, m, v, to_f32(grad[i]) * grad_scale, i, lr, beta1, beta2, eps, weight_decay, c1, c2);
}

// Σ x² in double, in a fixed order independent of the number of OpenMP threads: fixed-size chunks, each
// summed in kSsqLanes partial sums (lane j takes the chunk's elements j, j + kSsqLanes, ...; the partials added
// in lane order at the end), then the chunk sums added in chunk order. Why lanes: one running double sum per
// chunk is a chain of dependent additions, each waiting for the one before (4 cycles apiece), and took
// 1.6 ms of the CPU peer's step for its 3.45 M gradients; independent lanes run in SIMD registers. The
// order differs from that single chain, so the norm moves within double rounding (~1e-16 relative), far
// below the float it becomes for clipping.
constexpr int kSsqLanes = 16;
template <class T>
MM_CPU_LOOP static double sum_of_squares_cpu(const T* x, int64_t n) {
    const int64_t kChunk = 1 << 16;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial((size_t)chunks, 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t i0 = k * kChunk, i1 = (k + 1) * kChunk < n ? (k + 1) * kChunk : n;
        const int64_t full = i0 + (i1 - i0) / kSsqLanes * kSsqLanes;
        double acc[kSsqLanes] = {0.0};
        for (int64_t i = i0; i < full; i += kSsqLanes) {
#pragma omp simd
            for (int j = 0; j < kSsqLanes; j++) {
                const double xi = to_f32(x[i + j]);
                acc[j] += xi * xi;
            }
        }
        for (int64_t i = full; i < i1; i++) {
            const double xi = to_f32(x[i]);
            acc[i - full] += xi * xi;
        }
        double s = 0.0;
        for (int j = 0; j < kSsqLanes; j++) s += acc[j];
        partial[(size_t)k] = s;
    }
    double total = 0.0;
    for (int64_t k = 0; k < chunks; k++) total += partial[(size_t)k];
    return total;
}

// ---- CUDA kernels --------------------------------------------------------------------------------------

template <class G>
__global__ void adamw_kernel(float* param, const G* grad, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float c1, float c2, float grad_scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        adamw_element(param, m, v, to_f32(grad[i]) * grad_scale, i, lr, beta1, beta2, eps, weight_decay, c1, c2);
}

template <class G>
__global__ void adamw_fused_kernel(float* param, bf16* compute, const G* grad, float* m, float* v, int64_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, float c1, float c2,
                                   float grad_scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        adamw_element(param, m, v, to_f32(grad[i]) * grad_scale, i, lr, beta1, beta2, eps, weight_decay, c1, c2);
        compute[i] = from_f32<bf16>(param[i]);
    }
}

constexpr int kSsqThreads = 256;
constexpr int kSsqMaxBlocks = 1024;

// Sum of the block's kSsqThreads values in shared memory, as a tree with a fixed shape (deterministic).
// Every thread of the block must call it; the result is valid in thread 0.
__device__ inline double block_sum_fixed_order(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int half = kSsqThreads / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    return shared[0];
}

// Step 1 of 2: block k sums the squares of elements k·256 + t, stepping by the whole grid, in double (fp64
// accumulation: the gradient norm of 10⁸ parameters is then exact to far more digits than clipping needs).
template <class T>
__global__ void sum_of_squares_partials_kernel(double* partial, const T* x, int64_t n) {
    __shared__ double shared[kSsqThreads];
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double xi = to_f32(x[i]);
        s += xi * xi;
    }
    double total = block_sum_fixed_order(s, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Step 2 of 2: one block adds the per-block partial sums, again in a fixed order.
__global__ void sum_of_squares_final_kernel(double* result, const double* partial, int blocks) {
    __shared__ double shared[kSsqThreads];
    double s = 0.0;
    for (int k = threadIdx.x; k < blocks; k += kSsqThreads) s += partial[k];
    double total = block_sum_fixed_order(s, shared);
    if (threadIdx.x == 0) *result = total;
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

__global__ void add_kernel(float* acc, const float* x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] += x[i];
}

// ---- dispatch ------------------------------------------------------------------------------------------

static unsigned grid_for(int64_t n, int threads) {
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 65536 ? blocks : 65536);
}

// The checks both updates make; false when there is nothing to do. c1, c2: the bias corrections, the same
// for every element, so computed once here (as llm.c does), in double and rounded once. Why double: 1 − β^t
// cancels when β^t is close to 1 (β2 = 0.999: β2^t = 0.998 at t = 2), and a float β^t carries its rounding,
// up to 2^-24 of β^t, into the difference whole: 1 − powf(0.999f, 2) is 6.7e-6 off in relative terms, so
// every parameter's step was 3.3e-6 too long or too short, all by the same factor: an error along the update
// itself, which training does not average away (issue 41; bench/PERF_NOTES.md "Accuracy"). PyTorch's AdamW
// computes its bias corrections in double too. β stays the float it is given: m and v are averaged with the
// float β's weights, and 1 − β^t of that same β is what normalises them.
static bool adamw_prepare(const Ctx& ctx, Tensor param, Tensor grad, Tensor m, Tensor v, int64_t n, float beta1,
                          float beta2, int t, const char* op, float* c1, float* c2) {
    check_tensor(ctx, param, DType::F32, n, op, "param");
    check_tensor(ctx, grad, grad.dtype, n, op, "grad");
    check_tensor(ctx, m, DType::F32, n, op, "m");
    check_tensor(ctx, v, DType::F32, n, op, "v");
    if (t < 1) mm_fatal("%s: step t counts from 1 (got %d)", op, t);
    *c1 = (float)(1.0 - std::pow((double)beta1, t));
    *c2 = (float)(1.0 - std::pow((double)beta2, t));
    return n > 0;
}

void adamw_update(Ctx& ctx, Tensor param, Tensor grad, Tensor m, Tensor v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, float grad_scale) {
    OpScope scope(ctx, "adamw_update");
    float c1, c2;
    if (!adamw_prepare(ctx, param, grad, m, v, n, beta1, beta2, t, "adamw_update", &c1, &c2)) return;
    MM_DISPATCH_ACT(grad.dtype, {
        if (ctx.device == Device::CPU) {
            adamw_cpu<T>(param.as<float>(), grad.as<T>(), m.as<float>(), v.as<float>(), n, lr, beta1, beta2,
                         eps, weight_decay, c1, c2, grad_scale);
        } else {
            adamw_kernel<T><<<grid_for(n, 256), 256, 0, ctx.stream>>>(param.as<float>(), grad.as<T>(),
                                                                      m.as<float>(), v.as<float>(), n, lr,
                                                                      beta1, beta2, eps, weight_decay, c1, c2,
                                                                      grad_scale);
            CUDA_CHECK_LAST();
        }
    });
}

void adamw_update_fused(Ctx& ctx, Tensor param, Tensor compute, Tensor grad, Tensor m, Tensor v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    if (compute.data == nullptr)  // fp32 training: nothing to round into
        return adamw_update(ctx, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    OpScope scope(ctx, "adamw_update");
    check_tensor(ctx, compute, DType::BF16, n, "adamw_update_fused", "compute");
    float c1, c2;
    if (!adamw_prepare(ctx, param, grad, m, v, n, beta1, beta2, t, "adamw_update_fused", &c1, &c2)) return;
    MM_DISPATCH_ACT(grad.dtype, {
        if (ctx.device == Device::CPU) {
            adamw_fused_cpu<T>(param.as<float>(), compute.as<bf16>(), grad.as<T>(), m.as<float>(), v.as<float>(), n, lr,
                               beta1, beta2, eps, weight_decay, c1, c2, grad_scale);
        } else {
            adamw_fused_kernel<T><<<grid_for(n, 256), 256, 0, ctx.stream>>>(param.as<float>(), compute.as<bf16>(),
                                                                            grad.as<T>(), m.as<float>(), v.as<float>(), n,
                                                                            lr, beta1, beta2, eps, weight_decay, c1, c2,
                                                                            grad_scale);
            CUDA_CHECK_LAST();
        }
    });
}

// Blocks of the partial-sum kernel for n elements: depends only on n, so a tensor always reduces in the
// same order.
static int ssq_blocks(int64_t n) {
    const int64_t blocks = (n + kSsqThreads - 1) / kSsqThreads;
    return (int)(blocks < kSsqMaxBlocks ? blocks : kSsqMaxBlocks);
}

size_t sums_of_squares_scratch_bytes(const std::vector<int64_t>& sizes) {
    size_t partial_count = 0;  // as sums_of_squares counts them: each tensor's partials, then one result each
    for (int64_t n : sizes)
        if (n > 0) partial_count += (size_t)ssq_blocks(n);
    return sizeof(double) * (partial_count + sizes.size());
}

std::vector<double> sums_of_squares(Ctx& ctx, const std::vector<Tensor>& xs) {
    OpScope scope(ctx, "sums_of_squares");
    std::vector<double> result(xs.size(), 0.0);
    size_t partial_count = 0;
    for (const Tensor& x : xs) {
        if (x.device != ctx.device)
            mm_fatal("sum_of_squares: tensor on %s, context on %s", device_name(x.device), device_name(ctx.device));
        if (ctx.device == Device::CUDA && x.n > 0) partial_count += (size_t)ssq_blocks(x.n);
    }
    if (ctx.device == Device::CPU) {
        for (size_t i = 0; i < xs.size(); i++)
            if (xs[i].n > 0) MM_DISPATCH_ACT(xs[i].dtype, { result[i] = sum_of_squares_cpu<T>(xs[i].as<T>(), xs[i].n); });
        return result;
    }
    // One scratch buffer: the per-block partials of every tensor, then one result slot per tensor. Every
    // reduction is queued on the stream; a single copy brings the results back.
    double* scratch = static_cast<double*>(ctx_scratch(ctx, sizeof(double) * (partial_count + xs.size())));
    // (sums_of_squares_scratch_bytes counts the same for the model's reservation.)
    double* device_results = scratch + partial_count;
    CUDA_CHECK(cudaMemsetAsync(device_results, 0, sizeof(double) * xs.size(), ctx.stream));  // empty tensors: 0
    double* partial = scratch;
    for (size_t i = 0; i < xs.size(); i++) {
        const Tensor& x = xs[i];
        if (x.n == 0) continue;
        const int blocks = ssq_blocks(x.n);
        MM_DISPATCH_ACT(x.dtype, {
            sum_of_squares_partials_kernel<T><<<blocks, kSsqThreads, 0, ctx.stream>>>(partial, x.as<T>(), x.n);
        });
        CUDA_CHECK_LAST();
        sum_of_squares_final_kernel<<<1, kSsqThreads, 0, ctx.stream>>>(device_results + i, partial, blocks);
        CUDA_CHECK_LAST();
        partial += blocks;
    }
    CUDA_CHECK(cudaMemcpyAsync(result.data(), device_results, sizeof(double) * xs.size(), cudaMemcpyDeviceToHost,
                               ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return result;
}

double sum_of_squares(Ctx& ctx, Tensor x) { return sums_of_squares(ctx, {x})[0]; }

void scale_inplace(Ctx& ctx, Tensor x, float s) {
    OpScope scope(ctx, "scale_inplace");
    check_tensor(ctx, x, DType::F32, x.n, "scale_inplace", "x");
    if (x.n == 0) return;
    if (ctx.device == Device::CPU) {
        float* p = x.as<float>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < x.n; i++) p[i] *= s;
    } else {
        scale_kernel<<<grid_for(x.n, 256), 256, 0, ctx.stream>>>(x.as<float>(), s, x.n);
        CUDA_CHECK_LAST();
    }
}

void add_inplace(Ctx& ctx, Tensor acc, Tensor x) {
    OpScope scope(ctx, "add_inplace");
    check_tensor(ctx, acc, DType::F32, x.n, "add_inplace", "acc");
    check_tensor(ctx, x, DType::F32, acc.n, "add_inplace", "x");
    if (x.n == 0) return;
    if (ctx.device == Device::CPU) {
        float* a = acc.as<float>();
        const float* b = x.as<float>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < x.n; i++) a[i] += b[i];
    } else {
        add_kernel<<<grid_for(x.n, 256), 256, 0, ctx.stream>>>(acc.as<float>(), x.as<float>(), x.n);
        CUDA_CHECK_LAST();
    }
}
