// cublas_test.cc — the emulated cuBLAS / cuBLASLt (cublas.cc) against a plain triple loop in double, for
// every call form this project uses (layers/matmul.cu, layers/linear.cu):
//   - cublasGemmEx, all four transpose pairs, leading dimensions larger than the rows (views), alpha/beta
//     (beta = 0 must not read C: C starts as NaN), k = 0 (C = beta·C);
//   - cublasGemmStridedBatchedEx with per-batch strides (a stride of 0 for a broadcast operand);
//   - cublasGemmBatchedEx with device pointer arrays written on the stream just before the call;
//   - cublasLtMatmul with TRANSA = T, TRANSB = N and the BIAS epilogue, as linear.cu plans it;
//   - each in fp32 → fp32, bf16 → bf16 and bf16 → fp32;
//   - the refusals: lda/ldb/ldc below the rows, null operands, fp32 in with bf16 out, a TF32 compute type,
//     an unsupported epilogue (the heuristic says NOT_SUPPORTED and returns no algorithm).
// Usage: cublas_test            the checks above (exit 0 when every one passes)
//        cublas_test outside    a GEMM on a host pointer: the emulator must stop naming cublasGemmEx
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"

static int g_failures = 0, g_checks = 0;

#define CUDA_OK(call)                                                                                         \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            std::fprintf(stderr, "CUDA error in %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            std::exit(1);                                                                                     \
        }                                                                                                     \
    } while (0)
