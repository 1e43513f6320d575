// reference/matmul.h — the plain math of layers/matmul.h: one GEMM as a triple loop.
//
//   C[M×N] = alpha · op(A)[M×K] · op(B)[K×N] + beta · C,    op(X) = Xᵀ when trans is set
//
// Row-major, as the fast path: lda, ldb, ldc are the row strides of A, B and C as stored; batch matrices
// sA, sB, sC elements apart. When beta is 0, C is not read (BLAS semantics: it may hold NaN).
// Sums in double; T is C's storage (float like the op, or double for a test's oracle). Host only: nothing in
// the trainer calls this, the tests check the fast CPU path and the cuBLAS calls against it.
#pragma once
#include <cstdint>

template <class T>
inline void ref_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float beta, T* C, int64_t ldc, int batch = 1, int64_t sA = 0, int64_t sB = 0,
                     int64_t sC = 0) {
    for (int bt = 0; bt < batch; bt++) {
        const float* a = A + bt * sA;
        const float* b = B + bt * sB;
        T* c = C + bt * sC;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;  // Σ_k op(A)[i, k] · op(B)[k, j]
                for (int k = 0; k < K; k++) {
                    double aik = ta ? a[k * lda + i] : a[i * lda + k];
                    double bkj = tb ? b[j * ldb + k] : b[k * ldb + j];
                    s += aik * bkj;
                }
                T& cij = c[i * ldc + j];
                cij = (T)(alpha * s + (beta != 0.f ? beta * (double)cij : 0.0));
            }
    }
}
