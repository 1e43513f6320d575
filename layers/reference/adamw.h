// reference/adamw.h — the plain math of layers/adamw.h: one AdamW step (llm.c's update rule, decoupled
// weight decay as Loshchilov & Hutter), and the sum of squares the gradient-norm clipping needs.
//
//   g      = grad · grad_scale                               (grad_scale: the clipping factor)
//   m      = β1 m + (1 − β1) g,       v = β2 v + (1 − β2) g²
//   m̂      = m / (1 − β1^t),          v̂ = v / (1 − β2^t)     (bias corrections, t = step from 1)
//   param −= lr · ( m̂ / (sqrt(v̂) + eps) + weight_decay · param )
//   Σ x²   over a tensor, in double
//   acc   += x, element by element (add_inplace: one float addition each, so the fast paths must match bitwise)
//
// In double; T is the storage of param, m and v (float like the op's fp32 master weights and moments, or
// double for a test's oracle across steps). Host only: the tests check the fast CPU path and the CUDA
// kernels against these functions.
#pragma once
#include <cmath>
#include <cstdint>

template <class T>
inline void ref_adamw_step(T* param, const float* grad, T* m, T* v, int64_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, int t, float grad_scale) {
    const double b1 = beta1, b2 = beta2;
    for (int64_t i = 0; i < n; i++) {
        const double g = (double)grad[i] * grad_scale;
        const double mi = b1 * m[i] + (1 - b1) * g, vi = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = mi / (1 - std::pow(b1, t)), vhat = vi / (1 - std::pow(b2, t));
        param[i] = (T)(param[i] - lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * (double)param[i]));
        m[i] = (T)mi;
        v[i] = (T)vi;
    }
}

inline double ref_sum_of_squares(const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

inline void ref_add(float* acc, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}