#define CUBLAS_OK(call)                                                                                       \
    do {                                                                                                      \
        cublasStatus_t s_ = (call);                                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            std::fprintf(stderr, "cuBLAS error in %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cublasGetStatusString(s_)); \
            std::exit(1);                                                                                     \
        }                                                                                                     \
    } while (0)

static void expect(bool ok, const std::string& what) {
    g_checks++;
    if (!ok) {
        g_failures++;
        std::printf("FAIL: %s\n", what.c_str());
    }
}
static void expect_status(cublasStatus_t got, cublasStatus_t want, const std::string& what) {
    expect(got == want, what + ": got " + cublasGetStatusString(got) + ", want " + cublasGetStatusString(want));
}

// ---- host matrices of either dtype ----------------------------------------------------------------------
static float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static uint16_t bf16_bits(float f) {  // round to nearest even (test inputs are finite)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
struct HostMat {  // n elements of dtype t, as bytes, with a float view for the reference
    cudaDataType_t t;
    std::vector<unsigned char> bytes;
    size_t esize() const { return t == CUDA_R_32F ? 4 : 2; }
    size_t n() const { return bytes.size() / esize(); }
    float get(size_t i) const {
        if (t == CUDA_R_32F) {
            float f;
            std::memcpy(&f, &bytes[i * 4], 4);
            return f;
        }
        uint16_t h;
        std::memcpy(&h, &bytes[i * 2], 2);
        return bf16_value(h);
    }
    void set(size_t i, float v) {
        if (t == CUDA_R_32F) {
            std::memcpy(&bytes[i * 4], &v, 4);
        } else {
            uint16_t h = bf16_bits(v);
            std::memcpy(&bytes[i * 2], &h, 2);
        }
    }
};
static HostMat random_mat(cudaDataType_t t, size_t n, std::mt19937& rng) {
    HostMat m{t, std::vector<unsigned char>(n * (t == CUDA_R_32F ? 4 : 2))};
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t i = 0; i < n; i++) m.set(i, u(rng));
    return m;
}
static HostMat nan_mat(cudaDataType_t t, size_t n) {
    HostMat m{t, std::vector<unsigned char>(n * (t == CUDA_R_32F ? 4 : 2))};
    for (size_t i = 0; i < n; i++) m.set(i, NAN);
    if (t == CUDA_R_16BF)
        for (size_t i = 0; i < n; i++) m.bytes[i * 2] = 0xc0, m.bytes[i * 2 + 1] = 0x7f;
    return m;
}
static void* upload(const HostMat& m) {
    void* d = nullptr;
    CUDA_OK(cudaMalloc(&d, m.bytes.size()));
    CUDA_OK(cudaMemcpy(d, m.bytes.data(), m.bytes.size(), cudaMemcpyHostToDevice));
    return d;
}
static HostMat download(const void* d, cudaDataType_t t, size_t n) {
    HostMat m{t, std::vector<unsigned char>(n * (t == CUDA_R_32F ? 4 : 2))};
    CUDA_OK(cudaMemcpy(m.bytes.data(), d, m.bytes.size(), cudaMemcpyDeviceToHost));
    return m;
}

// The reference, column-major as cuBLAS documents it: D[i + j·ldc] = alpha·Σ_p op(A)(i,p)·op(B)(p,j) + beta·C
// (+ bias[i]), in double; op(A)(i,p) = A[i + p·lda] (N) or A[p + i·lda] (T).
static double ref_elem(bool ta, bool tb, int i, int j, int k, double alpha, const HostMat& A, size_t a0, int lda,
                       const HostMat& B, size_t b0, int ldb) {
    double s = 0;
    for (int p = 0; p < k; p++) {
        const double a = A.get(a0 + (ta ? (size_t)p + (size_t)i * lda : (size_t)i + (size_t)p * lda));
        const double b = B.get(b0 + (tb ? (size_t)j + (size_t)p * ldb : (size_t)p + (size_t)j * ldb));
        s += a * b;
    }
    return alpha * s;
}
// Within fp32 accumulation error (k terms of magnitude ≤ 1), plus one rounding of a bf16 output.
static bool close_enough(double got, double want, int k, cudaDataType_t out) {
    const double tol = 1e-5 * (k + 1) + (out == CUDA_R_16BF ? std::fabs(want) / 128.0 : 1e-6 * std::fabs(want));
    return std::fabs(got - want) <= tol;  // false for NaN
}

// Compare one m×n result (at c0, ld ldc) against the reference; the elements between the rows (ld padding)
// must be untouched.
static void check_result(const std::string& what, bool ta, bool tb, int m, int n, int k, float alpha, float beta,
                         const HostMat& A, size_t a0, int lda, const HostMat& B, size_t b0, int ldb, const HostMat& C0,
                         const HostMat& C, size_t c0, int ldc, const HostMat* bias) {
    int bad = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) {
            const size_t ci = c0 + (size_t)i + (size_t)j * ldc;
            if (ci >= C.n()) continue;
            const double got = C.get(ci);
            if (i >= m) {  // padding: must be bitwise what was there
                if (std::memcmp(&C.bytes[ci * C.esize()], &C0.bytes[ci * C.esize()], C.esize()) != 0) bad++;
                continue;
            }
            double want = ref_elem(ta, tb, i, j, k, alpha, A, a0, lda, B, b0, ldb);
            if (beta != 0.f) want += (double)beta * C0.get(ci);
            if (bias) want += bias->get((size_t)i);
            if (!close_enough(got, want, k, C.t)) {
                if (bad < 3)
                    std::printf("  %s: C(%d,%d) = %.8g, reference %.8g\n", what.c_str(), i, j, got, want);
                bad++;
            }
        }
    expect(bad == 0, what + " (" + std::to_string(bad) + " wrong elements)");
}

static const char* tname(cudaDataType_t t) { return t == CUDA_R_32F ? "f32" : "bf16"; }
struct Types {
    cudaDataType_t ab, c;
};
static const Types kTypes[] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};

