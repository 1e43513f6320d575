// reference/attention.h — the plain math of layers/attention.h: causal self-attention with dropout on the
// probabilities, unfused, per (batch b, head n) of this rank's block, as loops.
//
//   x[q, k]  = Q_q · K_k / sqrt(HD)                     scores, scale 1/sqrt(HD)
//   P[q, k]  = e^{x[q,k]} / Σ_{k' <= q} e^{x[q,k']}     for k <= q, 0 for k > q (the causal mask)
//   z[q, k]  = dropout_keep(seed, stream, attn_dropout_index(b_glob, h_glob, NH_total, S, q, k))  for k <= q
//   Pd[q, k] = P[q, k] · z[q, k] / (1 − p)              probs_drop
//   out_q    = Σ_k Pd[q, k] V_k
// backward, with dout = dO:
//   dPd[q, k] = dO_q · V_k,   dV_k = Σ_q Pd[q, k] dO_q
//   dP[q, k]  = dPd[q, k] · z[q, k] / (1 − p)
//   dx[q, k]  = P[q, k] (dP[q, k] − Σ_k' dP[q, k'] P[q, k'])          (the softmax Jacobian)
//   dQ_q = Σ_k dx[q, k] K_k / sqrt(HD),   dK_k = Σ_q dx[q, k] Q_q / sqrt(HD)
//
// Layouts as attention.h: qkv [S·B, 3·NH·HD] (row s·B + b; Q | K | V, head n at column n·HD of its block);
// probs, mask, probs_drop [B, NH, S, S], zero above the diagonal; out, dout [S·B, NH·HD]. The keep bits are
// drawn at the element's global coordinates (b_offset + b, head_offset + n), so any parallel layout draws
// the single-rank bits. Sums in double; T is the storage of probs, probs_drop, out and dqkv (float like the
// op, or double for a test's oracle). Host only: the tests check the fast CPU path and the CUDA kernels
// against these functions.
#pragma once
#include <cmath>
#include <vector>
#include "layers/attention.h"
#include "layers/philox.h"

template <class T>
inline void ref_attention_forward(T* probs, uint8_t* mask, T* probs_drop, T* out, const float* qkv,
                                  const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD, C = NH * HD;
    const double scale = 1.0 / std::sqrt((double)HD), inv_keep = 1.0 / (1.0 - p);  // 1/sqrt(HD), 1/(1 − p)
    const uint32_t thr = dropout_threshold(p);
    auto at = [&](int s, int b, int part, int n, int d) { return ((size_t)s * B + b) * W + part * C + n * HD + d; };
    std::vector<double> x(S);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++) {
            const size_t bn = ((size_t)b * NH + n) * S * S;
            for (int q = 0; q < S; q++) {
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k <= q; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += (double)qkv[at(q, b, 0, n, d)] * qkv[at(k, b, 1, n, d)];
                    x[k] = s * scale;
                    mx = std::max(mx, x[k]);
                }
                for (int k = 0; k <= q; k++) sum += std::exp(x[k] - mx);
                for (int k = 0; k < S; k++) {
                    const size_t i = bn + (size_t)q * S + k;
                    const uint64_t g = attn_dropout_index(sh.b_offset + b, sh.head_offset + n, sh.NH_total, S, q, k);
                    mask[i] = k <= q && dropout_keep(seed, stream, g, thr) ? 1 : 0;
                    const double P = k <= q ? std::exp(x[k] - mx) / sum : 0.0;
                    probs[i] = (T)P;
                    probs_drop[i] = (T)(mask[i] ? P * inv_keep : 0.0);
                }
            }
            for (int q = 0; q < S; q++)
                for (int d = 0; d < HD; d++) {
                    double s = 0;
                    for (int k = 0; k <= q; k++)
                        s += (double)probs_drop[bn + (size_t)q * S + k] * qkv[at(k, b, 2, n, d)];
                    out[((size_t)q * B + b) * C + n * HD + d] = (T)s;
                }
        }
}

// dqkv written (not accumulated), from dout and the forward's probs, mask and probs_drop.
template <class T>
inline void ref_attention_backward(T* dqkv, const float* dout, const float* qkv, const T* probs, const uint8_t* mask,
                                   const T* probs_drop, const AttnShape& sh, float p) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD, C = NH * HD;
    const double scale = 1.0 / std::sqrt((double)HD), inv_keep = 1.0 / (1.0 - p);
    auto at = [&](int s, int b, int part, int n, int d) { return ((size_t)s * B + b) * W + part * C + n * HD + d; };
    for (size_t i = 0; i < (size_t)S * B * W; i++) dqkv[i] = 0;
    std::vector<double> dP(S), dQ(HD);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++) {
            const size_t bn = ((size_t)b * NH + n) * S * S;
            std::vector<double> dK((size_t)S * HD, 0.0), dV((size_t)S * HD, 0.0);
            for (int q = 0; q < S; q++) {
                const float* dO = dout + ((size_t)q * B + b) * C + n * HD;
                double dot = 0;  // Σ_k dP[q, k] P[q, k]
                for (int k = 0; k <= q; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += (double)dO[d] * qkv[at(k, b, 2, n, d)];
                    dP[k] = mask[bn + (size_t)q * S + k] ? s * inv_keep : 0.0;
                    dot += dP[k] * (double)probs[bn + (size_t)q * S + k];
                    const double pd = probs_drop[bn + (size_t)q * S + k];
                    for (int d = 0; d < HD; d++) dV[(size_t)k * HD + d] += pd * dO[d];
                }
                for (int d = 0; d < HD; d++) dQ[d] = 0;
                for (int k = 0; k <= q; k++) {
                    const double dx = (double)probs[bn + (size_t)q * S + k] * (dP[k] - dot) * scale;
                    for (int d = 0; d < HD; d++) {
                        dQ[d] += dx * qkv[at(k, b, 1, n, d)];
                        dK[(size_t)k * HD + d] += dx * qkv[at(q, b, 0, n, d)];
                    }
                }
                for (int d = 0; d < HD; d++) dqkv[at(q, b, 0, n, d)] = (T)dQ[d];
            }
            for (int k = 0; k < S; k++)
                for (int d = 0; d < HD; d++) {
                    dqkv[at(k, b, 1, n, d)] = (T)dK[(size_t)k * HD + d];
                    dqkv[at(k, b, 2, n, d)] = (T)dV[(size_t)k * HD + d];
                }
        }
}
