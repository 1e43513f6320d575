// reference/flash_attention.h — the plain math of layers/flash_attention.h: the same function as
// reference/attention.h, computed the way flash attention keeps it: no s×s tensor survives a query; the
// forward keeps one log-sum-exp per query and the backward rebuilds the probabilities from it.
//
//   x[q, k] = Q_q · K_k / sqrt(HD)  (k <= q),    lse_q = log Σ_{k <= q} e^{x[q, k]}
//   P[q, k] = e^{x[q, k] − lse_q},               z[q, k] the keep bit of reference/attention.h
//   out_q   = Σ_{k <= q} P[q, k] z[q, k] / (1 − p) · V_k
// backward (FlashAttention-2, Dao 2023), with dout = dO:
//   D_q     = Σ_c dO_q[c] · out_q[c]           (equals Σ_k dP[q, k] P[q, k] of the softmax Jacobian)
//   dP[q,k] = dO_q · V_k · z[q, k] / (1 − p),   dV_k += P[q, k] z[q, k] / (1 − p) · dO_q
//   dx[q,k] = P[q, k] (dP[q, k] − D_q),        dQ_q += dx K_k / sqrt(HD),   dK_k += dx Q_q / sqrt(HD)
//
// Layouts as flash_attention.h: qkv [S·B, 3·NH·HD], out / dout [S·B, NH·HD], lse [B, NH, S]. Sums in
// double (one query's scores at a time); T is the storage of out, lse and dqkv (float like the op, or
// double for a test's oracle). Host only: the tests check the fast CPU path and the CUDA kernels against
// these functions (and against reference/attention.h: the two are one function).
#pragma once
#include <cmath>
#include <vector>
#include "layers/attention.h"
#include "layers/philox.h"

template <class T>
inline void ref_flash_attention_forward(T* out, T* lse, const float* qkv, const AttnShape& sh, float p, uint64_t seed,
                                        uint32_t stream) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD, C = NH * HD;
    const double scale = 1.0 / std::sqrt((double)HD), inv_keep = 1.0 / (1.0 - p);
    const uint32_t thr = dropout_threshold(p);
    std::vector<double> x(S), o(HD);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++)
            for (int q = 0; q < S; q++) {
                const float* Q = qkv + ((size_t)q * B + b) * W + n * HD;
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k <= q; k++) {
                    const float* K = qkv + ((size_t)k * B + b) * W + C + n * HD;
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += (double)Q[d] * K[d];
                    x[k] = s * scale;
                    mx = std::max(mx, x[k]);
                }
                for (int k = 0; k <= q; k++) sum += std::exp(x[k] - mx);
                const double l = mx + std::log(sum);
                for (int d = 0; d < HD; d++) o[d] = 0;
                for (int k = 0; k <= q; k++) {
                    const uint64_t g = attn_dropout_index(sh.b_offset + b, sh.head_offset + n, sh.NH_total, S, q, k);
                    if (!dropout_keep(seed, stream, g, thr)) continue;
                    const double pd = std::exp(x[k] - l) * inv_keep;
                    for (int d = 0; d < HD; d++) o[d] += pd * qkv[((size_t)k * B + b) * W + 2 * C + n * HD + d];
                }
                for (int d = 0; d < HD; d++) out[((size_t)q * B + b) * C + n * HD + d] = (T)o[d];
                lse[((size_t)b * NH + n) * S + q] = (T)l;
            }
}

// dqkv written (not accumulated), from dout and the forward's out and lse.
template <class T>
inline void ref_flash_attention_backward(T* dqkv, const float* dout, const T* out, const T* lse, const float* qkv,
                                         const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD, C = NH * HD;
    const double scale = 1.0 / std::sqrt((double)HD), inv_keep = 1.0 / (1.0 - p);
    const uint32_t thr = dropout_threshold(p);
    auto at = [&](int s, int b, int part, int n, int d) { return ((size_t)s * B + b) * W + part * C + n * HD + d; };
    std::vector<double> acc((size_t)S * B * W, 0.0);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++)
            for (int q = 0; q < S; q++) {
                const size_t row = ((size_t)q * B + b) * C + n * HD;
                double D = 0;
                for (int d = 0; d < HD; d++) D += (double)dout[row + d] * out[row + d];
                for (int k = 0; k <= q; k++) {
                    double s = 0, dPd = 0;
                    for (int d = 0; d < HD; d++) {
                        s += (double)qkv[at(q, b, 0, n, d)] * qkv[at(k, b, 1, n, d)];
                        dPd += (double)dout[row + d] * qkv[at(k, b, 2, n, d)];
                    }
                    const uint64_t g = attn_dropout_index(sh.b_offset + b, sh.head_offset + n, sh.NH_total, S, q, k);
                    const double z = dropout_keep(seed, stream, g, thr) ? inv_keep : 0.0;
                    const double P = std::exp(s * scale - (double)lse[((size_t)b * NH + n) * S + q]);
                    const double dx = P * (dPd * z - D) * scale;
                    for (int d = 0; d < HD; d++) {
                        acc[at(k, b, 2, n, d)] += P * z * dout[row + d];
                        acc[at(q, b, 0, n, d)] += dx * qkv[at(k, b, 1, n, d)];
                        acc[at(k, b, 1, n, d)] += dx * qkv[at(q, b, 0, n, d)];
                    }
                }
            }
    for (size_t i = 0; i < acc.size(); i++) dqkv[i] = (T)acc[i];
}
