// reference/linear.h — the plain math of layers/linear.h: y = x Wᵀ + b and its backward, as loops.
//
//   forward:  out[n, o] = b[o] + Σ_i in[n, i] · W[o, i]          W stored (out, in), as llm.c and PyTorch
//   backward: din[n, i] (+)= Σ_o dout[n, o] · W[o, i]            (overwritten, or accumulated when asked)
//             dW[o, i]   += Σ_n dout[n, o] · in[n, i]
//             db[o]      += Σ_n dout[n, o]
//
// Sums in double; T is the outputs' storage (float like the op, or double for a test's oracle). A null
// pointer skips that term (no bias; a gradient not wanted), as an empty Tensor does in the op. Host only:
// the tests check the fast CPU path and the CUDA kernels against these functions.
#pragma once

template <class T>
inline void ref_linear_forward(T* out, const float* in, const float* W, const float* bias, int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < IC; i++) s += (double)in[n * IC + i] * W[o * IC + i];
            out[n * OC + o] = (T)s;
        }
}

// db[o] += Σ_n dout[n, o]: the bias gradient (also bias_backward of linear.h on its own).
template <class T>
inline void ref_bias_backward(T* db, const float* dout, int N, int OC) {
    for (int o = 0; o < OC; o++) {
        double s = db[o];
        for (int n = 0; n < N; n++) s += dout[(long long)n * OC + o];
        db[o] = (T)s;
    }
}

template <class T>
inline void ref_linear_backward(T* din, T* dW, T* db, const float* dout, const float* in, const float* W, int N,
                                int IC, int OC, bool accumulate_din = false) {
    if (din)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < IC; i++) {
                double s = accumulate_din ? (double)din[n * IC + i] : 0.0;
                for (int o = 0; o < OC; o++) s += (double)dout[n * OC + o] * W[o * IC + i];
                din[n * IC + i] = (T)s;
            }
    if (dW)
        for (int o = 0; o < OC; o++)
            for (int i = 0; i < IC; i++) {
                double s = dW[o * IC + i];
                for (int n = 0; n < N; n++) s += (double)dout[n * OC + o] * in[n * IC + i];
                dW[o * IC + i] = (T)s;
            }
    if (db) ref_bias_backward(db, dout, N, OC);
}
