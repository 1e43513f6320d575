// reference/dropout.h — the plain math of layers/dropout.h: hidden dropout fused with the row-parallel
// bias and the residual add, and its backward, element by element.
//
//   keep[i] = dropout_keep(seed, stream, g)   g = ((s_offset + s) · B_total + (b_offset + b)) · C + c, the
//             element's index in the global [S, B, C] tensor (philox.h), for element (s, b, c) of this
//             rank's block [S_loc, B_loc, C] (row s · B_loc + b): every TP, SP or DP layout draws the bits of
//             a single-rank run; p = 0 keeps everything
//   out[i]  = resid[i] + keep[i] · (x[i] + bias[c]) / (1 − p)       mask[i] = keep[i] (one byte)
//   dx[i]   = dout[i] · mask[i] / (1 − p)
//
// In fp32 like the op (a product and a sum per element: nothing to accumulate). A null bias or resid is
// the op's empty Tensor. Host only: the tests check the fast CPU path and the CUDA kernels against these
// functions (attention's dropout on the probabilities is in reference/attention.h).
#pragma once
#include <cstdint>
#include "layers/philox.h"

inline void ref_bias_dropout_residual_forward(float* out, uint8_t* mask, const float* x, const float* bias,
                                              const float* resid, float p, uint64_t seed, uint32_t stream, int S_loc,
                                              int B_loc, int C, int64_t s_offset, int64_t b_offset, int64_t B_total) {
    const uint32_t thr = dropout_threshold(p);
    const float scale = 1.0f / (1.0f - p);
    for (int s = 0; s < S_loc; s++)
        for (int b = 0; b < B_loc; b++)
            for (int c = 0; c < C; c++) {
                const int64_t i = ((int64_t)s * B_loc + b) * C + c;
                const uint64_t g = ((uint64_t)(s_offset + s) * B_total + (b_offset + b)) * C + c;
                mask[i] = dropout_keep(seed, stream, g, thr) ? 1 : 0;  // threshold 0 (p = 0) keeps all
                const float h = (x[i] + (bias ? bias[c] : 0.f)) * scale;
                out[i] = (resid ? resid[i] : 0.f) + (mask[i] ? h : 0.f);
            }
}

inline void ref_dropout_backward(float* dx, const float* dout, const uint8_t* mask, float p, int64_t n) {
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; i++) dx[i] = mask[i] ? dout[i] * scale : 0.f;
}
