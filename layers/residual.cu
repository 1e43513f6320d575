// residual.cu — the residual stream's element-wise sums (see residual.h).
//
// Forward: out = a + b joins a branch to the stream (the adds after a dropout are fused into
// bias_dropout_residual_forward instead). Backward: the stream's gradient flows unchanged into both
// operands, so the only op needed is "dst += src" where a branch's input gradient joins the stream's.
#include "residual.h"
#include "vec8.h"

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

// ---- CUDA kernels ----------------------------------------------------------------------------------------
// Grid-stride loops over packs of 8 elements (vec8.h): 16-byte accesses in bf16 when every pointer is
// 16-byte aligned (`vec`), element by element otherwise; the last pack may be partial (`count`).
// out may alias a or b: each thread reads its pack of both before writing it.

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n, bool vec) {
    const int64_t packs = (n + 7) / 8;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = j * 8;
        const int count = n - i < 8 ? (int)(n - i) : 8;
        const Pack8<T> x = load8(a + i, count, vec), y = load8(b + i, count, vec);
        Pack8<T> z;
#pragma unroll
        for (int k = 0; k < 8; k++) z.v[k] = from_f32<T>(to_f32(x.v[k]) + to_f32(y.v[k]));
        store8(out + i, z, count, vec);
    }
}

template <class T>
__global__ void accumulate_kernel(T* dst, const T* src, int64_t n, bool vec) {
    const int64_t packs = (n + 7) / 8;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = j * 8;
        const int count = n - i < 8 ? (int)(n - i) : 8;
        Pack8<T> d = load8(dst + i, count, vec);
        const Pack8<T> s = load8(src + i, count, vec);
#pragma unroll
        for (int k = 0; k < 8; k++) d.v[k] = from_f32<T>(to_f32(d.v[k]) + to_f32(s.v[k]));
        store8(dst + i, d, count, vec);
    }
}

// ---- dispatch ------------------------------------------------------------------------------------------

void residual_forward(Ctx& ctx, Tensor out, Tensor a, Tensor b, int64_t n) {
    check_tensor(ctx, out, a.dtype, n, "residual_forward", "out");
    check_tensor(ctx, a, a.dtype, n, "residual_forward", "a");
    check_tensor(ctx, b, a.dtype, n, "residual_forward", "b");
    if (n == 0) return;
    MM_DISPATCH_ACT(a.dtype, {
        if (ctx.device == Device::CPU) {
            residual_forward_cpu<T>(out.as<T>(), a.as<T>(), b.as<T>(), n);
        } else {
            const bool vec = vec8_aligned(out.data) && vec8_aligned(a.data) && vec8_aligned(b.data);
            residual_forward_kernel<T><<<grid_for_packs8(n, 256), 256, 0, ctx.stream>>>(out.as<T>(), a.as<T>(),
                                                                                 b.as<T>(), n, vec);
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
            const bool vec = vec8_aligned(dst.data) && vec8_aligned(src.data);
            accumulate_kernel<T><<<grid_for_packs8(n, 256), 256, 0, ctx.stream>>>(dst.as<T>(), src.as<T>(), n, vec);
            CUDA_CHECK_LAST();
        }
    });
}