// ---- cublasGemmEx -----------------------------------------------------------------------------------------
static void test_gemm_ex(cublasHandle_t h, cudaStream_t s, std::mt19937& rng) {
    const int m = 13, n = 7, k = 19;
    for (Types ty : kTypes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int pad = 0; pad < 2; pad++)
                    for (float beta : {0.f, 1.f, 0.5f}) {
                        const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                        const int lda = ar + 3 * pad, ldb = br + 5 * pad, ldc = m + 2 * pad;
                        HostMat A = random_mat(ty.ab, (size_t)lda * ac, rng), B = random_mat(ty.ab, (size_t)ldb * bc, rng);
                        HostMat C0 = beta == 0.f ? nan_mat(ty.c, (size_t)ldc * n) : random_mat(ty.c, (size_t)ldc * n, rng);
                        if (beta == 0.f && pad)  // padding of a beta = 0 output: finite, and must stay as it is
                            for (int j = 0; j < n; j++)
                                for (int i = m; i < ldc; i++) C0.set((size_t)i + (size_t)j * ldc, 42.f);
                        void *dA = upload(A), *dB = upload(B), *dC = upload(C0);
                        const float alpha = 1.5f;
                        CUBLAS_OK(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                               &alpha, dA, ty.ab, lda, dB, ty.ab, ldb, &beta, dC, ty.c, ldc,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                        CUDA_OK(cudaStreamSynchronize(s));
                        HostMat C = download(dC, ty.c, C0.n());
                        char what[160];
                        std::snprintf(what, sizeof what, "GemmEx %s->%s op(%c,%c) lda %d ldb %d ldc %d beta %g", tname(ty.ab),
                                      tname(ty.c), ta ? 'T' : 'N', tb ? 'T' : 'N', lda, ldb, ldc, beta);
                        check_result(what, ta, tb, m, n, k, alpha, beta, A, 0, lda, B, 0, ldb, C0, C, 0, ldc, nullptr);
                        CUDA_OK(cudaFree(dA));
                        CUDA_OK(cudaFree(dB));
                        CUDA_OK(cudaFree(dC));
                    }
    // k = 0: C = beta·C, A and B never read (null is allowed).
    HostMat C0 = random_mat(CUDA_R_32F, 4 * 3, rng);
    void* dC = upload(C0);
    const float alpha = 1.f, beta = 2.f;
    CUBLAS_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 0, &alpha, nullptr, CUDA_R_32F, 4, nullptr, CUDA_R_32F, 1,
                           &beta, dC, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUDA_OK(cudaStreamSynchronize(s));
    HostMat C = download(dC, CUDA_R_32F, 12);
    bool ok = true;
    for (size_t i = 0; i < 12; i++) ok = ok && C.get(i) == 2.f * C0.get(i);
    expect(ok, "GemmEx k = 0: C = beta C");
    CUDA_OK(cudaFree(dC));
}

// ---- cublasGemmStridedBatchedEx ---------------------------------------------------------------------------
static void test_strided(cublasHandle_t h, cudaStream_t s, std::mt19937& rng) {
    const int m = 9, n = 6, k = 11, batch = 4;
    for (Types ty : kTypes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int broadcast_b = 0; broadcast_b < 2; broadcast_b++) {
                    const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                    // Strides larger than one matrix (interleaved heads' layout), B shared when broadcast.
                    const int lda = ar + 2, ldb = br + 1, ldc = m + 1;
                    const long long sa = (long long)lda * ac + 5, sb = broadcast_b ? 0 : (long long)ldb * bc + 3,
                                    sc = (long long)ldc * n + 7;
                    HostMat A = random_mat(ty.ab, (size_t)(sa * batch), rng);
                    HostMat B = random_mat(ty.ab, (size_t)(broadcast_b ? (long long)ldb * bc : sb * batch), rng);
                    HostMat C0 = random_mat(ty.c, (size_t)(sc * batch), rng);
                    void *dA = upload(A), *dB = upload(B), *dC = upload(C0);
                    const float alpha = 0.75f, beta = 1.f;
                    CUBLAS_OK(cublasGemmStridedBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m,
                                                         n, k, &alpha, dA, ty.ab, lda, sa, dB, ty.ab, ldb, sb, &beta, dC,
                                                         ty.c, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    CUDA_OK(cudaStreamSynchronize(s));
                    HostMat C = download(dC, ty.c, C0.n());
                    for (int b = 0; b < batch; b++) {
                        char what[160];
                        std::snprintf(what, sizeof what, "StridedBatchedEx %s->%s op(%c,%c) batch %d%s", tname(ty.ab),
                                      tname(ty.c), ta ? 'T' : 'N', tb ? 'T' : 'N', b, broadcast_b ? " (B stride 0)" : "");
                        check_result(what, ta, tb, m, n, k, alpha, beta, A, (size_t)(b * sa), lda, B, (size_t)(b * sb), ldb,
                                     C0, C, (size_t)(b * sc), ldc, nullptr);
                    }
                    CUDA_OK(cudaFree(dA));
                    CUDA_OK(cudaFree(dB));
                    CUDA_OK(cudaFree(dC));
                }
}

// ---- cublasGemmBatchedEx -----------------------------------------------------------------------------------
static void test_batched(cublasHandle_t h, cudaStream_t s, std::mt19937& rng) {
    const int m = 8, n = 5, k = 12, batch = 6;  // matmul.cu's (outer, inner) = (2, 3) grid of matrices
    for (Types ty : kTypes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                const int lda = ar, ldb = br + 4, ldc = m + 3;
                const size_t ma = (size_t)lda * ac, mb = (size_t)ldb * bc, mc = (size_t)ldc * n;
                HostMat A = random_mat(ty.ab, ma * batch, rng), B = random_mat(ty.ab, mb * batch, rng);
                HostMat C0 = nan_mat(ty.c, mc * batch);
                void *dA = upload(A), *dB = upload(B), *dC = upload(C0);
                // Matrix i uses A[perm[i]], B[i], C[batch-1-i]: the arrays really are followed.
                std::vector<const void*> pa(batch), pb(batch);
                std::vector<void*> pc(batch);
                for (int i = 0; i < batch; i++) {
                    pa[i] = static_cast<char*>(dA) + ((i * 5) % batch) * ma * A.esize();
                    pb[i] = static_cast<char*>(dB) + i * mb * B.esize();
                    pc[i] = static_cast<char*>(dC) + (batch - 1 - i) * mc * C0.esize();
                }
                void** dptrs = nullptr;
                CUDA_OK(cudaMalloc((void**)&dptrs, 3 * batch * sizeof(void*)));
                // Written on the stream, just before the GEMM reads them (as matmul.cu's pointer kernel does).
                CUDA_OK(cudaMemcpyAsync(dptrs, pa.data(), batch * sizeof(void*), cudaMemcpyHostToDevice, s));
                CUDA_OK(cudaMemcpyAsync(dptrs + batch, pb.data(), batch * sizeof(void*), cudaMemcpyHostToDevice, s));
                CUDA_OK(cudaMemcpyAsync(dptrs + 2 * batch, pc.data(), batch * sizeof(void*), cudaMemcpyHostToDevice, s));
                const float alpha = 1.f, beta = 0.f;
                CUBLAS_OK(cublasGemmBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                              &alpha, (const void* const*)dptrs, ty.ab, lda,
                                              (const void* const*)(dptrs + batch), ty.ab, ldb, &beta, dptrs + 2 * batch,
                                              ty.c, ldc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                CUDA_OK(cudaStreamSynchronize(s));
                HostMat C = download(dC, ty.c, C0.n());
                for (int i = 0; i < batch; i++) {
                    char what[160];
                    std::snprintf(what, sizeof what, "BatchedEx %s->%s op(%c,%c) matrix %d", tname(ty.ab), tname(ty.c),
                                  ta ? 'T' : 'N', tb ? 'T' : 'N', i);
                    check_result(what, ta, tb, m, n, k, alpha, beta, A, ((i * 5) % batch) * ma, lda, B, i * mb, ldb, C0, C,
                                 (batch - 1 - i) * mc, ldc, nullptr);
                }
                CUDA_OK(cudaFree(dptrs));
                CUDA_OK(cudaFree(dA));
                CUDA_OK(cudaFree(dB));
                CUDA_OK(cudaFree(dC));
            }
}

// ---- cublasLtMatmul with the BIAS epilogue, planned as linear.cu plans it -------------------------------
static void test_lt(cublasLtHandle_t lt, cudaStream_t s, std::mt19937& rng) {
    const int N = 10, IC = 24, OC = 17;  // out[N×OC] = in[N×IC]·Wᵀ + b
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16BF}) {
        cublasLtMatmulDesc_t op;
        CUBLAS_OK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
        cublasLtMatrixLayout_t la, lb, lc;
        CUBLAS_OK(cublasLtMatrixLayoutCreate(&la, t, IC, OC, IC));
        CUBLAS_OK(cublasLtMatrixLayoutCreate(&lb, t, IC, N, IC));
        CUBLAS_OK(cublasLtMatrixLayoutCreate(&lc, t, OC, N, OC));
        cublasLtMatmulPreference_t pref;
        CUBLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = 1 << 20;
        CUBLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        CUBLAS_OK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found));
        expect(found == 1, std::string("Lt heuristic finds the BIAS matmul (") + tname(t) + ")");
        size_t written = 0;
        int32_t id = -1;
        CUBLAS_OK(cublasLtMatmulAlgoConfigGetAttribute(&res.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written));
        expect(written == sizeof id && id >= 0, "Lt algo config ID readable");

        HostMat W = random_mat(t, (size_t)OC * IC, rng), X = random_mat(t, (size_t)N * IC, rng);
        HostMat bias = random_mat(t, OC, rng), Y0 = nan_mat(t, (size_t)N * OC);
        void *dW = upload(W), *dX = upload(X), *db = upload(bias), *dY = upload(Y0), *dws = nullptr;
        CUDA_OK(cudaMalloc(&dws, ws));
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &db, sizeof db));
        const float alpha = 1.f, beta = 0.f;
        CUBLAS_OK(cublasLtMatmul(lt, op, &alpha, dW, la, dX, lb, &beta, dY, lc, dY, lc, &res.algo, dws, ws, s));
        CUDA_OK(cudaStreamSynchronize(s));
        HostMat Y = download(dY, t, Y0.n());
        check_result(std::string("LtMatmul BIAS ") + tname(t), true, false, OC, N, IC, alpha, beta, W, 0, IC, X, 0, IC,
                     Y0, Y, 0, OC, &bias);

        // Refusals of the heuristic: an epilogue the emulator does not run, a layout whose shapes disagree.
        const cublasLtEpilogue_t gelu = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof gelu));
        found = -1;
        expect_status(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found),
                      CUBLAS_STATUS_NOT_SUPPORTED, "Lt heuristic, GELU_AUX_BIAS");
        expect(found == 0, "Lt heuristic, GELU_AUX_BIAS: no algorithm returned");
        expect_status(cublasLtMatmul(lt, op, &alpha, dW, la, dX, lb, &beta, dY, lc, dY, lc, nullptr, dws, ws, s),
                      CUBLAS_STATUS_NOT_SUPPORTED, "LtMatmul, GELU_AUX_BIAS");
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        expect_status(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lc, lc, lc, pref, 1, &res, &found),
                      CUBLAS_STATUS_INVALID_VALUE, "Lt heuristic, B's rows are not op(A)'s columns");
        cublasLtMatrixLayout_t bad;
        CUBLAS_OK(cublasLtMatrixLayoutCreate(&bad, t, IC, N, IC - 1));
        expect_status(cublasLtMatmul(lt, op, &alpha, dW, la, dX, bad, &beta, dY, lc, dY, lc, nullptr, dws, ws, s),
                      CUBLAS_STATUS_INVALID_VALUE, "LtMatmul, ld below the rows");
        const void* none = nullptr;
        CUBLAS_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &none, sizeof none));
        expect_status(cublasLtMatmul(lt, op, &alpha, dW, la, dX, lb, &beta, dY, lc, dY, lc, nullptr, dws, ws, s),
                      CUBLAS_STATUS_INVALID_VALUE, "LtMatmul, BIAS without a bias pointer");
        CUBLAS_OK(cublasLtMatrixLayoutDestroy(bad));
        CUBLAS_OK(cublasLtMatmulPreferenceDestroy(pref));
        CUBLAS_OK(cublasLtMatrixLayoutDestroy(la));
        CUBLAS_OK(cublasLtMatrixLayoutDestroy(lb));
        CUBLAS_OK(cublasLtMatrixLayoutDestroy(lc));
        CUBLAS_OK(cublasLtMatmulDescDestroy(op));
        for (void* p : {dW, dX, db, dY, dws}) CUDA_OK(cudaFree(p));
    }
}

