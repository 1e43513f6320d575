// attention_ref.h — core attention written out in double, for the tests of both attention paths
// (test_attention.cu: the unfused one, test_flash_attention.cu: the tiled one): probabilities, masks from
// dropout_keep at the documented global index, the output, the log-sum-exp per query, and the backward.
#pragma once
#include <cmath>
#include <vector>
#include "layers/attention.h"
#include "layers/philox.h"

struct AttnRef {
    std::vector<double> probs, probs_drop, out, dqkv;
    std::vector<double> lse;  // log Σ_k e^{x_k} per (b, n, q): what flash attention keeps [B, NH, S]
    std::vector<uint8_t> mask;
};

// Straightforward double-precision attention for a [S·B, 3·NH·HD] qkv block with global coordinates.
inline AttnRef attention_ref(const std::vector<float>& qkv, const std::vector<float>& dout, const AttnShape& sh,
                             float p, uint64_t seed, uint32_t stream) {
    const int S = sh.S, B = sh.B, NH = sh.NH, HD = sh.HD, W = 3 * NH * HD;
    auto Q = [&](int s, int b, int n, int d) { return (double)qkv[(s * B + b) * W + n * HD + d]; };
    auto K = [&](int s, int b, int n, int d) { return (double)qkv[(s * B + b) * W + NH * HD + n * HD + d]; };
    auto V = [&](int s, int b, int n, int d) { return (double)qkv[(s * B + b) * W + 2 * NH * HD + n * HD + d]; };
    AttnRef r;
    size_t SS = (size_t)S * S;
    r.probs.assign(B * NH * SS, 0);
    r.probs_drop.assign(B * NH * SS, 0);
    r.mask.assign(B * NH * SS, 0);
    r.out.assign((size_t)S * B * NH * HD, 0);
    r.dqkv.assign(qkv.size(), 0);
    r.lse.assign((size_t)B * NH * S, 0);
    const double scale = 1.0 / std::sqrt((double)HD), inv_keep = 1.0 / (1.0 - p);
    const uint32_t thr = dropout_threshold(p);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < NH; n++) {
            double* P = &r.probs[(b * NH + n) * SS];
            double* PD = &r.probs_drop[(b * NH + n) * SS];
            uint8_t* Mk = &r.mask[(b * NH + n) * SS];
            for (int q = 0; q < S; q++) {
                std::vector<double> sc(q + 1);
                double m = -1e300, sum = 0;
                for (int k = 0; k <= q; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += Q(q, b, n, d) * K(k, b, n, d);
                    sc[k] = s * scale;
                    m = std::max(m, sc[k]);
                }
                for (int k = 0; k <= q; k++) sum += std::exp(sc[k] - m);
                r.lse[(size_t)(b * NH + n) * S + q] = m + std::log(sum);
                for (int k = 0; k < S; k++) {
                    uint64_t gi = (((uint64_t)(sh.b_offset + b) * sh.NH_total + (sh.head_offset + n)) * S + q) * S + k;
                    Mk[q * S + k] = k <= q && dropout_keep(seed, stream, gi, thr) ? 1 : 0;  // causal keys only
                    P[q * S + k] = k <= q ? std::exp(sc[k] - m) / sum : 0.0;
                    PD[q * S + k] = Mk[q * S + k] ? P[q * S + k] * inv_keep : 0.0;
                }
            }
            // out = PD · V ; backward
            std::vector<double> dPD(SS, 0), dS(SS, 0);
            for (int q = 0; q < S; q++)
                for (int d = 0; d < HD; d++) {
                    double s = 0;
                    for (int k = 0; k < S; k++) s += PD[q * S + k] * V(k, b, n, d);
                    r.out[(q * B + b) * NH * HD + n * HD + d] = s;
                }
            if (dout.empty()) continue;
            auto dO = [&](int s, int d) { return (double)dout[(s * B + b) * NH * HD + n * HD + d]; };
            for (int q = 0; q < S; q++)
                for (int k = 0; k < S; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += dO(q, d) * V(k, b, n, d);
                    dPD[q * S + k] = s;
                }
            for (int q = 0; q < S; q++) {
                double dotp = 0;
                for (int k = 0; k <= q; k++) dotp += dPD[q * S + k] * Mk[q * S + k] * inv_keep * P[q * S + k];
                for (int k = 0; k <= q; k++)
                    dS[q * S + k] = P[q * S + k] * (dPD[q * S + k] * Mk[q * S + k] * inv_keep - dotp) * scale;
            }
            for (int s = 0; s < S; s++)
                for (int d = 0; d < HD; d++) {
                    double dq = 0, dk = 0, dv = 0;
                    for (int t = 0; t < S; t++) {
                        dq += dS[s * S + t] * K(t, b, n, d);
                        dk += dS[t * S + s] * Q(t, b, n, d);
                        dv += PD[t * S + s] * dO(t, d);
                    }
                    size_t row = (size_t)(s * B + b) * W;
                    r.dqkv[row + n * HD + d] = dq;
                    r.dqkv[row + NH * HD + n * HD + d] = dk;
                    r.dqkv[row + 2 * NH * HD + n * HD + d] = dv;
                }
        }
    return r;
}
