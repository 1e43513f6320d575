// gelu.cu — GeLU, tanh approximation (GPT-2 / Megatron), element-wise (see gelu.h).
// The plain math this file computes fast: layers/reference/gelu.h
//
//   gelu(x)  = 0.5 x (1 + tanh(u)),          u = k (x + 0.044715 x³),   k = sqrt(2/π)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh²(u)) k (1 + 3·0.044715 x²)
//
// Computed through the identity 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)) = s (the logistic function of 2u),
// and 1 - tanh²(u) = 4 s (1 - s), 1 - s = e^(-2u) s: one exponential per element, no tanh. This is the same
// function as the tanh form, not another approximation, and it is more accurate where the tanh form cancels
// (x << 0, where 1 + tanh(u) -> 0). The exponential is fast_exp (fast_exp.h): plain arithmetic, so the CPU
// loops run it in SIMD registers and the CUDA kernels run the very same code.
//
// The backward needs the GeLU *input* (the paper's 8sbh "GeLU input" term of Table 2, saved by the MLP).
#include "fast_exp.h"
#include "gelu.h"
#include "op_timer.h"
#include "vec8.h"

// ---- the math, shared by the fast CPU path and the CUDA kernels ----------------------------------------

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// x · s, written as x − x·e·s (the same value: 1 − s = e·s) where x >= 0. Why: there s is close to 1 and the
// product x · s carries the roundings of 1 + e and of s in full, while in x − x·e·s they only touch the
// small correction x·e·s; the one rounding left is the subtraction's. For x < 0, x · s (s small, no
// cancellation either way). RMS error against float64 on N(0, 2) inputs: 4.1e-8 as x · s everywhere, 2.5e-8
// this way, 3.5e-8 for PyTorch's 0.5 x (1 + tanh u) (bench/PERF_NOTES.md "Accuracy").
__host__ __device__ inline float gelu_f(float x) {
    const float u = kGeluK * (x + kGeluA * x * x * x);
    const float e = fast_exp(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    return select_f(x >= 0.0f, x - (x * e) * s, x * s);
}

__host__ __device__ inline float gelu_grad_f(float x) {
    const float u = kGeluK * (x + kGeluA * x * x * x);
    const float e = fast_exp(-2.0f * u);  // clamped at e^±80: s and 1 - s stay normal floats, never inf/inf
    const float s = 1.0f / (1.0f + e);
    const float du_dx = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    // 0.5 (1 + t) + 0.5 x (1 - t²) du/dx  =  s + 2 x s (1 - s) du/dx, with 1 - s = e·s (no cancellation)
    return s + 2.0f * x * du_dx * s * (e * s);
}

// ---- fast CPU path -------------------------------------------------------------------------------------
// One SIMD loop over the elements, split between the OpenMP threads: the element function has no library call
// inside, so the compiler vectorises all of it (MM_CPU_LOOP, vec8.h: in AVX-512 or AVX2 registers where the CPU has them).
// The element function is made of IEEE operations only (no FMA is enabled, nothing is reassociated), so an
// element gets the same bits in a vector lane or in the scalar loop that finishes the tail: the result does
// not depend on the thread count, which moves the tails. (An earlier version copied packs of 16 through a
// buffer on the stack; the compiler split the copies into loads and stores of unequal widths, and each
// pack waited on the store-to-load forwarding that this defeats: 2.3 ms instead of 0.9 for 1 M elements on
// one core.)

template <class T>
MM_CPU_LOOP static void gelu_forward_cpu(T* __restrict__ out, const T* __restrict__ in, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = from_f32<T>(gelu_f(to_f32(in[i])));
}

// din may alias dout (each element is read before it is written), so neither is __restrict__.
template <class T>
MM_CPU_LOOP static void gelu_backward_cpu(T* din, const T* __restrict__ in, const T* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) din[i] = from_f32<T>(gelu_grad_f(to_f32(in[i])) * to_f32(dout[i]));
}

// ---- CUDA kernels ----------------------------------------------------------------------------------------
// Grid-stride loops over packs of 8 elements (vec8.h): one 16-byte load per input and one 16-byte store per
// pack in bf16, instead of eight 2-byte accesses. `vec` is false when a pointer is not 16-byte aligned; then
// the same packs are moved element by element. The last pack may be partial (n % 8 != 0): `count` says how
// many of its elements exist. Each element's math is the same as the fast CPU path's.

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n, bool vec) {
    const int64_t packs = (n + 7) / 8;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = j * 8;
        const int count = n - i < 8 ? (int)(n - i) : 8;
        const Pack8<T> x = load8(in + i, count, vec);
        Pack8<T> y;
#pragma unroll
        for (int k = 0; k < 8; k++) y.v[k] = from_f32<T>(gelu_f(to_f32(x.v[k])));
        store8(out + i, y, count, vec);
    }
}

template <class T>
__global__ void gelu_backward_kernel(T* din, const T* in, const T* dout, int64_t n, bool vec) {
    const int64_t packs = (n + 7) / 8;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = j * 8;
        const int count = n - i < 8 ? (int)(n - i) : 8;
        const Pack8<T> x = load8(in + i, count, vec);
        const Pack8<T> dy = load8(dout + i, count, vec);
        Pack8<T> dx;
#pragma unroll
        for (int k = 0; k < 8; k++) dx.v[k] = from_f32<T>(gelu_grad_f(to_f32(x.v[k])) * to_f32(dy.v[k]));
        store8(din + i, dx, count, vec);  // din may alias dout: this thread read its pack above
    }
}

// ---- dispatch ------------------------------------------------------------------------------------------

void gelu_forward(Ctx& ctx, Tensor out, Tensor in, int64_t n) {
    check_tensor(ctx, out, in.dtype, n, "gelu_forward", "out");
    check_tensor(ctx, in, in.dtype, n, "gelu_forward", "in");
    OpScope scope(ctx, "gelu_forward");
    if (n == 0) return;
    MM_DISPATCH_ACT(in.dtype, {
        if (ctx.device == Device::CPU) {
            gelu_forward_cpu<T>(out.as<T>(), in.as<T>(), n);
        } else {
            const bool vec = vec8_aligned(out.data) && vec8_aligned(in.data);
            gelu_forward_kernel<T><<<grid_for_packs8(n, 256), 256, 0, ctx.stream>>>(out.as<T>(), in.as<T>(), n, vec);
            CUDA_CHECK_LAST();
        }
    });
}

void gelu_backward(Ctx& ctx, Tensor din, Tensor in, Tensor dout, int64_t n) {
    check_tensor(ctx, din, in.dtype, n, "gelu_backward", "din");
    check_tensor(ctx, in, in.dtype, n, "gelu_backward", "in");
    check_tensor(ctx, dout, in.dtype, n, "gelu_backward", "dout");
    OpScope scope(ctx, "gelu_backward");
    if (n == 0) return;
    MM_DISPATCH_ACT(in.dtype, {
        if (ctx.device == Device::CPU) {
            gelu_backward_cpu<T>(din.as<T>(), in.as<T>(), dout.as<T>(), n);
        } else {
            const bool vec = vec8_aligned(din.data) && vec8_aligned(in.data) && vec8_aligned(dout.data);
            gelu_backward_kernel<T><<<grid_for_packs8(n, 256), 256, 0, ctx.stream>>>(din.as<T>(), in.as<T>(),
                                                                              dout.as<T>(), n, vec);
            CUDA_CHECK_LAST();
        }
    });
}