// ---- what cuBLAS refuses --------------------------------------------------------------------------------
static void test_refusals(cublasHandle_t h) {
    float* d = nullptr;
    CUDA_OK(cudaMalloc((void**)&d, 64 * 64 * sizeof(float)));
    const float one = 1.f, zero = 0.f;
    auto gemm = [&](cublasOperation_t ta, int m, int n, int k, const void* A, int lda, int ldb, int ldc,
                    cudaDataType_t at, cudaDataType_t ct, cublasComputeType_t ctype) {
        return cublasGemmEx(h, ta, CUBLAS_OP_N, m, n, k, &one, A, at, lda, d, at, ldb, &zero, d, ct, ldc, ctype,
                            CUBLAS_GEMM_DEFAULT);
    };
    const cublasStatus_t INV = CUBLAS_STATUS_INVALID_VALUE, NS = CUBLAS_STATUS_NOT_SUPPORTED;
    expect_status(gemm(CUBLAS_OP_N, 8, 4, 6, d, 7, 6, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), INV, "lda < m (op N)");
    expect_status(gemm(CUBLAS_OP_T, 8, 4, 6, d, 5, 6, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), INV, "lda < k (op T)");
    expect_status(gemm(CUBLAS_OP_N, 8, 4, 6, d, 8, 5, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), INV, "ldb < k");
    expect_status(gemm(CUBLAS_OP_N, 8, 4, 6, d, 8, 6, 7, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), INV, "ldc < m");
    expect_status(gemm(CUBLAS_OP_N, -1, 4, 6, d, 8, 6, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), INV, "m < 0");
    expect_status(gemm(CUBLAS_OP_N, 8, 4, 6, nullptr, 8, 6, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), INV, "A null");
    expect_status(gemm(CUBLAS_OP_N, 8, 4, 6, d, 8, 6, 8, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F), NS,
                  "f32 operands, bf16 result");
    expect_status(gemm(CUBLAS_OP_N, 8, 4, 6, d, 8, 6, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32), NS,
                  "TF32 compute");
    expect_status(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, d, CUDA_R_32F, 1, d, CUDA_R_32F, 1, &zero,
                               d, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_NOT_INITIALIZED, "null handle");
    expect_status(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 6, &one, d, CUDA_R_32F, 8, 0, d, CUDA_R_32F,
                                             6, 0, &zero, d, CUDA_R_32F, 8, 0, -1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  INV, "batchCount < 0");
    expect_status(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 6, &one, nullptr, CUDA_R_32F, 8, nullptr,
                                      CUDA_R_32F, 6, &zero, nullptr, CUDA_R_32F, 8, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  INV, "null pointer arrays");
    CUDA_OK(cudaFree(d));
}

