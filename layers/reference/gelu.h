// reference/gelu.h — the plain math of layers/gelu.h: GeLU with GPT-2's tanh approximation, element-wise.
//
//   gelu(x)  = 0.5 x (1 + tanh(u)),        u = sqrt(2/π) (x + 0.044715 x³)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 − tanh²(u)) sqrt(2/π) (1 + 3 · 0.044715 x²)
//   backward: din = dout · gelu'(x)
//
// Written with tanh itself (the fast path computes the same function through one exponential: gelu.cu), in
// double; T is the output's storage (float like the op, or double for a test's oracle). Host only: the
// tests check the fast CPU path and the CUDA kernels against these functions.
#pragma once
#include <cmath>
#include <cstdint>

template <class T>
inline void ref_gelu_forward(T* out, const float* in, int64_t n) {
    const double k = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; i++) {
        const double x = in[i], u = k * (x + 0.044715 * x * x * x);
        out[i] = (T)(0.5 * x * (1.0 + std::tanh(u)));
    }
}

template <class T>
inline void ref_gelu_backward(T* din, const float* in, const float* dout, int64_t n) {
    const double k = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; i++) {
        const double x = in[i], u = k * (x + 0.044715 * x * x * x), th = std::tanh(u);
        const double dgelu = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
        din[i] = (T)(dout[i] * dgelu);
    }
}
