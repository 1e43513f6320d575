// residual.cu — the residual stream's element-wise sums (see residual.h).
//
// Forward: out = a + b joins a branch to the stream (the adds after a dropout are fused into
// bias_dropout_residual_forward instead). Backward: the stream's gradient flows unchanged into both
// operands, so the only op needed is "dst += src" where a branch's input gradient joins the stream's.
#include "residual.h"

// ---- CPU reference -------------------------------------------------------------------------------------

template <class T>
static void residual_forward_cpu(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T>
static void accumulate_cpu(T* dst, const T* src, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = from_f32<T>(to_f32(dst[i]) + to_f32(src[i]));
}

// ---- CUDA kernels (grid-stride loops) ------------------------------------------------------------------

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T>
__global__ void accumulate_kernel(T* dst, const T* src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = from_f32<T>(to_f32(dst[i]) + to_f32(src[i]));
}

// ---- dispatch ------------------------------------------------------------------------------------------

static void check_tensor(const Ctx& ctx, const Tensor& t, DType dtype, int64_t n, const char* op,
                         const char* name) {
    if (t.device != ctx.device || t.dtype != dtype || t.n < n)
        mm_fatal("%s: %s must be %s on %s with >= %lld elements (got %s on %s, %lld)", op, name,
                 dtype_name(dtype), device_name(ctx.device), (long long)n, dtype_name(t.dtype),
                 device_name(t.device), (long long)t.n);
}

static unsigned grid_for(int64_t n, int threads) {
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 65536 ? blocks : 65536);
}

void residual_forward(Ctx& ctx, Tensor out, Tensor a, Tensor b, int64_t n) {
    check_tensor(ctx, out, a.dtype, n, "residual_forward", "out");
    check_tensor(ctx, a, a.dtype, n, "residual_forward", "a");
    check_tensor(ctx, b, a.dtype, n, "residual_forward", "b");
    if (n == 0) return;
    MM_DISPATCH_ACT(a.dtype, {
        if (ctx.device == Device::CPU) {
            residual_forward_cpu<T>(out.as<T>(), a.as<T>(), b.as<T>(), n);
        } else {
            residual_forward_kernel<T><<<grid_for(n, 256), 256, 0, ctx.stream>>>(out.as<T>(), a.as<T>(),
                                                                                 b.as<T>(), n);
            CUDA_CHECK_LAST();
        }
    });
}

void accumulate(Ctx& ctx, Tensor dst, Tensor src, int64_t n) {
    check_tensor(ctx, dst, src.dtype, n, "accumulate", "dst");
    check_tensor(ctx, src, src.dtype, n, "accumulate", "src");
    if (n == 0) return;
    MM_DISPATCH_ACT(src.dtype, {
        if (ctx.device == Device::CPU) {
            accumulate_cpu<T>(dst.as<T>(), src.as<T>(), n);
        } else {
            accumulate_kernel<T><<<grid_for(n, 256), 256, 0, ctx.stream>>>(dst.as<T>(), src.as<T>(), n);
            CUDA_CHECK_LAST();
        }
    });
}
