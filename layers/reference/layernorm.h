// reference/layernorm.h — the plain math of layers/layernorm.h: LayerNorm over the C channels of each of
// N rows, GPT-2 flavour (eps 1e-5), forward and backward as in llm.c's train_gpt2.c.
//
//   forward:  mean = Σx / C,   var = Σ(x − mean)² / C,   rstd = 1 / sqrt(var + 1e-5)
//             n = (x − mean) · rstd,   out = n · weight + bias
//   backward: g = dout · weight (the gradient reaching n)
//             din     += rstd · (g − mean(g) − n · mean(g · n))
//             dweight += Σ_rows dout · n,    dbias += Σ_rows dout
//
// Two passes per row in double (no one-pass Σx² − mean², which loses the digits of rows with a large
// offset); T is the storage of out, mean, rstd and the gradients (float like the op, or double for a test's
// oracle). Host only: the tests check the fast CPU path and the CUDA kernels against these functions.
#pragma once
#include <cmath>

template <class T>
inline void ref_layernorm_forward(T* out, T* mean, T* rstd, const float* x, const float* weight, const float* bias,
                                  int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* xr = x + (long long)r * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        const double s = 1.0 / std::sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) out[(long long)r * C + c] = (T)((xr[c] - m) * s * weight[c] + bias[c]);
        if (mean) mean[r] = (T)m;
        if (rstd) rstd[r] = (T)s;
    }
}

// din, dweight, dbias accumulate (+=); mean and rstd are the forward's.
template <class T>
inline void ref_layernorm_backward(T* din, T* dweight, T* dbias, const float* dout, const float* x,
                                   const float* weight, const T* mean, const T* rstd, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* xr = x + (long long)r * C;
        const float* dr = dout + (long long)r * C;
        const double m = mean[r], s = rstd[r];
        double mean_g = 0, mean_gn = 0;  // mean(g), mean(g · n) over the row
        for (int c = 0; c < C; c++) {
            const double n = (xr[c] - m) * s, g = (double)dr[c] * weight[c];
            mean_g += g / C;
            mean_gn += g * n / C;
        }
        for (int c = 0; c < C; c++) {
            const double n = (xr[c] - m) * s, g = (double)dr[c] * weight[c];
            din[(long long)r * C + c] = (T)(din[(long long)r * C + c] + s * (g - mean_g - n * mean_gn));
            dweight[c] = (T)(dweight[c] + dr[c] * n);
            dbias[c] = (T)(dbias[c] + dr[c]);
        }
    }
}