int main(int argc, char** argv) {
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h;
    CUBLAS_OK(cublasCreate(&h));
    CUBLAS_OK(cublasSetStream(h, s));
    if (argc > 1 && std::string(argv[1]) == "outside") {
        // A host buffer handed to cuBLAS: on a GPU an illegal address; the emulator stops, naming the call.
        std::vector<float> host(64, 1.f);
        float* d = nullptr;
        CUDA_OK(cudaMalloc((void**)&d, 64 * sizeof(float)));
        const float one = 1.f, zero = 0.f;
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, host.data(), CUDA_R_32F, 8, d,
                                         CUDA_R_32F, 8, &zero, d, CUDA_R_32F, 8, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        CUDA_OK(cudaStreamSynchronize(s));
        std::printf("cublas_test outside: not stopped (status %s): the range check is missing\n", cublasGetStatusString(st));
        return 1;
    }
    cublasLtHandle_t lt;
    CUBLAS_OK(cublasLtCreate(&lt));
    std::mt19937 rng(1234);
    test_gemm_ex(h, s, rng);
    test_strided(h, s, rng);
    test_batched(h, s, rng);
    test_lt(lt, s, rng);
    test_refusals(h);
    CUBLAS_OK(cublasLtDestroy(lt));
    CUBLAS_OK(cublasDestroy(h));
    CUDA_OK(cudaStreamDestroy(s));
    std::printf("cublas_test: %d of %d checks passed\n", g_checks - g_failures, g_checks);
    return g_failures == 0 ? 0 : 1;
}
