// reference/cross_entropy.h — the plain math of layers/cross_entropy.h: softmax cross-entropy per row over
// the V real columns of a padded [N, Vp] logits matrix (the whole vocabulary, as at tp = 1; the op computes
// the same loss from per-rank pieces: the max of the maxima, the rescaled sums, the owned target logits).
//
//   m      = max_{v < V} z_v                                 (for stability)
//   loss   = log Σ_{v < V} e^{z_v − m} + m − z_t             t = the row's target
//   dz_v   = scale · (e^{z_v − m} / Σ − [v == t])   for v < V,   dz_v = 0 for the padding V <= v < Vp
//
// The padded columns are ignored, however large. T is the storage AND the arithmetic: T = double is the
// tests' oracle; T = float is the earlier three-pass float computation (max pass, a sum in column order,
// then the gradient with a division per element), against which the test also holds the two-pass op.
// Host only: the tests check the fast CPU path and the CUDA kernels against this function.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

template <class T>
inline void ref_cross_entropy(T* losses, T* dlogits, const float* logits, const int32_t* targets, int N, int Vp, int V,
                              float scale) {
    for (int i = 0; i < N; i++) {
        const float* z = logits + (int64_t)i * Vp;
        T m = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) m = std::max(m, (T)z[v]);
        for (int v = 0; v < V; v++) s += std::exp((T)z[v] - m);
        losses[i] = std::log(s) + m - (T)z[targets[i]];
        if (!dlogits) continue;
        for (int v = 0; v < Vp; v++)
            dlogits[(int64_t)i * Vp + v] =
                v < V ? (T)scale * (std::exp((T)z[v] - m) / s - (v == targets[i] ? (T)1 : (T)0)) : (T)0;
    }
}
